"""A recipe's best loss at each compute budget, and the compute multiplier between two recipes.

Every candidate method ends in the same form for each recipe: the expected best loss at budget C,

    L*(C) = E + G C^-gamma,

which is exact for the Chinchilla form (L = E + A/N^alpha + B/D^beta at its IsoFLOP optimum,
C = k N D: gamma = alpha beta / (alpha + beta)) and is itself the frontier power law (Porian et
al. 2024, arXiv:2406.19146, fit L*(C) = E + A C^-alpha to the per-budget best runs). So the
compute REF needs to reach a loss L has a closed form, C_REF(L) = ((L - E) / G)^(-1/gamma), and
the multiplier at C is

    m(C) = C_REF(L*_OTHER(C)) / C,

> 1 when OTHER is better (REF needs more compute to match it). Where OTHER's loss lies at or below
REF's floor E, REF never reaches it: the multiplier is then capped at `MAX_MULTIPLIER` (and said).
Everything here works on a point estimate and on (S, 3) bootstrap rows alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analysis.laws.allocation import closed_form_optimum

MAX_MULTIPLIER = 1e6  # REF needs more than a million times the compute: reported as this ceiling
LOG_CAP = math.log(MAX_MULTIPLIER)


@dataclass(frozen=True)
class Frontier:
    """L*(C) = E + exp(log_g) C^-gamma of one recipe, with (S, 3) bootstrap rows (E, log_g,
    gamma) or None, and the recipe's measured frontier points (for the figure)."""

    name: str
    params: np.ndarray  # (3,) E, log_g, gamma
    samples: np.ndarray | None = field(default=None, repr=False)
    points_C: tuple[float, ...] = ()
    points_loss: tuple[float, ...] = ()

    def loss(self, C: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """L*(C) for the point estimate (rows None) or for (S, 3) rows: (len C,) or (S, len C)."""
        return frontier_loss(self.params if rows is None else rows, C)


def frontier_loss(p: np.ndarray, C: np.ndarray) -> np.ndarray:
    p = np.asarray(p, float)
    logC = np.log(np.asarray(C, float))
    E, lg, ga = (p[..., i, None] if p.ndim > 1 else p[i] for i in range(3))
    with np.errstate(all="ignore"):
        return E + np.exp(lg - ga * logC)


def compute_for(p: np.ndarray, L: np.ndarray) -> np.ndarray:
    """log C at which the frontier `p` ((3,) or (S, 3)) reaches loss L (same leading shape as the
    frontier's loss): +inf where L is at or below the floor E."""
    p = np.asarray(p, float)
    E, lg, ga = (p[..., i, None] if p.ndim > 1 else p[i] for i in range(3))
    with np.errstate(all="ignore"):
        gap = np.asarray(L, float) - E
        out = (lg - np.log(gap)) / ga
        return np.where(gap > 0, out, np.inf)


def log_multiplier(ref: np.ndarray, other: np.ndarray, C: np.ndarray) -> np.ndarray:
    """log m(C) for frontier rows `ref`, `other` ((3,) each, or (S, 3) each): capped at ±LOG_CAP;
    NaN where a row is not a usable frontier."""
    C = np.atleast_1d(np.asarray(C, float))
    L = frontier_loss(other, C)
    out = compute_for(ref, L) - np.log(C)
    with np.errstate(invalid="ignore"):
        return np.clip(np.where(np.isnan(out), np.nan, out), -LOG_CAP, LOG_CAP)


def chinchilla_frontier(params_xP: np.ndarray, k: float) -> np.ndarray:
    """(E, log_g, gamma) rows of Chinchilla parameter rows (E, A, B, alpha, beta): the IsoFLOP
    minimum L*(C) = E + H (C/k)^-gamma, so G = H k^gamma; NaN rows where the law has no optimum."""
    p = np.atleast_2d(np.asarray(params_xP, float))
    ok = np.all(np.isfinite(p), axis=1) & np.all(p[:, 1:] > 0, axis=1)
    safe = np.where(ok[:, None], p, np.array([1.0, 1.0, 1.0, 0.3, 0.3]))
    H = closed_form_optimum(safe, np.array([k]), k)["loss"][:, 0] - safe[:, 0]
    gamma = safe[:, 3] * safe[:, 4] / (safe[:, 3] + safe[:, 4])
    with np.errstate(all="ignore"):
        out = np.stack([safe[:, 0], np.log(H) + gamma * math.log(k), gamma], axis=1)
    out[~ok] = np.nan
    return out if np.ndim(params_xP) > 1 else out[0]


def power_law_frontier(rows_Sx3: np.ndarray, C_ref: float) -> np.ndarray:
    """(E, log_g, gamma) rows of frontier power laws E + A (C / C_ref)^-alpha."""
    r = np.atleast_2d(np.asarray(rows_Sx3, float))
    with np.errstate(all="ignore"):
        out = np.stack([r[:, 0], np.log(r[:, 1]) + r[:, 2] * math.log(C_ref), r[:, 2]], axis=1)
    out[~np.all(np.isfinite(out), axis=1) | (r[:, 1] <= 0)] = np.nan
    return out if np.ndim(rows_Sx3) > 1 else out[0]


def first_crossing(logC: np.ndarray, logm_xG: np.ndarray) -> np.ndarray:
    """C at the first sign change of log m along the grid `logC` (per row; NaN: none), by linear
    interpolation between the grid points either side."""
    y = np.atleast_2d(np.asarray(logm_xG, float))
    s = np.sign(y)
    change = (s[:, :-1] * s[:, 1:] < 0) & np.isfinite(y[:, :-1]) & np.isfinite(y[:, 1:])
    out = np.full(y.shape[0], np.nan)
    rows = np.flatnonzero(change.any(axis=1))
    for r in rows:
        j = int(np.argmax(change[r]))
        y0, y1 = y[r, j], y[r, j + 1]
        t = y0 / (y0 - y1)
        out[r] = math.exp(logC[j] + t * (logC[j + 1] - logC[j]))
    return out
