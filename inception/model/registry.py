"""The networks a run can train, by the name `--model` gives (default: recipe.DEFAULT_NETWORK).

Each is one module of inception/model/ and one line of NETWORKS below: how to build its logits
from the pipeline's images (and any auxiliary head) and the scopes fine-tuning starts afresh.
A run records its network's name in model_settings.json,
so evaluation, export and a resumed run rebuild it without being told (inference_logits).
"""

import dataclasses

from inception.config import recipe
from inception.config.rules import SettingsError
from inception.model import network
from inception.model import resnet


@dataclasses.dataclass(frozen=True)
class Network:
    """One network. logits: callable(images, model, is_training, batch_norm_decay,
    dropout_seed, batch_norm) -> (logits, aux_logits or None), with
    network.inception_logits's arguments (images in [-1, 1]; each network turns them into
    its own input scale). head_scopes: the variable scopes of its classifier, which
    --fine_tune starts afresh. title: its name in the log."""
    name: str
    title: str
    logits: object
    head_scopes: tuple


NETWORKS = {entry.name: entry for entry in (
    Network("inception_v3", "Inception v3", network.inception_logits, network.HEAD_SCOPES),
    Network("resnet_v1_50", "ResNet-50 v1", resnet.resnet_v1_50_logits, resnet.HEAD_SCOPES),
)}


def network_named(name):
    """The Network called `name` (None: the default); SettingsError listing the choices for a
    name that is not one."""
    entry = NETWORKS.get(name or recipe.DEFAULT_NETWORK)
    if entry is None:
        raise SettingsError(f"--model={name} is not a network of this trainer; choose one of "
                            f"{', '.join(NETWORKS)}.")
    return entry


def inference_logits(images, model):
    """The logits of the network `model` (settings.ModelSettings) names, in inference mode:
    what evaluation and the export build."""
    return network_named(model.network).logits(images, model, False)[0]


def make_model_fn(model, batch_norm_decay, options=network.TowerOptions()):
    """network.make_model_fn for the network `model` (settings.ModelSettings) names."""
    return network.make_model_fn(model, batch_norm_decay, options,
                                 logits_fn=network_named(model.network).logits)
