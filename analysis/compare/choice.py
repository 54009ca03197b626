"""Which method to trust on these ladders: `compare`'s own backtest, before it fits.

`python -m analysis compare` (method `auto`, its default) runs the `compare` backtest protocol's
folds on the user's own ladders: each fold hides both recipes' budgets above a cut, fits a method
below it and predicts the multipliers *measured* above it (`measure.measured`: REF's measured
frontier read at OTHER's best loss, no law). The error of a fold is the mean |log2| of predicted
over measured multiplier; the baseline `no_difference` (m = 1) scores the measured multipliers'
own |log2|. The baseline is kept unless the candidate (`auto_shrunk`) beats it by the parsimony
margin on every fold (`validation.choose_against`, the project's one choice rule): a multiplier
extrapolated from small budgets must have shown, on these ladders, that it predicts larger ones
better than "no difference" does. The folds are scored from the largest cut down, and a candidate
that loses one is not fitted on the rest (it cannot be chosen; its record says null there). With
fewer than `MIN_FOLDS` folds (each recipe keeps `MIN_FIT_BUDGETS` budgets below a cut, and some
budget above it has a measured multiplier) there is no evidence either way: the baseline is kept
and the note says so.

`analysis.backtests.compare` scores every method on the same pieces (`hidden`), at one cut.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from analysis.compare.fits import CompareMethod
from analysis.compare.ladders import Ladder
from analysis.compare.measure import Measured, measured
from analysis.core import progress, validation
from models.base.errors import AnalysisError

BASELINE = CompareMethod.NO_DIFFERENCE
CANDIDATES = (CompareMethod.SHRUNK,)  # in the order of preference after the baseline
MIN_FIT_BUDGETS = 2  # a fold keeps at least this many budgets of each recipe below its cut
MIN_FOLDS = 2  # fewer scored folds cannot tell a method from the baseline: the baseline is kept
MAX_FOLDS = 3  # evenly spread over the possible cuts, the largest (most like the real use) kept
FOLD_BOOTSTRAP = 50  # at most this many bootstrap rows per fold fit (the shrinkage reads them)


@dataclass(frozen=True)
class MethodChoice:
    """The folds' evidence and the method they chose (`compare --json`: `method_choice`)."""

    chosen: str
    baseline: str
    candidates: tuple[str, ...]
    cuts: tuple[float, ...]  # the folds' cuts (a fold fits C <= cut, predicts above it)
    fold_errors: dict[str, list[float]] = field(default_factory=dict)  # method -> per-fold |log2| error
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        clean = lambda v: [float(x) if math.isfinite(x) else None for x in v]
        return {
            "chosen": self.chosen,
            "baseline": self.baseline,
            "candidates": list(self.candidates),
            "cuts": list(self.cuts),
            "fold_errors": {k: clean(v) for k, v in self.fold_errors.items()},  # null: not fitted
            "metric": "mean |log2(predicted / measured multiplier)| over the budgets above each cut",
            "note": self.note,
        }


def _split(x: Ladder, cut: float) -> int:
    """The budgets of `x` at or below `cut`, or 0 when its runs there cannot carry a fit: fewer
    than `validation.MIN_FIT_FRACTION` of its runs, or one model size or one token count only."""
    below = x.below(cut)
    sizes = min(np.unique(below.N).size, np.unique(below.D).size)
    if below.n < validation.MIN_FIT_FRACTION * x.n or sizes < 2:
        return 0
    return int((x.frontier()[0] <= cut).sum())


def fold_cuts(ref: Ladder, other: Ladder, max_folds: int = MAX_FOLDS) -> list[float]:
    """The cuts of the choice's folds, ascending: geometric midpoints between consecutive budgets of
    the two ladders that keep `MIN_FIT_BUDGETS` budgets of each recipe below (with at least
    `validation.MIN_FIT_FRACTION` of its runs, two model sizes and two token counts, as the
    forward-chaining folds of a fit do) and a measured multiplier above; at most `max_folds`,
    evenly spread, the largest always kept."""
    levels = np.unique(np.concatenate([ref.frontier()[0], other.frontier()[0]]))
    seen, cuts = set(), []
    for c in np.sqrt(levels[:-1] * levels[1:]):
        key = (_split(ref, c), _split(other, c))
        if key in seen or min(key) < MIN_FIT_BUDGETS or not measured(ref, other, above=c).C.size:
            continue
        seen.add(key)
        cuts.append(float(c))
    if len(cuts) <= max_folds:
        return cuts
    pick = np.unique(np.round(np.linspace(len(cuts) - 1, 0, max_folds)).astype(int))
    return [cuts[i] for i in pick]


def hidden(
    ref: Ladder,
    other: Ladder,
    cut: float,
    method: CompareMethod | str,
    bootstrap: int,
    seed: int,
    pair: Callable,
) -> tuple[Measured, Any]:
    """(the multipliers measured above `cut`, `method`'s comparison of the ladders below it at
    those budgets; None when nothing above it is measured). `pair` is `comparison.compare_pair`."""
    truth = measured(ref, other, above=cut)
    if not truth.C.size:
        return truth, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pc, _ = pair(ref.below(cut), other.below(cut), method, truth.C, bootstrap, seed)
    return truth, pc


def fold_error(truth: Measured, pc: Any) -> float:
    """Mean |log2(predicted / measured)| over a fold's hidden budgets (NaN: none predicted)."""
    by_c = {b.C: b.multiplier for b in pc.budgets}
    with np.errstate(all="ignore"):
        e = np.log2([by_c[float(c)] for c in truth.C]) - truth.log_m / math.log(2)
    e = e[np.isfinite(e)]
    return float(np.mean(np.abs(e))) if e.size else math.nan


def choose(ref: Ladder, other: Ladder, bootstrap: int, seed: int, pair: Callable) -> MethodChoice:
    """The folds on REF and OTHER and the method they choose (`BASELINE` unless a candidate beats it
    on every fold by the parsimony margin, or with fewer than `MIN_FOLDS` folds)."""
    cuts = fold_cuts(ref, other)
    base = [float(np.mean(np.abs(measured(ref, other, above=c).log_m))) / math.log(2) for c in cuts]
    errors: dict[str, list[float]] = {str(BASELINE): base}
    errors.update({str(m): [math.nan] * len(cuts) for m in CANDIDATES})
    alive = list(CANDIDATES) if len(cuts) >= MIN_FOLDS else []  # too few: the baseline stays, unfitted
    order = list(reversed(range(len(cuts)))) if alive else []  # the largest cut first: most like real use
    what = f"{other.name} vs {ref.name}: choosing the method"
    for i in progress.track(order, desc=what, unit="fold"):
        for m in list(alive):
            try:
                t, pc = hidden(ref, other, cuts[i], m, min(bootstrap, FOLD_BOOTSTRAP), seed, pair)
                errors[str(m)][i] = fold_error(t, pc) if pc is not None else math.nan
            except AnalysisError:
                pass
            if not errors[str(m)][i] <= (1 - validation.PARSIMONY) * base[i] + 1e-15:
                alive.remove(m)  # it lost a fold: the rule cannot choose it, its other folds are not fitted
    names = [str(BASELINE), *map(str, CANDIDATES)]
    fmt = lambda e: f"{e:.2f}" if math.isfinite(e) else "-"
    shown = ", ".join(f"{k} " + "/".join(map(fmt, v)) for k, v in errors.items())
    if len(cuts) < MIN_FOLDS:
        note = (
            f"kept {BASELINE}: too few folds to tell ({len(cuts)} of the {MIN_FOLDS} needed: a fold keeps "
            f"{MIN_FIT_BUDGETS} budgets of each recipe below its cut, with two model sizes, and a measured "
            "multiplier above it); add budgets to the ladders, or force a method with --method"
        )
        return MethodChoice(str(BASELINE), str(BASELINE), tuple(names[1:]), tuple(cuts), errors, note)
    folds = {k: {i: e for i, e in enumerate(v) if math.isfinite(e)} for k, v in errors.items()}
    pick = validation.choose_against(str(BASELINE), folds, names)
    margin = f"{validation.PARSIMONY:.0%} on each of {len(cuts)} folds (mean |log2| error per fold: {shown})"
    if pick == str(BASELINE):
        skipped = any(math.isnan(e) for m in CANDIDATES for e in errors[str(m)])
        note = f"kept {BASELINE}: no candidate beat it by {margin}" + (
            " (-: not fitted after a lost fold)" if skipped else ""
        )
    else:
        note = f"chose {pick}: it beat {BASELINE} by {margin}"
    return MethodChoice(pick, str(BASELINE), tuple(names[1:]), tuple(cuts), errors, note)
