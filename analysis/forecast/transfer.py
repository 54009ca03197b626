"""Shape transfer: a run's final loss from the first part of its curve, learned from finished curves.

Each curve is summarised at its cut by a line in (ln step, ln loss) through its last octave (steps in
[cut / 2, cut]; at least `MIN_POINTS`): its `level` (the smoothed ln loss at the cut) and `slope`.
A finished curve cut at the same fraction of its length gives one example of y = ln(final) - level;
y is regressed on `slope`, `log N` and `log <key>` (each when it varies) and on what the rest of
the run's schedule does, the subset chosen by leave-one-curve-out error (`validation.choose`,
simplest first). The schedule enters in two ways, each offered when it varies among the finished
curves: with the learning rate known to the end (`lr`, the run's plan), `slope x log area` (the
cut's line continued over the rest of the run's learning-rate area, ln S(T) / S(cut), S the summed
rate: the constant-rate continuation in MPL's S1) and `decay` (1 - the last rate / the peak: how
much the run still anneals); and a non-numeric setting (`schedule`, a recipe name) as a category,
one level per value, offered when every run forecast has a value the finished curves have. Pooled
over schedules without them, a WSD run and a constant one cut in their shared stable phase get one
forecast, and the pick between them is a coin flip. The 90% interval is Gaussian in ln
loss with the least-squares predictive variance s^2 (1 + x0' (X'X)^-1 x0), s the leave-one-out RMS
error (wider for a run whose features lie beyond the finished curves').

The baseline (`ratio`, `RatioFit`): the loss at the cut x the finished curves' median final / cut
ratio, its 90% interval their central 90%; it picks the run with the lowest loss at the cut.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from analysis.core import validation
from analysis.forecast.inputs import MIN_POINTS, RunCurve
from models.base.errors import AnalysisError

SLOPE, LOG_N = "slope", "log N"
AREA, DECAY = "slope x log area", "decay"
CATEGORY = " (category)"  # a non-numeric setting's feature: `schedule (category)`
MAX_CATEGORIES = 2  # non-numeric settings offered as categories, at most (the chosen key first)
MIN_COMPLETE = 3  # finished curves a forecast learns from
MIN_SD = 1e-4  # log-loss sd floor (two finished curves can agree to the last digit)


@dataclass(frozen=True)
class Cut:
    """A curve at a cut step: its smoothed ln loss there, its log-log slope, the raw loss there, and
    (when the schedule to the end is known) ln S(T) / S(cut) and the decay still to come."""

    level: float
    slope: float
    loss: float
    log_area: float = math.nan
    decay: float = math.nan


def schedule_terms(steps: np.ndarray, lr: np.ndarray, cut: float, total: float) -> tuple[float, float]:
    """(ln S(total) / S(cut), 1 - lr(total) / peak) of a schedule (steps, lr) to `total`: S the summed
    rate (trapezoids; before the first logged step a linear ramp from 0, the warm-up); NaN when the
    schedule ends before `total` or has no positive rate."""
    t, r = np.asarray(steps, float), np.asarray(lr, float)
    if t.size < 2 or t[-1] < total * (1 - 1e-3) or not np.all(np.isfinite(r)) or not (r > 0).any():
        return math.nan, math.nan
    S = np.concatenate([[r[0] * t[0] / 2], r[0] * t[0] / 2 + np.cumsum(np.diff(t) * (r[1:] + r[:-1]) / 2)])
    at = lambda x: float(np.interp(x, t, S))  # noqa: E731
    if not at(cut) > 0:
        return math.nan, math.nan
    return math.log(at(total) / at(cut)), 1.0 - float(np.interp(total, t, r)) / float(r.max())


def cut_of(curve: RunCurve, step: float, plan: tuple[np.ndarray, np.ndarray] | None = None) -> Cut | None:
    """The curve's line through its last octave at or before `step` (None: fewer than 2 points);
    `plan`: the run's schedule (steps, lr) to its end (a finished curve: its own logged rates)."""
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
    area, decay = math.nan, math.nan
    if plan is None and curve.finished and curve.lr is not None:
        plan = (curve.step, curve.lr)
    if plan is not None:
        area, decay = schedule_terms(plan[0], plan[1], step, curve.total_steps)
    return Cut(float(a + b * math.log(step)), float(b), raw, area, decay)


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
        k = cut_of(c, frac * c.total_steps, (c.step, c.lr) if c.lr is not None else None)
        if k is not None:
            out.append(Example(c.run, k, math.log(c.final_loss) - k.level, c.final_loss / k.loss, c.settings))
    return out


def _row(
    cut: Cut, settings, names: Sequence[str], levels: Mapping[str, Sequence[str]] | None = None
) -> np.ndarray | None:
    vals, levels = [1.0], levels or {}
    for n in names:
        if n == SLOPE:
            vals.append(cut.slope)
        elif n in (AREA, DECAY):
            v = cut.slope * cut.log_area if n == AREA else cut.decay
            if not math.isfinite(v):
                return None
            vals.append(v)
        elif n.endswith(CATEGORY):
            lv, v = levels[n], str(settings.get(n[: -len(CATEGORY)]))
            if v not in lv:
                return None
            vals += [float(v == x) for x in lv[1:]]  # the first level is the intercept's
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
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a category's values

    def predict(self, cut: Cut, settings) -> tuple[float, float] | None:
        """(ln final loss, its sd) of a run cut here; None when it lacks a feature."""
        x = _row(cut, settings, self.features, self.levels)
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


def categories(
    ex: Sequence[Example], runs: Sequence[Mapping[str, Any]], first: str | None
) -> dict[str, tuple]:
    """{`<key> (category)`: its values}: the non-numeric settings (`first`, the chosen key, first) that
    take two or more values among the finished curves `ex`, every run of `runs` (the settings of the
    runs forecast) having one of them; at most MAX_CATEGORIES."""
    keys = sorted({k for e in ex for k, v in e.settings.items() if isinstance(v, str)})
    keys = sorted(keys, key=lambda k: k != first)
    out = {}
    for k in keys:
        vals = [e.settings.get(k) for e in ex]
        lv = tuple(sorted({str(v) for v in vals}))
        if any(not isinstance(v, str) for v in vals) or len(lv) < 2 or len(lv) > len(ex) // 3:
            continue
        if all(str(r.get(k)) in lv for r in runs):
            out[k + CATEGORY] = lv
        if len(out) == MAX_CATEGORIES:
            break
    return out


def fit_transfer(
    ex: list[Example],
    frac: float,
    keys: Sequence[str],
    needed: Sequence[str] = (),
    schedule: bool = False,
    levels: Mapping[str, tuple] | None = None,
) -> TransferFit:
    """The regression at `frac` on the finished curves `ex`; `keys`: settings whose log may be a
    feature (when they vary among the curves); `needed`: settings the forecast runs have (a feature
    they lack is not offered); `schedule`: the runs' schedules are known to their end (the area and
    decay features may be offered); `levels`: the categories offered (`categories`)."""
    if len(ex) < MIN_COMPLETE:
        raise AnalysisError(
            f"{len(ex)} finished curve(s) reach {frac:.0%} of their length with {MIN_POINTS} logged points; "
            f"a forecast learns from at least {MIN_COMPLETE} (give more finished runs with --train)"
        )
    offered = [SLOPE] + [
        f"log {k}" for k in keys if k in needed and _varies([_number(e.settings.get(k)) for e in ex])
    ]
    if schedule:
        for name, v in (
            (AREA, [e.cut.slope * e.cut.log_area for e in ex]),
            (DECAY, [e.cut.decay for e in ex]),
        ):
            v = np.asarray(v, float)
            if np.all(np.isfinite(v)) and float(np.ptp(v)) > 1e-6:
                offered.append(name)
    levels = levels or {}
    offered += list(levels)
    y = np.array([e.y for e in ex])
    scores, fits = {}, {}
    for k in range(len(offered) + 1):
        for names in itertools.combinations(offered, k):
            rows = [_row(e.cut, e.settings, names, levels) for e in ex]
            if any(r is None for r in rows) or len(ex) < rows[0].size + 2:
                continue
            label = ", ".join(names) or "constant"
            scores[label], fits[label] = _loo(np.stack(rows), y), (names, np.stack(rows))
    label = validation.choose(scores, list(scores))
    names, X = fits[label]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    used = {k: v for k, v in levels.items() if k in names}
    return TransferFit(
        frac, tuple(names), coef, np.linalg.pinv(X.T @ X), scores[label], len(ex), scores, used
    )


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
