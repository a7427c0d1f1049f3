"""Training plans: which variables (by variable scope), which loss terms and which optimizer
each stage of training uses, and for how many steps. Free of TensorFlow, so the entry point
turns --trainable_scopes, --stages or a --training_plan file into one TrainingPlan before
TensorFlow loads; step/optimizers.py builds a plan's variable selection and optimizers.

A plan is a list of stages run one after the other, e.g. "train the new head for 2000 steps,
then everything". The stage of a step follows from the global step alone, so a resumed run
continues in the right stage at the right step. Variables are selected by *variable* scope
(`InceptionV3/Logits`), which names them the same for any number of towers; a tower's name
scope (`tower_1/...`) names ops, never variables.

Command-line form (`--stages`): stages separated by `;`, each `name[:steps[:scope,scope...]]`,
e.g. `head:2000:InceptionV3/Logits,InceptionV3/AuxLogits;all`. File form (`--training_plan`,
JSON): {"stages": [{"name": "head", "steps": 2000, "scopes": [...], "loss_terms": [...],
"optimizer": "rmsprop", "learning_rate": 0.01}, {"name": "all", "learning_rate_schedule":
"cosine"}]}. A stage that names no optimizer, in a file or from --stages, uses the run's
(--optimizer, else the data set's default: settings.OptimizationSettings.training_plan).
"""

import dataclasses
import json

from common import cli
from common import files
from common.field_flags import Flag

OPTIMIZERS = ("rmsprop", "momentum", "sgd", "adam", "lars", "lamb")
# Layer-wise adaptive optimizers (step/layerwise.py): their own decoupled weight decay
# replaces the loss's L2 term in the stages they update.
LAYERWISE_OPTIMIZERS = ("lars", "lamb")
SCHEDULES = ("exponential", "cosine", "polynomial", "constant")  # step/schedules.py


class PlanError(cli.UserError):
    """A training plan that cannot work; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a plan.

    steps: how many steps it lasts (None: until --max_steps; only the last stage may omit it).
    scopes: variable scopes whose trainable variables it trains (empty: all of them).
    loss_terms: names of the model's loss terms it minimises (None: all).
    optimizer: one of OPTIMIZERS, or None for the run's optimizer (--optimizer, else the data
      set's); learning_rate: a constant rate, or None for the run's schedule;
      learning_rate_schedule: one of SCHEDULES over this stage's own steps, from its
      learning_rate (or the run's), or None (the run's schedule, or learning_rate constant).
    """
    name: str
    steps: int = None
    scopes: tuple = ()
    loss_terms: tuple = None
    optimizer: str = None
    learning_rate: float = None
    learning_rate_schedule: str = None


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """Stages in order. A one-stage plan keeps the original's optimizer variable names
    (`.../RMSProp`, see make_optimizer)."""
    stages: tuple

    @property
    def total_steps(self):
        """Steps the plan covers, or None when its last stage runs until --max_steps."""
        if self.stages[-1].steps is None:
            return None
        return sum(stage.steps for stage in self.stages)

    def stage_index_at(self, step):
        """Index of the stage that runs the step after `step` completed steps."""
        end = 0
        for index, stage in enumerate(self.stages):
            if stage.steps is None:
                return index
            end += stage.steps
            if step < end:
                return index
        return len(self.stages) - 1

    def stage_start(self, index):
        """Global step at which stage `index` begins."""
        return sum(stage.steps for stage in self.stages[:index])

    def with_optimizer(self, optimizer):
        """This plan with `optimizer` for every stage that names none."""
        return TrainingPlan(tuple(stage if stage.optimizer else
                                  dataclasses.replace(stage, optimizer=optimizer)
                                  for stage in self.stages))

    def validate(self):
        """Raises PlanError for an empty plan, duplicate names, bad steps or optimizers."""
        if not self.stages:
            raise PlanError("the training plan has no stages.")
        names = [stage.name for stage in self.stages]
        if len(set(names)) != len(names):
            raise PlanError(f"stage names must be unique, got {names}.")
        for index, stage in enumerate(self.stages):
            if not stage.name or not stage.name.replace("_", "").replace("-", "").isalnum():
                raise PlanError(f"stage name {stage.name!r}: use letters, digits, '_' or '-'.")
            last = index == len(self.stages) - 1
            if stage.steps is None and not last:
                raise PlanError(f"stage {stage.name!r} needs a number of steps (only the last "
                                "stage may run until --max_steps).")
            if stage.steps is not None and stage.steps < 1:
                raise PlanError(f"stage {stage.name!r}: steps must be at least 1.")
            if stage.optimizer not in (None,) + OPTIMIZERS:
                raise PlanError(f"stage {stage.name!r}: unknown optimizer {stage.optimizer!r}; "
                                f"use one of {', '.join(OPTIMIZERS)}.")
            if stage.learning_rate is not None and stage.learning_rate <= 0:
                raise PlanError(f"stage {stage.name!r}: learning_rate must be > 0.")
            if stage.learning_rate_schedule not in (None,) + SCHEDULES:
                raise PlanError(f"stage {stage.name!r}: unknown learning_rate_schedule "
                                f"{stage.learning_rate_schedule!r}; use one of "
                                f"{', '.join(SCHEDULES)}.")
        return self


DEFAULT_PLAN = TrainingPlan((Stage("train"),))


@dataclasses.dataclass(frozen=True)
class PlanFlags:
    """The three ways to give a plan on the command line; at most one is used. Their help is
    PLAN_HELP."""
    trainable_scopes: tuple = ()
    stages: str = ""
    training_plan: str = ""


PLAN_HELP = {
    "trainable_scopes":
        "Train only the variables under these variable scopes, e.g. "
        "InceptionV3/Logits,InceptionV3/AuxLogits (default: all).",
    "stages":
        "A training plan of stages 'name:steps:scope,scope;...', e.g. "
        "'head:2000:InceptionV3/Logits,InceptionV3/AuxLogits;all' (the last stage may omit "
        "steps and scopes).",
    "training_plan": Flag(
        "A JSON file with the training plan (stages with steps, scopes, loss_terms, optimizer, "
        "learning_rate); see docs/stages.md.", path=True),
}


def plan_from_flags(trainable_scopes=(), stages="", training_plan=""):
    """The run's plan from at most one of --trainable_scopes, --stages and --training_plan (the
    fields of PlanFlags); None when none is given (the default plan: everything in one stage).
    Stages that name no optimizer get the run's when the settings are resolved."""
    given = [name for name, value in (("trainable_scopes", trainable_scopes), ("stages", stages),
                                      ("training_plan", training_plan)) if value]
    if len(given) > 1:
        raise PlanError(f"pass only one of --{' / --'.join(given)}.")
    if training_plan:
        return load_plan(training_plan)
    if stages:
        return parse_stages(stages)
    if trainable_scopes:
        return plan_from_scopes(trainable_scopes)
    return None


def plan_from_scopes(scopes, optimizer=None):
    """A one-stage plan training only the variables under `scopes` (all when empty)."""
    return TrainingPlan((Stage("train", scopes=tuple(scopes), optimizer=optimizer),)).validate()


def parse_stages(text, optimizer=None):
    """Parses the `--stages` form `name[:steps[:scope,scope]];...` into a TrainingPlan whose
    stages all use `optimizer` (None: the run's)."""
    stages = []
    for part in filter(None, (piece.strip() for piece in text.split(";"))):
        fields = part.split(":")
        if len(fields) > 3:
            raise PlanError(f"stage {part!r}: expected name[:steps[:scope,scope...]].")
        name = fields[0].strip()
        steps = None
        if len(fields) > 1 and fields[1].strip():
            try:
                steps = int(fields[1])
            except ValueError:
                raise PlanError(f"stage {part!r}: steps must be a whole number, "
                                f"not {fields[1]!r}.") from None
        scopes = tuple(s.strip() for s in fields[2].split(",") if s.strip()) if len(fields) > 2 \
            else ()
        stages.append(Stage(name, steps, scopes, optimizer=optimizer))
    return TrainingPlan(tuple(stages)).validate()


def load_plan(path):
    """Reads a JSON training plan (see the module docstring)."""
    try:
        payload = json.loads(files.read_text(path))
    except OSError as error:
        raise PlanError(f"cannot read --training_plan={path}: "
                        f"{error.strerror or error}.") from None
    except ValueError as error:
        raise PlanError(f"--training_plan={path} is not valid JSON: {error}.") from None
    known = {field.name for field in dataclasses.fields(Stage)}
    stages = []
    for entry in payload.get("stages", []) if isinstance(payload, dict) else []:
        unknown = set(entry) - known
        if unknown:
            raise PlanError(f"{path}: unknown stage key(s) {sorted(unknown)}; known: "
                            f"{sorted(known)}.")
        values = dict(entry)
        values["scopes"] = tuple(values.get("scopes", ()))
        if values.get("loss_terms") is not None:
            values["loss_terms"] = tuple(values["loss_terms"])
        stages.append(Stage(**values))
    return TrainingPlan(tuple(stages)).validate()
