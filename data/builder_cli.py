"""What the shard builders' entry points share: the output and sharding flags (defaults differ
per builder, as in the original scripts) and running a build with one-line errors."""

from absl import flags

from common import cli

FLAGS = flags.FLAGS


def define_output_flags(train_shards, validation_shards, num_threads):
    """Defines --output_directory --train_shards --validation_shards --num_threads."""
    flags.DEFINE_string("output_directory", "", "Where the shards and labels.txt go (created "
                        "if missing; must not hold shards of the same splits).")
    flags.DEFINE_integer("train_shards", train_shards, "Number of training shards.")
    flags.DEFINE_integer("validation_shards", validation_shards,
                         "Number of validation shards.")
    flags.DEFINE_integer("num_threads", num_threads, "Threads writing shards at once; must "
                         "divide both shard counts.")


def run_build(argv, build, make_options):
    """Checks the command line, then `build(make_options(), log=...)`; errors become one line
    (Ctrl-C: exit 130, nothing published)."""
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --train_directory=DIR.")
    if not FLAGS.output_directory:
        cli.fail("--output_directory is required: where to write the shards.")
    try:
        build(make_options(), log=cli.log)
    except (ValueError, OSError) as error:
        cli.fail(error)
    except KeyboardInterrupt:
        cli.fail("interrupted; no shards were published (rerun the same command).", code=130)
