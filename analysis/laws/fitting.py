"""Fitting a point law: Huber loss of log residuals, multi-start L-BFGS, bootstrap CIs.

The objective is `sum_i w_i * Huber_delta(log y_i - log f(x_i; theta))`, *summed* (not averaged)
over points, as Besiroglu et al. (2024) showed is needed: a mean-scaled Huber loss is so flat that
optimisers stop early (the original Chinchilla fit did). The default delta is Hoffmann et al.'s 1e-3
(`DEFAULT_DELTA`), the published protocol, which reproduces Epoch's refit of Chinchilla: on the
backtest zoo it has the lower mean error (2.51% vs 3.18% over 39 budget and size backtests) and on
held-back repeated-data ladders least squares doubled the error; `--delta 1` is least squares
(docs/fit.md, "How fits work").

Search: L-BFGS from every point of the law's start grid, all starts vectorised
(`analysis.core.lbfgs.minimize_batch`). For big searches (`precision="auto"`, e.g. the
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

import dataclasses
import hashlib
import math
import pathlib
import threading
import warnings
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from analysis.core import intervals, progress, validation
from analysis.core import table as data_mod
from analysis.core.enums import FitStatus, LawName, NParams, Precision
from analysis.core.intervals import NO_INTERVAL, Interval
from analysis.core.lbfgs import (
    CONVERGED_CODES,
    STATUS_NAMES,
    LBFGSConfig,
    MinimizeResult,
    minimize_batch,
    prepare_batch,
)
from analysis.laws import frontier as frontier_mod
from analysis.laws import holdout, repeated
from analysis.laws.allocation import allocation, chinchilla_index, closed_form_optimum, supports_allocation
from analysis.laws.choice import LawChoice
from analysis.laws.holdout import HoldoutReport
from analysis.laws.registry import Law, bound_notes, get_law
from models.base import jsonio
from models.base.errors import AnalysisError

HUBER_DELTA = 1e-3  # Hoffmann et al. (2022)'s delta; loss curves (analysis.curves) keep it
DEFAULT_DELTA = HUBER_DELTA  # the point laws' default too; 1 is least squares (docs/fit.md)
OPTIMUM_RTOL = 1e-6  # a start "reached the optimum" when its objective is this close to the best
_CFG32 = LBFGSConfig(ftol=1e-9, gtol=0.0, max_evals=1500)
_CFG64 = LBFGSConfig(max_evals=2000)
FIT_SLOTS = 128  # batch width of a fit's runs (`minimize_batch`'s slots); 128 beat 256 and 64 on CPU
MIXED_MIN_WORK = 200_000  # starts x points (`Problem.search_work`) above which "auto" adds the float32 search
# A first pass on a seeded quarter of a big grid (`multistart`); kept when this many of its starts
# agree on the optimum and they agree on its parameters to FIRST_PASS_SPREAD (internal units: logs
# of amplitudes, exponents; 1e-4 on Epoch's table, 20-10,000 on a ridge of equal objective, where
# which starts run decides the point). Checked on every backtest of the zoo
# (docs/fit.md, the first-pass paragraph).
FIRST_PASS_MIN_STARTS, FIRST_PASS_SHARE, FIRST_PASS_AGREE, FIRST_PASS_SEED = 2000, 4, 16, 0
FIRST_PASS_SPREAD = 1e-2
MIN_POINTS, POINT_QUANTUM = 32, 16  # points are padded to a multiple of POINT_QUANTUM, at least MIN_POINTS


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


def program_key(law: Law, free_idx: tuple[int, ...], delta: float) -> str | None:
    """What identifies `objective_fn(law, free_idx, delta)` across processes (`minimize_batch`'s
    `program_key`): the law's form and parameters, the free ones, delta and the source of
    analysis.laws (the objective, the forms, their transforms). None for a form defined elsewhere
    or closing over values (a user's `register_law`): its program is traced in every process."""
    form = law.log_form
    if not getattr(form, "__module__", "").startswith("analysis.laws.") or getattr(form, "__closure__", None):
        return None
    return (
        f"point-law objective | {law.name} | {form.__module__}.{form.__qualname__} | "
        f"params {law.param_names} | inputs {law.inputs} | log {law.log_params} | bounds {law.bounds} | "
        f"free {free_idx} | delta {delta!r} | analysis.laws {_laws_source()}"
    )


@lru_cache(maxsize=None)
def _laws_source() -> str:
    """A digest of every module of analysis.laws (a program kept across processes is this code's)."""
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Problem:
    """Everything the optimiser needs: a law, which parameters are free, and log-space data."""

    law: Law
    free_idx: tuple[int, ...]
    theta_full: np.ndarray  # internal values; entries at free_idx are placeholders
    logX: tuple[np.ndarray, ...]
    logy: np.ndarray
    w: np.ndarray
    delta: float = DEFAULT_DELTA

    @property
    def fun(self):
        return objective_fn(self.law, self.free_idx, self.delta)

    @property
    def program_key(self) -> str | None:
        return program_key(self.law, self.free_idx, self.delta)

    @property
    def padded_n(self) -> int:
        """Points are padded (weight 0) to a multiple of `POINT_QUANTUM` (at least `MIN_POINTS`):
        every run of a fit (grid search, polish, bootstrap, refits) sees all points with its own
        weights, so one padded size serves them all, and datasets of similar size share programs
        in the persistent compile cache, at most 15 wasted points per evaluation."""
        n = self.logy.shape[0]
        return validation.padded_rows(n, MIN_POINTS, POINT_QUANTUM)

    @property
    def search_work(self) -> int:
        """Points x 1 the `MIXED_MIN_WORK` threshold counts per start: the point count padded to the
        power-of-two ladder (a multiple of 256 above 256) the threshold was set with."""
        n = self.logy.shape[0]
        return (
            validation.padded_rows(n, MIN_POINTS) if n <= 256 else validation.padded_rows(n, 0, quantum=256)
        )

    def pad(self, v: np.ndarray) -> np.ndarray:
        """Pad the last axis to `padded_n` by repeating the first point (its weight is padded 0)."""
        extra = self.padded_n - v.shape[-1]
        return np.concatenate([v, np.repeat(v[..., :1], extra, axis=-1)], axis=-1) if extra else v

    def pad_weights(self, w: np.ndarray) -> np.ndarray:
        extra = self.padded_n - w.shape[-1]
        return np.concatenate([w, np.zeros(w.shape[:-1] + (extra,))], axis=-1) if extra else w

    def args(self, dtype) -> tuple:
        """(theta_full, logX, logy, w) padded, as host arrays of `dtype` (cast by numpy, not by
        an eager JAX op: each of those is one more program to compile in every process)."""
        dtype = np.dtype(dtype)
        return (
            np.asarray(self.theta_full, dtype),
            tuple(np.asarray(self.pad(v), dtype) for v in self.logX),
            np.asarray(self.pad(self.logy), dtype),
            np.asarray(self.pad_weights(self.w), dtype),
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
    status: FitStatus
    converged: bool
    n_starts: int
    n_polished: int
    starts_at_optimum: int
    local_optima: np.ndarray  # internal free-parameter endpoints of distinct other minima, best first
    grid_starts: int  # starts the grid offered (more than n_starts when a first pass sufficed)
    # largest difference of an internal parameter between the starts at the optimum and the best:
    # large on a ridge of equal objective (a vanishing term, an untested decay constant)
    optimum_spread: float


def run_starts(
    prob: Problem,
    x0_SxF: np.ndarray,
    w_SxN: np.ndarray,
    dtype=np.float64,
    bar: progress.Bar | None = None,
) -> MinimizeResult:
    """L-BFGS from every row of `x0_SxF` with its own row of point weights, in `dtype` (float32:
    the exploration tolerances `_CFG32`; float64: `_CFG64`). Every run of a fit has this one
    signature (shared points, per-start weights) and width `FIT_SLOTS`, so a fit loads one
    compiled program per precision: the grid search, polish, bootstrap and forward-chaining
    refits all run on it. `bar` (analysis.core.progress) counts the starts as they finish."""
    x64 = np.dtype(dtype) == np.float64
    with jax.enable_x64(x64):
        theta_full, logX, logy, _ = prob.args(dtype)
        return minimize_batch(
            prob.fun,
            np.asarray(x0_SxF, dtype),
            (theta_full, logX, logy, prob.pad_weights(np.asarray(w_SxN, dtype=float)).astype(dtype)),
            batched_args=(False, False, False, True),
            cfg=_CFG64 if x64 else _CFG32,
            width=FIT_SLOTS,
            program_key=prob.program_key,
            on_done=None if bar is None else bar.update,
        )


def _run64(
    prob: Problem, x0_SxF: np.ndarray, w_SxN: np.ndarray, bar: progress.Bar | None = None
) -> MinimizeResult:
    """Float64 L-BFGS with per-start weights (the point fit's are the same row for every start)."""
    return run_starts(prob, x0_SxF, w_SxN, np.float64, bar)


def _load_program(prob: Problem, dtype) -> None:
    """Get `run_starts(prob, ..., dtype)`'s program ready (see `lbfgs.prepare_batch`); run in a
    background thread while the other precision computes. An optimisation only: a failure here
    is left for the real call to report."""
    x64 = np.dtype(dtype) == np.float64
    try:
        with jax.enable_x64(x64):
            theta_full, logX, logy, w = prob.args(dtype)
            args = (theta_full, logX, logy, w[None, :])
            cfg = _CFG64 if x64 else _CFG32
            prepare_batch(
                prob.fun,
                len(prob.free_idx),
                dtype,
                args,
                (False, False, False, True),
                cfg,
                FIT_SLOTS,
                prob.program_key,
            )
    except Exception:  # noqa: BLE001 - the real call raises what this one hit
        pass


def load_program_async(prob: Problem, dtype) -> threading.Thread:
    """Start `_load_program` in a daemon thread; join it before the run that needs the program
    (two threads compiling the same program would each pay for it)."""
    thread = threading.Thread(target=_load_program, args=(prob, dtype), daemon=True)
    thread.start()
    return thread


def first_pass_rows(n_starts: int) -> np.ndarray:
    """The grid rows a big search tries first: a seeded, sorted `1 / FIRST_PASS_SHARE` of them (a
    sample spreads over every axis of a product grid; a stride would skip whole values of its
    fastest axes)."""
    k = -(-n_starts // FIRST_PASS_SHARE)
    return np.sort(np.random.default_rng(FIRST_PASS_SEED).choice(n_starts, size=k, replace=False))


def multistart(
    prob: Problem, starts_SxF: np.ndarray, precision: Precision | str = Precision.AUTO
) -> MultiStart:
    """L-BFGS from every start; float32 exploration + float64 polish unless precision='float64'.

    A big search (at least `FIRST_PASS_MIN_STARTS` starts) runs a first pass on a quarter
    of the starts (`first_pass_rows`) and stops there when `FIRST_PASS_AGREE` of them reach its
    optimum at the same parameters (`FIRST_PASS_SPREAD`); otherwise the other starts run too
    (`_StartRuns` keeps the first pass's runs), so a ridge of equal objective ends where the
    whole grid's search ends. On Epoch's table 15% of
    the 4,500 grid starts reach the optimum, spread evenly over the grid, so the first pass finds
    it ~170 times."""
    starts = np.asarray(starts_SxF, dtype=float)
    S = starts.shape[0]
    if precision not in tuple(Precision):
        raise AnalysisError(
            f"precision must be {', '.join(map(repr, map(str, Precision)))}, not {precision!r}"
        )
    if precision == Precision.AUTO:  # the float32 pass pays for its extra compilation only on big searches
        precision = Precision.MIXED if S * prob.search_work >= MIXED_MIN_WORK else Precision.FLOAT64
    runs = _StartRuns(prob)
    if S >= FIRST_PASS_MIN_STARTS:
        first = _search(prob, starts[first_pass_rows(S)], Precision(precision), runs)
        if first.starts_at_optimum >= FIRST_PASS_AGREE and first.optimum_spread <= FIRST_PASS_SPREAD:
            return dataclasses.replace(first, grid_starts=S)
    return _search(prob, starts, Precision(precision), runs)


class _StartRuns:
    """L-BFGS runs of one problem's starts with the point weights, kept per precision and start:
    the whole grid's search after a first pass runs only the starts the first pass did not (a
    start's run does not depend on its batch, so a kept result is the one it would get)."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        self.kept: dict[tuple[str, bytes], tuple] = {}

    def run(self, x0_SxF: np.ndarray, dtype) -> MinimizeResult:
        x0 = np.asarray(x0_SxF, dtype)
        keys = [(x0.dtype.str, row.tobytes()) for row in x0]
        todo = [j for j, k in enumerate(keys) if k not in self.kept]
        if todo:
            w = np.broadcast_to(self.prob.w, (len(todo), self.prob.w.size))
            r = run_starts(self.prob, x0[todo], w, dtype)
            for n, j in enumerate(todo):
                self.kept[keys[j]] = tuple(field[n] for field in r)
        rows = [self.kept[k] for k in keys]
        return MinimizeResult(*(np.stack(col) for col in zip(*rows)))


def _search(prob: Problem, starts: np.ndarray, precision: Precision, runs: _StartRuns) -> MultiStart:
    """`multistart` on exactly these starts (precision MIXED or FLOAT64)."""
    S = starts.shape[0]
    if precision == Precision.MIXED:
        loading = load_program_async(prob, np.float64)  # the polish's program, while float32 runs
        r32 = runs.run(starts, np.float32)
        loading.join()
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
    r = runs.run(polish_from, np.float64)
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
        grid_starts=S,
        optimum_spread=float(np.max(np.abs(r.x[at_opt] - r.x[i]))),
    )


def bootstrap_jobs(
    prob: Problem, starts_KxF: np.ndarray, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Case-resampling bootstrap as float64 jobs: (x0, point weights), one row per (resample,
    start), resample-major. Point weights multiply the resampling counts, so weighted fits
    bootstrap consistently. Every resample keeps all points (a point it did not draw weighs 0),
    so the bootstrap runs the very program of the polish and the forward-chaining folds: on the
    command line a program costs more to load than the ~37% of evaluations that compacting each
    resample to its own points would save."""
    counts_BxN = validation.bootstrap_counts(prob.logy.shape[0], n_resamples, seed)
    K = starts_KxF.shape[0]
    return np.tile(starts_KxF, (n_resamples, 1)), np.repeat(counts_BxN * prob.w[None, :], K, axis=0)


def best_of_groups(r: MinimizeResult, rows: slice, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, f) of the best start of each of `n_groups` equal, consecutive groups of `rows` of a
    batched run (f = inf where no start of a group reached a finite objective)."""
    f = np.where(np.isfinite(r.f[rows]), r.f[rows], np.inf).reshape(n_groups, -1)
    x = r.x[rows].reshape(n_groups, f.shape[1], -1)
    best = np.argmin(f, axis=1)
    return x[np.arange(n_groups), best], f[np.arange(n_groups), best]


@partial(jax.jit, static_argnums=0)
def _log_predict_samples(law: Law, theta_BxP, logX):
    """(B, n) log predictions of `law` under every row of internal parameters, compiled once."""
    return jax.vmap(lambda t: law.log_predict(t, logX))(theta_BxP)


@dataclass(frozen=True)
class FitOptions:
    """How `fit_points` fits a law: the search, the bootstrap and the error model (one object,
    so a fit, its hold-out variant and a fallback refit take the same options)."""

    bootstrap: int = 1000  # resamples for the CIs (0: none)
    seed: int = 0
    fixed: Mapping[str, float] | None = None  # public parameter values held fixed, e.g. {"E": 1.69}
    grid: np.ndarray | None = None  # (S, P) public start values replacing the law's default grid
    delta: float = DEFAULT_DELTA
    precision: Precision | str = Precision.AUTO
    ci_level: float = 0.95
    bootstrap_starts: int = 2  # starts per resample besides the full-data optimum
    prediction_intervals: bool = True  # measure the forward-chaining error model

    def __post_init__(self) -> None:
        if not 0 < self.ci_level < 1:
            raise AnalysisError(f"ci_level must be in (0, 1), got {self.ci_level}")
        if self.bootstrap < 0:
            raise AnalysisError(f"bootstrap must be >= 0, got {self.bootstrap}")


@dataclass(frozen=True)
class FitResult:
    """A fitted point law: parameters, CIs, convergence report, and the data it came from.

    Frozen: a result is built once (`fit_points`); what `fit_law` learns after the fit (the
    hold-out report, the N it used, a fallback, `--law auto`'s choice) is added by
    `dataclasses.replace`."""

    law: str
    param_names: tuple[str, ...]
    params: dict[str, float]
    ci: dict[str, Interval]  # percentile CI per parameter (NaN bounds without a bootstrap)
    se: dict[str, float]
    bootstrap_samples: np.ndarray | None  # (B, P) public parameters, `param_names` order
    objective: float
    grad_norm: float
    n_points: int
    n_starts: int
    n_polished: int
    starts_at_optimum: int
    converged: bool
    status: FitStatus  # how the best start stopped
    columns: dict[str, str]
    fixed: dict[str, float]
    delta: float
    ci_level: float
    seed: int
    flops_per_param_token: float
    input_ranges: dict[str, Interval]  # role -> [min, max] over the fitted points
    holdout: HoldoutReport | None = None  # the runs held out above `holdout_above` and their errors
    bootstrap_failed: int = 0
    bootstrap_x0: np.ndarray | None = field(default=None, repr=False)  # internal starts of every resample
    # measured error model behind prediction intervals (None: fitted with prediction_intervals=False)
    prediction_error: intervals.PredictionError | None = None
    # the best loss expected per budget: the law's IsoFLOP minimum or a direct fit of the per-budget
    # best runs, chosen by forward-chaining (analysis.laws.frontier); None for other law forms
    frontier: frontier_mod.Frontier | None = None
    n_params: NParams | None = None  # which parameter count N is (None: the law has no N)
    # decay constants the runs did not test, each dropped for the law in its `to` (repeated data)
    fallback: tuple[repeated.Fallback, ...] = ()
    law_selection: LawChoice | None = None  # `--law auto`: which form was chosen and why
    grid_starts: int | None = None  # starts the grid offered (n_starts ran: fewer after a first pass)

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
            out = _log_predict_samples(law, law.to_internal(self.bootstrap_samples), logX)
            return np.exp(np.asarray(out))

    def predict_interval(
        self, inputs: Mapping[str, np.ndarray], level: float = validation.PREDICTION_LEVEL
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, lo, hi) at `inputs` (role -> array): the `level` prediction interval of a
        new run's loss, parameter noise + run scatter + extrapolation drift (analysis.core.intervals)."""
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
        lo, hi = validation.interval(np.log(pred), samples, pe.sd(pe.decades(scale)), level, seed=self.seed)
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
            "ci": {k: Interval(*v).to_list() for k, v in self.ci.items()},
            "ci_level": self.ci_level,
            "se": {k: float(v) for k, v in self.se.items()},
            "objective": self.objective,
            "grad_norm": self.grad_norm,
            "n_points": self.n_points,
            "n_starts": self.n_starts,
            "grid_starts": self.n_starts if self.grid_starts is None else self.grid_starts,
            "n_polished": self.n_polished,
            "starts_at_optimum": self.starts_at_optimum,
            "converged": self.converged,
            "status": str(self.status),
            "huber_delta": self.delta,
            "fixed": dict(self.fixed),
            "columns": dict(self.columns),
            "input_ranges": {k: Interval(*v).to_list() for k, v in self.input_ranges.items()},
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
        if self.frontier is not None:
            out["frontier"] = self.frontier.to_dict()
        if self.holdout is not None:
            out["holdout"] = self.holdout.to_dict()
        if self.n_params is not None:
            out["n_params"] = str(self.n_params)
        if self.fallback:
            out["fallback"] = [f.to_dict() for f in self.fallback]
        if self.law_selection is not None:
            out["law_selection"] = self.law_selection.to_dict()
        return out

    def to_json(self, path: str | None = None, budgets: Sequence[float] | None = None) -> str:
        """Strict JSON (NaN, e.g. a CI without bootstrap, is written as null); written to `path`
        (atomically; `-` = stdout) when given."""
        obj = self.to_dict(budgets)
        if path is not None:
            jsonio.write_json(path, obj)
        return jsonio.dumps(obj, indent=2)

    def _starts_text(self) -> str:
        if self.grid_starts is None or self.grid_starts == self.n_starts:
            return str(self.n_starts)
        return f"{self.n_starts}, a first pass over the grid's {self.grid_starts}"

    def summary(self) -> str:
        lines = [f"law {self.law}: {self.law_obj.formula}  ({self.n_points} points)"]
        for k in self.param_names:
            lo, hi = self.ci.get(k, NO_INTERVAL)
            tag = " (fixed)" if k in self.fixed else ""
            lines.append(
                f"  {k:>8} = {self.params[k]:.6g}   {int(self.ci_level * 100)}% CI [{lo:.6g}, {hi:.6g}]{tag}"
            )
        lines.append(
            f"  objective {self.objective:.10g}, |grad|_inf {self.grad_norm:.2e}, "
            f"{self.starts_at_optimum}/{self.n_polished} "
            f"polished starts (of {self._starts_text()}) at the optimum; {self.status}; "
            f"converged={self.converged}"
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
            what = {
                "N": "model size",
                "D": "token count",
                "C": "compute budget",
                "experts": "expert count",
            }.get(role, f"{role} value")
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
    """The law's own scale input when it names one (`Law.scale`: N for the MoE laws); else compute
    C when the points have it, else the law's single input (N, D or x)."""
    if law.scale is not None:
        return law.scale
    return "C" if "C" in pts.inputs else law.inputs[0]


FOLD_GRID_STARTS = 8  # grid starts every forward-chaining fold refits from, besides the fit's optima


@dataclass(frozen=True)
class FoldJobs:
    """The forward-chaining refits behind a fit's prediction intervals (analysis.core.intervals)
    as float64 jobs: every fold that can be fitted refits from the same starts (the full fit's
    optimum, its other local optima and `FOLD_GRID_STARTS` grid starts) with the points outside
    its fit side weighted 0, so the folds run in the batch (and program) of the bootstrap."""

    fit_masks: tuple[np.ndarray, ...]  # per fittable fold, the points it is fitted on
    x0: np.ndarray  # (folds * K, F) internal free starts, fold-major
    w: np.ndarray  # (folds * K, n) point weights


def fold_jobs(
    prob: Problem,
    pts: data_mod.Points,
    ms: "MultiStart",
    fixed: Mapping[str, float] | None,
    grid_starts: np.ndarray,
) -> FoldJobs:
    """The refits of the fit `ms` of `prob` at the cuts `validation.forward_cuts` picks; a fold whose
    fit side cannot identify the law (too few points or sizes) is left out, as `estimate` skips it."""
    law = prob.law
    rng = np.random.default_rng(0)
    n_grid = min(FOLD_GRID_STARTS, grid_starts.shape[0])
    extra = grid_starts[rng.choice(grid_starts.shape[0], size=n_grid, replace=False)]
    starts = np.vstack([ms.theta[list(prob.free_idx)][None, :], ms.local_optima, extra])
    scale = np.asarray(pts.inputs[scale_role(law, pts)], dtype=float)
    masks = []
    for cut in validation.forward_cuts(scale):
        mask = scale <= cut
        try:
            prepare(law, holdout.subset(pts, mask), fixed, prob.delta)  # the fold's own checks
        except AnalysisError:
            continue
        masks.append(mask)
    w = np.stack([prob.w * m for m in masks]) if masks else np.zeros((0, prob.w.size))
    K = starts.shape[0]
    return FoldJobs(tuple(masks), np.tile(starts, (len(masks), 1)), np.repeat(w, K, axis=0))


def fold_error(
    prob: Problem, pts: data_mod.Points, ms: "MultiStart", folds: FoldJobs, x_GxF: np.ndarray, f_G: np.ndarray
) -> intervals.PredictionError:
    """The error model of the fit `ms` from its folds' best refits (x, f per fold; f = inf: the
    fold's objective was not finite anywhere, and it is skipped)."""
    law = prob.law
    resid = prob.logy - np.log(law.predict(law.to_public(ms.theta), pts.inputs))
    refits = {m.tobytes(): (x, f) for m, x, f in zip(folds.fit_masks, x_GxF, f_G)}

    def refit_predict(fit_mask: np.ndarray, test_mask: np.ndarray) -> np.ndarray | None:
        x, f = refits.get(fit_mask.tobytes(), (None, math.inf))
        if not math.isfinite(f):
            return None
        test = holdout.subset(pts, test_mask)
        return np.log(test.y) - np.log(law.predict(law.to_public(prob.full(x)), test.inputs))

    role = scale_role(law, pts)
    return intervals.estimate(pts.inputs[role], role, resid, refit_predict)


def prediction_error(
    prob: Problem,
    pts: data_mod.Points,
    ms: "MultiStart",
    fixed: Mapping[str, float] | None,
    grid_starts: np.ndarray,
) -> intervals.PredictionError:
    """Forward-chaining error model of the fit `ms` of `prob` (see analysis.core.intervals), its
    folds run on their own (`fit_points` runs them with the bootstrap)."""
    folds = fold_jobs(prob, pts, ms, fixed, grid_starts)
    ((x, f),) = run_jobs(prob, [(folds.x0, folds.w, len(folds.fit_masks))])
    return fold_error(prob, pts, ms, folds, x, f)


def run_jobs(
    prob: Problem, blocks: Sequence[tuple[np.ndarray, np.ndarray, int]], bar: progress.Bar | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Blocks of float64 jobs (x0 (S, F), point weights (S, n), number of equal consecutive
    groups) in one batch, in the given order; per block the best (x, f) of each group. One batch
    runs them all on one compiled program: put the slowest jobs (fold refits from grid starts)
    first, so that they run while the short ones (resamples from the optimum) fill other slots;
    `bar` counts the finished jobs."""
    n_free = len(prob.free_idx)
    x0 = np.vstack([np.reshape(b[0], (-1, n_free)) for b in blocks])
    r = (
        _run64(prob, x0, np.vstack([np.reshape(b[1], (-1, prob.w.size)) for b in blocks]), bar)
        if len(x0)
        else None
    )
    out, start = [], 0
    for xs, _, groups in blocks:
        rows = slice(start, start + len(xs))
        start += len(xs)
        out.append(best_of_groups(r, rows, groups) if groups else (np.zeros((0, n_free)), np.zeros(0)))
    return out


SCREEN_RTOL = 1e-2  # a screened bootstrap start is polished when this close to its resample's best


def refit(
    prob: Problem,
    folds: FoldJobs | None,
    boot_x0_KxF: np.ndarray | None,
    n_resamples: int,
    seed: int,
    bar: progress.Bar | None = None,
) -> tuple[tuple[np.ndarray, np.ndarray] | None, tuple[np.ndarray, np.ndarray] | None]:
    """The fits behind a fit's error model and CIs: ((x, f) best per fold, (x, f) best per
    resample), None for what was not asked.

    Every resample's first start (the full-data optimum) and every fold refit run in float64 in
    one batch. Its other starts (the full data's other local optima, else random grid starts)
    are screened in float32 first, like the grid search, and polished in float64 only when
    their float32 optimum comes within `SCREEN_RTOL` of the resample's best: on Epoch's runs
    the random grid starts end 8-20x above it, and screening them saves 60% of the bootstrap's
    float64 evaluations without changing a sample. `bar` counts the fits as they finish (every
    fold's and resample's start; the polished ones are added once the screening has picked them)."""
    fold_block = [(folds.x0, folds.w, len(folds.fit_masks))] if folds is not None else []
    if boot_x0_KxF is None or not n_resamples:
        return (run_jobs(prob, fold_block, bar)[0] if fold_block else None), None
    K = boot_x0_KxF.shape[0]
    x0, w = bootstrap_jobs(prob, boot_x0_KxF, n_resamples, seed)
    first = np.arange(x0.shape[0]) % K == 0
    blocks = [*fold_block, (x0[first], w[first], n_resamples)]
    results = run_jobs(prob, blocks, bar)
    bx, bf = results[-1]
    if K > 1:
        bx, bf = _screened_best(prob, x0[~first], w[~first], bx, bf, bar)
    return (results[0] if folds is not None else None), (bx, bf)


def _screened_best(
    prob: Problem,
    x0_SxF: np.ndarray,
    w_SxN: np.ndarray,
    bx: np.ndarray,
    bf: np.ndarray,
    bar: progress.Bar | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The best (x, f) per resample after screening its other starts (`x0_SxF`, resample-major,
    the same number per resample) in float32 and polishing the promising ones in float64."""
    B = bf.shape[0]
    r32 = run_starts(prob, x0_SxF, w_SxN, np.float32, bar)
    f32 = np.where(np.isfinite(r32.f), r32.f, np.inf).reshape(B, -1)
    bound = np.where(np.isfinite(bf), bf * (1 + SCREEN_RTOL), np.inf)[:, None]
    promising = (np.isfinite(f32) & (f32 <= bound)).ravel()
    if not promising.any():
        return bx, bf
    if bar is not None:
        bar.add_total(int(promising.sum()))
    r = _run64(prob, r32.x[promising], w_SxN[promising], bar)
    owner = np.repeat(np.arange(B), f32.shape[1])[promising]
    f = np.where(np.isfinite(r.f), r.f, np.inf)
    bx, bf = bx.copy(), bf.copy()
    for j in range(f.size):  # each resample keeps the best of its fits
        if f[j] < bf[owner[j]]:
            bx[owner[j]], bf[owner[j]] = r.x[j], f[j]
    return bx, bf


def _bootstrap_starts(
    prob: Problem, ms: MultiStart, grid_all: np.ndarray, n_extra: int, seed: int
) -> np.ndarray:
    """Every resample's starts: the full-data optimum, then up to `n_extra` other local optima
    found on the full data, else random grid starts (seeded by `seed + 1`)."""
    rng = np.random.default_rng(seed + 1)
    n_rand = max(0, n_extra - ms.local_optima.shape[0])
    rand = grid_all[rng.choice(grid_all.shape[0], size=min(n_rand, grid_all.shape[0]), replace=False)]
    return np.vstack([ms.theta[list(prob.free_idx)][None, :], ms.local_optima[:n_extra], rand])


def _bootstrap_summary(
    law: Law, prob: Problem, best: tuple[np.ndarray, np.ndarray] | None, ci_level: float
) -> tuple[np.ndarray | None, int, dict[str, Interval], dict[str, float]]:
    """(public samples, failed resamples, percentile CIs, standard errors) from each resample's
    best fit (x, f); NaN CIs and SEs without a bootstrap."""
    ci = {k: NO_INTERVAL for k in law.param_names}
    se = {k: math.nan for k in law.param_names}
    if best is None:
        return None, 0, ci, se
    x, f = best
    samples = law.to_public(prob.full(x))
    bounds = validation.percentile_interval(samples[np.all(np.isfinite(samples), axis=1)], ci_level).T
    ci = {k: Interval(float(bounds[i, 0]), float(bounds[i, 1])) for i, k in enumerate(law.param_names)}
    finite = np.all(np.isfinite(samples), axis=1)
    se = {
        k: float(np.std(samples[finite, i], ddof=1)) if finite.sum() > 1 else math.nan
        for i, k in enumerate(law.param_names)
    }
    return samples, int(np.sum(~np.isfinite(f))), ci, se


def _refit_bar(law: Law, folds: FoldJobs | None, boot_x0: np.ndarray | None, n_resamples: int):
    """The progress bar of `refit` (analysis.core.progress: stderr, after 2 s, on a terminal): its
    total the fold refits and every resample's starts; the polished starts join it as they are
    picked."""
    n_folds = 0 if folds is None else len(folds.fit_masks)
    n_boot = 0 if boot_x0 is None else n_resamples
    n_fold_fits = 0 if folds is None else folds.x0.shape[0]
    total = n_fold_fits + n_boot * (0 if boot_x0 is None else boot_x0.shape[0])
    what = [f"{n_boot} bootstrap resamples"] if n_boot else []
    what += [f"{n_folds} forward-chaining folds"] if n_folds else []
    return progress.bar(total, f"fit {law.name}: {' + '.join(what) or 'refits'}", unit="fit")


def fit_points(law: Law, pts: data_mod.Points, opts: FitOptions | None = None) -> FitResult:
    """Fit `law` to validated points (see `fit_law` for the DataFrame entry point)."""
    opts = opts or FitOptions()
    bootstrap, seed, fixed = int(opts.bootstrap), opts.seed, opts.fixed
    prob = prepare(law, pts, fixed, opts.delta)
    grid_all = _starts(law, prob, opts.grid)
    ms = multistart(prob, grid_all, opts.precision)
    public = law.to_public(ms.theta)
    if not ms.converged:
        warnings.warn(
            f"law {law.name}: the best start did not clearly converge "
            f"({ms.status}, {ms.starts_at_optimum} starts at the optimum)"
        )
    folds = fold_jobs(prob, pts, ms, fixed, grid_all) if opts.prediction_intervals else None
    boot_x0 = _bootstrap_starts(prob, ms, grid_all, opts.bootstrap_starts, seed) if bootstrap else None
    with _refit_bar(law, folds, boot_x0, bootstrap) as bar:
        fold_best, boot_best = refit(prob, folds, boot_x0, bootstrap, seed, bar)
    perr = fold_error(prob, pts, ms, folds, *fold_best) if folds is not None else None
    samples, failed, ci, se = _bootstrap_summary(law, prob, boot_best, opts.ci_level)
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
        grid_starts=ms.grid_starts,
        n_polished=ms.n_polished,
        starts_at_optimum=ms.starts_at_optimum,
        converged=ms.converged,
        status=ms.status,
        columns=dict(pts.columns),
        fixed={k: float(v) for k, v in (fixed or {}).items()},
        delta=opts.delta,
        ci_level=opts.ci_level,
        seed=seed,
        flops_per_param_token=k_flops,
        input_ranges={k: Interval.of(v) for k, v in pts.inputs.items()},
        bootstrap_failed=failed,
        bootstrap_x0=None if boot_x0 is None else prob.full(boot_x0),
        prediction_error=perr,
        frontier=_frontier(law, prob, pts, public, folds, fold_best, bootstrap, seed, k_flops),
    )


def _frontier(
    law: Law,
    prob: Problem,
    pts: data_mod.Points,
    public: np.ndarray,
    folds: FoldJobs | None,
    fold_best: tuple[np.ndarray, np.ndarray] | None,
    bootstrap: int,
    seed: int,
    k: float,
) -> frontier_mod.Frontier | None:
    """The frontier predictor of a Chinchilla-form fit (`analysis.laws.frontier`) from its
    forward-chaining refits and its bootstrap's resample counts; None for any other law, or
    without folds (`prediction_intervals=False`)."""
    idx = chinchilla_index(law.param_names)
    if idx is None or folds is None or fold_best is None:
        return None
    N, D = np.asarray(pts.inputs["N"], float), np.asarray(pts.inputs["D"], float)
    C = np.asarray(pts.inputs["C"], float) if "C" in pts.inputs else k * N * D
    x, f = fold_best
    law_folds = [
        frontier_mod.LawFold(mask, law.to_public(prob.full(x[g]))[idx])
        for g, mask in enumerate(folds.fit_masks)
        if math.isfinite(f[g])
    ]
    return frontier_mod.estimate(
        C,
        np.asarray(pts.y, float),
        np.asarray(public, float)[idx],
        law_folds,
        lambda p, C_: closed_form_optimum(p, C_, k)["loss"],
        validation.bootstrap_counts(pts.n, bootstrap, seed) if bootstrap else None,
    )


def fit_law(
    df: pd.DataFrame | str,
    law: str | Law = LawName.CHINCHILLA,
    columns: Mapping[str, str] | None = None,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    holdout_above: float | None = None,
    weights: str | np.ndarray | None = None,
    fixed: Mapping[str, float] | None = None,
    grid: np.ndarray | None = None,
    delta: float = DEFAULT_DELTA,
    precision: Precision | str = Precision.AUTO,
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
    `points.choose_n_column`); recorded as `result.n_params`.
    """
    if isinstance(df, (str, bytes)) or hasattr(df, "__fspath__"):
        df = data_mod.read_table(df)
    law_obj = law if isinstance(law, Law) else get_law(law)
    opts = FitOptions(
        bootstrap=bootstrap,
        seed=seed,
        fixed=fixed,
        grid=grid,
        delta=delta,
        precision=precision,
        ci_level=ci_level,
        prediction_intervals=prediction_intervals,
    )
    fit, pts = _fit_table(df, law_obj, columns, weights, n_params, holdout_above, opts)
    while (fb := _untested(fit, pts, fixed)) is not None:  # a decay constant the runs never test
        note = (
            f"law {law_obj.name}: {fb.param} = {fb.value:.4g} is more than {repeated.UNTESTED_FACTOR:g}x "
            f"the largest repetition in the runs ({fb.max_repetition:.3g}): the data do not test it, and "
            f"it would decide every extrapolation; fitted {fb.to} instead (the same law without {fb.param})"
        )
        warnings.warn(note, data_mod.FitNotice, stacklevel=2)
        law_obj = get_law(fb.to)
        refit, pts = _fit_table(
            df, law_obj, columns, weights, n_params, holdout_above, dataclasses.replace(opts, grid=None)
        )
        fit = dataclasses.replace(refit, fallback=(*fit.fallback, fb))
    return fit


def _untested(
    fit: FitResult, pts: data_mod.Points, fixed: Mapping[str, float] | None
) -> repeated.Fallback | None:
    """`repeated.untested_decay` on a data-constrained fit's own runs `pts` (None for other laws
    and for a constant the user fixed)."""
    if str(fit.law_obj.name) not in repeated.FALLBACKS:
        return None
    fb = repeated.untested_decay(str(fit.law_obj.name), fit.params, *(pts.inputs[k] for k in "NDU"))
    return None if fb is None or fb.param in (fixed or {}) else fb


def _fit_table(
    df, law_obj: Law, columns, weights, n_params, holdout_above, opts: FitOptions
) -> tuple[FitResult, data_mod.Points]:
    """One law on the table's runs (below `holdout_above`, scored on the rest when given), and
    the points it was fitted on; the result records which N it used (`n_params`)."""
    columns, n_kind = data_mod.choose_n_column(df, law_obj, columns, n_params)
    pts = data_mod.resolve(df, law_obj.inputs, columns, weights)
    held = None
    if holdout_above is not None:
        pts, held = holdout.split(pts, holdout_above)
    fit = fit_points(law_obj, pts, opts)
    report = None
    if held is not None:
        band = fit.predict_interval(held.inputs)[1:] if fit.prediction_error is not None else None
        report = holdout.holdout_report(law_obj, fit.vector, held, holdout_above, band)
    kind = None if n_kind is None else NParams(n_kind)
    return dataclasses.replace(fit, holdout=report, n_params=kind), pts


def holdout_validate(
    df: pd.DataFrame | str,
    law: str | Law = LawName.CHINCHILLA,
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
