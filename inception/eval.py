"""`bazel run //inception:eval`: evaluate checkpoints of a training run.

Reads the model settings stored beside the checkpoints, so usually only --checkpoint_dir is
needed. Flags follow the original tensorflow/models inception_eval.py. Every flag is checked
before TensorFlow loads (settings.py).
"""

from absl import app
from absl import flags

from common import cli
from inception.config import settings as settings_lib
from inception.driver import startup

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint_dir", "/tmp/inception_train",
                    "The --train_dir of the training run to evaluate.")
flags.DEFINE_string("eval_dir", "", "Where to write eval summaries (default: "
                    "<checkpoint_dir>/eval_<subset>, so TensorBoard shows it beside training).")
flags.DEFINE_string("data_dir", "", "Shards to evaluate on (default: the training run's).")
flags.DEFINE_string("subset", "validation", "Which shards: validation or train.")
flags.DEFINE_integer("num_examples", 0, "Evaluate the first this many examples (0: all).")
flags.DEFINE_integer("batch_size", 100, "Examples per evaluation batch.")
flags.DEFINE_float("eval_interval_secs", 60, "How often to look for a new checkpoint.")
flags.DEFINE_bool("run_once", False, "Evaluate the newest checkpoint once and exit.")
flags.DEFINE_float("timeout_secs", 0, "Stop watching when no new checkpoint appeared for this "
                   "long (0: watch until interrupted).")
flags.DEFINE_integer("image_size", None, "Override the stored image size.")
flags.DEFINE_float("depth_multiplier", None, "Override the stored depth multiplier.")
flags.DEFINE_bool("strict_input", False, "Stop on a damaged image instead of skipping it.")


def settings_from_flags():
    """EvalSettings from the parsed flags, checked (one line and exit 2 for a bad one)."""
    try:
        return settings_lib.EvalSettings(
            checkpoint_dir=cli.user_path(FLAGS.checkpoint_dir),
            eval_dir=cli.user_path(FLAGS.eval_dir), data_dir=cli.user_path(FLAGS.data_dir),
            subset=FLAGS.subset, num_examples=FLAGS.num_examples, batch_size=FLAGS.batch_size,
            eval_interval_secs=FLAGS.eval_interval_secs, run_once=FLAGS.run_once,
            timeout_secs=FLAGS.timeout_secs, image_size=FLAGS.image_size,
            depth_multiplier=FLAGS.depth_multiplier,
            strict_input=FLAGS.strict_input).validate()
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
