"""Inception v3 from tf_slim.nets, and what a tower of any network (model/registry.py) shares:
its classification loss, Mixup/CutMix and the seeds of its draws (make_model_fn).

The model is the original's (its constants: config/recipe.py): label smoothing on the main
logits, the auxiliary head's loss weighted, L2 weight decay collected once as regularization
(towers.py adds it). With Mixup or CutMix each tower mixes its own batch before the network,
and the loss takes the mixed labels.
One change in how it is built, not in what it computes: dropout is a mask multiply (see
dropout_as_mask_multiply).
"""

import contextlib
import dataclasses
import itertools

import tensorflow as tf

from tf_slim.layers import layers as slim_layers
from tf_slim.layers import utils as slim_utils
from tf_slim.nets import inception_v3

from inception.config import recipe
from inception.config.rules import MIN_AUX_IMAGE_SIZE
from inception.inputs import mixing
from inception.model import mixed_precision
from inception.model.slim_compat import tf_slim as slim
from inception.parallel import towers

MODEL_SCOPE = "InceptionV3"
HEAD_SCOPES = (f"{MODEL_SCOPE}/Logits", f"{MODEL_SCOPE}/AuxLogits")  # what fine-tuning starts afresh
MIX_STREAMS = 4096  # seeds per step for Mixup/CutMix: one per tower and micro-batch
DROPOUT_STREAM = 1  # folded into a tower's seed for its dropout masks


def has_aux_head(image_size):
    """Whether the auxiliary head fits: its 5x5 pooling needs Mixed_6e to be 5x5 or larger."""
    return image_size >= MIN_AUX_IMAGE_SIZE


def without_background(logits):
    """`logits` (float [N, classes]) with the background's (label 0) at the lowest finite value
    (tf.math.in_top_k counts nothing in a row holding an infinity): what predictions rank
    (precision, the top classes shown). No data set here has an image of label 0, so no user
    sees it predicted; the loss, the model and its exported logits keep every logit as it is."""
    hidden = tf.fill(tf.shape(logits[:, :1]), tf.constant(logits.dtype.min, logits.dtype))
    return tf.concat([hidden, logits[:, 1:]], axis=1)


# tf-slim's layers are TensorFlow's legacy layers, which ask autograph at every call whether to
# rewrite their `call`; with autograph off while the network is built, they call it as it is
# (the same ops, a few percent of a tower's build).
@tf.autograph.experimental.do_not_convert
def inception_logits(images, model, is_training, batch_norm_decay=recipe.BATCH_NORM_DECAY,
                     dropout_seed=None, batch_norm=None):
    """Builds Inception v3 on `images` under variable scope `InceptionV3`.

    Args:
      images: float32 [batch, size, size, 3] in [-1, 1].
      model: settings.ModelSettings, resolved (num_classes and image_size set).
      is_training: Python bool; batch norm uses batch statistics and dropout is on when True.
      batch_norm_decay: float or scalar float32 tensor, decay of the moving statistics.
      dropout_seed: int64 [2]: dropout's masks drawn statelessly from it (a resumed run draws
        the same); None: TensorFlow's stateful draws.
      batch_norm: synced_batch_norm.TowerStatistics whose batch norm every layer uses (training
        only: --sync_batch_norm); None: tf-slim's, on this tower's batch.

    Returns:
      (logits, aux_logits): float32 [batch, num_classes]; aux_logits is None when the image is
      too small for the auxiliary head.
    """
    arg_scope = inception_v3.inception_v3_arg_scope(
        weight_decay=recipe.WEIGHT_DECAY, batch_norm_decay=batch_norm_decay)
    normalizer = ({} if batch_norm is None else {"normalizer_fn": batch_norm.batch_norm})
    with slim.arg_scope(arg_scope), slim.arg_scope([slim.conv2d], **normalizer), \
            dropout_as_mask_multiply(dropout_seed), variables_hashed_by_identity():
        logits, end_points = inception_v3.inception_v3(
            images, num_classes=model.num_classes, is_training=is_training,
            depth_multiplier=model.depth_multiplier,
            create_aux_logits=has_aux_head(model.image_size), scope=MODEL_SCOPE)
    return logits, end_points.get("AuxLogits")


@contextlib.contextmanager
def variables_hashed_by_identity():
    """While building the network: tensors and variables compare and hash by identity without
    asking TensorFlow whether it executes eagerly. tf-slim's layers (TensorFlow's legacy layers)
    put every global variable into a set at each new weight, and each hash asked that question
    (an init_scope): quadratic in the variables, about a tenth of building a tower. In graph
    mode the answer is always no, so identity is what they compared by anyway; TensorFlow 2's
    default (equality by value in eager code) is back on afterwards."""
    tf.compat.v1.disable_tensor_equality()
    try:
        yield
    finally:
        tf.compat.v1.enable_tensor_equality()


@contextlib.contextmanager
def dropout_as_mask_multiply(stateless_seed=None):
    """While building the network: tf-slim's dropout as a multiply by a scaled 0/1 mask instead
    of TensorFlow's `SelectV2(keep, x, 0)`, its mask drawn from `stateless_seed` (int64 [2])
    when given.

    Grappler's layout optimizer cannot permute that scalar 0 when the dropout input is 4-D
    (Inception's Logits/Dropout_1b), logs "layout failed ... SelectV2" and then skips the
    NHWC->NCHW conversion of the whole GPU graph (seen on an H200 with TF 2.21). Same
    semantics: in training each element is kept with probability keep_prob and scaled by
    1 / keep_prob; otherwise the input passes through. tf_slim.nets.inception_v3 calls the
    module attribute and takes no dropout function, so it is swapped for the build and put
    back after; the seed reaches it as an argument through tf-slim's arg_scope.
    """
    original = slim_layers.dropout
    slim_layers.dropout = mask_dropout
    try:
        with slim.arg_scope([mask_dropout], stateless_seed=stateless_seed):
            yield
    finally:
        slim_layers.dropout = original


@slim.add_arg_scope
def mask_dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True,
                 outputs_collections=None, scope=None, seed=None, stateless_seed=None):
    """tf-slim's dropout (same arguments) built from a mask multiply; with `stateless_seed`
    (int64 [2]) the mask is drawn statelessly from it, else from `seed`."""
    with tf.compat.v1.variable_scope(scope, "Dropout", [inputs]) as variable_scope:
        inputs = tf.convert_to_tensor(inputs)

        def drop():
            shape = tf.shape(inputs) if noise_shape is None else noise_shape
            if stateless_seed is None:
                draw = tf.random.uniform(shape, seed=seed)
            else:
                draw = tf.random.stateless_uniform(shape, stateless_seed)
            kept = draw < keep_prob
            return inputs * (tf.cast(kept, inputs.dtype) / tf.cast(keep_prob, inputs.dtype))

        outputs = slim_utils.smart_cond(is_training, drop, lambda: tf.identity(inputs))
        return slim_utils.collect_named_outputs(outputs_collections, variable_scope.name,
                                                outputs)


def classification_losses(logits, aux_logits, targets, label_smoothing=recipe.LABEL_SMOOTHING,
                          class_weights=None):
    """The data terms of the tower loss (regularization is added once by the towers).

    Args:
      logits, aux_logits: float32 [batch, num_classes]; aux_logits may be None.
      targets: float32 [batch, num_classes], each row summing to 1: the one-hot labels, or the
        mixed labels of Mixup/CutMix; label smoothing is applied here, once.
      class_weights: float32 [num_classes] weights of each class's examples (an example of
        mixed labels takes the mix of their weights), or None: all 1.

    Returns:
      {"cross_entropy": scalar, "aux_loss": scalar (when aux_logits exists)}; each term is a
      mean over the batch (of the weighted losses, as Keras's class_weight) and already
      carries its weight.
    """
    weights = example_weights(targets, class_weights)
    terms = {"cross_entropy": smoothed_cross_entropy(logits, targets, "cross_entropy",
                                                     label_smoothing, weights)}
    if aux_logits is not None:
        aux = smoothed_cross_entropy(aux_logits, targets, "aux_loss", label_smoothing, weights)
        terms["aux_loss"] = recipe.AUX_LOSS_WEIGHT * aux
    return terms


def example_weights(targets, class_weights):
    """float32 [batch]: each example's weight, its targets' mix of `class_weights`; 1.0 (a
    scalar) without class weights."""
    if class_weights is None:
        return 1.0
    return tf.linalg.matvec(targets, tf.constant(class_weights, tf.float32))


def smoothed_cross_entropy(logits, targets, name, label_smoothing=recipe.LABEL_SMOOTHING,
                           weights=1.0):
    """Mean over the batch of the softmax cross-entropy with `label_smoothing`, each example's
    times its weight in `weights` (a scalar or float32 [batch]); added to no collection."""
    return tf.compat.v1.losses.softmax_cross_entropy(
        targets, logits, weights=weights, label_smoothing=label_smoothing, scope=name,
        loss_collection=None, reduction=tf.compat.v1.losses.Reduction.SUM_OVER_BATCH_SIZE)


@dataclasses.dataclass(frozen=True)
class TowerOptions:
    """How each tower is built beyond the network's settings.

    compute_dtype: tf.bfloat16 / tf.float16 builds the network in that dtype with float32
    variables (mixed_precision.py; GPU towers); None builds it in float32.
    augmentation: settings.AugmentationSettings whose Mixup/CutMix mix each tower's batch
    (inputs/mixing.py), drawn from `seed`, the global step and the tower's number; None: none.
    Dropout's masks are drawn statelessly from the same three, so a resumed run repeats them.
    label_smoothing, class_weights: of the cross-entropy (classification_losses).
    first_tower: the number of this process's first tower among every tower (and micro-batch)
    of the step: a cluster's worker w numbers its towers from w x its towers x micro-batches,
    so a tower's draws follow the examples it gets (shares.py), whatever the cluster's size.
    batch_norm_groups: synced_batch_norm.BatchNormGroups whose statistics the towers share
    (--sync_batch_norm); None: each tower's batch norm on its own batch.
    """
    compute_dtype: object = None
    augmentation: object = None
    seed: int = 0
    label_smoothing: float = recipe.LABEL_SMOOTHING
    class_weights: object = None
    first_tower: int = 0
    batch_norm_groups: object = None


def make_model_fn(model, batch_norm_decay, options=TowerOptions(), logits_fn=inception_logits):
    """Returns `model_fn(images, labels) -> towers.ModelOutputs` for towers.build_towers: the
    network `logits_fn` (inception_logits's arguments and results; registry.make_model_fn
    passes the one `model` names) of `model` (settings.ModelSettings) built as `options`
    (TowerOptions) say, its batch-norm statistics moving by `batch_norm_decay`."""
    tower_numbers = itertools.count(options.first_tower)
    built = itertools.count()

    def model_fn(images, labels):
        stream = _tower_stream(options.seed, next(tower_numbers))
        groups = options.batch_norm_groups
        statistics = groups and groups.for_tower(next(built))
        images, targets = _mixed(images, labels, model.num_classes, options.augmentation, stream)
        with mixed_precision.building_in(options.compute_dtype):
            logits, aux_logits = logits_fn(
                mixed_precision.to_compute(images, options.compute_dtype), model, True,
                batch_norm_decay,
                tf.random.experimental.stateless_fold_in(stream, DROPOUT_STREAM), statistics)
        logits = mixed_precision.to_float32(logits)
        class_weights = options.class_weights
        return towers.ModelOutputs(
            classification_losses(logits, mixed_precision.to_float32(aux_logits), targets,
                                  options.label_smoothing, class_weights),
            logits=logits, labels=labels, images=images,
            example_weights=None if class_weights is None else example_weights(
                tf.one_hot(labels, model.num_classes), class_weights))
    return model_fn


def _tower_stream(seed, tower_number):
    """The int64 [2] seed of one tower's (and micro-batch's) random draws in this step: the
    step and the tower make each draw its own, and a resumed run draws the same."""
    step = tf.cast(tf.compat.v1.train.get_or_create_global_step(), tf.int64)
    return tf.stack([tf.constant(seed, tf.int64), step * MIX_STREAMS + tower_number])


def _mixed(images, labels, num_classes, augmentation, stream):
    """(images, targets) of one tower: mixed by Mixup/CutMix, drawn from `stream`, when
    `augmentation` asks for it, else the images and their one-hot labels."""
    if augmentation is None or not (augmentation.mixup_alpha or augmentation.cutmix_alpha):
        return images, tf.one_hot(labels, num_classes)
    with tf.name_scope("mix_batch"):
        mixed, targets, _ = mixing.mix_batch(images, labels, num_classes,
                                             augmentation.mixup_alpha,
                                             augmentation.cutmix_alpha, stream)
    return mixed, targets
