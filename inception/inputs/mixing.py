"""Batch Mixup and CutMix: a tower's batch mixed with itself reversed (labels become soft),
drawn from stateless random ops with an explicit seed (int32 or int64 [2]), so a given seed
always mixes the same way."""

import tensorflow as tf

from inception.inputs import augment


def mix_batch(images, labels, num_classes, mixup_alpha, cutmix_alpha, seed):
    """Batch Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019): every example is mixed with
    the batch reversed, all by one ratio lam ~ Beta(alpha, alpha).

    Mixup blends the whole images; CutMix pastes a box of about 1 - lam of the image (random
    centre, clipped to the image), lam then being 1 - the box's actual area fraction. With both
    alphas > 0 the batch gets one of the two, each with chance 0.5; with both 0 nothing is
    mixed (lam = 1).

    Args:
      images: float32 [B, H, W, C], H and W known statically.
      labels: int32 [B], class ids in [0, num_classes).
      num_classes: Python int, the width of the soft labels.
      mixup_alpha: Python float >= 0; 0 turns Mixup off (0.8 as timm is typical).
      cutmix_alpha: Python float >= 0; 0 turns CutMix off (1.0 as timm is typical).
      seed: int32 or int64 [2].

    Returns:
      (mixed images as `images`, soft labels float32 [B, num_classes] (lam on the own class,
      1 - lam on the reversed batch's, no smoothing), lam float32 scalar).
    """
    if mixup_alpha < 0 or cutmix_alpha < 0:
        raise ValueError(f"alphas must be >= 0, not {mixup_alpha!r}, {cutmix_alpha!r}")
    one_hot = tf.one_hot(labels, num_classes, dtype=tf.float32)
    if mixup_alpha == 0 and cutmix_alpha == 0:
        return images, one_hot, tf.constant(1.0)
    seeds = tf.random.experimental.stateless_split(seed, num=4)

    def mixup():
        lam = _beta(mixup_alpha, seeds[1])
        return lam * images + (1.0 - lam) * images[::-1], lam

    def cutmix():
        return _cutmix(images, _beta(cutmix_alpha, seeds[2]), seeds[3])

    if mixup_alpha > 0 and cutmix_alpha > 0:
        mixed, lam = tf.cond(tf.random.stateless_uniform([], seeds[0]) < 0.5, cutmix, mixup)
    else:
        mixed, lam = cutmix() if cutmix_alpha > 0 else mixup()
    mixed.set_shape(images.shape)
    return mixed, lam * one_hot + (1.0 - lam) * one_hot[::-1], lam


def _beta(alpha, seed):
    """A draw of Beta(alpha, alpha) as X / (X + Y) for X, Y ~ Gamma(alpha)."""
    gammas = tf.random.stateless_gamma([2], seed, alpha=alpha, dtype=tf.float32)
    total = gammas[0] + gammas[1]
    # Both gammas can underflow to 0 for a tiny alpha; the ratio is then taken as even.
    return tf.where(total > 0, tf.math.divide_no_nan(gammas[0], total), 0.5)


def _cutmix(images, lam, seed):
    height, width = int(images.shape[1]), int(images.shape[2])
    side = tf.sqrt(1.0 - lam)
    cut_height = tf.cast(tf.round(height * side), tf.int32)
    cut_width = tf.cast(tf.round(width * side), tf.int32)
    centre = tf.random.stateless_uniform([2], seed)
    top = tf.cast(tf.floor(centre[0] * height), tf.int32) - cut_height // 2
    left = tf.cast(tf.floor(centre[1] * width), tf.int32) - cut_width // 2
    bottom = tf.clip_by_value(top + cut_height, 0, height)
    right = tf.clip_by_value(left + cut_width, 0, width)
    top, left = tf.clip_by_value(top, 0, height), tf.clip_by_value(left, 0, width)
    inside = augment.box_mask(height, width, top, bottom, left, right)
    mixed = tf.where(inside[None, :, :, None], images[::-1], images)
    box_area = tf.cast((bottom - top) * (right - left), tf.float32)
    return mixed, 1.0 - box_area / float(height * width)
