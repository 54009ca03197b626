"""What a backtest reports: per method, its predictions of what it did not see, scored.

The JSON (`python -m analysis backtest ... --json`) is `Backtest.to_dict()`:
`{protocol, cut, metric, methods: [{method, baseline, default, n, <error keys>, coverage_90,
mean_width, points, note}]}`. Error keys by protocol: the loss protocols (budget, frontier, size,
epochs, curve) `mean_abs_rel_error` (and `max_abs_rel_error`); `lr` `mean_abs_dlog10` and
`mean_loss_penalty`; `downstream` `mean_abs_error` in accuracy points; `compare`
`mean_abs_log2_error` of the compute multiplier. `coverage_90` is the share
of held-out values inside the method's 90% interval (null: the method gives none) and
`mean_width` the interval's mean width (relative for losses, in dex for `lr`, in points for
`downstream`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analysis.core import validation


class Metric(enum.StrEnum):
    """How a protocol scores a prediction against what was measured."""

    REL = "rel"  # relative error of a loss
    DLOG10 = "dlog10"  # log10 ratio of a hyperparameter (and the loss it costs)
    POINTS = "points"  # accuracy difference in percentage points
    LOG2 = "log2"  # log2 ratio of a compute multiplier (compare)


@dataclass(frozen=True)
class Point:
    """One held-out value and a method's prediction of it."""

    x: dict[str, float]  # where: the inputs that identify the point (N, D, C, U, step, ...)
    actual: float
    predicted: float
    lo: float = math.nan  # the 90% interval (NaN: none)
    hi: float = math.nan
    # lr: loss at the tried value nearest the prediction minus the rung's best; curve-prefix: the
    # final loss of the rung's pick against its best (on the picked run's point)
    penalty: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.x)
        out.update(actual=self.actual, predicted=self.predicted)
        out["interval"] = None if math.isnan(self.lo) else [self.lo, self.hi]
        if not math.isnan(self.penalty):
            out["loss_penalty"] = self.penalty
        return out


@dataclass(frozen=True)
class MethodScore:
    """One candidate method's record on the held-out values."""

    method: str
    points: tuple[Point, ...]
    baseline: bool = False  # the protocol's simple method (docs/backtest.md, "Backtesting")
    default: bool = False  # what the fitting command uses on this data without flags
    note: str = ""  # why it made no prediction, or what it chose

    def errors(self, metric: Metric) -> np.ndarray:
        a = np.array([p.actual for p in self.points], float)
        f = np.array([p.predicted for p in self.points], float)
        with np.errstate(all="ignore"):
            if metric == Metric.REL:
                return f / a - 1
            if metric == Metric.DLOG10:
                return np.log10(f / a)
            if metric == Metric.LOG2:
                return np.log2(f / a)
            return 100 * (f - a)

    def to_dict(self, metric: Metric) -> dict[str, Any]:
        e = self.errors(metric)
        ok = np.isfinite(e)
        mean = float(np.mean(np.abs(e[ok]))) if ok.any() else None
        out: dict[str, Any] = {
            "method": self.method,
            "baseline": self.baseline,
            "default": self.default,
            "n": int(ok.sum()),
        }
        pen = np.array([p.penalty for p in self.points], float)
        if metric == Metric.REL:
            out["mean_abs_rel_error"] = mean
            out["max_abs_rel_error"] = float(np.max(np.abs(e[ok]))) if ok.any() else None
            if np.isfinite(pen).any():  # curve-prefix: the regret of the method's picks
                out["mean_loss_penalty"] = float(np.mean(pen[np.isfinite(pen)]))
        elif metric == Metric.DLOG10:
            out["mean_abs_dlog10"] = mean
            out["mean_loss_penalty"] = (
                float(np.mean(pen[np.isfinite(pen)])) if np.isfinite(pen).any() else None
            )
        elif metric == Metric.LOG2:
            out["mean_abs_log2_error"] = mean
            out["winners_named"], out["winners_right"] = self.named_winners()
        else:
            out["mean_abs_error"] = mean
        out["coverage_90"], out["mean_width"] = self.coverage(metric)
        out["points"] = [p.to_dict() for p in self.points]
        out["note"] = self.note
        return out

    def named_winners(self) -> tuple[int, int]:
        """A multiplier's verdicts (compare): (the points whose 90% interval excludes 1, where the
        method names a winner; those whose named side of 1 is the measured multiplier's)."""
        rows = [p for p in self.points if np.isfinite(p.lo) and np.isfinite(p.hi) and (p.lo > 1 or p.hi < 1)]
        right = sum((p.lo > 1) == (p.actual > 1) and p.actual != 1 for p in rows)
        return len(rows), int(right)

    def coverage(self, metric: Metric) -> tuple[float | None, float | None]:
        """(coverage of the 90% intervals, their mean width), None without intervals."""
        rows = [p for p in self.points if np.isfinite(p.lo) and np.isfinite(p.hi)]
        if not rows:
            return None, None
        a = np.array([p.actual for p in rows])
        lo, hi, f = (np.array([getattr(p, k) for p in rows]) for k in ("lo", "hi", "predicted"))
        cov = validation.coverage(a, lo, hi)
        if metric == Metric.REL:
            width = np.mean((hi - lo) / f)
        elif metric == Metric.DLOG10:
            width = np.mean(np.log10(hi / lo))
        elif metric == Metric.LOG2:
            width = np.mean(np.log2(hi / lo))
        else:
            width = np.mean(100 * (hi - lo))
        return cov, float(width)


@dataclass(frozen=True)
class Backtest:
    """One protocol run on one table: the cut and every method's score."""

    protocol: str
    cut: dict[str, Any]  # {what, threshold, n_fit, n_held_out}
    metric: Metric
    methods: tuple[MethodScore, ...]
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "cut": dict(self.cut),
            "metric": str(self.metric),
            "level": validation.PREDICTION_LEVEL,
            "methods": [m.to_dict(self.metric) for m in self.methods],
            "warnings": list(self.warnings),
        }

    def rows(self) -> list[dict[str, Any]]:
        """One summary row per method (no points): the table the text and Markdown print."""
        out = []
        for m in self.methods:
            d = m.to_dict(self.metric)
            d.pop("points")
            out.append(d)
        return out

    def error_key(self) -> str:
        return {
            Metric.REL: "mean_abs_rel_error",
            Metric.DLOG10: "mean_abs_dlog10",
            Metric.LOG2: "mean_abs_log2_error",
        }.get(self.metric, "mean_abs_error")
