"""The exported model's preprocessing without TensorFlow (serving/numpy_preprocessing.py)
against the graph's own (inputs/preprocessing.eval_image), on every image format served."""

import io
import subprocess
import sys
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from inception.inputs import preprocessing
from inception.serving import numpy_preprocessing

SIZE = 75


def photo_like(height, width, seed=0):
    """A smooth image with some noise: what photos look like to a resize."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([128 + 100 * np.sin(x / 7.0), 128 + 100 * np.cos(y / 5.0),
                     (x + y) % 256], axis=-1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def encoded(pixels, image_format, **options):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format, **options)
    return buffer.getvalue()


def graph_eval_image(data, size=SIZE):
    return preprocessing.eval_image(tf.constant(data), size).numpy()


class AgainstTheGraphTest(unittest.TestCase):

    def test_lossless_formats_match_to_float_rounding(self):
        pixels = photo_like(97, 131)
        for image_format in ("PNG", "BMP", "GIF"):
            with self.subTest(image_format=image_format):
                data = encoded(pixels, image_format)
                ours = numpy_preprocessing.eval_image(data, SIZE)
                self.assertEqual((ours.shape, ours.dtype), ((SIZE, SIZE, 3), np.float32))
                # The same arithmetic in another order: float32 rounding of values in [-1, 1]
                # (a few ulps of 1.2e-7).
                np.testing.assert_allclose(ours, graph_eval_image(data), atol=1e-5)

    def test_upscaling_and_downscaling_match(self):
        for height, width in ((40, 30), (400, 520)):
            with self.subTest(height=height, width=width):
                data = encoded(photo_like(height, width, seed=1), "PNG")
                np.testing.assert_allclose(numpy_preprocessing.eval_image(data, SIZE),
                                           graph_eval_image(data), atol=1e-5)

    def test_jpeg_differs_only_where_the_graph_decodes_the_window_alone(self):
        data = encoded(photo_like(160, 200, seed=2), "JPEG", quality=90)
        difference = np.abs(numpy_preprocessing.eval_image(data, SIZE) - graph_eval_image(data))
        # The graph decodes only the crop window of a JPEG, which rounds the window's edge
        # pixels of a 4:2:0 JPEG differently (up to 33 of 255 levels there; DESIGN.md); after
        # the resize that is a thin border of small differences, and nothing inside it.
        self.assertLess(float(difference.mean()), 0.01)
        np.testing.assert_allclose(difference[2:-2, 2:-2], 0, atol=1e-5)


class ErrorsTest(unittest.TestCase):

    def test_bytes_that_are_no_image_are_one_line(self):
        with self.assertRaisesRegex(numpy_preprocessing.ImageError,
                                    "^not a readable JPEG, PNG, GIF or BMP image") as raised:
            numpy_preprocessing.eval_image(b"this is not an image", SIZE)
        self.assertNotIn("\n", str(raised.exception))
        tiff = encoded(photo_like(8, 8), "TIFF")
        with self.assertRaisesRegex(numpy_preprocessing.ImageError, r"\(TIFF\)"):
            numpy_preprocessing.eval_image(tiff, SIZE)

    def test_an_image_above_the_pixel_limit_is_refused_before_decoding(self):
        data = encoded(photo_like(60, 50), "PNG")
        with self.assertRaisesRegex(numpy_preprocessing.ImageError,
                                    "^the image is 50 x 60 pixels"):
            numpy_preprocessing.eval_image(data, SIZE, max_pixels=2999)


class WithoutTensorFlowTest(unittest.TestCase):

    def test_it_never_imports_tensorflow(self):
        script = ("import sys\nsys.modules['tensorflow'] = None  # importing it now fails\n"
                  "from inception.serving import numpy_preprocessing\n"
                  "import io, numpy as np\nfrom PIL import Image\n"
                  "buffer = io.BytesIO()\n"
                  "Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(buffer, 'PNG')\n"
                  "print(numpy_preprocessing.eval_image(buffer.getvalue(), 16).shape)\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=False, env={"PYTHONPATH": ":".join(sys.path)})
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertEqual(done.stdout.strip(), "(16, 16, 3)")


if __name__ == "__main__":
    absltest.main()
