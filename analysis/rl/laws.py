"""Compute-performance laws for RL fine-tuning, fitted with honest uncertainty.

Laws (C = cumulative RL compute, R = held-out pass rate):
- ScaleRL sigmoid (Khatri et al. 2025): R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)
  (A = ceiling, B = efficiency, C_mid = compute at half the gain; R0 fixed to the measured
  start, or fitted), the law `fit-rl` fits;
- Gao et al. (2023, "Scaling laws for reward model overoptimization") reward-vs-KL forms,
  d = sqrt(KL): R - R0 = d (alpha - beta log d) ("log", their RL form, the one the RL report
  fits) and R - R0 = d (alpha - beta d) ("linear", their best-of-n form).

Why variable projection: the sigmoid is *linear* in its level parameters (A and R0) once the
shape parameters (C_mid, B) are fixed. So chi^2 is minimised over the shape parameters
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
from analysis.rl.varpro import Fitter, LawSpec, Solution, profile_intervals, sigmoid_spec
from models.base.errors import AnalysisError

LAW = "sigmoid"  # the one compute-performance law (`fit-rl --law`)
PARAMS = ("A", "B", "C_mid", "R0")
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
class SigmoidFit:
    """One fitted sigmoid: parameters, 95% intervals, goodness of fit and identifiability flags."""

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
        return predict(self.params, C)


def _to_params(spec: LawSpec, sol: Solution, r0: float | None) -> dict[str, float]:
    named = dict(zip(spec.lin_names, map(float, sol.lin)))
    nl = dict(zip(spec.nl_names, map(float, sol.nl)))
    R0 = named["R0"] if r0 is None else r0
    return {"A": named["A"], "B": math.exp(nl["log_B"]), "C_mid": math.exp(nl["log_C_mid"]), "R0": R0}


def _check(pts: RLPoints, r0: float | None, ci_method: str) -> int:
    """One-line errors for inputs the fit cannot take; returns the number of fitted parameters."""
    if ci_method not in ("profile", "bootstrap"):
        raise AnalysisError(f"unknown CI method {ci_method!r}; choose profile or bootstrap")
    if not (np.all(np.isfinite(pts.C)) and np.all(np.isfinite(pts.y))):
        raise AnalysisError("compute and pass_rate must be finite numbers (found NaN/inf)")
    if np.any(pts.C < 0):
        raise AnalysisError("compute must be >= 0")
    if np.any((pts.y < 0) | (pts.y > 1)):
        raise AnalysisError("pass_rate must lie in [0, 1]")
    n_par = 3 if r0 is not None else 4
    if len(pts) < max(MIN_POINTS, n_par + 1):
        raise AnalysisError(
            f"need at least {max(MIN_POINTS, n_par + 1)} evaluation points after "
            f"the burn-in to fit the {LAW} law (got {len(pts)}); lower --burn-in"
        )
    if len(np.unique(pts.C)) < n_par:
        raise AnalysisError("need evaluation points at several distinct compute values")
    return n_par


def fit_rl_law(
    pts: RLPoints, r0: float | None = None, ci_method: str = "profile", n_boot: int = 200, seed: int = 0
) -> SigmoidFit:
    """Fit the sigmoid to `pts` and attach 95% intervals + flags.

    `pts` are the points past the burn-in, plus optionally the start evaluation at C = 0, which
    then anchors a fitted R0 with its own standard error. r0: a value to fix R0 to (ScaleRL's
    choice; its noise is then not propagated); None fits R0.
    """
    n_par = _check(pts, r0, ci_method)
    spec = sigmoid_spec(pts.C, r0)
    fitter = Fitter(spec, pts.C, pts.y, pts.s)
    best = fitter.solve([fitter.base(n_starts=MAIN_STARTS)])[0]
    dof = max(1, len(pts) - n_par)
    scale = max(1.0, best.chi2 / dof) if pts.s_known else best.chi2 / dof
    params = _to_params(spec, best, r0)
    bounds = _param_bounds(spec)
    names = ("A", "B", "C_mid")
    if ci_method == "profile":
        ends = profile_intervals(fitter, best, [_locate(spec, n) for n in names], CHI2_95 * scale)
        ci = {n: _from_fit_space(n, lo, hi) for n, (lo, hi, _, _) in zip(names, ends)}
        hits = {n: (lo_hit, hi_hit) for n, (_, _, lo_hit, hi_hit) in zip(names, ends)}
    else:
        ci, hits = _bootstrap_ci(bootstrap_params(pts, r0, n_boot, seed), bounds)
    return SigmoidFit(
        law=LAW,
        params=params,
        ci=ci,
        flags=tuple(_flags(params, ci, hits, pts, bounds)),
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


def bootstrap_params(pts: RLPoints, r0: float | None = None, n_boot: int = 200, seed: int = 0) -> np.ndarray:
    """(S, 4) parameter rows (`PARAMS`: A, B, C_mid, R0) refitted on evaluation points resampled
    with replacement (the point-law bootstrap's resampling counts, as point weights; a resample
    with fewer than 3 distinct positive computes is dropped), all in one batched run."""
    counts = bootstrap_counts(len(pts), n_boot, seed)
    counts = counts[[len(np.unique(pts.C[c > 0])) >= 3 for c in counts]]
    if not len(counts):
        return np.zeros((0, len(PARAMS)))
    spec = sigmoid_spec(pts.C, r0)
    fitter = Fitter(spec, pts.C, pts.y, pts.s, counts)
    sols = fitter.solve([fitter.base(row=r) for r in range(len(counts))])
    return np.array([[_to_params(spec, sol, r0)[k] for k in PARAMS] for sol in sols])


def _bootstrap_ci(rows: np.ndarray, bounds: dict[str, list[float]]):
    """Percentile 95% intervals of A, B, C_mid from bootstrap rows, and whether each end sits on its
    parameter's bound."""
    ci, hits = {}, {}
    near = lambda x, b: abs(x - b) <= 1e-3 * max(1.0, abs(b))  # noqa: E731
    for j, k in enumerate(PARAMS[:3]):
        if not len(rows):
            continue
        lo, hi = validation.percentile_bounds(rows[:, j], 0.95)
        ci[k] = [float(lo), float(hi)]
        hits[k] = (near(lo, bounds[k][0]), near(hi, bounds[k][1]))
    return ci, hits


def _flags(params, ci, hits, pts, bounds) -> list[str]:
    flags = []
    # Pre-midpoint unless the data reach 1.5x every C_mid the 95% interval allows.
    c_mid_hi = ci.get("C_mid", [None, params["C_mid"]])[1]
    if float(pts.C.max()) < 1.5 * max(params["C_mid"], c_mid_hi) or hits.get("C_mid", (False, False))[1]:
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


def predict(params: dict[str, float], C) -> np.ndarray:
    """A fitted sigmoid's pass rate at compute C."""
    return sigmoid(C, *(params[k] for k in PARAMS))


def band(rows: np.ndarray, C, level: float = validation.PREDICTION_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise central `level` band at compute C of the sigmoids of parameter rows (`PARAMS`
    columns, e.g. `bootstrap_params`); NaN without rows."""
    C = np.atleast_1d(np.asarray(C, np.float64))
    if not len(rows):
        return np.full(C.shape, np.nan), np.full(C.shape, np.nan)
    lo, hi = validation.percentile_interval(sigmoid(C[None, :], *(rows[:, [j]] for j in range(4))), level)
    return lo, hi
