"""The training recipe, in one place: the original Inception v3's fixed constants, and the
defaults each kind of data set gets (explicit flags always win). Free of TensorFlow.

The flags' help is written from these values (`describe_default`), so help and behaviour
cannot drift apart.
"""

import dataclasses

DEFAULT_NETWORK = "inception_v3"  # what --model trains when a run names none (model/registry.py)

# The original's model and loss (tensorflow/models inception: inception_model.py).
LABEL_SMOOTHING = 0.1
AUX_LOSS_WEIGHT = 0.4
WEIGHT_DECAY = 0.00004
BATCH_NORM_DECAY = 0.9997  # of the batch-norm moving statistics (warmed up: step_graph.py)
MOVING_AVERAGE_DECAY = 0.9999  # of the weights evaluation restores
EVAL_CENTRAL_FRACTION = 0.875  # evaluation and serving keep this central part of an image
EVAL_BATCH_SIZE = 100  # examples per evaluation batch, in training and in //inception:eval
DEFAULT_TRAIN_DIR = "/tmp/inception_train"  # where a run goes, and eval and export look

# The original's optimizer; the other optimizers a stage may name keep their usual constants.
ORIGINAL_OPTIMIZER = "rmsprop"
RMSPROP_DECAY = 0.9
RMSPROP_MOMENTUM = 0.9
# LARS and LAMB (step/layerwise.py): LARS's trust coefficient (You et al. 2017), each one's
# decoupled weight decay (LAMB's is the LAMB paper's BERT value), LAMB's epsilon, and their
# base learning rates for BASE_BATCH_SIZE (a step moves a layer by about rate x eta (LARS) or
# rate (LAMB) of its weights' norm), used when a run names no rate; measured: docs/learning-rate.md.
LARS_ETA = 0.001
LARS_WEIGHT_DECAY = 5e-5
LAMB_WEIGHT_DECAY = 0.01
LAMB_EPSILON = 1e-6
LAYERWISE_LEARNING_RATES = {"lars": 5.0, "lamb": 0.01}
POLYNOMIAL_DECAY_POWER = 2.0  # the polynomial schedule's, as MLPerf's LARS runs use
RMSPROP_EPSILON = 1.0
MOMENTUM = 0.9
LEARNING_RATE_DECAY_FACTOR = 0.16  # per --num_epochs_per_decay, staircase
# The examples of one update the default learning rates are for (--learning_rate_scaling).
BASE_BATCH_SIZE = 32

# Dynamic loss scaling of fp16 towers (step/loss_scaling.py): start high, halve on an
# overflow, double after this many good steps (as Keras's LossScaleOptimizer does).
INITIAL_LOSS_SCALE = 2.0 ** 15
LOSS_SCALE_GROWTH_INTERVAL = 2000
LOSS_SCALE_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class CropSettings:
    """How `sample_distorted_bounding_box` picks the training crop (defaults: the original's).

    The crop covers at least `min_object_covered` of the object's box, has an aspect ratio in
    `aspect_ratio_range` and an area in `area_range` (fractions of the image).
    """
    min_object_covered: float = 0.1
    aspect_ratio_range: tuple = (0.75, 1.33)
    area_range: tuple = (0.05, 1.0)
    max_attempts: int = 100


ORIGINAL_CROP = CropSettings()
# The crops keep at least 60% of the object and 30% of the image: the original's 10% / 5% cut
# away what tells the classes apart in small, frame-filling images, and short runs cannot learn
# from such crops (docs/learning-rate.md: 0.14 -> 0.73 precision@1 on MNIST images).
MILD_CROP = CropSettings(min_object_covered=0.6, area_range=(0.3, 1.0))


@dataclasses.dataclass(frozen=True)
class TrainingDefaults:
    """Setting defaults that depend on the data set (explicit flags always win)."""
    image_size: int
    depth_multiplier: float
    max_steps: int
    batch_size: int
    initial_learning_rate: float
    num_epochs_per_decay: float
    crop: CropSettings = ORIGINAL_CROP
    warmup_steps: int = 0
    optimizer: str = ORIGINAL_OPTIMIZER
    eval_every_n_steps: int = 0
    num_epochs: float = None  # the length without --max_steps or --num_epochs; None: max_steps


# ImageNet: the original's recipe (RMSProp, rate 0.1, its crops), tuned for 299 px, large
# global batches and 100K+ steps.
IMAGENET_DEFAULTS = TrainingDefaults(image_size=299, depth_multiplier=1.0, max_steps=10_000_000,
                                     batch_size=BASE_BATCH_SIZE, initial_learning_rate=0.1,
                                     num_epochs_per_decay=30.0)
# A user's own (usually small) data set: Adam at 0.001, mild crops, no warm-up (it cost
# precision with Adam on both data sets measured); the numbers are in
# docs/learning-rate.md.
OWN_DATA_DEFAULTS = dataclasses.replace(IMAGENET_DEFAULTS, initial_learning_rate=0.001,
                                        crop=MILD_CROP, optimizer="adam", num_epochs=30.0)
# Small enough to reach >90% precision@1 in a few minutes on a 2-core CPU; validated halfway
# and at the end, so the bare command ends with its model's validation precision.
DEMO_DEFAULTS = TrainingDefaults(image_size=128, depth_multiplier=0.25, max_steps=700,
                                 batch_size=BASE_BATCH_SIZE, initial_learning_rate=0.02,
                                 num_epochs_per_decay=30.0, crop=MILD_CROP,
                                 eval_every_n_steps=350)


def defaults_for(dataset_name):
    """The TrainingDefaults of a data set: the demo's, the original's for ImageNet, and those
    for a user's own data otherwise (a folder tree, flowers, any shards)."""
    return {"demo": DEMO_DEFAULTS, "imagenet": IMAGENET_DEFAULTS}.get(dataset_name,
                                                                      OWN_DATA_DEFAULTS)


def for_optimizer(defaults, optimizer):
    """`defaults` (TrainingDefaults) with the base learning rate of `optimizer` (the run's, or
    None for the defaults' own) where it is layer-wise: the other rates are far off for it."""
    rate = LAYERWISE_LEARNING_RATES.get(optimizer or defaults.optimizer)
    return defaults if rate is None else dataclasses.replace(defaults, initial_learning_rate=rate)


def describe_default(name):
    """A flag help's `(default: ...)` text for the TrainingDefaults field `name`, e.g.
    "0.02 for the demo, 0.1 for ImageNet, 0.001 for your own data"."""
    groups = {}
    for label, defaults in (("the demo", DEMO_DEFAULTS), ("ImageNet", IMAGENET_DEFAULTS),
                            ("your own data", OWN_DATA_DEFAULTS)):
        value = getattr(defaults, name)
        groups.setdefault(f"{value:g}" if isinstance(value, float) else str(value),
                          []).append(label)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{value} for {' and '.join(labels)}" for value, labels in groups.items())
