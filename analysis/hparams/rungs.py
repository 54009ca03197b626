"""The optimum of a swept hyperparameter inside one rung, and how much loss a rung loses away from it.

A rung is one (N, D) trained at several values of a hyperparameter h. Its optimum is not the raw
argmin (off by up to x1.7 on a x3 grid) but the vertex of loss(x) ~= L* + a (x - x*)^2, x = ln h,
through the best value and `window` values on each side (`core.vertex`). Flags: `edge` (the best
value is the lowest or highest tried: the vertex extrapolates; left out of the law by default) and
`flat` (not convex). A rung with fewer than three values, or whose vertex is not finite with a
positive loss, is left out with its reason (`SkippedRung`). The interval of x* is the central 90%
of the vertex over refits with the losses perturbed by the measured loss noise; the penalty at k
times the optimum is kappa (ln k)^2, kappa = a / L*. With a second parameter swept (an LR x batch
grid) each value's loss is the best over the other's values (a profile).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from analysis.core import validation
from analysis.core.validation import PREDICTION_LEVEL
from analysis.core.vertex import MIN_VALUES, quadratic, vertex, window_of

# The values of a rung around its best that its quadratic goes through: 1 = the best and its two
# neighbours ("the best point and its neighbours"), exact on three points.
DEFAULT_WINDOW = 1
# The relative loss noise assumed when no rung has more points in its window than the quadratic
# has coefficients (no residual to measure it from): 0.2% is the largest eval-loss difference
# between seeds we would call noise on the CPU ladder's 256-sequence eval split (docs/fit.md,
# "Hyperparameter laws"); the measured pooled residual replaces it whenever one exists.
ASSUMED_LOSS_NOISE = 2e-3
NOISE_DRAWS = 200  # Monte Carlo refits for a vertex's interval
VALUE_DIGITS = 6  # values equal to 6 significant digits are one value (float noise in a CSV)
MAX_LOG = 700.0  # math.exp overflows just above 709
PROFILE = "profile"  # how a rung is located: on its profile (JSON `rungs[].method`)


@dataclasses.dataclass(frozen=True)
class RungOptimum:
    """The located optimum of one hyperparameter in one rung (every field is reported in JSON)."""

    param: str  # the config key swept, e.g. "optim.lr"
    N: float  # the rung's parameter count
    D: float  # its training tokens (median over its runs)
    C: float  # its training compute (median over its runs)
    values: tuple[float, ...]  # distinct values tried, ascending
    losses: tuple[float, ...]  # best loss at each value (over the other swept parameters)
    best_tried: float  # the value with the lowest loss
    best_loss: float  # that loss
    optimum: float  # vertex of the quadratic in ln(value) (best_tried when flat)
    interval: tuple[float, float]  # 90% interval of the optimum
    loss_at_optimum: float  # the quadratic's loss at its vertex (<= best_loss when convex)
    kappa: float  # relative loss increase per (ln k)^2 at k x the optimum (nan when flat)
    edge: bool  # best value is the lowest or highest tried: the optimum may lie outside the grid
    flat: bool  # the quadratic is not convex: no optimum located
    n_window: int  # points the quadratic was fitted through
    method: str = PROFILE  # the 1-D quadratic on the rung's profile

    @property
    def usable(self) -> bool:
        """Whether the vertex is a located optimum (not at the grid's edge, not flat)."""
        return not (self.edge or self.flat)

    @property
    def flag(self) -> str | None:
        if self.flat:
            return "flat: the loss is not convex in ln(value) around the best value tried"
        if self.edge:
            side = "lowest" if self.best_tried == self.values[0] else "highest"
            return f"edge: the best value {self.best_tried:.4g} is the {side} of {len(self.values)} tried"
        return None

    def penalty(self, k: float | np.ndarray) -> float | np.ndarray:
        """Relative loss increase at k x the optimum (from the quadratic)."""
        return self.kappa * np.log(k) ** 2

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(values=list(self.values), losses=list(self.losses), interval=list(self.interval))
        out["flag"] = self.flag
        return out


def residual_noise(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """(sum of squared relative residuals, degrees of freedom) of the window's quadratic."""
    if len(x) <= 3:
        return 0.0, 0
    coef = np.polyfit(x, y, 2)
    r = (y - np.polyval(coef, x)) / np.min(y)
    return float(np.sum(r * r)), len(x) - 3


def locate(
    param: str,
    N: float,
    D: float,
    C: float,
    values: np.ndarray,
    losses: np.ndarray,
    noise: float,
    window: int = DEFAULT_WINDOW,
    seed: int = 0,
) -> RungOptimum:
    """The optimum of one rung's profile (`values` ascending, distinct, positive); a rung whose
    quadratic is not convex is `flat`, its optimum the best value tried."""
    x, y = np.log(values), np.asarray(losses, float)
    vx = vertex(values, y, window)
    w, i = vx.window, int(np.argmin(y))
    interval = (x[0], x[-1])
    if not vx.flat:
        interval = _central(_vertex_draws(x[w], y[w], noise, seed), fallback=interval)
    x_star, loss_star = (x[i], y[i]) if vx.flat else (vx.x, vx.loss)
    return RungOptimum(
        param=param,
        N=float(N),
        D=float(D),
        C=float(C),
        values=tuple(float(v) for v in values),
        losses=tuple(float(v) for v in y),
        best_tried=float(values[i]),
        best_loss=float(y[i]),
        optimum=safe_exp(x_star),
        interval=(safe_exp(interval[0]), safe_exp(interval[1])),
        loss_at_optimum=float(loss_star),
        kappa=math.nan if vx.flat else float(vx.a / loss_star),
        edge=bool(vx.edge),
        flat=vx.flat,
        n_window=int(w.stop - w.start),
    )


def safe_exp(v: float) -> float:
    """exp, inf past float range (an edge rung's vertex, a degenerate bootstrap's log), nan for nan."""
    return math.inf if v > MAX_LOG else float(math.exp(v))


def _vertex_draws(x: np.ndarray, y: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """ln of the optimum over NOISE_DRAWS refits of the quadratic with the losses `y` perturbed by
    relative noise `noise`; a draw that is not convex takes its lowest point."""
    rng = np.random.default_rng(seed)
    ys = y[None, :] * (1 + noise * rng.standard_normal((NOISE_DRAWS, len(y))))
    out = np.empty(NOISE_DRAWS)
    for j in range(NOISE_DRAWS):
        xs = quadratic(x, ys[j])[1]
        out[j] = xs if math.isfinite(xs) else x[int(np.argmin(ys[j]))]
    return out


def _central(draws: np.ndarray, fallback: tuple[float, float]) -> tuple[float, float]:
    """The central PREDICTION_LEVEL interval of the draws (`fallback` when it is not finite)."""
    lo, hi = validation.percentile_interval(draws, PREDICTION_LEVEL)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return fallback
    return float(lo), float(hi)


def _rounded(values: pd.Series) -> pd.Series:
    return values.map(lambda v: float(f"{v:.{VALUE_DIGITS}g}"))


def profiles(df: pd.DataFrame, param: str) -> list[tuple[tuple, pd.DataFrame]]:
    """Per rung (sorted), the best loss at each value of `param` (over every other column's values)
    in column `_v` order: the first run of the lowest loss at each value, in one pass (not a
    groupby per rung); `df` has columns N, D, C, loss, rung and `param`."""
    d = df.assign(_v=_rounded(df[param])).sort_values("loss", kind="stable")
    best = d.drop_duplicates(["rung", "_v"])
    return [(key, g.sort_values(["_v"])) for key, g in best.groupby("rung", sort=True)]


def pooled_noise(profile_list: list[tuple[tuple, pd.DataFrame]], window: int) -> tuple[float, str]:
    """(relative loss noise, where it came from): the pooled residual of the window quadratics of
    the rungs (each with >= MIN_VALUES values) where any has spare points, else ASSUMED_LOSS_NOISE."""
    ss, dof = 0.0, 0
    for _, best in profile_list:
        y = best["loss"].to_numpy(float)
        w = window_of(y, window)
        s, d = residual_noise(np.log(best["_v"].to_numpy(float))[w], y[w])
        ss, dof = ss + s, dof + d
    if dof == 0:
        return ASSUMED_LOSS_NOISE, "assumed (no rung has more points than its quadratic)"
    return max(math.sqrt(ss / dof), 1e-6), f"pooled residual of the rung quadratics ({dof} dof)"


def too_few_reason(param: str, values: np.ndarray) -> str:
    """Why a rung with fewer than MIN_VALUES values of `param` is left out."""
    if len(values) <= 1:
        return f"1 value of {param}: not swept in this rung"
    vals = ", ".join(f"{v:.4g}" for v in values)
    return f"{len(values)} values of {param} ({vals}): an optimum needs >= {MIN_VALUES}"


def unlocated_reason(r: RungOptimum) -> str | None:
    """Why a rung's vertex is no optimum (None when it is one): a non-finite optimum (a vertex
    extrapolated past float range) or a non-positive loss at it (a far extrapolation)."""
    if not (math.isfinite(r.optimum) and r.optimum > 0 and all(map(math.isfinite, r.interval))):
        return f"the optimum of {r.param} could not be located (the quadratic's vertex is not finite)"
    if not r.loss_at_optimum > 0:
        return (
            f"the optimum of {r.param} could not be located (the quadratic's loss at its vertex, "
            f"{r.loss_at_optimum:.3g}, is not positive: a far extrapolation)"
        )
    return None


@dataclasses.dataclass(frozen=True)
class SkippedRung:
    """A rung left out before any law: too few values of the parameter, or no located optimum."""

    param: str
    N: float
    D: float
    C: float
    n_values: int  # distinct values of `param` tried in the rung
    values: tuple[float, ...]
    reason: str

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "values": list(self.values)}

    def describe(self) -> str:
        return f"N={self.N:.4g}, D={self.D:.4g}: {self.reason}"
