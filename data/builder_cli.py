"""What the shard builders' entry points share: running a build with one-line errors. (Each
entry point defines its own flags: the defaults differ per builder, as in the original
scripts.)"""

from absl import flags

from common import cli

FLAGS = flags.FLAGS


def run_build(argv, build, make_options):
    """Checks the command line, then `build(make_options(), log=...)`; errors become one line
    (Ctrl-C: exit 130, nothing published)."""
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --train_directory=DIR.")
    if not FLAGS.output_directory:
        cli.fail("--output_directory is required: where to write the shards.")
    try:
        build(make_options(), log=cli.log)
    except (cli.UserError, OSError) as error:
        cli.fail(error)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (common.signals)
        cli.fail("interrupted; no shards were published (rerun the same command).",
                 code=getattr(interrupt, "exit_status", 130))
