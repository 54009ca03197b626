"""Calibrated 90% forecast intervals for loss-curve predictions (jackknife+ over curve refits).

Why not parameter CIs: the curve laws are misspecified at the 0.1-1% level (the multi-power law
misses how the loss drop saturates for large learning-rate drops, and its power law drifts over 3x
longer horizons), which is more than the parameter noise of a fit on hundreds of points implies.
So the interval is built from *forecasts the law makes from part of the fitted data*, of the same
two kinds the user asks for:

- leave-one-curve-out: refit on the other fitted curves, forecast the left-out curve (a schedule
  the fit has not seen);
- early-part fits: refit on the first 1/2 and the first 1/3 of every fitted curve, forecast the
  rest (a horizon beyond the fitted one).

Each (refit, forecast curve) pair is one calibration *unit* u (points of one curve share one
misfit, so a curve, not a point, is the exchangeable unit). Its forecast errors, relative to the
actual loss, grow with how far the forecast lies from the data its refit saw, measured by

    scale = 1 + h + r,   h = max(0, ln(S1(t) / S1_max)),   r = max(0, ln(eta_min / eta(t))),

the e-folds of area under the schedule beyond the largest fitted one (a 3x longer constant run
ends at h = ln 3) and of learning rate below the lowest fitted one; assumed: one e-fold beyond the
data doubles the relative error. The unit's residual R_u is the 90% quantile of its errors
divided by their scale.

A new point t then gets the jackknife+ interval (Barber, Candes, Ramdas, Tibshirani 2021,
"Predictive inference with the jackknife+"), with the refits as the leave-out fits: every unit
proposes [mu_u(t) / (1 + R_u s), mu_u(t) (1 + R_u s)], mu_u its refit's prediction and s the point's
scale for the full fit, and the interval runs from the k-th largest lower to the k-th smallest
upper end, k = ceil(0.9 (U + 1)) capped at U (so with U <= 9 units: the widest of them). It
widens both where the refits' own forecasts missed (misspecification) and where the refits
disagree at t (a forecast far from the fitted data, where which data the fit saw matters).
The interval is joined with the band [pred / (1 + R s), pred (1 + R s)] around the full fit's own
prediction, R the k-th smallest residual: refits on a half or a third of the data can all miss on
one side of a long forecast, and an interval that excludes the point forecast helps nobody.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from analysis import validation
from analysis.curves.data import Curve, peak_index
from analysis.curves.features import subset
from analysis.curves.optimize import Problem, evaluate

LEVEL = 0.9
TAIL_FRACTIONS = (1 / 2, 1 / 3)
SPLIT_STARTS = 4  # starts per calibration refit (spread over the law's start grid)


@dataclass(frozen=True)
class FitDomain:
    """What the fitted points covered: the largest area under the schedule and the lowest rate."""

    S1_max: float
    eta_min: float

    @staticmethod
    def of(parts: Sequence[tuple[Curve, np.ndarray]]) -> "FitDomain":
        S1_max, eta_min = 0.0, math.inf
        for curve, t in parts:
            if len(t) == 0:
                continue
            eta = curve.schedule()
            S1_max = max(S1_max, float(np.cumsum(eta)[t].max()))
            eta_min = min(eta_min, float(eta[peak_index(eta) : int(np.max(t)) + 1].min()))
        return FitDomain(S1_max, eta_min)

    def scale(self, curve: Curve, t: np.ndarray) -> np.ndarray:
        """1 + h + r per point (see the module docstring)."""
        eta = curve.schedule()
        h = np.maximum(0.0, np.log(np.cumsum(eta)[t] / self.S1_max))
        r = np.maximum(0.0, np.log(self.eta_min / np.maximum(eta[t], 1e-300)))
        return 1.0 + h + r


@dataclass(frozen=True)
class CalibrationUnit:
    """One (refit, forecast curve) pair; score = R_u, the 90% quantile of its errors / scale."""

    split: str
    curve: str
    n_points: int
    score: float
    max_scale: float

    def to_dict(self) -> dict:
        return {
            "split": self.split,
            "curve": self.curve,
            "n_points": self.n_points,
            "score": self.score,
            "max_scale": self.max_scale,
        }


@dataclass(frozen=True)
class IntervalModel:
    """Jackknife+ forecast intervals from the calibration refits (see the module docstring)."""

    level: float
    rank: int  # k: the interval runs from the k-th largest lower to the k-th smallest upper end
    units: tuple[CalibrationUnit, ...]
    domain: FitDomain  # what the full fit saw (the scale of a new point)
    refits: tuple[tuple[str, tuple[float, ...]], ...]  # (split name, public parameters)

    @property
    def residual(self) -> float:
        """The k-th smallest unit residual: a relative half-width at scale 1, for reporting."""
        return float(np.sort([u.score for u in self.units])[self.rank - 1])

    def bounds(
        self, pred: np.ndarray, refit_preds: dict[str, np.ndarray], scale: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per point: the jackknife+ interval from every refit's prediction there
        (split name -> array), joined with the same residual band around the full fit's `pred`
        (so the interval always holds the point forecast, even when refits on much less data
        all land on one side of it)."""
        scale = np.asarray(scale)
        r = np.stack([u.score * scale for u in self.units])
        mu = np.stack([refit_preds[u.split] for u in self.units])
        k = self.rank
        lo = np.sort(mu / (1 + r), axis=0)[len(self.units) - k]
        hi = np.sort(mu * (1 + r), axis=0)[k - 1]
        band = self.residual * scale
        return np.minimum(lo, pred / (1 + band)), np.maximum(hi, pred * (1 + band))

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "method": "jackknife+ over leave-one-curve-out and early-part refits",
            "rank": self.rank,
            "n_units": len(self.units),
            # with fewer than 9 units the rank is capped at the widest unit (no conformal guarantee)
            "rank_capped": math.ceil(self.level * (len(self.units) + 1)) > len(self.units),
            "residual_at_rank": self.residual,
            "scale": "1 + max(0, ln(S1/S1_max)) + max(0, ln(eta_min/eta))",
            "S1_max": self.domain.S1_max,
            "eta_min": self.domain.eta_min,
            "units": [u.to_dict() for u in self.units],
            "refits": {name: list(p) for name, p in self.refits},
        }


@dataclass(frozen=True)
class Split:
    """A refit on the `train` points (a mask over the fitted points) forecasting the `test` ones."""

    name: str
    train: np.ndarray
    test: np.ndarray


def _layout(parts) -> tuple[np.ndarray, np.ndarray]:
    """(curve index, step) of every fitted point, in the order the fit concatenates them."""
    cid = np.concatenate([np.full(len(t), i) for i, (_, t) in enumerate(parts)])
    steps = np.concatenate([np.asarray(t, np.int64) for _, t in parts])
    return cid, steps


def splits(parts) -> list[Split]:
    """Leave-one-curve-out (with >= 2 curves) and early-part (first 1/2, first 1/3) refits."""
    cid, steps = _layout(parts)
    out = []
    if len(parts) >= 2:
        out += [Split(f"leave-out {c.name}", cid != i, cid == i) for i, (c, _) in enumerate(parts)]
    for frac in TAIL_FRACTIONS:
        train = np.zeros(cid.size, bool)
        for i, (_, t) in enumerate(parts):
            train[cid == i] = validation.prefix_mask(t, frac)
        out.append(Split(f"first {frac:.2g}", train, ~train))
    return out


def _usable(problem: Problem, split: Split) -> bool:
    """A refit needs more points than free parameters and, for annealing terms, a decay."""
    n_train = int(split.train.sum())
    if n_train <= len(problem.free_idx) or not split.test.any():
        return False
    anneal_free = any(problem.law.param_names[i] in problem.law.anneal_params for i in problem.free_idx)
    return not anneal_free or subset(problem.F, split.train).any_decay


def _units(problem: Problem, parts, split: Split, params: np.ndarray) -> list[CalibrationUnit]:
    """Score every forecast curve of one refit."""
    cid, steps = _layout(parts)
    pred = evaluate(problem.law, params, problem.F)
    actual = np.exp(problem.logy)
    domain = FitDomain.of([(c, steps[split.train & (cid == i)]) for i, (c, _) in enumerate(parts)])
    units = []
    for i, (curve, _) in enumerate(parts):
        sel = split.test & (cid == i)
        if not sel.any():
            continue
        scale = domain.scale(curve, steps[sel])
        z = np.abs(pred[sel] - actual[sel]) / actual[sel] / scale
        units.append(
            CalibrationUnit(
                split.name, curve.name, int(sel.sum()), float(np.quantile(z, LEVEL)), float(scale.max())
            )
        )
    return units


@dataclass(frozen=True)
class RefitPlan:
    """The calibration refits to run: `starts` (log free parameters) and point `weights`, one row
    per start, `per_split` consecutive rows for each of `splits`."""

    splits: tuple[Split, ...]
    starts: np.ndarray
    weights: np.ndarray
    per_split: int


def plan_refits(problem: Problem, parts, grid: np.ndarray) -> RefitPlan:
    """Every usable split refitted from SPLIT_STARTS rows spread over the start `grid`; they run
    in the same batched minimisation as the main fit (one compiled loop, one pass of wall time)."""
    usable = tuple(s for s in splits(parts) if _usable(problem, s))
    rows = grid[
        np.unique(np.linspace(0, grid.shape[0] - 1, min(SPLIT_STARTS, grid.shape[0])).round().astype(int))
    ]
    starts = np.vstack([rows] * len(usable)) if usable else np.zeros((0, grid.shape[1]))
    weights = (
        np.repeat(np.stack([s.train.astype(float) for s in usable]), rows.shape[0], axis=0)
        if usable
        else np.zeros((0, problem.F.n))
    )
    return RefitPlan(usable, starts, weights, rows.shape[0])


def calibrate(problem: Problem, parts, plan: RefitPlan, x: np.ndarray, f: np.ndarray) -> IntervalModel | None:
    """Turn the refits' forecast errors into an `IntervalModel` (x, f: the plan's minimisation
    results, rows as in `plan.starts`); None when no split could be refitted (e.g. one short
    curve) or no refit converged to a finite objective."""
    units, refits = [], []
    for k, split in enumerate(plan.splits):
        rows = slice(k * plan.per_split, (k + 1) * plan.per_split)
        fk = np.where(np.isfinite(f[rows]), f[rows], np.inf)
        j = int(np.argmin(fk))
        if np.isfinite(fk[j]):
            params = problem.params(x[rows][j])
            units += _units(problem, parts, split, params)
            refits.append((split.name, tuple(float(v) for v in params)))
    if not units:
        return None
    rank = min(len(units), math.ceil(LEVEL * (len(units) + 1)))
    return IntervalModel(LEVEL, rank, tuple(units), FitDomain.of(parts), tuple(refits))
