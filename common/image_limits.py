"""The largest image any part of the project decodes, in pixels (width x height), and how a
refused image is described.

A small compressed file can declare an enormous image (a 1.2 MB PNG of 20000 x 20000 pixels
takes 5 GB once decoded), so every place that decodes images it did not make (the shard
builders, classify, the exported model's serving signature) reads the size from the file's
header first and refuses a larger image, for that image only. The default is Pillow's own
decompression-bomb limit, so the builders' Pillow decoding and our TensorFlow decoding agree.
"""

MAX_IMAGE_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS: about 9459 x 9459
LIMIT_FLAG = "--max_image_pixels"  # the flag a refusal names (of the command that decodes)
# An export keeps the limit it was exported with: its refusals name the export's flag.
EXPORT_LIMIT_FLAG = "--max_image_pixels of //inception:export"

NOT_AN_IMAGE_REASON = "its first bytes are those of none of them"


def unreadable_message(cause=NOT_AN_IMAGE_REASON):
    """The one-line reason bytes that are no image we decode are refused, with its cause."""
    return f"not a readable JPEG, PNG, GIF or BMP image ({cause})"


def describe_limit(limit):
    """`89.5 megapixels` style text of a pixel limit, for messages."""
    return f"{limit / 1e6:.1f} megapixels"


def too_large_message(width, height, limit, flag=LIMIT_FLAG):
    """The one-line reason an image of `width` x `height` is refused under `limit`."""
    return (f"the image is {width} x {height} pixels ({width * height / 1e6:.1f} megapixels), "
            f"more than the limit of {describe_limit(limit)}; shrink it, or raise {flag} if "
            "you trust it")
