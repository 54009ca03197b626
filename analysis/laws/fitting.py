"""Fitting a point law: Huber loss of log residuals, multi-start L-BFGS, bootstrap CIs.

The objective is `sum_i w_i * Huber_delta(log y_i - log f(x_i; theta))` with delta = 1e-3,
*summed* (not averaged) over points, as Besiroglu et al. (2024) showed is needed: a mean-scaled
Huber loss is so flat that optimisers stop early (the original Chinchilla fit did).

Search: L-BFGS from every point of the law's start grid, all starts vectorised
(`analysis.laws.lbfgs.minimize_batch`). For big searches (`precision="auto"`, e.g. the
4,500-start Chinchilla grid; or `"mixed"`) every start first runs to convergence in float32
(about 3x cheaper on CPU), then the starts whose float32 optimum is within 1% of the best are
polished in float64, which is needed to resolve the optimum to the digits of the published
reference. `precision="float64"` runs every start in float64 instead.

The convergence report says how many starts reached the best objective (within a relative 1e-6)
and how the best one stopped; `converged` is true when the best start met a convergence test and
at least two starts agree on the optimum.

Uncertainty: case-resampling bootstrap over points (runs), seeded, vectorised like the grid:
every resample starts from the full-data optimum and two more points (other local optima found
on the full data, else random grid starts), all resamples in one batched run. CIs are percentile intervals.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from analysis.laws import holdout, intervals
from analysis.laws import points as data_mod
from analysis.laws.allocation import allocation, supports_allocation
from analysis.laws.lbfgs import CONVERGED_CODES, STATUS_NAMES, LBFGSConfig, minimize_batch
from analysis.laws.registry import Law, bound_notes, get_law
from models.base import jsonio
from models.base.errors import AnalysisError

HUBER_DELTA = 1e-3
OPTIMUM_RTOL = 1e-6  # a start "reached the optimum" when its objective is this close to the best
_CFG32 = LBFGSConfig(ftol=1e-9, gtol=0.0, max_evals=1500)
_CFG64 = LBFGSConfig(max_evals=2000)
MIXED_MIN_WORK = 200_000  # starts x points above which precision="auto" adds the float32 search


def huber(r, delta: float):
    """Huber loss: quadratic for |r| <= delta, linear beyond (scipy.special.huber's convention)."""
    a = jnp.abs(r)
    return jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


@lru_cache(maxsize=None)
def objective_fn(law: Law, free_idx: tuple[int, ...], delta: float):
    """The (hashable, so jit-cacheable) objective of `law` over its free internal parameters.

    Signature: f(theta_free, theta_full, logX, logy, w) -> scalar, where `theta_full` supplies
    the fixed parameters.
    """
    idx = np.asarray(free_idx, dtype=np.int32)  # numpy, not jnp: this cached closure is traced
    # under both x64 settings, and a jnp array made under x64 would be int64 in the float32 pass

    def f(theta_free, theta_full, logX, logy, w):
        theta = theta_full.astype(theta_free.dtype).at[idx].set(theta_free)
        r = logy - law.log_predict(theta, logX)
        return jnp.sum(w * huber(r, delta))

    return f


@dataclass(frozen=True)
class Problem:
    """Everything the optimiser needs: a law, which parameters are free, and log-space data."""

    law: Law
    free_idx: tuple[int, ...]
    theta_full: np.ndarray  # internal values; entries at free_idx are placeholders
    logX: tuple[np.ndarray, ...]
    logy: np.ndarray
    w: np.ndarray
    delta: float = HUBER_DELTA

    @property
    def fun(self):
        return objective_fn(self.law, self.free_idx, self.delta)

    @property
    def padded_n(self) -> int:
        """Points are padded (weight 0) to a size from a short ladder, so that fits of different
        datasets reuse one compiled optimiser instead of compiling for every point count."""
        n = self.logy.shape[0]
        return max(32, 1 << (n - 1).bit_length()) if n <= 256 else -(-n // 256) * 256

    def pad(self, v: np.ndarray) -> np.ndarray:
        """Pad the last axis to `padded_n` by repeating the first point (its weight is padded 0)."""
        extra = self.padded_n - v.shape[-1]
        return np.concatenate([v, np.repeat(v[..., :1], extra, axis=-1)], axis=-1) if extra else v

    def pad_weights(self, w: np.ndarray) -> np.ndarray:
        extra = self.padded_n - w.shape[-1]
        return np.concatenate([w, np.zeros(w.shape[:-1] + (extra,))], axis=-1) if extra else w

    def args(self, dtype) -> tuple:
        return (
            jnp.asarray(self.theta_full, dtype),
            tuple(jnp.asarray(self.pad(v), dtype) for v in self.logX),
            jnp.asarray(self.pad(self.logy), dtype),
            jnp.asarray(self.pad_weights(self.w), dtype),
        )

    def full(self, theta_free_xF: np.ndarray) -> np.ndarray:
        out = np.broadcast_to(self.theta_full, theta_free_xF.shape[:-1] + self.theta_full.shape).copy()
        out[..., list(self.free_idx)] = theta_free_xF
        return out


@dataclass(frozen=True)
class MultiStart:
    """Convergence report of a multi-start search."""

    theta: np.ndarray  # best internal parameters (full vector)
    objective: float
    grad_norm: float
    status: str
    converged: bool
    n_starts: int
    n_polished: int
    starts_at_optimum: int
    local_optima: np.ndarray  # internal free-parameter endpoints of distinct other minima, best first


def _flat_args(prob: Problem, dtype):
    theta_full, logX, logy, w = prob.args(dtype)
    return (theta_full, logX, logy, w)


def _run64(prob: Problem, x0_SxF: np.ndarray, w_SxN: np.ndarray):
    """Float64 L-BFGS with per-start weights (the point fit's are the same row for every start)."""
    with jax.enable_x64(True):
        theta_full, logX, logy, _ = prob.args(jnp.float64)
        return minimize_batch(
            prob.fun,
            x0_SxF,
            (theta_full, logX, logy, jnp.asarray(prob.pad_weights(np.asarray(w_SxN)))),
            batched_args=(False, False, False, True),
            cfg=_CFG64,
        )


def multistart(prob: Problem, starts_SxF: np.ndarray, precision: str = "auto") -> MultiStart:
    """L-BFGS from every start; float32 exploration + float64 polish unless precision='float64'."""
    starts = np.asarray(starts_SxF, dtype=float)
    S = starts.shape[0]
    if precision not in ("auto", "mixed", "float64"):
        raise AnalysisError(f"precision must be 'auto', 'mixed' or 'float64', not {precision!r}")
    if precision == "auto":  # the float32 pass pays for its extra compilation only on big searches
        precision = "mixed" if S * prob.padded_n >= MIXED_MIN_WORK else "float64"
    if precision == "mixed":
        with jax.enable_x64(False):
            r32 = minimize_batch(
                prob.fun, starts.astype(np.float32), _flat_args(prob, jnp.float32), cfg=_CFG32
            )
        f32 = np.where(np.isfinite(r32.f), r32.f, np.inf)
        best32 = np.min(f32)
        order = np.argsort(f32)
        keep = np.zeros(S, bool)
        keep[order[: min(S, 32)]] = True
        keep |= f32 <= best32 + 1e-2 * abs(best32)
        keep &= np.isfinite(f32)
        if not keep.any():
            keep[order[0]] = True
        polish_from = r32.x[keep].astype(np.float64)
    else:
        polish_from = starts
    r = _run64(prob, polish_from, np.broadcast_to(prob.w, (polish_from.shape[0], prob.w.size)))
    f = np.where(np.isfinite(r.f), r.f, np.inf)
    i = int(np.argmin(f))
    best = float(f[i])
    if not math.isfinite(best):
        raise AnalysisError(
            f"law {prob.law.name}: the objective is not finite at any start; check the data's scale"
        )
    # Relative tolerance, with a floor for (near-)perfect fits: residuals of ~1e-7 are all equal.
    floor = 0.5 * (1e-7) ** 2 * float(np.sum(prob.w))
    at_opt = f <= best + OPTIMUM_RTOL * abs(best) + floor
    # Distinct other local minima (by objective), best first: extra bootstrap starts.
    others = []
    seen = [best]
    for j in np.argsort(f):
        if len(others) >= 3 or not np.isfinite(f[j]):
            break
        if all(abs(f[j] - v) > 1e-4 * abs(v) + 1e-300 for v in seen):
            seen.append(f[j])
            others.append(r.x[j])
    return MultiStart(
        theta=prob.full(r.x[i]),
        objective=best,
        grad_norm=float(r.grad_norm[i]),
        status=STATUS_NAMES[int(r.status[i])],
        converged=bool(int(r.status[i]) in CONVERGED_CODES and (at_opt.sum() >= 2 or S == 1)),
        n_starts=S,
        n_polished=int(polish_from.shape[0]),
        starts_at_optimum=int(at_opt.sum()),
        local_optima=np.array(others).reshape(-1, len(prob.free_idx)),
    )


def _resample_size(n: int) -> int:
    """Points each resample's compacted data is padded to: a deterministic bound on the number
    of distinct points in a size-n case resample (mean + 6 sd, rounded up to 16), so that every
    seed compiles the same shape; a rare larger resample raises it."""
    q1, q2 = (1 - 1 / n) ** n, (1 - 2 / n) ** n
    mean = n * (1 - q1)
    var = n * q1 + n * (n - 1) * q2 - (n * q1) ** 2
    return min(n, -(-int(math.ceil(mean + 6 * math.sqrt(max(var, 0.0)))) // 16) * 16)


def bootstrap_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """[n_resamples, n] case-resampling counts that `run_bootstrap(..., seed)` draws (so a
    benchmark or notebook can refit exactly the same resamples another way)."""
    return np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(float)


def run_bootstrap(
    prob: Problem,
    theta_hat_free: np.ndarray,
    extra_starts_KxF: np.ndarray,
    n_resamples: int,
    seed: int,
) -> tuple[np.ndarray, int]:
    """Case-resampling bootstrap: (B, P) internal parameter samples and the count of failures.

    One batched run holds every (resample, start) pair; each resample keeps its best start.
    Point weights multiply the resampling counts, so weighted fits bootstrap consistently.
    A resample holds only ~63% of the distinct points, so each one is compacted to its own
    points (with their counts as weights) rather than evaluating every point with weight 0.
    """
    n = prob.logy.shape[0]
    counts_BxN = bootstrap_counts(n, n_resamples, seed)
    w_BxN = counts_BxN * prob.w[None, :]
    nonzero_BxN = w_BxN > 0
    M = max(_resample_size(n), int(nonzero_BxN.sum(axis=1).max()))
    idx_BxM = np.argsort(~nonzero_BxN, axis=1, kind="stable")[:, :M]  # a resample's points first
    w_BxM = np.take_along_axis(w_BxN, idx_BxM, axis=1)  # then padding with weight 0
    starts_KxF = np.vstack([theta_hat_free[None, :], extra_starts_KxF])
    K = starts_KxF.shape[0]
    idx_SxM = np.repeat(idx_BxM, K, axis=0)
    x0 = np.tile(starts_KxF, (n_resamples, 1))
    with jax.enable_x64(True):
        args = (
            jnp.asarray(prob.theta_full, jnp.float64),
            tuple(jnp.asarray(v[idx_SxM], jnp.float64) for v in prob.logX),
            jnp.asarray(prob.logy[idx_SxM], jnp.float64),
            jnp.asarray(np.repeat(w_BxM, K, axis=0), jnp.float64),
        )
        r = minimize_batch(
            prob.fun,
            x0,
            args,
            batched_args=(False, True, True, True),
            cfg=_CFG64,
            tail_slots=64,
        )
    f = np.where(np.isfinite(r.f), r.f, np.inf).reshape(n_resamples, K)
    x = r.x.reshape(n_resamples, K, -1)
    best = np.argmin(f, axis=1)
    samples = prob.full(x[np.arange(n_resamples), best])
    failed = int(np.sum(~np.isfinite(f.min(axis=1))))
    return samples, failed


def _percentile_ci(samples_BxP: np.ndarray, level: float) -> np.ndarray:
    lo, hi = 50 * (1 - level), 50 * (1 + level)
    finite = np.all(np.isfinite(samples_BxP), axis=1)
    return np.percentile(samples_BxP[finite], [lo, hi], axis=0).T  # (P, 2)


@dataclass
class FitResult:
    """A fitted point law: parameters, CIs, convergence report, and the data it came from."""

    law: str
    param_names: tuple[str, ...]
    params: dict[str, float]
    ci: dict[str, list[float]]
    se: dict[str, float]
    bootstrap_samples: np.ndarray | None  # (B, P) public parameters, `param_names` order
    objective: float
    grad_norm: float
    n_points: int
    n_starts: int
    n_polished: int
    starts_at_optimum: int
    converged: bool
    status: str
    columns: dict[str, str]
    fixed: dict[str, float]
    delta: float
    ci_level: float
    seed: int
    flops_per_param_token: float
    input_ranges: dict[str, list[float]]
    holdout: dict | None = None
    bootstrap_failed: int = 0
    extras: dict = field(default_factory=dict)
    bootstrap_x0: np.ndarray | None = field(default=None, repr=False)  # internal starts of every resample
    # measured error model behind prediction intervals (None: fitted with prediction_intervals=False)
    prediction_error: intervals.PredictionError | None = None

    @property
    def law_obj(self) -> Law:
        return get_law(self.law)

    @property
    def vector(self) -> np.ndarray:
        return np.array([self.params[k] for k in self.param_names])

    def predict(
        self, df: pd.DataFrame | Mapping[str, Any], columns: Mapping[str, str] | None = None
    ) -> np.ndarray:
        """Predicted loss for the rows of `df` (columns found as in the fit, or by `columns`)."""
        law = self.law_obj
        if not isinstance(df, pd.DataFrame):
            df = pd.DataFrame({k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in df.items()})
        cols = {
            r: c for r, c in self.columns.items() if not c.startswith("<") and r != "loss" and c in df.columns
        }
        cols.update(columns or {})
        vals, _ = data_mod.resolve_inputs(df, law.inputs, cols)
        return law.predict(self.vector, vals)

    def predict_samples(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(B, n) predictions under every bootstrap sample (for loss CIs at arbitrary inputs)."""
        if self.bootstrap_samples is None:
            raise AnalysisError("this fit has no bootstrap samples; refit with bootstrap > 0")
        law = self.law_obj
        logX = tuple(np.log(np.asarray(inputs[k], dtype=float)) for k in law.inputs)
        with jax.enable_x64(True):
            theta = jnp.asarray(law.to_internal(self.bootstrap_samples))
            out = jax.vmap(lambda t: law.log_predict(t, tuple(jnp.asarray(v) for v in logX)))(theta)
            return np.exp(np.asarray(out))

    def predict_interval(
        self, inputs: Mapping[str, np.ndarray], level: float = intervals.PREDICTION_LEVEL
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, lo, hi) at `inputs` (role -> array): the `level` prediction interval of a
        new run's loss, parameter noise + run scatter + extrapolation drift (analysis.laws.intervals)."""
        if self.prediction_error is None:
            raise AnalysisError(
                "this fit has no prediction-error model; refit with prediction_intervals=True"
            )
        law = self.law_obj
        inputs = {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in inputs.items()}
        pred = law.predict(self.vector, inputs)
        samples = None
        if self.bootstrap_samples is not None:
            with np.errstate(all="ignore"):
                samples = np.log(self.predict_samples(inputs))
        pe = self.prediction_error
        scale = _scale(inputs, pe.scale_role, self.flops_per_param_token)
        lo, hi = intervals.interval(np.log(pred), samples, pe.sd(pe.decades(scale)), level, seed=self.seed)
        return pred, lo, hi

    def allocation(self, budgets: Sequence[float] | None = None) -> dict:
        return allocation(self, budgets)

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict:
        """JSON-ready summary (the `fit --json` schema); allocation is added for Chinchilla laws."""

        out: dict[str, Any] = {
            "law": self.law,
            "formula": self.law_obj.formula,
            "param_names": list(self.param_names),
            "params": {k: float(v) for k, v in self.params.items()},
            "ci": {k: [float(a), float(b)] for k, (a, b) in self.ci.items()},
            "ci_level": self.ci_level,
            "se": {k: float(v) for k, v in self.se.items()},
            "objective": self.objective,
            "grad_norm": self.grad_norm,
            "n_points": self.n_points,
            "n_starts": self.n_starts,
            "n_polished": self.n_polished,
            "starts_at_optimum": self.starts_at_optimum,
            "converged": self.converged,
            "status": self.status,
            "huber_delta": self.delta,
            "fixed": dict(self.fixed),
            "columns": dict(self.columns),
            "input_ranges": self.input_ranges,
            "flops_per_param_token": self.flops_per_param_token,
            "bootstrap": {
                "resamples": 0 if self.bootstrap_samples is None else int(self.bootstrap_samples.shape[0]),
                "seed": self.seed,
                "failed": self.bootstrap_failed,
            },
            "bootstrap_samples": [] if self.bootstrap_samples is None else self.bootstrap_samples.tolist(),
        }
        if supports_allocation(self):
            out["allocation"] = self.allocation(budgets)
        if self.prediction_error is not None:
            out["prediction_error"] = self.prediction_error.to_dict()
        if self.holdout is not None:
            out["holdout"] = self.holdout
        out.update(self.extras)
        return out

    def to_json(self, path: str | None = None, budgets: Sequence[float] | None = None) -> str:
        """Strict JSON (NaN, e.g. a CI without bootstrap, is written as null); written to `path`
        (atomically; `-` = stdout) when given."""
        obj = self.to_dict(budgets)
        if path is not None:
            jsonio.write_json(path, obj)
        return jsonio.dumps(obj, indent=2)

    def summary(self) -> str:
        lines = [f"law {self.law}: {self.law_obj.formula}  ({self.n_points} points)"]
        for k in self.param_names:
            lo, hi = self.ci.get(k, [math.nan, math.nan])
            tag = " (fixed)" if k in self.fixed else ""
            lines.append(
                f"  {k:>8} = {self.params[k]:.6g}   {int(self.ci_level * 100)}% CI [{lo:.6g}, {hi:.6g}]{tag}"
            )
        lines.append(
            f"  objective {self.objective:.10g}, |grad|_inf {self.grad_norm:.2e}, "
            f"{self.starts_at_optimum}/{self.n_polished} "
            f"polished starts (of {self.n_starts}) at the optimum; {self.status}; converged={self.converged}"
        )
        lines += [
            f"  warning: {n.message}"
            for n in bound_notes(self.law_obj, self.params, self.ci, tuple(self.fixed))
        ]
        return "\n".join(lines)


def _check_identifiable(law: Law, pts: data_mod.Points, n_free: int, fixed: Mapping[str, float]) -> None:
    n = pts.n
    if n < n_free:
        raise AnalysisError(
            f"{n} point(s) for {n_free} free parameters of law {law.name}: need at least {n_free} points "
            f"(more is better), or fix parameters with --fix NAME=VALUE"
        )
    for role, need in law.min_distinct.items():
        k = len(np.unique(pts.inputs[role]))
        if k < need:
            what = {"N": "model size", "D": "token count", "C": "compute budget"}.get(role, f"{role} value")
            raise AnalysisError(
                f"only {k} distinct {what}{'s' if k != 1 else ''} ({pts.columns.get(role, role)}); "
                f"law {law.name} "
                f"needs at least {need} to identify its {role}-dependence"
            )
    if np.sum(pts.weights > 0) < n_free:
        raise AnalysisError(
            f"only {int(np.sum(pts.weights > 0))} points have weight > 0; "
            f"law {law.name} has {n_free} free parameters"
        )


def prepare(
    law: Law,
    pts: data_mod.Points,
    fixed: Mapping[str, float] | None,
    delta: float,
) -> Problem:
    fixed = dict(fixed or {})
    unknown = set(fixed) - set(law.param_names)
    if unknown:
        raise AnalysisError(
            f"cannot fix {sorted(unknown)}: law {law.name} has parameters {', '.join(law.param_names)}"
        )
    theta_full = np.zeros(law.n_params)
    for k, v in fixed.items():
        i = law.param_names.index(k)
        law.check_value(k, v)  # a fixed value must lie inside the bounds the law enforces
        theta_full[i] = law.transforms[i].internal(v)
    free_idx = tuple(i for i, k in enumerate(law.param_names) if k not in fixed)
    if not free_idx:
        raise AnalysisError("every parameter is fixed; nothing to fit")
    _check_identifiable(law, pts, len(free_idx), fixed)
    if delta <= 0:
        raise AnalysisError(f"Huber delta must be > 0, got {delta}")
    return Problem(
        law=law,
        free_idx=free_idx,
        theta_full=theta_full,
        logX=tuple(np.log(pts.inputs[k]) for k in law.inputs),
        logy=np.log(pts.y),
        w=pts.weights,
        delta=delta,
    )


def _starts(law: Law, prob: Problem, grid: np.ndarray | None) -> np.ndarray:
    if grid is None:
        g = law.starts(prob.logX, prob.logy)
    else:
        g = np.atleast_2d(np.asarray(grid, dtype=float))  # user grids are public values
        if g.shape[1] != law.n_params:
            raise AnalysisError(f"grid must have {law.n_params} columns ({', '.join(law.param_names)})")
        g = law.internal_starts(g)  # moved just inside the bounds
    g = g[:, list(prob.free_idx)]
    return np.unique(g, axis=0)


def _scale(inputs: Mapping[str, np.ndarray], role: str, k: float) -> np.ndarray:
    """The input that measures a run's scale for extrapolation distances (C = k N D if absent)."""
    if role in inputs:
        return np.asarray(inputs[role], dtype=float)
    if role == "C" and "N" in inputs and "D" in inputs:
        return k * np.asarray(inputs["N"], dtype=float) * np.asarray(inputs["D"], dtype=float)
    raise AnalysisError(
        f"prediction intervals need {role} (the scale the fit extrapolates in) at every point"
    )


def scale_role(law: Law, pts: data_mod.Points) -> str:
    """Compute C when the points have it; else the law's single input (N, D or x)."""
    return "C" if "C" in pts.inputs else law.inputs[0]


def prediction_error(
    prob: Problem,
    pts: data_mod.Points,
    ms: "MultiStart",
    fixed: Mapping[str, float] | None,
    grid_starts: np.ndarray,
) -> intervals.PredictionError:
    """Forward-chaining error model of the fit `ms` of `prob` (see analysis.laws.intervals): each
    fold refits from the full fit's optimum, its other local optima and 8 grid starts, in float64."""
    law, delta = prob.law, prob.delta
    free = list(prob.free_idx)
    rng = np.random.default_rng(0)
    extra = grid_starts[rng.choice(grid_starts.shape[0], size=min(8, grid_starts.shape[0]), replace=False)]
    starts = np.vstack([ms.theta[free][None, :], ms.local_optima, extra])
    resid = prob.logy - np.log(law.predict(law.to_public(ms.theta), pts.inputs))

    def refit_predict(fit_mask: np.ndarray, test_mask: np.ndarray) -> np.ndarray | None:
        sub, test = holdout.subset(pts, fit_mask), holdout.subset(pts, test_mask)
        try:
            r = multistart(prepare(law, sub, fixed, delta), starts, "float64")
        except AnalysisError:
            return None
        return np.log(test.y) - np.log(law.predict(law.to_public(r.theta), test.inputs))

    role = scale_role(law, pts)
    return intervals.estimate(pts.inputs[role], role, resid, refit_predict)


def fit_points(
    law: Law,
    pts: data_mod.Points,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    fixed: Mapping[str, float] | None = None,
    grid: np.ndarray | None = None,
    delta: float = HUBER_DELTA,
    precision: str = "auto",
    ci_level: float = 0.95,
    bootstrap_starts: int = 2,
    prediction_intervals: bool = True,
) -> FitResult:
    """Fit `law` to validated points (see `fit_law` for the DataFrame entry point)."""
    prob = prepare(law, pts, fixed, delta)
    grid_all = _starts(law, prob, grid)
    ms = multistart(prob, grid_all, precision)
    public = law.to_public(ms.theta)
    samples, failed, boot_x0 = None, 0, None
    ci = {k: [math.nan, math.nan] for k in law.param_names}
    se = {k: math.nan for k in law.param_names}
    if bootstrap:
        rng = np.random.default_rng(seed + 1)
        n_rand = max(0, bootstrap_starts - ms.local_optima.shape[0])
        rand = grid_all[rng.choice(grid_all.shape[0], size=min(n_rand, grid_all.shape[0]), replace=False)]
        extra = np.vstack([ms.local_optima[:bootstrap_starts], rand])
        theta_hat_free = ms.theta[list(prob.free_idx)]
        boot_x0 = np.vstack([theta_hat_free[None, :], extra])
        samples_int, failed = run_bootstrap(prob, theta_hat_free, extra, int(bootstrap), seed)
        samples = law.to_public(samples_int)
        bounds = _percentile_ci(samples, ci_level)
        ci = {k: [float(bounds[i, 0]), float(bounds[i, 1])] for i, k in enumerate(law.param_names)}
        finite = np.all(np.isfinite(samples), axis=1)
        se = {
            k: float(np.std(samples[finite, i], ddof=1)) if finite.sum() > 1 else math.nan
            for i, k in enumerate(law.param_names)
        }
    if not ms.converged:
        warnings.warn(
            f"law {law.name}: the best start did not clearly converge "
            f"({ms.status}, {ms.starts_at_optimum} starts at the optimum)"
        )
    perr = prediction_error(prob, pts, ms, fixed, grid_all) if prediction_intervals else None
    k_flops = data_mod.FLOPS_PER_PARAM_TOKEN
    if (
        all(r in pts.inputs for r in ("N", "D", "C"))
        and not pts.columns.get("C", "<").startswith("<")
        and not pts.columns.get("D", "<").startswith("<")
    ):
        k_flops = float(np.median(pts.inputs["C"] / (pts.inputs["N"] * pts.inputs["D"])))
    return FitResult(
        law=law.name,
        param_names=law.param_names,
        params={k: float(public[i]) for i, k in enumerate(law.param_names)},
        ci=ci,
        se=se,
        bootstrap_samples=samples,
        objective=ms.objective,
        grad_norm=ms.grad_norm,
        n_points=pts.n,
        n_starts=ms.n_starts,
        n_polished=ms.n_polished,
        starts_at_optimum=ms.starts_at_optimum,
        converged=ms.converged,
        status=ms.status,
        columns=dict(pts.columns),
        fixed={k: float(v) for k, v in (fixed or {}).items()},
        delta=delta,
        ci_level=ci_level,
        seed=seed,
        flops_per_param_token=k_flops,
        input_ranges={k: [float(v.min()), float(v.max())] for k, v in pts.inputs.items()},
        bootstrap_failed=failed,
        bootstrap_x0=None if boot_x0 is None else prob.full(boot_x0),
        prediction_error=perr,
    )


def fit_law(
    df: pd.DataFrame | str,
    law: str | Law = "chinchilla",
    columns: Mapping[str, str] | None = None,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    holdout_above: float | None = None,
    weights: str | np.ndarray | None = None,
    fixed: Mapping[str, float] | None = None,
    grid: np.ndarray | None = None,
    delta: float = HUBER_DELTA,
    precision: str = "auto",
    ci_level: float = 0.95,
    prediction_intervals: bool = True,
    n_params: str | None = None,
) -> FitResult:
    """Fit a registered law to a table of runs (DataFrame or CSV path). Main entry point.

    columns: role -> column name (roles N, D, C, loss, x); defaults find common spellings.
    bootstrap: resamples for CIs (0 = none). holdout_above: leave runs with compute C above this
    out of the fit and report how well the fit predicts them (`result.holdout`).
    weights: a column name or per-row array multiplying each point's Huber term.
    fixed: public parameter values to hold fixed, e.g. {"E": 1.69}.
    grid: (S, P) public start values replacing the law's default grid.
    n_params: which N, "total" or "non_embedding" (None: the law's default, see
    `points.choose_n_column`); recorded as `extras["n_params"]`.
    """
    if isinstance(df, (str, bytes)) or hasattr(df, "__fspath__"):
        df = data_mod.read_table(df)
    law_obj = law if isinstance(law, Law) else get_law(law)
    if not 0 < ci_level < 1:
        raise AnalysisError(f"ci_level must be in (0, 1), got {ci_level}")
    if bootstrap < 0:
        raise AnalysisError(f"bootstrap must be >= 0, got {bootstrap}")
    columns, n_kind = data_mod.choose_n_column(df, law_obj, columns, n_params)
    pts = data_mod.resolve(df, law_obj.inputs, columns, weights)
    if holdout_above is None:
        fit = fit_points(
            law_obj,
            pts,
            bootstrap=bootstrap,
            seed=seed,
            fixed=fixed,
            grid=grid,
            delta=delta,
            precision=precision,
            ci_level=ci_level,
            prediction_intervals=prediction_intervals,
        )
        return _with_n_params(fit, n_kind)
    fit_pts, held_pts = holdout.split(pts, holdout_above)
    fit = fit_points(
        law_obj,
        fit_pts,
        bootstrap=bootstrap,
        seed=seed,
        fixed=fixed,
        grid=grid,
        delta=delta,
        precision=precision,
        ci_level=ci_level,
        prediction_intervals=prediction_intervals,
    )
    band = fit.predict_interval(held_pts.inputs)[1:] if fit.prediction_error is not None else None
    fit.holdout = {
        "threshold": float(holdout_above),
        **holdout.holdout_report(law_obj, fit.vector, held_pts, band),
    }
    return _with_n_params(fit, n_kind)


def _with_n_params(fit: FitResult, kind: str | None) -> FitResult:
    """Record which parameter count N the fit used (`n_params` in its JSON)."""
    if kind is not None:
        fit.extras["n_params"] = kind
    return fit


def holdout_validate(
    df: pd.DataFrame | str,
    law: str | Law = "chinchilla",
    threshold: float | None = None,
    columns: Mapping[str, str] | None = None,
    **fit_kwargs,
) -> FitResult:
    """Fit `law` on runs with C <= threshold and predict the rest; returns the FitResult whose
    `.holdout` holds per-run errors. Default threshold: hold out the top compute budget."""
    if threshold is None:
        if isinstance(df, (str, bytes)):
            df = data_mod.read_table(df)
        law_obj = law if isinstance(law, Law) else get_law(law)
        with (
            warnings.catch_warnings()
        ):  # fit_law warns about the N it uses; the threshold must see the same C
            warnings.simplefilter("ignore", data_mod.NParamsWarning)
            n_cols, _ = data_mod.choose_n_column(df, law_obj, columns, fit_kwargs.get("n_params"))
        threshold = holdout.top_budget_threshold(df, law_obj, n_cols)
    return fit_law(df, law, columns, holdout_above=threshold, **fit_kwargs)
