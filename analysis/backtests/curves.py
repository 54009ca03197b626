"""Loss-curve protocol `curve`: schedules held out as fit-curve's accuracy protocol holds them out,
every curve law of `fit-curve` (and each of its fitting protocols) fitted on the rest, each scored
on the held-out curves' points.

What is held out (`split_curves`), in this order:
- Luo et al.'s split, the one fit-curve's accuracy and coverage figures use (docs/analysis.md,
  "Accuracy on the MPL protocol"; `benchmarks/curve_forecast.py`): when the curves include
  cosine_24000, constant_24000 and wsdcon_9, those are fitted and every other curve is predicted;
- else, with curves of different lengths, the longest ones (those ending within `LENGTH_RTOL` of
  the largest step, `validation.holdout_mask`) are predicted from the shorter ones;
- else (one curve, or all of one length) every curve is fitted up to the median logged step
  (`validation.share_cut`) and its later steps are predicted (`fit-curve --fit-until`).
Only steps from each curve's learning-rate peak on count (`Curve.law_steps`, as in fit-curve), and
each held-out curve is scored on at most `MAX_POINTS` of them, evenly spread in steps.

Methods: `mpl_multistart` (the default: `fit_curve(curves, "mpl")` without a protocol, the call
`fit-curve` makes without flags), the other protocols of the MPL and the Tissue law (all
`fitting.PROTOCOLS` a law accepts), and the baseline `baseline_power_law_in_s1`: per point
L = E + A (S1 / S1_max)^-alpha in the area under the schedule S1, fitted by SciPy on the fitted
curves' points (the schedule's warm-up and decay count only through S1; no annealing term), with
the naive 90% band of its in-sample log residuals (`baselines.fit_minima_power_law`, the same form).
The laws' intervals are fit-curve's (scatter + drift measured on its calibration refits); `--bootstrap 0`
skips those refits (as `fit-curve --no-intervals`) and leaves the laws without intervals.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.backtests import baselines
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import validation
from analysis.core.runs import find_run_dirs
from analysis.core.table import read_table
from analysis.curves.data import Curve, load_curve
from analysis.curves.fitting import AUTHORS_PROTOCOLS, FitProtocol, default_protocol, fit_curve
from analysis.curves.laws import known_curve_laws
from models.base.errors import AnalysisError

BASELINE = "baseline_power_law_in_s1"
DEFAULT_LAW = "mpl"  # fit-curve's --law default (`fit_curve(law="mpl")`)
# Luo et al.'s fitted curves (mpl_loss_curves/SOURCE.md; benchmarks/curve_forecast.py's FIT)
AUTHORS_FIT = ("cosine_24000", "constant_24000", "wsdcon_9")
MAX_POINTS = 50  # scored points per held-out curve (keeps the JSON small)
# curves ending within 5% of the longest count as the longest (logs end a step or a few apart:
# the public 72k-step curves end at 71920 and 71936)
LENGTH_RTOL = 0.05
PREFIX_SHARE = 0.5  # one length only: fit every curve up to the median logged step
NAME_COLUMNS = ("run", "curve", "schedule", "name")  # a curves table's curve column
NO_CURVES = (
    "give a folder of curve CSVs (columns step, lr, loss), a run or sweep directory (metrics.jsonl), "
    "or a curves table with a run column and step, lr, loss"
)


@dataclass(frozen=True)
class CurveSplit:
    """The fitted curves (up to `fit_until` when set) and the scored points of the held-out ones."""

    fit: tuple[Curve, ...]
    held: tuple[tuple[int, Curve, np.ndarray], ...]  # (schedule index, curve, scored steps)
    fit_until: int | None
    cut: dict


def load_curves(data: pd.DataFrame | str) -> list[Curve]:
    """Curves as fit-curve loads them (`load_curve`, its defaults): from a folder of curve CSVs, a
    run or sweep directory (one curve per run), a curves table (CSV / Parquet / DataFrame; one
    curve per value of its run column, or one curve without one) or a single curve CSV."""
    if isinstance(data, pd.DataFrame):
        return _table_curves(data, "curve")
    path = os.fspath(data)
    if not os.path.exists(path):
        raise AnalysisError(f"file not found: {path}")
    if os.path.isdir(path):
        csvs = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
        if csvs:
            return [load_curve(os.path.join(path, f)) for f in csvs]
        runs = find_run_dirs([path])
        if not runs:
            raise AnalysisError(f"no loss curves in {path}: {NO_CURVES}")
        root = os.path.dirname(os.path.abspath(path.rstrip("/")))
        return [load_curve(r, name=os.path.relpath(r, root)) for r in runs]
    df = read_table(path)
    return _table_curves(df, os.path.splitext(os.path.basename(path))[0])


def _table_curves(df: pd.DataFrame, name: str) -> list[Curve]:
    """One curve per value of the table's run column (eval_loss when a run logged it at least
    twice, as `load_curve` reads a run directory), or the whole table as one curve."""
    col = next((c for c in NAME_COLUMNS if c in df.columns), None)
    if col is None:
        return [load_curve(df, name=name)]
    out = []
    for run, g in df.groupby(col, sort=True):
        ev = "eval_loss" in g.columns and g["eval_loss"].notna().sum() >= 2
        out.append(load_curve(g.drop(columns=[col]), name=str(run), loss_col="eval_loss" if ev else None))
    if not out:
        raise AnalysisError(f"no loss curves in the table: {NO_CURVES}")
    return out


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


def candidates() -> list[tuple[str, str, str, bool]]:
    """(method, law, protocol, default) for every curve law and fitting protocol fit-curve offers;
    the default (what `fit-curve` fits without flags) first. The authors' protocols fit the MPL
    only (`fitting._check_protocol`)."""
    out = []
    for law in known_curve_laws():
        for p in FitProtocol:
            if p not in AUTHORS_PROTOCOLS or law == "mpl":
                default = law == DEFAULT_LAW and p == default_protocol(DEFAULT_LAW)
                out.append((f"{law}_{p.value}", law, p.value, default))
    return sorted(out, key=lambda m: not m[3])


def _points(split: CurveSplit, predict) -> tuple[Point, ...]:
    """Every held-out point with `predict(curve, steps) -> (pred, lo, hi)`."""
    out = []
    for i, c, t in split.held:
        pred, lo, hi = predict(c, t)
        actual = c.loss_at(t)
        out += [
            Point(
                {"step": int(t[j]), "schedule": i},
                float(actual[j]),
                float(pred[j]),
                float(lo[j]),
                float(hi[j]),
            )
            for j in range(t.size)
        ]
    return tuple(out)


def _law_score(
    name: str, law: str, protocol: str, split: CurveSplit, opt: Options, default: bool
) -> MethodScore:
    """Fit one (law, protocol) on the fitted curves as fit-curve does and predict the held-out
    points with its 90% intervals; the default runs fit-curve's flagless call (no protocol)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fit_curve(
                list(split.fit),
                law,
                fit_until=split.fit_until,
                intervals=opt.bootstrap > 0,
                protocol=None if default else protocol,
            )
            points = _points(split, r.predict_interval)
    except AnalysisError as e:
        return MethodScore(name, (), default=default, note=f"not fitted: {e}")
    return MethodScore(name, points, default=default)


def _baseline(split: CurveSplit) -> MethodScore:
    """E + A (S1 / S1_max)^-alpha on the fitted points (law steps up to fit_until), by SciPy."""
    S1, loss = [], []
    for c in split.fit:
        t = c.law_steps()
        t = t[t <= split.fit_until] if split.fit_until is not None else t
        S1.append(np.cumsum(c.schedule())[t])
        loss.append(c.loss_at(t))
    b = baselines.fit_minima_power_law(np.concatenate(S1), np.concatenate(loss))

    def predict(c: Curve, t: np.ndarray):
        pred = baselines.predict_minima_power_law(b, np.cumsum(c.schedule())[t])
        return (pred, *b.band(pred))

    E, A, alpha, _ = b.params
    note = f"E={E:.4g}, A={A:.4g}, alpha={alpha:.4g}"
    return MethodScore(BASELINE, _points(split, predict), baseline=True, note=note)


def curve_protocol(data: pd.DataFrame | str, opt: Options = Options()) -> Backtest:
    """Backtest every curve law of fit-curve on schedules it did not see (module docstring)."""
    split = split_curves(load_curves(data))
    methods = [_baseline(split)]
    for name, law, protocol, default in candidates():
        if not opt.scores(default):
            continue
        methods.append(_law_score(name, law, protocol, split, opt, default))
    return Backtest("curve", split.cut, Metric.REL, tuple(methods))
