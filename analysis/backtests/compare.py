"""The `compare` protocol: hide the top budgets of both recipes' ladders, fit every candidate method
of `python -m analysis compare` below the cut, and score its compute multipliers on the budgets it
did not see.

The table holds both ladders with a recipe column (`recipe`, or `sweep.recipe` from a
`sweep.recipes` sweep); REF is the recipe of its first row, every other recipe is compared with it.
The truth at each of OTHER's hidden budgets is the multiplier measured on all the runs
(`analysis.compare.measure`: REF's measured frontier read at OTHER's best loss, no law), so it
favours no method. Score: |log2| of predicted over measured multiplier (1 = a factor of 2), the
share of measured multipliers inside the method's 90% interval, the named winners' precision
(`winners_named`, `winners_right`: the budgets whose 90% interval excludes 1, and of those the ones
on the measured multiplier's side of 1) and in each method's note how often the side of 1 it leans
to is the measured one where the measured multiplier is beyond +-7% (`WINNER_BAND`).
The cut (default): the top third of the ladders' span of log C, `--holdout-above C` to move it.
`compare`'s own method choice runs this protocol's pieces on the user's ladders at several cuts
(`analysis.compare.choice`); the default method here, `auto`, is that choice.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import analysis.compare.methods  # noqa: F401  (registers the compare methods this protocol scores)
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.compare.choice import hidden
from analysis.compare.comparison import compare_pair, winner_sign
from analysis.compare.ladders import Ladder, check_pair, choose_ref, split_by
from analysis.compare.measure import measured
from analysis.core import progress
from analysis.core.methods import Family, Role, methods
from models.base.errors import AnalysisError

WINNER_BAND = 0.07  # a measured multiplier within +-7% of 1 names no winner
HOLD_SHARE = 1 / 3  # the default cut hides the top third of the ladders' log-C span
MIN_FIT_BUDGETS = 3  # each recipe keeps at least this many budgets below the cut


def default_cut(ref: Ladder, others: list[Ladder]) -> float:
    """The top `HOLD_SHARE` of the ladders' log-C span hidden, moved up while a recipe would keep
    fewer than `MIN_FIT_BUDGETS` budgets below it."""
    C = np.concatenate([x.C for x in (ref, *others)])
    lo, hi = float(np.log(C.min())), float(np.log(C.max()))
    cut = math.exp(hi - HOLD_SHARE * (hi - lo))
    for x in (ref, *others):
        fc = x.frontier()[0]
        if (fc <= cut).sum() < MIN_FIT_BUDGETS and fc.size >= MIN_FIT_BUDGETS + 1:
            cut = max(cut, float(np.sqrt(fc[MIN_FIT_BUDGETS - 1] * fc[MIN_FIT_BUDGETS])))
    return cut


def _winner_note(actual: np.ndarray, pred: np.ndarray, p_other: np.ndarray) -> str:
    """How often the side of 1 the method leans to (`comparison.winner_sign`: its multiplier's, or
    P(OTHER better)'s) is the measured one; the winners it names are counted in `winners_named`."""
    clear = np.abs(np.log(actual)) > math.log1p(WINNER_BAND)
    if not clear.any():
        return f"no measured multiplier beyond ±{WINNER_BAND:.0%}"
    said = np.array([winner_sign(float(np.log(f)), float(p)) for f, p in zip(pred, p_other)])
    right = said[clear] == np.sign(np.log(actual[clear]))
    band = f"measured beyond ±{WINNER_BAND:.0%}"
    return f"leans to the right side {int(right.sum())}/{int(clear.sum())} ({band})"


def _score(name: str, role: Role, ref: Ladder, others, cut: float, truths, opt: Options) -> MethodScore:
    """One method fitted below the cut, scored on every OTHER's measured multipliers above it."""
    pts, notes = [], []
    for o in others:
        t = truths[o.name]
        if not t.C.size:
            continue
        try:
            t, pc = hidden(ref, o, cut, name, opt.bootstrap, opt.seed, compare_pair)
        except AnalysisError as e:
            notes.append(f"{o.name}: not fitted: {e}")
            continue
        if pc.method_choice and pc.method_choice.get("candidates"):
            notes.append(f"{o.name}: chose {pc.method_choice['chosen']}")
        by_c = {b.C: b for b in pc.budgets}
        for c, lm in zip(t.C, t.log_m):
            b = by_c[float(c)]
            pts.append(
                Point(
                    {"C": float(c), "p_other_better": b.p_other_better},
                    math.exp(lm),
                    b.multiplier,
                    b.lo,
                    b.hi,
                )
            )
    if pts:
        a, f = np.array([p.actual for p in pts]), np.array([p.predicted for p in pts])
        po = np.array([p.x["p_other_better"] for p in pts])
        notes.append("names no winner" if role == Role.BASELINE else _winner_note(a, f, po))
    return MethodScore(
        name, tuple(pts), baseline=role == Role.BASELINE, default=role == Role.DEFAULT, note="; ".join(notes)
    )


def compare_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """Every compare method fitted below the cut, scored on the measured multipliers above it."""
    ref, others = choose_ref(split_by(df, "recipe", "the table", opt.columns), None, "recipe")
    for o in others:
        check_pair(ref, o)
    cut = opt.holdout_above if opt.holdout_above is not None else default_cut(ref, others)
    truths = {o.name: measured(ref, o, above=cut) for o in others}
    n_held = sum(t.C.size for t in truths.values())
    if not n_held:
        raise AnalysisError(
            f"no budget of {', '.join(o.name for o in others)} above C = {cut:.4g} has a measured multiplier "
            "(REF's runs must reach its loss); lower --holdout-above"
        )
    fitted = {x.name: x.below(cut) for x in (ref, *others)}
    for name, x in fitted.items():
        if x.n < 3 or x.n_budgets < 2:
            raise AnalysisError(
                f"{name}: {x.n} run(s) in {x.n_budgets} budget(s) at or below C = {cut:.4g}; nothing to fit "
                "on: raise --holdout-above"
            )
    ms = [m for m in methods(Family.COMPARE, "compare") if opt.scores(m.role != Role.CANDIDATE)]
    scored = [
        _score(m.name, m.role, ref, others, cut, truths, opt)
        for m in progress.track(ms, desc="backtest compare", unit="method")
    ]
    unmeasured = sum(t.n_unmeasured for t in truths.values())
    what = f"budgets with C > {cut:.4g}"
    cut_d = {
        "what": what,
        "threshold": float(cut),
        "n_fit": int(sum(x.n for x in fitted.values())),
        "n_held_out": int(n_held),
        "n_unmeasured": int(unmeasured),
        "ref": ref.name,
        "others": [o.name for o in others],
        "extrapolated_truths": int(sum(int(t.extrapolated.sum()) for t in truths.values())),
    }
    warn = ()
    if unmeasured:
        warn = (
            f"{unmeasured} hidden budget(s) have no measured multiplier: REF's frontier does not reach their "
            "loss within half a decade of its budgets",
        )
    return Backtest("compare", cut_d, Metric.LOG2, tuple(scored), warnings=warn)
