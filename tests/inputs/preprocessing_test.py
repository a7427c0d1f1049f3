"""Per-image preprocessing: seeded training distortions, the evaluation crop against an
independent computation, crop windows and the JPEG completeness check (header sizes and the
pixel cap: serving/image_limits_test; the pipeline around them: pipeline_test)."""

import io
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image

from inception.config import recipe
from inception.inputs import preprocessing

tf1 = tf.compat.v1
SIZE = 32


def picture(height, width, seed=0):
    """uint8 [height, width, 3]: colour ramps across and down, plus noise, so that every crop,
    flip and colour change shows in the pixels."""
    rows, cols = np.mgrid[0:height, 0:width]
    ramps = np.stack([255.0 * cols / width, 255.0 * rows / height,
                      127.0 + 100.0 * np.sin(rows / 3.0 + cols / 5.0)], axis=-1)
    noise = np.random.RandomState(seed).normal(0.0, 12.0, size=ramps.shape)
    return np.clip(ramps + noise, 0, 255).astype(np.uint8)


def encoded(pixels, image_format, **options):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format, **options)
    return buffer.getvalue()


def full_quality_jpeg(pixels):
    """A 4:4:4 JPEG (no chroma subsampling): decoding a window of it gives exactly the pixels
    of decoding it whole; a 4:2:0 one differs at the window's edges by up to 33/255."""
    return encoded(pixels, "JPEG", quality=95, subsampling=0)


def run(build, *feeds):
    """[build(placeholder) evaluated for each feed] in one fresh graph and session."""
    with tf.Graph().as_default():
        value = tf1.placeholder(tf.string, [])
        output = build(value)
        with tf1.Session() as session:
            return [session.run(output, {value: feed}) for feed in feeds]


def train_images(data, seeds, boxes=np.zeros((0, 4), np.float32)):
    """train_image of JPEG bytes `data` with each of `seeds`, in one fresh graph."""
    with tf.Graph().as_default():
        seed = tf1.placeholder(tf.int64, [2])
        image = preprocessing.train_image(tf.constant(data), tf.constant(boxes), SIZE, seed)
        with tf1.Session() as session:
            return [session.run(image, {seed: value}) for value in seeds]


def independent_eval_image(pixels, size):
    """The evaluation image computed without TensorFlow: the central 87.5% (a margin of
    floor(side / 16) on each side, as tf.image.central_crop keeps), then a bilinear resize by
    PIL in floating point (an enlargement: PIL's filter then has tf.image.resize's support of
    one pixel and the same half-pixel centres), scaled to [-1, 1]."""
    height, width = pixels.shape[:2]
    top, left = height // 16, width // 16
    crop = pixels[top:height - top, left:width - left].astype(np.float32) / 255.0
    channels = [np.asarray(Image.fromarray(crop[:, :, c]).resize(
        (size, size), Image.BILINEAR)) for c in range(3)]
    return (np.clip(np.stack(channels, axis=-1), 0.0, 1.0) - 0.5) * 2.0


class TrainImageTest(unittest.TestCase):

    def test_a_seed_fixes_the_image_and_other_seeds_change_it(self):
        data = full_quality_jpeg(picture(60, 80))
        box = np.array([[0.2, 0.1, 0.9, 0.7]], np.float32)
        for boxes in (np.zeros((0, 4), np.float32), box):
            with self.subTest(boxes=len(boxes)):
                first = train_images(data, [[7, 1]], boxes)[0]
                again, *others = train_images(data, [[7, 1], [8, 1], [7, 2], [123, 456]], boxes)
                np.testing.assert_array_equal(again, first)  # another graph, same seed
                for index, other in enumerate(others):
                    self.assertGreater(np.abs(other - first).max(), 0.1, index)

    def test_shape_and_range(self):
        images = train_images(full_quality_jpeg(picture(45, 70, seed=2)),
                              [[seed, 0] for seed in range(8)])
        for image in images:
            self.assertEqual(image.shape, (SIZE, SIZE, 3))
            self.assertEqual(image.dtype, np.float32)
            self.assertGreaterEqual(image.min(), -1.0)
            self.assertLessEqual(image.max(), 1.0)
        self.assertLess(min(image.min() for image in images), -0.5)  # the range is used
        self.assertGreater(max(image.max() for image in images), 0.5)


class EvalImageTest(unittest.TestCase):

    def assert_matches_independent(self, data, pixels, size):
        first, second = run(lambda value: preprocessing.eval_image(value, size), data, data)
        np.testing.assert_array_equal(first, second)
        self.assertEqual(first.shape, (size, size, 3))
        # TensorFlow computes the sampling positions and weights in float32, PIL in double:
        # up to 2.4e-6 apart on these images (20 float32 ulps of 1.0), hence 1e-5; a crop one
        # pixel off moves them by 0.4 or more.
        np.testing.assert_allclose(first, independent_eval_image(pixels, size), atol=1e-5)

    def test_a_png_is_the_central_crop_resized(self):
        for height, width in ((40, 48), (45, 53), (33, 97)):
            with self.subTest(height=height, width=width):
                pixels = picture(height, width, seed=height)
                self.assert_matches_independent(encoded(pixels, "PNG"), pixels, 112)

    def test_a_jpeg_decodes_only_the_central_window_with_the_same_result(self):
        data = full_quality_jpeg(picture(45, 53, seed=5))
        whole = run(lambda value: tf.io.decode_jpeg(value, channels=3,
                                                    dct_method="INTEGER_ACCURATE"), data)[0]
        self.assert_matches_independent(data, whole, 96)


class CropWindowTest(unittest.TestCase):

    def test_windows_stay_inside_any_image_for_every_crop_setting(self):
        rng = np.random.RandomState(4)
        shapes = [(1, 1), (1, 300), (300, 1), (2, 3), (17, 640), (480, 640)]
        crops = [recipe.ORIGINAL_CROP, recipe.MILD_CROP,
                 recipe.CropSettings(min_object_covered=1.0, area_range=(0.9, 1.0))]
        with tf.Graph().as_default():
            shape_in = tf1.placeholder(tf.int32, [3])
            boxes_in = tf1.placeholder(tf.float32, [None, 4])
            seed_in = tf1.placeholder(tf.int64, [2])
            windows = [preprocessing.crop_window(shape_in, boxes_in, seed_in, crop)
                       for crop in crops]
            with tf1.Session() as session:
                for trial in range(60):
                    height, width = shapes[trial % len(shapes)]
                    top, left = rng.uniform(0.0, 0.9, size=2)
                    boxes = ([[top, left, rng.uniform(top, 1.0), rng.uniform(left, 1.0)]]
                             if trial % 3 else np.zeros((0, 4)))
                    feed = {shape_in: [height, width, 3], boxes_in: boxes,
                            seed_in: [trial, 9]}
                    for crop, (y, x, h, w) in zip(crops, session.run(windows, feed)):
                        context = (trial, height, width, crop)
                        self.assertTrue(y >= 0 and x >= 0 and h >= 1 and w >= 1, context)
                        self.assertTrue(y + h <= height and x + w <= width, context)
                    again = session.run(windows, feed)
                    np.testing.assert_array_equal(again, session.run(windows, feed))


class CompleteJpegTest(unittest.TestCase):

    def test_truncated_jpegs_are_incomplete_and_trailing_bytes_are_allowed(self):
        data = full_quality_jpeg(picture(30, 40, seed=9))
        cases = {"whole": (data, True), "62 trailing bytes": (data + b"\0" * 62, True),
                 "63 trailing bytes": (data + b"\0" * 63, False),  # the marker is searched
                 "last byte cut": (data[:-1], False),              # in the last 64 bytes
                 "marker cut": (data[:-2], False), "half": (data[:len(data) // 2], False),
                 "start of image only": (data[:3], False),
                 "a png": (encoded(picture(30, 40), "PNG"), False)}
        results = run(preprocessing.is_complete_jpeg, *(value for value, _ in cases.values()))
        for (name, (_, expected)), result in zip(cases.items(), results):
            self.assertEqual(bool(result), expected, name)


if __name__ == "__main__":
    absltest.main()
