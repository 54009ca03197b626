"""Held-out validation: fit on the cheaper runs, predict the more expensive ones.

A scaling law is only useful if it extrapolates, so this is the default way a report judges a
law: runs whose compute C exceeds a threshold are left out of the fit and predicted. Per run we
report the signed relative error (predicted - actual) / actual; `mean_rel_error` and
`max_rel_error` are the mean and maximum of its absolute value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core import table as data_mod
from analysis.core import validation
from analysis.core.budgets import group_budgets
from analysis.core.intervals import Interval
from analysis.core.validation import PREDICTION_LEVEL, coverage
from analysis.laws.registry import Law
from models.base.errors import AnalysisError


@dataclass(frozen=True)
class HeldOutRun:
    """One held-out run: where it is, its loss, the fit's prediction and its error."""

    inputs: dict[str, float]  # N, D and C where known, then the law's other inputs
    actual: float
    predicted: float
    rel_error: float  # (predicted - actual) / actual
    interval: Interval | None = None  # the fit's 90% prediction interval at the run

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.inputs)
        out.update(actual=self.actual, predicted=self.predicted, rel_error=self.rel_error)
        if self.interval is not None:
            out["interval"] = self.interval.to_list()
        return out


@dataclass(frozen=True)
class HoldoutReport:
    """How a fit predicted the runs it did not see (`holdout` in `fit --json`)."""

    threshold: float  # runs with C above it were held out
    points: tuple[HeldOutRun, ...]
    mean_rel_error: float  # mean |rel_error|
    max_rel_error: float
    mean_signed_rel_error: float
    n_points: int
    # with prediction intervals: the share of held-out runs inside theirs, at this level
    coverage: float | None = None
    interval_level: float | None = None
    mean_interval_rel_width: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "threshold": self.threshold,
            "points": [p.to_dict() for p in self.points],
            "mean_rel_error": self.mean_rel_error,
            "max_rel_error": self.max_rel_error,
            "mean_signed_rel_error": self.mean_signed_rel_error,
            "n_points": self.n_points,
        }
        if self.coverage is not None:
            out.update(
                coverage=self.coverage,
                interval_level=self.interval_level,
                mean_interval_rel_width=self.mean_interval_rel_width,
            )
        return out


def holdout_report(
    law: Law,
    params_P: np.ndarray,
    pts: data_mod.Points,
    threshold: float,
    interval: tuple[np.ndarray, np.ndarray] | None = None,
) -> HoldoutReport:
    """Prediction errors of public parameters `params_P` on the points held out above
    `threshold`; with `interval` ((lo, hi) arrays, the fit's 90% prediction interval at each
    point) also each point's `interval` and the `coverage`, the fraction of held-out runs
    inside their interval."""
    pred = law.predict(params_P, pts.inputs)
    rel = (pred - pts.y) / pts.y
    points = []
    for i in range(pts.n):
        where = {k: float(pts.inputs[k][i]) for k in ("N", "D", "C") if k in pts.inputs}
        for k in law.inputs:
            where.setdefault(k, float(pts.inputs[k][i]))
        band = None if interval is None else Interval(float(interval[0][i]), float(interval[1][i]))
        points.append(HeldOutRun(where, float(pts.y[i]), float(pred[i]), float(rel[i]), band))
    spread = {}
    if interval is not None:
        lo, hi = (np.asarray(v, dtype=float) for v in interval)
        spread = dict(
            coverage=coverage(pts.y, lo, hi),
            interval_level=PREDICTION_LEVEL,
            mean_interval_rel_width=float(np.mean((hi - lo) / pred)),
        )
    return HoldoutReport(
        threshold=float(threshold),
        points=tuple(points),
        mean_rel_error=float(np.mean(np.abs(rel))),
        max_rel_error=float(np.max(np.abs(rel))),
        mean_signed_rel_error=float(np.mean(rel)),
        n_points=int(pts.n),
        **spread,
    )


def subset(pts: data_mod.Points, mask: np.ndarray) -> data_mod.Points:
    return replace(
        pts,
        inputs={k: v[mask] for k, v in pts.inputs.items()},
        y=pts.y[mask],
        weights=pts.weights[mask],
        index=pts.index[mask],
    )


def split(pts: data_mod.Points, threshold: float) -> tuple[data_mod.Points, data_mod.Points]:
    """(points with C <= threshold, points with C > threshold); errors say how to fix a bad split."""
    if "C" not in pts.inputs:
        raise AnalysisError(
            "held-out validation needs compute per run: give a C column (or N and D to derive C = 6ND)"
        )
    if not threshold > 0:
        raise AnalysisError(f"--holdout-above must be a positive FLOP count, got {threshold}")
    above = validation.holdout_mask(pts.inputs["C"], threshold)
    if not above.any():
        raise AnalysisError(
            f"no run has C above {threshold:g} (max C is {pts.inputs['C'].max():.3g}); lower --holdout-above"
        )
    if above.all():
        raise AnalysisError(
            f"every run has C above {threshold:g} (min C is {pts.inputs['C'].min():.3g}); "
            f"nothing is left to fit on"
        )
    return subset(pts, ~above), subset(pts, above)


def top_budget_threshold(df: pd.DataFrame, law: Law, columns: Mapping[str, str] | None = None) -> float:
    """The threshold that holds out exactly the top compute budget: the geometric mid-point of
    the smallest C of the top budget and the largest C of the one below. Budgets are grouped first
    (`analysis.core.budgets.group_budgets`): runs of one budget differ in C by whole steps."""
    vals, _ = data_mod.resolve_inputs(df, law.inputs, columns)
    if "C" not in vals:
        raise AnalysisError("held-out validation needs compute per run (C, or N and D)")
    C = vals["C"]
    labels = group_budgets(C)
    top = labels == labels.max()
    if top.all():
        raise AnalysisError(
            "held-out validation needs runs at two or more compute budgets "
            f"(all {C.size} runs are within 10% of C={np.exp(np.mean(np.log(C))):.3g})"
        )
    return float(np.sqrt(C[top].min() * C[~top].max()))
