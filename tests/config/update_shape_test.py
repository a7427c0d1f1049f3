"""A run that goes on with another number of workers keeps its global batch (no TensorFlow)."""

import unittest

from absl.testing import absltest

from inception.config import cluster as cluster_lib
from inception.config import settings as settings_lib
from inception.config.rules import SettingsError
from inception.config.update_shape import keep_global_batch
from inception.config.update_shape import UpdateShape

FOUR_WORKERS = UpdateShape(replicas=4, towers=2, batch_size=8, accumulate_steps=1)


class KeepGlobalBatchTest(unittest.TestCase):

    def test_a_new_run_or_the_same_cluster_keeps_its_flags(self):
        self.assertEqual(keep_global_batch(None, FOUR_WORKERS), (FOUR_WORKERS, None))
        self.assertEqual(keep_global_batch(FOUR_WORKERS, FOUR_WORKERS), (FOUR_WORKERS, None))

    def test_half_the_workers_take_twice_the_micro_batches(self):
        two = UpdateShape(replicas=2, towers=2, batch_size=8, accumulate_steps=1)
        shape, note = keep_global_batch(FOUR_WORKERS, two)
        self.assertEqual(shape.accumulate_steps, 2)
        self.assertEqual(shape.examples, FOUR_WORKERS.examples)
        self.assertIn("the cluster changed since the last checkpoint: 4 worker(s) x 2 tower(s), "
                      "batch 8 per worker x 1 micro-batch(es) = 32 -> 2 worker(s)", note)
        self.assertIn("(--accumulate_steps=2)", note)
        # And back: four workers of the two-worker run's shape need one micro-batch again.
        back, _ = keep_global_batch(shape, FOUR_WORKERS)
        self.assertEqual(back.accumulate_steps, 1)
        # One machine going on from the cluster's checkpoints works the same way.
        alone, _ = keep_global_batch(FOUR_WORKERS, UpdateShape(1, 1, 8, 1))
        self.assertEqual(alone.accumulate_steps, 4)

    def test_sizes_that_cannot_keep_it_are_refused_naming_those_that_can(self):
        with self.assertRaisesRegex(
                SettingsError, r"average 32 examples per update .* 3 worker\(s\) of "
                r"--batch_size=8 cannot .* With --batch_size=8, use 1, 2, 4 worker\(s\)"):
            keep_global_batch(FOUR_WORKERS, UpdateShape(3, 2, 8, 1))
        with self.assertRaisesRegex(SettingsError, "Pass a --batch_size that divides 32"):
            keep_global_batch(FOUR_WORKERS, UpdateShape(2, 2, 12, 1))
        # More workers than the global batch has micro-batches for: refused too.
        with self.assertRaisesRegex(SettingsError, "use 1, 2, 4 worker"):
            keep_global_batch(FOUR_WORKERS, UpdateShape(8, 2, 8, 1))

    def test_other_towers_per_worker_are_noted_and_change_nothing(self):
        more_towers = UpdateShape(replicas=4, towers=4, batch_size=8, accumulate_steps=1)
        shape, note = keep_global_batch(FOUR_WORKERS, more_towers)
        self.assertEqual(shape, more_towers)
        self.assertIn("the towers per worker changed", note)

    def test_the_shape_of_settings(self):
        cluster = cluster_lib.cluster_settings("worker", 0, [], ["a:1", "b:1", "c:1"])
        settings = settings_lib.train_settings(batch_size=16, accumulate_steps=2,
                                               cluster=cluster)
        self.assertEqual(UpdateShape.of(settings, towers=2), UpdateShape(3, 2, 16, 2))
        self.assertEqual(UpdateShape.of(settings, towers=2).examples, 96)


if __name__ == "__main__":
    absltest.main()
