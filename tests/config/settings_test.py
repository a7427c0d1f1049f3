"""Settings from flags: every flag is checked before any work (one line, no TensorFlow loaded,
nothing written), each lands in its one section, and data-set defaults fill only what is unset."""

import os
import subprocess
import sys
import unittest

from absl.testing import absltest

from common import field_flags
from inception.config import cluster
from inception.config import help_texts
from inception.config import recipe
from inception.config import rules
from inception.config import settings as settings_lib
from tests import testing_utils

CHECK = """
import runpy, sys
sys.path[:0] = {path!r}
sys.argv = {argv!r}
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit as ended:
    print("EXIT", ended.code, "tensorflow" in sys.modules)
"""


def run_entry_point(module, *args):
    """(exit status, TensorFlow loaded?, the stderr lines) of the binary with `args`."""
    completed = subprocess.run(
        [sys.executable, "-c", CHECK.format(path=sys.path, argv=[module, *args], module=module)],
        capture_output=True, text=True, timeout=120, check=False,
        env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
    ended = [line.split() for line in completed.stdout.splitlines() if line.startswith("EXIT")]
    assert ended, completed.stderr[-2000:]
    return int(ended[-1][1]), ended[-1][2] == "True", completed.stderr.strip().splitlines()


class TrainFlagsTest(unittest.TestCase):

    def setUp(self):
        self.train_dir = os.path.join(testing_utils.temp_dir("flags"), "run")

    def assert_refused(self, pattern, *args, module="inception.train"):
        status, tensorflow_loaded, errors = run_entry_point(
            module, f"--train_dir={self.train_dir}" if module == "inception.train"
            else f"--checkpoint_dir={self.train_dir}", *args)
        self.assertEqual(status, 2, errors)
        self.assertFalse(tensorflow_loaded)
        self.assertEqual(len(errors), 1, errors)
        self.assertRegex(errors[0], "^error: " + pattern)
        self.assertFalse(os.path.exists(self.train_dir))

    def test_bad_numbers_are_refused_before_tensorflow_loads(self):
        cases = [
            ("--batch_size=0", r"--batch_size=0 must be at least 1\."),
            ("--initial_learning_rate=-1", r"--initial_learning_rate=-1.0 must be positive"),
            ("--max_steps=-5", r"--max_steps=-5 must be at least 0\."),
            ("--save_checkpoint_steps=-3", r"--save_checkpoint_steps=-3 must be at least 0\."),
            ("--image_size=60", r"--image_size=60 is too small for Inception v3; use 75"),
            ("--num_gpus=0", r"--num_gpus=0 must be at least 1\."),
            ("--learning_rate_decay_factor=0", r"--learning_rate_decay_factor=0.0 must be in"),
            ("--keep_checkpoints=0", r"--keep_checkpoints=0 must be at least 1\."),
            ("--depth_multiplier=0", r"--depth_multiplier=0.0 must be positive"),
            ("--log_every_n_steps=-1", r"--log_every_n_steps=-1 must be at least 0\."),
            ("--accumulate_steps=0", r"--accumulate_steps=0 must be at least 1\."),
            ("--randaugment_magnitude=31", r"--randaugment_magnitude=31 must be in \[0, 30\]"),
            ("--random_erasing=1.5", r"--random_erasing=1.5 must be in \[0, 1\]"),
            ("--mixup_alpha=-1", r"--mixup_alpha=-1.0 must be at least 0\."),
            ("--validation_fraction=0.95",
             r"--validation_fraction=0.95 must be in \[0, 0.9\], e.g. 0.2 to hold out"),
        ]
        for flag, pattern in cases:
            with self.subTest(flag=flag):
                self.assert_refused(pattern, flag)

    def test_bad_paths_and_combinations(self):
        a_file = os.path.join(testing_utils.temp_dir("flags_file"), "not_a_dir")
        open(a_file, "w", encoding="utf-8").close()
        status, _, errors = run_entry_point("inception.train", f"--train_dir={a_file}")
        self.assertEqual(status, 2)
        self.assertEqual(errors, [f"error: --train_dir={a_file} is a file, not a directory."])
        self.assert_refused(r"--data_dir=/nonexistent/shards does not exist",
                            "--data_dir=/nonexistent/shards")
        self.assert_refused(r"--batch_size=7 does not split evenly over --num_gpus=2",
                            "--batch_size=7", "--num_gpus=2")
        self.assert_refused(r"--fine_tune and --checkpoint_exclude_scopes need",
                            "--fine_tune")
        self.assert_refused(r"pass only one of --trainable_scopes / --stages",
                            "--trainable_scopes=InceptionV3/Logits", "--stages=a:1;b")
        self.assert_refused(r"--on_nan=rollback is for one machine",
                            "--on_nan=rollback", "--job_name=worker", "--task_id=0",
                            "--ps_hosts=localhost:1", "--worker_hosts=localhost:2")
        self.assert_refused(r"--ps_hosts/--worker_hosts need --job_name",
                            "--ps_hosts=localhost:1")

    def test_eval_flags_too(self):
        self.assert_refused(r"--image_size=60 is too small", "--image_size=60",
                            module="inception.eval")
        self.assert_refused(r"--batch_size=0 must be at least 1", "--batch_size=0",
                            module="inception.eval")


class SettingsTest(unittest.TestCase):

    def test_defaults_and_sane_values_pass(self):
        settings_lib.train_settings(train_dir="/tmp/x").validate()
        settings_lib.train_settings(train_dir="/tmp/x", batch_size=8, num_towers=2, max_steps=0,
                                    initial_learning_rate=1e-4, image_size=75,
                                    learning_rate_decay_factor=1.0, on_nan="rollback").validate()
        settings_lib.EvalSettings(checkpoint_dir="/tmp/x").validate()

    def test_choices_are_checked_for_library_callers_too(self):
        for name, value in (("precision", "fp8"), ("variable_device", "tpu"),
                            ("variable_update", "mirrored"),
                            ("on_nan", "ignore"), ("dataset", "mnist"), ("optimizer", "lbfgs"),
                            ("learning_rate_schedule", "linear"), ("augment", "autoaugment")):
            with self.subTest(name=name):
                with self.assertRaisesRegex(settings_lib.SettingsError, f"--{name}={value} is not "
                                            "one of"):
                    settings_lib.train_settings(train_dir="/tmp/x", **{name: value}).validate()

    def test_every_declared_bound_holds_at_its_edge_and_refuses_past_it(self):
        bounded = {name: field_flags.declared(entry)
                   for name, entry in help_texts.TRAIN_HELP.items()
                   if field_flags.declared(entry).minimum is not None}
        self.assertGreater(len(bounded), 20)  # the counts, rates and augmentation strengths
        for name, flag in bounded.items():
            edges = [(flag.minimum, None), (flag.minimum - 1, "must be")]
            if flag.maximum is not None:
                edges += [(flag.maximum, None), (flag.maximum + 1, "must be in")]
            for value, complaint in edges:
                with self.subTest(name=name, value=value):
                    settings = settings_lib.train_settings(train_dir="/tmp/x", **{name: value})
                    if complaint is None:
                        settings.validate()
                    else:
                        flag_name = rules.FLAG_NAMES.get(name, name)
                        with self.assertRaisesRegex(settings_lib.SettingsError,
                                                    f"^--{flag_name}={value} {complaint}"):
                            settings.validate()

    def test_fp16_on_a_cluster_is_refused(self):
        worker = cluster.cluster_settings("worker", 0, ["ps:1"], ["w:1"])
        with self.assertRaisesRegex(settings_lib.SettingsError, "--precision=fp16 .* distributed"):
            settings_lib.train_settings(train_dir="/tmp/x", precision="fp16",
                                        cluster=worker).validate()

    def test_variable_update_combinations_no_run_can_use(self):
        ps_cluster = cluster.cluster_settings("worker", 0, ["ps:1"], ["w:1", "w:2"])
        collective = cluster.cluster_settings("worker", 0, [], ["w:1", "w:2"])
        cases = [
            (dict(variable_update="replicated", variable_device="cpu"), None,
             "--variable_device=cpu places the variables of --variable_update=parameter_server"),
            (dict(variable_update="replicated"), ps_cluster, "needs no parameter servers"),
            (dict(variable_update="parameter_server"), collective,
             "needs parameter servers; a cluster without them"),
            (dict(variable_device="cpu"), collective, "--variable_device=cpu places the "
             "variables of one machine"),
            (dict(all_reduce_buffers=-1), None, "--all_reduce_buffers=-1 must be at least 0"),
        ]
        for values, worker, pattern in cases:
            with self.subTest(values=values):
                with self.assertRaisesRegex(settings_lib.SettingsError, pattern):
                    settings_lib.train_settings(train_dir="/tmp/x", cluster=worker,
                                                **values).validate()
        for values, worker in ((dict(variable_update="replicated"), None),
                               (dict(variable_update="parameter_server"), ps_cluster),
                               (dict(), collective),
                               (dict(variable_update="replicated"), collective),
                               (dict(variable_device="gpu"), None)):
            settings_lib.train_settings(train_dir="/tmp/x", cluster=worker, **values).validate()

    def test_batch_norm_groups(self):
        sync = settings_lib.DeviceSettings(sync_batch_norm=True)
        groups_of = lambda size: settings_lib.DeviceSettings(sync_batch_norm=True,
                                                             batch_norm_group_size=size)
        group_size = rules.batch_norm_group_size
        self.assertIsNone(group_size(settings_lib.DeviceSettings(), 4, 1, True))
        self.assertEqual(group_size(sync, 4, 1, True), 4)
        self.assertEqual(group_size(sync, 2, 3, True), 6)  # a cluster without ps: all
        self.assertEqual(group_size(sync, 2, 3, False), 2)  # beside ps: one worker's
        self.assertEqual(group_size(groups_of(2), 4, 2, True), 2)
        self.assertIsNone(group_size(sync, 1, 1, True))  # one tower: tf-slim's own
        with self.assertRaisesRegex(settings_lib.SettingsError,
                                    "--batch_norm_group_size=3 does not divide the 4 towers"):
            group_size(groups_of(3), 2, 2, True)
        with self.assertRaisesRegex(settings_lib.SettingsError, "does not divide the 2 towers"):
            group_size(groups_of(4), 2, 2, False)
        with self.assertRaisesRegex(settings_lib.SettingsError, "pass --sync_batch_norm too"):
            settings_lib.train_settings(train_dir="/tmp/x", batch_norm_group_size=2).validate()
        with self.assertRaisesRegex(settings_lib.SettingsError,
                                    "--batch_norm_group_size=-1 must be at least 0"):
            settings_lib.train_settings(train_dir="/tmp/x", sync_batch_norm=True,
                                        batch_norm_group_size=-1).validate()

    def test_warm_up_in_epochs_or_steps_and_the_layerwise_rates(self):
        with self.assertRaisesRegex(settings_lib.SettingsError,
                                    "--warmup_epochs and --warmup_steps both"):
            settings_lib.train_settings(train_dir="/tmp/x", warmup_epochs=2,
                                        warmup_steps=10).validate()
        settings_lib.train_settings(train_dir="/tmp/x", warmup_epochs=2).validate()
        for optimizer, rate in recipe.LAYERWISE_LEARNING_RATES.items():
            filled = settings_lib.fill_defaults(
                settings_lib.train_settings(train_dir="/tmp/x", optimizer=optimizer),
                recipe.DEMO_DEFAULTS)
            self.assertEqual(filled.optimization.initial_learning_rate, rate)
        given = settings_lib.fill_defaults(settings_lib.train_settings(
            train_dir="/tmp/x", optimizer="lars", initial_learning_rate=9.0), recipe.DEMO_DEFAULTS)
        self.assertEqual(given.optimization.initial_learning_rate, 9.0)
        plain = settings_lib.fill_defaults(settings_lib.train_settings(train_dir="/tmp/x"),
                                           recipe.DEMO_DEFAULTS)
        self.assertEqual(plain.optimization.initial_learning_rate,
                         recipe.DEMO_DEFAULTS.initial_learning_rate)

    def test_each_flat_name_lands_in_its_one_section(self):
        built = settings_lib.train_settings(train_dir="/tmp/x", data_dir="/d", num_labels=3,
                                            image_size=99, num_epochs_per_decay=2.0, num_towers=4,
                                            max_steps=7, fine_tune=True)
        self.assertEqual((built.data.data_dir, built.data.num_labels), ("/d", 3))
        self.assertEqual(built.model, settings_lib.ModelSettings(image_size=99))
        self.assertEqual(built.optimization.num_epochs_per_decay, 2.0)
        self.assertEqual(built.devices.num_towers, 4)
        self.assertEqual((built.loop.train_dir, built.loop.max_steps), ("/tmp/x", 7))
        self.assertTrue(built.init.fine_tune)
        names = settings_lib.flat_names()
        self.assertEqual(len(names), len(set(names)))  # no name in two sections
        self.assertNotIn("num_classes", names)  # resolved from the data set, not set
        with self.assertRaisesRegex(TypeError, "unknown setting 'num_class'"):
            settings_lib.train_settings(train_dir="/tmp/x", num_class=3)

    def test_defaults_fill_only_what_is_unset(self):
        class Defaults:  # the fields of recipe.TrainingDefaults that these tests need
            initial_learning_rate, num_epochs_per_decay, warmup_steps = 0.5, 30.0, 0
            optimizer, max_steps = "adam", 100
        optimization = settings_lib.with_defaults(
            settings_lib.OptimizationSettings(initial_learning_rate=0.01), Defaults)
        self.assertEqual((optimization.initial_learning_rate, optimization.optimizer,
                          optimization.num_epochs_per_decay), (0.01, "adam", 30.0))
        self.assertEqual(
            settings_lib.with_defaults(settings_lib.LoopSettings(), Defaults).max_steps, 100)
        self.assertEqual([stage.optimizer for stage in optimization.training_plan().stages],
                         ["adam"])
        with self.assertRaisesRegex(settings_lib.SettingsError, "not resolved"):
            settings_lib.OptimizationSettings().training_plan()

    def test_every_setting_has_a_flag_of_its_name(self):
        from absl import flags  # pylint: disable=import-outside-toplevel

        from inception import train  # noqa: F401  pylint: disable=import-outside-toplevel
        defined = set(flags.FLAGS)
        for name in settings_lib.flat_names():
            if name != "plan":  # built from --trainable_scopes / --stages / --training_plan
                self.assertIn(rules.FLAG_NAMES.get(name, name), defined)


if __name__ == "__main__":
    absltest.main()
