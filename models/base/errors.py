"""User-input errors: the exception types every command turns into one clean `error: ...` line.

Raise `ConfigError` for a bad training/RL/sweep configuration (the message names the config key
as typed on the Hydra command line) and `AnalysisError` for bad input to the analysis tools (bad
CSV, NaN data, too few points, unknown law...). Both say what to fix; commands print the message
and exit 2, never a traceback. `ScalelabError` is their common base for code that catches both.
"""


class ScalelabError(ValueError):
    """Bad user input anywhere in scalelab; the message must say what to fix."""


class ConfigError(ScalelabError):
    """Bad user configuration; the message says which key is wrong and how to fix it."""


class AnalysisError(ScalelabError):
    """Bad input to the analysis tools; the message must say what to fix."""
