"""90% prediction intervals for a predicted accuracy, propagating both steps of the chain.

The predicted accuracy of a new run at (N, D) is treated as

    acc = f_hat(N, D) + u_b + z,   z ~ Normal(0, noise^2 + max(drift * d, spread)^2)

1. `u_b`, parameter uncertainty of both steps: the spread of the prediction over a bootstrap
   over runs. Resample b draws runs with replacement and refits step 1 on their last rows and
   step 2 on all their rows with the same run counts (`taskloss`, `methods.CandidateFit.
   bootstrap`), so a run that pulls step 1 also pulls step 2 in the same resample, and the
   chain's prediction uses resample b's task loss in resample b's sigmoid.
2. `noise`, run-to-run scatter: the accuracy of one run scatters around the curve (evaluation
   sample noise, seeds, data mixtures: the Gadre et al. ladders mix three corpora at each size).
   Measured as the in-sample residuals of the full fit on the finished runs, taken from the
   largest third of them (scatter grows with accuracy's distance from chance) with the project's
   tail-calibrated scale (`analysis.laws.intervals.scatter_sd`: the 90% quantile of |r|).
   The chain's residuals use step 1's *predicted* loss, so step 1's scatter is inside.
3. `drift * d`, misspecification: neither sigmoid is the true curve, and its error grows with the
   distance d (decades beyond the ladder, in N plus in D; `holdout.distance`). `drift` comes
   from the held-out check: fitted below a size, the candidate's errors e_i at distances d_i
   satisfy e^2 ~ noise^2 + drift^2 d^2 (least squares through the origin, drift >= 0). Linear
   growth of the sd with distance is an assumption (it is what a wrong slope does); the Gadre
   et al. coverage in docs/downstream.md is the check of it.
4. `spread`, model uncertainty: the standard deviation of the four single candidates'
   predictions at (N, D) (chain and direct, ceiling fitted or at 1: the between-model spread of
   a uniform model average). The held-out check sees one or two sizes, so the candidate it picks
   can have a lucky score there and a drift of ~0 (on Gadre et al.'s arc_easy the chosen direct
   fit missed the 412M runs by 1.6 points and the 6.9B ones by up to 9); where the candidates,
   all fitting the ladder, disagree at the target, the data cannot say which is right. The
   larger of the two misspecification terms is used, not their sum: both measure the same error.

The interval is the 5%-95% range of 4,000 draws of u_b + z (seeded), around the full fit's
prediction, clipped to [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.laws.intervals import PREDICTION_LEVEL, offsets, scatter_sd, top_share


@dataclass(frozen=True)
class ErrorModel:
    """The measured error model behind one task's intervals (`error_model` in the JSON)."""

    noise_sd: float  # run scatter around the curve (accuracy units)
    drift_per_decade: float  # growth of the error sd per decade beyond the ladder (accuracy units)
    N_max: float  # largest N of the ladder's runs (distance origin)
    D_max: float  # largest D of the ladder's runs
    n_fold_points: int  # held-out predictions behind `drift_per_decade` (0: not measured)
    level: float = PREDICTION_LEVEL

    def sd(self, d: np.ndarray, spread: np.ndarray | float = 0.0) -> np.ndarray:
        """Sd of the noise + misspecification term at distance `d` (decades beyond the ladder),
        where the single candidates' predictions have standard deviation `spread`."""
        d = np.maximum(np.asarray(d, float), 0.0)
        model = np.maximum(self.drift_per_decade * d, np.asarray(spread, float))
        return np.sqrt(self.noise_sd**2 + model**2)

    def to_dict(self) -> dict:
        return {
            "noise_sd": self.noise_sd,
            "drift_per_decade": self.drift_per_decade,
            "N_max": self.N_max,
            "D_max": self.D_max,
            "n_fold_points": self.n_fold_points,
            "level": self.level,
            "method": "bootstrap over runs (both steps) + run scatter + max(held-out drift x distance, "
            "spread of the candidates' predictions)",
        }


def noise_sd(residuals: np.ndarray, N: np.ndarray, D: np.ndarray) -> float:
    """Run scatter from in-sample residuals of the finished runs, on the largest third by N*D."""
    return scatter_sd(top_share(residuals, np.asarray(N, float) * np.asarray(D, float)))


def drift_per_decade(errors: np.ndarray, distances: np.ndarray, noise: float) -> float:
    """sqrt of the least-squares slope of e^2 - noise^2 on d^2 (through the origin), >= 0."""
    e, d = np.asarray(errors, float), np.asarray(distances, float)
    ok = np.isfinite(e) & np.isfinite(d) & (d > 0)
    if not ok.any():
        return 0.0
    d2 = d[ok] ** 2
    slope = float(np.sum(d2 * (e[ok] ** 2 - noise**2)) / np.sum(d2**2))
    return math.sqrt(max(slope, 0.0))


def interval(
    pred: np.ndarray,
    samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] of pred + u_b + z, z ~ N(0, sd^2), u_b the bootstrap deviations (median-centred;
    `analysis.laws.intervals.offsets`), clipped to [0, 1]."""
    pred = np.atleast_1d(np.asarray(pred, float))
    lo, hi = offsets(samples_BxN, np.broadcast_to(np.asarray(sd_N, float), pred.shape), level, seed, draws)
    return np.clip(pred + lo, 0.0, 1.0), np.clip(pred + hi, 0.0, 1.0)
