"""The line that ends training stopped by an error that is no user error (driver/startup.py):
out of memory, a file system's error and anything else each say what they are."""

import errno

import tensorflow as tf
from absl.testing import absltest

from inception.driver import startup

# What TensorFlow says when a GPU runs out of memory (its wording in TensorFlow 2.21).
OOM = ("Graph execution error:\n\nOOM when allocating tensor with shape[256,147,147,64] and "
       "type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc\n"
       "\t [[{{node tower_1/InceptionV3/Conv2d_2b_3x3/Conv2D}}]]")


class StoppedLineTest(absltest.TestCase):

    def test_out_of_memory_names_the_device_and_what_to_lower(self):
        line = startup.stopped_line(tf.errors.ResourceExhaustedError(None, None, OOM))
        self.assertStartsWith(line, "training stopped: out of memory on "
                                    "/job:localhost/replica:0/task:0/device:GPU:1 (OOM when")
        self.assertIn("lower --batch_size", line)
        self.assertNotIn("file-system", line)

    def test_a_file_systems_error_names_the_path(self):
        full = tf.errors.ResourceExhaustedError(
            None, None, "/data/run/model.ckpt-5.index.tempstate1; No space left on device")
        denied = OSError(errno.EACCES, "Permission denied", "/data/run/events")
        for error, path in ((full, "/data/run/model.ckpt-5.index"), (denied, "/data/run/events")):
            line = startup.stopped_line(error)
            self.assertStartsWith(line, "training stopped by a file-system error: ")
            self.assertIn(path, line)

    def test_any_other_tensorflow_error_is_itself(self):
        for error in (tf.errors.FailedPreconditionError(
                None, None, "Could not find variable InceptionV3/Conv2d_1a_3x3/weights"),
                      tf.errors.UnimplementedError(None, None, "Conv2D with NHWC on this CPU")):
            line = startup.stopped_line(error)
            self.assertStartsWith(line, f"training stopped by TensorFlow's "
                                        f"{type(error).__name__}: ")
            self.assertIn(error.message, line)
            self.assertNotIn("file-system", line)
            self.assertEndsWith(line, "resume from the last checkpoint.")


if __name__ == "__main__":
    absltest.main()
