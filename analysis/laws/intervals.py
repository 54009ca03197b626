"""Prediction intervals for point laws that include model misspecification.

A bootstrap CI says how well the *parameters* are pinned down by the data; it says nothing about
whether the law's form holds one or two decades of compute beyond the data, which is where a
scaling law is used. On held-out scale the error of a fitted law is dominated by that second part
(a 245-run fit has parameter CIs of ~0.1% in loss and misses the next budget by ~1%).

So a prediction's interval combines three measured terms, all in log-loss units:

1. parameter noise: the spread of the prediction over the bootstrap samples (`u_b`);
2. point noise `noise_sd`: the scale of the fit's in-sample log residuals of its largest third
   of runs (from their 90% quantile, see `scatter_sd` and `top_share`), the scatter a single run
   has around the smooth law (seeds, data order, evaluation noise, the law's misfit);
3. extrapolation drift `drift_per_decade`: how fast the error of the *form* grows with distance
   beyond the fitted data, measured by forward-chaining on the fit's own data: for a few cuts
   c, fit on the runs with scale <= c, predict the runs above c, and regress the squared error
   on the squared distance (in decades of compute) beyond the fold's largest run:
   e^2 ~ noise_sd^2 + budget_sd^2 + (drift_per_decade * decades)^2. `budget_sd` is what a new
   budget costs even next to the data (on Epoch's Chinchilla runs a whole IsoFLOP curve sits
   ~0.6% off a law fitted to the others); a misspecified exponent makes the error grow linearly
   with distance, hence the linear (not square-root) growth of the drift term's sd.

A prediction at `decades` beyond the fitted data (0 inside it) then has the predictive
distribution  log y = log f(x) + u_b + z,  z ~ Normal(0, noise^2 + budget^2 + (drift * decades)^2),
sampled with a fixed seed; the interval is its central percentile range. Forward-chaining is
the held-out protocol in miniature, so the drift term is what the law actually did on this
data when asked to extrapolate, not an assumption; see docs/analysis.md for the calibration
measured on the shared data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

PREDICTION_LEVEL = 0.90  # the level of every prediction interval the tools report
MAX_FOLDS = 6
MIN_FIT_FRACTION = 0.4  # a fold fits on at least this share of the runs
TOP_SHARE = 1 / 3  # run scatter is measured on the largest third of the fitted runs
# The smallest log-error sd an interval carries: the round-off of a float64 fit (parameters
# polished to a relative decrease of 1e-14) and of its prediction decades beyond the data, far
# below any measured scatter (Epoch's runs: 7e-3)
ROUNDOFF_SD = 1e-12


@dataclass(frozen=True)
class PredictionError:
    """The measured error model behind every prediction interval of one fit."""

    noise_sd: float  # sd of the fit's in-sample log residuals, from their 90% quantile (one run's scatter)
    budget_sd: float  # sd of a whole unseen budget's offset from the law (forward-chaining intercept)
    drift_per_decade: float  # growth of the log-error sd per decade of compute beyond the data
    scale_max: float  # largest scale (C, or the law's single input) in the fitted data
    scale_role: str  # which input measures scale: "C", "N", "D" or "x"
    n_folds: int  # forward-chaining folds that contributed
    n_fold_points: int  # held-out points over all folds
    # mean |log error| of the forward-chaining predictions (~ relative error): how well the law
    # extrapolated on this data; `--law auto` picks the candidate form with the smallest
    fold_mae: float = math.nan
    method: str = "bootstrap + in-sample noise + forward-chaining drift"

    def sd(self, decades: np.ndarray) -> np.ndarray:
        """Sd of the misspecification + noise term at `decades` beyond the fitted data, at least
        `ROUNDOFF_SD`: on noise-free data every term is round-off, and an interval of a few ulps
        would claim more than float64 arithmetic can hold."""
        d = np.maximum(np.asarray(decades, dtype=float), 0.0)
        sd = np.sqrt(self.noise_sd**2 + self.budget_sd**2 + (self.drift_per_decade * d) ** 2)
        return np.maximum(sd, ROUNDOFF_SD)

    def decades(self, scale: np.ndarray) -> np.ndarray:
        """Distance beyond the fitted data, in decades of the scale input (0 inside the data)."""
        return np.maximum(np.log10(np.asarray(scale, dtype=float) / self.scale_max), 0.0)

    def to_dict(self) -> dict:
        return {
            "noise_sd": self.noise_sd,
            "budget_sd": self.budget_sd,
            "drift_per_decade": self.drift_per_decade,
            "scale_max": self.scale_max,
            "scale_role": self.scale_role,
            "n_folds": self.n_folds,
            "n_fold_points": self.n_fold_points,
            "fold_mae": self.fold_mae,
            "level": PREDICTION_LEVEL,
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "PredictionError":
        return cls(
            noise_sd=float(d["noise_sd"]),
            budget_sd=float(d.get("budget_sd", 0.0)),
            drift_per_decade=float(d["drift_per_decade"]),
            scale_max=float(d["scale_max"]),
            scale_role=str(d.get("scale_role", "C")),
            n_folds=int(d.get("n_folds", 0)),
            n_fold_points=int(d.get("n_fold_points", 0)),
            fold_mae=math.nan if d.get("fold_mae") is None else float(d["fold_mae"]),
            method=str(d.get("method", cls.method)),
        )


def scatter_sd(r: np.ndarray) -> float:
    """The sd of Gaussian scatter with the same 90% quantile of |r - median| as the residuals:
    calibrated where the interval is used (its 90% tails), unmoved by one wild run (unlike the
    RMS), and not fooled by a narrow core with wide tails (unlike the MAD, which on the Epoch
    runs is half the tail's scale)."""
    r = np.asarray(r, dtype=float)
    r = r[np.isfinite(r)]
    if r.size < 2:
        return 0.0
    return float(
        np.quantile(np.abs(r - np.median(r)), PREDICTION_LEVEL) / _norm_ppf(0.5 + PREDICTION_LEVEL / 2)
    )


def top_share(
    values: np.ndarray, scale: np.ndarray, share: float = TOP_SHARE, min_points: int = 10
) -> np.ndarray:
    """The `values` of the runs in the top `share` of `scale` (at least `min_points`, else all):
    scatter grows with scale on real ladders (Epoch's top-budget runs scatter twice as much as
    its small ones), and predictions are made beyond the top, so the top sets the noise."""
    values, scale = np.asarray(values, dtype=float), np.asarray(scale, dtype=float)
    k = max(min_points, int(math.ceil(share * scale.size)))
    if k >= scale.size:
        return values
    return values[np.argsort(scale, kind="stable")[-k:]]


def fold_cuts(
    scale: np.ndarray, max_folds: int = MAX_FOLDS, min_fit_fraction: float = MIN_FIT_FRACTION
) -> list[float]:
    """Forward-chaining cut points: geometric midpoints between consecutive distinct scales whose
    fit side holds at least `min_fit_fraction` of the runs, at most `max_folds` of them, evenly
    spread (the largest cuts first kept, as they look most like the real extrapolation)."""
    s = np.sort(np.asarray(scale, dtype=float))
    levels = np.unique(s)
    if levels.size < 3:
        return []
    mids = np.sqrt(levels[:-1] * levels[1:])
    frac = np.searchsorted(s, mids, side="right") / s.size
    mids = mids[frac >= min_fit_fraction]
    if mids.size <= max_folds:
        return [float(m) for m in mids]
    pick = np.unique(np.round(np.linspace(0, mids.size - 1, max_folds)).astype(int))
    return [float(mids[i]) for i in pick]


def drift_from_folds(
    errors: Sequence[np.ndarray], decades: Sequence[np.ndarray], noise_sd: float
) -> tuple[float, float]:
    """(budget_sd, drift_per_decade) from fold errors: non-negative least squares of
    e^2 - noise^2 ~ budget_sd^2 + drift^2 * decades^2. `budget_sd` is the error a law makes at a
    budget it never saw even right next to its data (a whole IsoFLOP curve sits off the law),
    `drift` the growth with distance; a law that extrapolates as well as it fits has neither."""
    e = np.concatenate([np.asarray(x, float) for x in errors]) if errors else np.zeros(0)
    d = np.concatenate([np.asarray(x, float) for x in decades]) if decades else np.zeros(0)
    ok = np.isfinite(e) & np.isfinite(d)
    if ok.sum() < 2:
        return 0.0, 0.0
    y, X = e[ok] ** 2 - noise_sd**2, np.stack([np.ones(ok.sum()), d[ok] ** 2], axis=1)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    if coef[0] < 0 or coef[1] < 0:  # NNLS on two coefficients: the best single-term fits
        c0 = max(float(np.mean(y)), 0.0)
        c1 = max(float(np.sum(X[:, 1] * y) / np.sum(X[:, 1] ** 2)), 0.0) if np.any(X[:, 1] > 0) else 0.0
        sse0, sse1 = np.sum((y - c0) ** 2), np.sum((y - c1 * X[:, 1]) ** 2)
        coef = np.array([c0, 0.0]) if sse0 <= sse1 else np.array([0.0, c1])
    return math.sqrt(max(coef[0], 0.0)), math.sqrt(max(coef[1], 0.0))


def estimate(
    scale: np.ndarray,
    role: str,
    in_sample_log_residuals: np.ndarray,
    refit_predict: Callable[[np.ndarray, np.ndarray], np.ndarray | None],
) -> PredictionError:
    """Measure the error model of a fit on points with the given `scale`.

    `refit_predict(fit_mask, test_mask)` refits the law on the masked points and returns the
    log residuals (log y - log prediction) of the test points, or None when that fold cannot be
    fitted (too few distinct sizes, say); such folds are skipped.
    """
    scale = np.asarray(scale, dtype=float)
    noise = scatter_sd(top_share(in_sample_log_residuals, scale))
    errors, dists = [], []
    for cut in fold_cuts(scale):
        fit_mask, test_mask = scale <= cut, scale > cut
        r = refit_predict(fit_mask, test_mask)
        if r is None:
            continue
        errors.append(np.asarray(r, float))
        dists.append(np.log10(scale[test_mask] / scale[fit_mask].max()))
    budget_sd, drift = drift_from_folds(errors, dists, noise)
    return PredictionError(
        noise_sd=noise,
        budget_sd=budget_sd,
        drift_per_decade=drift,
        scale_max=float(scale.max()),
        scale_role=role,
        n_folds=len(errors),
        n_fold_points=int(sum(e.size for e in errors)),
        fold_mae=fold_mae(errors),
    )


def fold_mae(errors: Sequence[np.ndarray]) -> float:
    """Mean |log error| over all forward-chaining predictions (NaN without any)."""
    e = np.abs(np.concatenate([np.asarray(x, float) for x in errors])) if errors else np.zeros(0)
    e = e[np.isfinite(e)]
    return float(e.mean()) if e.size else math.nan


def interval(
    log_pred_N: np.ndarray,
    log_pred_samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] (linear units) of log y = log_pred + u_b + z, z ~ N(0, sd^2), u_b the bootstrap
    deviations of the prediction (none: the Gaussian term alone, analytically)."""
    log_pred_N = np.atleast_1d(np.asarray(log_pred_N, dtype=float))
    lo, hi = offsets(
        log_pred_samples_BxN,
        np.broadcast_to(np.asarray(sd_N, dtype=float), log_pred_N.shape),
        level,
        seed,
        draws,
    )
    return np.exp(log_pred_N + lo), np.exp(log_pred_N + hi)


def offsets(
    samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[np.ndarray, np.ndarray]:
    """Central `level` range (lo, hi) of u_b + z around a prediction: u_b the bootstrap
    deviations from their median (resamples with a non-finite value dropped), z ~ N(0, sd^2),
    sampled with a fixed seed; with fewer than 10 usable resamples, the Gaussian range alone."""
    sd_N = np.asarray(sd_N, dtype=float)
    q = 0.5 + level / 2
    s = None if samples_BxN is None else np.asarray(samples_BxN, dtype=float)
    s = None if s is None else s[np.all(np.isfinite(s), axis=1)]
    if s is None or len(s) < 10:
        z = _norm_ppf(q)
        return -z * sd_N, z * sd_N
    rng = np.random.default_rng(seed)
    b = rng.integers(0, len(s), size=draws)
    tot = (s - np.median(s, axis=0, keepdims=True))[b] + rng.standard_normal((draws, sd_N.size)) * sd_N
    lo, hi = np.percentile(tot, [100 * (1 - q), 100 * q], axis=0)
    return lo, hi


def _norm_ppf(q: float) -> float:
    """Standard normal quantile (the standard library's, so the CLI's fast path needs no SciPy)."""
    return NormalDist().inv_cdf(q)


def coverage(actual: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Fraction of `actual` values inside [lo, hi]."""
    a = np.asarray(actual, dtype=float)
    return float(np.mean((a >= lo) & (a <= hi))) if a.size else math.nan
