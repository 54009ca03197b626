"""Early forecasts of a run's final loss from the first part of its curve (`python -m analysis
forecast`), the chance each run of a rung ends best, and what the sweeps' early stopping reads
(docs/analysis.md, "Forecasts from the first part of a run").

- `inputs.py`: curves tables and sweep directories -> `RunCurve`s (steps, loss, lr, total_steps, settings);
- `transfer.py`: the shape transfer learned from finished curves, and the ratio baseline;
- `law.py`: the multi-power law when the learning-rate schedule is known;
- `choose.py`: rungs and p_best;
- `engine.py`: `forecast_runs` and its `ForecastResult`; `results.py`: one run's forecast, one fit's summary.
"""

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
