"""Learning-rate schedules: each kind's values at given steps against its formula written out
here, a plan stage's own schedule, and the `learning_rate` scalar of the built graph."""

import math
import unittest

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from inception.config import plans
from inception.step import schedules
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
# float32 arithmetic (machine epsilon 1.2e-7) of a few operations against float64 formulas:
# a few ulps; a wrong formula (a step off, a missing factor) is off by 1e-3 or more.
RTOL = 1e-6
ATOL = 1e-7  # cosine's zero at the end is cos(pi) + 1 in float32: about 1e-8, not 0


def rates(schedule, steps):
    """The schedule's tensor at each of `steps`."""
    with tf.Graph().as_default():
        step = tf1.placeholder(tf.int64, [])
        rate = schedules.rate_tensor(schedule, step)
        with tf1.Session() as session:
            return [float(session.run(rate, {step: value})) for value in steps]


class ScheduleValuesTest(unittest.TestCase):

    def test_cosine_falls_from_the_rate_to_zero_at_the_end_after_the_warm_up(self):
        schedule = schedules.Schedule("cosine", 0.4, end_step=110, warmup_steps=10)
        steps = [0, 4, 9, 10, 35, 60, 85, 109, 110, 150]

        def expected(step):
            warm = min(1.0, (step + 1) / 10)
            progress = min(1.0, max(0.0, (step - 10) / 100))
            return 0.4 * warm * (1 + math.cos(math.pi * progress)) / 2
        np.testing.assert_allclose(rates(schedule, steps), [expected(s) for s in steps],
                                   rtol=RTOL, atol=ATOL)
        self.assertAlmostEqual(rates(schedule, [60])[0], 0.2, places=6)  # halfway: half
        self.assertLess(rates(schedule, [110])[0], 1e-7)

    def test_polynomial_falls_as_the_square_of_what_is_left_after_the_warm_up(self):
        schedule = schedules.Schedule("polynomial", 0.4, end_step=110, warmup_steps=10)
        steps = [0, 9, 10, 35, 60, 109, 110, 150]

        def expected(step):
            warm = min(1.0, (step + 1) / 10)
            left = 1.0 - min(1.0, max(0.0, (step - 10) / 100))
            return 0.4 * warm * left ** 2
        np.testing.assert_allclose(rates(schedule, steps), [expected(s) for s in steps],
                                   rtol=RTOL, atol=ATOL)
        self.assertAlmostEqual(rates(schedule, [60])[0], 0.1, places=6)  # halfway: a quarter

    def test_warm_up_in_epochs_is_those_epochs_updates(self):
        optimization = testing_utils.optimization(warmup_epochs=2.5, warmup_steps=0)
        self.assertEqual(schedules.run_schedule(optimization, 8, None).warmup_steps, 20)
        self.assertEqual(schedules.run_schedule(optimization, 0.1, None).warmup_steps, 1)
        by_steps = testing_utils.optimization(warmup_steps=7)
        self.assertEqual(schedules.run_schedule(by_steps, 8, None).warmup_steps, 7)

    def test_constant_keeps_the_rate_after_its_warm_up(self):
        schedule = schedules.Schedule("constant", 0.3, warmup_steps=3)
        np.testing.assert_allclose(rates(schedule, [0, 1, 2, 3, 1000]),
                                   [0.1, 0.2, 0.3, 0.3, 0.3], rtol=RTOL)

    def test_exponential_is_the_original_staircase(self):
        schedule = schedules.Schedule("exponential", 0.1, decay_steps=20, decay_factor=0.16)
        np.testing.assert_allclose(rates(schedule, [0, 19, 20, 39, 40]),
                                   [0.1, 0.1, 0.016, 0.016, 0.1 * 0.16 ** 2], rtol=RTOL)

    def test_a_schedule_counts_from_its_start_step(self):
        schedule = schedules.Schedule("constant", 0.2, start_step=10, warmup_steps=4)
        # Steps 10-13 warm up from the start step: 0.2 x (step - 10 + 1) / 4.
        np.testing.assert_allclose(rates(schedule, [10, 11, 12, 13, 14, 50]),
                                   [0.05, 0.1, 0.15, 0.2, 0.2, 0.2], rtol=RTOL)
        decaying = schedules.Schedule("exponential", 0.1, start_step=30, decay_steps=7,
                                      decay_factor=0.5)
        np.testing.assert_allclose(rates(decaying, [30, 36, 37, 44]), [0.1, 0.1, 0.05, 0.025],
                                   rtol=RTOL)

    def test_polynomial_without_an_end_is_refused(self):
        with self.assertRaisesRegex(ValueError, "polynomial schedule needs its end step"):
            schedules.Schedule("polynomial", 0.1)

    def test_cosine_without_an_end_is_refused(self):
        with self.assertRaisesRegex(ValueError, "max_steps"):
            schedules.Schedule("cosine", 0.1)


class StageScheduleTest(unittest.TestCase):
    PLAN = plans.TrainingPlan((
        plans.Stage("head", steps=20, learning_rate=0.1),
        plans.Stage("middle", steps=40, learning_rate_schedule="cosine"),
        plans.Stage("all", learning_rate=0.05, learning_rate_schedule="cosine"))).validate()
    RUN = schedules.Schedule("exponential", 0.01, end_step=160, decay_steps=1000)

    def test_each_stage_spans_its_own_steps(self):
        head = schedules.stage_schedule(self.PLAN, 0, self.RUN, 160)
        middle = schedules.stage_schedule(self.PLAN, 1, self.RUN, 160)
        last = schedules.stage_schedule(self.PLAN, 2, self.RUN, 160)
        self.assertEqual((head.kind, head.initial_rate), ("constant", 0.1))
        self.assertEqual((middle.kind, middle.initial_rate, middle.start_step, middle.end_step),
                         ("cosine", 0.01, 20, 60))
        self.assertEqual((last.initial_rate, last.start_step, last.end_step), (0.05, 60, 160))
        np.testing.assert_allclose(rates(middle, [20, 40, 60]), [0.01, 0.005, 0.0],
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(rates(last, [60, 110, 160]), [0.05, 0.025, 0.0],
                                   rtol=RTOL, atol=ATOL)

    def test_a_stage_naming_nothing_follows_the_run(self):
        plan = plans.TrainingPlan((plans.Stage("train"),))
        self.assertIsNone(schedules.stage_schedule(plan, 0, self.RUN, 160))

    def test_an_unknown_schedule_is_a_plan_error(self):
        with self.assertRaisesRegex(plans.PlanError, "learning_rate_schedule"):
            plans.TrainingPlan((plans.Stage("a", learning_rate_schedule="linear"),)).validate()


class GraphScheduleTest(unittest.TestCase):

    def test_the_learning_rate_tensor_of_the_graph_follows_the_cosine(self):
        optimization = testing_utils.optimization(initial_learning_rate=0.2,
                                                  learning_rate_schedule="cosine",
                                                  warmup_steps=0, optimizer="sgd")
        with tf.Graph().as_default():
            built = step_graph.build_train_graph(
                testing_utils.synthetic_input(8), lambda decay: testing_utils.small_conv_model_fn(),
                optimization, testing_utils.sharing_of(["/cpu:0", "/cpu:1"]), 64,
                step_graph.StepOptions(max_steps=40))
            rate = built.stages[0].learning_rate
            with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
                session.run(tf1.global_variables_initializer())
                values = []
                for step in (0, 20, 40):
                    session.run(built.global_step.assign(step))
                    values.append(session.run(rate))
        np.testing.assert_allclose(values, [0.2, 0.1, 0.0], rtol=RTOL, atol=ATOL)


if __name__ == "__main__":
    absltest.main()
