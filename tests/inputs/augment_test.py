"""The stronger augmentations: RandAugment (seeded, inside a tf.data map; its ops against PIL
and numpy), random erasing (the rectangle's size and chance) and batch Mixup / CutMix (the
mixed pixels and soft labels against numpy, the Beta draws against their moments)."""

import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image, ImageEnhance, ImageOps

from inception.inputs import augment
from inception.inputs import mixing

tf1 = tf.compat.v1
SIZE = 32
# Values of the 8-bit images the ops compute on are multiples of 1/255, so float32 arithmetic
# on them is exact to well under this; it bounds comparisons that should be exact.
EXACT = 1e-5


def picture(height=SIZE, width=SIZE, seed=0):
    """float32 [height, width, 3] on the 8-bit grid: ramps, a wave and noise, so that every
    op shows in the pixels."""
    rows, cols = np.mgrid[0:height, 0:width]
    ramps = np.stack([200.0 * cols / width + 20, 180.0 * rows / height + 40,
                      127.0 + 90.0 * np.sin(rows / 3.0 + cols / 5.0)], axis=-1)
    noise = np.random.RandomState(seed).normal(0.0, 15.0, size=ramps.shape)
    return np.round(np.clip(ramps + noise, 0, 255)).astype(np.float32) / 255.0


def to_pil(image):
    return Image.fromarray(np.round(image * 255.0).astype(np.uint8))


def from_pil(image):
    return np.asarray(image).astype(np.float32) / 255.0


def per_seed(build, seeds, dtype=tf.int64):
    """[build(seed placeholder) evaluated for each of `seeds`] in one fresh graph and session."""
    with tf.Graph().as_default():
        seed = tf1.placeholder(dtype, [2])
        output = build(seed)
        with tf1.Session() as session:
            return [session.run(output, {seed: value}) for value in seeds]


def ops(image, specs):
    """apply_op(image, OPS.index(name), magnitude, sign) for each (name, magnitude, sign)."""
    with tf.Graph().as_default():
        outputs = [augment.apply_op(tf.constant(image), augment.OPS.index(name), magnitude, sign)
                   for name, magnitude, sign in specs]
        with tf1.Session() as session:
            return session.run(outputs)


class RandAugmentTest(unittest.TestCase):

    def augmented(self, seeds, magnitude=10, num_ops=2, image=None):
        image = picture() if image is None else image
        return per_seed(lambda seed: augment.randaugment(tf.constant(image), num_ops,
                                                         magnitude, seed), seeds)

    def test_a_seed_fixes_the_output_and_other_seeds_change_it(self):
        first = self.augmented([[7, 1]])[0]
        np.testing.assert_array_equal(self.augmented([[7, 1]])[0], first)
        for other in self.augmented([[7, 2], [8, 1], [123, 45]]):
            self.assertGreater(np.abs(other - first).max(), 0.01)

    def test_a_textured_image_changes_and_stays_in_range(self):
        image = picture()
        for magnitude in (10, 30):
            for output in self.augmented([[seed, 3] for seed in range(6)], magnitude):
                with self.subTest(magnitude=magnitude):
                    self.assertEqual(output.shape, image.shape)
                    self.assertEqual(output.dtype, np.float32)
                    self.assertGreater(np.abs(output - image).max(), 0.01)
                    self.assertGreaterEqual(output.min(), 0.0)
                    self.assertLessEqual(output.max(), 1.0)

    def test_runs_in_a_dataset_map_as_it_does_alone(self):
        images = np.stack([picture(seed=index) for index in range(2)])
        seeds = np.array([[index, 9] for index in range(2)], np.int64)
        with tf.Graph().as_default():
            dataset = tf.data.Dataset.from_tensor_slices((images, seeds)).map(
                lambda image, seed: augment.randaugment(image, 2, 10, seed))
            # A one-shot iterator refuses a map that holds state (a variable), so this also
            # shows the map is stateless.
            batch = tf1.data.make_one_shot_iterator(dataset.batch(2)).get_next()
            alone = [augment.randaugment(tf.constant(image), 2, 10, tf.constant(seed))
                     for image, seed in zip(images, seeds)]
            with tf1.Session() as session:
                mapped, alone = session.run([batch, alone])
        for index in range(2):
            np.testing.assert_allclose(mapped[index], alone[index], atol=EXACT)

    def test_takes_int32_seeds_and_zero_ops_changes_nothing(self):
        image = picture()
        output = per_seed(lambda seed: augment.randaugment(tf.constant(image), 0, 10, seed),
                          [[1, 2]], tf.int32)[0]
        np.testing.assert_array_equal(output, image)
        with self.assertRaises(ValueError):
            augment.randaugment(tf.constant(image), 2, 31, tf.constant([1, 2]))
        with self.assertRaises(ValueError):
            augment.randaugment(tf.constant(image), -1, 10, tf.constant([1, 2]))


class OpsTest(unittest.TestCase):
    """Each op against PIL's (ImageOps, ImageEnhance) or a numpy shift of the pixels."""

    def test_histogram_ops_match_pil(self):
        image = picture()
        low_contrast = (np.round((0.3 + 0.4 * image) * 255.0) / 255.0).astype(np.float32)
        equalized, solarized, posterized, one_bit = ops(image, [
            ("equalize", 10, 1), ("solarize", 4, 1), ("posterize", 10, 1),
            ("posterize", 30, 1)])
        stretched = ops(low_contrast, [("auto_contrast", 10, 1)])[0]
        for output in (equalized, solarized, posterized, one_bit):
            self.assertGreater(np.abs(output - image).max(), 0.02)
        pil = to_pil(image)
        np.testing.assert_allclose(equalized, from_pil(ImageOps.equalize(pil)), atol=EXACT)
        # PIL truncates the stretched values to whole levels: up to one level below.
        np.testing.assert_allclose(stretched, from_pil(ImageOps.autocontrast(
            to_pil(low_contrast))), atol=1.0 / 255 + EXACT)
        self.assertAlmostEqual(float(stretched.min()), 0.0, delta=EXACT)
        self.assertAlmostEqual(float(stretched.max()), 1.0, delta=EXACT)
        # Magnitude 4: inverted from 256 * 0.6 = 153.6 of 255 up.
        np.testing.assert_allclose(solarized, from_pil(ImageOps.solarize(pil, 153.6)),
                                   atol=EXACT)
        np.testing.assert_allclose(posterized, from_pil(ImageOps.posterize(pil, 4)), atol=EXACT)
        np.testing.assert_allclose(one_bit, from_pil(ImageOps.posterize(pil, 1)), atol=EXACT)

    def test_enhance_ops_match_pil(self):
        image = picture()
        pil = to_pil(image)
        enhancers = {"color": ImageEnhance.Color, "contrast": ImageEnhance.Contrast,
                     "brightness": ImageEnhance.Brightness,
                     "sharpness": ImageEnhance.Sharpness}
        specs = [(name, 5, sign) for name in enhancers for sign in (1, -1)]
        for (name, _, sign), output in zip(specs, ops(image, specs)):
            with self.subTest(op=name, sign=sign):
                expected = from_pil(enhancers[name](pil).enhance(1.0 + sign * 0.45))
                # PIL rounds its grey (or mean, or smoothed) image to whole levels, then the
                # blend: half a level each, so under 1.5 levels apart.
                np.testing.assert_allclose(output, expected, atol=1.5 / 255)
                self.assertGreater(np.abs(output - image).max(), 0.02)

    def test_rotate_by_a_quarter_turn_at_magnitude_30(self):
        image = picture()
        left, right = ops(image, [("rotate", 30, 1), ("rotate", 30, -1)])
        # cos(pi / 2) in float32 is 4e-8, not 0: the points sampled are that far off the grid.
        np.testing.assert_allclose(left, np.rot90(image, 1), atol=1e-4)
        np.testing.assert_allclose(right, np.rot90(image, -1), atol=1e-4)

    def test_translate_moves_whole_pixels_and_fills_grey(self):
        image = picture()
        right, up, same = ops(image, [("translate_x", 10, 1), ("translate_y", 10, -1),
                                      ("identity", 10, 1)])
        shift = 14  # round(0.45 * 32)
        np.testing.assert_allclose(right[:, shift:], image[:, :-shift], atol=EXACT)
        np.testing.assert_allclose(right[:, :shift], augment.FILL_VALUE, atol=EXACT)
        np.testing.assert_allclose(up[:-shift], image[shift:], atol=EXACT)
        np.testing.assert_allclose(up[-shift:], augment.FILL_VALUE, atol=EXACT)
        np.testing.assert_array_equal(same, image)

    def test_shear_moves_each_line_by_its_distance_from_the_centre(self):
        image = picture(33, 33)
        sheared_x, sheared_y = ops(image, [("shear_x", 10, 1), ("shear_y", 10, 1)])
        # Shear 0.3 about the centre line 16: line 16 stays, line 26 moves by exactly 3.
        np.testing.assert_allclose(sheared_x[16], image[16], atol=EXACT)
        np.testing.assert_allclose(sheared_x[26, :-3], image[26, 3:], atol=EXACT)
        np.testing.assert_allclose(sheared_x[6, 3:], image[6, :-3], atol=EXACT)
        np.testing.assert_allclose(sheared_y[:, 16], image[:, 16], atol=EXACT)
        np.testing.assert_allclose(sheared_y[:-3, 26], image[3:, 26], atol=EXACT)


class RandomErasingTest(unittest.TestCase):
    CONSTANT = 0.3

    def erased(self, probability, seeds, image=None):
        image = np.full([SIZE, SIZE, 3], self.CONSTANT, np.float32) if image is None else image
        return per_seed(lambda seed: augment.random_erasing(tf.constant(image), probability,
                                                            seed), seeds)

    def test_probability_zero_changes_nothing(self):
        image = picture() * 2.0 - 1.0
        for output in self.erased(0.0, [[seed, 1] for seed in range(5)], image):
            np.testing.assert_array_equal(output, image)

    def test_probability_one_erases_one_rectangle_of_2_to_33_percent(self):
        noise = []
        for output in self.erased(1.0, [[seed, 2] for seed in range(12)]):
            changed = np.any(output != self.CONSTANT, axis=-1)
            rows, cols = np.nonzero(changed)
            fraction = changed.sum() / changed.size
            self.assertGreaterEqual(fraction, 0.02)
            self.assertLessEqual(fraction, 0.33)
            box = changed[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
            self.assertTrue(box.all(), "the changed pixels are not one full rectangle")
            noise.append(output[changed].ravel())
        noise = np.concatenate(noise)
        reference = np.clip(np.random.RandomState(0).normal(size=10**6), -1.0, 1.0)
        self.assertGreaterEqual(noise.min(), -1.0)
        self.assertLessEqual(noise.max(), 1.0)
        # Thousands of values: their mean and spread are within 0.05 of the reference's by a
        # margin of over four standard errors.
        self.assertAlmostEqual(noise.mean(), 0.0, delta=0.05)
        self.assertAlmostEqual(noise.std(), reference.std(), delta=0.05)

    def test_probability_half_erases_about_half_and_a_seed_fixes_it(self):
        seeds = [[seed, 3] for seed in range(40)]
        outputs = self.erased(0.5, seeds)
        erased = np.mean([np.any(output != self.CONSTANT) for output in outputs])
        # 40 draws of a fair coin: standard deviation 0.08, so 0.25 is three of them.
        self.assertAlmostEqual(erased, 0.5, delta=0.25)
        for again, first in zip(self.erased(0.5, seeds[:5]), outputs):
            np.testing.assert_array_equal(again, first)


class MixBatchTest(unittest.TestCase):
    LABELS = np.array([0, 1, 2, 3], np.int32)
    CLASSES = 5

    def mixed(self, images, mixup_alpha, cutmix_alpha, seeds):
        return per_seed(lambda seed: mixing.mix_batch(
            tf.constant(images), tf.constant(self.LABELS), self.CLASSES, mixup_alpha,
            cutmix_alpha, seed), seeds)

    def test_mixup_blends_with_the_reversed_batch(self):
        images = np.stack([picture(8, 8, seed) for seed in range(4)])
        for mixed, soft, lam in self.mixed(images, 0.8, 0.0, [[seed, 4] for seed in range(5)]):
            np.testing.assert_allclose(mixed, lam * images + (1 - lam) * images[::-1],
                                       atol=EXACT)
            self.check_soft_labels(soft, lam)
            self.assertTrue(0.0 < lam < 1.0)

    def check_soft_labels(self, soft, lam):
        np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=EXACT)
        rows = np.arange(len(self.LABELS))
        np.testing.assert_allclose(soft[rows, self.LABELS], lam, atol=EXACT)
        np.testing.assert_allclose(soft[rows, self.LABELS[::-1]], 1.0 - lam, atol=EXACT)

    def test_cutmix_takes_one_minus_lam_of_the_pixels_from_the_reversed_batch(self):
        values = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        images = np.ones([4, 16, 16, 3], np.float32) * values[:, None, None, None]
        partial = 0
        for mixed, soft, lam in self.mixed(images, 0.0, 1.0, [[seed, 5] for seed in range(8)]):
            taken = mixed == values[::-1][:, None, None, None]
            kept = mixed == values[:, None, None, None]
            self.assertTrue(np.all(taken | kept))
            fractions = taken.mean(axis=(1, 2, 3))
            np.testing.assert_allclose(fractions, 1.0 - lam, atol=EXACT)
            np.testing.assert_array_equal(taken, taken[::-1])  # one box for the whole batch
            rows, cols = np.nonzero(taken[0, :, :, 0])
            if len(rows):
                self.assertTrue(taken[0, rows.min():rows.max() + 1,
                                      cols.min():cols.max() + 1].all())
            self.check_soft_labels(soft, lam)
            partial += 0.0 < lam < 1.0
        self.assertGreater(partial, 4)

    def test_both_alphas_zero_mix_nothing(self):
        images = np.stack([picture(8, 8, seed) for seed in range(4)])
        mixed, soft, lam = self.mixed(images, 0.0, 0.0, [[1, 1]])[0]
        np.testing.assert_array_equal(mixed, images)
        np.testing.assert_array_equal(soft, np.eye(self.CLASSES)[self.LABELS])
        self.assertEqual(lam, 1.0)

    def test_both_alphas_pick_either_about_equally_and_a_seed_fixes_the_pick(self):
        images = np.stack([picture(8, 8, seed) for seed in range(4)])
        seeds = [[seed, 6] for seed in range(40)]
        outputs = self.mixed(images, 0.8, 1.0, seeds)
        # CutMix's pixels are each exactly one of the two images'; Mixup's almost never are.
        cutmix = [np.all((mixed == images) | (mixed == images[::-1])) for mixed, _, _ in outputs]
        # 40 fair coins: standard deviation 0.08, so 0.25 is three of them.
        self.assertAlmostEqual(np.mean(cutmix), 0.5, delta=0.25)
        for again, first in zip(self.mixed(images, 0.8, 1.0, seeds[:4]), outputs):
            for part, expected in zip(again, first):
                np.testing.assert_array_equal(part, expected)

    def test_mixup_ratio_has_the_beta_distributions_moments(self):
        images = np.zeros([4, 2, 2, 1], np.float32)
        seeds = [[seed, 7] for seed in range(300)]
        for alpha in (1.0, 0.2):
            lams = np.array([lam for _, _, lam in self.mixed(images, alpha, 0.0, seeds)])
            with self.subTest(alpha=alpha):
                # Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)). Over 300 draws the standard
                # error of the mean is at most 0.03 and of the variance under 0.006.
                self.assertAlmostEqual(lams.mean(), 0.5, delta=0.1)
                self.assertAlmostEqual(lams.var(), 1.0 / (4.0 * (2.0 * alpha + 1.0)),
                                       delta=0.025)


if __name__ == "__main__":
    absltest.main()
