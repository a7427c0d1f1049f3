"""Layer-wise adaptive optimizers for large global batches: LARS and LAMB, for the TF1 graphs
the towers build (tf.compat.v1.train optimizers on ref and resource variables).

Neither TensorFlow 2.21 nor tf_keras ships LARS or LAMB for tf.compat.v1.train in graph mode
(tensorflow_addons, which had them, is unmaintained and does not support TF 2.21, and Keras 3's
optimizers do not run in TF1 sessions), so they are written here as subclasses of
MomentumOptimizer and AdamOptimizer, which keep the slots, the beta powers and the naming.

Each variable's step is scaled by a trust ratio, a ratio of norms of that variable alone, so
every layer moves by about the same fraction of its weights whatever its gradient's scale.
Batch-norm parameters and biases are usually left out of the adaptation and of weight decay
(`excluded_from_adaptation`). Norms and trust ratios are computed in float32.
"""

import tensorflow as tf

tf1 = tf.compat.v1

# Last name components of variables kept out of layer adaptation and weight decay: tf-slim's
# batch-norm parameters and statistics, and biases (Keras names them `bias`).
EXCLUDED_NAMES = frozenset({"beta", "gamma", "moving_mean", "moving_variance", "biases", "bias"})
BATCH_NORM_SCOPE = "BatchNorm"
# A low-precision tower reads a variable through a cast named `<last component>_<dtype>`
# (inception/model/mixed_precision.py).
_CAST_SUFFIXES = ("_bfloat16", "_float16")


def excluded_from_adaptation(variable):
    """Whether `variable` is a batch-norm variable or a bias, which LARS and LAMB update without
    trust ratio or weight decay.

    Decided by name alone: the last component is in EXCLUDED_NAMES (after dropping a
    mixed-precision cast's `_bfloat16` / `_float16` suffix), or a component is `BatchNorm`.
    Any prefix (`tower_1/`, `replica_1/`) leaves the answer unchanged.

    Args:
      variable: a tf.Variable, a tensor (e.g. a cast of one), or an op name as a string.
    Returns:
      bool.
    """
    components = _op_name(variable).split("/")
    last = components[-1]
    for suffix in _CAST_SUFFIXES:
        if last.endswith(suffix):
            last = last[:-len(suffix)]
    return last in EXCLUDED_NAMES or BATCH_NORM_SCOPE in components


def _op_name(variable):
    """The op name of a variable or tensor; a string without its `:0` output index."""
    if isinstance(variable, str):
        return variable.split(":")[0]
    return variable.op.name


def _norm(tensor):
    """The L2 norm of `tensor`, a float32 scalar."""
    return tf.norm(tf.reshape(tf.cast(tensor, tf.float32), [-1]))


def _ratio_or_one(numerator, denominator, *norms):
    """numerator / denominator (float32 scalars) where every one of `norms` is positive, else 1.
    divide_no_nan keeps the unselected branch of tf.where finite."""
    positive = tf.reduce_all(tf.stack([norm > 0.0 for norm in norms]))
    return tf.where(positive, tf.math.divide_no_nan(numerator, denominator), 1.0)


def _adapts(exclude, var):
    """Whether `var` gets the trust ratio and weight decay under `exclude` (None: all do)."""
    return exclude is None or not exclude(var)


class _DenseUpdates:
    """The apply methods of a tf1 optimizer whose `_update(grad, var, weights)` builds the
    update of `var` from the dense `grad` and w's value `weights`, for ref and resource
    variables alike; sparse gradients are refused (a trust ratio needs the whole gradient)."""

    def _apply_dense(self, grad, var):
        return self._update(grad, var, var.value())

    def _resource_apply_dense(self, grad, var):
        return self._update(grad, var, var.read_value())

    def _apply_sparse(self, grad, var):
        self._no_sparse()

    def _resource_apply_sparse(self, grad, var, indices):
        self._no_sparse()

    def _no_sparse(self):
        raise NotImplementedError(
            f"{type(self).__name__} takes dense gradients only: its trust ratio needs the norm "
            "of the whole gradient. Convert an IndexedSlices gradient with tf.convert_to_tensor "
            "before apply_gradients.")


class LarsOptimizer(_DenseUpdates, tf1.train.MomentumOptimizer):
    """LARS (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional Networks"),
    as in the MLPerf ResNet-50 reference: momentum SGD with a per-variable trust ratio.

    For a variable w (any shape) with gradient g (same shape) and momentum slot v ("momentum",
    same shape), when w takes part in the adaptation:

        trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)  if ||w|| > 0 and
                ||g|| > 0, else 1
        v <- momentum * v + (learning_rate * trust) * (g + weight_decay * w)
        w <- w - v

    A variable that `exclude_from_adaptation` picks gets plain momentum, without weight decay:
    v <- momentum * v + learning_rate * g; w <- w - v.
    """

    def __init__(self, learning_rate, momentum=0.9, weight_decay=0.0, eta=0.001, epsilon=0.0,
                 exclude_from_adaptation=excluded_from_adaptation, name="LARS"):
        """Args:
          learning_rate: float, scalar tensor, or a callable returning one.
          momentum: float, scalar tensor, or a callable returning one.
          weight_decay: float or scalar tensor; L2 decay added to adapted variables' gradients.
          eta: float, the LARS coefficient (trust ratio scale).
          epsilon: float, added to the trust ratio's denominator.
          exclude_from_adaptation: callable(variable) -> bool, True for variables updated
            without trust ratio and weight decay; None adapts every variable.
          name: the optimizer's name; slots are named `<variable>/<name>`.
        """
        super().__init__(learning_rate, momentum, name=name)
        self._weight_decay = weight_decay
        self._eta = eta
        self._epsilon = epsilon
        self._exclude = exclude_from_adaptation

    def _step(self, grad, var, weights):
        """(learning_rate * trust) * (g + weight_decay * w), or learning_rate * g when `var` is
        excluded; `weights` is w's value."""
        dtype = var.dtype.base_dtype
        learning_rate = tf.cast(self._learning_rate_tensor, dtype)
        if not _adapts(self._exclude, var):
            return learning_rate * grad
        decay = tf.cast(self._weight_decay, tf.float32)
        w_norm, g_norm = _norm(weights), _norm(grad)
        trust = _ratio_or_one(self._eta * w_norm,
                              g_norm + decay * w_norm + self._epsilon, w_norm, g_norm)
        return (learning_rate * tf.cast(trust, dtype)) * (grad + tf.cast(decay, dtype) * weights)

    def _update(self, grad, var, weights):
        """Writes the momentum slot, then subtracts it from `var`; `weights` is w's value."""
        # The new momentum is read by the variable's update, so the slot is written first and w
        # is read (for its norm and decay) before it changes.
        momentum = self.get_slot(var, "momentum")
        new_momentum = (tf.cast(self._momentum_tensor, var.dtype.base_dtype) * momentum
                        + self._step(grad, var, weights))
        momentum_t = tf1.assign(momentum, new_momentum, use_locking=self._use_locking)
        var_t = tf1.assign_sub(var, momentum_t, use_locking=self._use_locking)
        return tf.group(var_t, momentum_t)


class LambOptimizer(_DenseUpdates, tf1.train.AdamOptimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
    minutes"): Adam's direction, plus decoupled weight decay, scaled per variable by a trust
    ratio.

    For a variable w (any shape) with gradient g and Adam's slots m, v (same shape), at step t
    (1 on the first apply_gradients):

        m <- beta1 * m + (1 - beta1) * g;  v <- beta2 * v + (1 - beta2) * g^2
        m_hat = m / (1 - beta1^t);  v_hat = v / (1 - beta2^t)
        u = m_hat / (sqrt(v_hat) + epsilon) + weight_decay * w
        trust = ||w|| / ||u||  if ||w|| > 0 and ||u|| > 0, else 1
        w <- w - learning_rate * trust * u

    A variable that `exclude_from_adaptation` picks gets trust 1 and no weight decay (an Adam
    step with epsilon outside the bias correction). beta1^t and beta2^t are AdamOptimizer's
    `beta1_power` / `beta2_power`, which start at beta^1 and are multiplied by beta in
    `_finish`, after every variable's update: read inside the update they are beta^t.
    """

    def __init__(self, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.0,
                 exclude_from_adaptation=excluded_from_adaptation, name="LAMB"):
        """Args:
          learning_rate: float, scalar tensor, or a callable returning one.
          beta1, beta2: floats, the decay rates of the first and second moments.
          epsilon: float, added to sqrt(v_hat).
          weight_decay: float or scalar tensor; decoupled decay added to adapted variables' u.
          exclude_from_adaptation: callable(variable) -> bool, True for variables updated
            without trust ratio and weight decay; None adapts every variable.
          name: the optimizer's name; slots are named `<variable>/<name>`, the beta powers
            `beta1_power` / `beta2_power`.
        """
        super().__init__(learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon, name=name)
        self._weight_decay = weight_decay
        self._exclude = exclude_from_adaptation

    def _direction(self, m_t, v_t, var, weights, adapted):
        """u: the bias-corrected Adam direction, plus weight_decay * w where `adapted`."""
        dtype = var.dtype.base_dtype
        beta1_power, beta2_power = self._get_beta_accumulators()
        m_hat = m_t / (1.0 - tf.cast(beta1_power, dtype))
        v_hat = v_t / (1.0 - tf.cast(beta2_power, dtype))
        direction = m_hat / (tf.sqrt(v_hat) + tf.cast(self._epsilon_t, dtype))
        if not adapted:
            return direction
        return direction + tf.cast(self._weight_decay, dtype) * weights

    def _update(self, grad, var, weights):
        """Writes the slots m and v, then steps `var` by u; `weights` is w's value."""
        dtype = var.dtype.base_dtype
        beta1, beta2 = tf.cast(self._beta1_t, dtype), tf.cast(self._beta2_t, dtype)
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_t = tf1.assign(m, beta1 * m + (1.0 - beta1) * grad, use_locking=self._use_locking)
        v_t = tf1.assign(v, beta2 * v + (1.0 - beta2) * tf.square(grad),
                         use_locking=self._use_locking)
        adapted = _adapts(self._exclude, var)
        direction = self._direction(m_t, v_t, var, weights, adapted)
        trust = tf.constant(1.0)
        if adapted:
            w_norm, u_norm = _norm(weights), _norm(direction)
            trust = _ratio_or_one(w_norm, u_norm, w_norm, u_norm)
        step = tf.cast(self._lr_t, dtype) * tf.cast(trust, dtype) * direction
        var_t = tf1.assign_sub(var, step, use_locking=self._use_locking)
        return tf.group(var_t, m_t, v_t)
