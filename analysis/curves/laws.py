"""The multi-power law (Luo et al. 2025), the loss of one run against step under its schedule,

    L(t) = L0 + A (S1(t) + S_W)^-alpha - B sum_k (eta_{k-1} - eta_k) (1 - (C eta_k^-gamma S_k(t) + 1)^-beta),

S_k(t) = sum_{tau=k..t} eta_tau, the drop sum from the schedule's peak on (or from step 1, warm-up
rises included, as Luo et al.'s code: `features(warmup_rises=True)`); its robust objective (Huber,
delta 1e-3, of the log-loss residuals, every parameter as its log) and the batched L-BFGS
minimisation that fits with held parameters and the forecasts' law; a row of point weights per
start fits several subsets of the points (the calibration refits) in one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.lbfgs import LBFGSConfig, MinimizeResult, minimize_batch
from analysis.curves.features import FEATURE_KEYS, Features
from analysis.laws.fitting import huber
from models.base.errors import AnalysisError

CFG = LBFGSConfig(max_evals=4000, ftol=1e-13)


@dataclass(frozen=True, eq=False)
class CurveLaw:
    name: str
    param_names: tuple[str, ...]
    predict: Callable  # (public params (P,), feature arrays dict, n) -> loss (n,)
    anneal_params: tuple[str, ...]  # parameters only the learning-rate decay can identify
    formula: str
    description: str


def _mpl(p, F, n):
    L0, A, alpha, B, C, beta, gamma = (p[i] for i in range(7))
    z = jnp.log(C) - gamma * F["pair_logeta"] + F["pair_logS"]
    G = -jnp.expm1(-beta * jax.nn.softplus(z))  # 1 - (1 + C x)^-beta, accurate for small C x too
    LD = jax.ops.segment_sum(F["pair_deta"] * G, F["pair_j"], num_segments=n)
    return L0 + A * jnp.exp(-alpha * F["logS1"]) - B * LD


MPL = CurveLaw(
    "mpl",
    ("L0", "A", "alpha", "B", "C", "beta", "gamma"),
    _mpl,
    ("B", "C", "beta", "gamma"),
    "L(t) = L0 + A (S1 + S_W)^-alpha - B sum_k (eta_{k-1} - eta_k) (1 - (C eta_k^-gamma S_k(t) + 1)^-beta)",
    "Luo et al. 2025 multi-power law.",
)


def get_curve_law(name: str) -> CurveLaw:
    if name != MPL.name:
        raise AnalysisError(f"unknown curve law {name!r}; known curve laws: {', '.join(known_curve_laws())}")
    return MPL


def known_curve_laws() -> list[str]:
    return [MPL.name]


def start_grid(loss: np.ndarray, logS1: np.ndarray) -> np.ndarray:
    """Public-parameter starts scaled to the data: L0 below the lowest loss, A and alpha from a
    power law through the curve's range, then a few values of the annealing parameters."""
    lmin, al = float(np.min(loss)), 0.5
    rows = []
    for L0 in lmin * np.array([0.8, 0.93]):
        # A such that L0 + A S1^-alpha matches the median loss at the median S1.
        A = max(float(np.median(loss)) - L0, 1e-3 * lmin) * float(np.exp(al * np.median(logS1)))
        rows += [(L0, A, al, B, 2.0, 0.5, gamma) for B in (100.0, 500.0) for gamma in (0.4, 0.7)]
    return np.array(rows)


@dataclass(frozen=True, eq=False)
class Problem:
    """One fit: the law, the fitted points' features and log losses, the fixed parameters.

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
    w = np.ones((starts.shape[0], problem.F.n)) if weights is None else np.asarray(weights, float)
    fun = _objective(problem.law, problem.free_idx, problem.delta, problem.F.n)
    with jax.enable_x64(True):
        args = (jnp.asarray(problem.theta_full), feature_dict(problem.F), jnp.asarray(problem.logy))
        return minimize_batch(
            fun,
            starts,
            (*args, jnp.asarray(w)),
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
