"""The optimum of a swept hyperparameter inside one rung, and how much loss a rung loses away from it.

A rung is one (model size N, token count D) trained at several values of a hyperparameter h
(`optim.lr`, `train.batch_size`, ...). Its optimum is not the raw argmin over the values tried --
on a x3 grid that is off by up to x1.7 -- but the vertex of a quadratic in x = ln h through the best
value and its neighbours (the best value and the `window` values on each side of it, least squares
when that is more than three points):

    loss(x) ~= L* + a (x - x*)^2,   a > 0.

Two flags say when the vertex cannot be trusted:

- `edge`: the best value is the lowest or highest one tried; the vertex is then an extrapolation
  beyond the grid (kept for the report, left out of the law by default);
- `flat`: the quadratic is not convex (a <= 0: noise larger than the penalty over the grid).

A rung with fewer than three distinct values, or whose vertex is not a finite positive value with a
positive loss (an edge rung's quadratic extrapolated far off the grid), has no optimum: it is left
out with its reason (`SkippedRung`) and the other rungs are fitted.

The interval of x* is the central 90% of the vertex over refits with the losses perturbed by the
measured loss noise (relative sd; see `loss_noise`), so it is as wide as the grid's resolution
and the noise make it. The penalty curve of a rung is the quadratic's relative loss increase at
k times the optimum, kappa (ln k)^2 with kappa = a / L*: how much tuning matters at that rung.

With another hyperparameter swept as well (an LR x batch grid), each value's loss is the best over
the other parameter's values (a profile), so the optimum is that of the best setting of the rest;
`joint="quadratic"` locates both at the vertex of a 2-D quadratic instead (below).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import pandas as pd

from analysis.core import validation
from analysis.core.validation import PREDICTION_LEVEL
from analysis.core.vertex import FLAT_CURVATURE, MIN_VALUES, around, quadratic, vertex, window_of

# The values of a rung around its best that its quadratic goes through: 1 = the best and its two
# neighbours ("the best point and its neighbours"), exact on three points.
DEFAULT_WINDOW = 1
# The relative loss noise assumed when no rung has more points in its window than the quadratic
# has coefficients (no residual to measure it from): 0.2% is the largest eval-loss difference
# between seeds we would call noise on the CPU ladder's 256-sequence eval split (docs/analysis.md,
# "Hyperparameter laws"); the measured pooled residual replaces it whenever one exists.
ASSUMED_LOSS_NOISE = 2e-3
NOISE_DRAWS = 200  # Monte Carlo refits for a vertex's interval
VALUE_DIGITS = 6  # values equal to 6 significant digits are one value (float noise in a CSV)
MAX_LOG = 700.0  # math.exp overflows just above 709
PROFILE, QUADRATIC = "profile", "quadratic"  # how a rung swept in two parameters is located
JOINT_METHODS = (PROFILE, QUADRATIC)


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
    method: str = PROFILE  # "profile" (1-D quadratic) or "quadratic" (joint 2-D quadratic)

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
    """The optimum of one rung's profile (`values` ascending, distinct, positive)."""
    x, y = np.log(values), np.asarray(losses, float)
    vx = vertex(values, y, window)
    w = vx.window
    interval = (x[0], x[-1])
    if not vx.flat:
        xw = x[w]
        draws = _vertex_draws(y[w], noise, seed, lambda ys: (quadratic(xw, ys)[1], xw[int(np.argmin(ys))]))
        interval = _central(draws, fallback=interval)
    where = {"N": N, "D": D, "C": C}
    return _optimum(param, where, values, y, vx.x, vx.loss, vx.a, interval, vx.edge, w.stop - w.start)


def _optimum(
    param: str,
    where: dict[str, float],
    values: np.ndarray,
    losses: np.ndarray,
    x_star: float,
    loss_star: float,
    a: float,
    interval: tuple[float, float],
    edge: bool,
    n_window: int,
    method: str = PROFILE,
) -> RungOptimum:
    """The record of a located vertex (x_star = ln of the optimum, nan when not convex: the rung is
    flat and its optimum is the best value tried); `a` the curvature of the profile in ln(value)."""
    i = int(np.argmin(losses))
    flat = not math.isfinite(x_star)
    if flat:
        x_star, loss_star = math.log(values[i]), losses[i]
    return RungOptimum(
        param=param,
        N=float(where["N"]),
        D=float(where["D"]),
        C=float(where["C"]),
        values=tuple(float(v) for v in values),
        losses=tuple(float(v) for v in losses),
        best_tried=float(values[i]),
        best_loss=float(losses[i]),
        optimum=_exp(x_star),
        interval=(_exp(interval[0]), _exp(interval[1])),
        loss_at_optimum=float(loss_star),
        kappa=math.nan if flat else float(a / loss_star),
        edge=bool(edge),
        flat=flat,
        n_window=int(n_window),
        method=method,
    )


def _exp(v: float) -> float:
    """exp, inf past float range (an edge rung's vertex can be extrapolated that far), nan for nan."""
    return math.inf if v > MAX_LOG else float(math.exp(v))


def _vertex_draws(
    y: np.ndarray, noise: float, seed: int, solve: Callable[[np.ndarray], tuple[float, float]]
) -> np.ndarray:
    """ln of the optimum over NOISE_DRAWS refits with the losses `y` perturbed by relative noise
    `noise`: `solve(losses)` gives (the refit's vertex or nan when not convex, the point with the
    lowest loss), and a draw that is not convex takes the second."""
    rng = np.random.default_rng(seed)
    ys = y[None, :] * (1 + noise * rng.standard_normal((NOISE_DRAWS, len(y))))
    out = np.empty(NOISE_DRAWS)
    for j in range(NOISE_DRAWS):
        xs, best = solve(ys[j])
        out[j] = xs if math.isfinite(xs) else best
    return out


def _central(draws: np.ndarray, fallback: tuple[float, float]) -> tuple[float, float]:
    """The central PREDICTION_LEVEL interval of the draws (`fallback` when it is not finite)."""
    lo, hi = validation.percentile_interval(draws, PREDICTION_LEVEL)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return fallback
    return float(lo), float(hi)


def _rounded(values: pd.Series) -> pd.Series:
    return values.map(lambda v: float(f"{v:.{VALUE_DIGITS}g}"))


def _best_per(df: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """Per rung, the first run of the lowest loss at each combination of `keys` (one pass, not a
    groupby per rung), sorted by `keys`."""
    best = df.sort_values("loss", kind="stable").drop_duplicates(["rung", *keys])
    return [(key, g.sort_values(keys)) for key, g in best.groupby("rung", sort=True)]


def profiles(df: pd.DataFrame, param: str) -> list[tuple[tuple, pd.DataFrame]]:
    """Per rung, the best loss at each value of `param` (over every other column's values) in
    column `_v` order; `df` has columns N, D, C, loss, rung and `param`."""
    return _best_per(df.assign(_v=_rounded(df[param])), ["_v"])


# ---- the joint optimum of a learning-rate x batch-size grid ---------------------------------------
# With `joint="quadratic"` a rung that sweeps both parameters of JOINT_PAIR (>= 3 values of each) is
# located on its grid: a quadratic in (x, y) = (ln lr, ln B) with a cross term,
#
#     loss ~= c0 + cx x + cy y + cxx x^2 + cyy y^2 + cxy x y,
#
# least squares through the cells around the best one (`window` values of each parameter on each
# side: 9 cells for 6 coefficients on a full grid). Its vertex is the joint optimum; each
# parameter's curvature is that of the profile (the other re-tuned): cxx - cxy^2 / (4 cyy); its
# interval is the central 90% of the vertex over noise refits, as for one parameter, and the best
# cell's value at the lowest or highest tried is `edge`. A rung with too few cells around its best
# for six coefficients, whose quadratic is not convex (its Hessian not positive definite: `flat` in
# two dimensions) or whose vertex lies outside those cells is located on its profile (method
# "profile", flagged `flat` there when that is not convex either): on our CPU ladder (~1.4% noise)
# trusting those vertices put one rung's optimum x5 below its best value and took the lr backtest's
# error from 0.11 to 0.42 dex.
# The loss noise is the pooled residual of the grid quadratics (3 spare cells each on a full grid).
JOINT_PAIR = ("optim.lr", "train.batch_size")
GRID_COEFFICIENTS = 6


def joint_partner(param: str, columns) -> str | None:
    """The other parameter of JOINT_PAIR when `param` is one of them and the table has the other."""
    if param not in JOINT_PAIR:
        return None
    other = JOINT_PAIR[1 - JOINT_PAIR.index(param)]
    return other if other in columns else None


def grids(df: pd.DataFrame, param: str, partner: str) -> dict[tuple, pd.DataFrame]:
    """Per rung, the best loss at each (param, partner) cell (columns `_v`, `_w`, loss)."""
    d = df.assign(_v=_rounded(df[param]), _w=_rounded(pd.to_numeric(df[partner], errors="coerce")))
    return dict(_best_per(d[d["_w"] > 0], ["_v", "_w"]))


@dataclasses.dataclass(frozen=True)
class GridWindow:
    """The cells of one rung's grid its 2-D quadratic goes through, centred on the best cell."""

    x: np.ndarray  # ln(param value) - x0
    y: np.ndarray  # ln(partner value) - y0
    loss: np.ndarray
    x0: float  # ln of the best cell's param value
    y0: float
    edge: bool  # the best cell's param value is the lowest or highest tried in the rung

    def fit(self, loss: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
        """(coefficients c0, cx, cy, cxx, cyy, cxy; sum of squared relative residuals; dof)."""
        y = self.loss if loss is None else loss
        coef = np.linalg.lstsq(_grid_design(self.x, self.y), y, rcond=None)[0]
        r = (y - _grid_design(self.x, self.y) @ coef) / np.min(y)
        return coef, float(np.sum(r * r)), len(y) - GRID_COEFFICIENTS

    def inside(self, x: float, y: float) -> bool:
        """Whether (x, y) (centred like the cells) lies within the span of the cells fitted."""
        return bool(self.x.min() <= x <= self.x.max() and self.y.min() <= y <= self.y.max())

    def solve(self, loss: np.ndarray) -> tuple[float, float]:
        """(ln of the param's optimum from a refit to `loss`, nan when not convex; ln of the
        param value of its lowest cell): a noise draw of `_vertex_draws`."""
        v = grid_vertex(self.fit(loss)[0])
        return v[0] + self.x0, self.x[int(np.argmin(loss))] + self.x0


def _grid_design(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])


def grid_vertex(coef: np.ndarray) -> tuple[float, float, float, float]:
    """(x*, y*, loss at the vertex, the profile curvature in x) of a 2-D quadratic; nans when its
    Hessian is not positive definite (the curvature threshold is vertex.FLAT_CURVATURE's)."""
    c0, cx, cy, cxx, cyy, cxy = coef
    tol = FLAT_CURVATURE * abs(c0)
    if not (cxx > tol and cyy > tol and 4 * cxx * cyy - cxy * cxy > tol * tol):
        return (math.nan,) * 4
    hess = np.array([[2 * cxx, cxy], [cxy, 2 * cyy]])
    xs, ys = np.linalg.solve(hess, [-cx, -cy])
    return float(xs), float(ys), float(c0 + 0.5 * (cx * xs + cy * ys)), float(cxx - cxy * cxy / (4 * cyy))


def grid_window(cells: pd.DataFrame, window: int) -> GridWindow | None:
    """The cells around a rung's best (`cells`: one row per (_v, _w) with its loss); None when the
    rung does not sweep both parameters (>= MIN_VALUES each) or its window cannot fix six
    coefficients."""
    vx, vy = np.sort(cells["_v"].unique()), np.sort(cells["_w"].unique())
    if len(vx) < MIN_VALUES or len(vy) < MIN_VALUES:
        return None
    best = cells.loc[cells["loss"].idxmin()]
    i, j = int(np.searchsorted(vx, best["_v"])), int(np.searchsorted(vy, best["_w"]))
    near_x, near_y = vx[around(len(vx), i, window)], vy[around(len(vy), j, window)]
    w = cells[cells["_v"].isin(near_x) & cells["_w"].isin(near_y)]
    x0, y0 = math.log(best["_v"]), math.log(best["_w"])
    x, y = np.log(w["_v"].to_numpy(float)) - x0, np.log(w["_w"].to_numpy(float)) - y0
    if len(w) < GRID_COEFFICIENTS or np.linalg.matrix_rank(_grid_design(x, y)) < GRID_COEFFICIENTS:
        return None
    loss = w["loss"].to_numpy(float)
    return GridWindow(x, y, loss, x0, y0, i in (0, len(vx) - 1))


def locate_joint(
    param: str,
    where: dict[str, float],
    profile: pd.DataFrame,
    grid: GridWindow,
    noise: float,
    seed: int = 0,
) -> RungOptimum | None:
    """The optimum of `param` in one rung at the vertex of its grid's 2-D quadratic; `profile` is
    the rung's best loss per value (`profiles`), reported as the 1-D locate reports it. None (the
    rung is then located on its profile) when the quadratic is not convex or its vertex lies
    outside the cells it went through: an extrapolation of the noise."""
    x_star, y_star, loss_star, a = grid_vertex(grid.fit()[0])
    if not (math.isfinite(x_star) and grid.inside(x_star, y_star)):
        return None
    values, losses = profile["_v"].to_numpy(float), profile["loss"].to_numpy(float)
    span = (math.log(values[0]), math.log(values[-1]))
    interval = _central(_vertex_draws(grid.loss, noise, seed, grid.solve), fallback=span)
    return _optimum(
        param,
        where,
        values,
        losses,
        x_star + grid.x0,
        loss_star,
        a,
        interval,
        grid.edge,
        len(grid.loss),
        QUADRATIC,
    )


def pooled_grid_noise(windows: list[GridWindow]) -> tuple[float, str] | None:
    """(relative loss noise, its source) from the pooled residual of the rungs' 2-D quadratics;
    None when no grid has more cells than coefficients."""
    fits = [w.fit()[1:] for w in windows]
    ss, dof = sum(f[0] for f in fits), sum(f[1] for f in fits)
    if dof == 0:
        return None
    return max(math.sqrt(ss / dof), 1e-6), f"pooled residual of the rung 2-D quadratics ({dof} dof)"


def pooled_noise(
    profile_list: list[tuple[tuple, pd.DataFrame]], param: str, window: int
) -> tuple[float, str]:
    """(relative loss noise, where it came from): the pooled residual of the rungs' window
    quadratics where any has spare points, else ASSUMED_LOSS_NOISE."""
    ss, dof = 0.0, 0
    for _, best in profile_list:
        if len(best) < MIN_VALUES:
            continue
        y = best["loss"].to_numpy(float)
        w = window_of(y, window)
        s, d = residual_noise(np.log(best["_v"].to_numpy(float))[w], y[w])
        ss, dof = ss + s, dof + d
    if dof == 0:
        return ASSUMED_LOSS_NOISE, "assumed (no rung has more points than its quadratic)"
    return max(math.sqrt(ss / dof), 1e-6), f"pooled residual of the rung quadratics ({dof} dof)"


def split_rung_sizes(
    profile_list: list[tuple[tuple, pd.DataFrame]],
) -> tuple[list[tuple[tuple, pd.DataFrame]], list[tuple[tuple, pd.DataFrame]]]:
    """(rungs with >= MIN_VALUES distinct values of the parameter, rungs with fewer): no optimum
    can be located from one or two points, so the second are left out (`SkippedRung`)."""
    swept = [(k, b) for k, b in profile_list if len(b) >= MIN_VALUES]
    short = [(k, b) for k, b in profile_list if len(b) < MIN_VALUES]
    return swept, short


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
