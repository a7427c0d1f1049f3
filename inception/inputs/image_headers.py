"""What an encoded image's header says, read without decoding it: its format (JPEG, PNG, GIF,
BMP), height, width and the pixels decoding would take (for a GIF, the largest frame, found by
walking its blocks). Evaluation's decoding (also the exported model's and classify's) refuses,
for that image alone, one of more pixels than a limit (common.image_limits) before decoding:
a small file can declare an image that takes gigabytes decoded."""

import tensorflow as tf

from common import image_limits

TOO_LARGE_START = "the image is "  # how a refused image's message begins
UNKNOWN_FORMAT = f"not a JPEG, PNG, GIF or BMP image ({image_limits.NOT_AN_IMAGE_REASON})"
# The magic bytes TensorFlow's decode_image tells formats by; it also reads WebP and JPEG XL,
# which are refused here because their sizes are not read from the header.
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_GIF_MAGIC = b"GIF8"
_BMP_MAGIC = b"BM"
_HEADER_BYTES = 26  # through the BMP height, the last size at a fixed offset
_LARGEST_SIDE = 2**31  # sides are clamped to this before multiplying, so no int64 overflows


def checked_for_decoding(encoded, max_pixels=image_limits.MAX_IMAGE_PIXELS,
                         limit_flag=image_limits.LIMIT_FLAG):
    """`encoded` (scalar string) again, to be decoded only once its header is checked.

    Running the result is an InvalidArgumentError with a one-line message, before anything is
    decoded, when the bytes are not a JPEG, PNG, GIF or BMP image (UNKNOWN_FORMAT) or when
    the image has more than `max_pixels` (int, or int64 scalar) pixels (a message like
    image_limits.too_large_message naming `limit_flag`). A damaged JPEG header fails in
    tf.image.extract_jpeg_shape, as its decoder would.
    """
    header = image_header(encoded)
    limit = tf.cast(max_pixels, tf.int64)
    checks = [tf.debugging.Assert(_is_known_format(encoded), [UNKNOWN_FORMAT]),
              tf.debugging.Assert(header[2] <= limit,
                                  [_too_large_message(header, limit, limit_flag)])]
    with tf.control_dependencies(checks):
        return tf.identity(encoded)


def encoded_image_size(encoded):
    """int64 [2]: (height, width) of the encoded image `encoded` (scalar string), read from its
    header without decoding it; (0, 0) when it is not a JPEG, PNG, GIF or BMP image."""
    return image_header(encoded)[:2]


def image_header(encoded):
    """int64 [3]: (height, width, pixels to decode) of `encoded` (scalar string), from headers.

    JPEG: tf.image.extract_jpeg_shape. PNG: the IHDR chunk (big-endian uint32 width, height at
    bytes 16, 20). BMP: the info header (little-endian int32 width, height at 18, 22; a
    top-down bitmap's negative height counts as positive). GIF: the largest width and height
    of its frames, which is what TensorFlow's decoder allocates (it ignores the logical screen
    size at bytes 6, 8). Pixels: height * width, or for a GIF the pixels of all its frames
    when more (its decoder reads every frame). (0, 0, 0) for anything else or a cut header.
    """
    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
        return tf.stack([shape[0], shape[1], _area(shape[0], shape[1])])

    def other_format():
        header = tf.strings.join([tf.strings.substr(encoded, 0, _HEADER_BYTES),
                                  "\0" * _HEADER_BYTES])
        png = tf.stack([_number(header, 20, tf.int32, False),
                        _number(header, 16, tf.int32, False)])
        png = tf.bitwise.bitwise_and(png, 0xFFFFFFFF)  # the int32 read as uint32
        bmp = tf.abs(tf.stack([_number(header, 22, tf.int32, True),
                               _number(header, 18, tf.int32, True)]))
        sides = tf.where(_starts_with(header, _PNG_MAGIC), png,
                         tf.where(_starts_with(header, _BMP_MAGIC), bmp,
                                  tf.zeros([2], tf.int64)))
        plain = tf.concat([sides, [_area(sides[0], sides[1])]], axis=0)
        return tf.cond(_starts_with(header, _GIF_MAGIC), lambda: _gif_frames(encoded),
                       lambda: plain)

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other_format)


def _is_known_format(encoded):
    return tf.reduce_any(tf.stack([tf.io.is_jpeg(encoded)] + [
        _starts_with(encoded, magic) for magic in (_PNG_MAGIC, _GIF_MAGIC, _BMP_MAGIC)]))


def _starts_with(data, magic):
    return tf.equal(tf.strings.substr(data, 0, len(magic)), magic)


def _number(header, offset, dtype, little_endian):
    """int64 scalar: the `dtype` number at byte `offset` of `header` (scalar string)."""
    raw = tf.io.decode_raw(tf.strings.substr(header, offset, dtype.size), dtype,
                           little_endian=little_endian)
    return tf.cast(raw[0], tf.int64)


def _area(height, width):
    return tf.minimum(height, _LARGEST_SIDE) * tf.minimum(width, _LARGEST_SIDE)


def _too_large_message(header, limit, limit_flag):
    """image_limits.too_large_message in graph ops, for header (int64 [3], image_header)."""
    def megapixels(pixels):
        return tf.strings.as_string(tf.cast(pixels, tf.float64) / 1e6, precision=1)

    frames = tf.where(header[2] > _area(header[0], header[1]), " in all its frames", "")
    return tf.strings.join([
        TOO_LARGE_START, tf.strings.as_string(header[1]), " x ", tf.strings.as_string(header[0]),
        " pixels (", megapixels(header[2]), " megapixels", frames, "), more than the limit of ",
        megapixels(limit), f" megapixels; shrink it, or raise {limit_flag} if you trust it"])


def _gif_frames(encoded):
    """int64 [3]: the largest frame height and width of a GIF and the pixels of all frames.

    After the global colour table come blocks, each an extension (0x21, label) or an image
    descriptor (0x2C; frame width, height at bytes 5, 7), then sub-blocks of data (a length
    byte; 0 ends them), until the trailer. Both chains, sub-block to sub-block and block to
    block, are followed by pointer doubling over every byte position (a few whole-array
    gathers), since a loop over a file of 1-byte sub-blocks would take many seconds.
    """
    data = tf.cast(tf.io.decode_raw(encoded, tf.uint8), tf.int32)
    length = tf.size(data)  # also the index of "past the end", appended to every array
    position = tf.range(length)

    def ahead(offset):  # data[i + offset] for every i, 0 past the end
        return tf.concat([data, tf.zeros([offset], tf.int32)], axis=0)[offset:]

    def with_end(values, end_value):
        return tf.concat([values, tf.fill([1], tf.cast(end_value, values.dtype))], axis=0)

    # For every position read as a sub-block length: where its run of sub-blocks ends.
    runs = _followed(with_end(tf.where(
        data > 0, tf.minimum(position + data + 1, length), position), length))
    frame = tf.equal(data, 0x2C)
    run_start = tf.where(frame, position + 11 + _colour_table_bytes(ahead(9)), position + 2)
    next_block = tf.where(tf.logical_or(frame, tf.equal(data, 0x21)),
                          tf.gather(runs, tf.minimum(run_start, length)) + 1, length)
    sides = tf.where(frame[:, tf.newaxis],
                     tf.stack([ahead(7) + 256 * ahead(8), ahead(5) + 256 * ahead(6)], axis=1), 0)
    first = tf.minimum(13 + _colour_table_bytes(ahead(10)[0]), length)
    jump, sides, pixels = (with_end(tf.minimum(next_block, length), length),
                           tf.concat([sides, tf.zeros([1, 2], tf.int32)], axis=0),
                           with_end(tf.cast(sides[:, 0], tf.int64)
                                    * tf.cast(sides[:, 1], tf.int64), 0))
    _, sides, pixels = tf.while_loop(
        lambda jump, *_: tf.not_equal(jump[first], length),
        lambda jump, sides, pixels: (tf.gather(jump, jump),
                                     tf.maximum(sides, tf.gather(sides, jump)),
                                     pixels + tf.gather(pixels, jump)),
        (jump, sides, pixels))
    height, width = tf.cast(sides[first, 0], tf.int64), tf.cast(sides[first, 1], tf.int64)
    return tf.stack([height, width, tf.maximum(pixels[first], _area(height, width))])


def _followed(jump):
    """int32 [m]: where following `jump` (int32 [m], each a later index or itself) ends."""
    def unfinished(jump, twice):
        return tf.reduce_any(tf.not_equal(jump, twice))

    def double(jump, twice):
        del jump
        return twice, tf.gather(twice, twice)

    return tf.while_loop(unfinished, double, (jump, tf.gather(jump, jump)))[0]


def _colour_table_bytes(flags):
    """int32 like `flags`: the colour table a GIF's flags byte announces (bit 7; 3 * 2^(n+1)
    bytes for size bits n)."""
    size = 3 * tf.bitwise.left_shift(tf.constant(2, tf.int32), tf.bitwise.bitwise_and(flags, 7))
    return tf.where(flags >= 128, size, 0)
