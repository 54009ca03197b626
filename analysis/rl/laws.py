"""Compute-performance laws for RL fine-tuning, fitted with honest uncertainty.

Laws (C = cumulative RL compute, R = held-out pass rate):
- ScaleRL sigmoid (Khatri et al. 2025): R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)
  (A = ceiling, B = efficiency, C_mid = compute at half the gain; R0 fixed to the measured
  start, or fitted);
- power-law baseline: R(C) = A - D / C^B;
- Gao et al. (2023, "Scaling laws for reward model overoptimization") reward-vs-KL forms,
  d = sqrt(KL): R - R0 = d (alpha - beta log d) ("log", their RL form, the one the RL report
  fits) and R - R0 = d (alpha - beta d) ("linear", their best-of-n form).

Why variable projection: both C-laws are *linear* in their level parameters (A, and R0 or D)
once the shape parameters (C_mid, B) are fixed. So the fitter grids the shape parameters
(as ScaleRL grids A and C_mid), solves the level parameters in closed form by bounded weighted
least squares at every grid point, then polishes the best grid points with
`scipy.optimize.least_squares`. That is global (no start-value luck) and cheap.

Uncertainty: 95% intervals by profile likelihood (chi^2 rise of 3.84, scaled by the reduced
chi^2 when it exceeds 1) or by a bootstrap over evaluation points. An interval that runs into a
parameter bound means the data cannot pin the parameter — that is what the `A_unbounded` and
`pre_midpoint` flags report, and why a flagged fit only states the gain per decade of compute.
Everything is float64 numpy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np
from scipy import optimize

from models.base.errors import AnalysisError

LAWS = ("sigmoid", "powerlaw")
CHI2_95 = 3.841458820694124  # chi^2_1 quantile at 0.95
A_MAX = 1.0  # a pass rate cannot exceed 1: the upper bound of the ceiling A
B_BOUNDS = (0.1, 12.0)
MID_SPAN = (1e-2, 1e3)  # C_mid searched in [C_lo * 1e-2, C_hi * 1e3]
MIN_POINTS = 4


# ---- the laws as plain functions ------------------------------------------------------------


def sigmoid(C: np.ndarray, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """ScaleRL's saturating curve; C = 0 gives R0."""
    C = np.asarray(C, np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        ratio = np.where(C > 0, (C_mid / np.where(C > 0, C, 1.0)) ** B, np.inf)
    return R0 + (A - R0) / (1.0 + ratio)


def power_law(C: np.ndarray, A: float, B: float, D: float) -> np.ndarray:
    """Baseline: R(C) = A - D / C^B (unbounded below as C -> 0)."""
    C = np.asarray(C, np.float64)
    return A - D * np.power(C, -B)


def gao_log(d: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Gao et al.'s RL form of the gain vs d = sqrt(KL): d (alpha - beta log d)."""
    d = np.asarray(d, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, d * (alpha - beta * np.log(np.where(d > 0, d, 1.0))), 0.0)


def gao_linear(d: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Gao et al.'s best-of-n form of the gain vs d = sqrt(KL): d (alpha - beta d)."""
    d = np.asarray(d, np.float64)
    return d * (alpha - beta * d)


# ---- data ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Points:
    """Evaluation points to fit: compute C (> 0), pass rate y and its standard error s."""

    C: np.ndarray
    y: np.ndarray
    s: np.ndarray
    s_known: bool = True  # False: no stderr given; the residual scatter sets the noise level

    @staticmethod
    def make(C: Sequence[float], y: Sequence[float], s: Sequence[float] | None = None) -> "Points":
        C = np.asarray(C, np.float64)
        y = np.asarray(y, np.float64)
        if C.shape != y.shape or C.ndim != 1:
            raise AnalysisError("compute and pass_rate must be 1-D and of equal length")
        if s is None:
            s = np.full_like(y, np.nan)
        s = np.asarray(s, np.float64)
        known = bool(np.any(np.isfinite(s) & (s > 0)))
        order = np.argsort(C, kind="stable")
        return Points(C[order], y[order], floor_stderr(s[order]), known)

    def __len__(self) -> int:
        return int(self.C.size)

    def take(self, mask: np.ndarray) -> "Points":
        return Points(self.C[mask], self.y[mask], self.s[mask], self.s_known)


def floor_stderr(s: np.ndarray) -> np.ndarray:
    """Missing stderr -> 1 (unweighted; the chi^2 scale then sets the noise level). A binomial
    stderr of 0 (pass rate 0 or 1) would give a point infinite weight, so stderrs are floored at
    a fifth of the median positive one."""
    s = np.asarray(s, np.float64).copy()
    ok = np.isfinite(s) & (s > 0)
    if not ok.any():
        return np.ones_like(s)
    floor = 0.2 * float(np.median(s[ok]))
    s[~np.isfinite(s)] = float(np.median(s[ok]))
    return np.maximum(s, floor)


# ---- separable least squares ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Law:
    """A law written as y = offset(nl) + X(nl) @ lin, with lin solved by bounded WLS.

    nl: shape parameters in an unconstrained-ish transformed space (logs), with box bounds;
    lin: level parameters with box bounds.
    """

    nl_names: tuple[str, ...]
    nl_bounds: tuple[tuple[float, float], ...]
    lin_names: tuple[str, ...]
    lin_bounds: tuple[tuple[float, float], ...]
    design: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    # design(C_N, nl_GxP) -> (offset_GxN, X_GxNxK)


def _sigmoid_law(C: np.ndarray, r0: float | None) -> _Law:
    pos = C[C > 0]
    lo, hi = math.log(pos.min() * MID_SPAN[0]), math.log(pos.max() * MID_SPAN[1])
    nl_bounds = ((lo, hi), (math.log(B_BOUNDS[0]), math.log(B_BOUNDS[1])))
    start = C <= 0  # the C = 0 evaluation: R0
    logC = np.log(np.where(start, 1.0, C))

    def shape(nl):
        z = np.exp(nl[:, 1:2]) * (nl[:, 0:1] - logC[None, :])  # B (log C_mid - log C)
        s = 1.0 / (1.0 + np.exp(np.clip(z, -700, 700)))  # s_GxN in (0, 1)
        return np.where(start[None, :], 0.0, s)

    if r0 is not None:

        def design(C_, nl):
            s = shape(nl)
            return r0 * (1.0 - s), s[:, :, None]

        return _Law(("log_C_mid", "log_B"), nl_bounds, ("A",), ((r0, A_MAX),), design)

    def design_free(C_, nl):
        s = shape(nl)
        return np.zeros_like(s), np.stack([1.0 - s, s], axis=-1)

    return _Law(("log_C_mid", "log_B"), nl_bounds, ("R0", "A"), ((0.0, 1.0), (0.0, A_MAX)), design_free)


def _power_law(C: np.ndarray) -> _Law:
    logC = np.log(C)

    def design(C_, nl):
        x = -np.exp(-np.exp(nl[:, 0:1]) * logC[None, :])  # -C^-B
        return np.zeros_like(x), np.stack([np.ones_like(x), x], axis=-1)

    return _Law(
        ("log_B",),
        ((math.log(0.02), math.log(B_BOUNDS[1])),),
        ("A", "D"),
        ((-1.0, A_MAX), (0.0, np.inf)),
        design,
    )


def _bounded_wls(offset, X, y, w, bounds, fixed: dict[int, float] | None = None):
    """Batched box-constrained weighted least squares for K <= 2 level parameters.

    offset_GxN, X_GxNxK, y_N, w_N (= 1/s^2). Returns (lin_GxK, chi2_G). Exact for K <= 2: the
    optimum is the unconstrained one if feasible, else lies on a face or a corner of the box.
    """
    G, N, K = X.shape
    lin = np.zeros((G, K))
    fixed = fixed or {}
    free = [k for k in range(K) if k not in fixed]
    r = y[None, :] - offset
    for k, v in fixed.items():
        lin[:, k] = v
        r = r - X[:, :, k] * v
    if not free:
        return lin, np.einsum("gn,n->g", r * r, w)
    Xf = X[:, :, free]
    lo = np.array([bounds[k][0] for k in free])
    hi = np.array([bounds[k][1] for k in free])

    def chi2_of(b_GxF):
        res = r - np.einsum("gnf,gf->gn", Xf, b_GxF)
        return np.einsum("gn,n->g", res * res, w)

    def solve_1d(xcol, rr):
        den = np.einsum("gn,n->g", xcol * xcol, w)
        return np.einsum("gn,n->g", xcol * rr, w) / np.maximum(den, 1e-300)

    if len(free) == 1:
        b = np.clip(solve_1d(Xf[:, :, 0], r), lo[0], hi[0])[:, None]
        lin[:, free[0]] = b[:, 0]
        return lin, chi2_of(b)
    # K_free == 2: unconstrained normal equations, then faces/corners if infeasible.
    XtW = Xf * w[None, :, None]
    M = np.einsum("gnf,gnh->gfh", XtW, Xf) + 1e-300 * np.eye(2)
    v = np.einsum("gnf,gn->gf", XtW, r)
    det = M[:, 0, 0] * M[:, 1, 1] - M[:, 0, 1] * M[:, 1, 0]
    safe = np.abs(det) > 1e-300
    det = np.where(safe, det, 1.0)
    b0 = (M[:, 1, 1] * v[:, 0] - M[:, 0, 1] * v[:, 1]) / det
    b1 = (M[:, 0, 0] * v[:, 1] - M[:, 1, 0] * v[:, 0]) / det
    cands = [np.stack([b0, b1], -1)]
    for j in range(2):  # faces: parameter j at a bound, the other solved and clipped
        o = 1 - j
        for bound in (lo[j], hi[j]):
            if not np.isfinite(bound):
                continue
            rr = r - Xf[:, :, j] * bound
            bo = np.clip(solve_1d(Xf[:, :, o], rr), lo[o], hi[o])
            c = np.empty((G, 2))
            c[:, j], c[:, o] = bound, bo
            cands.append(c)
    best_b, best = None, None
    for i, c in enumerate(cands):
        feasible = np.all((c >= lo - 1e-12) & (c <= hi + 1e-12), axis=1) & np.all(np.isfinite(c), 1)
        if i == 0:
            feasible &= safe
        chi = np.where(feasible, chi2_of(np.where(np.isfinite(c), c, 0.0)), np.inf)
        if best is None:
            best, best_b = chi, c.copy()
        else:
            better = chi < best
            best = np.where(better, chi, best)
            best_b[better] = c[better]
    for k_i, k in enumerate(free):
        lin[:, k] = best_b[:, k_i]
    return lin, best


@dataclasses.dataclass(frozen=True)
class _Solution:
    nl: np.ndarray
    lin: np.ndarray
    chi2: float


class _Fitter:
    """Global fit of one law to one set of points, and its profile likelihoods."""

    GRID = 48

    def __init__(self, law: _Law, pts: Points):
        self.law, self.pts = law, pts
        self.w = 1.0 / pts.s**2

    def _eval(self, nl_GxP, fixed_lin=None):
        off, X = self.law.design(self.pts.C, nl_GxP)
        return _bounded_wls(off, X, self.pts.y, self.w, self.law.lin_bounds, fixed_lin)

    def _grid(self, fixed_nl: dict[int, float]) -> np.ndarray:
        axes = []
        for p, (lo, hi) in enumerate(self.law.nl_bounds):
            axes.append(np.array([fixed_nl[p]]) if p in fixed_nl else np.linspace(lo, hi, self.GRID))
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=-1)

    def solve(
        self,
        fixed_nl: dict[int, float] | None = None,
        fixed_lin: dict[int, float] | None = None,
        n_starts: int = 3,
    ) -> _Solution:
        """Minimum chi^2 with some parameters held fixed: grid, then polish the best cells."""
        fixed_nl = fixed_nl or {}
        grid = self._grid(fixed_nl)
        lin, chi = self._eval(grid, fixed_lin)
        free = [p for p in range(len(self.law.nl_names)) if p not in fixed_nl]
        order = np.argsort(chi)
        best = _Solution(grid[order[0]], lin[order[0]], float(chi[order[0]]))
        if not free:
            return best
        lo = np.array([self.law.nl_bounds[p][0] for p in free])
        hi = np.array([self.law.nl_bounds[p][1] for p in free])
        sw = np.sqrt(self.w)

        def full(x):
            nl = grid[order[0]].copy()
            nl[free] = x
            return nl

        def resid(x):
            nl = full(x)[None, :]
            off, X = self.law.design(self.pts.C, nl)
            l, _ = _bounded_wls(off, X, self.pts.y, self.w, self.law.lin_bounds, fixed_lin)
            return (self.pts.y - off[0] - X[0] @ l[0]) * sw

        starts, seen = [], []
        for i in order[:50]:
            x0 = grid[i][free]
            if all(np.max(np.abs(x0 - s) / (hi - lo)) > 0.1 for s in seen):
                seen.append(x0)
                starts.append(x0)
            if len(starts) >= n_starts:
                break
        for x0 in starts:
            x0 = np.clip(x0, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
            try:
                r = optimize.least_squares(
                    resid,
                    x0,
                    bounds=(lo, hi),
                    method="trf",
                    x_scale="jac",
                    xtol=1e-10,
                    ftol=1e-12,
                    max_nfev=400,
                )
            except (ValueError, np.linalg.LinAlgError):
                continue
            chi = float(r.fun @ r.fun)
            if np.isfinite(chi) and chi < best.chi2:
                nl = full(r.x)
                l, _ = self._eval(nl[None, :], fixed_lin)
                best = _Solution(nl, l[0], chi)
        return best


# ---- results -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fit:
    """One fitted law: parameters, 95% intervals, goodness of fit and identifiability flags."""

    law: str
    params: dict[str, float | None]
    ci: dict[str, list[float]]
    flags: tuple[str, ...]
    chi2: float
    dof: int
    n_points: int
    fit_range: tuple[float, float]
    ci_method: str
    bounds: dict[str, list[float]]

    def predict(self, C) -> np.ndarray:
        p = self.params
        if self.law == "sigmoid":
            return sigmoid(C, p["A"], p["B"], p["C_mid"], p["R0"])
        return power_law(C, p["A"], p["B"], p["D"])

    @property
    def identified(self) -> bool:
        return not self.flags


def _to_params(law_name: str, law: _Law, sol: _Solution, r0: float | None) -> dict[str, float | None]:
    named = dict(zip(law.lin_names, map(float, sol.lin)))
    nl = dict(zip(law.nl_names, map(float, sol.nl)))
    if law_name == "sigmoid":
        return {
            "A": named["A"],
            "B": math.exp(nl["log_B"]),
            "C_mid": math.exp(nl["log_C_mid"]),
            "R0": named.get("R0", r0),
        }
    return {"A": named["A"], "B": math.exp(nl["log_B"]), "C_mid": None, "D": named["D"], "R0": r0}


def _profile_ci(
    fitter: _Fitter, best: _Solution, kind: str, index: int, threshold: float
) -> tuple[float, float, bool, bool]:
    """95% profile interval of one parameter (in fit space). Returns (lo, hi, lo_hit, hi_hit):
    *_hit = the chi^2 never rose by `threshold` before the parameter bound."""
    if kind == "lin":
        lo_b, hi_b = fitter.law.lin_bounds[index]
        x_hat = float(best.lin[index])
        prof = lambda v: fitter.solve(fixed_lin={index: v}, n_starts=1).chi2  # noqa: E731
    else:
        lo_b, hi_b = fitter.law.nl_bounds[index]
        x_hat = float(best.nl[index])
        prof = lambda v: fitter.solve(fixed_nl={index: v}, n_starts=1).chi2  # noqa: E731
    target = best.chi2 + threshold
    out = []
    for bound in (lo_b, hi_b):
        if not np.isfinite(bound):
            bound = x_hat + (10.0 if bound > x_hat else -10.0) * max(1.0, abs(x_hat))
        if abs(bound - x_hat) < 1e-12 or prof(bound) < target:
            out.append((bound, True))
            continue
        # chi2(x_hat) < target <= chi2(bound): Brent's root of the profile's rise.
        root = optimize.brentq(
            lambda v: prof(v) - target, x_hat, bound, xtol=1e-4 * max(1.0, abs(x_hat)), maxiter=40
        )
        out.append((float(root), False))
    (lo, lo_hit), (hi, hi_hit) = out
    return lo, hi, lo_hit, hi_hit


def fit_law(
    pts: Points,
    law: str = "sigmoid",
    r0: float | None = None,
    ci_method: str = "profile",
    n_boot: int = 200,
    seed: int = 0,
) -> Fit:
    """Fit `law` to `pts` and attach 95% intervals + flags.

    `pts` are the points past the burn-in, plus (sigmoid only) optionally the start evaluation at
    C = 0, which then anchors a fitted R0 with its own standard error. r0: a value to fix R0 to
    (ScaleRL's choice; its noise is then not propagated); None fits R0.
    """
    if law not in LAWS:
        raise AnalysisError(f"unknown law {law!r}; choose one of {', '.join(LAWS)}")
    if ci_method not in ("profile", "bootstrap"):
        raise AnalysisError(f"unknown CI method {ci_method!r}; choose profile or bootstrap")
    if not (np.all(np.isfinite(pts.C)) and np.all(np.isfinite(pts.y))):
        raise AnalysisError("compute and pass_rate must be finite numbers (found NaN/inf)")
    if np.any(pts.C < 0) or (law == "powerlaw" and np.any(pts.C <= 0)):
        raise AnalysisError("compute must be >= 0 (and > 0 for the power law, which diverges at C = 0)")
    if np.any((pts.y < 0) | (pts.y > 1)):
        raise AnalysisError("pass_rate must lie in [0, 1]")
    n_lin = 1 if (law == "sigmoid" and r0 is not None) else 2
    n_par = n_lin + (2 if law == "sigmoid" else 1)
    if len(pts) < max(MIN_POINTS, n_par + 1):
        raise AnalysisError(
            f"need at least {max(MIN_POINTS, n_par + 1)} evaluation points after "
            f"the burn-in to fit the {law} law (got {len(pts)}); lower --burn-in"
        )
    if len(np.unique(pts.C)) < n_par:
        raise AnalysisError("need evaluation points at several distinct compute values")
    spec = _sigmoid_law(pts.C, r0) if law == "sigmoid" else _power_law(pts.C)
    fitter = _Fitter(spec, pts)
    best = fitter.solve(n_starts=4)
    dof = max(1, len(pts) - n_par)
    scale = max(1.0, best.chi2 / dof) if pts.s_known else best.chi2 / dof
    params = _to_params(law, spec, best, r0)
    bounds = _param_bounds(law, spec)
    hits: dict[str, tuple[bool, bool]] = {}
    if ci_method == "profile":
        ci = {}
        for name in ("A", "B", "C_mid"):
            if name == "C_mid" and law != "sigmoid":
                continue
            kind, idx = _locate(spec, name)
            lo, hi, lo_hit, hi_hit = _profile_ci(fitter, best, kind, idx, CHI2_95 * scale)
            ci[name] = _from_fit_space(name, lo, hi)
            hits[name] = (lo_hit, hi_hit)
    else:
        ci, hits = _bootstrap_ci(law, spec, pts, r0, best, n_boot, seed, bounds)
    flags = _flags(law, params, ci, hits, pts, bounds)
    return Fit(
        law=law,
        params=params,
        ci=ci,
        flags=tuple(flags),
        chi2=best.chi2,
        dof=dof,
        n_points=len(pts),
        fit_range=(float(pts.C[pts.C > 0].min()), float(pts.C.max())),
        ci_method=ci_method,
        bounds=bounds,
    )


def _locate(spec: _Law, name: str) -> tuple[str, int]:
    if name in spec.lin_names:
        return "lin", spec.lin_names.index(name)
    return "nl", spec.nl_names.index({"B": "log_B", "C_mid": "log_C_mid"}[name])


def _from_fit_space(name: str, lo: float, hi: float) -> list[float]:
    if name in ("B", "C_mid"):
        return [math.exp(lo), math.exp(hi)]
    return [float(lo), float(hi)]


def _param_bounds(law: str, spec: _Law) -> dict[str, list[float]]:
    out = {n: [float(b[0]), float(b[1])] for n, b in zip(spec.lin_names, spec.lin_bounds)}
    for n, b in zip(spec.nl_names, spec.nl_bounds):
        out[n.replace("log_", "")] = [math.exp(b[0]), math.exp(b[1])]
    return out


def _bootstrap_ci(law, spec, pts, r0, best, n_boot, seed, bounds):
    """Percentile intervals from refits on evaluation points resampled with replacement."""
    rng = np.random.default_rng(seed)
    draws = {"A": [], "B": [], "C_mid": []}
    n = len(pts)
    for _ in range(n_boot):
        idx = np.sort(rng.integers(0, n, n))
        sub = Points(pts.C[idx], pts.y[idx], pts.s[idx], pts.s_known)
        if len(np.unique(sub.C)) < 3:
            continue
        sol = _Fitter(spec, sub).solve(n_starts=1)
        p = _to_params(law, spec, sol, r0)
        for k in draws:
            if p.get(k) is not None:
                draws[k].append(p[k])
    ci, hits = {}, {}
    for k, v in draws.items():
        if not v:
            continue
        v = np.asarray(v)
        lo, hi = np.quantile(v, [0.025, 0.975])
        ci[k] = [float(lo), float(hi)]
        blo, bhi = bounds[k]
        near = lambda x, b: abs(x - b) <= 1e-3 * max(1.0, abs(b))  # noqa: E731
        hits[k] = (near(lo, blo), near(hi, bhi))
    return ci, hits


def _flags(law, params, ci, hits, pts, bounds) -> list[str]:
    flags = []
    if law == "sigmoid":
        end = float(pts.C.max())
        # Pre-midpoint unless the data reach 1.5x every C_mid the 95% interval allows.
        c_mid_hi = ci.get("C_mid", [None, params["C_mid"]])[1]
        if end < 1.5 * max(params["C_mid"], c_mid_hi) or hits.get("C_mid", (False, False))[1]:
            flags.append("pre_midpoint")
    a_hi = ci.get("A", [None, None])[1]
    if hits.get("A", (False, False))[1] or (a_hi is not None and a_hi >= bounds["A"][1] - 1e-3):
        flags.append("A_unbounded")
    if falling_at_end(pts):
        flags.append("unstable")
    return flags


def falling_at_end(pts: Points, tail_frac: float = 0.25, min_drop: float = 0.02) -> bool:
    """True when the pass rate over the last `tail_frac` of the points falls significantly:
    the weighted linear trend over the tail loses more than `min_drop` and more than two of its
    standard errors."""
    n_tail = max(4, int(round(tail_frac * len(pts))))
    if len(pts) < n_tail + 2:
        return False
    t = pts.take(np.arange(len(pts)) >= len(pts) - n_tail)
    slope, se = _wls_slope(t.C, t.y, t.s, t.s_known)
    drop = -slope * float(t.C.max() - t.C.min())
    return drop > min_drop and drop > 2.0 * se * float(t.C.max() - t.C.min())


def _wls_slope(x, y, s, s_known: bool = True) -> tuple[float, float]:
    """Weighted linear regression y ~ a + b x: (b, stderr of b), stderr scaled by reduced chi^2."""
    w = 1.0 / np.asarray(s) ** 2
    X = np.stack([np.ones_like(x), x], -1)
    M = X.T @ (X * w[:, None])
    try:
        cov = np.linalg.inv(M)
    except np.linalg.LinAlgError:
        return 0.0, float("inf")
    beta = cov @ (X.T @ (w * y))
    res = y - X @ beta
    dof = max(1, len(x) - 2)
    chi2 = float(res @ (w * res))
    scale = max(1.0, chi2 / dof) if s_known else chi2 / dof
    return float(beta[1]), float(math.sqrt(cov[1, 1] * scale))


def gain_per_decade(pts: Points) -> dict[str, float]:
    """Pass-rate gain per 10x compute over the observed window (what a flagged fit reports
    instead of a ceiling): weighted slope of pass rate against log10(C)."""
    pts = pts.take(pts.C > 0)
    if len(pts) < 3:
        raise AnalysisError("need at least 3 evaluation points for the gain per decade")
    slope, se = _wls_slope(np.log10(pts.C), pts.y, pts.s, pts.s_known)
    return {"value": slope, "stderr": se, "C_lo": float(pts.C.min()), "C_hi": float(pts.C.max())}


# ---- reward vs KL (Gao et al.) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GaoFit:
    """gain(d) = d (alpha - beta log d) ("log": RL form) or d (alpha - beta d) ("linear":
    best-of-n form), d = sqrt(KL)."""

    form: str
    alpha: float
    beta: float
    alpha_se: float
    beta_se: float
    d_peak: float | None  # d where the fitted gain peaks (None if it never turns over)

    def predict(self, d) -> np.ndarray:
        fn = gao_log if self.form == "log" else gao_linear
        return fn(d, self.alpha, self.beta)


def fit_gao(
    kl: Sequence[float], gain: Sequence[float], form: str = "log", stderr: Sequence[float] | None = None
) -> GaoFit:
    """Weighted linear least squares for Gao et al.'s forms, "log" (RL) or "linear" (best-of-n);
    both are linear in alpha, beta."""
    if form not in ("log", "linear"):
        raise AnalysisError(f"unknown Gao form {form!r}; choose log or linear")
    kl = np.asarray(kl, np.float64)
    g = np.asarray(gain, np.float64)
    keep = np.isfinite(kl) & np.isfinite(g) & (kl > 0)
    if keep.sum() < 3:
        raise AnalysisError("need at least 3 points with KL > 0 to fit a reward-vs-KL law")
    d = np.sqrt(kl[keep])
    s = floor_stderr(np.full(d.shape, np.nan) if stderr is None else np.asarray(stderr)[keep])
    X = np.stack([d, -d * (np.log(d) if form == "log" else d)], -1)
    w = 1.0 / s**2
    M = X.T @ (X * w[:, None])
    cov = np.linalg.pinv(M)
    beta_v = cov @ (X.T @ (w * g[keep]))
    res = g[keep] - X @ beta_v
    scale = (
        max(1.0, float(res @ (w * res)) / max(1, d.size - 2))
        if stderr is not None
        else float(res @ (w * res)) / max(1, d.size - 2)
    )
    se = np.sqrt(np.maximum(np.diag(cov) * scale, 0.0))
    a, b = float(beta_v[0]), float(beta_v[1])
    peak = None
    if b > 0:
        peak = math.exp(a / b - 1.0) if form == "log" else a / (2.0 * b)
    return GaoFit(form, a, b, float(se[0]), float(se[1]), peak)


def fit_params(
    pts: Points, law: str = "sigmoid", r0: float | None = None, n_starts: int = 2
) -> dict[str, float | None]:
    """Best-fit parameters only (no intervals, no flags): for bootstrap bands and refits."""
    spec = _sigmoid_law(pts.C, r0) if law == "sigmoid" else _power_law(pts.C[pts.C > 0])
    if law != "sigmoid":
        pts = pts.take(pts.C > 0)
    sol = _Fitter(spec, pts).solve(n_starts=n_starts)
    return _to_params(law, spec, sol, r0)


def predict(law: str, params: dict[str, float | None], C) -> np.ndarray:
    """Evaluate a fitted law's parameters at compute C."""
    if law == "sigmoid":
        return sigmoid(C, params["A"], params["B"], params["C_mid"], params["R0"])
    return power_law(C, params["A"], params["B"], params["D"])
