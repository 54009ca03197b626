"""The multi-power law's forecast, for runs whose learning-rate schedule is known to their end.

A run's schedule to its end: `schedule.planned`.

The law (`analysis.curves`, Luo et al. 2025) is fitted once on the finished curves (fit-curve's
default fit, without its interval refits): its exponent and annealing parameters (alpha, B, C, beta,
gamma) are what transfers. Each run keeps its own level: L0 and A by least squares on its last octave
of points (the prefix's steps in [cut / 2, cut], at least 3), with the others fixed (the law is linear
in L0 and A). The 90% interval: the leave-one-curve-out RMS error of the same procedure on the finished
curves cut at the same fraction (with the law fitted on all of them), Gaussian in ln loss, around
the forecast shifted by that procedure's mean error (a bias the runs share: a final loss of another
kind than the curve's, such as a sweep's held-out loss under its training-loss curve).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from analysis.curves.data import Curve
from analysis.curves.features import features
from analysis.curves.laws import get_curve_law, start_grid
from analysis.curves.optimize import Problem, evaluate, minimize
from analysis.forecast.inputs import RunCurve
from analysis.forecast.results import FitInfo, Method, RunForecast
from analysis.forecast.schedule import planned
from analysis.forecast.transfer import MIN_COMPLETE, MIN_SD, Z90
from analysis.laws.fitting import HUBER_DELTA
from models.base.errors import AnalysisError

LAW = "mpl"
PEAK_LR = 3e-4  # the rates' unit in the fit (module docstring)
LEVEL_POINTS = 3  # points the run's own L0 and A are fitted on, at least
FIT_POINTS = 64  # points of each finished curve the law is fitted on
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


def fit_law(curves: Sequence[Curve]) -> np.ndarray:
    """The law's public parameters fitted on the finished curves: L-BFGS to the optimum of
    fit-curve's objective from its start grid, on at most FIT_POINTS points of each curve (evenly
    spread from its peak on; the schedule is the whole logged one)."""
    law = get_curve_law(LAW)
    parts = [(c, _spread(c.law_steps(), FIT_POINTS)) for c in curves]
    F = features(parts, _resolution(curves))
    logy = np.log(np.concatenate([c.loss_at(t) for c, t in parts]))
    n = len(law.param_names)
    problem = Problem(law, F, logy, np.zeros(n), tuple(range(n)), HUBER_DELTA)
    starts = np.log(start_grid(law, np.exp(logy), F.logS1))
    r = minimize(problem, starts)
    f = np.where(np.isfinite(r.f), r.f, np.inf)
    i = int(np.argmin(f))
    if not np.isfinite(f[i]):
        raise AnalysisError("--method mpl: the law's fit is not finite at any start; check the curves")
    return problem.params(r.x[i])


def _basis(params: np.ndarray, curve: Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S1^-alpha, -LD) of the law at steps t: the loss is L0 + A u + B v with these."""
    law = get_curve_law(LAW)
    F = features([(curve, t)], _resolution([curve]))
    u = evaluate(law, np.concatenate([[0.0, 1.0], params[2:3], [0.0], params[4:]]), F)
    v = evaluate(law, np.concatenate([[0.0, 0.0], params[2:3], [1.0], params[4:]]), F)
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
    params = fit_law(curves)
    errs = []
    for d, cd in zip(done, curves):
        got = _forecast_one(params, cd, int(frac * d.total_steps), int(d.step[-1]))
        if got is not None:
            errs.append(math.log(d.final_loss) - got)
    # the mean error is a bias the runs share (a final loss of another kind than the curve's: a
    # sweep's held-out loss under its training-loss curve): added back; the rest is the scatter
    bias = float(np.mean(errs)) if errs else 0.0
    s = float(np.sqrt(np.mean(np.square(np.asarray(errs) - bias)))) if len(errs) >= 2 else math.nan
    sd = max(s, MIN_SD) if math.isfinite(s) else math.nan
    out = []
    for c in runs:
        mu = _forecast_one(params, _scaled(plans[c.run], scale), int(c.step[-1]), int(c.total_steps))
        if mu is None:
            raise AnalysisError(f"run {c.run}: too few points after its learning-rate peak for the law")
        mu += bias
        lo, hi = math.exp(mu - Z90 * sd), math.exp(mu + Z90 * sd)
        out.append(RunForecast(c.run, math.exp(mu), (lo, hi), c.frac_seen, Method.MPL, sd))
    names = get_curve_law(LAW).param_names
    detail = (
        ", ".join(f"{k}={v:.4g}" for k, v in zip(names[2:], params[2:])) + f" (leave-one-out rms {s:.3%})"
    )
    return out, FitInfo(frac, Method.MPL, len(done), detail, s)
