"""The curve family's method in the one registry (`analysis.core.methods`): `mpl`, the multi-power
law by fit-curve's multistart protocol (the default of the `curve` and `cooldown` protocols; their
baselines are registered with the protocols, `analysis/backtests/curves.py` and `cooldown.py`).

`fit(table, **options)` takes what fit-curve reads (a curve CSV, a folder of them, a run or sweep
directory, a curves table with a run column, Curves, or a list of those: `data.load_curves`) and
`fit_curve`'s options (fit_until, fixed, predict, resolution, intervals, warmup, warmup_steps);
`predict(record, {"step": ...})` is the fitted curve's loss at those steps (one fitted curve), or
with `"lr"` (the rate at each of those steps) that of a new schedule, each with its 90% interval.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.curves.data import Curve, load_curves
from analysis.curves.fitting import CurveFitResult, fit_curve
from models.base.errors import AnalysisError

PROTOCOLS = ("curve", "cooldown")


def target(curves: tuple[Curve, ...], inputs: Mapping[str, np.ndarray]) -> tuple[Curve, np.ndarray]:
    """(curve, steps) that `inputs` ask for: {"step"} on the one fitted curve, or {"step", "lr"} a
    new schedule logged at those steps (rebuilt as `Curve.schedule` does: warm-up from 0 before
    the first step; the loss there is unknown)."""
    if "step" not in inputs:
        raise AnalysisError("a curve prediction needs step (and lr: the schedule at those steps)")
    t = np.asarray(inputs["step"], float).astype(np.int64)
    if "lr" in inputs:
        lr = np.broadcast_to(np.asarray(inputs["lr"], float), t.shape)
        return Curve("new schedule", t, np.full(t.size, np.nan), lr), t
    if len(curves) != 1:
        raise AnalysisError(f"the fit has {len(curves)} curves: give lr (the schedule at those steps) too")
    return curves[0], t


def _fit(
    table: Any, warmup: str = "linear", warmup_steps: int | None = None, **options: Any
) -> CurveFitResult:
    curves = load_curves(table, warmup=warmup, warmup_steps=warmup_steps)
    return fit_curve(curves, **options)


def _predict(record: CurveFitResult, inputs: Mapping[str, np.ndarray]) -> Prediction:
    fitted = tuple(c for c in record.curves if c.name in record.fitted)
    curve, t = target(fitted, inputs)
    return Prediction(*record.predict_interval(curve, t))


def plot(record: CurveFitResult, table: Any, ax: Any = None):
    """Each curve of the fit (the fitted ones, then the predicted): logged loss (dots) and the
    law's prediction with its 90% interval (line and band), loss against step."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    import matplotlib
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    for i, c in enumerate(record.curves):
        color = matplotlib.colormaps["tab10"](i % 10)
        t = c.law_steps()
        pred, lo, hi = record.predict_interval(c, t)
        ax.scatter(t, c.loss_at(t), s=6, color=color, alpha=0.5)
        ax.plot(
            t, pred, color=color, lw=1.2, label=c.name + ("" if c.name in record.fitted else " (predicted)")
        )
        if np.all(np.isfinite(lo)):
            ax.fill_between(t, lo, hi, color=color, alpha=0.15, lw=0)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"mpl ({record.protocol})", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return fig


MPL_METHOD = register(
    Method(
        "mpl",
        Family.CURVE,
        PROTOCOLS,
        Role.DEFAULT,
        _fit,
        _predict,
        plot,
        "Luo et al. 2025's multi-power law, their AdamW fit from 27 starts (fit-curve's default)",
    )
)
