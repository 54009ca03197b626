"""Early forecasts of a run's final loss from the first part of its curve (`python -m analysis
forecast`; docs/fit.md, "Forecasts from the first part of a run"): `inputs.py` reads curves,
`engine.py` forecasts, `methods.py` registers the methods."""

from analysis.forecast.engine import ForecastResult, forecast_runs
from analysis.forecast.inputs import ForecastNote, RunCurve, read_curves
from analysis.forecast.results import Method, RunForecast

__all__ = [
    "ForecastNote",
    "ForecastResult",
    "Method",
    "RunCurve",
    "RunForecast",
    "forecast_runs",
    "read_curves",
]
