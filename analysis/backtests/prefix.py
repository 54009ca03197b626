"""Curve-prefix protocol `curve-prefix`: forecast each held-out run's final loss from the first
`CUT` (25%) of its curve, learning from the finished curves of the other runs, and pick each
held-out rung's best run from those forecasts (`python -m analysis forecast`'s job).

Input: a curves table (what `forecast` reads: run, step, loss, optionally D and lr per logged step;
total_steps and settings such as N, optim.lr per run; every run to its end), a sweep directory, or a
folder of curve CSVs (step, lr, loss; one schedule per file, Luo et al.'s MPL layout: the file name
is the run's `schedule` and its last logged step its total_steps).

What is held out: with several model sizes, the runs with N above `--holdout-above-n` (default: the
largest third of the sizes, `validation.share_cut`) are cut at CUT of their steps and the smaller
ones are COMPLETE (forecasting the larger models of a sweep from its smaller ones). With one size,
each rung in turn (runs of one total_steps) is cut and the other rungs are COMPLETE. The swept key
of a rung (`SWEPT`): optim.lr, else schedule. A held-out run's schedule, when its curve logs one,
is known to its end (the `mpl` method's planned schedule).

Methods: the registry's for the protocol (`analysis/forecast/methods.py`: `auto`, `transfer`,
`mpl`, `baseline_lowest_at_cut` = `forecast --method ratio`), scored on the final loss; each one's
`mean_loss_penalty` is its regret: per held-out rung of two or more runs, the final loss of the run
it picks (highest p_best) against the rung's best final loss, averaged over the rungs.
"""

from __future__ import annotations

import math
import os
import pathlib
import warnings
from typing import Sequence

import numpy as np
import pandas as pd

import analysis.forecast.methods  # noqa: F401  (registers the protocol's methods)
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress, validation
from analysis.core.methods import Family, Method, Role, methods
from analysis.core.table import read_table
from analysis.forecast import RunCurve, read_curves
from analysis.forecast.choose import rungs as rungs_of
from analysis.forecast.inputs import MIN_POINTS, curves_from_table
from analysis.forecast.select import by_length, cut_at
from models.base.errors import AnalysisError

CUT = 0.25
SWEPT = ("optim.lr", "schedule")
HELD_SHARE = 2 / 3  # the smallest two thirds of the sizes are COMPLETE


def load(data: pd.DataFrame | str) -> list[RunCurve]:
    """The runs of a curves table, a sweep directory or a folder of curve CSVs (module docstring)."""
    if isinstance(data, pd.DataFrame):
        return curves_from_table(data, "the curves table")
    path = os.fspath(data)
    csvs = sorted(f for f in os.listdir(path) if f.endswith(".csv")) if pathlib.Path(path).is_dir() else []
    if not csvs:
        return read_curves(path, "the curves")
    parts = []
    for f in csvs:
        d, stem = read_table(os.path.join(path, f)), f[: -len(".csv")]
        parts.append(d.assign(run=stem, schedule=stem, total_steps=int(d["step"].max())))
    return curves_from_table(pd.concat(parts, ignore_index=True), path)


def _swept(curves: Sequence[RunCurve]) -> str | None:
    for key in SWEPT:
        if len({str(c.settings.get(key)) for c in curves if key in c.settings}) >= 2:
            return key
    return None


def folds(curves: list[RunCurve], opt: Options) -> tuple[list[tuple[list[RunCurve], list[RunCurve]]], dict]:
    """[(held-out runs, finished runs to learn from)] and the cut's description."""
    unfinished = [c.run for c in curves if not c.finished]
    if unfinished:
        raise AnalysisError(
            f"--protocol curve-prefix needs every run to its end; unfinished: {', '.join(unfinished[:5])}"
        )
    N = np.array([c.number("N") for c in curves])
    if np.isfinite(N).all() and validation.levels(N).size >= 2:
        thr = opt.holdout_above_n
        if thr is None:
            thr = validation.share_cut(validation.levels(N), HELD_SHARE)
        held = validation.holdout_mask(N, thr)
        if held.all() or not held.any():
            raise AnalysisError(f"holding out N > {thr:.4g} leaves nothing to learn from or to forecast")
        what = f"runs with N > {thr:.4g}, cut at {CUT:.0%} of their steps"
        return [([c for c, h in zip(curves, held) if h], [c for c, h in zip(curves, held) if not h])], {
            "what": what,
            "threshold": float(thr),
            "n_fit": int((~held).sum()),
            "n_held_out": int(held.sum()),
        }
    out = [(held, rest) for _, held, rest in by_length(curves)]
    if not out:
        raise AnalysisError("one model size and one run length: nothing finished to learn from")
    what = f"each run length in turn (the other lengths finished), cut at {CUT:.0%} of its steps"
    return out, {"what": what, "threshold": CUT, "n_fit": len(curves), "n_held_out": len(curves)}


def _scores(held: list[RunCurve], result, key: str | None) -> list[Point]:
    truth = {c.run: c.final_loss for c in held}
    by_run = {f.run: f for f in result.runs}
    penalty: dict[str, float] = {}
    for ch in result.choices:
        if len(ch.members) >= 2:
            best = min(truth[m.run] for m in ch.members)
            penalty[ch.run] = truth[ch.run] / best - 1
    out = []
    for c in held:
        f = by_run[c.run]
        v = c.settings.get(key) if key else None
        x = {"N": c.number("N"), "total_steps": float(c.total_steps)}
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            x[key] = float(v)
        lo, hi = f.interval
        out.append(Point(x, truth[c.run], f.final_loss, lo, hi, penalty=penalty.get(c.run, math.nan)))
    return out


def _method(m: Method, fold_list, key: str | None) -> MethodScore:
    role = {"baseline": m.role == Role.BASELINE, "default": m.role == Role.DEFAULT}
    points, notes = [], []
    for held, complete in fold_list:
        cut = [k for k in (cut_at(c, CUT) for c in held) if k.step.size >= MIN_POINTS]
        held = [c for c in held if c.run in {k.run for k in cut}]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = m.fit(cut, train=complete, choose=key)
        except AnalysisError as e:
            return MethodScore(m.name, (), **role, note=f"not fitted: {e}")
        points += _scores(held, r, key)
        notes += [*r.notes, *(f.detail for f in r.fits)]
    note = "; ".join(dict.fromkeys(notes)) if len(set(notes)) <= 2 else f"{len(notes)} fits"
    return MethodScore(m.name, tuple(points), **role, note=note)


def curve_prefix_protocol(data: pd.DataFrame | str, opt: Options = Options()) -> Backtest:
    """Backtest the forecasts of held-out runs from their first CUT (module docstring)."""
    curves = load(data)
    key = _swept(curves)
    fold_list, cut = folds(curves, opt)
    short = [c.run for held, _ in fold_list for c in held if cut_at(c, CUT).step.size < MIN_POINTS]
    n_rungs = sum(len(rungs_of({c.run: c.settings for c in held}, key or "")) for held, _ in fold_list)
    cut.update(swept=key, n_rungs=n_rungs, fraction=CUT, n_too_short=len(short))
    ms = sorted(methods(Family.FORECAST, "curve-prefix"), key=lambda m: m.role != Role.BASELINE)
    ms = [m for m in ms if opt.scores(m.role != Role.CANDIDATE)]
    rows = [
        _method(m, fold_list, key) for m in progress.track(ms, desc="backtest curve-prefix", unit="method")
    ]
    few = f"{len(short)} held-out run(s) have fewer than {MIN_POINTS} logged points in their first {CUT:.0%}"
    warn = (f"{few}: not scored",) if short else ()
    return Backtest("curve-prefix", cut, Metric.REL, tuple(rows), warnings=warn)
