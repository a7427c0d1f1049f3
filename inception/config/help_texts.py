"""The declaration of every training and evaluation flag beside its setting's field,
by setting name (the flag's name is rules.FLAG_NAMES' where it differs): its help, and where it
has them its choices, bounds, check (a function of rules.py), that it names a path, and a
command-line default of its own (common/field_flags.Flag). config/flag_table.py makes the flags
from the settings' fields and these entries; the settings' `validate` applies the choices,
bounds and checks (rules.check_declared). The cluster's flags are declared in cluster.py.
Free of TensorFlow."""

from common import holdout
from common.field_flags import Flag
from inception.config import plans
from inception.config import recipe
from inception.config import rules
from inception.config import sources

TRAIN_HELP = {
    "train_dir": Flag(
        "Directory for checkpoints, event logs and model_settings.json; training "
        "resumes from the newest checkpoint here.", path=True, default=recipe.DEFAULT_TRAIN_DIR),
    "data_dir": Flag(
        "Directory of TFRecord shards (train-*-of-*), or a folder of "
        "images: <folder>/{train,validation}/<label>/<image>, or <folder>/<label>/"
        "<image> with --validation_fraction (its shards are built once into a cache "
        "and rebuilt when its files change); empty: the embedded demo data set, "
        "generated on first use.", path=True),
    "validation_fraction": Flag(
        "For a --data_dir of label folders: the fraction "
        "of each label's images kept for validation (e.g. 0.2; at most "
        f"{holdout.MAX_VALIDATION_FRACTION}).", check=holdout.fraction_problem),
    "dataset": Flag(
        "Data set; empty: demo without --data_dir, else read labels.txt there.",
        choices=("",) + rules.DATASET_NAMES),
    "num_labels": Flag(
        "Labels in the data (background excluded); only for "
        "shards without labels.txt that are not imagenet or flowers.", minimum=1),
    "subset": "Which shards to train on (train-*, validation-*).",
    "num_towers": Flag(
        "Number of towers: one per GPU (default: every GPU), or "
        "virtual CPU devices when there is no GPU (default 2).", minimum=1),
    "virtual_gpu_memory_mb": Flag(
        "Allow more towers than GPUs by splitting each "
        "GPU into virtual GPUs of this many MB.", minimum=0),
    "batch_size": Flag(
        "Global batch size, split evenly across towers "
        f"(default: {recipe.describe_default('batch_size')}).", minimum=1),
    "max_steps": Flag(
        "Train up to this global step (default: "
        f"{recipe.DEMO_DEFAULTS.max_steps} for the demo, "
        f"{recipe.IMAGENET_DEFAULTS.max_steps} for ImageNet; your own data "
        "trains --num_epochs).", minimum=0),
    "num_epochs": Flag(
        "Instead of --max_steps: train this many passes over the "
        "training split's examples, counted in updates (ceil(epochs x examples / "
        "examples per update), accumulation included); logged at the start. Default: "
        f"{recipe.OWN_DATA_DEFAULTS.num_epochs:g} for your own data without "
        "--max_steps; the demo and ImageNet take --max_steps.",
        check=rules.positive(" (1 is one pass over the training split)")),
    "network": Flag(
        "The network to train: inception_v3 (default) or resnet_v1_50 (tf-slim's, with the "
        "variable names of its published checkpoints). Stored with the run: evaluation, "
        "export and a resumed run follow it."),
    "image_size": Flag(
        "Input height and width (default: "
        f"{recipe.describe_default('image_size')}).", check=rules.image_size_problem),
    "depth_multiplier": Flag(
        "Scales every layer's channels (default: "
        f"{recipe.describe_default('depth_multiplier')}).",
        check=rules.positive(" (1.0 is the full network)")),
    "initial_learning_rate": Flag(
        "Initial learning rate (default: "
        f"{recipe.describe_default('initial_learning_rate')}).",
        check=rules.positive(" (a negative rate climbs the loss); try 0.01 to 0.1")),
    "num_epochs_per_decay": Flag(
        "Epochs between learning-rate decays "
        f"(default: {recipe.describe_default('num_epochs_per_decay')}).", check=rules.positive()),
    "learning_rate_decay_factor": Flag(
        "Learning-rate decay factor.", check=rules.decay_factor_problem),
    "learning_rate_scaling": Flag(
        "How --initial_learning_rate follows the "
        "examples of one update (--batch_size x --accumulate_steps, x the workers of "
        "a cluster): it is the rate for the recipe's base batch of "
        f"{recipe.BASE_BATCH_SIZE}, multiplied by their ratio (linear), its square "
        "root (sqrt, the default), or kept (none). The log prints the rate used.",
        choices=rules.LEARNING_RATE_SCALINGS),
    "label_smoothing": Flag(
        "Label smoothing of the "
        "cross-entropy's targets (0: none; default: the original's "
        f"{recipe.LABEL_SMOOTHING:g}).", check=rules.label_smoothing_problem),
    "class_weight":
        "Weigh each class's training examples in the loss: "
        "'balanced' (n / (classes x n_c), counted from the training split), or a "
        "file of '<label> <weight>' lines (names from labels.txt or numbers; "
        "others weigh 1). Default: every example weighs 1.",
    "clip_gradient_norm": Flag(
        "Clip the averaged gradients of each update to "
        "this global norm (after loss scaling is undone; default 0: no clipping). "
        "The log says how often it clipped; TensorBoard shows clipped_updates.",
        check=rules.clip_norm_problem),
    "seed":
        "Seed of the initial weights, the input order and every random "
        "draw of training (distortions, augmentation, mixing, dropout).",
    "deterministic":
        "TensorFlow's op determinism: the same command writes "
        "bit-identical checkpoints on the same machine (--seed, 0 if not given).",
    "precision": Flag(
        "Arithmetic of the towers: fp32 (TF32 tensor cores on GPUs that have them); "
        "bf16 (GPUs of compute capability 8.0+, or CPUs with AVX512-BF16/AMX); fp16 "
        "(GPUs, with dynamic loss scaling). Variables, loss and averaging stay fp32.",
        choices=rules.PRECISIONS),
    "variable_update": Flag(
        "How the towers share the variables: parameter_server (one copy on "
        "--variable_device, or on the parameter servers of a cluster; each step the "
        "towers read it and send their gradients there), replicated (a copy on every "
        "tower's device and an all-reduce of the gradients: NCCL between GPUs, "
        "TensorFlow's collective ring otherwise, also between the workers of a "
        "cluster without --ps_hosts), or auto: on a cluster what it has (parameter "
        "servers or not), replicated with two or more GPUs, else parameter_server. "
        "See docs/multi-gpu.md.", choices=rules.VARIABLE_UPDATES),
    "variable_device": Flag(
        "With --variable_update=parameter_server: where the variables, the gradient "
        "averaging and the updates live: cpu (as in the original; the towers read "
        "them from there), gpu (the first GPU), or auto: the GPU when there is one "
        "GPU, else the CPU. See docs/benchmarks.md.", choices=rules.VARIABLE_DEVICE_CHOICES),
    "all_reduce_buffers": Flag(
        "With --variable_update=replicated: the gradients are packed into this many "
        "buffers before the all-reduce (0: one all-reduce per variable).", minimum=0),
    "sync_batch_norm":
        "Batch norm in training over the global batch of each step (the examples of every "
        "tower, and of every worker of a cluster without --ps_hosts; each micro-batch's own "
        "with --accumulate_steps) instead of each tower's slice; the moving statistics are "
        "then the same on every tower. See docs/multi-gpu.md (Batch norm).",
    "batch_norm_group_size": Flag(
        "With --sync_batch_norm: statistics over groups of this many consecutive towers "
        "(0: all of the cluster's; beside parameter servers, all of one worker's, the most "
        "a group may span there). Must divide them.", minimum=0),
    "target_accuracy": Flag(
        "Stop at the first validation (--eval_every_n_steps) whose precision@1 reaches this "
        "fraction (e.g. 0.759); the log and train/time_to_accuracy give the wall time it "
        "took, resumes included (0: no target).", minimum=0, maximum=1),
    "xla":
        "Compile the step with XLA auto-clustering (fuses batch norm, "
        "ReLU and friends; slower on this project's CPU, see docs/benchmarks.md).",
    "strict_input": "Stop on a damaged image instead of skipping it.",
    "balanced_sampling":
        "Resample the training split toward equal "
        "classes: each record is drawn n / (classes x n_c) times an epoch on average "
        "(rare classes repeated, common ones thinned), epochs keeping their length. "
        "Default: off, each record once an epoch. Not with --class_weight=balanced.",
    "histograms": "Write gradient and variable histograms (costly).",
    "profile_steps":
        "Trace these steps of the run with TensorFlow's profiler, "
        "e.g. 20,25 (first,last; one number: that step) into <train_dir>/plugins/"
        "profile, for TensorBoard's Profile tab: trace viewer, op statistics, and "
        "whether the input is the bottleneck (docs/monitoring.md). Default: none; "
        "other steps run as without it. On a cluster the chief traces.",
    "log_every_n_steps": Flag(
        "Log a loss line every this many steps.", minimum=0),
    "save_summaries_steps": Flag(
        "Write summaries every this many steps (0: off).", minimum=0),
    "save_summaries_secs": Flag(
        "Also write summaries every this many seconds.", minimum=0),
    "save_checkpoint_steps": Flag(
        "Checkpoint every this many steps (0: off).", minimum=0),
    "save_interval_secs": Flag(
        "Also checkpoint every this many seconds (0: off).", minimum=0),
    "keep_checkpoints": Flag(
        "Keep the newest this many checkpoints (older ones "
        "are deleted, over resumed runs too).", minimum=1),
    "keep_checkpoint_every_n_hours": Flag(
        "Also keep one checkpoint every this "
        "many hours of training (0: none kept that way).", minimum=0),
    "on_nan": Flag(
        "When a loss, an update or a variable "
        "becomes NaN/Inf: stop (the newest checkpoint is the last good one), or "
        "rollback to the newest finite checkpoint of this run and go on with the next "
        "batches.", choices=rules.ON_NAN),
    "max_nan_rollbacks": Flag(
        "With --on_nan=rollback: stop after this many "
        "rollbacks in one run.", minimum=0),
    "on_divergence": Flag(
        "When the smoothed loss "
        "climbs to twice its starting value: warn (one line) or stop.",
        choices=rules.ON_DIVERGENCE),
    "eval_every_n_steps": Flag(
        "Score the validation shards every this many "
        "steps and at the end, in this process (0: never; default: "
        f"{recipe.describe_default('eval_every_n_steps')}); results in "
        "<train_dir>/eval_validation, the best checkpoint in <train_dir>/best.", minimum=0),
    "eval_batch_size": Flag(
        "Examples per batch of that validation.", minimum=1),
    "best_metric": Flag(
        "What makes a checkpoint the best one (loss: the lowest; the others: the "
        "highest).", choices=rules.BEST_METRICS),
    "export_best_dir": Flag(
        "Export each new best checkpoint here as the next "
        "SavedModel version (as //inception:export writes them), for a server "
        "that watches this directory.", path=True),
    "stop_after_evals_without_improvement": Flag(
        "Early stopping: stop (saving "
        "first) after this many validations without a new best (0: never).", minimum=0),
    "warmup_steps": Flag(
        "Ramp the learning rate up linearly over this many "
        f"steps (default: {recipe.describe_default('warmup_steps')}).", minimum=0),
    "optimizer": Flag(
        "The optimizer (default: "
        f"{recipe.describe_default('optimizer')}); a --training_plan stage that names "
        "its own keeps it. lars and lamb, for large global batches, scale each variable's "
        "step by its trust ratio and decay the weights themselves (no L2 term in the loss); "
        "without --initial_learning_rate they start from their own base rates. See "
        "docs/learning-rate.md (Large batches).", choices=plans.OPTIMIZERS),
    "warmup_epochs": Flag(
        "Ramp the learning rate up linearly over this many epochs (instead of "
        "--warmup_steps).", minimum=0),
    "adapt_batch_norm_and_biases":
        "With --optimizer=lars or lamb: give batch-norm variables and biases the trust ratio "
        "and weight decay too (by default they take plain steps without decay, as MLPerf's "
        "LARS and NVIDIA's LAMB do).",
    "learning_rate_schedule": Flag(
        "After the warm-up: the original's staircase 'exponential' decay (by "
        "--learning_rate_decay_factor every --num_epochs_per_decay epochs), 'cosine' "
        "down to zero at --max_steps, 'polynomial' (squared, down to zero at --max_steps, "
        "as LARS runs use), or 'constant'. A --training_plan stage may name "
        "its own (over its steps).", choices=plans.SCHEDULES),
    "accumulate_steps": Flag(
        "Micro-batches per update: each update averages "
        "the gradients of this many global batches of --batch_size, so it sees "
        "accumulate_steps x --batch_size examples (the schedule and epochs count "
        "updates).", minimum=1),
    "augment": Flag(
        "Augmentation after each "
        "training image's crop, flip and colours: 'randaugment' applies "
        "--randaugment_ops random operations at --randaugment_magnitude.", choices=rules.AUGMENTS),
    "randaugment_ops": Flag(
        "With --augment=randaugment: operations per image.", minimum=1),
    "randaugment_magnitude": Flag(
        "With --augment=randaugment: their strength, "
        f"0-{rules.MAX_RANDAUGMENT_MAGNITUDE} (10: each operation's full range).",
        minimum=0, maximum=rules.MAX_RANDAUGMENT_MAGNITUDE),
    "random_erasing": Flag(
        "Probability that a training image gets one random "
        "rectangle of noise (0: off; 0.25 is common).", minimum=0, maximum=1),
    "mixup_alpha": Flag(
        "Mixup: each tower's batch mixed with itself reversed at "
        "a ratio drawn from Beta(alpha, alpha), labels mixed alike (0: off; 0.2 is "
        "common).", minimum=0),
    "cutmix_alpha": Flag(
        "CutMix: a box of the reversed batch pasted in, its area "
        "from Beta(alpha, alpha) (0: off; 1.0 is common); with --mixup_alpha, one of "
        "the two per batch.", minimum=0),
    "pretrained_model_checkpoint_path": Flag(
        "Initialize a fresh --train_dir "
        "from this checkpoint (ours, or tf-slim's published inception_v3.ckpt or "
        "resnet_v1_50.ckpt).", path=True),
    "fine_tune":
        "With --pretrained_model_checkpoint_path: leave the network's "
        "classifier freshly initialized (Inception's logits and aux-logits layers, ResNet's "
        "logits; for another number of classes).",
    "checkpoint_exclude_scopes":
        "Variable scopes not restored from "
        "--pretrained_model_checkpoint_path.",
    "intra_op_threads": Flag(
        "Threads inside one op (0: TensorFlow decides).", minimum=0),
    "inter_op_threads": Flag(
        "Ops run at once (0: TensorFlow decides).", minimum=0),
    **sources.HELP,
}

EVAL_HELP = {
    "checkpoint_dir": Flag("The --train_dir of the training run to evaluate.",
                           path=True, default=recipe.DEFAULT_TRAIN_DIR),
    "eval_dir": Flag(
        "Where to write eval summaries (default: "
        "<checkpoint_dir>/eval_<subset>, so TensorBoard shows it beside training).", path=True),
    "data_dir": Flag("Shards to evaluate on (default: the training run's).", path=True),
    "subset": "Which shards: validation or train.",
    "num_examples": Flag(
        "Evaluate the first this many examples (0: all).", minimum=0),
    "batch_size": Flag(
        "Examples per evaluation batch.", minimum=1),
    "eval_interval_secs": Flag(
        "How often to look for a new checkpoint.", minimum=0),
    "run_once": "Evaluate the newest checkpoint once and exit.",
    "timeout_secs": Flag(
        "Stop watching when no new checkpoint appeared for this "
        "long (0: watch until interrupted).", minimum=0),
    "image_size": Flag(
        "Override the stored image size.", check=rules.image_size_problem),
    "depth_multiplier": Flag(
        "Override the stored depth multiplier.",
        check=rules.positive(" (1.0 is the full network)")),
    "strict_input": "Stop on a damaged image instead of skipping it.",
}
