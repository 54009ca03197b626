"""Shape transfer: a run's final loss from the first part of its curve, learned from finished curves.

Each curve is summarised at its cut by a line in (ln step, ln loss) through its last octave (steps in
[cut / 2, cut]; at least `MIN_POINTS`): its `level` (the smoothed ln loss at the cut) and `slope`.
A finished curve cut at the same fraction of its length gives one example of y = ln(final) - level;
y is regressed on `slope`, `log N` and `log <key>` (each when it varies), the subset chosen by
leave-one-curve-out error (`validation.choose`, simplest first). The 90% interval is Gaussian in ln
loss with the least-squares predictive variance s^2 (1 + x0' (X'X)^-1 x0), s the leave-one-out RMS
error (wider for a run whose features lie beyond the finished curves').

The baseline (`ratio`, `RatioFit`): the loss at the cut x the finished curves' median final / cut
ratio, its 90% interval their central 90%; it picks the run with the lowest loss at the cut.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analysis.core import validation
from analysis.forecast.inputs import MIN_POINTS, RunCurve
from models.base.errors import AnalysisError

SLOPE, LOG_N = "slope", "log N"
MIN_COMPLETE = 3  # finished curves a forecast learns from
MIN_SD = 1e-4  # log-loss sd floor (two finished curves can agree to the last digit)


@dataclass(frozen=True)
class Cut:
    """A curve at a cut step: its smoothed ln loss there, its log-log slope, the raw loss there."""

    level: float
    slope: float
    loss: float


def cut_of(curve: RunCurve, step: float) -> Cut | None:
    """The curve's line through its last octave at or before `step` (None: fewer than 2 points)."""
    keep = curve.step <= step * (1 + 1e-9)
    s, y = curve.step[keep], np.log(curve.loss[keep])
    pos = s > 0
    s, y = s[pos], y[pos]
    if s.size < MIN_POINTS:
        return None
    win = s >= s[-1] / 2
    if win.sum() < MIN_POINTS:
        win = np.arange(s.size) >= s.size - MIN_POINTS
    x = np.log(s[win])
    if np.ptp(x) <= 0:
        return None
    b, a = np.polyfit(x, y[win], 1)
    raw = float(np.interp(step, curve.step, curve.loss)) if step <= curve.step[-1] else float(curve.loss[-1])
    return Cut(float(a + b * math.log(step)), float(b), raw)


@dataclass(frozen=True)
class Example:
    """One finished curve cut at a fraction of its length: its cut and what came after."""

    run: str
    cut: Cut
    y: float  # ln(final) - cut.level
    ratio: float  # final / loss at the cut
    settings: dict


def examples(complete: Sequence[RunCurve], frac: float) -> list[Example]:
    """The finished curves cut at `frac` of their length (those with 2 points before it)."""
    out = []
    for c in complete:
        k = cut_of(c, frac * c.total_steps)
        if k is not None:
            out.append(Example(c.run, k, math.log(c.final_loss) - k.level, c.final_loss / k.loss, c.settings))
    return out


def _row(cut: Cut, settings, names: Sequence[str]) -> np.ndarray | None:
    vals = [1.0]
    for n in names:
        if n == SLOPE:
            vals.append(cut.slope)
        else:
            key = n[len("log ") :]
            try:
                v = float(settings.get(key))
            except (TypeError, ValueError):
                return None
            if not v > 0 or not math.isfinite(v):
                return None
            vals.append(math.log(v))
    return np.array(vals)


@dataclass(frozen=True)
class TransferFit:
    """The regression of y on the chosen features over the finished curves at one fraction."""

    frac: float
    features: tuple[str, ...]
    coef: np.ndarray
    xtx_inv: np.ndarray
    s: float  # leave-one-out RMS error (ln loss)
    n: int
    scores: dict[str, float]  # feature set -> leave-one-out RMS error

    def predict(self, cut: Cut, settings) -> tuple[float, float] | None:
        """(ln final loss, its sd) of a run cut here; None when it lacks a feature."""
        x = _row(cut, settings, self.features)
        if x is None:
            return None
        sd = self.s * math.sqrt(1.0 + float(x @ self.xtx_inv @ x))
        return cut.level + float(x @ self.coef), max(sd, MIN_SD)


def _loo(X: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out RMS error of least squares (the hat-matrix shortcut)."""
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    h = np.einsum("ij,jk,ik->i", X, np.linalg.pinv(X.T @ X), X)
    r = (y - X @ coef) / np.maximum(1.0 - h, 1e-9)
    return float(np.sqrt(np.mean(r**2)))


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _varies(values: list[float]) -> bool:
    v = np.array([x for x in values if math.isfinite(x) and x > 0])
    return v.size >= 2 and float(np.ptp(np.log(v))) > 1e-6


def fit_transfer(
    ex: list[Example], frac: float, keys: Sequence[str], needed: Sequence[str] = ()
) -> TransferFit:
    """The regression at `frac` on the finished curves `ex`; `keys`: settings whose log may be a
    feature (when they vary among the curves); `needed`: settings the forecast runs have (a feature
    they lack is not offered)."""
    if len(ex) < MIN_COMPLETE:
        raise AnalysisError(
            f"{len(ex)} finished curve(s) reach {frac:.0%} of their length with {MIN_POINTS} logged points; "
            f"a forecast learns from at least {MIN_COMPLETE} (give more finished runs with --train)"
        )
    offered = [SLOPE] + [
        f"log {k}" for k in keys if k in needed and _varies([_number(e.settings.get(k)) for e in ex])
    ]
    y = np.array([e.y for e in ex])
    scores, fits = {}, {}
    for k in range(len(offered) + 1):
        for names in itertools.combinations(offered, k):
            rows = [_row(e.cut, e.settings, names) for e in ex]
            if any(r is None for r in rows) or len(ex) < len(names) + 3:
                continue
            label = ", ".join(names) or "constant"
            scores[label], fits[label] = _loo(np.stack(rows), y), (names, np.stack(rows))
    label = validation.choose(scores, list(scores))
    names, X = fits[label]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return TransferFit(frac, tuple(names), coef, np.linalg.pinv(X.T @ X), scores[label], len(ex), scores)


@dataclass(frozen=True)
class RatioFit:
    """A ratio baseline (the forecast's `ratio`, the cooldown's branch ratio): a loss times the
    median ratio of the finished examples' final loss to it; 90% interval: their central 90%."""

    frac: float
    ratio: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, ratios: np.ndarray, frac: float = math.nan) -> "RatioFit":
        lo, hi = validation.percentile_bounds(ratios)
        return cls(frac, float(np.median(ratios)), lo, hi, int(np.size(ratios)))

    @property
    def note(self) -> str:
        return f"median ratio {self.ratio:.5g} (central 90% {self.lo:.5g}-{self.hi:.5g})"

    def summary(self) -> str:
        return f"ratio baseline over {self.n} examples: {self.note}"

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "interval": [self.lo, self.hi], "n": self.n}


def fit_ratio(ex: list[Example], frac: float) -> RatioFit:
    if len(ex) < MIN_COMPLETE:
        raise AnalysisError(
            f"{len(ex)} finished curve(s) reach {frac:.0%} of their length; the ratio baseline needs "
            f"at least {MIN_COMPLETE}"
        )
    return RatioFit.of(np.array([e.ratio for e in ex]), frac)
