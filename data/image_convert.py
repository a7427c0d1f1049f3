"""Any image file Pillow reads -> the upright RGB JPEG a shard stores, with its size.

Three rules protect the shards: an image declaring more pixels than the limit is refused from
its header, before any pixel is decoded (a 1 MB PNG can declare 20000 x 20000 pixels, gigabytes
once decoded); an EXIF Orientation tag is applied, so phone portraits stored sideways train
upright (and their bounding boxes turn with them); and a complete RGB JPEG that needs no
rotation is stored byte for byte.
"""

import io

import numpy as np
from PIL import ExifTags
from PIL import Image
from PIL import ImageOps

from common import image_limits
from data import tfrecord_format

# Pillow's advice: above 95 the file grows a lot for no visible gain.
JPEG_QUALITY = 95
# The training pipeline treats a JPEG as complete only when its end-of-image marker lies within
# this many bytes of the end (inputs/preprocessing.is_complete_jpeg); other JPEGs are re-encoded.
_JPEG_END_WINDOW = 64
_JPEG_END_MARKER = b"\xff\xd9"
_PASS_THROUGH_FORMATS = ("JPEG", "MPO")  # MPO: a camera JPEG with extra frames appended
_PILLOW_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)
_UPRIGHT = 1  # EXIF Orientation: stored as displayed
_ROTATIONS = range(2, 9)  # the other valid Orientation values; anything else is ignored
# Where a point (x, y) of the stored image, in [0, 1], lies in the upright one, per Orientation.
_UPRIGHT_POINT = {
    2: lambda x, y: (1 - x, y), 3: lambda x, y: (1 - x, 1 - y), 4: lambda x, y: (x, 1 - y),
    5: lambda x, y: (y, x), 6: lambda x, y: (1 - y, x), 7: lambda x, y: (1 - y, 1 - x),
    8: lambda x, y: (y, 1 - x),
}


class UndecodableImageError(Exception):
    """An image file that cannot be read or decoded, or is too large; the builder skips it."""


def to_rgb_jpeg(data, max_image_pixels=image_limits.MAX_IMAGE_PIXELS):
    """Returns (jpeg_bytes, height, width, orientation) of the upright image in the file
    contents `data`; orientation is the EXIF Orientation (1-8) that was applied.

    A complete RGB JPEG without a rotation passes through byte for byte; a rotated one (EXIF
    Orientation 2-8) and PNG, greyscale (8 or 16 bit), CMYK and anything else Pillow reads is
    re-encoded as an upright RGB JPEG without metadata (transparent areas over white); height
    and width are those of the upright image. Raises UndecodableImageError when `data` is not an
    image that decodes completely, or declares more than `max_image_pixels` pixels (checked
    from the header, before decoding).
    """
    _leave_the_pixel_limit_to_us()
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > max_image_pixels:
                raise UndecodableImageError(
                    image_limits.too_large_message(width, height, max_image_pixels))
            image.load()
            orientation = exif_orientation(image)
            if orientation == _UPRIGHT and _can_pass_through(image, data):
                return data, image.height, image.width, orientation
            upright = image if orientation == _UPRIGHT else ImageOps.exif_transpose(image)
            rgb = _flatten_to_rgb(upright)
            buffer = io.BytesIO()
            rgb.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    except Image.UnidentifiedImageError:
        raise UndecodableImageError("not an image file (no image format recognizes it)") from None
    except _PILLOW_DECODE_ERRORS as error:
        raise UndecodableImageError(str(error) or type(error).__name__) from None
    return buffer.getvalue(), rgb.height, rgb.width, orientation


def upright_boxes(boxes, orientation):
    """`boxes` (BoundingBox, normalised, of the image as stored) in the upright image that
    applying EXIF `orientation` gives (box annotations such as ImageNet's describe the stored
    pixels, as the original builder, which never turned an image, wrote them)."""
    if orientation not in _UPRIGHT_POINT:
        return tuple(boxes)
    turn = _UPRIGHT_POINT[orientation]
    turned = []
    for box in boxes:
        (x1, y1), (x2, y2) = turn(box.xmin, box.ymin), turn(box.xmax, box.ymax)
        turned.append(tfrecord_format.BoundingBox(min(x1, x2), min(y1, y2), max(x1, x2),
                                                  max(y1, y2)))
    return tuple(turned)


def exif_orientation(image):
    """The EXIF Orientation (1-8) of a loaded `image`; 1 (upright) when absent or unreadable."""
    try:
        value = image.getexif().get(ExifTags.Base.Orientation, _UPRIGHT)
    except (OSError, SyntaxError, ValueError, TypeError, KeyError):
        # A damaged EXIF block (a camera's maker note, say) should not cost the image itself.
        return _UPRIGHT
    return value if value in _ROTATIONS else _UPRIGHT


def _leave_the_pixel_limit_to_us():
    # Pillow's own limit is process-wide and fires inside Image.open: above twice it, an
    # error that names no flag comes before our check can run; between once and twice, a
    # warning for every such image. Our per-image check with the builder's limit replaces it.
    Image.MAX_IMAGE_PIXELS = None


def _can_pass_through(image, data):
    return (image.format in _PASS_THROUGH_FORMATS and image.mode == "RGB"
            and _JPEG_END_MARKER in data[-_JPEG_END_WINDOW:])


def _flatten_to_rgb(image):
    if image.mode.startswith("I;16"):
        # 16-bit greyscale: Pillow's own conversion would clip everything above 255 to white.
        pixels = np.clip(np.asarray(image, dtype=np.int64) >> 8, 0, 255).astype(np.uint8)
        return Image.fromarray(pixels, "L").convert("RGB")
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info)
    if not has_alpha:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")
