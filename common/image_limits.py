"""The largest image any part of the project decodes, in pixels (width x height).

A small compressed file can declare an enormous image (a 1.2 MB PNG of 20000 x 20000 pixels
takes 5 GB once decoded), so every place that decodes images it did not make (the shard
builders, classify, the exported model's serving signature) reads the size from the file's
header first and refuses a larger image, for that image only. The default is Pillow's own
decompression-bomb limit, so the builders' Pillow decoding and our TensorFlow decoding agree.
"""

MAX_IMAGE_PIXELS = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS: about 9459 x 9459


def describe_limit(limit):
    """`89.5 megapixels` style text of a pixel limit, for messages."""
    return f"{limit / 1e6:.1f} megapixels"


def too_large_message(width, height, limit, flag="--max_image_pixels"):
    """The one-line reason an image of `width` x `height` is refused under `limit`."""
    return (f"the image is {width} x {height} pixels ({width * height / 1e6:.1f} megapixels), "
            f"more than the limit of {describe_limit(limit)}; shrink it, or raise {flag} if "
            "you trust it")
