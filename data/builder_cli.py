"""What the shard builders' entry points share: their flags, made from the fields of each
builder's options dataclass (the defaults are the options' own, which differ per builder as in
the original scripts; the flag names are the original's), and running a build with one-line
errors."""

from absl import flags

from common import cli
from common import field_flags
from common.field_flags import Flag

FLAGS = flags.FLAGS
TABLE = field_flags.FlagTable(
    names={"output_dir": "output_directory", "train_dir": "train_directory",
           "validation_dir": "validation_directory", "synsets_file": "labels_file",
           "metadata_file": "imagenet_metadata_file"})
SHARED_HELP = {
    "output_dir": Flag(
        "Where the shards and labels.txt go (created if missing; must not hold shards of the "
        "same splits, nor another data set's).", path=True, default=""),
    "train_shards": "Number of training shards.",
    "validation_shards": "Number of validation shards.",
    "max_image_pixels":
        "Images declaring more pixels (width x height) are skipped, checked from the file's "
        "header before decoding (a small file can declare gigabytes).",
    "num_threads": "Threads writing shards at once; must divide both shard counts.",
}


def define_flags(options_class, own_help):
    """Defines the flags of the builder whose options dataclass is `options_class`: the shared
    ones and those `own_help` ({field name: Flag or help}) declares; returns the whole help
    table (for run_build)."""
    help_table = {**SHARED_HELP, **own_help}
    TABLE.define_flags(options_class, help_table)
    return help_table


def run_build(argv, build, options_class, help_table):
    """Checks the command line, then `build(options_class(<the flags>), log=...)` (the flags
    `help_table` declares); errors become one line (Ctrl-C: exit 130, nothing published)."""
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --train_directory=DIR.")
    if not FLAGS.output_directory:
        cli.fail("--output_directory is required: where to write the shards.")
    try:
        build(options_class(**TABLE.values_of(FLAGS, options_class, help_table)), log=cli.log)
    except (cli.UserError, OSError) as error:
        cli.fail(error)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (common.signals)
        cli.fail("interrupted; no shards were published (rerun the same command).",
                 code=getattr(interrupt, "exit_status", 130))
