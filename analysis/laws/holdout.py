"""Held-out validation: fit on the cheaper runs, predict the more expensive ones.

A scaling law is only useful if it extrapolates, so this is the default way a report judges a
law: runs whose compute C exceeds a threshold are left out of the fit and predicted. Per run we
report the signed relative error (predicted - actual) / actual; `mean_rel_error` and
`max_rel_error` are the mean and maximum of its absolute value.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core import table as data_mod
from analysis.core import validation
from analysis.core.best_runs import rows_to_fit
from analysis.core.budgets import group_budgets
from analysis.core.enums import LawName
from analysis.core.intervals import Interval
from analysis.core.validation import PREDICTION_LEVEL, coverage
from analysis.laws.registry import Law, get_law
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


# ---- the loss backtests' runs table and cuts (analysis.backtests.losses, laws.selection) ----------
REPEAT_TOLERANCE = 1.01  # D > 1.01 U: a run that repeats (not one rounded to whole steps)
EPOCHS_DEFAULT = 4.0  # the epochs protocol holds out the runs of more than this many epochs
MIN_HELD = 3  # the default budget cut holds out at least this many runs (one run scores nothing)


def runs_table(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The runs as N, D, C, loss (and U when the table has unique tokens): the rows `fit` would fit
    (the best run per rung of an LR sweep), those with a missing or non-positive value dropped (a
    warning says how many)."""
    df = rows_to_fit(df, (columns or {}).get("loss"))[0].reset_index(drop=True)
    u_col = data_mod._find(df, "U", (columns or {}).get("U"))
    # a U column with no value (a sweep whose runs never repeated data) is no U
    has_u = u_col is not None and (pd.to_numeric(df[u_col], errors="coerce") > 0).any()
    roles = ("N", "D", "U") if has_u else ("N", "D")
    loss_col = data_mod._find(df, "loss", (columns or {}).get("loss"))
    if loss_col is None:
        raise data_mod._missing(df, "loss", "loss")
    keep = np.ones(len(df), bool)
    for role in (*roles, "C"):
        name = data_mod._find(df, role, (columns or {}).get(role))
        if name is not None:
            v = pd.to_numeric(df[name], errors="coerce").to_numpy(float)
            keep &= np.isfinite(v) & (v > 0)
    y = pd.to_numeric(df[loss_col], errors="coerce").to_numpy(float)
    keep &= np.isfinite(y) & (y > 0)
    if not keep.any():
        raise AnalysisError(
            f"no run has a positive, finite {', '.join((*roles, 'C'))} and loss: nothing to backtest"
        )
    if (~keep).any():
        warnings.warn(
            f"{int((~keep).sum())} of {len(df)} rows have a missing or non-positive value; left out"
        )
    pts = data_mod.resolve(df[keep], roles, {k: v for k, v in (columns or {}).items()})
    out = pd.DataFrame({k: pts.inputs[k] for k in (*roles, "C") if k in pts.inputs})
    out["loss"] = pts.y
    return out


def protocol_split(
    runs: pd.DataFrame,
    protocol: str,
    holdout_above: float | None = None,
    holdout_above_n: float | None = None,
    epochs_above: float = EPOCHS_DEFAULT,
) -> tuple[np.ndarray, dict]:
    """(held-out mask, cut description) of a loss backtest protocol (budget, frontier, size, epochs)
    on a `runs_table`: what `backtest --protocol P` hides, and what `fit`'s choice on repeated data
    holds out (`selection.repeated_folds`)."""
    if protocol in ("budget", "frontier"):
        thr = holdout_above
        if thr is None:  # the top budget; on a ladder whose C scatter (Epoch's), at least MIN_HELD runs
            thr = top_budget_threshold(runs, get_law(LawName.CHINCHILLA))
            if (runs.C.to_numpy() > thr).sum() < MIN_HELD:
                thr = validation.top_k_cut(runs.C.to_numpy(), MIN_HELD)
        held, what = validation.holdout_mask(runs.C, thr), f"C > {thr:.4g}"
    elif protocol == "size":
        thr = holdout_above_n
        held = validation.holdout_mask(runs.N, thr)
        thr = float(runs.N[~held].max()) if thr is None and (~held).any() else thr
        what = f"N > {thr:.4g}" if thr is not None else "N at the largest size (one size only)"
    else:
        if "U" not in runs:
            raise AnalysisError(
                "--protocol epochs needs unique tokens per run: give a U (or unique_tokens) column"
            )
        thr = epochs_above
        held, what = (runs.D / runs.U).to_numpy() > thr * REPEAT_TOLERANCE, f"epochs (D/U) > {thr:g}"
    if not held.any():
        raise AnalysisError(f"no run has {what}; lower the threshold")
    if held.all():
        raise AnalysisError(f"every run has {what}; nothing is left to fit on: raise the threshold")
    return held, {
        "what": what,
        "threshold": float(thr),
        "n_fit": int((~held).sum()),
        "n_held_out": int(held.sum()),
    }
