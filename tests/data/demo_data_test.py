"""The demo data generator: deterministic, labelled, and not separable by a trivial rule."""

import io
import unittest

import numpy as np
from absl.testing import absltest
from PIL import Image

from data import demo_data


class DemoDataTest(unittest.TestCase):

    def test_generation_is_deterministic_and_labelled(self):
        first = demo_data.make_record("train", 7)
        second = demo_data.make_record("train", 7)
        self.assertEqual(first.encoded_jpeg, second.encoded_jpeg)
        self.assertEqual(first.label, 7 % len(demo_data.CLASS_NAMES) + 1)
        self.assertEqual(first.text, demo_data.CLASS_NAMES[first.label - 1])
        self.assertNotEqual(first.encoded_jpeg, demo_data.make_record("train", 12).encoded_jpeg)
        box = first.boxes[0]
        self.assertTrue(0.0 <= box.xmin < box.xmax <= 1.0 and 0.0 <= box.ymin < box.ymax <= 1.0)

    def test_classes_differ_in_shape_not_in_mean_colour(self):
        """A one-pixel or mean-colour rule cannot separate the classes."""
        means = {}
        for index in range(100):
            record = demo_data.make_record("train", index)
            pixels = np.asarray(Image.open(io.BytesIO(record.encoded_jpeg)), dtype=np.float32)
            means.setdefault(record.label, []).append(pixels.mean())
        spreads = [np.std(values) for values in means.values()]
        centres = [np.mean(values) for values in means.values()]
        self.assertLess(np.std(centres), np.mean(spreads))


if __name__ == "__main__":
    absltest.main()
