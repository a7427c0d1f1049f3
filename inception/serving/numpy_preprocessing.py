"""The exported model's preprocessing in NumPy and Pillow, for the models that cannot hold it
(TFLite, ONNX): decode, central 87.5% crop, bilinear resize, scale to [-1, 1], exactly as
inputs/preprocessing.eval_image does in the SavedModel's graph. It never imports TensorFlow,
so classify can run those models where TensorFlow is not installed.

Both decode JPEGs with libjpeg's accurate integer DCT. One difference is inherent: the graph
decodes only the crop window of a JPEG, which rounds the pixels at the window's edges
differently for 4:2:0 JPEGs; inside, and for PNG, GIF and BMP, the two match to float rounding
(tests/serving/numpy_preprocessing_test.py).
"""

import io

import numpy as np
from PIL import Image
from PIL import UnidentifiedImageError

from common import image_limits
from inception.config import recipe
from inception.serving.predictions import ImageError


def eval_image(encoded, image_size, max_pixels=image_limits.MAX_IMAGE_PIXELS,
               limit_flag=image_limits.LIMIT_FLAG):
    """float32 [image_size, image_size, 3] in [-1, 1] of the JPEG, PNG, GIF (first frame) or
    BMP bytes `encoded`; raises ImageError for other bytes, or for more than `max_pixels`
    pixels (naming `limit_flag`, the flag that raises it)."""
    image = decode_central_crop(encoded, max_pixels, limit_flag).astype(np.float32) / 255.0
    image = np.clip(resize_bilinear(image, image_size), 0.0, 1.0)
    return ((image - 0.5) * 2.0).astype(np.float32)


def decode_central_crop(encoded, max_pixels=image_limits.MAX_IMAGE_PIXELS,
                        limit_flag=image_limits.LIMIT_FLAG):
    """uint8 [h, w, 3]: the central recipe.EVAL_CENTRAL_FRACTION of the image."""
    try:
        with Image.open(io.BytesIO(encoded)) as opened:
            if opened.format not in ("JPEG", "PNG", "GIF", "BMP"):
                raise ImageError(image_limits.unreadable_message(opened.format))
            width, height = opened.size
            if width * height > max_pixels:
                raise ImageError(image_limits.too_large_message(width, height, max_pixels,
                                                                limit_flag))
            opened.seek(0)  # a GIF's first frame, as TensorFlow's decoder takes it
            pixels = np.asarray(opened.convert("RGB"))
    except UnidentifiedImageError:
        raise ImageError(image_limits.unreadable_message()) from None
    except Image.DecompressionBombError as error:  # Pillow's own refusal, above twice its limit
        raise ImageError(str(error)) from None
    except (OSError, SyntaxError) as error:  # Pillow's errors for bytes it cannot read
        raise ImageError(image_limits.unreadable_message(error)) from None
    top, left, crop_height, crop_width = central_crop_window(pixels.shape)
    return pixels[top:top + crop_height, left:left + crop_width]


def central_crop_window(shape, fraction=recipe.EVAL_CENTRAL_FRACTION):
    """(top, left, height, width) of the central `fraction` of an image of `shape` [h, w, ...]:
    the window tf.image.central_crop keeps (margins truncated towards zero)."""
    margins = [int(side * ((1.0 - fraction) / 2.0)) for side in shape[:2]]
    return margins[0], margins[1], shape[0] - 2 * margins[0], shape[1] - 2 * margins[1]


def resize_bilinear(image, size):
    """float [size, size, channels] of float `image` [h, w, channels]: TensorFlow's bilinear
    resize with half-pixel centres and no antialiasing (tf.image.resize's "bilinear").

    Written here because Pillow's bilinear filter widens its support when it shrinks an image
    (an antialiasing filter), which TensorFlow's does not.
    """
    row_low, row_high, row_weight = _interpolation(image.shape[0], size)
    column_low, column_high, column_weight = _interpolation(image.shape[1], size)
    image = image.astype(np.float32)
    rows = (image[row_low] * (1 - row_weight)[:, None, None]
            + image[row_high] * row_weight[:, None, None])
    return (rows[:, column_low] * (1 - column_weight)[None, :, None]
            + rows[:, column_high] * column_weight[None, :, None])


def _interpolation(in_size, out_size):
    """(lower source index, upper source index, the upper one's weight) per output position."""
    position = (np.arange(out_size, dtype=np.float32) + 0.5) * np.float32(in_size / out_size) \
        - 0.5
    floor = np.floor(position)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(position), in_size - 1).astype(np.int64)
    return lower, upper, (position - floor).astype(np.float32)
