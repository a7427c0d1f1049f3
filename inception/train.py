"""`bazel run //inception:train`: multi-tower Inception v3 training.

With no flags it trains the embedded demo data set with 2 towers in a few minutes on a CPU.
Flags follow the original tensorflow/models inception_train.py where it had them, and
imagenet_distributed_train.py for training on several machines (--job_name, --task_id,
--ps_hosts, --worker_hosts, --num_replicas_to_aggregate; or TF_CONFIG from a scheduler).

The flags become one settings.TrainSettings (settings_from_flags), checked before TensorFlow
loads (settings.py, plans.py, cluster.py), so a bad flag costs a second and writes nothing.
"""

import os
import shlex
import signal
import sys

from absl import app
from absl import flags

from common import cli
from common import holdout
from inception.config import cluster as cluster_lib
from inception.config import plans
from inception.config import recipe
from inception.config import rules
from inception.config import settings as settings_lib
from inception.driver import startup

FLAGS = flags.FLAGS
DEFAULT_TRAIN_DIR = "/tmp/inception_train"

flags.DEFINE_string("train_dir", DEFAULT_TRAIN_DIR,
                    "Directory for checkpoints, event logs and model_settings.json; training "
                    "resumes from the newest checkpoint here.")
flags.DEFINE_string("data_dir", "", "Directory of TFRecord shards (train-*-of-*), or a folder of "
                    "images: <folder>/{train,validation}/<label>/<image>, or <folder>/<label>/"
                    "<image> with --validation_fraction (its shards are built once into a cache "
                    "and rebuilt when its files change); empty: the embedded demo data set, "
                    "generated on first use.")
flags.DEFINE_float("validation_fraction", 0.0, "For a --data_dir of label folders: the fraction "
                   "of each label's images kept for validation (e.g. 0.2; at most "
                   f"{holdout.MAX_VALIDATION_FRACTION}).")
flags.DEFINE_enum("dataset", "", ("",) + rules.DATASET_NAMES,
                  "Data set; empty: demo without --data_dir, else read labels.txt there.")
flags.DEFINE_integer("num_classes", None, "Labels in the data (background excluded); only for "
                     "shards without labels.txt that are not imagenet or flowers.")
flags.DEFINE_string("subset", "train", "Which shards to train on (train-*, validation-*).")
flags.DEFINE_integer("num_gpus", None, "Number of towers: one per GPU (default: every GPU), or "
                     "virtual CPU devices when there is no GPU (default 2).")
flags.DEFINE_integer("virtual_gpu_memory_mb", 0, "Allow more towers than GPUs by splitting each "
                     "GPU into virtual GPUs of this many MB.")
flags.DEFINE_integer("batch_size", None, "Global batch size, split evenly across towers "
                     f"(default: {recipe.describe_default('batch_size')}).")
flags.DEFINE_integer("max_steps", None, "Train up to this global step (default: "
                     f"{recipe.DEMO_DEFAULTS.max_steps} for the demo, "
                     f"{recipe.IMAGENET_DEFAULTS.max_steps} for ImageNet; your own data "
                     "trains --num_epochs).")
flags.DEFINE_float("num_epochs", None, "Instead of --max_steps: train this many passes over the "
                   "training split's examples, counted in updates (ceil(epochs x examples / "
                   "examples per update), accumulation included); logged at the start. Default: "
                   f"{recipe.OWN_DATA_DEFAULTS.num_epochs:g} for your own data without "
                   "--max_steps; the demo and ImageNet take --max_steps.")
flags.DEFINE_integer("image_size", None, "Input height and width (default: "
                     f"{recipe.describe_default('image_size')}).")
flags.DEFINE_float("depth_multiplier", None, "Scales every layer's channels (default: "
                   f"{recipe.describe_default('depth_multiplier')}).")
flags.DEFINE_float("initial_learning_rate", None, "Initial learning rate (default: "
                   f"{recipe.describe_default('initial_learning_rate')}).")
flags.DEFINE_float("num_epochs_per_decay", None, "Epochs between learning-rate decays "
                   f"(default: {recipe.describe_default('num_epochs_per_decay')}).")
flags.DEFINE_float("learning_rate_decay_factor", recipe.LEARNING_RATE_DECAY_FACTOR,
                   "Learning-rate decay factor.")
flags.DEFINE_enum("learning_rate_scaling", rules.DEFAULT_LEARNING_RATE_SCALING,
                  rules.LEARNING_RATE_SCALINGS, "How --initial_learning_rate follows the "
                  "examples of one update (--batch_size x --accumulate_steps, x the workers of "
                  "a cluster): it is the rate for the recipe's base batch of "
                  f"{recipe.BASE_BATCH_SIZE}, multiplied by their ratio (linear), its square "
                  "root (sqrt, the default), or kept (none). The log prints the rate used.")
flags.DEFINE_float("label_smoothing", recipe.LABEL_SMOOTHING, "Label smoothing of the "
                   "cross-entropy's targets (0: none; default: the original's "
                   f"{recipe.LABEL_SMOOTHING:g}).")
flags.DEFINE_string("class_weight", "", "Weigh each class's training examples in the loss: "
                    "'balanced' (n / (classes x n_c), counted from the training split), or a "
                    "file of '<label> <weight>' lines (names from labels.txt or numbers; "
                    "others weigh 1). Default: every example weighs 1.")
flags.DEFINE_float("clip_gradient_norm", 0.0, "Clip the averaged gradients of each update to "
                   "this global norm (after loss scaling is undone; default 0: no clipping). "
                   "The log says how often it clipped; TensorBoard shows clipped_updates.")
flags.DEFINE_integer("seed", None, "Seed of the initial weights, the input order and every random "
                     "draw of training (distortions, augmentation, mixing, dropout).")
flags.DEFINE_bool("deterministic", False, "TensorFlow's op determinism: the same command writes "
                  "bit-identical checkpoints on the same machine (--seed, 0 if not given).")
flags.DEFINE_enum("precision", "fp32", rules.PRECISIONS,
                  "Arithmetic of the towers: fp32 (TF32 tensor cores on GPUs that have them); "
                  "bf16 (GPUs of compute capability 8.0+, or CPUs with AVX512-BF16/AMX); fp16 "
                  "(GPUs, with dynamic loss scaling). Variables, loss and averaging stay fp32.")
flags.DEFINE_enum("variable_update", rules.AUTO, rules.VARIABLE_UPDATES,
                  "How the towers share the variables: parameter_server (one copy on "
                  "--variable_device, or on the parameter servers of a cluster; each step the "
                  "towers read it and send their gradients there), replicated (a copy on every "
                  "tower's device and an all-reduce of the gradients: NCCL between GPUs, "
                  "TensorFlow's collective ring otherwise, also between the workers of a "
                  "cluster without --ps_hosts), or auto: on a cluster what it has (parameter "
                  "servers or not), replicated with two or more GPUs, else parameter_server. "
                  "See README, Several GPUs.")
flags.DEFINE_enum("variable_device", rules.AUTO, rules.VARIABLE_DEVICE_CHOICES,
                  "With --variable_update=parameter_server: where the variables, the gradient "
                  "averaging and the updates live: cpu (as in the original; the towers read "
                  "them from there), gpu (the first GPU), or auto: the GPU when there is one "
                  "GPU, else the CPU. See README, Benchmarks.")
flags.DEFINE_integer("all_reduce_buffers", rules.DEFAULT_ALL_REDUCE_BUFFERS,
                     "With --variable_update=replicated: the gradients are packed into this many "
                     "buffers before the all-reduce (0: one all-reduce per variable).")
flags.DEFINE_bool("xla", False, "Compile the step with XLA auto-clustering (fuses batch norm, "
                  "ReLU and friends; slower on this project's CPU, see README, Benchmarks).")
flags.DEFINE_bool("strict_input", False, "Stop on a damaged image instead of skipping it.")
flags.DEFINE_bool("balanced_sampling", False, "Resample the training split toward equal "
                  "classes: each record is drawn n / (classes x n_c) times an epoch on average "
                  "(rare classes repeated, common ones thinned), epochs keeping their length. "
                  "Default: off, each record once an epoch. Not with --class_weight=balanced.")
flags.DEFINE_bool("histograms", False, "Write gradient and variable histograms (costly).")
flags.DEFINE_list("profile_steps", [], "Trace these steps of the run with TensorFlow's profiler, "
                  "e.g. 20,25 (first,last; one number: that step) into <train_dir>/plugins/"
                  "profile, for TensorBoard's Profile tab: trace viewer, op statistics, and "
                  "whether the input is the bottleneck (README, Profiling). Default: none; "
                  "other steps run as without it. On a cluster the chief traces.")
flags.DEFINE_integer("log_every_n_steps", 10, "Log a loss line every this many steps.")
flags.DEFINE_integer("save_summaries_steps", 20, "Write summaries every this many steps (0: off).")
flags.DEFINE_float("save_summaries_secs", 0, "Also write summaries every this many seconds.")
flags.DEFINE_integer("save_checkpoint_steps", 1000, "Checkpoint every this many steps (0: off).")
flags.DEFINE_float("save_interval_secs", 600, "Also checkpoint every this many seconds (0: off).")
flags.DEFINE_integer("keep_checkpoints", 5, "Keep the newest this many checkpoints (older ones "
                     "are deleted, over resumed runs too).")
flags.DEFINE_float("keep_checkpoint_every_n_hours", 0, "Also keep one checkpoint every this "
                   "many hours of training (0: none kept that way).")
flags.DEFINE_enum("on_nan", "stop", rules.ON_NAN, "When a loss, an update or a variable "
                  "becomes NaN/Inf: stop (the newest checkpoint is the last good one), or "
                  "rollback to the newest finite checkpoint of this run and go on with the next "
                  "batches.")
flags.DEFINE_integer("max_nan_rollbacks", 3, "With --on_nan=rollback: stop after this many "
                     "rollbacks in one run.")
flags.DEFINE_enum("on_divergence", "warn", rules.ON_DIVERGENCE, "When the smoothed loss "
                  "climbs to twice its starting value: warn (one line) or stop.")
flags.DEFINE_integer("eval_every_n_steps", None, "Score the validation shards every this many "
                     "steps and at the end, in this process (0: never; default: "
                     f"{recipe.describe_default('eval_every_n_steps')}); results in "
                     "<train_dir>/eval_validation, the best checkpoint in <train_dir>/best.")
flags.DEFINE_integer("eval_batch_size", 100, "Examples per batch of that validation.")
flags.DEFINE_enum("best_metric", rules.BEST_METRICS[0], rules.BEST_METRICS,
                  "What makes a checkpoint the best one (loss: the lowest; the others: the "
                  "highest).")
flags.DEFINE_string("export_best_dir", "", "Export each new best checkpoint here as the next "
                    "SavedModel version (as //inception:export writes them), for a server "
                    "that watches this directory.")
flags.DEFINE_integer("stop_after_evals_without_improvement", 0, "Early stopping: stop (saving "
                     "first) after this many validations without a new best (0: never).")
flags.DEFINE_integer("warmup_steps", None, "Ramp the learning rate up linearly over this many "
                     f"steps (default: {recipe.describe_default('warmup_steps')}).")
flags.DEFINE_enum("optimizer", None, plans.OPTIMIZERS, "The optimizer (default: "
                  f"{recipe.describe_default('optimizer')}); a --training_plan stage that names "
                  "its own keeps it.")
flags.DEFINE_enum("learning_rate_schedule", plans.SCHEDULES[0], plans.SCHEDULES,
                  "After the warm-up: the original's staircase 'exponential' decay (by "
                  "--learning_rate_decay_factor every --num_epochs_per_decay epochs), 'cosine' "
                  "down to zero at --max_steps, or 'constant'. A --training_plan stage may name "
                  "its own (over its steps).")
flags.DEFINE_integer("accumulate_steps", 1, "Micro-batches per update: each update averages "
                     "the gradients of this many global batches of --batch_size, so it sees "
                     "accumulate_steps x --batch_size examples (the schedule and epochs count "
                     "updates).")
flags.DEFINE_enum("augment", rules.AUGMENTS[0], rules.AUGMENTS, "Augmentation after each "
                  "training image's crop, flip and colours: 'randaugment' applies "
                  "--randaugment_ops random operations at --randaugment_magnitude.")
flags.DEFINE_integer("randaugment_ops", 2, "With --augment=randaugment: operations per image.")
flags.DEFINE_integer("randaugment_magnitude", 9, "With --augment=randaugment: their strength, "
                     f"0-{rules.MAX_RANDAUGMENT_MAGNITUDE} (10: each operation's full range).")
flags.DEFINE_float("random_erasing", 0.0, "Probability that a training image gets one random "
                   "rectangle of noise (0: off; 0.25 is common).")
flags.DEFINE_float("mixup_alpha", 0.0, "Mixup: each tower's batch mixed with itself reversed at "
                   "a ratio drawn from Beta(alpha, alpha), labels mixed alike (0: off; 0.2 is "
                   "common).")
flags.DEFINE_float("cutmix_alpha", 0.0, "CutMix: a box of the reversed batch pasted in, its area "
                   "from Beta(alpha, alpha) (0: off; 1.0 is common); with --mixup_alpha, one of "
                   "the two per batch.")
flags.DEFINE_bool("find_learning_rate", False, "Instead of training, run the learning-rate "
                  "range test on this run's data and model: --lr_range_steps steps with the rate "
                  "rising from --lr_range_min to --lr_range_max; writes a plot to "
                  "<train_dir>/learning_rate_range.png and prints a suggested rate. No "
                  "checkpoint is written.")
flags.DEFINE_integer("lr_range_steps", 200, "Steps of the learning-rate range test.")
flags.DEFINE_float("lr_range_min", 1e-5, "First learning rate of the range test.")
flags.DEFINE_float("lr_range_max", 10.0, "Last learning rate of the range test.")
flags.DEFINE_list("trainable_scopes", [], "Train only the variables under these variable "
                  "scopes, e.g. InceptionV3/Logits,InceptionV3/AuxLogits (default: all).")
flags.DEFINE_string("stages", "", "A training plan of stages 'name:steps:scope,scope;...', e.g. "
                    "'head:2000:InceptionV3/Logits,InceptionV3/AuxLogits;all' (the last stage "
                    "may omit steps and scopes).")
flags.DEFINE_string("training_plan", "", "A JSON file with the training plan (stages with "
                    "steps, scopes, loss_terms, optimizer, learning_rate); see README.")
flags.DEFINE_string("pretrained_model_checkpoint_path", "", "Initialize a fresh --train_dir "
                    "from this checkpoint (ours, or tf-slim's inception_v3.ckpt).")
flags.DEFINE_bool("fine_tune", False, "With --pretrained_model_checkpoint_path: leave the logits "
                  "and aux-logits layers freshly initialized (for another number of classes).")
flags.DEFINE_list("checkpoint_exclude_scopes", [], "Variable scopes not restored from "
                  "--pretrained_model_checkpoint_path.")
flags.DEFINE_integer("intra_op_threads", 0, "Threads inside one op (0: TensorFlow decides).")
flags.DEFINE_integer("inter_op_threads", 0, "Ops run at once (0: TensorFlow decides).")
flags.DEFINE_enum("job_name", "", ("", "ps", "worker"), "Training on several machines: this "
                  "task's job, ps (parameter server) or worker; empty: this machine alone.")
flags.DEFINE_integer("task_id", 0, "Index of this task in --ps_hosts or --worker_hosts; "
                     "worker 0 is the chief (initializes the model, writes every file).")
flags.DEFINE_list("ps_hosts", [], "Parameter servers, host:port,host:port,...; none: the "
                  "workers keep their own copies and all-reduce the gradients.")
flags.DEFINE_list("worker_hosts", [], "Workers, host:port,host:port,...")
flags.DEFINE_integer("num_replicas_to_aggregate", None, "Gradients averaged into each "
                     "synchronous update (default: one from every worker; fewer lets an update "
                     "go ahead without the slowest workers).")
flags.DEFINE_float("startup_timeout_secs", 600, "Longest a task waits for the others to come "
                   "up (and a worker for the chief to initialize the model).")
flags.DEFINE_float("step_timeout_secs", 600, "Longest a worker waits for one synchronous step "
                   "before it stops with an error naming the tasks that do not answer.")


def cluster_from_flags():
    """cluster.ClusterSettings from the cluster flags or TF_CONFIG, or None for one machine."""
    return cluster_lib.cluster_settings(
        FLAGS.job_name, FLAGS.task_id, FLAGS.ps_hosts, FLAGS.worker_hosts,
        FLAGS.num_replicas_to_aggregate, FLAGS.startup_timeout_secs, FLAGS.step_timeout_secs,
        tf_config=os.environ.get("TF_CONFIG", ""))


PATH_SETTINGS = ("train_dir", "data_dir", "pretrained_model_checkpoint_path", "export_best_dir")


def settings_from_flags(cluster=None):
    """TrainSettings from the parsed flags: each setting from the flag of its name
    (rules.FLAG_NAMES where the original's differs), paths relative to the caller's
    directory, and one plan from --trainable_scopes, --stages or --training_plan."""
    values = {name: FLAGS[rules.FLAG_NAMES.get(name, name)].value
              for name in settings_lib.flat_names() if name != "plan"}
    values.update({name: cli.user_path(values[name]) for name in PATH_SETTINGS})
    if values["class_weight"] not in ("", "balanced"):
        values["class_weight"] = cli.user_path(values["class_weight"])
    values["checkpoint_exclude_scopes"] = tuple(values["checkpoint_exclude_scopes"])
    values["profile_steps"] = rules.profile_window(values["profile_steps"])
    values["plan"] = plans.plan_from_flags(tuple(FLAGS.trainable_scopes), FLAGS.stages,
                                           cli.user_path(FLAGS.training_plan))
    return settings_lib.train_settings(cluster=cluster, **values)


def print_next_steps(train_dir, result):
    """Where the results are and what to run next (paths quoted for the shell, so the commands
    can be pasted as they are): with validation, the tools are pointed at the best checkpoint."""
    quoted = shlex.quote(train_dir)
    cli.log(f"Checkpoints and TensorBoard events: {train_dir} (last: {result.checkpoint})")
    if result.last_validation is not None:
        from inception.run import best as best_lib  # pylint: disable=import-outside-toplevel
        best = best_lib.best_dir(train_dir)
        cli.log(f"Validation at step {result.last_validation.step}: "
                f"{result.last_validation.line()}; the best checkpoint is in {best}")
        quoted = shlex.quote(best)
    cli.log(f"  watch training:  bin/tensorboard --logdir={shlex.quote(train_dir)}   (then open "
            "http://localhost:6006)")
    cli.log(f"  evaluate:        bin/bazel run //inception:eval -- --checkpoint_dir={quoted} "
            "--run_once")
    cli.log(f"  export it:       bin/bazel run //inception:export -- --checkpoint_dir={quoted} "
            "--export_dir=<dir>")
    cli.log(f"  classify images: bin/bazel run //inception:classify -- --model={quoted} "
            "<images or folders>")


def exit_now(message):
    """Last resort when TensorFlow hangs past its own timeout: one line, then exit at once (a
    normal exit would wait for the stuck call)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(1)  # pylint: disable=protected-access


def serve_parameters(cluster):
    """The parameter-server task: serves variables until every worker is done."""
    from inception import distributed  # pylint: disable=import-outside-toplevel
    try:
        signal_number = distributed.run_parameter_server(cluster, log=cli.log)
    except distributed.ClusterError as error:
        cli.fail(error)
    if signal_number is not None:
        raise SystemExit(128 + signal_number)


def report_worker_end(settings, result):
    """What a worker of a cluster prints at its end (the chief also where the files are)."""
    if settings.is_chief:
        print_next_steps(settings.train_dir, result)
    if result.stopped_by_peer and result.stopped_by_signal is None and not result.stopped_early:
        saved = f"; the chief saved {result.checkpoint}" if settings.is_chief else ""
        cli.fail(f"training stopped at step {result.step} because another task of the cluster "
                 f"stopped (see its log){saved}; start every task again to resume.")
    early = (" (the chief's validation stopped the run early: see its log)"
             if result.stopped_early and not settings.is_chief else "")
    cli.log(f"worker {settings.cluster.task_id} done at step {result.step}{early}.")


def checked_settings():
    """The run's TrainSettings from the flags, or the cluster when this is a parameter server;
    any bad flag ends the process with one line (exit 2) before TensorFlow loads."""
    try:
        cluster = cluster_from_flags()
        if cluster is not None and cluster.job_name == "ps":
            return None, cluster
        return settings_from_flags(cluster).validate(), cluster
    except cli.UserError as error:
        cli.fail(error, code=2)


def train(settings):
    """Trains (TensorFlow loads here); returns session_loop.TrainResult or ends with one line."""
    startup.quiet_tensorflow()
    from common import error_lines  # pylint: disable=import-outside-toplevel
    from inception.driver import launch  # pylint: disable=import-outside-toplevel
    try:
        return launch.train(settings, log=cli.log, on_stuck=exit_now)
    except cli.UserError as error:
        cli.fail(error)
    except startup.file_errors() as error:
        cli.fail(f"training stopped by a file-system error: {error_lines.file_error_cause(error)}; "
                 "fix the directory (space, permissions), then rerun the same command to "
                 "resume from the last checkpoint.")


def find_learning_rate(settings):
    """The learning-rate range test instead of training: a plot and one suggested rate."""
    if FLAGS.lr_range_steps < 2 or not 0 < FLAGS.lr_range_min < FLAGS.lr_range_max:
        cli.fail("the range test needs --lr_range_steps >= 2 and 0 < --lr_range_min < "
                 "--lr_range_max.", code=2)
    startup.quiet_tensorflow()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from common import error_lines  # pylint: disable=import-outside-toplevel
    from common import files  # pylint: disable=import-outside-toplevel
    from inception.driver import launch  # pylint: disable=import-outside-toplevel
    from inception.driver import lr_range  # pylint: disable=import-outside-toplevel
    try:
        files.ensure_writable_directory(settings.train_dir)
    except (OSError, tf.errors.OpError) as error:
        cli.fail(error_lines.cannot_write(
            f"the range test's plot in --train_dir={settings.train_dir}", error))
    plot = os.path.join(settings.train_dir, "learning_rate_range.png")
    test = lr_range.RangeTest(FLAGS.lr_range_min, FLAGS.lr_range_max,
                              FLAGS.lr_range_steps)
    try:
        result = launch.find_learning_rate(settings, test, plot, log=cli.log)
    except cli.UserError as error:
        cli.fail(error)
    cli.log(f"the smoothed loss was lowest at {result.lowest_rate:.3g}; suggested: "
            f"--initial_learning_rate={result.suggested_rate:.2g} (plot: {plot})")


def main(argv):
    if len(argv) > 1:
        cli.fail(f"unexpected arguments {argv[1:]}; flags look like --max_steps=100.", code=2)
    settings, cluster = checked_settings()
    if settings is None:
        startup.quiet_tensorflow()
        serve_parameters(cluster)
        return
    if FLAGS.find_learning_rate:
        find_learning_rate(settings)
        return
    result = train(settings)
    if cluster is not None:
        report_worker_end(settings, result)
    else:
        print_next_steps(settings.train_dir, result)
    if result.stopped_by_signal is not None:
        cli.log(f"stopped by {signal.Signals(result.stopped_by_signal).name} at step "
                f"{result.step}; run the same command to resume.")
        raise SystemExit(128 + result.stopped_by_signal)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
