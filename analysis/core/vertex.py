"""The vertex of a quadratic in log(value): where a rung's loss is lowest over a swept hyperparameter.

    loss(x) ~= L* + a (x - x*)^2,  x = ln(value),  a > 0,

least squares through the best value tried and `window` values on each side of it (three points
at least: at an end of the grid, the three nearest). Shared by the hyperparameter laws
(analysis.hparams.rungs: the optimum x*) and by `fit --at-optimum` (the loss L* at it, instead
of the loss of the nearest value tried).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

MIN_VALUES = 3  # a vertex needs three values of the parameter
# A curvature a below this times the loss (a relative loss change of 1e-9 per (ln k)^2) is float
# round-off of a constant loss (polyfit returns a ~ +-1e-16), not an optimum: the rung is flat.
FLAT_CURVATURE = 1e-9


@dataclasses.dataclass(frozen=True)
class Vertex:
    """The quadratic through a profile's best point and its neighbours."""

    a: float  # curvature in loss per (ln value)^2 (<= 0: not convex)
    x: float  # ln of the optimum (nan when not convex)
    loss: float  # the quadratic's loss at the vertex (nan when not convex)
    best: int  # index of the best value tried
    edge: bool  # the best value is the lowest or highest tried
    window: slice  # the points fitted

    @property
    def flat(self) -> bool:
        return not math.isfinite(self.x)

    @property
    def usable(self) -> bool:
        return not (self.flat or self.edge)


def quadratic(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(a, x*, L*) of y = L* + a (x - x*)^2 by least squares (exact on three points)."""
    a, b, c = np.polyfit(x, y, 2)
    if not a > FLAT_CURVATURE * np.max(np.abs(y)):
        return float(a), math.nan, math.nan
    return float(a), float(-b / (2 * a)), float(c - b * b / (4 * a))


def window_of(losses: np.ndarray, window: int) -> slice:
    """The best value and `window` values on each side (the three nearest at an end)."""
    return around(len(losses), int(np.argmin(losses)), window)


def around(n: int, i: int, window: int) -> slice:
    """Index `i` of `n` and `window` indices on each side (the three nearest at an end)."""
    lo, hi = max(0, i - window), min(n, i + window + 1)
    if hi - lo < MIN_VALUES:
        lo, hi = (0, MIN_VALUES) if lo == 0 else (n - MIN_VALUES, n)
    return slice(lo, hi)


def vertex(values: np.ndarray, losses: np.ndarray, window: int = 1) -> Vertex:
    """The vertex of a profile: `values` ascending, distinct and positive, >= 3 of them."""
    x, y = np.log(np.asarray(values, float)), np.asarray(losses, float)
    w = window_of(y, window)
    a, xs, ls = quadratic(x[w], y[w])
    i = int(np.argmin(y))
    return Vertex(a, xs, ls, i, i in (0, len(y) - 1), w)
