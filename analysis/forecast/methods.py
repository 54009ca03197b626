"""The forecast family's methods in the one registry (`analysis.core.methods`), all scored by the
`curve-prefix` protocol: `auto` (`forecast`'s default), its candidates `transfer` and `mpl`, and the
baseline `baseline_lowest_at_cut` (`forecast --method ratio`).

`fit(table, train=None, choose=None)` forecasts every run of a curves prefix table (a path, a sweep
directory, a DataFrame or RunCurves: `read_curves`) from the finished runs of `train` (default: the
table's own) and returns the `ForecastResult`; `predict(record, {"run": i})` is the final loss of
the runs at indices i (sorted by name; default: every run) with its 90% interval.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.forecast.engine import ForecastResult, forecast_runs
from analysis.forecast.inputs import RunCurve, read_curves
from analysis.forecast.results import Method as How

PROTOCOL = "curve-prefix"
# name -> (forecast --method, role, one line)
FORECAST_METHODS: dict[str, tuple[How, Role, str]] = {
    "baseline_lowest_at_cut": (
        How.RATIO,
        Role.BASELINE,
        "the loss at the cut x the finished curves' median final/cut ratio (picks the lowest at the cut)",
    ),
    "auto": (
        How.AUTO,
        Role.DEFAULT,
        "the baseline unless a law beats it on every fold of the finished curves",
    ),
    "transfer": (
        How.TRANSFER,
        Role.CANDIDATE,
        "the rest of the curve's shape learned from the finished curves",
    ),
    "mpl": (How.MPL, Role.CANDIDATE, "the multi-power law, its annealing learned from the finished curves"),
}


def _curves(source: Any, what: str) -> list[RunCurve]:
    return list(source) if isinstance(source, (list, tuple)) else read_curves(source, what)


def _fit(how: How, role: Role):
    def fit(table: Any, train: Any = None, choose: str | None = None, **_: Any) -> ForecastResult:
        prefix = _curves(table, "PREFIX")
        complete = prefix if train is None else _curves(train, "COMPLETE")
        # a candidate is scored on its own picks; the default validates its picks on the folds
        return forecast_runs(prefix, complete, choose, how, validate=role != Role.CANDIDATE)

    return fit


def predict(record: ForecastResult, inputs: Mapping[str, np.ndarray]) -> Prediction:
    runs = [record.runs[int(i)] for i in inputs.get("run", range(len(record.runs)))]
    return Prediction(*np.array([(r.final_loss, *r.interval) for r in runs]).T)


def plot(record: ForecastResult, table: Any, ax: Any = None):
    """Each run's curve so far (line) and its forecast final loss with the 90% interval (an error
    bar at its planned last step)."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    import matplotlib
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    curves = {c.run: c for c in _curves(table, "PREFIX")} if table is not None else {}
    for i, f in enumerate(record.runs):
        color = matplotlib.colormaps["tab10"](i % 10)
        c = curves.get(f.run)
        if c is not None:
            ax.plot(c.step, c.loss, color=color, lw=1.0, label=f.run)
        end = c.total_steps if c is not None else i
        lo, hi = f.interval
        ax.errorbar([end], [f.final_loss], [[f.final_loss - lo], [hi - f.final_loss]], fmt="o", color=color)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"forecast ({record.method})", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return fig


for _name, (_how, _role, _doc) in FORECAST_METHODS.items():
    register(Method(_name, Family.FORECAST, (PROTOCOL,), _role, _fit(_how, _role), predict, plot, _doc))
