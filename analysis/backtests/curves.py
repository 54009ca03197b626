"""Loss-curve protocol `curve`: schedules held out as fit-curve's accuracy protocol holds them out,
every registered method of the protocol (`methods(Family.CURVE, "curve")`: fit-curve's `mpl` and
the baseline) fitted on the rest, each scored on the held-out curves' points.

What is held out (`split_curves`), in this order:
- Luo et al.'s split, the one fit-curve's accuracy and coverage figures use (docs/fit.md,
  "Accuracy on the MPL protocol"): when the curves include
  cosine_24000, constant_24000 and wsdcon_9, those are fitted and every other curve is predicted;
- else, with curves of different lengths, the longest ones (those ending within `LENGTH_RTOL` of
  the largest step, `validation.holdout_mask`) are predicted from the shorter ones;
- else (one curve, or all of one length) every curve is fitted up to the median logged step
  (`validation.share_cut`) and its later steps are predicted (`fit-curve --fit-until`).
Only steps from each curve's learning-rate peak on count (`Curve.law_steps`, as in fit-curve), and
each held-out curve is scored on at most `MAX_POINTS` of them, evenly spread in steps.

Methods: `mpl` (the default: `fit_curve(curves)`, `fit-curve` without flags; `--bootstrap 0` skips
its calibration refits, as `--no-intervals`) and the baseline `baseline_power_law_in_s1`
(registered here): L = E + A (S1 / S1_max)^-alpha in the area under the schedule, by SciPy on the
fitted points (no annealing term), with the naive 90% band of its in-sample log residuals
(`baselines.fit_minima_power_law`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

import analysis.curves.methods  # noqa: F401  (registers mpl, the protocol's default)
from analysis.backtests import baselines
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress, validation
from analysis.core.methods import Family, Method, Role, methods
from analysis.curves.data import NO_CURVES, Curve, load_curves
from analysis.curves.fitting import CurveFitResult
from models.base.errors import AnalysisError

BASELINE = "baseline_power_law_in_s1"
# Luo et al.'s fitted curves (mpl_loss_curves/SOURCE.md)
AUTHORS_FIT = ("cosine_24000", "constant_24000", "wsdcon_9")
MAX_POINTS = 50  # scored points per held-out curve (keeps the JSON small)
# curves ending within 5% of the longest count as the longest (logs end a step or a few apart:
# the public 72k-step curves end at 71920 and 71936)
LENGTH_RTOL = 0.05
PREFIX_SHARE = 0.5  # one length only: fit every curve up to the median logged step


@dataclass(frozen=True)
class CurveSplit:
    """The fitted curves (up to `fit_until` when set) and the scored points of the held-out ones."""

    fit: tuple[Curve, ...]
    held: tuple[tuple[int, Curve, np.ndarray], ...]  # (schedule index, curve, scored steps)
    fit_until: int | None
    cut: dict


def scored_steps(t: np.ndarray, k: int = MAX_POINTS) -> np.ndarray:
    """At most `k` of the logged steps `t`, the ones nearest `k` steps evenly spaced over them."""
    t = np.asarray(t, np.int64)
    if t.size <= k:
        return t
    targets = np.linspace(t[0], t[-1], k)
    i = np.clip(np.searchsorted(t, targets), 1, t.size - 1)
    i -= (targets - t[i - 1]) < (t[i] - targets)  # the nearer neighbour
    return t[np.unique(i)]


def split_curves(curves: list[Curve]) -> CurveSplit:
    """The fitted curves and the held-out points (the module docstring's three rules)."""
    names = [c.name for c in curves]
    if not curves:
        raise AnalysisError(f"no loss curves: {NO_CURVES}")
    if len(set(names)) != len(names):
        raise AnalysisError(f"curve names must be unique, got {names}; rename the files")
    last = np.array([c.steps[-1] for c in curves], float)
    longest = validation.holdout_mask(last, rtol=LENGTH_RTOL)
    fit_until, thr = None, None
    if set(AUTHORS_FIT) <= set(names) and len(curves) > len(AUTHORS_FIT):
        held = np.array([n not in AUTHORS_FIT for n in names])
        what = f"the schedules not in Luo et al.'s fit set ({', '.join(AUTHORS_FIT)})"
    elif not longest.all():
        held, thr = longest, float(last.max())
        what = f"the longest schedules (ending at step {last.max():.0f})"
    else:
        fit_until = int(validation.share_cut(np.concatenate([c.law_steps() for c in curves]), PREFIX_SHARE))
        held, thr = np.ones(len(curves), bool), float(fit_until)
        what = f"every curve's steps after {fit_until} (fit-curve --fit-until {fit_until})"
    rows = []
    for i, c in enumerate(curves):
        t = c.law_steps()
        t = t[t > fit_until] if fit_until is not None else t
        if held[i] and t.size:
            rows.append((i, c, scored_steps(t)))
    fit = tuple(c for i, c in enumerate(curves) if fit_until is not None or not held[i])
    if not rows:
        raise AnalysisError(f"nothing to predict after step {fit_until}: log more steps past the peak")
    cut = {
        "what": what,
        "threshold": thr,
        "n_fit": len(fit),
        "n_held_out": len(rows),
        "n_points_held_out": int(sum(r[2].size for r in rows)),
        "schedules": names,
        "fitted": [c.name for c in fit],
        "held_out": [r[1].name for r in rows],
    }
    return CurveSplit(fit, tuple(rows), fit_until, cut)


def _s1(c: Curve, t: np.ndarray) -> np.ndarray:
    return np.cumsum(c.schedule())[t]


def _predict(m: Method, r, c: Curve, t: np.ndarray):
    """(pred, lo, hi) of a held-out curve: the law on its logged schedule, the baseline on its S1."""
    if isinstance(r, CurveFitResult):
        return r.predict_interval(c, t)
    p = m.predict(r, {"S1": _s1(c, t)})
    return p.mean, p.lo, p.hi


def _score(m: Method, split: CurveSplit, opt: Options) -> MethodScore:
    """Fit one method on the fitted curves as fit-curve does and predict the held-out points with
    its 90% intervals."""
    role = {"baseline": m.role == Role.BASELINE, "default": m.role == Role.DEFAULT}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = m.fit(list(split.fit), fit_until=split.fit_until, intervals=opt.bootstrap > 0)
            points = []
            for i, c, t in split.held:
                pred, lo, hi = _predict(m, r, c, t)
                points += [
                    Point({"step": int(s), "schedule": i}, float(a), float(f), float(low), float(high))
                    for s, a, f, low, high in zip(t, c.loss_at(t), pred, lo, hi)
                ]
    except AnalysisError as e:
        return MethodScore(m.name, (), **role, note=f"not fitted: {e}")
    return MethodScore(m.name, tuple(points), **role, note=getattr(r, "note", ""))


def curve_protocol(data: pd.DataFrame | str, opt: Options = Options()) -> Backtest:
    """Backtest every curve method on schedules it did not see (module docstring)."""
    split = split_curves(load_curves(data))
    ms = sorted(methods(Family.CURVE, "curve"), key=lambda m: m.role != Role.BASELINE)
    ms = [m for m in ms if opt.scores(m.role != Role.CANDIDATE)]
    rows = [_score(m, split, opt) for m in progress.track(ms, desc="backtest curve", unit="method")]
    return Backtest("curve", split.cut, Metric.REL, tuple(rows))


@dataclass(frozen=True)
class PowerLawInS1(baselines.BaselineResult):
    """The baseline fitted on curves: predicts from {"S1": area under the schedule}."""

    @property
    def note(self) -> str:
        E, A, alpha, _ = self.fit.params
        return f"E={E:.4g}, A={A:.4g}, alpha={alpha:.4g}"


def fit_power_law_in_s1(table, fit_until: int | None = None, **_) -> PowerLawInS1:
    """E + A (S1 / S1_max)^-alpha on the curves' law steps (up to fit_until), by SciPy."""
    S1, loss = [], []
    for c in load_curves(table):
        t = c.law_steps()
        t = t[t <= fit_until] if fit_until is not None else t
        S1.append(_s1(c, t))
        loss.append(c.loss_at(t))
    b = baselines.fit_minima_power_law(np.concatenate(S1), np.concatenate(loss))
    return PowerLawInS1(b, lambda x: baselines.predict_minima_power_law(b, x["S1"]), int(sum(map(len, S1))))


baselines.register_baseline(
    BASELINE,
    Family.CURVE,
    ("curve",),
    fit_power_law_in_s1,
    "E + A (S1/S1_max)^-alpha in the area under the schedule, by SciPy (no annealing term)",
)
