"""The cause line of TensorFlow's error messages, as they really come."""

import unittest

from absl.testing import absltest

from common import error_lines

SAVE = ("Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call "
        "last):\n    File \"/x.py\", line 9, in <module>\nNode: 'save/SaveV2'\n"
        "/tmp/d/m-1.data-00000-of-00001.tempstate8802; No space left on device\n"
        "\t [[{{node save/SaveV2}}]]")
STRICT = ("Graph execution error:\n\n2 root error(s) found.\n  (0) INVALID_ARGUMENT: Error in "
          "user-defined function passed to ParallelMapDatasetV2:11 transformation with "
          "iterator: Iterator::Root::Prefetch::MapAndBatch::Filter::ParallelMapV2: assertion "
          "failed: [damaged or non-JPEG image \\\"broken.jpg\\\" in the input (remove it)]\n"
          "\t [[{{node Assert/Assert}}]]\n  (1) INVALID_ARGUMENT: another\n"
          "0 successful operations.\n0 derived errors ignored.")


class RootCauseTest(unittest.TestCase):

    def test_a_failed_save_gives_the_system_error(self):
        self.assertEqual(error_lines.root_cause(SAVE), "No space left on device")

    def test_an_input_assertion_gives_its_message(self):
        self.assertEqual(error_lines.root_cause(STRICT),
                         'damaged or non-JPEG image "broken.jpg" in the input (remove it)')

    def test_a_plain_message_stays(self):
        self.assertEqual(error_lines.root_cause("Read less bytes than requested"),
                         "Read less bytes than requested")
        self.assertEqual(error_lines.root_cause(
            "label 3 of image x is outside [0, 3); the data has more classes"),
            "label 3 of image x is outside [0, 3); the data has more classes")


class CauseOfTest(unittest.TestCase):

    def test_a_remote_tasks_error_gives_its_cause_without_grpcs_lines(self):
        error = RuntimeError("From /job:ps/replica:0/task:0:\nConnection reset by peer.\n"
                             "Additional GRPC error information from remote target "
                             "/job:ps/replica:0/task:0:\n:{\"created\":\"@1\"}")
        self.assertEqual(error_lines.cause_of(error), "Connection reset by peer")

    def test_an_aborted_all_reduce_gives_its_cause_without_where_it_happened(self):
        error = RuntimeError("Graph execution error:\n\nDetected at node 'x'\n"
                             "Node: 'stage_train/all_reduce_7'\n"
                             "Collective ops is aborted by: peer lost\n")
        self.assertEqual(error_lines.cause_of(error), "Collective ops is aborted by: peer lost")

    def test_a_tensorflow_errors_message_and_an_empty_one(self):
        class FakeOpError(Exception):
            message = SAVE
        self.assertEqual(error_lines.cause_of(FakeOpError()), "No space left on device")
        self.assertEqual(error_lines.cause_of(KeyError()), "KeyError")


if __name__ == "__main__":
    absltest.main()
