"""Repeated data: Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models"), eq. 5.

A run of D tokens on U unique tokens sees U_D = min(U, D) unique tokens R = D / U_D - 1 times
more; repeated tokens are worth less and less, so the law sees the effective data

    D' = U_D + U_D R_D* (1 - exp(-R / R_D*))        (-> U (1 + R_D*) after very many epochs)

and, for a model larger than the compute-optimal size for the corpus (U_N = min(N, N_opt(U))),
the effective parameters N' = U_N + U_N R_N* (1 - exp(-R_N / R_N*)) with R_N = N / U_N - 1. The
loss is Chinchilla's in (N', D'): L = E + A / N'^alpha + B / D'^beta. With D <= U and
N <= N_opt(U) it is Chinchilla's law exactly (`data_constrained_d`, without the parameter term:
whenever D <= U). The paper's fitted constants (R_D* = 15.4, R_N* = 5.3, on top of its Chinchilla
fit) are cited as a prior for plans without a fit; they are not used in fitting.

Both forms work on numpy and jax arrays alike (`xp` picks the module), in logs: the registry's
`log_form`s call them with log inputs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

# Muennighoff et al. 2023, section 5 / eq. 5 (their fit on their runs): a prior, not a fit
PAPER_R_D = 15.4
PAPER_R_N = 5.3
# An epoch is "worth less than 1% of the first" when the effective data it adds, d D' / dR,
# = exp(-R / R_D*), falls below this fraction of a fresh epoch's value (1)
MARGINAL_EPOCH_VALUE = 0.01


def _xp(x):
    return jnp if isinstance(x, jax.Array) else np


def log_effective(log_unique, log_total, r_star):
    """log of U' + U' r* (1 - exp(-R / r*)), U' = min(U, total), R = total / U' - 1, from logs
    (either the data term: U unique tokens, total D; or the parameter term: U_N, N)."""
    xp = _xp(log_total)
    log_unique = xp.minimum(log_unique, log_total)  # a run that saw part of U saw D unique tokens
    reps = xp.exp(log_total - log_unique) - 1.0
    return log_unique + xp.log1p(-r_star * xp.expm1(-reps / r_star))


def effective_data(D, U, r_d: float):
    """D' (linear scale) for D tokens trained on U unique tokens."""
    D, U = np.asarray(D, float), np.asarray(U, float)
    return np.exp(log_effective(np.log(U), np.log(D), r_d))


def log_n_opt(a, b, alpha, beta, log_tokens):
    """log N_opt(D) of a Chinchilla law (a, b = log A, log B): alpha A N^-alpha = beta B D^-beta."""
    xp = _xp(log_tokens)
    return (xp.log(alpha) + a - xp.log(beta) - b + beta * log_tokens) / alpha


def epochs_worth_it(r_d: float, fraction: float = MARGINAL_EPOCH_VALUE) -> float:
    """Epochs (D / U) past which one more epoch adds less than `fraction` of a fresh epoch's
    effective data: exp(-R / R_D*) < fraction  <=>  R > R_D* ln(1 / fraction)."""
    return 1.0 + r_d * math.log(1.0 / fraction)


ALLOCATION_GRID = 4001  # log-spaced model sizes over ALLOCATION_DECADES around the unlimited optimum
ALLOCATION_DECADES = 3.0  # each side: the data limit moves the optimum by far less


def loss(params: dict, N, D, U) -> np.ndarray:
    """The data-constrained loss at (N, D, U) from public parameters (E, A, B, alpha, beta, R_D and
    optionally R_N); U = inf is Chinchilla's law."""
    N, D, U = (np.asarray(x, float) for x in (N, D, U))
    a, b = math.log(params["A"]), math.log(params["B"])
    al, be = params["alpha"], params["beta"]
    logN, logD = np.log(N), np.log(D)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logU = np.log(U)
        log_dp = np.where(np.isfinite(logU), log_effective(logU, logD, params["R_D"]), logD)
        log_np = logN
        if params.get("R_N") is not None:
            log_un = np.minimum(logN, log_n_opt(a, b, al, be, logU))
            log_np = np.where(np.isfinite(logU), log_effective(log_un, logN, params["R_N"]), logN)
    return params["E"] + np.exp(a - al * log_np) + np.exp(b - be * log_dp)


def allocate(params: dict, C: float, U: float, k: float = 6.0) -> dict:
    """The compute-optimal run of C FLOPs on U unique tokens (D = C / (k N)): N, D, epochs and
    loss minimised over a log grid of N, against the same law with unlimited data."""
    al, be = params["alpha"], params["beta"]
    g = (al * params["A"] / (be * params["B"])) ** (1 / (al + be))
    n_free = g * (C / k) ** (be / (al + be))
    N = n_free * np.logspace(-ALLOCATION_DECADES, ALLOCATION_DECADES, ALLOCATION_GRID)
    D = C / (k * N)
    limited, free = loss(params, N, D, U), loss(params, N, D, math.inf)
    i, j = int(np.argmin(limited)), int(np.argmin(free))
    return {
        "C": float(C),
        "U": float(U),
        "N": float(N[i]),
        "D": float(D[i]),
        "epochs": float(D[i] / U),
        "loss": float(limited[i]),
        "loss_unlimited": float(free[j]),
        "N_unlimited": float(N[j]),
        "D_unlimited": float(D[j]),
        "penalty": float(limited[i] / free[j] - 1.0),
    }


# A decay constant R* this many times the largest repetition the fitted runs reach is untested:
# within the data its term is indistinguishable from no decay (exp(-R / R*) > 0.9), so its value
# is set by noise and decides every extrapolation beyond the data.
UNTESTED_FACTOR = 10.0
# law -> (decay constant, the law without it): the fallback when that constant is untested
FALLBACKS = {"data_constrained": ("R_N", "data_constrained_d"), "data_constrained_d": ("R_D", "chinchilla")}


def max_repetitions(params: dict, N, D, U) -> dict[str, float]:
    """The largest R = D / U - 1 (for R_D) and R_N = N / U_N - 1 (for R_N) among runs, 0 when none
    repeat. U_N = min(N, N_opt(U)) under the fitted Chinchilla terms."""
    N, D, U = (np.asarray(x, float) for x in (N, D, U))
    out = {"R_D": float(np.max(np.maximum(D / U - 1.0, 0.0), initial=0.0))}
    if {"A", "B", "alpha", "beta"} <= params.keys():
        log_nopt = log_n_opt(
            math.log(params["A"]), math.log(params["B"]), params["alpha"], params["beta"], np.log(U)
        )
        u_n = np.minimum(N, np.exp(log_nopt))
        out["R_N"] = float(np.max(np.maximum(N / u_n - 1.0, 0.0), initial=0.0))
    return out


@dataclass(frozen=True)
class Fallback:
    """A decay constant the runs did not test, and the law fitted instead (`fallback` in
    `fit --json`, one entry per step)."""

    param: str  # the constant, R_N or R_D
    value: float  # its fitted value
    max_repetition: float  # the largest repetition of that kind in the runs
    to: str  # the law fitted instead (the same law without the constant)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def untested_decay(law: str, params: dict, N, D, U) -> Fallback | None:
    """The law's decay constant, its value, the largest repetition seen and the law to fall back
    to when the constant is untested by the data (`UNTESTED_FACTOR`), else None."""
    if law not in FALLBACKS:
        return None
    name, fallback = FALLBACKS[law]
    seen = max_repetitions(params, N, D, U).get(name, 0.0)
    value = float(params[name])
    if value > UNTESTED_FACTOR * max(seen, 1e-12):
        return Fallback(name, value, seen, fallback)
    return None
