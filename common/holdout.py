"""How much of a folder of label folders a run may hold out for validation
(`--validation_fraction`): the one rule of the flag's check, made before TensorFlow loads, and of
the folder cache, which builds the split. At most 0.9, so at least a tenth of each label's images
is left to train on.
"""

MAX_VALIDATION_FRACTION = 0.9


def fraction_problem(fraction):
    """Why `fraction` cannot be a validation fraction, as the end of a sentence, or None."""
    if 0.0 <= fraction <= MAX_VALIDATION_FRACTION:
        return None
    return (f"must be in [0, {MAX_VALIDATION_FRACTION}], e.g. 0.2 to hold out a fifth of each "
            "label's images")
