"""Loss-curve laws: the loss of one run as a function of step under a learning-rate schedule.

- `tissue` (Tissue et al. 2024, "Scaling Law with Learning Rate Annealing"):
  L(s) = L0 + A * S1^-alpha - C * S2, with S1 the area under the schedule (forward area) and
  S2 = sum_i m_i, m_i = lambda * m_{i-1} + (eta_{i-1} - eta_i) the annealing area with momentum
  (lambda = 0.999, the paper's default decay factor).
- `mpl` (Luo et al. 2025, "A Multi-Power Law for Loss Curve Prediction Across Learning Rate
  Schedules"): L(t) = L0 + A (S1(t) + S_W)^-alpha - LD(t),
  LD(t) = B sum_k (eta_{k-1} - eta_k) G(eta_k^-gamma S_k(t)), G(x) = 1 - (C x + 1)^-beta,
  S_k(t) = sum_{tau=k..t} eta_tau.

Both annealing sums (S2, LD) run from the schedule's learning-rate peak on (the end of warm-up,
Luo et al.'s eta_0); the warm-up counts only in S1. Every parameter is positive and optimised as
its log. Predictions are computed from the
precomputed `curves.Features` (areas and annealing nodes), so a law evaluation is a handful of
vectorised array operations and a segment sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from models.base.errors import AnalysisError


@dataclass(frozen=True, eq=False)
class CurveLaw:
    name: str
    param_names: tuple[str, ...]
    predict: Callable  # (public params (P,), feature arrays dict, n) -> loss (n,)
    anneal_params: tuple[str, ...]  # parameters only the learning-rate decay can identify
    formula: str
    description: str


def _tissue(p, F, n):
    L0, A, alpha, C = p[0], p[1], p[2], p[3]
    return L0 + A * jnp.exp(-alpha * F["logS1"]) - C * F["S2"]


def _mpl(p, F, n):
    L0, A, alpha, B, C, beta, gamma = (p[i] for i in range(7))
    z = jnp.log(C) - gamma * F["pair_logeta"] + F["pair_logS"]
    G = -jnp.expm1(-beta * jax.nn.softplus(z))  # 1 - (1 + C x)^-beta, accurate for small C x too
    LD = jax.ops.segment_sum(F["pair_deta"] * G, F["pair_j"], num_segments=n)
    return L0 + A * jnp.exp(-alpha * F["logS1"]) - B * LD


_CURVE_LAWS = {
    "tissue": CurveLaw(
        "tissue",
        ("L0", "A", "alpha", "C"),
        _tissue,
        ("C",),
        "L(s) = L0 + A * S1^-alpha - C * S2",
        "Tissue et al. 2024 LR-annealing law (S2 with momentum decay lambda = 0.999).",
    ),
    "mpl": CurveLaw(
        "mpl",
        ("L0", "A", "alpha", "B", "C", "beta", "gamma"),
        _mpl,
        ("B", "C", "beta", "gamma"),
        "L(t) = L0 + A (S1 + S_W)^-alpha "
        "- B sum_k (eta_{k-1} - eta_k) (1 - (C eta_k^-gamma S_k(t) + 1)^-beta)",
        "Luo et al. 2025 multi-power law.",
    ),
}


def get_curve_law(name: str) -> CurveLaw:
    try:
        return _CURVE_LAWS[name]
    except KeyError:
        raise AnalysisError(
            f"unknown curve law {name!r}; known curve laws: {', '.join(known_curve_laws())}"
        ) from None


def known_curve_laws() -> list[str]:
    return sorted(_CURVE_LAWS)


def start_grid(law: CurveLaw, loss: np.ndarray, logS1: np.ndarray) -> np.ndarray:
    """Public-parameter starts scaled to the data: L0 below the lowest loss, A and alpha from a
    power law through the curve's range, then a few values of the annealing parameters."""
    lmin = float(np.min(loss))
    rows = []
    for L0 in lmin * np.array([0.8, 0.93]):
        al = 0.5
        # A such that L0 + A S1^-alpha matches the median loss at the median S1.
        A = max(float(np.median(loss)) - L0, 1e-3 * lmin) * float(np.exp(al * np.median(logS1)))
        if law.name == "tissue":
            rows += [(L0, A, al, C) for C in (1.0, 100.0)]
        else:
            rows += [(L0, A, al, B, 2.0, 0.5, gamma) for B in (100.0, 500.0) for gamma in (0.4, 0.7)]
    return np.array(rows)
