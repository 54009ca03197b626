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
data when asked to extrapolate, not an assumption; see docs/fit.md for the calibration
measured on the shared data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from analysis.core.validation import (
    PREDICTION_LEVEL,
    ROUNDOFF_SD,
    drift_from_folds,
    fold_mae,
    forward_cuts,
    scatter_sd,
    top_share,
)


class Interval(NamedTuple):
    """A closed interval [lo, hi]: a parameter's CI, an input's range, a run's prediction
    interval. A tuple, so `lo, hi = interval` unpacks it and JSON writes it as `[lo, hi]`."""

    lo: float
    hi: float

    @classmethod
    def of(cls, values) -> "Interval":
        """The range [min, max] of `values`."""
        v = np.asarray(values, dtype=float)
        return cls(float(v.min()), float(v.max()))

    def to_list(self) -> list[float]:
        return [float(self.lo), float(self.hi)]


NO_INTERVAL = Interval(math.nan, math.nan)  # a CI without a bootstrap


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
    # (cut, mean |log error| of that fold's predictions) per forward-chaining fold: `--law auto`
    # keeps the baseline form unless another beats it on every fold (`validation.choose_against`)
    fold_errors: tuple[tuple[float, float], ...] = ()

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
            "fold_errors": [{"cut": c, "mae": e} for c, e in self.fold_errors],
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
            fold_errors=tuple((float(f["cut"]), float(f["mae"])) for f in d.get("fold_errors", ())),
        )


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
    errors, dists, cuts = [], [], []
    for cut in forward_cuts(scale):
        fit_mask, test_mask = scale <= cut, scale > cut
        r = refit_predict(fit_mask, test_mask)
        if r is None:
            continue
        errors.append(np.asarray(r, float))
        cuts.append(float(cut))
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
        fold_errors=tuple((c, fold_mae([e])) for c, e in zip(cuts, errors)),
    )
