"""`bazel run //inception:eval`: evaluate checkpoints of a training run.

Reads the model settings stored beside the checkpoints (the network, its size, the labels),
so usually only --checkpoint_dir is needed. Flags follow the original tensorflow/models
inception_eval.py.
"""

from absl import app
from absl import flags

from common import cli
from inception.config import flag_table
from inception.config import help_texts
from inception.config import settings as settings_lib
from inception.driver import startup

FLAGS = flags.FLAGS
flag_table.define_flags([settings_lib.EvalSettings], help_texts.EVAL_HELP)
flags.adopt_module_key_flags(flag_table)  # --help lists them as this program's own


def settings_from_flags():
    """EvalSettings from the parsed flags, checked (one line and exit 2 for a bad one)."""
    try:
        values = flag_table.values_of(FLAGS, settings_lib.EvalSettings, help_texts.EVAL_HELP)
        return settings_lib.EvalSettings(**values).validate()
    except cli.UserError as error:
        cli.fail(error, code=2)


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --run_once.", code=2)
    settings = settings_from_flags()
    startup.quiet_tensorflow()
    from inception.validation import job  # pylint: disable=import-outside-toplevel
    try:
        job.run_evaluation(settings, log=cli.log)
    except cli.UserError as error:
        cli.fail(error)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
