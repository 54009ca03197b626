"""Held-out validation: fit on the cheaper runs, predict the more expensive ones.

A scaling law is only useful if it extrapolates, so this is the default way a report judges a
law: runs whose compute C exceeds a threshold are left out of the fit and predicted. Per run we
report the signed relative error (predicted - actual) / actual; `mean_rel_error` and
`max_rel_error` are the mean and maximum of its absolute value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
import pandas as pd

from analysis import validation
from analysis.laws import points as data_mod
from analysis.laws.budgets import group_budgets
from analysis.laws.registry import Law
from analysis.validation import PREDICTION_LEVEL, coverage
from models.base.errors import AnalysisError


def holdout_report(
    law: Law,
    params_P: np.ndarray,
    pts: data_mod.Points,
    interval: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """Prediction errors of public parameters `params_P` on held-out points; with `interval`
    ((lo, hi) arrays, the fit's 90% prediction interval at each point) also each point's
    `interval` and the `coverage`, the fraction of held-out runs inside their interval."""
    pred = law.predict(params_P, pts.inputs)
    rel = (pred - pts.y) / pts.y
    points = []
    for i in range(pts.n):
        row = {k: float(pts.inputs[k][i]) for k in ("N", "D", "C") if k in pts.inputs}
        for k in law.inputs:
            row.setdefault(k, float(pts.inputs[k][i]))
        row.update(actual=float(pts.y[i]), predicted=float(pred[i]), rel_error=float(rel[i]))
        if interval is not None:
            row["interval"] = [float(interval[0][i]), float(interval[1][i])]
        points.append(row)
    out = {
        "points": points,
        "mean_rel_error": float(np.mean(np.abs(rel))),
        "max_rel_error": float(np.max(np.abs(rel))),
        "mean_signed_rel_error": float(np.mean(rel)),
        "n_points": int(pts.n),
    }
    if interval is not None:
        lo, hi = (np.asarray(v, dtype=float) for v in interval)
        out["coverage"] = coverage(pts.y, lo, hi)
        out["interval_level"] = PREDICTION_LEVEL
        out["mean_interval_rel_width"] = float(np.mean((hi - lo) / pred))
    return out


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
    (`analysis.laws.budgets.group_budgets`): runs of one budget differ in C by whole steps."""
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
