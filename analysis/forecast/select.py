"""`auto`'s choice: the baseline (`ratio`), unless a law beats it on the finished curves themselves
(the zoo's rule applied to the data at hand). The finished curves are cut at the fraction the
running ones have reached and forecast from the other finished curves, on up to `MAX_FOLDS` folds:
with several sizes the largest from the smaller ones, then the next; with one size, the longest run
length from the others (`by_length`), then the next. The choice is `validation.choose_against` on
each candidate's mean |ln error| per fold: the baseline unless a candidate beats it by the parsimony
margin on every fold (`mpl` before `transfer`). Without a fold, the baseline. Candidates: `mpl` when
every running run's schedule is known to its end and `MIN_COMPLETE` finished curves log theirs;
`transfer` always.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from analysis.core import validation
from analysis.forecast import schedule
from analysis.forecast.inputs import MIN_POINTS, RunCurve
from analysis.forecast.results import Method, RunForecast
from analysis.forecast.transfer import MIN_COMPLETE
from models.base.errors import AnalysisError

MAX_FOLDS = 2
LENGTH_RTOL = 0.05  # run lengths within 5% are one (logs end a few steps apart)

# (method, frac, runs to forecast, finished curves, keys) -> forecasts: the engine's per-method step
Forecaster = Callable[[Method, float, list[RunCurve], list[RunCurve], Sequence[str]], list[RunForecast]]


def cut_at(c: RunCurve, frac: float) -> RunCurve:
    """The curve's first `frac` of its steps; its logged schedule (when it has one) kept as the plan."""
    plan = (c.step, c.lr) if c.lr is not None else None
    return dataclasses.replace(c.until(frac * c.total_steps), plan=plan)


def by_length(curves: Sequence[RunCurve]) -> list[tuple[float, list[RunCurve], list[RunCurve]]]:
    """[(run length, the runs of that length, the others)], the longest first; none with one length
    (lengths within LENGTH_RTOL are one: `validation.level_index`)."""
    lv, g = validation.level_index(np.array([c.total_steps for c in curves], float), LENGTH_RTOL)
    return [
        (float(lv[k]), [c for c, gi in zip(curves, g) if gi == k], [c for c, gi in zip(curves, g) if gi != k])
        for k in (range(lv.size - 1, -1, -1) if lv.size >= 2 else ())
    ]


def folds(learn: Sequence[RunCurve]) -> list[tuple[str, list[RunCurve], list[RunCurve]]]:
    """[(fold name, finished runs to forecast, finished runs to learn from)] (module docstring)."""
    if len(learn) <= MIN_COMPLETE:
        return []
    N = np.array([c.number("N") for c in learn])
    if np.isfinite(N).all() and (N > 0).all() and validation.levels(N).size >= 2:
        lv, g = validation.level_index(N)
        out = [
            (f"N={lv[k]:.3g} from smaller", [c for c, gi in zip(learn, g) if gi == k], train)
            for k in range(lv.size - 1, 0, -1)
            if len(train := [c for c, gi in zip(learn, g) if gi < k]) >= MIN_COMPLETE
        ]
    else:
        out = [
            (f"{T:.0f} steps from the other lengths", h, t)
            for T, h, t in by_length(learn)
            if len(t) >= MIN_COMPLETE
        ]
    return out[:MAX_FOLDS]


@dataclass(frozen=True)
class AutoChoice:
    """What `auto` chose and the fold errors it chose on."""

    method: Method
    errors: Mapping[str, Mapping[str, float]]  # method -> fold -> mean |ln error|
    frac: float

    def note(self) -> str:
        if not self.errors:
            return (
                f"auto: {self.method} (no fold of the finished curves to test a law on: one size and "
                "one length, or too few finished curves below the largest)"
            )
        parts = [f"{m} {np.mean(list(e.values())):.2%}" for m, e in self.errors.items() if e] or [
            "no method could be scored"
        ]
        nf = max(len(e) for e in self.errors.values())
        return (
            f"auto: {self.method} (finished curves cut at {self.frac:.0%} and forecast from the others, "
            f"{nf} fold(s), mean |error|: {', '.join(parts)}; a law needs to beat the baseline "
            f"{Method.RATIO} on every fold)"
        )


def candidates(going: Sequence[RunCurve], learn: Sequence[RunCurve]) -> list[Method]:
    with_lr = [c for c in learn if c.lr is not None]
    known = bool(going) and len(with_lr) >= MIN_COMPLETE and schedule.known(going, with_lr)
    return [Method.MPL, Method.TRANSFER] if known else [Method.TRANSFER]


def _error(got: Sequence[RunForecast], held: Sequence[RunCurve]) -> float:
    truth = {c.run: c.final_loss for c in held}
    e = [abs(math.log(f.final_loss / truth[f.run])) for f in got if f.final_loss > 0]
    return float(np.mean(e)) if e else math.nan


def select(
    going: Sequence[RunCurve], learn: Sequence[RunCurve], keys: Sequence[str], forecaster: Forecaster
) -> AutoChoice:
    """`auto`'s method for forecasting `going` from the finished curves `learn` (module docstring)."""
    frac = float(np.median([c.frac_seen for c in going])) if going else 1.0
    methods = [Method.RATIO, *candidates(going, learn)]
    errors: dict[str, dict[str, float]] = {str(m): {} for m in methods}
    for name, held, train in folds(learn) if going else ():
        cut = [k for k in (cut_at(c, frac) for c in held) if k.step.size >= MIN_POINTS]
        if not cut:
            continue
        for m in methods:
            try:
                got = forecaster(m, frac, cut, train, keys)
            except AnalysisError:
                continue  # a method that cannot forecast this fold is not scored on it
            e = _error(got, held)
            if math.isfinite(e):
                errors[str(m)][name] = e
    errors = {m: e for m, e in errors.items() if e}
    order = [str(m) for m in methods[1:]]
    chosen = validation.choose_against(str(Method.RATIO), errors, order) if errors else Method.RATIO
    return AutoChoice(Method(chosen), errors, frac)
