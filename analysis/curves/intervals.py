"""Calibrated 90% forecast intervals of loss-curve predictions (docs/fit.md, "Forecast
intervals"): the law is misspecified at the 0.1-1% level, more than its parameter noise, so the
error is measured on forecasts the law makes from part of the fitted data, of the two kinds users
ask for: leave-one-curve-out refits forecast the left-out curve (a new schedule), early-part refits
(the first 1/2 and 1/3 of every fitted curve) forecast the rest (a longer horizon). Each (refit,
forecast curve) pair is a calibration *unit*.

A point lies at h = max(0, ln(S1(t) / S1_max)) e-folds of area beyond the fitted data and
r = max(0, ln(eta_min / eta(t))) e-folds of rate below it. Its log error is the one error model
(`analysis.core.intervals.PredictionError`), Gaussian with

    sd^2 = noise^2 + budget^2 + (drift_h h)^2 + (drift_r r)^2 = noise^2 + budget^2 + (drift d)^2,

d = sqrt((w_h h)^2 + (w_r r)^2) / ln 10 decades, w = (drift_h, drift_r) / max(drift_h, drift_r)
(`KindError`; one drift on sqrt(h^2 + r^2) over-covered: 97% of the 25M held-out points at 0.76%
width). `noise`: the scatter (`validation.scatter_sd`) of the successive differences of the full
fit's log residuals within each curve, / sqrt 2; `budget`, `drift_h`, `drift_r`: non-negative least
squares of e^2 - noise^2 on (1, h^2, r^2) over the units' points (the refits re-estimate the
parameters, so no bootstrap term on top). They are fitted per *kind* of forecast (`Kind`): a new
curve takes the leave-one-curve-out units', the later steps of a fitted curve the early-part
units' (pooled, the early-part errors sized new curves' intervals at 99-100%); a kind without a
unit falls back to all units. The interval is pred * exp(+-z sd) (`validation.interval`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from analysis.core import validation
from analysis.core.intervals import PredictionError
from analysis.curves.data import Curve, peak_index
from analysis.curves.features import subset
from analysis.curves.laws import Problem, evaluate

LEVEL = validation.PREDICTION_LEVEL
TAIL_FRACTIONS = (1 / 2, 1 / 3)
SPLIT_STARTS = 4  # starts per calibration refit (spread over the law's start grid)
LEAVE_OUT = "leave-out"  # split-name prefix of the leave-one-curve-out refits
SCALE = "sd^2 = noise^2 + budget^2 + (drift_h h)^2 + (drift_r r)^2, "
SCALE += "h = max(0, ln(S1/S1_max)), r = max(0, ln(eta_min/eta))"


class Kind(enum.StrEnum):
    """Which forecast a point is, and so which calibration units size its interval."""

    NEW_CURVE = "new curve"  # a curve the fit did not see: leave-one-curve-out units
    LATER_STEPS = "later steps"  # a fitted curve after --fit-until: early-part units


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

    def distance(self, curve: Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(h, r) per point: e-folds of area beyond the fitted one and of rate below it."""
        eta = curve.schedule()
        h = np.maximum(0.0, np.log(np.cumsum(eta)[t] / self.S1_max))
        r = np.maximum(0.0, np.log(self.eta_min / np.maximum(eta[t], 1e-300)))
        return h, r

    def scale(self, curve: Curve, t: np.ndarray) -> np.ndarray:
        """1 + h + r per point (the total distance, reported per unit as `max_scale`)."""
        h, r = self.distance(curve, t)
        return 1.0 + h + r


@dataclass(frozen=True)
class KindError:
    """One kind's error model and the weights (w_h, w_r) of its distance's two coordinates."""

    error: PredictionError
    weights: tuple[float, float]

    @staticmethod
    def of(noise: float, budget: float, drift_h: float, drift_r: float, n_units: int, n_points: int = 0):
        """The terms of the module docstring in a PredictionError (its drift per decade of d)."""
        top = max(drift_h, drift_r)
        w = (drift_h / top, drift_r / top) if top > 0 else (1.0, 1.0)
        e = PredictionError(noise, budget, top * math.log(10), math.nan, "S1 and eta", n_units, n_points)
        return KindError(e, w)

    @property
    def drifts(self) -> tuple[float, float]:
        """(drift_h, drift_r): per e-fold of area, of rate."""
        top = self.error.drift_per_decade / math.log(10)
        return top * self.weights[0], top * self.weights[1]

    def sd(self, h: np.ndarray, r: np.ndarray) -> np.ndarray:
        return self.error.sd(np.hypot(self.weights[0] * h, self.weights[1] * r) / math.log(10))


@dataclass(frozen=True)
class CalibrationUnit:
    """One (refit, forecast curve) pair; score = the RMS of its log forecast errors."""

    split: str
    curve: str
    n_points: int
    score: float
    max_scale: float  # the largest 1 + h + r of its points

    @property
    def kind(self) -> Kind:
        return Kind.NEW_CURVE if self.split.startswith(LEAVE_OUT) else Kind.LATER_STEPS

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
    """Scatter + drift forecast intervals from the calibration refits (see the module docstring)."""

    level: float
    terms: dict[Kind, KindError]  # the error model of each kind of forecast
    units: tuple[CalibrationUnit, ...]
    domain: FitDomain  # what the full fit saw (the distance of a new point)
    refits: tuple[tuple[str, tuple[float, ...]], ...]  # (split name, public parameters)
    fitted: tuple[str, ...] = ()  # names of the fitted curves (their later steps: Kind.LATER_STEPS)
    fallback: tuple[Kind, ...] = ()  # kinds without a unit of their own: fitted on all units

    @property
    def noise(self) -> float:
        return self.terms[Kind.NEW_CURVE].error.noise_sd

    def kind(self, curve: Curve) -> Kind:
        return Kind.LATER_STEPS if curve.name in self.fitted else Kind.NEW_CURVE

    def sd(self, curve: Curve, t: np.ndarray, kind: Kind | None = None) -> np.ndarray:
        """Sd of the log forecast error of `curve` at steps `t` (as a forecast of `kind`)."""
        return self.terms[kind or self.kind(curve)].sd(*self.domain.distance(curve, t))

    @property
    def residual(self) -> float:
        """Relative half-width of a new curve's interval next to the fitted data (h = r = 0)."""
        return math.expm1(validation.Z90 * float(self.terms[Kind.NEW_CURVE].error.sd(0.0)))

    def bounds(self, pred: np.ndarray, curve: Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per point of `curve` at steps `t` around the full fit's `pred`."""
        return validation.interval(np.log(pred), None, self.sd(curve, t), self.level)

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "method": self.describe(),
            # units behind a new curve's terms (leave-one-curve-out; all units on fallback)
            "rank": self.terms[Kind.NEW_CURVE].error.n_folds,
            "n_units": len(self.units),
            # True when no leave-one-curve-out refit was possible (one fitted curve)
            "rank_capped": Kind.NEW_CURVE in self.fallback,
            "residual_at_rank": self.residual,
            "scale": SCALE,
            "S1_max": self.domain.S1_max,
            "eta_min": self.domain.eta_min,
            "terms": {
                str(k): {**e.error.to_dict(), "distance_weights": list(e.weights)}
                for k, e in self.terms.items()
            },
            "units": [u.to_dict() for u in self.units],
            "refits": {name: list(p) for name, p in self.refits},
        }

    def describe(self) -> str:
        """The measured terms in one line (the JSON `method`)."""
        terms = "; ".join(
            f"{k.value}: budget {e.error.budget_sd:.3%}, drift {e.drifts[0]:.3%}/e-fold of area, "
            f"{e.drifts[1]:.3%}/e-fold of rate "
            f"({e.error.n_folds} units{', all kinds' if k in self.fallback else ''})"
            for k, e in self.terms.items()
        )
        return f"Gaussian log error, noise {self.noise:.3%}; {terms}"


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
        out += [Split(f"{LEAVE_OUT} {c.name}", cid != i, cid == i) for i, (c, _) in enumerate(parts)]
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


@dataclass(frozen=True)
class UnitErrors:
    """One unit's log forecast errors and their distances (h, r) from its refit's data."""

    unit: CalibrationUnit
    e: np.ndarray
    h: np.ndarray
    r: np.ndarray


def _units(problem: Problem, parts, split: Split, params: np.ndarray) -> list[UnitErrors]:
    """Score every forecast curve of one refit."""
    cid, steps = _layout(parts)
    log_pred = np.log(evaluate(problem.law, params, problem.F))
    domain = FitDomain.of([(c, steps[split.train & (cid == i)]) for i, (c, _) in enumerate(parts)])
    units = []
    for i, (curve, _) in enumerate(parts):
        sel = split.test & (cid == i)
        if not sel.any():
            continue
        e = problem.logy[sel] - log_pred[sel]
        h, r = domain.distance(curve, steps[sel])
        if not np.all(np.isfinite(e)):
            continue
        score = float(np.sqrt(np.mean(e**2)))
        unit = CalibrationUnit(split.name, curve.name, int(sel.sum()), score, float(np.max(1 + h + r)))
        units.append(UnitErrors(unit, e, h, r))
    return units


def _noise(problem: Problem, parts, params: np.ndarray) -> float:
    """Point scatter of the logged loss: successive differences of the full fit's log residuals
    within each curve, / sqrt 2 (a smooth misfit cancels in them), at the tail-calibrated scale."""
    cid, _ = _layout(parts)
    res = problem.logy - np.log(evaluate(problem.law, params, problem.F))
    diffs = [np.diff(res[cid == i]) for i in range(len(parts))]
    return validation.scatter_sd(np.concatenate(diffs)) / math.sqrt(2)


def _terms(units: list[UnitErrors], noise: float) -> KindError:
    """budget, drift_h, drift_r: non-negative least squares of e^2 - noise^2 on (1, h^2, r^2)."""
    e, h, r = (np.concatenate([getattr(u, k) for u in units]) for k in "ehr")
    b, dh, dr = np.sqrt(nnls(np.stack([np.ones_like(e), h**2, r**2], axis=1), e**2 - noise**2)[0])
    return KindError.of(noise, float(b), float(dh), float(dr), len(units), e.size)


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


def calibrate(
    problem: Problem, parts, plan: RefitPlan, x: np.ndarray, f: np.ndarray, params: np.ndarray
) -> IntervalModel | None:
    """Turn the refits' forecast errors into an `IntervalModel` (x, f: the plan's minimisation
    results, rows as in `plan.starts`; params: the full fit's public parameters, for the point
    scatter); None when no split could be refitted (e.g. one short curve) or no refit converged to
    a finite objective."""
    units, refits = [], []
    for k, split in enumerate(plan.splits):
        rows = slice(k * plan.per_split, (k + 1) * plan.per_split)
        fk = np.where(np.isfinite(f[rows]), f[rows], np.inf)
        j = int(np.argmin(fk))
        if np.isfinite(fk[j]):
            p = problem.params(x[rows][j])
            units += _units(problem, parts, split, p)
            refits.append((split.name, tuple(float(v) for v in p)))
    if not units:
        return None
    noise = _noise(problem, parts, params)
    by_kind = {k: [u for u in units if u.unit.kind == k] for k in Kind}
    return IntervalModel(
        LEVEL,
        {k: _terms(own or units, noise) for k, own in by_kind.items()},
        tuple(u.unit for u in units),
        FitDomain.of(parts),
        tuple(refits),
        tuple(c.name for c, _ in parts),
        tuple(k for k, own in by_kind.items() if not own),
    )
