"""LARS and LAMB (layerwise.py) against their updates written out here in NumPy (float64), step
by step on ref and resource variables, with and without excluded variables, on zero weights
and zero gradients; and which tf-slim variable names are kept out of the adaptation."""

import unittest

import numpy as np
import tensorflow as tf
import tf_slim as slim
from absl.testing import absltest

from inception.config import plans
from inception.step import layerwise
from inception.step import optimizers
from inception.step import step_graph
from tests import testing_utils

tf1 = tf.compat.v1
STEPS = 5
# float32 (machine epsilon 1.2e-7) against float64: a step is some twenty operations, two norms
# over up to 72 elements and a division, and five steps compound them; measured, every array is
# within 6e-7 of the reference, relative to its largest element (an element near zero is off by
# ulps of the large operands it was computed from, hence an absolute term scaled by the array).
# TOLERANCE 1e-5 keeps a margin of over ten; a wrong formula (no trust ratio, bias correction a
# step off, decay on an excluded variable) is off by 1e-3 to 1 (assert_steps_differ below).
TOLERANCE = 1e-5
LARS = dict(learning_rate=0.5, momentum=0.9, weight_decay=0.01, eta=0.1, epsilon=0.1)
LAMB = dict(learning_rate=0.05, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.01)
SHAPES = {"net/conv/weights": (3, 3, 2, 4), "net/dense/weights": (6, 3),
          "net/dense/biases": (3,), "net/BatchNorm/beta": (4,), "net/zero/weights": (2, 5)}
EXCLUDED = {"net/dense/biases", "net/BatchNorm/beta"}
ZERO_GRADIENT = ("net/dense/weights", 2)  # this variable's gradient is zero at this step


def initial_values(seed=0):
    """{name: float32 array} of SHAPES; `net/zero/weights` starts at zero (||w|| = 0)."""
    generator = np.random.default_rng(seed)
    values = {name: generator.normal(size=shape).astype(np.float32)
              for name, shape in SHAPES.items()}
    values["net/zero/weights"][...] = 0.0
    return values


def gradient_steps(seed=1):
    """STEPS of {name: float32 gradient}, one of them zero (ZERO_GRADIENT)."""
    generator = np.random.default_rng(seed)
    steps = [{name: generator.normal(size=shape).astype(np.float32)
              for name, shape in SHAPES.items()} for _ in range(STEPS)]
    name, step = ZERO_GRADIENT
    steps[step][name][...] = 0.0
    return steps


def lars_step(state, g, adapted, learning_rate, momentum, weight_decay, eta, epsilon):
    """One LARS step in float64: state {"w", "momentum"} -> the new state."""
    w, v = state["w"], state["momentum"]
    if adapted:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        trust = (eta * w_norm / (g_norm + weight_decay * w_norm + epsilon)
                 if w_norm > 0 and g_norm > 0 else 1.0)
        v = momentum * v + learning_rate * trust * (g + weight_decay * w)
    else:
        v = momentum * v + learning_rate * g
    return {"w": w - v, "momentum": v}


def lamb_step(state, g, adapted, learning_rate, beta1, beta2, epsilon, weight_decay):
    """One LAMB step in float64: state {"w", "m", "v", "t"} -> the new state (t counts from 1)."""
    w, t = state["w"], state["t"] + 1
    m = beta1 * state["m"] + (1 - beta1) * g
    v = beta2 * state["v"] + (1 - beta2) * g * g
    u = (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + epsilon)
    trust = 1.0
    if adapted:
        u = u + weight_decay * w
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(u)
        trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return {"w": w - learning_rate * trust * u, "m": m, "v": v, "t": t}


def reference(step, hyper, slots, adapted, start=0):
    """What `step` (lars_step or lamb_step) makes of initial_values() under gradient_steps():
    per step, {name: w} and {name/slot: slot value}. `adapted(name)` says who is adapted;
    LAMB's first step is t = start + 1."""
    # The hyperparameters as float32 holds them: 1 - float32(0.999) is 1.3e-5 off 0.001.
    hyper = {key: float(np.float32(value)) for key, value in hyper.items()}
    states = {name: dict({slot: np.zeros(value.shape) for slot in slots}, w=value.astype(float),
                         t=start) for name, value in initial_values().items()}
    history = []
    for gradients in gradient_steps():
        states = {name: step(state, gradients[name].astype(float), adapted(name), **hyper)
                  for name, state in states.items()}
        history.append(flatten(states, slots))
    return history


def flatten(states, slots):
    """{name: w} and {name/slot: slot value} of reference states {name: state}."""
    values = {name: state["w"] for name, state in states.items()}
    values.update({f"{name}/{slot}": state[slot] for name, state in states.items()
                   for slot in slots})
    return values


def train(test, make_optimizer, slots, use_resource):
    """Runs the optimizer on initial_values() with gradient_steps() fed in a TF1 session;
    per step, {name: w} and {name/slot: slot value} like `reference`."""
    with tf.Graph().as_default():
        variables = {name: tf1.get_variable(name, initializer=tf.constant(value),
                                            use_resource=use_resource)
                     for name, value in initial_values().items()}
        kind = "ResourceVariable" if use_resource else "RefVariable"
        test.assertEqual({type(v).__name__ for v in variables.values()}, {kind})
        feeds = {name: tf1.placeholder(tf.float32, shape) for name, shape in SHAPES.items()}
        optimizer = make_optimizer()
        train_op = optimizer.apply_gradients([(feeds[name], variables[name]) for name in SHAPES])
        fetch = dict(variables)
        fetch.update({f"{name}/{slot}": optimizer.get_slot(variable, slot)
                      for name, variable in variables.items() for slot in slots})
        history = []
        with tf1.Session(config=testing_utils.cpu_session_config(1)) as session:
            session.run(tf1.global_variables_initializer())
            for gradients in gradient_steps():
                session.run(train_op, {feeds[name]: g for name, g in gradients.items()})
                history.append(session.run(fetch))
        return history


def not_excluded(name):
    """The reference's adaptation under the default exclusion (EXCLUDED by name)."""
    return name not in EXCLUDED


def everything(name):
    """The reference's adaptation under exclude_from_adaptation=None."""
    del name
    return True


def close(actual, expected):
    """Whether `actual` is `expected` within TOLERANCE, relative to each element and to the
    array's largest element."""
    scale = np.abs(expected).max()
    return np.allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE * scale)


class LayerwiseTestCase(unittest.TestCase):
    """Assertions on histories from `train` and `reference`."""

    def assert_steps_close(self, actual, expected):
        self.assertEqual(len(actual), len(expected))
        for step, (got, want) in enumerate(zip(actual, expected)):
            self.assertEqual(sorted(got), sorted(want))
            for name in want:
                self.assertTrue(close(got[name], want[name]),
                                f"{name} after step {step + 1}: {got[name]} != {want[name]}")

    def assert_close(self, actual, expected, what):
        self.assertTrue(close(actual, expected), f"{what}: {actual} != {expected}")

    def assert_steps_differ(self, actual, expected, name):
        """Some step's `name` is outside the tolerance: the comparison could fail."""
        self.assertFalse(all(close(got[name], want[name])
                             for got, want in zip(actual, expected)), name)


class LarsTest(LayerwiseTestCase):
    """LarsOptimizer against lars_step."""

    def run_lars(self, use_resource, **overrides):
        return train(self, lambda: layerwise.LarsOptimizer(**dict(LARS, **overrides)),
                     ["momentum"], use_resource)

    def test_matches_numpy_on_ref_variables(self):
        self.assert_steps_close(self.run_lars(False),
                                reference(lars_step, LARS, ["momentum"], not_excluded))

    def test_matches_numpy_on_resource_variables(self):
        self.assert_steps_close(self.run_lars(True),
                                reference(lars_step, LARS, ["momentum"], not_excluded))

    def test_without_exclusion_every_variable_is_adapted(self):
        actual = self.run_lars(True, exclude_from_adaptation=None)
        self.assert_steps_close(actual, reference(lars_step, LARS, ["momentum"], everything))
        wrong = reference(lars_step, LARS, ["momentum"], not_excluded)
        for name in EXCLUDED:
            self.assert_steps_differ(actual, wrong, name)

    def test_trust_ratio_is_one_for_zero_weights_and_zero_gradients(self):
        actual = self.run_lars(False)
        # w = 0: v <- learning_rate * 1 * g (its decay term is zero too).
        self.assert_close(actual[0]["net/zero/weights"],
                          -LARS["learning_rate"] * gradient_steps()[0]["net/zero/weights"],
                          "zero weights")
        name, step = ZERO_GRADIENT
        before = actual[step - 1]
        # g = 0: v <- momentum * v + learning_rate * 1 * weight_decay * w.
        want = (LARS["momentum"] * before[f"{name}/momentum"]
                + LARS["learning_rate"] * LARS["weight_decay"] * before[name])
        self.assert_close(actual[step][f"{name}/momentum"], want, "zero gradient")

    def test_trust_ratio_makes_it_differ_from_plain_momentum(self):
        actual = self.run_lars(False)
        plain = reference(lars_step, LARS, ["momentum"], lambda name: False)
        for name in ("net/conv/weights", "net/dense/weights", "net/conv/weights/momentum"):
            self.assert_steps_differ(actual, plain, name)
        for name in EXCLUDED:  # excluded variables are plain momentum
            self.assert_close(actual[-1][name], plain[-1][name], name)

    def test_slots_are_named_after_the_optimizer_and_sparse_gradients_refused(self):
        with tf.Graph().as_default():
            weights = tf1.get_variable("embedding", [4, 2], use_resource=True)
            optimizer = layerwise.LarsOptimizer(0.1, name="LARS_stage")
            optimizer.apply_gradients([(tf.ones([4, 2]), weights)])
            self.assertEqual(optimizer.get_slot(weights, "momentum").op.name,
                             "embedding/LARS_stage")
            sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([4, 2]))
            with self.assertRaisesRegex(NotImplementedError, "dense gradients only"):
                layerwise.LarsOptimizer(0.1).apply_gradients([(sparse, weights)])


class LambTest(LayerwiseTestCase):
    """LambOptimizer against lamb_step, and against AdamOptimizer where they agree."""
    SLOTS = ["m", "v"]

    def run_lamb(self, use_resource, **overrides):
        return train(self, lambda: layerwise.LambOptimizer(**dict(LAMB, **overrides)),
                     self.SLOTS, use_resource)

    def test_matches_numpy_on_ref_variables(self):
        self.assert_steps_close(self.run_lamb(False),
                                reference(lamb_step, LAMB, self.SLOTS, not_excluded))

    def test_matches_numpy_on_resource_variables(self):
        self.assert_steps_close(self.run_lamb(True),
                                reference(lamb_step, LAMB, self.SLOTS, not_excluded))

    def test_without_exclusion_every_variable_is_adapted(self):
        actual = self.run_lamb(False, exclude_from_adaptation=None)
        self.assert_steps_close(actual, reference(lamb_step, LAMB, self.SLOTS, everything))
        wrong = reference(lamb_step, LAMB, self.SLOTS, not_excluded)
        for name in EXCLUDED:
            self.assert_steps_differ(actual, wrong, name)

    def test_zero_weights_take_an_adam_step(self):
        actual = self.run_lamb(True)
        g = gradient_steps()[0]["net/zero/weights"].astype(float)
        # Step 1: m_hat = g, v_hat = g^2, u = g / (|g| + epsilon), trust 1 (||w|| = 0).
        want = -LAMB["learning_rate"] * g / (np.abs(g) + LAMB["epsilon"])
        self.assert_close(actual[0]["net/zero/weights"], want, "zero weights")

    def test_trust_ratio_and_bias_correction_are_needed_to_match(self):
        actual = self.run_lamb(True)
        no_trust = reference(lamb_step, LAMB, self.SLOTS, lambda name: False)
        a_step_late = reference(lamb_step, LAMB, self.SLOTS, not_excluded, start=1)
        for name in ("net/conv/weights", "net/dense/weights"):
            self.assert_steps_differ(actual, no_trust, name)
        for name in ("net/dense/biases", "net/zero/weights"):
            self.assert_steps_differ(actual, a_step_late, name)

    def test_excluded_variables_step_like_adam_with_its_beta_powers(self):
        """With epsilon 0, an excluded variable's step is AdamOptimizer's exactly (Adam's
        epsilon sits outside the bias correction): the beta powers read in the update are
        beta^t with t = 1 on the first step, as LAMB's bias correction needs."""
        lamb = self.run_lamb(False, epsilon=0.0, exclude_from_adaptation=lambda v: True)
        adam = train(self, lambda: tf1.train.AdamOptimizer(LAMB["learning_rate"], epsilon=0.0),
                     self.SLOTS, False)
        self.assert_steps_close(lamb, adam)

    def test_sparse_gradients_are_refused(self):
        with tf.Graph().as_default():
            weights = tf1.get_variable("embedding", [4, 2], use_resource=False)
            sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([4, 2]))
            with self.assertRaisesRegex(NotImplementedError, "LambOptimizer"):
                layerwise.LambOptimizer(0.1).apply_gradients([(sparse, weights)])


class ExclusionTest(unittest.TestCase):
    """excluded_from_adaptation on names and on the variables tf-slim creates."""

    def test_batch_norm_variables_and_biases_by_their_tf_slim_names(self):
        for name in ("InceptionV3/Conv2d_1a_3x3/BatchNorm/beta",
                     "InceptionV3/Conv2d_1a_3x3/BatchNorm/moving_mean",
                     "InceptionV3/Conv2d_1a_3x3/BatchNorm/moving_variance",
                     "InceptionV3/Conv2d_1a_3x3/BatchNorm/renorm_mean",
                     "InceptionV3/Logits/Conv2d_1c_1x1/biases",
                     "tower_1/InceptionV3/Conv2d_1a_3x3/BatchNorm/beta",
                     "replica_1/InceptionV3/Logits/Conv2d_1c_1x1/biases",
                     "InceptionV3/Logits/Conv2d_1c_1x1/biases_bfloat16",
                     "dense/bias:0", "gamma"):
            self.assertTrue(layerwise.excluded_from_adaptation(name), name)
        for name in ("InceptionV3/Conv2d_1a_3x3/weights",
                     "tower_1/InceptionV3/Logits/Conv2d_1c_1x1/weights",
                     "InceptionV3/Mixed_5b/Branch_1/Conv2d_0b_5x5/weights_float16",
                     "net/alphabeta", "net/beta/weights", "net/biases/kernel"):
            self.assertFalse(layerwise.excluded_from_adaptation(name), name)

    def test_variables_that_tf_slim_creates(self):
        with tf.Graph().as_default():
            images = tf.zeros([1, 8, 8, 3])
            with tf1.variable_scope("InceptionV3"):
                net = slim.conv2d(images, 4, [3, 3], scope="Conv2d_1a_3x3",
                                  normalizer_fn=slim.batch_norm,
                                  normalizer_params={"scale": True})
                slim.conv2d(net, 5, [1, 1], scope="Logits/Conv2d_1c_1x1")
            with tf.name_scope("tower_1"):
                cast = tf.cast(tf1.global_variables()[-1], tf.bfloat16, name="biases_bfloat16")
            excluded = sorted(v.op.name for v in tf1.global_variables()
                              if layerwise.excluded_from_adaptation(v))
            self.assertTrue(layerwise.excluded_from_adaptation(cast))
        self.assertEqual(excluded, ["InceptionV3/Conv2d_1a_3x3/BatchNorm/beta",
                                    "InceptionV3/Conv2d_1a_3x3/BatchNorm/gamma",
                                    "InceptionV3/Conv2d_1a_3x3/BatchNorm/moving_mean",
                                    "InceptionV3/Conv2d_1a_3x3/BatchNorm/moving_variance",
                                    "InceptionV3/Logits/Conv2d_1c_1x1/biases"])


def step_graph_run(devices, optimizer, steps=3, adapt=False):
    """`steps` updates of the small conv model (L2 weight decay in its loss) by `optimizer`
    over `devices`; returns (the first step's mean_loss, the mean of the towers' data losses
    that step, every trainable variable's value after the steps)."""
    optimization = testing_utils.optimization(
        initial_learning_rate=0.5, optimizer=optimizer, adapt_batch_norm_and_biases=adapt)
    with tf.Graph().as_default():
        built = step_graph.build_train_graph(
            testing_utils.synthetic_input(8), lambda decay: testing_utils.small_conv_model_fn(),
            optimization, testing_utils.sharing_of(devices), 64)
        stage = built.stages[0]
        data_loss = tf.reduce_mean([tower.data_loss() for tower in built.towers])
        with tf1.Session(config=testing_utils.cpu_session_config(2)) as session:
            session.run([tf1.global_variables_initializer(), built.input_initializer])
            _, mean_loss, data = session.run([stage.train_op, stage.mean_loss, data_loss])
            for _ in range(steps - 1):
                session.run(stage.train_op)
            return mean_loss, data, session.run(
                {v.op.name: v for v in tf1.trainable_variables()})


class InTheStepGraphTest(unittest.TestCase):
    """--optimizer=lars / lamb in the training graph: 2 towers update as one device does, and
    their own weight decay replaces the loss's L2 term."""

    def test_two_towers_equal_one_device_and_the_loss_has_no_l2_term(self):
        for optimizer in ("lars", "lamb"):
            with self.subTest(optimizer=optimizer):
                one = step_graph_run(["/cpu:0"], optimizer)
                two = step_graph_run(["/cpu:0", "/cpu:1"], optimizer)
                for name, value in one[2].items():  # float32 sums in another order: ulps
                    np.testing.assert_allclose(two[2][name], value, rtol=0, atol=2e-6,
                                               err_msg=name)
                self.assertAlmostEqual(one[0], one[1], places=6)
        with_l2 = step_graph_run(["/cpu:0"], "momentum")
        self.assertGreater(with_l2[0] - with_l2[1], 1e-4)  # the model's L2 term is there

    def test_the_exclusion_can_be_turned_off(self):
        stage = plans.Stage("train", optimizer="lars")
        self.assertIs(optimizers.make_optimizer(stage, 0.1, True)._exclude,
                      layerwise.excluded_from_adaptation)
        self.assertIsNone(optimizers.make_optimizer(stage, 0.1, True, adapt_all=True)._exclude)
        lamb = optimizers.make_optimizer(plans.Stage("train", optimizer="lamb"), 0.1, False)
        self.assertIsInstance(lamb, layerwise.LambOptimizer)
        self.assertEqual(lamb.get_name(), "LAMB_train")


if __name__ == "__main__":
    absltest.main()
