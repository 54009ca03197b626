"""The robust curve-law objective and its batched minimisation (shared by the fit and its calibration).

The objective is Luo et al.'s: Huber loss (delta 1e-3) of the log-loss residuals, summed over the
fitted points, with every parameter optimised as its log. A row of point weights per start lets
one batched L-BFGS run fit several subsets of the same points at once (the main fit, and the
leave-one-curve-out and early-part refits the forecast intervals are calibrated on) without
recomputing the features.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.lbfgs import LBFGSConfig, MinimizeResult, minimize_batch
from analysis.curves.features import FEATURE_KEYS, Features
from analysis.curves.laws import CurveLaw
from analysis.laws.fitting import huber

CFG = LBFGSConfig(max_evals=4000, ftol=1e-13)


@dataclass(frozen=True, eq=False)
class Problem:
    """One curve-law fit: the law, the fitted points' features and log losses, the fixed parameters.

    theta_full holds log values of every parameter (the fixed ones set, the free ones 0);
    free_idx lists the free parameters, in the law's order."""

    law: CurveLaw
    F: Features
    logy: np.ndarray
    theta_full: np.ndarray
    free_idx: tuple[int, ...]
    delta: float

    def params(self, theta_free: np.ndarray) -> np.ndarray:
        """Public parameter values (the law's order) from a row of free log-parameters."""
        theta = self.theta_full.copy()
        theta[list(self.free_idx)] = theta_free
        return np.exp(theta)


def feature_dict(F: Features) -> dict:
    return {k: jnp.asarray(getattr(F, k)) for k in FEATURE_KEYS}


@lru_cache(maxsize=None)
def _objective(law: CurveLaw, free_idx: tuple[int, ...], delta: float, n: int):
    """f(theta_free, theta_full, features, logy, w) = sum_j w_j huber(log y_j - log pred_j)."""
    idx = jnp.asarray(free_idx)

    def f(theta_free, theta_full, F, logy, w):
        theta = theta_full.astype(theta_free.dtype).at[idx].set(theta_free)
        pred = law.predict(jnp.exp(theta), F, n)
        r = logy - jnp.log(jnp.where(pred > 0, pred, jnp.nan))
        return jnp.sum(w * huber(r, delta))

    return f


def minimize(problem: Problem, starts: np.ndarray, weights: np.ndarray | None = None) -> MinimizeResult:
    """Minimise from every row of `starts` (free log-parameters); row i of `weights` (points)
    weights the objective of start i (default: every point 1)."""
    S = starts.shape[0]
    w = np.ones((S, problem.F.n)) if weights is None else np.asarray(weights, float)
    fun = _objective(problem.law, problem.free_idx, problem.delta, problem.F.n)
    with jax.enable_x64(True):
        args = (
            jnp.asarray(problem.theta_full),
            feature_dict(problem.F),
            jnp.asarray(problem.logy),
            jnp.asarray(w),
        )
        return minimize_batch(
            fun,
            starts,
            args,
            batched_args=(False, False, False, True),
            cfg=CFG,
            slots=64,
            round_evals=32,
            tail_slots=8,
        )


def evaluate(law: CurveLaw, params: np.ndarray, F: Features) -> np.ndarray:
    """The law's prediction at F's points for public parameters `params`."""
    with jax.enable_x64(True):
        return np.asarray(law.predict(jnp.asarray(params, dtype=jnp.float64), feature_dict(F), F.n))
