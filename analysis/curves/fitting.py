"""Fit a loss-curve law on whole curves or their first steps, forecast the rest with 90% intervals.

`fit_curve` fits a curve law (`laws.py`) on the fitted curves' points from their learning-rate
peak on (`Curve.law_steps`; up to `fit_until` when given) with Luo et al.'s objective (Huber on
log loss, `optimize.py`), predicts the rest of those curves and every other curve given, and
attaches to every prediction a 90% interval calibrated on the fit's own leave-one-curve-out and
early-part forecasts (`intervals.py`). Errors are relative, |pred - actual| / actual, per logged
step.

Loading curves and rebuilding their schedules is `data.py`; the law inputs are `features.py`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from analysis.core.lbfgs import CONVERGED_CODES, STATUS_NAMES
from analysis.curves import protocol as authors
from analysis.curves.data import Curve, load_curve
from analysis.curves.features import Features, features
from analysis.curves.intervals import IntervalModel, RefitPlan, calibrate, plan_refits
from analysis.curves.laws import CurveLaw, get_curve_law, start_grid
from analysis.curves.optimize import Problem, evaluate, minimize
from analysis.laws.fitting import HUBER_DELTA
from models.base import jsonio
from models.base.errors import AnalysisError

__all__ = ["Curve", "CurveFitResult", "Features", "FitProtocol", "features", "fit_curve", "load_curve"]


class FitProtocol(enum.StrEnum):
    """How the parameters are found (`fit-curve --protocol`, JSON `protocol`)."""

    OPTIMUM = "optimum"  # L-BFGS to the objective's minimum from a data-scaled grid
    # Luo et al.'s code (`protocol.py`): warm-up rises in the drop sum, their start, 200
    # early-stopped AdamW steps
    AUTHORS = "authors"
    MULTISTART = "multistart"  # theirs from every (C, beta, gamma) of MULTISTART_GRID, lowest objective


PROTOCOLS = tuple(p.value for p in FitProtocol)
AUTHORS_PROTOCOLS = (FitProtocol.AUTHORS, FitProtocol.MULTISTART)


def default_protocol(law: str, fixed: Mapping[str, float] | None = None, grid=None) -> str:
    """The protocol when none is given: multistart for mpl (on Luo et al.'s 25M / 100M sets its
    forecasts' mean error is 0.104% / 0.114% against 0.139% / 0.177% at the objective's optimum:
    the early-stopped fit extrapolates better, docs/analysis.md), optimum for tissue and for fits
    that hold parameters fixed or pass a start grid (which the AdamW protocols do not take)."""
    if law == "mpl" and not fixed and grid is None:
        return FitProtocol.MULTISTART
    return FitProtocol.OPTIMUM


def _errors(pred: np.ndarray, actual: np.ndarray) -> dict:
    rel = np.abs(pred - actual) / actual
    return {
        "mean_rel_error": float(np.mean(rel)),
        "max_rel_error": float(np.max(rel)),
        "final_loss_pred": float(pred[-1]),
        "final_loss_actual": float(actual[-1]),
        "n_points": int(rel.size),
    }


def _interval_summary(
    t: np.ndarray, pred: np.ndarray, actual: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> dict:
    """Coverage, mean relative width and the per-point bounds of one forecast curve."""
    return {
        "interval_coverage": float(np.mean((actual >= lo) & (actual <= hi))),
        "interval_mean_rel_width": float(np.mean((hi - lo) / pred)),
        "interval_final": [float(lo[-1]), float(hi[-1])],
        "step": [int(s) for s in t],
        "predicted": pred.tolist(),
        "interval_lo": lo.tolist(),
        "interval_hi": hi.tolist(),
    }


@dataclass(frozen=True)
class CurveFitResult:
    """A fitted loss-curve law, its convergence report, its predictions and their intervals."""

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
    intervals: IntervalModel | None = None
    protocol: str = FitProtocol.OPTIMUM.value

    def _target(self, curve, steps) -> tuple[Curve, np.ndarray, Features]:
        curve = load_curve(curve)
        t = curve.law_steps() if steps is None else np.asarray(steps, dtype=np.int64)
        if np.any(t > curve.steps[-1]) or np.any(t < 0):
            raise AnalysisError(
                f"curve {curve.name}: steps must lie within its logged schedule "
                f"[0, {curve.steps[-1]}]; give the planned schedule to forecast further"
            )
        F = features([(curve, t)], self.resolution, warmup_rises=self.protocol in AUTHORS_PROTOCOLS)
        return curve, t, F

    def predict(self, curve, steps=None) -> np.ndarray:
        """Predicted loss of `curve` (a Curve, CSV path or run dir) at `steps` (default: its
        logged steps from the learning-rate peak on)."""
        _, _, F = self._target(curve, steps)
        return evaluate(get_curve_law(self.law), np.array([self.params[k] for k in self.param_names]), F)

    def predict_interval(self, curve, steps=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, 90% lower bound, upper bound); the bounds are NaN without a calibration."""
        curve, t, F = self._target(curve, steps)
        law = get_curve_law(self.law)
        pred = evaluate(law, np.array([self.params[k] for k in self.param_names]), F)
        if self.intervals is None:
            return pred, np.full_like(pred, np.nan), np.full_like(pred, np.nan)
        lo, hi = self.intervals.bounds(pred, curve, t)
        return pred, lo, hi

    def to_dict(self) -> dict:
        return {
            "law": self.law,
            "protocol": self.protocol,
            "param_names": list(self.param_names),
            "params": dict(self.params),
            "objective": self.objective,
            "grad_norm": self.grad_norm,
            "converged": self.converged,
            "status": self.status,
            "n_starts": self.n_starts,
            "starts_at_optimum": self.starts_at_optimum,
            "n_points": self.n_points,
            "fixed": dict(self.fixed),
            "fitted": self.fitted,
            "predictions": self.predictions,
            "huber_delta": HUBER_DELTA,
            "resolution": self.resolution,
            "interval_model": None if self.intervals is None else self.intervals.to_dict(),
        }

    def to_json(self, path: str | None = None) -> str:
        """Strict JSON (NaN and inf written as null); written to `path` (atomically; `-` =
        stdout) when given."""
        obj = self.to_dict()
        if path is not None:
            jsonio.write_json(path, obj)
        return jsonio.dumps(obj, indent=2)


def _fit_parts(curves: list[Curve], fit_until: int | None) -> list[tuple[Curve, np.ndarray]]:
    """(curve, its fitted steps) pairs: the law steps (from the peak on), up to `fit_until`."""
    parts = []
    for c in curves:
        t = c.law_steps()
        if fit_until is not None:
            t = t[t <= fit_until]
        if t.size < 2:
            where = "" if fit_until is None else f" at or before --fit-until {fit_until}"
            raise AnalysisError(
                f"curve {c.name}: fewer than 2 logged steps from the learning-rate peak on{where}"
            )
        parts.append((c, t))
    return parts


def _check_fixed(claw: CurveLaw, law: str, fixed: dict[str, float], F: Features) -> dict[str, float]:
    """Validate the fixed parameters, and that the annealing terms are identifiable: they are
    only determined when the learning rate decreases somewhere in the fitted steps."""
    unknown = set(fixed) - set(claw.param_names)
    if unknown:
        raise AnalysisError(
            f"cannot fix {sorted(unknown)}: law {law} has parameters {', '.join(claw.param_names)}"
        )
    if any(not v > 0 for v in fixed.values()):
        raise AnalysisError("fixed curve-law parameters must be > 0")
    if not F.any_decay and any(p not in fixed for p in claw.anneal_params):
        raise AnalysisError(
            f"law {law} cannot be identified: the learning rate never decreases in the fitted steps, so "
            f"{', '.join(claw.anneal_params)} are undetermined; "
            f"fit on a curve with LR decay or fix them (--fix)"
        )
    return fixed


def _log_starts(claw: CurveLaw, grid: np.ndarray | None, logy: np.ndarray, F: Features) -> np.ndarray:
    """(S, P) log start points: the law's data-scaled grid, or the user's positive `grid`."""
    starts = (
        start_grid(claw, np.exp(logy), F.logS1) if grid is None else np.atleast_2d(np.asarray(grid, float))
    )
    if starts.shape[1] != len(claw.param_names) or np.any(starts <= 0):
        raise AnalysisError(f"curve-law starts must be positive rows of {', '.join(claw.param_names)}")
    return np.log(starts)


def _problem(
    claw: CurveLaw,
    parts,
    fixed: Mapping[str, float] | None,
    resolution: int,
    delta: float,
    warmup_rises: bool = False,
) -> Problem:
    """The fit's features, log losses and fixed/free parameters, validated."""
    F = features(parts, resolution, warmup_rises=warmup_rises)
    logy = np.log(np.concatenate([c.loss_at(t) for c, t in parts]))
    fixed = _check_fixed(claw, claw.name, dict(fixed or {}), F)
    free_idx = tuple(i for i, k in enumerate(claw.param_names) if k not in fixed)
    if F.n < len(free_idx):
        raise AnalysisError(f"{F.n} fitted points for {len(free_idx)} free parameters of law {claw.name}")
    theta_full = np.zeros(len(claw.param_names))
    for k, v in fixed.items():
        theta_full[claw.param_names.index(k)] = np.log(v)
    return Problem(claw, F, logy, theta_full, free_idx, delta)


def _load_all(fit: Sequence, predict: Sequence, resolution: int) -> tuple[list[Curve], list[Curve]]:
    curves = [load_curve(c) for c in fit]
    others = [load_curve(c) for c in predict]
    if not curves:
        raise AnalysisError("fit_curve needs at least one curve to fit")
    if resolution < 1:
        raise AnalysisError("resolution must be >= 1 step")
    names = [c.name for c in curves + others]
    if len(set(names)) != len(names):
        raise AnalysisError(f"curve names must be unique, got {names}; rename the files")
    return curves, others


def fit_curve(
    fit: Sequence,
    law: str = "mpl",
    predict: Sequence = (),
    fit_until: int | None = None,
    fixed: Mapping[str, float] | None = None,
    grid: np.ndarray | None = None,
    resolution: int = 32,
    delta: float = HUBER_DELTA,
    intervals: bool = True,
    protocol: str | None = None,
) -> CurveFitResult:
    """Fit a loss-curve law on `fit` curves (paths, run dirs, DataFrames or Curves) and predict.

    fit_until: only steps <= fit_until of the fitted curves enter the fit; their later steps are
    predicted (forecasting). predict: further curves predicted in full. The result's
    `predictions` maps curve name -> mean/max relative error, final loss (predicted, actual) and,
    with `intervals` (default), the 90% interval per point and its coverage. protocol:
    `PROTOCOLS`; "authors" (law mpl only) follows Luo et al.'s code, calibration refits included;
    None: `default_protocol`.
    """
    claw = get_curve_law(law)
    chosen = default_protocol(law, fixed, grid) if protocol is None else protocol
    protocol = _check_protocol(chosen, law, fixed, grid)
    curves, others = _load_all(fit, predict, resolution)
    parts = _fit_parts(curves, fit_until)
    problem = _problem(claw, parts, fixed, resolution, delta, warmup_rises=protocol in AUTHORS_PROTOCOLS)
    if protocol in AUTHORS_PROTOCOLS:
        base = _fit_authors(problem, parts, intervals, resolution, protocol)
        fitted, predictions = _score(base, parts, others, fit_until)
        return replace(base, fitted=fitted, predictions=predictions)
    starts = _log_starts(claw, grid, problem.logy, problem.F)[:, list(problem.free_idx)]
    plan = plan_refits(problem, parts, starts) if intervals else None
    r = minimize(problem, *_with_refits(problem, starts, plan))
    S = starts.shape[0]
    f = np.where(np.isfinite(r.f[:S]), r.f[:S], np.inf)
    i = int(np.argmin(f))
    if not np.isfinite(f[i]):
        raise AnalysisError(f"law {law}: the objective is not finite at any start; check the curves")
    params = problem.params(r.x[i])
    model = calibrate(problem, parts, plan, r.x[S:], r.f[S:], params) if plan is not None else None
    base = CurveFitResult(
        law=law,
        param_names=claw.param_names,
        params={k: float(v) for k, v in zip(claw.param_names, params)},
        objective=float(f[i]),
        grad_norm=float(r.grad_norm[i]),
        converged=bool(int(r.status[i]) in CONVERGED_CODES),
        status=STATUS_NAMES[int(r.status[i])],
        n_starts=starts.shape[0],
        starts_at_optimum=int(np.sum(f <= f[i] + 1e-6 * abs(f[i]))),
        n_points=problem.F.n,
        fitted={},
        fixed={k: float(v) for k, v in (fixed or {}).items()},
        resolution=resolution,
        intervals=model,
    )
    fitted, predictions = _score(base, parts, others, fit_until)
    return replace(base, fitted=fitted, predictions=predictions)


def _check_protocol(protocol: str, law: str, fixed, grid) -> FitProtocol:
    """`protocol` as a FitProtocol that can fit `law` (one-line errors otherwise)."""
    if protocol not in PROTOCOLS:
        raise AnalysisError(f"unknown fit protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    protocol = FitProtocol(protocol)
    if protocol in AUTHORS_PROTOCOLS and law != "mpl":
        raise AnalysisError(
            f"protocol {protocol} is Luo et al.'s multi-power-law fit; it needs law mpl, not {law}"
        )
    if protocol in AUTHORS_PROTOCOLS and (fixed or grid is not None):
        raise AnalysisError(
            f"protocol {protocol} fits every parameter from the authors' start; drop --fix / grid"
        )
    return protocol


def _fit_authors(problem: Problem, parts, intervals: bool, resolution: int, protocol: str) -> CurveFitResult:
    """Luo et al.'s protocol (`protocol.py`), or ours on top of it (multistart): the main fit and
    every calibration refit run their start and their AdamW loop (K runs each with multistart,
    the lowest objective kept), one row of point weights per run, all runs in one vmapped loop."""
    plan = plan_refits(problem, parts, np.zeros((1, len(problem.free_idx)))) if intervals else None
    splits = plan.splits if plan is not None else ()
    W = np.vstack([np.ones(problem.F.n)] + [s.train.astype(float) for s in splits])
    anneal = authors.MULTISTART_GRID if protocol == FitProtocol.MULTISTART else (authors.ANNEAL_START,)
    K = len(anneal)
    p0 = authors.starts(problem, parts, W, anneal)
    r = authors.adamw(problem, p0, np.repeat(W, K, axis=0))
    f = r.f.reshape(len(W), K)
    pick = np.arange(len(W)) * K + np.argmin(f, axis=1)  # the lowest objective of each row's K runs
    i = int(pick[0])
    if not np.isfinite(r.f[i]):
        raise AnalysisError(
            f"law mpl, protocol {protocol}: the fit ends at a non-finite objective; check the curves"
        )
    model = None
    if splits:
        logp = lambda p: np.log(np.where(p > 0, p, 1.0))  # noqa: E731  (rows with f = inf are skipped)
        refit_plan = RefitPlan(splits, logp(p0[pick[1:]]), W[1:], 1)
        model = calibrate(problem, parts, refit_plan, logp(r.params[pick[1:]]), r.f[pick[1:]], r.params[i])
    stop = int(r.stop[i])
    return CurveFitResult(
        law=problem.law.name,
        param_names=problem.law.param_names,
        params={k: float(v) for k, v in zip(problem.law.param_names, r.params[i])},
        objective=float(r.f[i]),
        grad_norm=float(r.grad_norm[i]),
        converged=stop in (1, 2),
        status=f"AdamW stopped after {int(r.steps[i])} steps: {authors.STOP_NAMES[stop]}",
        n_starts=K,
        starts_at_optimum=int(np.sum(f[0] <= r.f[i] * (1 + 1e-6))),
        n_points=problem.F.n,
        fitted={},
        resolution=resolution,
        intervals=model,
        protocol=protocol.value,
    )


def _with_refits(
    problem: Problem, starts: np.ndarray, plan: RefitPlan | None
) -> tuple[np.ndarray, np.ndarray]:
    """Starts and point weights of one batched minimisation: the main fit's starts (all points
    weighted 1), then the calibration refits'."""
    w = np.ones((starts.shape[0], problem.F.n))
    if plan is None or not plan.splits:
        return starts, w
    return np.vstack([starts, plan.starts]), np.vstack([w, plan.weights])


def _score(result: CurveFitResult, parts, others: list[Curve], fit_until: int | None) -> tuple[dict, dict]:
    """Per-curve errors: in-fit steps (`fitted`), forecast steps after `fit_until` and the
    curves only predicted (`predictions`, with their intervals)."""
    fitted, predictions = {}, {}
    for c, t in parts:
        steps = c.law_steps()
        pred, lo, hi = result.predict_interval(c, steps)
        inside = np.isin(steps, t)
        fitted[c.name] = {
            "until": None if fit_until is None else int(fit_until),
            **_errors(pred[inside], c.loss_at(steps[inside])),
        }
        if (~inside).any():
            rest = ~inside
            predictions[c.name] = {
                "from_step": int(steps[rest][0]),
                **_forecast(steps[rest], pred[rest], c, lo[rest], hi[rest]),
            }
    for c in others:
        steps = c.law_steps()
        pred, lo, hi = result.predict_interval(c, steps)
        predictions[c.name] = _forecast(steps, pred, c, lo, hi)
    return fitted, predictions


def _forecast(t, pred, curve: Curve, lo, hi) -> dict:
    actual = curve.loss_at(t)
    out = _errors(pred, actual)
    if np.all(np.isfinite(lo)):
        out.update(_interval_summary(t, pred, actual, lo, hi))
    return out
