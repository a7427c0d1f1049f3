"""What a training plan's stages (plans.py) build: the variables each trains, and its
optimizer (TensorFlow's, or LARS and LAMB: layerwise.py).

Variables are selected by *variable* scope (`InceptionV3/Logits`), which names them the same
for any number of towers; a tower's name scope (`tower_1/...`) names ops, never variables.
"""

import tensorflow as tf

from inception.config import recipe
from inception.config.plans import PlanError
from inception.parallel import towers
from inception.step import layerwise

tf1 = tf.compat.v1


def select_variables(stage, trainable):
    """The trainable variables of `stage`; raises PlanError for a scope that matches nothing.

    Args:
      trainable: list of tf.Variable to choose from.
    """
    if not stage.scopes:
        return list(trainable)
    selected = []
    for scope in stage.scopes:
        matches = towers.variables_in_scopes([scope], trainable)
        if not matches:
            hint = (" Variables are named by variable scope, not by tower: drop the "
                    "'tower_N/' prefix." if scope.startswith("tower_") else "")
            example = trainable[0].op.name if trainable else "none"
            raise PlanError(f"stage {stage.name!r}: scope {scope!r} matches no trainable "
                            f"variable (they look like {example!r}).{hint}")
        selected.extend(v for v in matches if v not in selected)
    return selected


def make_optimizer(stage, learning_rate, single_stage, adapt_all=False):
    """The stage's optimizer. Its slot variables are named after the stage (so each stage keeps
    its own), except in a one-stage plan, which keeps the original names (`.../RMSProp`).
    adapt_all: LARS and LAMB give batch-norm variables and biases the trust ratio and weight
    decay too (by default they step without: layerwise.excluded_from_adaptation)."""
    suffix = "" if single_stage else f"_{stage.name}"
    exclude = None if adapt_all else layerwise.excluded_from_adaptation
    if stage.optimizer == "lars":
        return layerwise.LarsOptimizer(learning_rate, recipe.MOMENTUM, recipe.LARS_WEIGHT_DECAY,
                                       recipe.LARS_ETA, exclude_from_adaptation=exclude,
                                       name="LARS" + suffix)
    if stage.optimizer == "lamb":
        return layerwise.LambOptimizer(learning_rate, epsilon=recipe.LAMB_EPSILON,
                                       weight_decay=recipe.LAMB_WEIGHT_DECAY,
                                       exclude_from_adaptation=exclude, name="LAMB" + suffix)
    if stage.optimizer == "rmsprop":
        return tf1.train.RMSPropOptimizer(learning_rate, decay=recipe.RMSPROP_DECAY,
                                          momentum=recipe.RMSPROP_MOMENTUM,
                                          epsilon=recipe.RMSPROP_EPSILON,
                                          name="RMSProp" + suffix)
    if stage.optimizer == "momentum":
        return tf1.train.MomentumOptimizer(learning_rate, recipe.MOMENTUM,
                                           name="Momentum" + suffix)
    if stage.optimizer == "adam":
        return tf1.train.AdamOptimizer(learning_rate, name="Adam" + suffix)
    if stage.optimizer == "sgd":
        return tf1.train.GradientDescentOptimizer(learning_rate, name="GradientDescent" + suffix)
    raise PlanError(f"stage {stage.name!r} has no optimizer; fill it with "
                    "TrainingPlan.with_optimizer before building.")
