"""How one update is made (workers x batch per worker x micro-batches), and how a run keeps
its global batch when it goes on with another number of workers.

A checkpoint's run is defined by the examples each update averages: the learning rate is
scaled to it, an epoch is so many updates, and the input position counts records of one global
order (inputs/shares.py). When a run goes on with fewer or more workers (a cluster that lost
machines, or got them back), `--accumulate_steps` is set so that every update still averages
the same examples: half the workers, twice the micro-batches. Where no whole number of
micro-batches does it, the run is refused in one line that names the sizes that work.

Free of TensorFlow (checked while the run is resolved, before anything is built).
"""

import dataclasses

from inception.config.rules import SettingsError


@dataclasses.dataclass(frozen=True)
class UpdateShape:
    """The make of one update: `replicas` workers (whose gradients it averages) of `towers`
    towers each, `batch_size` examples per worker and micro-batch, `accumulate_steps`
    micro-batches."""
    replicas: int
    towers: int
    batch_size: int
    accumulate_steps: int

    @property
    def examples(self):
        """The examples one update averages: the global batch of the run."""
        return self.replicas * self.batch_size * self.accumulate_steps

    @classmethod
    def of(cls, settings, towers=None):
        """The shape a TrainSettings asks for (`towers`: when its devices are not resolved)."""
        cluster = settings.cluster
        return cls(replicas=cluster.replicas_to_aggregate if cluster else 1,
                   towers=towers or settings.devices.num_towers,
                   batch_size=settings.data.batch_size,
                   accumulate_steps=settings.optimization.accumulate_steps)

    def describe(self):
        """E.g. '4 worker(s) x 2 tower(s), batch 8 per worker x 1 micro-batch(es) = 32'."""
        return (f"{self.replicas} worker(s) x {self.towers} tower(s), batch {self.batch_size} "
                f"per worker x {self.accumulate_steps} micro-batch(es) = {self.examples}")


def keep_global_batch(stored, requested):
    """The UpdateShape to train with: `requested` (this run's flags and cluster), or, when the
    number of workers changed since `stored` (the shape of the run's checkpoints; None: a new
    run), `requested` with the accumulate_steps that keeps the stored global batch.

    Returns (shape, note): note is the log line saying what changed, or None. Raises
    SettingsError when no whole number of micro-batches keeps the global batch.
    """
    if stored is None or stored.replicas == requested.replicas:
        return requested, (None if stored is None or stored.towers == requested.towers else
                           f"note: the towers per worker changed since the last checkpoint: "
                           f"{stored.describe()} -> {requested.describe()}")
    per_micro_batch = requested.replicas * requested.batch_size
    if stored.examples % per_micro_batch:
        raise SettingsError(
            f"this run's checkpoints average {stored.examples} examples per update "
            f"({stored.describe()}); {requested.replicas} worker(s) of --batch_size="
            f"{requested.batch_size} cannot make that in whole micro-batches. "
            f"{_sizes_that_work(stored.examples, requested.batch_size)}")
    shape = dataclasses.replace(requested, accumulate_steps=stored.examples // per_micro_batch)
    return shape, (f"the cluster changed since the last checkpoint: {stored.describe()} -> "
                   f"{shape.describe()}; each update still averages {shape.examples} examples "
                   f"(--accumulate_steps={shape.accumulate_steps}), from the same place in "
                   "the input")


def _sizes_that_work(examples, batch_size):
    """One sentence: the worker counts that keep `examples` per update with `batch_size`, or
    what to change."""
    if examples % batch_size:
        return (f"Pass a --batch_size that divides {examples} (then workers x micro-batches "
                f"makes up the rest).")
    counts = [count for count in range(1, examples // batch_size + 1)
              if (examples // batch_size) % count == 0]
    return (f"With --batch_size={batch_size}, use {', '.join(map(str, counts))} worker(s), or "
            f"another --batch_size that divides {examples}.")
