"""`auto`'s choice, and the check of every forecaster's picks: the baseline (`ratio`, whose pick is the
lowest loss at the cut) unless a forecaster beats it on the finished curves themselves (the zoo's
rule applied to the data at hand). The finished curves are cut at the fraction the running ones
have reached and forecast from the other finished curves, on up to `MAX_FOLDS` folds: with several
sizes, as far beyond the learnt-from ones as the running runs are beyond the finished ones (their
geometric mean N over the largest finished N, `x`: the finished runs in (N_max / x, N_max] from
those up to N_max / x, then the next band down; the largest size from the smaller ones, then the
next, when the running runs are no larger); with one size, the longest run length from the others
(`by_length`), then the next. Each method is scored per fold on the final loss (mean |ln error|)
and, with a key to choose on, on its picks (the regret: the final loss of each rung's pick over the
rung's best, averaged over the fold's rungs of two or more runs). `validation.choose_against` makes
both choices: the baseline unless a candidate beats it by the parsimony margin on every fold (`mpl`
before `transfer`). The picks stay the lowest loss at the cut without `MIN_RUNGS` rungs to score
them on, or when that already picked every best run of a fold (no forecaster can beat it there).
The chosen final-loss forecaster's intervals are widened until its fold forecasts' 90% quantile
of |error / sd| is the normal's (`calibration`). Without a fold, the baseline. Candidates: `mpl`
when every running run's schedule is known to its end and `MIN_COMPLETE` finished curves log
theirs; `transfer` always.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from analysis.core import progress, validation
from analysis.forecast import choose as ch
from analysis.forecast import schedule
from analysis.forecast.inputs import MIN_POINTS, RunCurve
from analysis.forecast.results import Method, RunForecast
from analysis.forecast.transfer import MIN_COMPLETE
from models.base.errors import AnalysisError

MAX_FOLDS = 2
MIN_RUNGS = 2  # rungs of two or more finished runs the picks are validated on, at least
MIN_Z = 3  # fold forecasts the interval scale is measured on, at least
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


def folds(
    learn: Sequence[RunCurve], going: Sequence[RunCurve] = ()
) -> list[tuple[str, list[RunCurve], list[RunCurve]]]:
    """[(fold name, finished runs to forecast, finished runs to learn from)] (module docstring)."""
    if len(learn) <= MIN_COMPLETE:
        return []
    N = np.array([c.number("N") for c in learn])
    if np.isfinite(N).all() and (N > 0).all() and validation.levels(N).size >= 2:
        lv, g = validation.level_index(N)
        Ng = np.array([c.number("N") for c in going])
        Ng = Ng[np.isfinite(Ng) & (Ng > 0)]
        step = math.exp(float(np.mean(np.log(Ng))) - math.log(lv[-1])) if Ng.size else 1.0
        if step > 1 + validation.LEVEL_RTOL:  # the runs forecast are larger: folds as far beyond
            out, top = [], float(lv[-1])
            while len(out) < MAX_FOLDS and top / step >= lv[0]:
                cut = top / step
                low = cut * (1 + validation.LEVEL_RTOL)
                held = [c for c, n in zip(learn, N) if low < n <= top * (1 + validation.LEVEL_RTOL)]
                train = [c for c, n in zip(learn, N) if n <= low]
                if held and len(train) >= MIN_COMPLETE:
                    out.append((f"N {cut:.3g}-{top:.3g} from smaller (x{step:.2g})", held, train))
                top = cut
            if out:
                return out
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
    """What the finished curves' folds say: each method's fold errors (final loss) and regrets (picks),
    the forecaster chosen for each, and the interval scale that calibrates the final-loss one."""

    method: Method  # the final losses' forecaster
    errors: Mapping[str, Mapping[str, float]]  # method -> fold -> mean |ln error| of the final loss
    frac: float
    pick: Method = Method.RATIO  # the picks' forecaster (RATIO: the lowest loss at the cut)
    regrets: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    rungs: int = 0  # rungs of two or more finished runs the picks were scored on, over the folds
    scale: float = 1.0  # the final-loss forecaster's sd x this: its fold coverage calibrated to 90%
    candidates: tuple[str, ...] = ()
    choose: str | None = None
    why_pick: str = ""  # why the picks are the lowest loss at the cut, when they are
    label: str = "auto"  # `auto`, or `--method M` (the final losses M's, the picks validated)

    def note(self) -> str:
        """One line: what was chosen and on what evidence."""
        if not self.errors:
            return (
                f"{self.label}: {self.method}, picks by the lowest loss at the cut (no fold of the finished "
                "curves to validate a forecaster on: one size and one length, or too few finished "
                "curves below the largest)"
            )
        mean = lambda e: ", ".join(f"{m} {np.mean(list(v.values())):.2%}" for m, v in e.items() if v)  # noqa: E731
        nf = max(len(e) for e in self.errors.values())
        text = (
            f"{self.label}: {self.method} (finished curves cut at {self.frac:.0%} and forecast from the "
            f"others, {nf} fold(s), mean |error|: {mean(self.errors) or 'no method could be scored'}; "
            f"a forecaster needs to beat the baseline {Method.RATIO} on every fold)"
        )
        if self.scale > 1:
            text += f", intervals x{self.scale:.2f} (its fold coverage)"
        if self.choose is not None:
            by = "the lowest loss at the cut" if self.pick == Method.RATIO else f"{self.pick}'s forecasts"
            text += f"; --choose {self.choose}: picks by {by}"
            if self.regrets:
                text += f" (regret on {self.rungs} rung(s) of the folds: {mean(self.regrets)})"
            if self.why_pick:
                text += f" ({self.why_pick})"
        return text

    def to_dict(self) -> dict:
        """The JSON's `method_choice`."""
        return {
            "chosen": str(self.pick if self.choose is not None else self.method),
            "baseline": str(Method.RATIO),
            "candidates": list(self.candidates),
            "fold_errors": {m: dict(e) for m, e in self.errors.items()},
            "fold_regrets": {m: dict(e) for m, e in self.regrets.items()},
            "forecast_method": str(self.method),
            "pick_method": str(self.pick) if self.choose is not None else None,
            "n_rungs": self.rungs,
            "interval_scale": self.scale,
            "frac": self.frac,
            "note": self.note(),
        }


def candidates(going: Sequence[RunCurve], learn: Sequence[RunCurve]) -> list[Method]:
    with_lr = [c for c in learn if c.lr is not None]
    known = bool(going) and len(with_lr) >= MIN_COMPLETE and schedule.known(going, with_lr)
    return [Method.MPL, Method.TRANSFER] if known else [Method.TRANSFER]


def _error(got: Sequence[RunForecast], held: Sequence[RunCurve]) -> float:
    truth = {c.run: c.final_loss for c in held}
    e = [abs(math.log(f.final_loss / truth[f.run])) for f in got if f.final_loss > 0]
    return float(np.mean(e)) if e else math.nan


def _z(got: Sequence[RunForecast], held: Sequence[RunCurve]) -> list[float]:
    truth = {c.run: c.final_loss for c in held}
    return [
        math.log(f.final_loss / truth[f.run]) / f.log_sd
        for f in got
        if f.final_loss > 0 and f.log_sd > 0 and math.isfinite(f.log_sd)
    ]


def _regret(got: Sequence[RunForecast], held: Sequence[RunCurve], key: str) -> tuple[float, int]:
    """(mean over the rungs of two or more runs of the pick's final loss / the rung's best - 1, rungs)."""
    truth = {c.run: c.final_loss for c in held}
    picks = [c for c in ch.choices({c.run: c.settings for c in held}, got, key) if len(c.members) >= 2]
    r = [truth[c.run] / min(truth[m.run] for m in c.members) - 1 for c in picks]
    return (float(np.mean(r)) if r else math.nan), len(r)


def calibration(z: Sequence[float]) -> float:
    """The sd scale that puts the folds' 90% quantile of |z| at the normal's (never below 1; 1 with
    fewer than MIN_Z points)."""
    z = np.abs(np.asarray(z, float))
    z = z[np.isfinite(z)]
    if z.size < MIN_Z:
        return 1.0
    return max(1.0, float(np.quantile(z, validation.PREDICTION_LEVEL)) / validation.Z90)


def select(
    going: Sequence[RunCurve],
    learn: Sequence[RunCurve],
    keys: Sequence[str],
    forecaster: Forecaster,
    choose: str | None = None,
    methods: Sequence[Method] | None = None,
) -> AutoChoice:
    """The forecasters for `going`'s final losses and for its picks, validated on the finished curves
    `learn` (module docstring); `methods`: the candidates (default: `candidates`), the baseline
    RATIO always scored."""
    frac = float(np.median([c.frac_seen for c in going])) if going else 1.0
    cands = list(methods) if methods is not None else candidates(going, learn)
    order = [Method.RATIO, *[m for m in cands if m != Method.RATIO]]
    errors: dict[str, dict[str, float]] = {str(m): {} for m in order}
    regrets: dict[str, dict[str, float]] = {str(m): {} for m in order}
    zs: dict[str, list[float]] = {str(m): [] for m in order}
    rungs = 0
    fold_list = folds(learn, going) if going else []
    for name, held, train in progress.track(fold_list, desc="forecast: choosing the forecaster", unit="fold"):
        cut = [k for k in (cut_at(c, frac) for c in held) if k.step.size >= MIN_POINTS]
        if not cut:
            continue
        n_rungs = 0
        for m in order:
            try:
                got = forecaster(m, frac, cut, train, keys)
            except AnalysisError:
                continue  # a method that cannot forecast this fold is not scored on it
            e = _error(got, held)
            if math.isfinite(e):
                errors[str(m)][name] = e
                zs[str(m)] += _z(got, held)
            if choose is not None:
                r, n_rungs = _regret(got, held, choose)
                if math.isfinite(r):
                    regrets[str(m)][name] = r
        rungs += n_rungs
    errors = {m: e for m, e in errors.items() if e}
    regrets = {m: e for m, e in regrets.items() if e}
    names = [str(m) for m in order[1:]]
    chosen = validation.choose_against(str(Method.RATIO), errors, names) if errors else Method.RATIO
    pick, why = Method.RATIO, ""
    if choose is not None:
        pick, why = _pick(regrets, rungs, names)
    return AutoChoice(
        Method(chosen),
        errors,
        frac,
        pick,
        regrets,
        rungs,
        calibration(zs.get(str(chosen), [])),
        tuple(names),
        choose,
        why,
    )


def _pick(regrets: Mapping[str, Mapping[str, float]], rungs: int, names: Sequence[str]) -> tuple[Method, str]:
    """The picks' forecaster: the lowest loss at the cut unless a forecaster's picks beat it by the
    parsimony margin on every fold (`validation.choose_against` on the regrets); (method, why not)."""
    base = regrets.get(str(Method.RATIO), {})
    if rungs < MIN_RUNGS or not base:
        return Method.RATIO, (
            f"{rungs} rung(s) of two or more finished runs on the folds: too few to tell a forecaster's "
            f"picks from the lowest loss at the cut (at least {MIN_RUNGS})"
        )
    if max(base.values()) <= 0:
        return Method.RATIO, "the lowest loss at the cut picked every fold's best run"
    if min(base.values()) <= 0:  # a fold it got right cannot be beaten there
        perfect = ", ".join(f for f, e in base.items() if e <= 0)
        return Method.RATIO, f"the lowest loss at the cut picked every best run of {perfect}"
    chosen = validation.choose_against(str(Method.RATIO), regrets, names)
    why = "" if chosen != Method.RATIO else "no forecaster's picks beat it on every fold"
    return Method(chosen), why
