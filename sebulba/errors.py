"""Exceptions that end a run with one clear line instead of a traceback."""


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and the numbers."""


class TrainingDivergedError(FloatingPointError):
    """A loss became NaN or infinite; the message names the update and the losses.

    The run stops before saving a checkpoint, so the last checkpoint holds finite values.
    """


class NonFiniteRolloutError(FloatingPointError):
    """An actor thread collected NaN or infinite values; the message names the thread, its
    actor loop and device, the rollout and the fields with their first bad step.

    Raised before the handoff, so the learner never updates from the rollout.
    """
