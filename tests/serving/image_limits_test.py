"""The pixel limit: image sizes read from headers match the decoders', an image over the limit
fails before it is decoded (in the serving graph and the export), classify reports it and
classifies the rest, and the binaries check the flag before TensorFlow loads."""

import io
import os
import resource
import struct
import unittest
import zlib

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from PIL import Image
from PIL import ImageDraw

from common import error_lines
from common import image_limits
from inception.config import settings as settings_lib
from inception.inputs import image_headers
from inception.inputs import preprocessing
from inception.serving import predictions
from inception.serving import tf_models
from inception.serving import saved_model
from tests import testing_utils
from tests.serving import exported_models

tf1 = tf.compat.v1
FORMATS = ("JPEG", "PNG", "GIF", "BMP")
SIZES = [(1, 1), (7, 13), (31, 2), (101, 57), (3, 300)]  # (height, width)
MODEL = settings_lib.ModelSettings(num_classes=4, image_size=16, depth_multiplier=1.0,
                                   dataset="demo")
BOMB_SIDE = 20000


def encoded(image, image_format):
    """A PIL image (or uint8 [h, w, 3]) encoded as `image_format`."""
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    buffer = io.BytesIO()
    image.save(buffer, image_format)
    return buffer.getvalue()


def noise(height, width, seed=0):
    """uint8 [height, width, 3] of random pixels."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)


def png_chunk(kind, payload):
    return (struct.pack(">I", len(payload)) + kind + payload
            + struct.pack(">I", zlib.crc32(kind + payload)))


def black_png(width, height):
    """A valid 1-bit greyscale PNG of width x height, all black: a few KB for a huge image,
    written row by row so it never exists decoded."""
    compressor = zlib.compressobj(9)
    row = bytes(1 + (width + 7) // 8)  # filter byte "none", then the packed pixels
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", data)
            + png_chunk(b"IEND", b""))


def top_down_bmp(pixels):
    """`pixels` (uint8 [h, w, 3]) as a 24-bit BMP stored top row first (negative height)."""
    data = bytearray(encoded(pixels, "BMP"))
    height, width = pixels.shape[:2]
    offset = struct.unpack_from("<I", data, 10)[0]
    stride = (width * 3 + 3) // 4 * 4
    rows = [bytes(data[offset + r * stride:offset + (r + 1) * stride]) for r in range(height)]
    struct.pack_into("<i", data, 22, -height)
    return bytes(data[:offset]) + b"".join(reversed(rows))


def gif_with_frames(sizes):
    """A GIF whose frames have the (width, height) of `sizes`; its logical screen is the
    first frame's size."""
    singles = [encoded(Image.new("P", size, index), "GIF") for index, size in enumerate(sizes)]
    frames = [single[single.index(b"\x2c\0\0\0\0"):-1] for single in singles]
    first = singles[0]
    return first[:first.index(b"\x2c\0\0\0\0")] + b"".join(frames) + b"\x3b"


class GraphRunner:
    """One graph with a string placeholder: header sizes, and the checked central crop under a
    limit fed per call."""

    def __init__(self):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.encoded = tf1.placeholder(tf.string, [])
            self.limit = tf1.placeholder(tf.int64, [])
            self.header = image_headers.image_header(self.encoded)
            self.size = image_headers.encoded_image_size(self.encoded)
            self.crop_shape = tf.shape(preprocessing.decode_central_crop(self.encoded,
                                                                         self.limit))
        self.session = tf1.Session(graph=self.graph)

    def header_of(self, data):
        return tuple(int(v) for v in self.session.run(self.header, {self.encoded: data}))

    def size_of(self, data):
        return tuple(int(v) for v in self.session.run(self.size, {self.encoded: data}))

    def crop(self, data, limit=image_limits.MAX_IMAGE_PIXELS):
        return tuple(self.session.run(self.crop_shape, {self.encoded: data, self.limit: limit}))

    def refusal(self, data, limit=image_limits.MAX_IMAGE_PIXELS):
        """The one-line cause of the error decoding `data` under `limit`."""
        try:
            self.crop(data, limit)
        except tf.errors.InvalidArgumentError as error:
            return error_lines.root_cause(error.message)
        raise AssertionError(f"{data[:12]!r}... was decoded under a limit of {limit}")


RUNNER = None


def setUpModule():
    global RUNNER  # pylint: disable=global-statement
    RUNNER = GraphRunner()


class HeaderSizeTest(unittest.TestCase):

    def test_every_format_gives_the_decoded_height_and_width(self):
        for height, width in SIZES:
            for image_format in FORMATS:
                data = encoded(noise(height, width), image_format)
                with self.subTest(format=image_format, size=(height, width)):
                    self.assertEqual(RUNNER.size_of(data), (height, width))
                    self.assertEqual(tuple(tf.image.decode_image(data).shape[-3:-1]),
                                     (height, width))

    def test_palette_greyscale_and_1_bit_pngs(self):
        for mode in ("P", "L", "1", "RGBA", "I;16"):
            self.assertEqual(RUNNER.size_of(encoded(Image.new(mode, (45, 19)), "PNG")), (19, 45))

    def test_a_top_down_bmp_counts_its_negative_height(self):
        pixels = noise(23, 9)
        data = top_down_bmp(pixels)
        self.assertEqual(struct.unpack_from("<i", data, 22)[0], -23)
        np.testing.assert_array_equal(tf.image.decode_bmp(data).numpy(), pixels)
        self.assertEqual(RUNNER.size_of(data), (23, 9))

    def test_a_gif_is_as_large_as_its_largest_frames(self):
        one = gif_with_frames([(10, 8)])
        small_screen = one[:6] + struct.pack("<HH", 3, 2) + one[10:]
        # TensorFlow's decoder ignores the logical screen; so does the header read.
        self.assertEqual(tuple(tf.image.decode_gif(small_screen).shape), (1, 8, 10, 3))
        self.assertEqual(RUNNER.header_of(small_screen), (8, 10, 80))
        wide_and_tall = gif_with_frames([(10, 8), (30, 3), (4, 4)])
        self.assertEqual(tuple(tf.image.decode_gif(wide_and_tall).shape), (3, 8, 30, 3))
        self.assertEqual(RUNNER.header_of(wide_and_tall), (8, 30, 240))
        many = gif_with_frames([(60, 50)] * 4)
        self.assertEqual(RUNNER.header_of(many), (50, 60, 4 * 3000))

    def test_an_animated_gif_with_extensions_as_pillow_writes_it(self):
        first = Image.new("P", (52, 37), 1)
        first.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255] * 64)
        second = first.copy()
        ImageDraw.Draw(second).rectangle((10, 5, 19, 8), fill=2)  # Pillow keeps just 10 x 4
        third = second.copy()
        ImageDraw.Draw(third).rectangle((30, 20, 34, 29), fill=3)  # and 5 x 10
        buffer = io.BytesIO()
        first.save(buffer, "GIF", save_all=True, append_images=[second, third], loop=0,
                   duration=[50, 60, 70], comment=b"made by a test")
        data = buffer.getvalue()
        for extension in (b"\x21\xf9", b"\x21\xff", b"\x21\xfe"):  # control, loop, comment
            self.assertIn(extension, data)
        self.assertEqual(tuple(tf.image.decode_gif(data).shape), (3, 37, 52, 3))
        self.assertEqual(RUNNER.header_of(data), (37, 52, 52 * 37 + 10 * 4 + 5 * 10))

    def test_a_gif_of_tiny_sub_blocks_is_walked_quickly(self):
        one = gif_with_frames([(70, 40)])
        descriptor = one.index(b"\x2c\0\0\0\0")
        comment = b"\x21\xfe" + b"\x01c" * 200_000 + b"\0"  # 200,000 one-byte sub-blocks
        data = one[:descriptor] + comment + one[descriptor:]
        self.assertEqual(RUNNER.crop(data), (36, 62, 3))
        self.assertEqual(RUNNER.header_of(data), (40, 70, 2800))

    def test_other_bytes_are_refused_and_cut_headers_read_as_nothing(self):
        webp = encoded(Image.new("RGB", (5, 5)), "WEBP")
        for data in (b"", b"not an image at all", webp, b"\x00\x00\x00\x0cJXL \r\n\x87\n"):
            self.assertEqual(RUNNER.size_of(data), (0, 0))
            self.assertEqual(RUNNER.refusal(data), image_headers.UNKNOWN_FORMAT)
        for data in (b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM"):
            self.assertEqual(RUNNER.size_of(data), (0, 0))
            # the decoder's own complaint, as before the limit
            self.assertNotIn("megapixels", RUNNER.refusal(data))


class LimitTest(unittest.TestCase):

    def test_just_under_the_limit_decodes_and_just_over_is_refused(self):
        for image_format in FORMATS:
            data = encoded(noise(99, 101), image_format)  # 9999 pixels
            with self.subTest(format=image_format):
                self.assertEqual(RUNNER.crop(data, 9999), (87, 89, 3))
                self.assertEqual(RUNNER.refusal(data, 9998),
                                 image_limits.too_large_message(101, 99, 9998))
        top_down = top_down_bmp(noise(99, 101))
        self.assertIn("101 x 99 pixels", RUNNER.refusal(top_down, 9998))

    def test_an_animated_gif_counts_every_frame(self):
        data = gif_with_frames([(60, 50)] * 3)
        self.assertEqual(RUNNER.crop(data, 9000), (44, 54, 3))
        self.assertIn("60 x 50 pixels (0.0 megapixels in all its frames)",
                      RUNNER.refusal(data, 8999))

    def test_sizes_too_large_for_int64_products_are_refused(self):
        huge_png = (b"\x89PNG\r\n\x1a\n" + png_chunk(
            b"IHDR", struct.pack(">IIBBBBB", 2**32 - 1, 2**32 - 1, 8, 2, 0, 0, 0)))
        self.assertIn("4294967295 x 4294967295 pixels", RUNNER.refusal(huge_png))
        bmp = bytearray(encoded(noise(4, 4), "BMP"))
        struct.pack_into("<ii", bmp, 18, -2**31, -2**31)
        self.assertIn("2147483648 x 2147483648 pixels", RUNNER.refusal(bytes(bmp)))

    def test_a_bomb_is_refused_before_it_is_decoded(self):
        bomb = black_png(BOMB_SIDE, BOMB_SIDE)
        self.assertLess(len(bomb), 100_000)
        decoded_bytes = BOMB_SIDE * BOMB_SIDE * 3
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        cause = RUNNER.refusal(bomb)
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
        self.assertEqual(cause, image_limits.too_large_message(BOMB_SIDE, BOMB_SIDE,
                                                               image_limits.MAX_IMAGE_PIXELS))
        self.assertLess(growth, decoded_bytes / 10)


def tiny_logits(images, settings):
    """A model small enough to build in a moment: mean colour times a [3, classes] matrix."""
    weights = tf1.get_variable("tiny/weights", [3, settings.num_classes],
                               initializer=tf1.glorot_uniform_initializer(seed=3))
    return tf.matmul(tf.reduce_mean(images, axis=[1, 2]), weights)


def in_memory_model(max_pixels=image_limits.MAX_IMAGE_PIXELS):
    """(predict, session, serving graph) of the tiny model, as classify's `predict`."""
    serving_graph = saved_model.build_serving_graph(MODEL, ("a", "b", "c"), top_k=2,
                                                    logits_fn=tiny_logits, max_pixels=max_pixels)
    session = tf1.Session(graph=serving_graph.graph)
    with serving_graph.graph.as_default():
        session.run(tf1.global_variables_initializer())
    return (tf_models.raising_image_errors(lambda images: session.run(
        serving_graph.outputs_from_bytes, {serving_graph.image_bytes: images})),
            session, serving_graph)


class ClassifyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.folder = testing_utils.temp_dir("bomb_folder")
        contents = {"a.png": encoded(noise(40, 30, 1), "PNG"),
                    "b_bomb.png": black_png(BOMB_SIDE, BOMB_SIDE),
                    "c.jpg": encoded(noise(120, 100, 2), "JPEG"),
                    "d.gif": encoded(noise(33, 20, 3), "GIF"),
                    "e.bmp": encoded(noise(17, 80, 4), "BMP")}
        for name, data in contents.items():
            with open(os.path.join(cls.folder, name), "wb") as handle:
                handle.write(data)
        cls.files, _ = predictions.image_files([cls.folder])

    def test_the_bomb_is_reported_and_the_rest_classified(self):
        predict, _, _ = in_memory_model()
        results = list(predictions.classify_files(predict, self.files, batch_size=3))
        self.assertEqual([os.path.basename(p.path) for p in results],
                         ["a.png", "b_bomb.png", "c.jpg", "d.gif", "e.bmp"])
        self.assertEqual(results[1].error, image_limits.too_large_message(
            BOMB_SIDE, BOMB_SIDE, image_limits.MAX_IMAGE_PIXELS))
        for prediction in results[:1] + results[2:]:
            self.assertEqual(prediction.error, "")
            with open(prediction.path, "rb") as handle:
                alone = predict([handle.read()])
            self.assertEqual(prediction.classes, tuple(alone["classes"][0]))
            # In a batch of 3 or alone, oneDNN blocks the float32 sums differently: a few
            # ulps (1e-7 relative each) over Inception's depth, far below 1e-5.
            np.testing.assert_allclose(prediction.probabilities, alone["probabilities"][0],
                                       rtol=1e-5)

    def test_the_export_keeps_the_limit_it_was_exported_with(self):
        _, session, serving_graph = in_memory_model()
        checkpoint_path = os.path.join(testing_utils.temp_dir("tiny_run"), "model.ckpt-7")
        with serving_graph.graph.as_default():
            serving_graph.saver.save(session, checkpoint_path, write_meta_graph=False)
        stored = settings_lib.TrainSettings(model=MODEL)
        export_dir = os.path.join(testing_utils.temp_dir("tiny_export"), "models")
        version_dir = saved_model.export_saved_model(
            checkpoint_path, stored, ("a", "b", "c"), export_dir,
            saved_model.VersionContents(top_k=2, max_pixels=9999), logits_fn=tiny_logits)
        loaded = tf.saved_model.load(version_dir)
        baked = loaded.prune([], f"{saved_model.LIMIT_CONSTANT}:0")
        self.assertEqual(int(baked()), 9999)
        serve = loaded.signatures[saved_model.SERVING_SIGNATURE]
        outputs = serve(image_bytes=tf.constant([encoded(noise(99, 101), "PNG")]))
        self.assertEqual(outputs["classes"].shape, (1, 2))
        with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
            serve(image_bytes=tf.constant([encoded(noise(100, 100), "PNG")]))
        self.assertEqual(error_lines.root_cause(raised.exception.message),
                         image_limits.too_large_message(100, 100, 9999,
                                                        image_limits.EXPORT_LIMIT_FLAG))
        # classify's own limit is for training directories; the export's stays in force
        predict = tf_models.open_model(export_dir, log=lambda line: None, max_pixels=10**12)
        results = list(predictions.classify_files(predict, self.files))
        self.assertEqual([bool(p.error) for p in results], [False, True, True, False, False])
        self.assertEqual(results[2].error, image_limits.too_large_message(
            100, 120, 9999, image_limits.EXPORT_LIMIT_FLAG))


class FlagsTest(unittest.TestCase):

    def test_a_bad_limit_is_one_line_and_exit_2_before_tensorflow_loads(self):
        image = os.path.join(testing_utils.temp_dir("flag_image"), "a.png")
        commands = [["inception.classify", "--model=/no/model", "--max_image_pixels=0", image],
                    ["inception.export", "--export_dir=/tmp/no_export",
                     "--max_image_pixels=-5"]]
        for command in commands:
            # importing TensorFlow fails: the flags are checked before it loads
            completed = exported_models.run_module(*command, without_tensorflow=True,
                                                   timeout=120)
            self.assertEqual(completed.returncode, 2, completed.stderr[-2000:])
            lines = completed.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, completed.stderr)
            self.assertIn("must be at least 1", lines[0])


if __name__ == "__main__":
    absltest.main()
