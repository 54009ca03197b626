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
once the shape parameters (C_mid, B) are fixed. So chi^2 is minimised over the shape parameters
alone, the level parameters solved in closed form by bounded weighted least squares inside the
objective: a grid of the shape parameters (as ScaleRL grids A and C_mid), then the best grid
cells polished by the shared multi-start L-BFGS (`analysis.rl.varpro`, on
`analysis.core.lbfgs.minimize_batch`). That is global (no start-value luck) and cheap.

Uncertainty: 95% intervals by profile likelihood (chi^2 rise of 3.84, scaled by the reduced
chi^2 when it exceeds 1) or by a bootstrap over evaluation points. An interval that runs into a
parameter bound means the data cannot pin the parameter — that is what the `A_unbounded` and
`pre_midpoint` flags report, and why a flagged fit only states the gain per decade of compute.
Everything is float64.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from analysis.core import validation
from analysis.core.validation import bootstrap_counts
from analysis.rl.varpro import (
    Fitter,
    LawSpec,
    RLLaw,
    Solution,
    powerlaw_spec,
    profile_intervals,
    sigmoid_spec,
)
from models.base.errors import AnalysisError

LAWS = tuple(RLLaw)  # the strings "sigmoid", "powerlaw"
CHI2_95 = 3.841458820694124  # chi^2_1 quantile at 0.95
MIN_POINTS = 4
MAIN_STARTS = 4  # distinct grid cells the main fit polishes (profile points and resamples: 1)


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
class RLPoints:
    """Evaluation points to fit: compute C (> 0), pass rate y and its standard error s."""

    C: np.ndarray
    y: np.ndarray
    s: np.ndarray
    s_known: bool = True  # False: no stderr given; the residual scatter sets the noise level

    @staticmethod
    def make(C: Sequence[float], y: Sequence[float], s: Sequence[float] | None = None) -> "RLPoints":
        C = np.asarray(C, np.float64)
        y = np.asarray(y, np.float64)
        if C.shape != y.shape or C.ndim != 1:
            raise AnalysisError("compute and pass_rate must be 1-D and of equal length")
        if s is None:
            s = np.full_like(y, np.nan)
        s = np.asarray(s, np.float64)
        known = bool(np.any(np.isfinite(s) & (s > 0)))
        order = np.argsort(C, kind="stable")
        return RLPoints(C[order], y[order], floor_stderr(s[order]), known)

    def __len__(self) -> int:
        return int(self.C.size)

    def take(self, mask: np.ndarray) -> "RLPoints":
        return RLPoints(self.C[mask], self.y[mask], self.s[mask], self.s_known)


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


def _to_params(law: str, spec: LawSpec, sol: Solution, r0: float | None) -> dict[str, float | None]:
    named = dict(zip(spec.lin_names, map(float, sol.lin)))
    nl = dict(zip(spec.nl_names, map(float, sol.nl)))
    if law == RLLaw.SIGMOID:
        return {
            "A": named["A"],
            "B": math.exp(nl["log_B"]),
            "C_mid": math.exp(nl["log_C_mid"]),
            "R0": named["R0"] if r0 is None else r0,
        }
    return {"A": named["A"], "B": math.exp(nl["log_B"]), "C_mid": None, "D": named["D"], "R0": r0}


def _spec(law: str, pts: RLPoints, r0: float | None) -> LawSpec:
    return sigmoid_spec(pts.C, r0) if law == RLLaw.SIGMOID else powerlaw_spec()


def _check(pts: RLPoints, law: str, r0: float | None, ci_method: str) -> int:
    """One-line errors for inputs the fit cannot take; returns the number of fitted parameters."""
    if law not in LAWS:
        raise AnalysisError(f"unknown law {law!r}; choose one of {', '.join(LAWS)}")
    if ci_method not in ("profile", "bootstrap"):
        raise AnalysisError(f"unknown CI method {ci_method!r}; choose profile or bootstrap")
    if not (np.all(np.isfinite(pts.C)) and np.all(np.isfinite(pts.y))):
        raise AnalysisError("compute and pass_rate must be finite numbers (found NaN/inf)")
    if np.any(pts.C < 0) or (law == RLLaw.POWERLAW and np.any(pts.C <= 0)):
        raise AnalysisError("compute must be >= 0 (and > 0 for the power law, which diverges at C = 0)")
    if np.any((pts.y < 0) | (pts.y > 1)):
        raise AnalysisError("pass_rate must lie in [0, 1]")
    n_lin = 1 if (law == RLLaw.SIGMOID and r0 is not None) else 2
    n_par = n_lin + (2 if law == RLLaw.SIGMOID else 1)
    if len(pts) < max(MIN_POINTS, n_par + 1):
        raise AnalysisError(
            f"need at least {max(MIN_POINTS, n_par + 1)} evaluation points after "
            f"the burn-in to fit the {law} law (got {len(pts)}); lower --burn-in"
        )
    if len(np.unique(pts.C)) < n_par:
        raise AnalysisError("need evaluation points at several distinct compute values")
    return n_par


def fit_rl_law(
    pts: RLPoints,
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
    n_par = _check(pts, law, r0, ci_method)
    spec = _spec(law, pts, r0)
    fitter = Fitter(spec, pts.C, pts.y, pts.s)
    best = fitter.solve([fitter.base(n_starts=MAIN_STARTS)])[0]
    dof = max(1, len(pts) - n_par)
    scale = max(1.0, best.chi2 / dof) if pts.s_known else best.chi2 / dof
    params = _to_params(law, spec, best, r0)
    bounds = _param_bounds(spec)
    names = [n for n in ("A", "B", "C_mid") if n != "C_mid" or law == RLLaw.SIGMOID]
    if ci_method == "profile":
        ends = profile_intervals(fitter, best, [_locate(spec, n) for n in names], CHI2_95 * scale)
        ci = {n: _from_fit_space(n, lo, hi) for n, (lo, hi, _, _) in zip(names, ends)}
        hits = {n: (lo_hit, hi_hit) for n, (_, _, lo_hit, hi_hit) in zip(names, ends)}
    else:
        ci, hits = _bootstrap_ci(law, spec, pts, r0, n_boot, seed, bounds)
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


def _locate(spec: LawSpec, name: str) -> tuple[str, int]:
    if name in spec.lin_names:
        return "lin", spec.lin_names.index(name)
    return "nl", spec.nl_names.index({"B": "log_B", "C_mid": "log_C_mid"}[name])


def _from_fit_space(name: str, lo: float, hi: float) -> list[float]:
    if name in ("B", "C_mid"):
        return [math.exp(lo), math.exp(hi)]
    return [float(lo), float(hi)]


def _param_bounds(spec: LawSpec) -> dict[str, list[float]]:
    """Public bounds of the fitted parameters (a level parameter held fixed has none)."""
    out = {n: [float(lo), float(hi)] for n, (lo, hi) in zip(spec.lin_names, spec.lin_bounds) if hi > lo}
    for n, b in zip(spec.nl_names, spec.nl_bounds):
        out[n.replace("log_", "")] = [math.exp(b[0]), math.exp(b[1])]
    return out


def _bootstrap_ci(law, spec, pts, r0, n_boot, seed, bounds):
    """Percentile intervals from refits on evaluation points resampled with replacement (the
    resampling counts of the point-law bootstrap, as point weights), all in one batched run."""
    counts = bootstrap_counts(len(pts), n_boot, seed)
    counts = counts[[len(np.unique(pts.C[c > 0])) >= 3 for c in counts]]
    draws: dict[str, list[float]] = {"A": [], "B": [], "C_mid": []}
    if len(counts):
        fitter = Fitter(spec, pts.C, pts.y, pts.s, counts)
        for sol in fitter.solve([fitter.base(row=r) for r in range(len(counts))]):
            p = _to_params(law, spec, sol, r0)
            for k in draws:
                if p.get(k) is not None:
                    draws[k].append(p[k])
    ci, hits = {}, {}
    for k, v in draws.items():
        if not v:
            continue
        lo, hi = validation.percentile_bounds(v, 0.95)
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


def falling_at_end(pts: RLPoints, tail_frac: float = 0.25, min_drop: float = 0.02) -> bool:
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


def gain_per_decade(pts: RLPoints) -> dict[str, float]:
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
    pts: RLPoints, law: str = "sigmoid", r0: float | None = None, n_starts: int = 2
) -> dict[str, float | None]:
    """Best-fit parameters only (no intervals, no flags): for bootstrap bands and refits."""
    if law != RLLaw.SIGMOID:
        pts = pts.take(pts.C > 0)
    spec = _spec(law, pts, r0)
    fitter = Fitter(spec, pts.C, pts.y, pts.s)
    return _to_params(law, spec, fitter.solve([fitter.base(n_starts=n_starts)])[0], r0)


def predict(law: str, params: dict[str, float | None], C) -> np.ndarray:
    """Evaluate a fitted law's parameters at compute C."""
    if law == "sigmoid":
        return sigmoid(C, params["A"], params["B"], params["C_mid"], params["R0"])
    return power_law(C, params["A"], params["B"], params["D"])
