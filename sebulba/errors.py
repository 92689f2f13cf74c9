"""Exceptions that end a run with one clear line instead of a traceback."""


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and the numbers."""


class TrainingDivergedError(FloatingPointError):
    """A loss became NaN or infinite; the message names the update and the losses.

    The run stops before saving a checkpoint, so the last checkpoint holds finite values.
    """


class InvalidRolloutError(Exception):
    """An actor thread collected a value its spec does not allow (a NaN or infinity, an
    action outside the action space, a flag byte other than 0 or 1, another thread's env
    id), or, with `debug.consistency_checks`, a rollout its own records do not reproduce;
    the message names the thread, its actor loop and device, the rollout, the policy
    version and each bad field with its first bad step and env.

    Raised before the handoff, so the learner never updates from the rollout.
    """
