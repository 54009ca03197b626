"""Separable (variable-projection) least squares for the RL sigmoid, on the shared L-BFGS engine.

ScaleRL's sigmoid is *linear* in its two level parameters once its shape parameters are fixed:
R = R0 (1 - s) + A s with s = 1 / (1 + (C_mid / C)^B). So chi^2 is a function of the shape
parameters alone,

    chi2(nl) = min over lin in a box of sum_n w_n (y_n - X(nl)_n . lin)^2,

with the inner minimum solved in closed form (`box_wls`: a 2x2 weighted least squares whose
optimum is the unconstrained one when it lies in the box, else on a face of it). The outer
minimum over the shape parameters (log C_mid, log B) is

1. a grid (`GRID` points per free shape parameter, as ScaleRL grids A and C_mid), evaluated in
   NumPy from the same closed form: global, so no start-value luck;
2. a polish of the best distinct grid cells by `analysis.core.lbfgs.minimize_batch`, the
   vmapped multi-start L-BFGS every least-squares fit in `analysis` runs on, with the inner
   solve inside the objective (exact gradients: autodiff at the solved levels, see `_chi2`) and
   the box bounds of the shape parameters by reparametrisation: the soft clamp of
   `analysis.laws.registry.Transform`.

A parameter is held fixed by giving it equal lower and upper bounds (`Config`), so the main fit,
every point of a profile likelihood and every bootstrap resample (a row of point weights) are
problems of one shape that run in one batched call: one compiled program per padded point count
(`MIN_ROWS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core import validation
from analysis.core.enums import TransformKind
from analysis.core.lbfgs import LBFGSConfig, minimize_batch
from analysis.laws.registry import START_MARGIN, Transform

A_MAX = 1.0  # a pass rate cannot exceed 1: the upper bound of the ceiling A
B_BOUNDS = (0.1, 12.0)
MID_SPAN = (1e-2, 1e3)  # C_mid searched in [C_lo * 1e-2, C_hi * 1e3]
GRID = 48  # grid points per free shape parameter
GRID_CANDIDATES = 50  # best grid cells considered as starts
START_SEPARATION = 0.1  # distinct starts differ by more than this fraction of a parameter's range
FEASIBLE_TOL = 1e-12  # a level solution this far outside its box still counts as inside
TINY = 1e-150  # squared column norms below this are an empty column (its level is undetermined)
COLLINEAR = 1e-13  # det(M) / (M00 M11) below this: the two level columns are collinear
EXP_CLIP = 700.0  # exp() arguments are clipped here (float64 overflows at ~709)
MIN_ROWS = 128  # points are padded (weight 0) to a power of two, at least this: few compiled shapes
WIDTH = 64  # batch width of every call: one compiled program per padded point count
CFG = LBFGSConfig(max_evals=1000)


@dataclass(frozen=True, eq=False)
class LawSpec:
    """A law as y = X(nl) @ lin: shape parameters `nl` (logs) and level parameters `lin`, each
    with box bounds (an `nl_bounds`/`lin_bounds` row [lo, hi]; lo == hi holds it at lo)."""

    nl_names: tuple[str, ...]
    nl_bounds: np.ndarray  # (P, 2)
    lin_names: tuple[str, str]
    lin_bounds: np.ndarray  # (2, 2)


def sigmoid_spec(C: np.ndarray, r0: float | None) -> LawSpec:
    """ScaleRL's sigmoid: nl = (log C_mid, log B), lin = (R0, A); a given r0 holds R0 there (and
    keeps A >= R0)."""
    pos = C[C > 0]
    nl = [[math.log(pos.min() * MID_SPAN[0]), math.log(pos.max() * MID_SPAN[1])], [*map(math.log, B_BOUNDS)]]
    lin = [[0.0, 1.0], [0.0, A_MAX]] if r0 is None else [[r0, r0], [r0, A_MAX]]
    return LawSpec(("log_C_mid", "log_B"), np.array(nl), ("R0", "A"), np.array(lin))


# ---- the closed form, on numpy (xp=np) or jax (xp=jnp) arrays --------------------------------


def design(xp, nl_GxP, logC_N, start_N):
    """X (G, N, 2): the level parameters' (R0, A) columns at every row of shape parameters."""
    z = xp.exp(nl_GxP[:, 1:2]) * (nl_GxP[:, 0:1] - logC_N[None, :])  # B (log C_mid - log C)
    s = 1.0 / (1.0 + xp.exp(xp.clip(z, -EXP_CLIP, EXP_CLIP)))
    s = xp.where(start_N[None, :], 0.0, s)  # C = 0: the start evaluation, R = R0
    return xp.stack([1.0 - s, s], axis=-1)


def moments(xp, X_GxNx2, y_N, w_xN):
    """Weighted normal equations: M = X' W X (G, 2, 2), v = X' W y (G, 2), yy = y' W y (G,);
    `w_xN` is one row of point weights or one per grid row."""
    Xw = X_GxNx2 * w_xN[..., None]
    yy = xp.broadcast_to(xp.sum(w_xN * y_N * y_N, axis=-1), X_GxNx2.shape[:1])
    return xp.einsum("gnk,gnl->gkl", Xw, X_GxNx2), xp.einsum("gnk,n->gk", Xw, y_N), yy


def box_wls(xp, M, v, yy, lo_x2, hi_x2):
    """argmin over lo <= lin <= hi of lin' M lin - 2 v' lin + yy, and its value: (lin (G, 2),
    chi2 (G,)). Exact for two parameters: the optimum is the unconstrained one when it lies in
    the box, else it lies on a face (one parameter on a bound, the other solved and clipped),
    corners included. Infinite bounds have no face; lo == hi holds a parameter there.

    Solved on columns scaled to unit norm (a sigmoid's s column can be 1e-100), which keeps
    every intermediate finite; a column of norm^2 below `TINY` is empty and its level sits at
    its lower bound. Written on (G,) arrays one parameter at a time: it is part of the compiled
    objective, and fewer, simpler operations compile faster."""
    lo, hi = xp.broadcast_to(lo_x2, v.shape), xp.broadcast_to(hi_x2, v.shape)
    has = (M[:, 0, 0] > TINY, M[:, 1, 1] > TINY)
    c = tuple(xp.sqrt(xp.where(h, M[:, k, k], 1.0)) for k, h in enumerate(has))
    m = tuple(xp.where(h, 1.0, M[:, k, k]) for k, h in enumerate(has))  # the scaled diagonal
    m01 = M[:, 0, 1] / (c[0] * c[1])
    vn = (v[:, 0] / c[0], v[:, 1] / c[1])
    lo, hi = (lo[:, 0] * c[0], lo[:, 1] * c[1]), (hi[:, 0] * c[0], hi[:, 1] * c[1])

    def value(b0, b1):
        return yy - 2.0 * (b0 * vn[0] + b1 * vn[1]) + b0 * b0 * m[0] + 2.0 * b0 * b1 * m01 + b1 * b1 * m[1]

    det = 1.0 - m01 * m01
    solvable = has[0] & has[1] & (det > COLLINEAR)
    det = xp.where(solvable, det, 1.0)
    free = ((vn[0] - m01 * vn[1]) / det, (vn[1] - m01 * vn[0]) / det)
    ok = solvable
    for k in (0, 1):
        ok = ok & (free[k] >= lo[k] - FEASIBLE_TOL) & (free[k] <= hi[k] + FEASIBLE_TOL)
    b0, b1 = xp.where(ok, free[0], 0.0), xp.where(ok, free[1], 0.0)
    best = xp.where(ok, value(b0, b1), xp.inf)
    for j in (0, 1):
        o = 1 - j
        for bound in (lo[j], hi[j]):
            bj = xp.where(xp.isfinite(bound), bound, 0.0)
            bo = xp.clip(xp.where(has[o], vn[o] - m01 * bj, lo[o]), lo[o], hi[o])
            ok = xp.isfinite(bound) & xp.isfinite(bo)
            bo = xp.where(ok, bo, 0.0)
            cand = (bj, bo) if j == 0 else (bo, bj)
            chi = xp.where(ok, value(*cand), xp.inf)
            better = chi < best
            b0, b1, best = (
                xp.where(better, cand[0], b0),
                xp.where(better, cand[1], b1),
                xp.where(better, chi, best),
            )
    return xp.stack([b0 / c[0], b1 / c[1]], axis=-1), best


def to_shape(xp, u_xP, lo_xP, hi_xP):
    """Internal coordinates -> shape parameters inside [lo, hi] (the registry's soft clamp);
    a parameter with lo == hi is that value."""
    held = hi_xP <= lo_xP
    t = Transform(TransformKind.INTERVAL, lo_xP, xp.where(held, lo_xP + 1.0, hi_xP))
    return xp.where(held, lo_xP, t.public(u_xP, xp))


def to_internal(nl_xP: np.ndarray, lo_xP: np.ndarray, hi_xP: np.ndarray) -> np.ndarray:
    """Shape parameters -> internal coordinates, moved `START_MARGIN` inside their bounds (a start
    on a bound is an infinite internal value); 0 for held parameters (ignored)."""
    held = hi_xP <= lo_xP
    t = Transform(TransformKind.INTERVAL, lo_xP, np.where(held, lo_xP + 1.0, hi_xP))
    return np.where(held, 0.0, t.internal(t.inside(nl_xP, START_MARGIN)))


def _chi2(u_P, logC_N, start_N, y_N, w_N, nl_lo, nl_hi, lin_lo, lin_hi):
    """The engine's objective: chi^2 at the shape parameters of internal coordinates `u_P`, the
    level parameters solved inside (variable projection); residuals summed directly (not from
    the moments), so the value is accurate to round-off.

    The level parameters are held constant under differentiation: at the inner optimum the
    derivative of the minimum is the partial derivative at fixed levels (Danskin's theorem; the
    box does not move with the shape parameters), so the gradient is exact, and autodiff need not
    run backwards through the inner solve (which would triple the program to compile)."""
    X = design(jnp, to_shape(jnp, u_P, nl_lo, nl_hi)[None, :], logC_N, start_N)
    M, v, yy = moments(jnp, jax.lax.stop_gradient(X), y_N, w_N)
    lin = jax.lax.stop_gradient(box_wls(jnp, M, v, yy, lin_lo[None, :], lin_hi[None, :])[0])
    r = y_N - X[0] @ lin[0]
    return jnp.sum(w_N * r * r)


# ---- problems and their batched solution ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class Config:
    """One least-squares problem on a fitter's points: its bounds (the spec's, with held
    parameters at lo == hi), the row of point weights it uses and how many grid cells it
    polishes."""

    nl_lo: np.ndarray  # (P,)
    nl_hi: np.ndarray
    lin_lo: np.ndarray  # (2,)
    lin_hi: np.ndarray
    row: int = 0  # index into the fitter's weight rows
    n_starts: int = 1

    def hold(self, kind: str, index: int, value: float) -> "Config":
        """This problem with parameter `index` of `kind` ("nl" or "lin") held at `value`."""
        lo, hi = (self.nl_lo, self.nl_hi) if kind == "nl" else (self.lin_lo, self.lin_hi)
        lo, hi = lo.copy(), hi.copy()
        lo[index] = hi[index] = value
        return replace(self, **({"nl_lo": lo, "nl_hi": hi} if kind == "nl" else {"lin_lo": lo, "lin_hi": hi}))


@dataclass(frozen=True)
class Solution:
    """The minimum of one problem: shape parameters, level parameters, chi^2."""

    nl: np.ndarray
    lin: np.ndarray
    chi2: float


class Fitter:
    """One law on one set of points (compute C, pass rate y, stderr s), with one or more rows
    of point weights (1/s^2 times a bootstrap resample's counts; row 0 by default 1/s^2)."""

    def __init__(self, spec: LawSpec, C: np.ndarray, y: np.ndarray, s: np.ndarray, counts_RxN=None):
        self.spec = spec
        self.start = C <= 0
        self.logC = np.log(np.where(self.start, 1.0, C))
        self.y = np.asarray(y, np.float64)
        w = 1.0 / np.asarray(s, np.float64) ** 2
        self.w_RxN = w[None, :] if counts_RxN is None else np.asarray(counts_RxN, np.float64) * w[None, :]
        self._moments: dict[int, tuple] = {}  # weight row -> the full grid's normal equations

    def base(self, row: int = 0, n_starts: int = 1) -> Config:
        b = self.spec
        return Config(
            b.nl_bounds[:, 0], b.nl_bounds[:, 1], b.lin_bounds[:, 0], b.lin_bounds[:, 1], row, n_starts
        )

    def level(self, nl_GxP: np.ndarray, rows: Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        """(lin (G, 2), chi2 (G,)) in NumPy: row g's level parameters at shape parameters
        `nl_GxP[g]` under problem `rows[g]` (its weights and level bounds)."""
        X = design(np, nl_GxP, self.logC, self.start)
        w = self.w_RxN[[r.row for r in rows]]
        lo, hi = np.stack([r.lin_lo for r in rows]), np.stack([r.lin_hi for r in rows])
        return box_wls(np, *moments(np, X, self.y, w), lo, hi)

    @cached_property
    def _full_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(grid (G, P), X (G, N, 2)): every shape parameter on `GRID` points across its bounds."""
        axes = [np.linspace(lo, hi, GRID) for lo, hi in self.spec.nl_bounds]
        grid = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=-1)
        return grid, design(np, grid, self.logC, self.start)

    def _grid_chi2(self, configs: Sequence[Config]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(nl grid (G, P), lin (G, 2), chi2 (G,)) per problem: free shape parameters on `GRID`
        points across the spec's bounds, held ones at their value; batched over problems. The
        full grid's design is computed once, and its normal equations once per weight row (a
        profile of a level parameter reuses them at every point)."""
        out: list = [None] * len(configs)
        held = [bool(np.any(c.nl_hi <= c.nl_lo)) for c in configs]
        grid, X = self._full_grid
        for row in sorted({c.row for c, h in zip(configs, held) if not h}):
            idx = [i for i, c in enumerate(configs) if not held[i] and c.row == row]
            if row not in self._moments:
                self._moments[row] = moments(np, X, self.y, self.w_RxN[row])
            M, v, yy = (np.concatenate([a] * len(idx)) for a in self._moments[row])
            lo = np.repeat(np.stack([configs[i].lin_lo for i in idx]), len(grid), axis=0)
            hi = np.repeat(np.stack([configs[i].lin_hi for i in idx]), len(grid), axis=0)
            lin, chi = box_wls(np, M, v, yy, lo, hi)
            for k, i in enumerate(idx):
                part = slice(k * len(grid), (k + 1) * len(grid))
                out[i] = (grid, lin[part], chi[part])
        idx = [i for i, h in enumerate(held) if h]
        if idx:
            grids = [self._axes(configs[i]) for i in idx]
            sizes = [len(g) for g in grids]
            rows = [configs[i] for i, n in zip(idx, sizes) for _ in range(n)]
            lin, chi = self.level(np.concatenate(grids), rows)
            for i, g, part in zip(idx, grids, np.split(np.arange(len(rows)), np.cumsum(sizes)[:-1])):
                out[i] = (g, lin[part], chi[part])
        return out

    def _axes(self, cfg: Config) -> np.ndarray:
        """The grid of a problem with held shape parameters (those at their value)."""
        held = cfg.nl_hi <= cfg.nl_lo
        axes = [
            np.array([cfg.nl_lo[p]]) if held[p] else np.linspace(*self.spec.nl_bounds[p], GRID)
            for p in range(len(held))
        ]
        return np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=-1)

    def _starts(self, grid: np.ndarray, chi: np.ndarray, cfg: Config) -> list[np.ndarray]:
        """Up to `n_starts` of the best grid cells, each more than `START_SEPARATION` of the range
        from the others in some free parameter."""
        span = self.spec.nl_bounds[:, 1] - self.spec.nl_bounds[:, 0]
        free = cfg.nl_hi > cfg.nl_lo
        if not free.any():
            return []
        starts: list[np.ndarray] = []
        for i in np.argsort(chi)[:GRID_CANDIDATES]:
            x0 = grid[i]
            if all(np.max(np.abs(x0 - s)[free] / span[free]) > START_SEPARATION for s in starts):
                starts.append(x0)
            if len(starts) >= cfg.n_starts:
                break
        return starts

    def solve(self, configs: Sequence[Config]) -> list[Solution]:
        """The minimum of every problem: its grid, then its best distinct cells polished, all
        problems' starts in one batched L-BFGS run; the better of grid and polish is kept."""
        best, jobs = [], []
        for c, (cfg, (grid, lin, chi)) in enumerate(zip(configs, self._grid_chi2(configs))):
            i = int(np.argmin(chi))
            best.append(Solution(grid[i], lin[i], float(chi[i])))
            jobs += [(c, x0) for x0 in self._starts(grid, chi, cfg)]
        if not jobs:
            return best
        rows = [configs[c] for c, _ in jobs]
        nl_lo, nl_hi = np.stack([r.nl_lo for r in rows]), np.stack([r.nl_hi for r in rows])
        u0 = to_internal(np.stack([x0 for _, x0 in jobs]), nl_lo, nl_hi)
        x, _ = self._minimize(u0, rows, nl_lo, nl_hi)
        nl = to_shape(np, x, nl_lo, nl_hi)
        lin, chi = self.level(nl, rows)
        for k, (c, _) in enumerate(jobs):
            if chi[k] < best[c].chi2:
                best[c] = Solution(nl[k], lin[k], float(chi[k]))
        return best

    def _minimize(self, u0_SxP, rows: Sequence[Config], nl_lo, nl_hi) -> tuple[np.ndarray, np.ndarray]:
        """(internal optima (S, P), chi^2 (S,)) by `minimize_batch`, every problem's bounds and
        weight row per start, on one program shape: points padded with weight 0 (`MIN_ROWS`)."""
        n = validation.padded_rows(self.y.size, MIN_ROWS)
        pad = validation.pad_rows
        args = (
            pad(self.logC, n),
            pad(self.start, n, False),
            pad(self.y, n),
            pad(np.stack([self.w_RxN[r.row] for r in rows]), n),
            nl_lo,
            nl_hi,
            np.stack([r.lin_lo for r in rows]),
            np.stack([r.lin_hi for r in rows]),
        )
        with jax.enable_x64(True):
            res = minimize_batch(
                _chi2,
                u0_SxP,
                args,
                batched_args=(False, False, False, True, True, True, True, True),
                cfg=CFG,
                width=WIDTH,
                slots=WIDTH,
            )
        return np.asarray(res.x), res.f


# ---- profile likelihood ----------------------------------------------------------------------

PROFILE_POINTS = 10  # profile evaluations per open interval end and round (all ends in one run)
PROFILE_XTOL = 1e-4  # an end is located to this fraction of max(1, |estimate|), in fit space
PROFILE_ROUNDS = 12  # bisection-like rounds at most (each shrinks a bracket 11x)
UNBOUNDED_REACH = 10.0  # an infinite bound is searched to this many max(1, |estimate|) away


@dataclass
class _End:
    """One end of one profile interval: the bracket [near, far] (from the estimate towards the
    bound) whose chi^2 values straddle the target."""

    kind: str
    index: int
    near: float
    far: float
    chi_near: float
    chi_far: float
    xtol: float
    hit: bool = False  # the profile never reaches the target before the bound


def _profile(fitter: Fitter, base: Config, ends: Sequence[_End], values: Sequence[np.ndarray]) -> list:
    """chi^2 profiles: for every end, the minimum with its parameter held at each of its values
    (the rest free), all in one batched run."""
    configs = [base.hold(e.kind, e.index, float(v)) for e, vs in zip(ends, values) for v in vs]
    chi = np.array([s.chi2 for s in fitter.solve(configs)])
    return np.split(chi, np.cumsum([len(v) for v in values])[:-1])


def _narrow(end: _End, values: np.ndarray, chi: np.ndarray, target: float) -> None:
    """Shrink `end`'s bracket to the first of `values` (ordered from near to far) whose chi^2
    reaches the target, and the value before it."""
    up = np.flatnonzero(chi >= target)
    if up.size == 0:
        end.near, end.chi_near = float(values[-1]), float(chi[-1])
        return
    j = int(up[0])
    if j > 0:
        end.near, end.chi_near = float(values[j - 1]), float(chi[j - 1])
    end.far, end.chi_far = float(values[j]), float(chi[j])


def profile_intervals(
    fitter: Fitter, best: Solution, params: Sequence[tuple[str, int]], threshold: float
) -> list[tuple[float, float, bool, bool]]:
    """Profile-likelihood intervals (in fit space) of `params` ((kind, index): "lin" or "nl"):
    on either side of the estimate, where the profile chi^2 first rises by `threshold` above
    `best`. Returns (lo, hi, lo_hit, hi_hit) per parameter; *_hit: the chi^2 never rose by
    `threshold` before the parameter's bound (the interval ends there).

    Search: every end first at the bound and at points halving the way to the estimate
    (1/2, 1/4, ... of it: an interval is usually far narrower than its box), then rounds of
    `PROFILE_POINTS` evenly spaced points inside each end's bracket until it is narrower than
    `PROFILE_XTOL`; the end is then interpolated on sqrt(chi^2 - chi^2_min), which is close to
    linear in the parameter. Every round of every end runs in one batched L-BFGS call."""
    base, target = fitter.base(), best.chi2 + threshold
    ends = []
    for kind, idx in params:
        x_hat = float((best.lin if kind == "lin" else best.nl)[idx])
        lo, hi = (base.lin_lo, base.lin_hi) if kind == "lin" else (base.nl_lo, base.nl_hi)
        for bound in (float(lo[idx]), float(hi[idx])):
            if not math.isfinite(bound):
                bound = x_hat + math.copysign(UNBOUNDED_REACH * max(1.0, abs(x_hat)), bound)
            xtol = PROFILE_XTOL * max(1.0, abs(x_hat))
            ends.append(_End(kind, idx, x_hat, bound, best.chi2, math.inf, xtol, abs(bound - x_hat) < 1e-12))
    halving = 2.0 ** -np.arange(PROFILE_POINTS - 1, -1, -1)
    todo = [e for e in ends if not e.hit]
    values = [e.near + (e.far - e.near) * halving for e in todo]
    for e, v, chi in zip(todo, values, _profile(fitter, base, todo, values)):
        e.hit = bool(chi[-1] < target)
        _narrow(e, v, chi, target)
    inner = np.arange(1, PROFILE_POINTS + 1) / (PROFILE_POINTS + 1)
    for _ in range(PROFILE_ROUNDS):
        todo = [e for e in ends if not e.hit and abs(e.far - e.near) > e.xtol]
        if not todo:
            break
        values = [e.near + (e.far - e.near) * inner for e in todo]
        for e, v, chi in zip(todo, values, _profile(fitter, base, todo, values)):
            _narrow(e, v, chi, target)
    out = [e.far if e.hit else _interpolate(e, best.chi2, threshold) for e in ends]
    return [(out[2 * i], out[2 * i + 1], ends[2 * i].hit, ends[2 * i + 1].hit) for i in range(len(params))]


def _interpolate(end: _End, chi_min: float, threshold: float) -> float:
    """The value inside `end`'s bracket where chi^2 reaches chi_min + threshold, linear in
    sqrt(chi^2 - chi_min)."""
    h_near, h_far = (math.sqrt(max(c - chi_min, 0.0)) for c in (end.chi_near, end.chi_far))
    frac = (math.sqrt(threshold) - h_near) / (h_far - h_near) if h_far > h_near else 1.0
    return end.near + (end.far - end.near) * min(max(frac, 0.0), 1.0)
