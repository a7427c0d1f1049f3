"""What every evaluation writes and logs, in the eval job and in training alike: the scalars,
the per-class CSV, the confusion matrix and the worst classes (TensorBoard image and text),
and the result lines."""

import os

from inception.run import tags
from inception.validation import per_class
from inception.validation import scoring

PER_CLASS_CSV = "per_class-{step}.csv"


def publish(result, writer, eval_dir, label_names, log, heading=None):
    """Writes `result` (scoring.EvalResult) to `writer` and `eval_dir` and logs it.

    Args:
      writer: a FileWriter on eval_dir; label_names: label_names[i - 1] names label i.
      heading: the start of the result line (default: "step <step>").
    Returns the path of the per-class CSV.
    """
    scoring.write_summaries(writer, result)
    scores = per_class.class_scores(result.confusion, label_names)
    pairs = per_class.confused_pairs(result.confusion, label_names)
    csv_path = per_class.write_csv(
        os.path.join(eval_dir, PER_CLASS_CSV.format(step=result.step)), scores)
    writer.add_summary(per_class.summary(result.confusion, label_names, tags.METRICS_GROUP),
                       result.step)
    writer.flush()
    damaged = (f", {result.corrupt_records} damaged images skipped"
               if result.corrupt_records else "")
    log(f"{heading or f'step {result.step}'}: {result.line()}, loss = {result.loss:.4f}"
        f"{damaged}")
    log(f"  {per_class.log_line(per_class.worst_classes(scores), pairs)} (all classes: "
        f"{csv_path})")
    return csv_path
