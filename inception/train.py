"""`bazel run //inception:train`: multi-tower Inception v3 training.

With no flags it trains the embedded demo data set with 2 towers in a few minutes on a CPU.
Flags follow the original tensorflow/models inception_train.py where it had them, and
imagenet_distributed_train.py for training on several machines (--job_name, --task_id,
--ps_hosts, --worker_hosts, --num_replicas_to_aggregate; or TF_CONFIG from a scheduler).
A bad flag is one line before anything loads or is written; the manual is docs/index.md.
"""
# This docstring is --help's text (common/cli.py). The flags are generated from the settings
# (config/flag_table.py: each one's default is its setting's, its help beside it) and become one
# settings.TrainSettings (settings_from_flags), checked before TensorFlow loads
# (config/rules.py, plans.py, cluster.py). The range test's and the plan's flags come from
# commands.RangeTestSettings and plans.PlanFlags the same way; this file defines no flag itself.

import os
import signal

from absl import app
from absl import flags

from common import cli
from common import signals
from inception.config import cluster as cluster_lib
from inception.config import commands
from inception.config import flag_table
from inception.config import help_texts
from inception.config import plans
from inception.config import recovery
from inception.config import rules
from inception.config import settings as settings_lib
from inception.driver import entry
from inception.driver import startup

FLAGS = flags.FLAGS
flag_table.define_flags(settings_lib.SECTIONS.values(), help_texts.TRAIN_HELP)
flag_table.define_flags([cluster_lib.ClusterSettings], cluster_lib.CLUSTER_HELP)

flag_table.define_flags([plans.PlanFlags], plans.PLAN_HELP)
flag_table.define_flags([commands.RangeTestSettings], commands.RANGE_TEST_HELP)
flags.adopt_module_key_flags(flag_table)  # --help lists them as this program's own


def cluster_from_flags():
    """(cluster.ClusterSettings from the cluster flags or the scheduler's environment
    (config/environment.py: TF_CONFIG, a JobSet, Slurm), or None for one machine; the restart
    code, checked: a run alone exits with it on SIGTERM too)."""
    values = flag_table.values_of(FLAGS, cluster_lib.ClusterSettings,
                                  cluster_lib.CLUSTER_HELP)
    recovery.check_restart_exit_code(values["restart_exit_code"])
    return (cluster_lib.cluster_settings(**values, environment=os.environ),
            values["restart_exit_code"])


def settings_from_flags(cluster=None):
    """TrainSettings from the parsed flags: each setting from the flag of its name
    (rules.FLAG_NAMES where the original's differs), and one plan from --trainable_scopes,
    --stages or --training_plan."""
    values = {}
    for section in settings_lib.SECTIONS.values():
        values.update(flag_table.values_of(FLAGS, section, help_texts.TRAIN_HELP))
    if values["class_weight"] not in ("", "balanced"):
        values["class_weight"] = cli.user_path(values["class_weight"])
    values["profile_steps"] = rules.profile_window(values["profile_steps"])
    values["plan"] = plans.plan_from_flags(
        **flag_table.values_of(FLAGS, plans.PlanFlags, plans.PLAN_HELP))
    return settings_lib.train_settings(cluster=cluster, **values)


def checked_settings():
    """(the run's TrainSettings or None for a parameter server, the cluster or None, the range
    test's settings) from the flags; any bad flag ends the process with one line (exit 2)
    before TensorFlow loads."""
    try:
        cluster, restart_code = cluster_from_flags()
        signals.set_exit_status(signal.SIGTERM, restart_code)  # a preemption, in every phase
        signals.set_stop_deadline(signal.SIGTERM, recovery.SIGTERM_DEADLINE_SECS)
        if cluster is not None and cluster.job_name == "ps":
            return None, cluster, None
        range_settings = commands.RangeTestSettings(
            **flag_table.values_of(FLAGS, commands.RangeTestSettings,
                                   commands.RANGE_TEST_HELP)).validate()
        return settings_from_flags(cluster).validate(), cluster, range_settings
    except cli.UserError as error:
        cli.fail(error, code=2)


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --max_steps=100.", code=2)
    settings, cluster, range_settings = checked_settings()
    if settings is None:
        startup.quiet_tensorflow()
        entry.serve_parameters(cluster)
    elif range_settings.find_learning_rate:
        entry.find_learning_rate(settings, range_settings)
    else:
        entry.finish(settings, cluster, entry.train(settings))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
