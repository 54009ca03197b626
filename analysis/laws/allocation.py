"""Compute-optimal allocation from a fitted Chinchilla law, with bootstrap CIs.

Minimising `E + A/N^alpha + B/D^beta` subject to `C = k N D` (k = 6 for the usual 6ND FLOPs
model) gives

    N*(C) = G (C/k)^a,   D*(C) = G^-1 (C/k)^b,   a = beta/(alpha+beta),  b = alpha/(alpha+beta),
    G = (alpha A / (beta B))^(1/(alpha+beta)).

k defaults to the fit's `flops_per_param_token`: 6, or the median of C/(N D) when the runs
recorded real FLOPs next to N and D (so a FLOPs model with attention or embedding terms carries
into the allocation). Every quantity is also computed for each bootstrap sample; CIs are
percentile intervals of those.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from models.base.errors import AnalysisError

CHINCHILLA_NAMES = ("E", "A", "B", "alpha", "beta")
DEFAULT_BUDGETS = (1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25)


def supports_allocation(fit) -> bool:
    return tuple(fit.param_names) == CHINCHILLA_NAMES


def optimal(params_xP: np.ndarray, C: np.ndarray, k: float) -> dict[str, np.ndarray]:
    """Closed-form optimum for parameter rows (..., 5) in E, A, B, alpha, beta order and budgets C."""
    p = np.asarray(params_xP, dtype=float)
    E, A, B, al, be = (p[..., i, None] for i in range(5))
    C = np.asarray(C, dtype=float)[None, :] if p.ndim > 1 else np.asarray(C, dtype=float)
    with np.errstate(all="ignore"):
        s = al + be
        a, b = be / s, al / s
        logG = (np.log(al * A) - np.log(be * B)) / s
        logc = np.log(C / k)
        N = np.exp(logG + a * logc)
        D = np.exp(-logG + b * logc)
        loss = E + A / N**al + B / D**be
    return {"a": a[..., 0], "b": b[..., 0], "G": np.exp(logG[..., 0]), "N_opt": N, "D_opt": D,
            "tokens_per_param": D / N, "loss": loss}


def _ci(samples: np.ndarray, level: float) -> list:
    s = samples[np.isfinite(samples)] if samples.ndim == 1 else samples
    lo, hi = 50 * (1 - level), 50 * (1 + level)
    if samples.ndim == 1:
        return [float(np.percentile(s, lo)), float(np.percentile(s, hi))] if s.size else [math.nan, math.nan]
    return np.nanpercentile(samples, [lo, hi], axis=0).T.tolist()


def allocation(fit, budgets: Sequence[float] | None = None, flops_per_param_token: float | None = None) -> dict:
    """N*, D*, tokens per parameter and loss at each budget, with CIs from `fit.bootstrap_samples`."""
    if not supports_allocation(fit):
        raise AnalysisError(f"compute-optimal allocation needs a Chinchilla-form law ({', '.join(CHINCHILLA_NAMES)}); "
                            f"law {fit.law} has {', '.join(fit.param_names)}")
    budgets = np.asarray(DEFAULT_BUDGETS if budgets is None else budgets, dtype=float)
    if budgets.size == 0 or np.any(~np.isfinite(budgets)) or np.any(budgets <= 0):
        raise AnalysisError("budgets must be positive FLOP counts")
    k = float(flops_per_param_token or fit.flops_per_param_token)
    point = optimal(np.array([fit.params[n] for n in CHINCHILLA_NAMES]), budgets, k)
    out = {"a": float(point["a"]), "b": float(point["b"]), "G": float(point["G"]), "flops_per_param_token": k}
    level = fit.ci_level
    samples = fit.bootstrap_samples
    boot = optimal(samples, budgets, k) if samples is not None else None
    if boot is not None:
        out["a_ci"] = _ci(boot["a"], level)
        out["b_ci"] = _ci(boot["b"], level)
    rows = []
    for j, C in enumerate(budgets):
        row = {"C": float(C)}
        for key in ("N_opt", "D_opt", "tokens_per_param", "loss"):
            row[key] = float(point[key][j])
            if boot is not None:
                row[f"{key}_ci"] = _ci(boot[key][:, j], level)
        rows.append(row)
    out["budgets"] = rows
    return out
