"""ResNet-50 (v1) from tf_slim.nets, with the variable names of tf-slim's published checkpoints
(`resnet_v1_50/block4/unit_3/bottleneck_v1/conv3/weights`), so `--fine_tune` from them works.

Its input is the pipeline's image in [-1, 1], turned here into what slim's VGG/ResNet
preprocessing feeds it (RGB in [0, 255] less the ImageNet channel means): the crops and
distortions stay the pipeline's, only the pixel scale follows the network. The weight decay
(1e-4, Goyal et al.) reaches the convolutions' weights only, never batch norm or the biases,
through tf-slim's ResNet arg scope.
"""

import tensorflow as tf

from tf_slim.nets import resnet_utils
from tf_slim.nets import resnet_v1

from inception.config import recipe
from inception.model import network
from inception.model.slim_compat import tf_slim as slim

SCOPE = "resnet_v1_50"
HEAD_SCOPES = (f"{SCOPE}/logits",)  # what fine-tuning starts afresh
WEIGHT_DECAY = 1e-4  # Goyal et al. 2017, not on batch norm
# slim's vgg_preprocessing: the ImageNet means of R, G and B on a 0-255 scale.
CHANNEL_MEANS = (123.68, 116.78, 103.94)
# (scope, bottleneck depth, units, stride) of ResNet-50's four blocks, as resnet_v1_50 has them.
BLOCKS = (("block1", 64, 3, 2), ("block2", 128, 4, 2), ("block3", 256, 6, 2),
          ("block4", 512, 3, 1))


def mean_subtracted(images):
    """float32 [batch, h, w, 3] in [-1, 1] -> RGB in [0, 255] less CHANNEL_MEANS."""
    return (images + 1.0) * 127.5 - tf.constant(CHANNEL_MEANS, images.dtype)


@tf.autograph.experimental.do_not_convert  # as network.inception_logits, for the same reason
def resnet_v1_50_logits(images, model, is_training, batch_norm_decay=recipe.BATCH_NORM_DECAY,
                        dropout_seed=None, batch_norm=None):
    """Builds ResNet-50 v1 on `images` (float [batch, size, size, 3] in [-1, 1]) under variable
    scope `resnet_v1_50`; the arguments are network.inception_logits's (ResNet-50 has no
    dropout, so `dropout_seed` goes unused).

    model.depth_multiplier scales the blocks' channels (1.0: slim's resnet_v1_50; the root
    convolution keeps its 64). batch_norm: synced_batch_norm.TowerStatistics whose batch norm
    every convolution uses (--sync_batch_norm), or None for tf-slim's.

    Returns (logits float [batch, num_classes], None): it has no auxiliary head.
    """
    del dropout_seed
    blocks = [resnet_v1.resnet_v1_block(name, max(1, int(depth * model.depth_multiplier)),
                                        units, stride)
              for name, depth, units, stride in BLOCKS]
    arg_scope = resnet_utils.resnet_arg_scope(weight_decay=WEIGHT_DECAY,
                                              batch_norm_decay=batch_norm_decay)
    normalizer = ({} if batch_norm is None else {"normalizer_fn": batch_norm.batch_norm})
    with slim.arg_scope(arg_scope), slim.arg_scope([slim.conv2d], **normalizer), \
            network.variables_hashed_by_identity():
        net, _ = resnet_v1.resnet_v1(mean_subtracted(images), blocks,
                                     num_classes=model.num_classes, is_training=is_training,
                                     global_pool=True, scope=SCOPE)
    return tf.squeeze(net, [1, 2], name="SpatialSqueeze"), None
