"""`forecast_runs(prefix, complete, choose, method)`: each run's final loss with a 90% interval, from
the part of its curve seen so far, and for each rung the probability that each run ends best.
Methods (`Method`, registered in `methods.py`): `auto` (the default, `select.py`), `transfer`
(`transfer.py`), `ratio` (the baseline, `transfer.RatioFit`) and `mpl` (`law.py`). A run that has
finished is its own forecast (its final loss, a zero-width interval, frac_seen 1).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from analysis.core import validation
from analysis.forecast import choose as ch
from analysis.forecast import schedule, select
from analysis.forecast import transfer as tr
from analysis.forecast.inputs import MIN_POINTS, RunCurve
from analysis.forecast.results import SEEN, FitInfo, Method, RunForecast
from models.base.errors import AnalysisError

FRAC_DIGITS = 3  # runs cut within 0.1% of their length of each other share one fit


@dataclass(frozen=True)
class ForecastResult:
    method: str
    choose: str | None
    runs: tuple[RunForecast, ...]
    choices: tuple[ch.Choice, ...]
    fits: tuple[FitInfo, ...]
    level: float = validation.PREDICTION_LEVEL
    notes: tuple[str, ...] = field(default=())
    method_choice: dict = field(default_factory=dict)  # the forecasters chosen and their fold evidence

    def forecast(self, run: str) -> RunForecast | None:
        return next((r for r in self.runs if r.run == run), None)

    def choice_of(self, run: str) -> ch.Choice | None:
        """The choice of the rung `run` belongs to."""
        return next((c for c in self.choices if any(m.run == run for m in c.members)), None)

    def p_best(self, run: str) -> float | None:
        c = self.choice_of(run)
        return None if c is None else next(m.p_best for m in c.members if m.run == run)

    def summary(self) -> str:
        """What `forecast` prints: notes, fits, each run's forecast, each rung's choice."""
        lines = [f"note: {n}" for n in self.notes]
        for f in self.fits:
            lines.append(
                f"fit at {f.frac:.1%} of the run: {f.method}, {f.n_complete} finished curves, {f.detail}"
            )
        for r in self.runs:
            lo, hi = r.interval
            seen = f"seen {r.frac_seen:.0%}, {r.method}"
            lines.append(f"  {r.run}: final loss {r.final_loss:.4f} (90% {lo:.4f}-{hi:.4f}), {seen}")
        for c in self.choices:
            others = ", ".join(f"{m.value}: {m.p_best:.2f}" for m in c.members)
            lines.append(f"choice {c.run} ({self.choose}={c.value}, p_best {c.p_best:.2f}; {others})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "kind": "forecast",
            "method": self.method,
            "level": self.level,
            "choose": self.choose,
            "runs": [r.to_dict() for r in self.runs],
            "choices": [c.to_dict() for c in self.choices],
            "fits": [f.to_dict() for f in self.fits],
            "notes": list(self.notes),
            "method_choice": self.method_choice,
        }


def _finished(c: RunCurve) -> RunForecast:
    return RunForecast(c.run, c.final_loss, (c.final_loss, c.final_loss), 1.0, SEEN, 0.0)


def _check_prefix(c: RunCurve) -> None:
    if c.step.size < MIN_POINTS:
        raise AnalysisError(
            f"run {c.run}: its curve has {c.step.size} logged point(s); a forecast needs at least "
            f"{MIN_POINTS} (a level and a slope)"
        )


def _by_frac(prefix: Sequence[RunCurve]) -> dict[float, list[RunCurve]]:
    out: dict[float, list[RunCurve]] = {}
    for c in prefix:
        out.setdefault(round(c.frac_seen, FRAC_DIGITS), []).append(c)
    return out


def _plan(c: RunCurve, complete: Sequence[RunCurve]) -> tuple[np.ndarray, np.ndarray] | None:
    """The run's schedule (steps, lr) to its end: logged past the cut, or a finished curve's shape."""
    if c.plan is not None:
        return c.plan
    p = schedule.planned(c, complete) if c.lr is not None else None
    return None if p is None else (p.steps.astype(float), p.lr)


def _transfer_group(
    frac: float, runs: list[RunCurve], complete: list[RunCurve], keys: Sequence[str]
) -> tuple[list[RunForecast], FitInfo]:
    ex = tr.examples(complete, frac)
    needed = [k for k in keys if all(math.isfinite(r.number(k)) for r in runs)]
    cuts = {c.run: tr.cut_of(c, c.step[-1], _plan(c, complete)) for c in runs}
    known = all(k is not None and math.isfinite(k.log_area) for k in cuts.values())
    levels = tr.categories(ex, [c.settings for c in runs], keys[1] if len(keys) > 1 else None)
    fit = tr.fit_transfer(ex, frac, keys, needed, schedule=known, levels=levels)
    out = []
    for c in runs:
        cut = cuts[c.run]
        got = None if cut is None else fit.predict(cut, c.settings)
        if got is None:
            raise AnalysisError(f"run {c.run}: cannot be forecast (no {', '.join(fit.features)} for it)")
        mu, sd = got
        lo, hi = math.exp(mu - validation.Z90 * sd), math.exp(mu + validation.Z90 * sd)
        out.append(RunForecast(c.run, math.exp(mu), (lo, hi), c.frac_seen, Method.TRANSFER, sd))
    detail = f"features {', '.join(fit.features) or 'constant'} (leave-one-out rms {fit.s:.3%})"
    return out, FitInfo(frac, Method.TRANSFER, fit.n, detail, fit.s)


def _ratio_group(
    frac: float, runs: list[RunCurve], complete: list[RunCurve]
) -> tuple[list[RunForecast], FitInfo]:
    fit = tr.fit_ratio(tr.examples(complete, frac), frac)
    out = []
    for c in runs:
        cut = tr.cut_of(c, c.step[-1])
        loss = float(c.loss[-1]) if cut is None else cut.loss
        pred, lo, hi = loss * fit.ratio, loss * fit.lo, loss * fit.hi
        sd = (math.log(fit.hi) - math.log(fit.lo)) / (2 * validation.Z90)
        out.append(RunForecast(c.run, pred, (lo, hi), c.frac_seen, Method.RATIO, max(sd, tr.MIN_SD)))
    detail = f"median final/cut ratio {fit.ratio:.4f} (central 90% {fit.lo:.4f}-{fit.hi:.4f})"
    return out, FitInfo(frac, Method.RATIO, fit.n, detail, math.nan)


def _group(method: str, frac: float, runs, complete, keys) -> tuple[list[RunForecast], FitInfo]:
    if method == Method.RATIO:
        return _ratio_group(frac, runs, complete)
    if method == Method.MPL:
        from analysis.forecast import law  # JAX: loaded only for the law's forecasts

        return law.forecast_group(frac, runs, complete)
    return _transfer_group(frac, runs, complete, keys)


def _forecasts(method: Method, frac: float, runs, complete, keys) -> list[RunForecast]:
    return _group(method, frac, runs, complete, keys)[0]


def _scaled(f: RunForecast, k: float) -> RunForecast:
    """The forecast with its log-loss sd and its interval (in log space, around it) scaled by k."""
    if k == 1.0 or not f.log_sd > 0:
        return f
    lo, hi = (f.final_loss * (b / f.final_loss) ** k for b in f.interval)
    return dataclasses.replace(f, interval=(lo, hi), log_sd=f.log_sd * k)


def _forecast_all(method, going, learn, keys, scale=1.0) -> tuple[dict[str, RunForecast], list[FitInfo]]:
    forecasts, fits = {}, []
    for frac, runs in sorted(_by_frac(going).items()):
        names = {c.run for c in runs}
        got, info = _group(method, frac, runs, [c for c in learn if c.run not in names], keys)
        forecasts.update({f.run: _scaled(f, scale) for f in got})
        fits.append(info)
    return forecasts, fits


def forecast_runs(
    prefix: Sequence[RunCurve],
    complete: Sequence[RunCurve],
    choose: str | None = None,
    method: str = Method.AUTO,
    validate: bool = True,
) -> ForecastResult:
    """Forecast every run of `prefix` from the finished curves `complete` (module docstring).
    `validate` (with `choose` and a method other than `ratio`): the picks use the method's forecasts
    only when its picks beat the lowest loss at the cut on the finished curves' folds
    (`select.select`); False: the method's own picks (the backtest's candidate rows)."""
    if method not in tuple(Method):
        raise AnalysisError(f"unknown forecast method {method!r}; known: {', '.join(Method)}")
    if choose is not None and not any(choose in c.settings for c in prefix):
        have = sorted({k for c in prefix for k in c.settings})
        raise AnalysisError(f"--choose {choose}: no run has that setting; the runs have {', '.join(have)}")
    done = [c for c in prefix if c.finished]
    going = [c for c in prefix if not c.finished]
    for c in going:
        _check_prefix(c)
    learn = [c for c in complete if c.finished]
    keys = ["N"] + ([choose] if choose and choose != "N" else [])
    choice = None
    if going and (method == Method.AUTO or (validate and choose is not None and method != Method.RATIO)):
        fixed = None if method == Method.AUTO else Method(method)
        choice = select.select(going, learn, keys, _forecasts, choose, None if fixed is None else [fixed])
        if fixed is not None:  # the final losses are the method asked for; the picks validated
            choice = dataclasses.replace(choice, method=fixed, scale=1.0, label=f"--method {fixed}")
    final = choice.method if choice is not None else Method(method)
    forecasts, fits = _forecast_all(final, going, learn, keys, choice.scale if choice else 1.0)
    forecasts.update({c.run: _finished(c) for c in done})
    value = {c.run: c.settings.get(choose) if choose else None for c in prefix}
    plain = lambda v: v.item() if isinstance(v, np.generic) else v  # noqa: E731
    tagged = lambda fs: tuple(  # noqa: E731
        dataclasses.replace(fs[c.run], value=plain(value[c.run])) for c in sorted(prefix, key=lambda c: c.run)
    )
    ordered = tagged(forecasts)
    choices: tuple[ch.Choice, ...] = ()
    if choose:
        ranked = ordered
        if choice is not None and choice.pick != final:
            picks, _ = _forecast_all(choice.pick, going, learn, keys)
            ranked = tagged({**picks, **{c.run: _finished(c) for c in done}})
        choices = ch.choices({c.run: c.settings for c in prefix}, ranked, choose)
    notes = (choice.note(),) if choice is not None else ()
    record = choice.to_dict() if choice is not None else _unvalidated(final, choose, bool(going))
    return ForecastResult(
        str(final), choose, ordered, choices, tuple(fits), notes=notes, method_choice=record
    )


def _unvalidated(method: Method, choose: str | None, going: bool) -> dict:
    why = (
        "every run has finished: its forecast is its final loss"
        if not going
        else f"--method {method}"
        + (" --choose: its own picks, not validated" if choose else ": not validated")
    )
    return {
        "chosen": str(method),
        "baseline": str(Method.RATIO),
        "candidates": [],
        "fold_errors": {},
        "fold_regrets": {},
        "forecast_method": str(method),
        "pick_method": str(method) if choose else None,
        "n_rungs": 0,
        "interval_scale": 1.0,
        "frac": None,
        "note": why,
    }
