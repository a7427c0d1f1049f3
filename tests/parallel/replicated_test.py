"""--variable_update=replicated on virtual CPU devices, against independent computations: the
same towers with the variables on one device (parameter_server), and one device on the whole
batch. Also: the copies stay bit-identical, a checkpoint holds one copy under the original names,
and a checkpoint written in one mode resumes in the other."""

import os
import shutil
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import plans
from inception.config import settings as settings_lib
from inception.loop import session_loop
from inception.parallel import all_reduce
from inception.parallel import copies as copies_lib
from inception.parallel import hardware
from inception.step import step_graph
from tests import faults
from tests import testing_utils

tf1 = tf.compat.v1
STEPS = 3
TWO = ["/cpu:0", "/cpu:1"]
FOUR = ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
RING = all_reduce.AllReduceSpec(all_reduce.RING, num_buffers=2)
TWO_STAGES = plans.TrainingPlan((
    plans.Stage("conv", steps=2, scopes=("net/conv",), optimizer="rmsprop", learning_rate=0.1),
    plans.Stage("head", scopes=("net/logits",), optimizer="momentum", learning_rate=0.1)))
# Float32 sums of the same terms in another order (towers' partial means, ring or add_n order,
# micro-batches first): a few ulps of values of order 1 per step, grown over STEPS RMSProp
# steps (epsilon 1.0 keeps its division tame). Measured: at most 2e-7 apart. A tower's batch
# counted twice or not at all moves the weights by 1e-3 or more (test_the_check_can_fail).
TOLERANCE = 2e-6


def train(tower_devices, spec=None, plan=None, accumulate_steps=1, steps=STEPS,
          loss_scale=None, model_fn=None, batch=8):
    """`steps` updates of the small conv model on `batch` examples a step (synthetic_input)
    over `tower_devices`; replicated variables with `spec`. Returns {name: value} of every global
    variable after them, the originals' names -> the stages' skipped names, and the tower
    losses of each step."""
    optimization = testing_utils.optimization(
        initial_learning_rate=0.1, optimizer="rmsprop", plan=plan,
        accumulate_steps=accumulate_steps)
    model_fn = model_fn or testing_utils.small_conv_model_fn(unused_variable=True)
    with tf.Graph().as_default():
        built = step_graph.build_train_graph(
            testing_utils.synthetic_input(batch), lambda decay: model_fn,
            optimization, testing_utils.sharing_of(tower_devices, spec), 64,
            step_graph.StepOptions(initial_loss_scale=loss_scale))
        config = testing_utils.cpu_session_config(max(len(tower_devices), 2))
        with tf1.Session(config=config) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            if built.fill_copies is not None:
                session.run(built.fill_copies)
            losses = []
            for step in range(steps):
                ops = built.stages[built.plan.stage_index_at(step)]
                losses.append(session.run([ops.train_op, ops.tower_losses])[1])
            values = session.run({v.op.name: v for v in tf1.global_variables()})
    return values, [ops.skipped for ops in built.stages], losses


def originals(values):
    """The values of `values` that a checkpoint holds (no device's copy)."""
    return {name: value for name, value in values.items()
            if not name.startswith(copies_lib.COPY_PREFIX)}


class ReplicatedEqualsParameterServerTest(unittest.TestCase):

    def assert_same_weights(self, replicated, reference, tolerance=TOLERANCE):
        """Every variable `reference` has (weights, slots, averages, step) is in `replicated`
        with about the same value."""
        self.assertEqual(sorted(originals(replicated)), sorted(reference))
        for name, value in reference.items():
            np.testing.assert_allclose(replicated[name], value, rtol=0, atol=tolerance,
                                       err_msg=name)

    def assert_copies_identical(self, values, num_devices):
        """Every device's copy of every variable (and of its slots and average) is bit for bit
        its original."""
        names = sorted(originals(values))
        copied = [name for name in names if copies_lib.copy_name(1, name) in values]
        self.assertTrue(any("RMSProp" in name for name in copied), copied)
        self.assertTrue(any("ExponentialMovingAverage" in name for name in copied), copied)
        for device in range(1, num_devices):
            for name in copied:
                np.testing.assert_array_equal(values[copies_lib.copy_name(device, name)],
                                              values[name], err_msg=(device, name))

    def test_two_and_four_towers_equal_parameter_server_and_one_device(self):
        one_device, _, _ = train(["/cpu:0"])
        one_replicated, _, _ = train(["/cpu:0"], RING)  # nothing to reduce: no collective
        self.assert_same_weights(one_replicated, originals(one_device))
        for tower_devices in (TWO, FOUR):
            with self.subTest(towers=len(tower_devices)):
                replicated, skipped, _ = train(tower_devices, RING)
                parameter_server, ps_skipped, _ = train(tower_devices)
                self.assert_same_weights(replicated, originals(parameter_server))
                self.assert_same_weights(replicated, originals(one_device))
                self.assert_copies_identical(replicated, len(tower_devices))
                self.assertEqual(skipped, ps_skipped)
                self.assertEqual(skipped, [["net/unused/weights"]])

    def test_every_buffer_count_gives_the_same_sum(self):
        reference, _, _ = train(TWO)
        for buffers in (0, 1, 3, 64):
            with self.subTest(buffers=buffers):
                spec = all_reduce.AllReduceSpec(all_reduce.RING, num_buffers=buffers)
                replicated, _, _ = train(TWO, spec)
                self.assert_same_weights(replicated, originals(reference))

    def test_a_staged_plan_reduces_only_the_stages_variables(self):
        replicated, skipped, _ = train(TWO, RING, plan=TWO_STAGES, steps=4)
        parameter_server, ps_skipped, _ = train(TWO, plan=TWO_STAGES, steps=4)
        self.assert_same_weights(replicated, originals(parameter_server))
        self.assertEqual(skipped, ps_skipped)
        self.assertIn("replica_1/net/logits/weights/Momentum_head", replicated)
        self.assert_copies_identical(replicated, 2)

    def test_accumulation_equals_twice_the_towers(self):
        accumulated, _, _ = train(TWO, RING, accumulate_steps=2, batch=16)
        four_towers, _, _ = train(FOUR, batch=16)
        # The same 16 rows a step, as 2 micro-batches x 2 towers and as 4 towers.
        self.assert_same_weights(accumulated, originals(four_towers))
        self.assert_copies_identical(accumulated, 2)

    def test_a_non_finite_tower_skips_the_step_on_every_copy(self):
        poisoned = faults.poisoned_on_tower_1_at_step(1)
        replicated, _, losses = train(TWO, RING, loss_scale=64.0, model_fn=poisoned)
        parameter_server, _, _ = train(TWO, loss_scale=64.0, model_fn=poisoned)
        self.assertTrue(np.isfinite(losses[0]).all() and not np.isfinite(losses[1][1]))
        self.assert_same_weights(replicated, originals(parameter_server))
        self.assertEqual(replicated["loss_scale/scale"], 32.0)  # halved once, by the skip
        self.assert_copies_identical(replicated, 2)

    def test_the_check_can_fail(self):
        """Half the batch left out moves the weights far past TOLERANCE."""
        replicated, _, _ = train(TWO, RING)
        half, _, _ = train(["/cpu:0"], batch=4)
        self.assertGreater(np.max(np.abs(half["net/conv/kernel"]
                                         - replicated["net/conv/kernel"])), 1e-3)


def nan_batch(first):
    """testing_utils.numbered_batches whose batch number `first` (1-based) is NaN: a fault
    tied to the data, which a rollback skips."""
    def poison(images, labels, number):
        return tf.where(tf.equal(number, first), images * np.float32("nan"), images), labels
    return testing_utils.numbered_batches(poison)


class RollbackTest(unittest.TestCase):

    def test_a_rollback_fills_every_copy_again(self):
        """--on_nan=rollback restores the variables and fills every device's copy from them:
        the run ends as with the variables on one device (a copy left with the NaN update
        would make every later step NaN)."""
        ends = []
        for mode in (RING, None):
            def build(mode=mode):
                return step_graph.build_train_graph(
                    nan_batch(7), lambda decay: testing_utils.small_conv_model_fn(),
                    testing_utils.optimization(initial_learning_rate=0.01),
                    testing_utils.sharing_of(TWO, mode), 64)
            lines = []
            settings = settings_lib.LoopSettings(
                train_dir=testing_utils.temp_dir("rollback"), max_steps=12,
                save_summaries_steps=0, save_checkpoint_steps=5, on_nan="rollback")
            result = session_loop.run_training(build, testing_utils.cpu_session_config(2),
                                               settings, log=lines.append)
            self.assertEqual(len([line for line in lines if "rolled back" in line]), 1, lines)
            reader = tf.train.load_checkpoint(result.checkpoint)
            ends.append({name: reader.get_tensor(name)
                         for name in reader.get_variable_to_shape_map()})
        self.assertEqual(sorted(ends[0]), sorted(ends[1]))
        for name, value in ends[1].items():
            np.testing.assert_allclose(ends[0][name], value, rtol=0, atol=TOLERANCE,
                                       err_msg=name)


class TinyInceptionTest(unittest.TestCase):
    """Batch norm and the real network: the moving statistics are tower 0's, as with the
    variables on one device."""

    def step(self, spec, compute_dtype=None):
        config = testing_utils.cpu_session_config(2)
        weights = testing_utils.save_initial_weights(TWO, config)
        return testing_utils.tiny_inception_step(TWO, config, checkpoint=weights, steps=2,
                                                 compute_dtype=compute_dtype, all_reduce=spec)

    def check_update_as_with_a_parameter_server(self, dtype):
        replicated = self.step(RING, dtype)
        parameter_server = self.step(None, dtype)
        # The towers' forward and backward passes are the same ops on the same weights; only
        # the two towers' gradient sum runs elsewhere (a ring against add_n on the CPU), a
        # float32 sum of the same two terms: measured bit-identical updates. 1e-6 allows an
        # ulp of the largest update (order 1e-2) after two steps. Each device's weight decay
        # on its own copies matters here: without it the second step's losses differ by 0.08.
        np.testing.assert_allclose(replicated.losses, parameter_server.losses, rtol=0, atol=1e-6)
        self.assertEqual(sorted(replicated.updates), sorted(parameter_server.updates))
        for name, update in parameter_server.updates.items():
            np.testing.assert_allclose(replicated.updates[name], update, rtol=0, atol=1e-6,
                                       err_msg=name)
        moving = [name for name in replicated.variable_devices if "moving_" in name]
        self.assertTrue(moving)
        self.assertFalse([name for name in moving if copies_lib.COPY_PREFIX in name])

    def test_fp32_towers_update_as_with_a_parameter_server(self):
        self.check_update_as_with_a_parameter_server(None)

    def test_bf16_towers_update_as_with_a_parameter_server(self):
        if not hardware.cpu_supports_bf16() and hardware.cpu_supports_bf16(environ={}):
            # TensorFlow trusts the CPU's flags and sends bf16 ops to oneDNN, which aborts.
            self.skipTest(f"ONEDNN_MAX_CPU_ISA={hardware.onednn_isa_cap()} keeps oneDNN from "
                          "this CPU's bf16 instructions")
        self.check_update_as_with_a_parameter_server(tf.bfloat16)


class CheckpointTest(unittest.TestCase):
    """One checkpoint format, whatever --variable_update."""

    def test_a_checkpoint_holds_one_copy_and_resumes_in_either_mode(self):
        spec = all_reduce.AllReduceSpec(all_reduce.RING, num_buffers=2)
        written = {}
        for name, mode in (("replicated", spec), ("parameter_server", None)):
            train_dir = testing_utils.temp_dir(name)
            result = testing_utils.train_small_model(train_dir, 4, save_checkpoint_steps=4,
                                                     all_reduce=mode)
            written[name] = train_dir
            saved = tf.train.load_checkpoint(result.checkpoint).get_variable_to_shape_map()
            self.assertFalse([key for key in saved if copies_lib.COPY_PREFIX in key])
            self.assertIn("net/conv/kernel/RMSProp", saved)
        self.assertEqual(*[sorted(tf.train.load_checkpoint(tf.train.latest_checkpoint(d))
                                  .get_variable_to_shape_map()) for d in written.values()])
        # Each checkpoint resumed in both modes to step 6: the same weights either way. A copy
        # left unfilled (zeros) on device 1 would make the replicated resume differ by far more.
        for name, train_dir in written.items():
            ends = []
            for mode in (spec, None):
                copy = os.path.join(testing_utils.temp_dir("resumed"), "run")
                shutil.copytree(train_dir, copy)
                result = testing_utils.train_small_model(copy, 6, save_checkpoint_steps=6,
                                                         all_reduce=mode)
                self.assertEqual(result.step, 6)
                reader = tf.train.load_checkpoint(result.checkpoint)
                ends.append({key: reader.get_tensor(key)
                             for key in reader.get_variable_to_shape_map()})
            with self.subTest(written_by=name):
                self.assertEqual(sorted(ends[0]), sorted(ends[1]))
                for key, value in ends[1].items():
                    np.testing.assert_allclose(ends[0][key], value, rtol=0, atol=TOLERANCE,
                                               err_msg=key)


if __name__ == "__main__":
    absltest.main()
