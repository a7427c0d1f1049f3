"""Stronger training augmentations of one image: RandAugment and random erasing (inside the
tf.data map, after the Inception distortions; a tower's batch is mixed by mixing.py). Both
are graph-mode ops drawing from stateless random ops with an explicit seed (int32 or int64
[2]), so a given seed always gives the same result, whichever thread or session computes it.

RandAugment is written here because Keras 3's keras.layers.RandAugment does not fit: it draws
from stateful SeedGenerator variables with no per-call seed, and in a tf.compat.v1 graph (a
plain Session or a tf.data map) it returned every image unchanged.
"""

import math

import tensorflow as tf

from inception.config.rules import MAX_RANDAUGMENT_MAGNITUDE

OPS = ("identity", "auto_contrast", "equalize", "rotate", "solarize", "color", "posterize",
       "contrast", "brightness", "sharpness", "shear_x", "shear_y", "translate_x",
       "translate_y")
FILL_VALUE = 0.5  # grey, for the pixels a geometric op brings in from outside the image
# Strength of each op at magnitude 10 (level 1.0); it grows linearly with the magnitude.
ROTATE_DEGREES = 30.0
SHEAR = 0.3
TRANSLATE_FRACTION = 0.45
ENHANCE = 0.9
POSTERIZE_BITS_REMOVED = 4
ERASE_AREA = (0.02, 0.33)
ERASE_ASPECT = (0.3, 3.3)
ERASE_ATTEMPTS = 10


def randaugment(image, num_ops, magnitude, seed):
    """RandAugment (Cubuk et al. 2019): `num_ops` ops in a row, each drawn uniformly from OPS.

    Args:
      image: float32 [H, W, 3], values in [0, 1]; H and W at least 3.
      num_ops: Python int >= 0, how many ops to apply (2 is typical).
      magnitude: Python number in [0, MAX_RANDAUGMENT_MAGNITUDE], every op's strength (10 is
        the strength of timm's level 10: e.g. 30 degrees of rotation; 9 is typical). See
        apply_op.
      seed: int32 or int64 [2]; it fixes which ops are drawn and their signs.

    Returns:
      float32, the shape of `image`, values in [0, 1].
    """
    if not isinstance(num_ops, int) or num_ops < 0:
        raise ValueError(f"num_ops must be an int >= 0, not {num_ops!r}")
    _check_magnitude(magnitude)
    if num_ops == 0:
        return image
    seeds = tf.random.experimental.stateless_split(seed, num=2 * num_ops)
    result = image
    for index in range(num_ops):
        op = tf.random.stateless_uniform([], seeds[2 * index], minval=0, maxval=len(OPS),
                                         dtype=tf.int32)
        sign = tf.where(tf.random.stateless_uniform([], seeds[2 * index + 1]) < 0.5, -1.0, 1.0)
        result = apply_op(result, op, magnitude, sign)
    result.set_shape(image.shape)
    return result


def apply_op(image, op, magnitude, sign):
    """One RandAugment op, OPS[op], at strength `magnitude`, its result clipped to [0, 1].

    With level = magnitude / 10: rotate by sign * 30 * level degrees (positive is
    counter-clockwise, as PIL's rotate); shear_x / shear_y by sign * 0.3 * level about the
    centre; translate by sign * round(0.45 * level * side) whole pixels; color, contrast,
    brightness and sharpness blend with their degenerate image by the factor
    max(0, 1 + sign * 0.9 * level) (as PIL's ImageEnhance); solarize inverts the pixels of at
    least 256 * (1 - level) on a 0..255 scale; posterize keeps 8 - int(4 * level) bits (at
    least 1); identity, auto_contrast and equalize (as PIL's ImageOps) ignore the level.

    Args:
      image: float32 [H, W, 3] in [0, 1].
      op: int32 scalar (tensor or Python int), an index into OPS.
      magnitude: Python number in [0, MAX_RANDAUGMENT_MAGNITUDE].
      sign: float32 scalar, +1 or -1: the direction of the symmetric ops.
    """
    _check_magnitude(magnitude)
    level = magnitude / 10.0
    sign = tf.cast(sign, tf.float32)

    def branch(function):
        return lambda: tf.clip_by_value(function(image, level, sign), 0.0, 1.0)

    branches = [branch(_OP_FUNCTIONS[name]) for name in OPS]
    result = tf.switch_case(tf.convert_to_tensor(op, tf.int32), branches)
    result.set_shape(image.shape)
    return result


def random_erasing(image, probability, seed):
    """Random erasing (Zhong et al. 2017), per-pixel mode: with chance `probability`, one
    rectangle of 2%-33% of the image's area and aspect ratio 0.3-3.3 is replaced by random
    normal values clipped to [-1, 1].

    The rectangle's size is the first of ERASE_ATTEMPTS draws that fits in the image with a
    rounded area still in that range; when none does, the image stays unchanged.

    Args:
      image: float [H, W, C], already scaled to [-1, 1].
      probability: Python float in [0, 1].
      seed: int32 or int64 [2].

    Returns:
      The shape and dtype of `image`.
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must lie in [0, 1], not {probability!r}")
    seeds = tf.random.experimental.stateless_split(seed, num=6)
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    area = tf.cast(height * width, tf.float32)
    target = tf.random.stateless_uniform([ERASE_ATTEMPTS], seeds[0], *ERASE_AREA) * area
    aspect = tf.exp(tf.random.stateless_uniform(
        [ERASE_ATTEMPTS], seeds[1], math.log(ERASE_ASPECT[0]), math.log(ERASE_ASPECT[1])))
    heights = tf.cast(tf.round(tf.sqrt(target * aspect)), tf.int32)
    widths = tf.cast(tf.round(tf.sqrt(target / aspect)), tf.int32)
    fraction = tf.cast(heights * widths, tf.float32) / area
    fits = ((heights <= height) & (widths <= width) & (fraction >= ERASE_AREA[0])
            & (fraction <= ERASE_AREA[1]))
    first = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)
    found = tf.reduce_any(fits)
    box_height = tf.where(found, heights[first], 0)
    box_width = tf.where(found, widths[first], 0)
    top = tf.random.stateless_uniform([], seeds[2], 0, height - box_height + 1, tf.int32)
    left = tf.random.stateless_uniform([], seeds[3], 0, width - box_width + 1, tf.int32)
    erase = found & (tf.random.stateless_uniform([], seeds[4]) < probability)
    inside = box_mask(height, width, top, top + box_height, left, left + box_width) & erase
    noise = tf.clip_by_value(tf.random.stateless_normal(shape, seeds[5], dtype=image.dtype),
                             -1.0, 1.0)
    result = tf.where(inside[:, :, None], noise, image)
    result.set_shape(image.shape)
    return result


def box_mask(height, width, top, bottom, left, right):
    """bool [height, width], true in rows [top, bottom) and columns [left, right)."""
    rows = tf.range(height)[:, None]
    columns = tf.range(width)[None, :]
    return (rows >= top) & (rows < bottom) & (columns >= left) & (columns < right)


def _check_magnitude(magnitude):
    if not 0 <= magnitude <= MAX_RANDAUGMENT_MAGNITUDE:
        raise ValueError(f"magnitude must lie in [0, {MAX_RANDAUGMENT_MAGNITUDE}], "
                         f"not {magnitude!r}")


def _identity(image, level, sign):
    return tf.identity(image)


def _auto_contrast(image, level, sign):
    low = tf.reduce_min(image, axis=[0, 1])
    high = tf.reduce_max(image, axis=[0, 1])
    # A channel of one value has nothing to stretch and stays as it is.
    return tf.where(high > low, tf.math.divide_no_nan(image - low, high - low), image)


def _equalize(image, level, sign):
    return tf.stack([_equalize_channel(image[:, :, channel]) for channel in range(3)], axis=-1)


def _equalize_channel(channel):
    """PIL's ImageOps.equalize of one channel, on its values quantised to 0..255."""
    values = tf.clip_by_value(tf.cast(tf.round(channel * 255.0), tf.int32), 0, 255)
    histogram = tf.math.bincount(values, minlength=256, maxlength=256, dtype=tf.int32)
    last = tf.gather(histogram, tf.reduce_max(values))
    step = (tf.reduce_sum(histogram) - last) // 255
    table = (tf.cumsum(histogram, exclusive=True) + step // 2) // tf.maximum(step, 1)
    equalized = tf.cast(tf.minimum(tf.gather(table, values), 255), tf.float32) / 255.0
    # PIL leaves a channel unchanged when all but its top value hold under 255 pixels.
    return tf.where(step > 0, equalized, channel)


def _solarize(image, level, sign):
    threshold = 256.0 * (1.0 - level)
    return tf.where(image * 255.0 >= threshold, 1.0 - image, image)


def _posterize(image, level, sign):
    bits = max(1, 8 - int(POSTERIZE_BITS_REMOVED * level))
    bin_size = float(2 ** (8 - bits))
    return tf.floor(tf.round(image * 255.0) / bin_size) * bin_size / 255.0


def _enhance_factor(level, sign):
    return tf.maximum(0.0, 1.0 + sign * ENHANCE * level)


def _blend(degenerate, image, level, sign):
    return degenerate + _enhance_factor(level, sign) * (image - degenerate)


def _color(image, level, sign):
    return _blend(tf.image.rgb_to_grayscale(image), image, level, sign)


def _contrast(image, level, sign):
    return _blend(tf.reduce_mean(tf.image.rgb_to_grayscale(image)), image, level, sign)


def _brightness(image, level, sign):
    return _blend(tf.zeros_like(image), image, level, sign)


def _sharpness(image, level, sign):
    kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(image[None], kernel, [1, 1, 1, 1], "VALID")[0]
    # The one-pixel border, where the 3x3 filter has no full window, keeps its own values.
    border = [[1, 1], [1, 1], [0, 0]]
    interior = tf.pad(tf.ones_like(smooth[:, :, :1]), border)
    degenerate = interior * tf.pad(smooth, border) + (1.0 - interior) * image
    return _blend(degenerate, image, level, sign)


def _size(image):
    shape = tf.cast(tf.shape(image), tf.float32)
    return shape[0], shape[1]


def _transform(image, matrix):
    """Resamples `image` at the input point (a0 x + a1 y + a2, b0 x + b1 y + b2) of each output
    pixel (x its column, y its row); `matrix` is [a0, a1, a2, b0, b1, b2]."""
    transform = tf.reshape(tf.stack([tf.cast(value, tf.float32) for value in matrix]
                                    + [0.0, 0.0]), [1, 8])
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None], transforms=transform, output_shape=tf.shape(image)[:2],
        fill_value=FILL_VALUE, interpolation="BILINEAR", fill_mode="CONSTANT")[0]


def _rotate(image, level, sign):
    height, width = _size(image)
    centre_y, centre_x = (height - 1.0) / 2.0, (width - 1.0) / 2.0
    angle = sign * ROTATE_DEGREES * level * math.pi / 180.0
    cos, sin = tf.cos(angle), tf.sin(angle)
    return _transform(image, [cos, -sin, centre_x - cos * centre_x + sin * centre_y,
                              sin, cos, centre_y - sin * centre_x - cos * centre_y])


def _shear_x(image, level, sign):
    centre_y = (_size(image)[0] - 1.0) / 2.0
    shear = sign * SHEAR * level
    return _transform(image, [1.0, shear, -shear * centre_y, 0.0, 1.0, 0.0])


def _shear_y(image, level, sign):
    centre_x = (_size(image)[1] - 1.0) / 2.0
    shear = sign * SHEAR * level
    return _transform(image, [1.0, 0.0, 0.0, shear, 1.0, -shear * centre_x])


def _translate_x(image, level, sign):
    # Whole pixels, so that the shifted image is not also blurred by the interpolation.
    shift = sign * tf.round(TRANSLATE_FRACTION * level * _size(image)[1])
    return _transform(image, [1.0, 0.0, -shift, 0.0, 1.0, 0.0])


def _translate_y(image, level, sign):
    shift = sign * tf.round(TRANSLATE_FRACTION * level * _size(image)[0])
    return _transform(image, [1.0, 0.0, 0.0, 0.0, 1.0, -shift])


_OP_FUNCTIONS = {
    "identity": _identity, "auto_contrast": _auto_contrast, "equalize": _equalize,
    "rotate": _rotate, "solarize": _solarize, "color": _color, "posterize": _posterize,
    "contrast": _contrast, "brightness": _brightness, "sharpness": _sharpness,
    "shear_x": _shear_x, "shear_y": _shear_y, "translate_x": _translate_x,
    "translate_y": _translate_y,
}
