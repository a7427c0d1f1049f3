"""Per-image preprocessing of the original Inception training, on stateless random ops.

Training: crop a random box covering part of the object (`sample_distorted_bounding_box`),
resize with a randomly chosen method, flip, distort colour in one of two orders. Evaluation:
central crop of 87.5% (only that window of a JPEG is decoded), bilinear resize. Both end in
float32 [size, size, 3] scaled to [-1, 1].

Every random choice draws from a per-image seed (shape [2], int64), so a fixed --seed gives the
same images in the same order however many threads decode them.

Evaluation decoding (also the exported model's and classify's) first reads the image's size
from its header and refuses, for that image alone, one of more pixels than a limit
(inputs/image_headers.py): a small file can declare an image that takes gigabytes decoded.
"""

import tensorflow as tf

from common import image_limits
from inception.config import recipe
from inception.inputs import augment
from inception.inputs import image_headers

RESIZE_METHODS = ("bilinear", "nearest", "bicubic", "area")
_JPEG_END_SEARCH_BYTES = 64


def is_complete_jpeg(encoded):
    """True when `encoded` (scalar string) starts like a JPEG and has an end-of-image marker.

    The marker may be followed by a few bytes of trailing data, as some cameras write. This
    catches truncated files before the decoder fails on them (the decoder's failure would
    otherwise end the whole input pipeline).
    """
    padded = tf.strings.join([tf.constant("\0" * _JPEG_END_SEARCH_BYTES), encoded])
    tail = tf.strings.substr(padded, -_JPEG_END_SEARCH_BYTES, _JPEG_END_SEARCH_BYTES)
    tail_bytes = tf.io.decode_raw(tail, tf.uint8)
    has_end_marker = tf.reduce_any(tf.logical_and(tf.equal(tail_bytes[:-1], 0xFF),
                                                  tf.equal(tail_bytes[1:], 0xD9)))
    return tf.logical_and(tf.io.is_jpeg(encoded), has_end_marker)


def scale_to_unit_range(image):
    """Maps float32 values in [0, 1] to [-1, 1]."""
    return (image - 0.5) * 2.0


def train_image(encoded, boxes, image_size, seed, crop=recipe.ORIGINAL_CROP, augmentation=None):
    """Decodes and distorts one training image (then RandAugment and random erasing, when
    `augmentation`, a settings.AugmentationSettings, asks for them: inputs/augment.py).

    Args:
      encoded: scalar string, JPEG bytes.
      boxes: float32 [num_boxes, 4] as (ymin, xmin, ymax, xmax) in [0, 1]; may be empty, then
        the whole image counts as the object.
      image_size: output height and width.
      seed: int64 [2], this image's seed.
      crop: recipe.CropSettings.

    Returns:
      float32 [image_size, image_size, 3] in [-1, 1].
    """
    seeds = tf.random.experimental.stateless_split(seed, num=8)
    window = crop_window(tf.image.extract_jpeg_shape(encoded), boxes, seeds[0], crop)
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = resize_with_random_method(image, image_size, seeds[1])
    image = tf.image.stateless_random_flip_left_right(image, seeds[2])
    image = distort_colour(image, seeds[3:8])
    image.set_shape([image_size, image_size, 3])
    if augmentation is None:
        return scale_to_unit_range(image)
    # Their own streams of the image's seed: the original distortions stay as they were.
    if augmentation.augment == "randaugment":
        image = augment.randaugment(image, augmentation.randaugment_ops,
                                    augmentation.randaugment_magnitude,
                                    tf.random.experimental.stateless_fold_in(seed, 1))
    image = scale_to_unit_range(image)
    if augmentation.random_erasing:
        image = augment.random_erasing(image, augmentation.random_erasing,
                                       tf.random.experimental.stateless_fold_in(seed, 2))
    return image


def crop_window(image_shape, boxes, seed, crop=recipe.ORIGINAL_CROP):
    """The random training crop as int32 [y, x, height, width], always inside the image.

    Args:
      image_shape: int32 [3], (height, width, channels).
      boxes: float32 [num_boxes, 4] (ymin, xmin, ymax, xmax) in [0, 1]; empty means the whole
        image is the object.
      seed: int64 [2].
    """
    whole_image = tf.constant([[0.0, 0.0, 1.0, 1.0]])
    boxes = tf.cond(tf.shape(boxes)[0] > 0, lambda: boxes, lambda: whole_image)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape, boxes[tf.newaxis], seed=seed, min_object_covered=crop.min_object_covered,
        aspect_ratio_range=crop.aspect_ratio_range, area_range=crop.area_range,
        max_attempts=crop.max_attempts, use_image_if_no_bounding_boxes=True)
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def resize_with_random_method(image, image_size, seed):
    """Resizes to [image_size, image_size] with one of four methods, picked by `seed`."""
    choice = tf.random.stateless_uniform([], seed, maxval=len(RESIZE_METHODS), dtype=tf.int32)
    branches = [lambda m=method: tf.image.resize(image, [image_size, image_size], method=m)
                for method in RESIZE_METHODS]
    resized = tf.switch_case(choice, branches)
    return tf.clip_by_value(resized, 0.0, 1.0)


def distort_colour(image, seeds):
    """Brightness, saturation, hue and contrast changes, in one of two orders; float in [0, 1].

    Args:
      image: float32 [h, w, 3] in [0, 1].
      seeds: int64 [5, 2]: seeds[0] picks the order, the rest drive the distortions.
    """
    def brightness(x):
        return tf.image.stateless_random_brightness(x, 32.0 / 255.0, seeds[1])

    def saturation(x):
        return tf.image.stateless_random_saturation(x, 0.5, 1.5, seeds[2])

    def hue(x):
        return tf.image.stateless_random_hue(x, 0.2, seeds[3])

    def contrast(x):
        return tf.image.stateless_random_contrast(x, 0.5, 1.5, seeds[4])

    def in_order(*steps):
        def apply():
            result = image
            for step in steps:
                result = step(result)
            return result
        return apply

    ordering = tf.random.stateless_uniform([], seeds[0], maxval=2, dtype=tf.int32)
    distorted = tf.switch_case(ordering, [in_order(brightness, saturation, hue, contrast),
                                          in_order(brightness, contrast, saturation, hue)])
    return tf.clip_by_value(distorted, 0.0, 1.0)


def eval_image(encoded, image_size, max_pixels=image_limits.MAX_IMAGE_PIXELS,
               limit_flag=image_limits.LIMIT_FLAG):
    """Decodes one evaluation image: central 87.5% crop, bilinear resize, [-1, 1].

    `encoded` (scalar string) may be JPEG (the shards), PNG, GIF (first frame) or BMP bytes
    (exported models); an image of more than `max_pixels` pixels (int, or int64 scalar) is an
    InvalidArgumentError before anything is decoded (see image_headers.checked_for_decoding).
    Returns float32 [image_size, image_size, 3]; deterministic.
    """
    image = decode_central_crop(encoded, max_pixels, limit_flag)
    image = tf.image.convert_image_dtype(image, tf.float32)
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    image = tf.clip_by_value(image, 0.0, 1.0)
    image.set_shape([image_size, image_size, 3])
    return scale_to_unit_range(image)


def central_crop_window(image_shape, fraction=recipe.EVAL_CENTRAL_FRACTION):
    """int32 [y, x, height, width]: the central `fraction` of an image of shape [h, w, ...],
    the window tf.image.central_crop keeps for 0.875."""
    sides = image_shape[:2]
    margins = tf.cast(tf.cast(sides, tf.float64) * ((1.0 - fraction) / 2.0), tf.int32)
    return tf.concat([margins, sides - 2 * margins], axis=0)


def decode_central_crop(encoded, max_pixels=image_limits.MAX_IMAGE_PIXELS,
                        limit_flag=image_limits.LIMIT_FLAG):
    """uint8 [h, w, 3]: the central 87.5% of a JPEG, PNG, GIF (first frame) or BMP image.

    Refused before decoding (InvalidArgumentError) when it is none of those or has more than
    `max_pixels` pixels (image_headers.checked_for_decoding). A JPEG decodes only the window, so a large
    photo never occupies memory whole.
    """
    encoded = image_headers.checked_for_decoding(encoded, max_pixels, limit_flag)

    def jpeg():
        window = central_crop_window(tf.image.extract_jpeg_shape(encoded))
        # The accurate integer DCT (libjpeg's ISLOW), which Pillow also uses, so that models
        # served without TensorFlow see the same pixels (serving/numpy_preprocessing.py);
        # TensorFlow's default, the fast DCT, is up to 5 of 255 levels off it.
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3,
                                             dct_method="INTEGER_ACCURATE")

    def other_format():
        image = tf.image.decode_image(encoded, channels=3, expand_animations=False)
        window = central_crop_window(tf.shape(image))
        return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], 3])

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other_format)
