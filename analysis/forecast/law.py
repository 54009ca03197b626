"""The multi-power law's forecast, for runs whose learning-rate schedule is known to their end
(`schedule.planned`). The law is fitted once on the finished curves (`fit_mpl`: fit-curve's
objective at its L-BFGS optimum on at most FIT_POINTS points of at most FIT_CURVES curves, with its
calibration refits): alpha and the annealing parameters transfer; each run keeps its own L0 and A,
by least squares on its last octave (the law is linear in them). The 90% interval: Gaussian in ln
loss, its variance the leave-one-curve-out error of the same procedure on the finished curves plus
fit-curve's calibrated error on a new curve at the run's distance from the fitted data
(`analysis.curves.intervals`), around the forecast shifted by that procedure's mean error (a bias
the runs share, such as a sweep's held-out final loss under its training-loss curve).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from analysis.core.validation import Z90
from analysis.curves.data import Curve
from analysis.curves.features import features
from analysis.curves.fitting import lbfgs_optimum, problem
from analysis.curves.intervals import IntervalModel, Kind
from analysis.curves.laws import MPL, evaluate
from analysis.forecast.inputs import RunCurve
from analysis.forecast.results import FitInfo, Method, RunForecast
from analysis.forecast.schedule import planned
from analysis.forecast.transfer import MIN_COMPLETE, MIN_SD
from models.base.errors import AnalysisError

PEAK_LR = 3e-4  # the rates' unit in the fit (module docstring)
LEVEL_POINTS = 3  # points the run's own L0 and A are fitted on, at least
FIT_POINTS = 64  # points of each finished curve the law is fitted on
FIT_CURVES = 12  # finished curves the law is fitted on, at most (spread over sizes and lengths)
NODES = 512  # annealing nodes per curve, at most (a coarser quadrature for long curves)


def _curve(c: RunCurve, scale: float = 1.0) -> Curve:
    return Curve(c.run, c.step.astype(np.int64), c.loss, c.lr * scale)


def _scaled(curve: Curve, scale: float) -> Curve:
    return Curve(curve.name, curve.steps, curve.loss, curve.lr * scale)


def _resolution(curves: Sequence[Curve]) -> int:
    """Steps per annealing node: fit-curve's 32, coarser for long curves (at most NODES nodes)."""
    return max(32, math.ceil(max(int(c.steps[-1]) for c in curves) / NODES))


def _spread(t: np.ndarray, k: int) -> np.ndarray:
    """At most `k` of the steps `t`, evenly spread over them (the first and last kept)."""
    return t if t.size <= k else t[np.unique(np.linspace(0, t.size - 1, k).round().astype(int))]


def _spread_runs(runs: Sequence[RunCurve], k: int) -> list[int]:
    """The indices of at most `k` runs spread evenly over them in (N, total_steps, name) order: the
    law's fit and its calibration refits (one per curve left out) cost what k curves cost."""
    order = sorted(range(len(runs)), key=lambda i: (runs[i].number("N"), runs[i].total_steps, runs[i].run))
    if len(order) <= k:
        return order
    return [order[j] for j in np.unique(np.linspace(0, len(order) - 1, k).round().astype(int))]


def fit_mpl(curves: Sequence[Curve]) -> tuple[np.ndarray, IntervalModel | None]:
    """The law's public parameters fitted on the finished curves (`fitting.lbfgs_optimum` on at
    most FIT_POINTS points of each, evenly spread from its peak on; the schedule is the whole
    logged one) and fit-curve's interval model for a curve the fit did not see (None without a
    refit)."""
    parts = [(c, _spread(c.law_steps(), FIT_POINTS)) for c in curves]
    p = problem(parts, resolution=_resolution(curves))
    r, i, _, model = lbfgs_optimum(p, parts, intervals=True)
    return p.params(r.x[i]), model


def _sd(s: float, model: IntervalModel | None, plan: Curve, total: int) -> float:
    """The forecast's log-loss sd: the run's own level (leave-one-out `s`) and the law's error on a
    curve it did not see at the run's distance from the fitted data (the interval model's terms)."""
    law_sd = 0.0
    if model is not None:
        law_sd = float(model.sd(plan, np.array([total]), Kind.NEW_CURVE)[0])
    sd = math.sqrt((s if math.isfinite(s) else 0.0) ** 2 + law_sd**2)
    return max(sd, MIN_SD) if math.isfinite(s) or law_sd > 0 else math.nan


def _basis(params: np.ndarray, curve: Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S1^-alpha, -LD) of the law at steps t: the loss is L0 + A u + B v with these."""
    F = features([(curve, t)], _resolution([curve]))
    u = evaluate(MPL, np.concatenate([[0.0, 1.0], params[2:3], [0.0], params[4:]]), F)
    v = evaluate(MPL, np.concatenate([[0.0, 0.0], params[2:3], [1.0], params[4:]]), F)
    return u, v


def _forecast_one(params: np.ndarray, curve: Curve, cut: int, total: int) -> float | None:
    """ln final loss of a run seen to step `cut` (its own L0, A on the last octave)."""
    t = curve.steps[curve.steps <= cut]
    t = t[t >= curve.law_start()]
    win = t[t >= cut / 2]
    if win.size < LEVEL_POINTS:
        win = t[-LEVEL_POINTS:]
    if win.size < 2:
        return None
    u, v = _basis(params, curve, np.append(win, total))
    y = curve.loss_at(win) - params[3] * v[:-1]
    X = np.stack([np.ones(win.size), u[:-1]], axis=1)
    (l0, a), *_ = np.linalg.lstsq(X, y, rcond=None)
    pred = l0 + a * u[-1] + params[3] * v[-1]
    return math.log(pred) if pred > 0 else None


def forecast_group(
    frac: float, runs: list[RunCurve], complete: list[RunCurve]
) -> tuple[list[RunForecast], FitInfo]:
    """The law's forecasts of runs cut at `frac` (module docstring)."""
    done = [d for d in complete if d.lr is not None and d.finished]
    if len(done) < MIN_COMPLETE:
        raise AnalysisError(
            f"--method mpl learns from finished curves with an lr column: {len(done)} given, "
            f"at least {MIN_COMPLETE} needed"
        )
    plans = {c.run: planned(c, done) for c in runs}
    unknown = [r for r, p in plans.items() if p is None]
    if unknown:
        raise AnalysisError(
            f"--method mpl needs each run's schedule to its end: unknown for {', '.join(unknown[:5])} "
            "(log lr past the cut, or give finished curves of the same schedule shape)"
        )
    # rates in the unit fit-curve's start grid is scaled for (Luo et al.'s peak 3e-4): the law is
    # invariant to the unit up to A, B and C, which are fitted
    scale = PEAK_LR / float(np.median([np.max(d.lr) for d in done]))
    curves = [_curve(d, scale) for d in done]
    params, model = fit_mpl([curves[i] for i in _spread_runs(done, FIT_CURVES)])
    errs = []
    for d, cd in zip(done, curves):
        got = _forecast_one(params, cd, int(frac * d.total_steps), int(d.step[-1]))
        if got is not None:
            errs.append(math.log(d.final_loss) - got)
    # the mean error is a bias the runs share (a final loss of another kind than the curve's: a
    # sweep's held-out loss under its training-loss curve): added back; the rest is the scatter
    bias = float(np.mean(errs)) if errs else 0.0
    s = float(np.sqrt(np.mean(np.square(np.asarray(errs) - bias)))) if len(errs) >= 2 else math.nan
    out = []
    for c in runs:
        plan = _scaled(plans[c.run], scale)
        mu = _forecast_one(params, plan, int(c.step[-1]), int(c.total_steps))
        if mu is None:
            raise AnalysisError(f"run {c.run}: too few points after its learning-rate peak for the law")
        mu += bias
        sd = _sd(s, model, plan, int(c.total_steps))
        lo, hi = math.exp(mu - Z90 * sd), math.exp(mu + Z90 * sd)
        out.append(RunForecast(c.run, math.exp(mu), (lo, hi), c.frac_seen, Method.MPL, sd))
    detail = ", ".join(f"{k}={v:.4g}" for k, v in zip(MPL.param_names[2:], params[2:]))
    detail += f" (leave-one-out rms {s:.3%})"
    return out, FitInfo(frac, Method.MPL, len(done), detail, s)
