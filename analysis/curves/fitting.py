"""Loss curves under a learning-rate schedule: loading, schedule reconstruction, fit, forecast.

A curve is one run's loss at logged steps together with the learning rate at those steps. Both
loss-curve laws need the *per-step* schedule (sums of learning rates over steps), while logs hold
it only at logged steps, so the schedule is rebuilt:

- the rate logged at step s is the one used by the updates after s; between logged steps it is
  interpolated linearly (exact for linear decay, accurate to ~1e-3 relative per 128-step gap for
  cosine/exponential decay);
- a change between two logged steps with flat stretches on both sides is a step change (two-stage
  and step-decay schedules), applied right after the logged step that first shows the new rate;
- before the first logged step we assume a linear warm-up from 0 (the usual set-up, and what the
  public multi-power-law curves used); `warmup="constant"` assumes the first logged rate instead.

The warm-up counts in S1 (the area under the schedule, Luo et al.'s S1 + S_W) but not in the
annealing terms, which start from the first logged step (the paper's eta_0).

`fit_curve` fits a curve law on whole curves and/or the part of curves up to `fit_until`, and
predicts the rest of those curves and any other curves given. Errors are relative,
|pred - actual| / actual, per logged step.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from models.base import jsonio
from models.base.errors import AnalysisError
from analysis.laws.fitting import HUBER_DELTA, huber
from analysis.laws.lbfgs import CONVERGED_CODES, STATUS_NAMES, LBFGSConfig, minimize_batch
from analysis.curves.laws import CurveLaw, get_curve_law, start_grid
from analysis.runs import read_metrics


@dataclass(frozen=True)
class Curve:
    """One run's logged curve: strictly increasing steps, loss and learning rate at those steps."""

    name: str
    steps: np.ndarray
    loss: np.ndarray
    lr: np.ndarray
    warmup: str = "linear"

    def schedule(self) -> np.ndarray:
        """Per-step learning rate eta[tau] of the update that produced step tau (tau = 0..last step).

        The rate logged at step s drives the updates after s, so eta[tau] is the logged schedule
        (linearly interpolated) at tau - 1. A gap whose rate changes while the gaps on both sides
        are flat is a step change (two-stage / step-decay schedules): the old rate holds up to
        the logged step where the new one first appears.
        """
        s, lr = self.steps, self.lr
        T, t0 = int(s[-1]), int(s[0])
        eta = np.empty(T + 1)
        tau = np.arange(t0 + 1, T + 1)
        eta[t0 + 1:] = np.interp(tau - 1, s, lr)
        flat = np.isclose(lr[1:], lr[:-1], rtol=1e-9, atol=0.0)  # per gap (s[i], s[i+1]]
        for i in np.flatnonzero(~flat):
            before = i > 0 and flat[i - 1]
            after = i + 1 >= flat.size or flat[i + 1]
            if before and after:
                eta[s[i] + 1: s[i + 1] + 1] = lr[i]
        if self.warmup == "linear":
            eta[: t0 + 1] = lr[0] * np.arange(t0 + 1) / max(t0, 1)
        elif self.warmup == "constant":
            eta[: t0 + 1] = lr[0]
        else:
            raise AnalysisError(f"warmup must be 'linear' or 'constant', not {self.warmup!r}")
        return eta

    def until(self, step: int) -> "Curve":
        keep = self.steps <= step
        return Curve(self.name, self.steps[keep], self.loss[keep], self.lr[keep], self.warmup)

    def after(self, step: int) -> np.ndarray:
        return self.steps > step


def _curve_from_frame(df: pd.DataFrame, name: str, loss_col: str | None, warmup: str) -> Curve:
    cols = list(df.columns)
    lc = loss_col or next((c for c in ("loss", "eval_loss", "val_loss") if c in cols), None)
    missing = [c for c in ("step", "lr") if c not in cols] + ([] if lc and lc in cols else [loss_col or "loss"])
    if missing:
        raise AnalysisError(f"curve {name}: missing column(s) {', '.join(missing)}; it has {', '.join(map(str, cols))} "
                            "(a curve needs step, lr, loss)")
    d = df[["step", "lr", lc]].apply(pd.to_numeric, errors="coerce").dropna()
    if d.empty:
        raise AnalysisError(f"curve {name}: no rows with numeric step, lr and {lc}")
    d = d.sort_values("step").drop_duplicates("step", keep="last")
    steps, lr, loss = d["step"].to_numpy(float), d["lr"].to_numpy(float), d[lc].to_numpy(float)
    if np.any(~np.isfinite(loss)) or np.any(loss <= 0):
        raise AnalysisError(f"curve {name}: {lc} must be finite and > 0")
    if np.any(~np.isfinite(lr)) or np.any(lr < 0) or lr[0] <= 0:
        raise AnalysisError(f"curve {name}: lr must be finite, >= 0, and > 0 at the first logged step")
    if np.any(steps < 0) or np.any(steps != np.round(steps)):
        raise AnalysisError(f"curve {name}: steps must be non-negative integers")
    if steps.size < 2:
        raise AnalysisError(f"curve {name}: needs at least 2 logged steps")
    return Curve(name, steps.astype(np.int64), loss, lr, warmup)


def load_curve(source, name: str | None = None, loss_col: str | None = None, warmup: str = "linear") -> Curve:
    """A curve from a CSV (columns step, lr, loss), a run directory (metrics.jsonl; eval_loss
    rows when the run has evaluations, else train loss), or a DataFrame."""
    if isinstance(source, Curve):
        return source
    if isinstance(source, pd.DataFrame):
        return _curve_from_frame(source, name or "curve", loss_col, warmup)
    path = os.fspath(source)
    base = name or os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    if not os.path.exists(path):
        raise AnalysisError(f"file not found: {path}")
    if os.path.isdir(path):
        m = read_metrics(path)
        if m.empty:
            raise AnalysisError(f"{path}: no metrics.jsonl rows to build a curve from")
        if loss_col is None and "eval_loss" in m.columns and m["eval_loss"].notna().sum() >= 2:
            loss_col = "eval_loss"
        return _curve_from_frame(m, base, loss_col or "loss", warmup)
    if os.path.getsize(path) == 0:
        raise AnalysisError(f"{path} is empty; a curve CSV needs columns step, lr, loss")
    try:
        df = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise AnalysisError(f"cannot parse {path}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
    return _curve_from_frame(df, base, loss_col, warmup)


# --------------------------------------------------------------------------- features per curve


@dataclass(frozen=True)
class Features:
    """What a curve law needs at a set of evaluation steps, flattened over all curves.

    `pair_*` list (evaluation point j, annealing node k) pairs with k <= t_j: node k stands for a
    run of consecutive steps (at most `resolution` long, never straddling a logged step) whose
    learning-rate drops sum to `pair_deta`; `pair_logS` is log S_k(t_j), the learning-rate area
    from the node to t_j, and `pair_logeta` the log learning rate at the node.
    """

    n: int
    logS1: np.ndarray  # (n,) log of the area under the schedule up to t_j (warm-up included)
    S2: np.ndarray  # (n,) Tissue et al.'s annealing area (momentum form)
    pair_j: np.ndarray
    pair_deta: np.ndarray
    pair_logeta: np.ndarray
    pair_logS: np.ndarray
    any_decay: bool


def features(curves_eval: Sequence[tuple[Curve, np.ndarray]], resolution: int = 32, tissue_lambda: float = 0.999) -> Features:
    """Features at evaluation steps `t` of each curve (t must be logged steps of that curve)."""
    logS1, S2, pj, pdeta, plogeta, plogS = [], [], [], [], [], []
    offset, any_decay = 0, False
    for curve, t in curves_eval:
        eta = curve.schedule()
        cum = np.cumsum(eta)
        t = np.asarray(t, dtype=np.int64)
        logS1.append(np.log(cum[t]))
        t0 = int(curve.steps[0])
        # Annealing from the first logged step on: drops d_k = eta_{k-1} - eta_k for k > t0.
        d = np.zeros_like(eta)
        d[t0 + 1:] = eta[t0:-1] - eta[t0 + 1:]
        # Tissue et al.: m_i = lambda m_{i-1} + d_i ; S2(s) = sum_{i<=s} m_i.
        from scipy.signal import lfilter

        m = lfilter([1.0], [1.0, -tissue_lambda], d)
        S2.append(np.cumsum(m)[t])
        # Nodes: split each gap between logged steps into chunks of <= resolution steps.
        edges = curve.steps[curve.steps >= t0]
        nodes_k, nodes_w = [], []
        csum_d = np.concatenate([[0.0], np.cumsum(d)])  # csum_d[i] = sum d[:i]
        for a, b in zip(edges[:-1], edges[1:]):
            n_chunks = max(1, int(math.ceil((b - a) / resolution)))
            bounds = np.linspace(a, b, n_chunks + 1).round().astype(np.int64)  # chunk = steps (lo, hi]
            lo, hi = bounds[:-1], bounds[1:]
            w = csum_d[hi + 1] - csum_d[lo + 1]
            k = (lo + 1 + hi) // 2
            keep = w != 0
            nodes_k.append(k[keep])
            nodes_w.append(w[keep])
        k = np.concatenate(nodes_k) if nodes_k else np.zeros(0, np.int64)
        w = np.concatenate(nodes_w) if nodes_w else np.zeros(0)
        if k.size:
            any_decay |= bool(np.any(w[k <= t.max()] > 0))
            J, K = np.meshgrid(np.arange(t.size), np.arange(k.size), indexing="ij")
            valid = k[K] <= t[J]
            J, K = J[valid], K[valid]
            S = cum[t[J]] - cum[k[K] - 1]
            eta_k = np.maximum(eta[k[K]], 1e-12 * np.max(eta))
            pj.append(J + offset)
            pdeta.append(w[K])
            plogeta.append(np.log(eta_k))
            plogS.append(np.log(np.maximum(S, 1e-300)))
        offset += t.size
    cat = lambda xs, dt=float: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    return Features(
        n=offset, logS1=np.concatenate(logS1), S2=np.concatenate(S2), pair_j=cat(pj, np.int64),
        pair_deta=cat(pdeta), pair_logeta=cat(plogeta), pair_logS=cat(plogS), any_decay=any_decay,
    )


# --------------------------------------------------------------------------------------- fitting

_CFG = LBFGSConfig(max_evals=4000, ftol=1e-13)


def _objective(law, free_idx: tuple[int, ...], delta: float, n: int):
    key = (law.name, free_idx, delta, n)
    if key not in _OBJECTIVES:
        idx = jnp.asarray(free_idx)

        def f(theta_free, theta_full, F, logy):
            theta = theta_full.astype(theta_free.dtype).at[idx].set(theta_free)
            pred = law.predict(jnp.exp(theta), F, n)
            r = logy - jnp.log(jnp.where(pred > 0, pred, jnp.nan))
            return jnp.sum(huber(r, delta))

        _OBJECTIVES[key] = f
    return _OBJECTIVES[key]


_OBJECTIVES: dict = {}


def _feature_dict(F: Features) -> dict:
    return {k: jnp.asarray(getattr(F, k)) for k in ("logS1", "S2", "pair_j", "pair_deta", "pair_logeta", "pair_logS")}


def _errors(pred: np.ndarray, actual: np.ndarray) -> dict:
    rel = np.abs(pred - actual) / actual
    return {"mean_rel_error": float(np.mean(rel)), "max_rel_error": float(np.max(rel)),
            "final_loss_pred": float(pred[-1]), "final_loss_actual": float(actual[-1]), "n_points": int(rel.size)}


@dataclass
class CurveFitResult:
    """A fitted loss-curve law, its convergence report and its predictions."""

    law: str
    param_names: tuple[str, ...]
    params: dict[str, float]
    objective: float
    grad_norm: float
    converged: bool
    status: str
    n_starts: int
    starts_at_optimum: int
    n_points: int
    fitted: dict[str, dict]  # curve name -> {"until": step or None, errors on the fitted points}
    predictions: dict[str, dict] = field(default_factory=dict)
    fixed: dict[str, float] = field(default_factory=dict)
    resolution: int = 32

    def predict(self, curve, steps: np.ndarray | None = None) -> np.ndarray:
        """Predicted loss of `curve` (a Curve, CSV path or run dir) at `steps` (default: its logged steps)."""
        curve = load_curve(curve)
        t = curve.steps if steps is None else np.asarray(steps, dtype=np.int64)
        if np.any(t > curve.steps[-1]) or np.any(t < curve.steps[0]):
            raise AnalysisError(f"curve {curve.name}: steps must lie within its logged schedule "
                                f"[{curve.steps[0]}, {curve.steps[-1]}]; give the planned schedule to forecast further")
        F = features([(curve, t)], self.resolution)
        law = get_curve_law(self.law)
        p = np.array([self.params[k] for k in self.param_names])
        with jax.enable_x64(True):
            return np.asarray(law.predict(jnp.asarray(p), _feature_dict(F), F.n))

    def to_dict(self) -> dict:
        return {
            "law": self.law, "param_names": list(self.param_names), "params": dict(self.params),
            "objective": self.objective, "grad_norm": self.grad_norm, "converged": self.converged,
            "status": self.status, "n_starts": self.n_starts, "starts_at_optimum": self.starts_at_optimum,
            "n_points": self.n_points, "fixed": dict(self.fixed), "fitted": self.fitted,
            "predictions": self.predictions, "huber_delta": HUBER_DELTA, "resolution": self.resolution,
        }

    def to_json(self, path: str | None = None) -> str:
        """Strict JSON (NaN and inf written as null); written to `path` (atomically; `-` =
        stdout) when given."""
        obj = self.to_dict()
        if path is not None:
            jsonio.write_json(path, obj)
        return jsonio.dumps(obj, indent=2)


def fit_curve(
    fit: Sequence,
    law: str = "mpl",
    predict: Sequence = (),
    fit_until: int | None = None,
    fixed: Mapping[str, float] | None = None,
    grid: np.ndarray | None = None,
    resolution: int = 32,
    delta: float = HUBER_DELTA,
) -> CurveFitResult:
    """Fit a loss-curve law on `fit` curves (paths, run dirs, DataFrames or Curves) and predict.

    fit_until: only steps <= fit_until of the fitted curves enter the fit; their later steps are
    predicted (forecasting). predict: further curves predicted in full. The result's
    `predictions` maps curve name -> mean/max relative error and final loss (predicted, actual).
    """
    claw = get_curve_law(law)
    curves = [load_curve(c) for c in fit]
    others = [load_curve(c) for c in predict]
    if not curves:
        raise AnalysisError("fit_curve needs at least one curve to fit")
    if resolution < 1:
        raise AnalysisError("resolution must be >= 1 step")
    names = [c.name for c in curves + others]
    if len(set(names)) != len(names):
        raise AnalysisError(f"curve names must be unique, got {names}; rename the files")
    fit_parts = _fit_parts(curves, fit_until)
    F = features(fit_parts, resolution)
    logy = np.log(np.concatenate([c.loss[np.isin(c.steps, t)] for c, t in fit_parts]))
    fixed = _check_fixed(claw, law, dict(fixed or {}), F)
    free_idx = tuple(i for i, k in enumerate(claw.param_names) if k not in fixed)
    if F.n < len(free_idx):
        raise AnalysisError(f"{F.n} fitted points for {len(free_idx)} free parameters of law {law}")
    theta_full = np.zeros(len(claw.param_names))
    for k, v in fixed.items():
        theta_full[claw.param_names.index(k)] = np.log(v)
    starts = _log_starts(claw, grid, logy, F)[:, list(free_idx)]
    fun = _objective(claw, free_idx, delta, F.n)
    with jax.enable_x64(True):
        args = (jnp.asarray(theta_full), _feature_dict(F), jnp.asarray(logy))
        r = minimize_batch(fun, starts, args, cfg=_CFG, slots=64, round_evals=32)
    f = np.where(np.isfinite(r.f), r.f, np.inf)
    i = int(np.argmin(f))
    if not np.isfinite(f[i]):
        raise AnalysisError(f"law {law}: the objective is not finite at any start; check the curves")
    theta = theta_full.copy()
    theta[list(free_idx)] = r.x[i]
    result = CurveFitResult(
        law=law, param_names=claw.param_names, params={k: float(np.exp(theta[j])) for j, k in enumerate(claw.param_names)},
        objective=float(f[i]), grad_norm=float(r.grad_norm[i]), converged=bool(int(r.status[i]) in CONVERGED_CODES),
        status=STATUS_NAMES[int(r.status[i])], n_starts=starts.shape[0],
        starts_at_optimum=int(np.sum(f <= f[i] + 1e-6 * abs(f[i]))),
        n_points=F.n, fitted={}, fixed={k: float(v) for k, v in fixed.items()}, resolution=resolution,
    )
    _attach_errors(result, fit_parts, others, fit_until)
    return result


def _fit_parts(curves: list[Curve], fit_until: int | None) -> list[tuple[Curve, np.ndarray]]:
    """(curve, its fitted steps) pairs: all logged steps, or those at or before `fit_until`."""
    parts = []
    for c in curves:
        t = c.steps if fit_until is None else c.steps[c.steps <= fit_until]
        if t.size < 2:
            raise AnalysisError(f"curve {c.name}: fewer than 2 logged steps at or before --fit-until {fit_until}")
        parts.append((c, t))
    return parts


def _check_fixed(claw: CurveLaw, law: str, fixed: dict[str, float], F) -> dict[str, float]:
    """Validate the fixed parameters, and that the annealing terms are identifiable: they are
    only determined when the learning rate decreases somewhere in the fitted steps."""
    unknown = set(fixed) - set(claw.param_names)
    if unknown:
        raise AnalysisError(f"cannot fix {sorted(unknown)}: law {law} has parameters {', '.join(claw.param_names)}")
    if any(not v > 0 for v in fixed.values()):
        raise AnalysisError("fixed curve-law parameters must be > 0")
    if not F.any_decay and any(p not in fixed for p in claw.anneal_params):
        raise AnalysisError(
            f"law {law} cannot be identified: the learning rate never decreases in the fitted steps, so "
            f"{', '.join(claw.anneal_params)} are undetermined; fit on a curve with LR decay or fix them (--fix)"
        )
    return fixed


def _log_starts(claw: CurveLaw, grid: np.ndarray | None, logy: np.ndarray, F) -> np.ndarray:
    """(S, P) log start points: the law's data-scaled grid, or the user's positive `grid`."""
    starts = start_grid(claw, np.exp(logy), F.logS1) if grid is None else np.atleast_2d(np.asarray(grid, float))
    if starts.shape[1] != len(claw.param_names) or np.any(starts <= 0):
        raise AnalysisError(f"curve-law starts must be positive rows of {', '.join(claw.param_names)}")
    return np.log(starts)


def _attach_errors(result: CurveFitResult, fit_parts, others: list[Curve], fit_until: int | None) -> None:
    """Per-curve errors: in-fit steps (`fitted`), forecast steps after `fit_until` and the
    curves only predicted (`predictions`)."""
    for c, t in fit_parts:
        pred = result.predict(c)
        inside = np.isin(c.steps, t)
        result.fitted[c.name] = {"until": None if fit_until is None else int(fit_until), **_errors(pred[inside], c.loss[inside])}
        if (~inside).any():
            result.predictions[c.name] = {"from_step": int(c.steps[~inside][0]), **_errors(pred[~inside], c.loss[~inside])}
    for c in others:
        result.predictions[c.name] = _errors(result.predict(c), c.loss)
