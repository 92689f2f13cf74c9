"""Exceptions that end a run with one clear line instead of a traceback."""


class ConfigError(ValueError):
    """A config value is invalid; the message names the field and the numbers."""
