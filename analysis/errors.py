"""The one exception type the analysis CLI turns into a clean one-line error.

Raise `AnalysisError("what is wrong; what to do")` for any bad user input (bad CSV, NaN data,
too few points, unknown law...). The CLI prints `error: <message>` and exits 2, never a traceback.
"""


class AnalysisError(ValueError):
    """Bad input to the analysis tools; the message must say what to fix."""
