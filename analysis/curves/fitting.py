"""`fit_curve`: the multi-power law on whole curves or their first steps (`fit_until`), by the
multistart protocol (`protocol.py`; L-BFGS to the optimum when parameters are held fixed), with
Luo et al.'s objective on the points from each curve's learning-rate peak on; it predicts the rest
of those curves and every other curve given, each point with a 90% interval calibrated on the fit's
own refits (`intervals.py`). Errors are relative, |pred - actual| / actual, per logged step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from analysis.core.lbfgs import CONVERGED_CODES, STATUS_NAMES
from analysis.curves import protocol as multistart
from analysis.curves.data import Curve, load_curve
from analysis.curves.features import Features, features
from analysis.curves.intervals import IntervalModel, RefitPlan, calibrate, plan_refits
from analysis.curves.laws import MPL, Problem, evaluate, get_curve_law, minimize, start_grid
from analysis.laws.fitting import HUBER_DELTA
from models.base.errors import AnalysisError

__all__ = ["Curve", "CurveFitResult", "Features", "FitProtocol", "features", "fit_curve", "load_curve"]


class FitProtocol(enum.StrEnum):
    """How the parameters were found (JSON `protocol`)."""

    # the default: Luo et al.'s AdamW fit from 27 annealing starts, the lowest objective (`protocol.py`)
    MULTISTART = "multistart"
    # with held parameters (`--fix`, which AdamW does not take): L-BFGS to the objective's optimum
    LBFGS = "lbfgs"


PROTOCOLS = (FitProtocol.MULTISTART.value,)  # what `fit-curve --search` accepts


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
    """A fitted multi-power law, its convergence report, its predictions and their intervals."""

    params: dict[str, float]
    objective: float
    grad_norm: float
    converged: bool
    status: str
    n_starts: int
    starts_at_optimum: int
    n_points: int
    law: str = MPL.name
    param_names: tuple[str, ...] = MPL.param_names
    fitted: dict[str, dict] = field(default_factory=dict)  # curve -> {"until": step or None, errors}
    predictions: dict[str, dict] = field(default_factory=dict)
    fixed: dict[str, float] = field(default_factory=dict)
    resolution: int = 32
    intervals: IntervalModel | None = None
    protocol: str = FitProtocol.MULTISTART.value
    curves: tuple[Curve, ...] = field(default=(), repr=False)  # the fitted curves, then the predicted

    def _target(self, curve, steps) -> tuple[Curve, np.ndarray, Features]:
        curve = load_curve(curve)
        t = curve.law_steps() if steps is None else np.asarray(steps, dtype=np.int64)
        if np.any(t > curve.steps[-1]) or np.any(t < 0):
            raise AnalysisError(
                f"curve {curve.name}: steps must lie within its logged schedule "
                f"[0, {curve.steps[-1]}]; give the planned schedule to forecast further"
            )
        warmup_rises = self.protocol == FitProtocol.MULTISTART
        return curve, t, features([(curve, t)], self.resolution, warmup_rises=warmup_rises)

    def predict(self, curve, steps=None) -> np.ndarray:
        """Predicted loss of `curve` (a Curve, CSV path or run dir) at `steps` (default: its
        logged steps from the learning-rate peak on)."""
        return self.predict_interval(curve, steps)[0]

    def predict_interval(self, curve, steps=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, 90% lower bound, upper bound); the bounds are NaN without a calibration."""
        curve, t, F = self._target(curve, steps)
        pred = evaluate(MPL, np.array([self.params[k] for k in self.param_names]), F)
        if self.intervals is None:
            return pred, np.full_like(pred, np.nan), np.full_like(pred, np.nan)
        return (pred, *self.intervals.bounds(pred, curve, t))

    def summary(self) -> str:
        p = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        runs = (
            f"lowest of {self.n_starts} AdamW run(s)"
            if self.protocol == FitProtocol.MULTISTART  # early-stopped by design: no optimum
            else f"{self.starts_at_optimum}/{self.n_starts} starts at the optimum"
        )
        head = f"law {self.law} (protocol {self.protocol}): {p}"
        return f"{head}\n  objective {self.objective:.6g}, {runs}; {self.status}"

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


def _fit_parts(curves: list[Curve], fit_until: int | None) -> list[tuple[Curve, np.ndarray]]:
    """(curve, its fitted steps) pairs: the law steps (from the peak on), up to `fit_until`."""
    parts = []
    for c in curves:
        t = c.law_steps()
        t = t if fit_until is None else t[t <= fit_until]
        if t.size < 2:
            where = "" if fit_until is None else f" at or before --fit-until {fit_until}"
            raise AnalysisError(
                f"curve {c.name}: fewer than 2 logged steps from the learning-rate peak on{where}"
            )
        parts.append((c, t))
    return parts


def problem(
    parts, fixed: Mapping[str, float] | None = None, resolution: int = 32, warmup_rises: bool = False
) -> Problem:
    """The fit's features, log losses and fixed/free parameters, validated: the annealing terms
    are only identified when the learning rate decreases somewhere in the fitted steps."""
    F = features(parts, resolution, warmup_rises=warmup_rises)
    logy = np.log(np.concatenate([c.loss_at(t) for c, t in parts]))
    fixed = dict(fixed or {})
    if set(fixed) - set(MPL.param_names):
        raise AnalysisError(
            f"cannot fix {sorted(set(fixed) - set(MPL.param_names))}: law mpl has parameters "
            f"{', '.join(MPL.param_names)}"
        )
    if any(not v > 0 for v in fixed.values()):
        raise AnalysisError("fixed curve-law parameters must be > 0")
    if not F.any_decay and any(p not in fixed for p in MPL.anneal_params):
        raise AnalysisError(
            "law mpl cannot be identified: the learning rate never decreases in the fitted steps, so "
            f"{', '.join(MPL.anneal_params)} are undetermined; "
            "fit on a curve with LR decay or fix them (--fix)"
        )
    free_idx = tuple(i for i, k in enumerate(MPL.param_names) if k not in fixed)
    if F.n < len(free_idx):
        raise AnalysisError(f"{F.n} fitted points for {len(free_idx)} free parameters of law mpl")
    theta_full = np.zeros(len(MPL.param_names))
    for k, v in fixed.items():
        theta_full[MPL.param_names.index(k)] = np.log(v)
    return Problem(MPL, F, logy, theta_full, free_idx, HUBER_DELTA)


def _load_all(fit: Sequence, predict: Sequence, resolution: int) -> tuple[list[Curve], list[Curve]]:
    curves, others = [load_curve(c) for c in fit], [load_curve(c) for c in predict]
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
    resolution: int = 32,
    intervals: bool = True,
    protocol: str | None = None,
) -> CurveFitResult:
    """Fit the multi-power law on `fit` curves (paths, run dirs, DataFrames or Curves) and predict.

    fit_until: only steps <= fit_until of the fitted curves enter the fit; their later steps are
    predicted (forecasting). predict: further curves predicted in full. The result's
    `predictions` maps curve name -> mean/max relative error, final loss (predicted, actual) and,
    with `intervals` (default), the 90% interval per point and its coverage. protocol: None or
    "multistart" (the default); a fit with `fixed` parameters is L-BFGS's (`FitProtocol.LBFGS`).
    """
    get_curve_law(law)
    if protocol is not None and protocol not in PROTOCOLS:
        raise AnalysisError(f"unknown fit protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    if protocol is not None and fixed:
        raise AnalysisError(f"protocol {protocol} fits every parameter from the authors' start; drop --fix")
    curves, others = _load_all(fit, predict, resolution)
    parts = _fit_parts(curves, fit_until)
    p = problem(parts, fixed, resolution, warmup_rises=not fixed)
    base = (
        _fit_lbfgs(p, parts, intervals, resolution)
        if fixed
        else _fit_multistart(p, parts, intervals, resolution)
    )
    base = replace(base, curves=tuple(curves + others))
    fitted, predictions = _score(base, parts, others, fit_until)
    return replace(base, fitted=fitted, predictions=predictions)


def lbfgs_optimum(p: Problem, parts, intervals: bool):
    """L-BFGS to the objective's optimum from the law's data-scaled start grid, the calibration
    refits (`intervals`) in the same batched minimisation: (result, index of the best start,
    number of starts, interval model or None)."""
    starts = np.log(start_grid(np.exp(p.logy), p.F.logS1))[:, list(p.free_idx)]
    plan = plan_refits(p, parts, starts) if intervals else None
    S = starts.shape[0]
    weights = np.ones((S, p.F.n))
    if plan is not None and plan.splits:
        starts, weights = np.vstack([starts, plan.starts]), np.vstack([weights, plan.weights])
    r = minimize(p, starts, weights)
    f = np.where(np.isfinite(r.f[:S]), r.f[:S], np.inf)
    i = int(np.argmin(f))
    if not np.isfinite(f[i]):
        raise AnalysisError("law mpl: the objective is not finite at any start; check the curves")
    model = calibrate(p, parts, plan, r.x[S:], r.f[S:], p.params(r.x[i])) if plan is not None else None
    return r, i, S, model


def _fit_lbfgs(p: Problem, parts, intervals: bool, resolution: int) -> CurveFitResult:
    r, i, S, model = lbfgs_optimum(p, parts, intervals)
    f = np.where(np.isfinite(r.f[:S]), r.f[:S], np.inf)
    return CurveFitResult(
        params=dict(zip(MPL.param_names, map(float, p.params(r.x[i])))),
        objective=float(f[i]),
        grad_norm=float(r.grad_norm[i]),
        converged=bool(int(r.status[i]) in CONVERGED_CODES),
        status=STATUS_NAMES[int(r.status[i])],
        n_starts=S,
        starts_at_optimum=int(np.sum(f <= f[i] + 1e-6 * abs(f[i]))),
        n_points=p.F.n,
        fixed={
            k: float(np.exp(p.theta_full[j])) for j, k in enumerate(MPL.param_names) if j not in p.free_idx
        },
        resolution=resolution,
        intervals=model,
        protocol=FitProtocol.LBFGS.value,
    )


def _fit_multistart(p: Problem, parts, intervals: bool, resolution: int) -> CurveFitResult:
    """The multistart protocol (`protocol.py`): the main fit and every calibration refit run their
    start and K AdamW runs (the lowest objective kept), one row of point weights per run, all runs
    in one vmapped loop."""
    plan = plan_refits(p, parts, np.zeros((1, len(p.free_idx)))) if intervals else None
    splits = plan.splits if plan is not None else ()
    W = np.vstack([np.ones(p.F.n)] + [s.train.astype(float) for s in splits])
    K = len(multistart.MULTISTART_GRID)
    p0 = multistart.starts(p, parts, W)
    r = multistart.adamw(p, p0, np.repeat(W, K, axis=0))
    f = r.f.reshape(len(W), K)
    pick = np.arange(len(W)) * K + np.argmin(f, axis=1)  # the lowest objective of each row's K runs
    i = int(pick[0])
    if not np.isfinite(r.f[i]):
        raise AnalysisError("law mpl: the fit ends at a non-finite objective; check the curves")
    model = None
    if splits:
        logp = lambda x: np.log(np.where(x > 0, x, 1.0))  # noqa: E731  (rows with f = inf are skipped)
        refit_plan = RefitPlan(splits, logp(p0[pick[1:]]), W[1:], 1)
        model = calibrate(p, parts, refit_plan, logp(r.params[pick[1:]]), r.f[pick[1:]], r.params[i])
    stop = int(r.stop[i])
    return CurveFitResult(
        params=dict(zip(MPL.param_names, map(float, r.params[i]))),
        objective=float(r.f[i]),
        grad_norm=float(r.grad_norm[i]),
        converged=stop in (1, 2),
        status=f"AdamW stopped after {int(r.steps[i])} steps: {multistart.STOP_NAMES[stop]}",
        n_starts=K,
        starts_at_optimum=int(np.sum(f[0] <= r.f[i] * (1 + 1e-6))),
        n_points=p.F.n,
        resolution=resolution,
        intervals=model,
    )


def _score(result: CurveFitResult, parts, others: list[Curve], fit_until: int | None) -> tuple[dict, dict]:
    """Per-curve errors: in-fit steps (`fitted`), forecast steps after `fit_until` and the
    curves only predicted (`predictions`, with their intervals)."""
    fitted, predictions = {}, {}
    for c, t in parts:
        steps = c.law_steps()
        pred, lo, hi = result.predict_interval(c, steps)
        inside = np.isin(steps, t)
        until = None if fit_until is None else int(fit_until)
        fitted[c.name] = {"until": until, **_errors(pred[inside], c.loss_at(steps[inside]))}
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
