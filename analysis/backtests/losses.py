"""Loss protocols: hide the top of a ladder, fit every candidate law below, predict what was hidden.

- `budget`: runs with C above the cut (default: the largest budget);
- `size`: runs with N above the cut (default: the largest model size);
- `epochs`: runs with more than E epochs (D / U; default 4);
- `frontier`: the best loss of each hidden budget (the best run of each budget above the cut).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Mapping

import pandas as pd

from analysis.backtests import baselines
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress
from analysis.core.enums import DEFAULT_LAW
from analysis.core.methods import Family
from analysis.core.methods import names as registered
from analysis.laws.allocation import ScalingLaw
from analysis.laws.fitting import fit_law
from analysis.laws.frontier import budget_labels, frontier_points
from analysis.laws.holdout import EPOCHS_DEFAULT, protocol_split, runs_table
from analysis.laws.methods import fit_auto, frontier_loss
from analysis.laws.selection import AUTO, default_law
from models.base.errors import AnalysisError

BASELINE = "baseline_scipy_chinchilla"
FRONTIER_BASELINE = "baseline_minima_power_law"


@dataclasses.dataclass(frozen=True)
class Options:
    """What a backtest hides and how hard it fits (the command's flags)."""

    holdout_above: float | None = None  # budget / frontier: C threshold
    holdout_above_n: float | None = None  # size / lr: N threshold
    holdout_epochs_above: float = EPOCHS_DEFAULT  # epochs
    bootstrap: int = 100  # resamples per candidate fit (intervals)
    seed: int = 0
    # score the baseline and the default only, not every candidate (`--only-default`: the rule's
    # two roles at a fraction of the cost; the zoo's tables score every candidate)
    only_default: bool = False

    def scores(self, role: bool) -> bool:
        """Whether a candidate is scored: every one, or with `only_default` those whose `role`
        (default or baseline) is set."""
        return role or not self.only_default

    columns: Mapping[str, str] | None = None


def _law_score(
    name: str, fit_df: pd.DataFrame, held: pd.DataFrame, opt: Options, default: str
) -> MethodScore:
    """Fit law `name` (or `auto`) on the fitted runs and predict the held-out ones."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kw = dict(bootstrap=opt.bootstrap, seed=opt.seed, prediction_intervals=True)
            fit = fit_auto(fit_df, **kw) if name == AUTO else fit_law(fit_df, name, **kw)
        inputs = {k: held[k].to_numpy(float) for k in fit.law_obj.inputs}
        pred, lo, hi = fit.predict_interval(inputs)
    except AnalysisError as e:
        return MethodScore(name, (), default=name == default, note=f"not fitted: {e}")
    note = fit.law_selection.chosen if name == AUTO and fit.law_selection is not None else ""
    return MethodScore(
        name,
        _points(held, held.loss.to_numpy(), pred, lo, hi),
        default=name == default,
        note=note and f"chose {note}",
    )


def _points(
    held: pd.DataFrame, actual, pred, lo, hi, roles: tuple[str, ...] = ("N", "D", "U", "C")
) -> tuple[Point, ...]:
    cols = [c for c in roles if c in held]
    return tuple(
        Point(
            {c: float(held[c].iloc[i]) for c in cols},
            float(actual[i]),
            float(pred[i]),
            float(lo[i]),
            float(hi[i]),
        )
        for i in range(len(held))
    )


def _baseline(fit_df: pd.DataFrame, held: pd.DataFrame) -> MethodScore:
    b = baselines.fit_chinchilla(fit_df.N.to_numpy(), fit_df.D.to_numpy(), fit_df.loss.to_numpy())
    pred = baselines.predict_chinchilla(b, held.N.to_numpy(), held.D.to_numpy())
    return MethodScore(BASELINE, _points(held, held.loss.to_numpy(), pred, *b.band(pred)), baseline=True)


def point_protocol(df: pd.DataFrame, protocol: str, opt: Options) -> Backtest:
    """budget, size or epochs: every candidate law fitted below the cut, scored above it."""
    runs = runs_table(df, opt.columns)
    thresholds = (opt.holdout_above, opt.holdout_above_n, opt.holdout_epochs_above)
    held, cut = protocol_split(runs, protocol, *thresholds)
    fit_df, test = runs[~held], runs[held]
    laws = registered(Family.POINT, protocol)  # the registry's methods of this protocol, baseline first
    laws = tuple(n for n in laws if n != BASELINE and ("U" in runs or not n.startswith("data_constrained")))
    default = default_law(fit_df)  # what `fit` fits here without --law
    laws = tuple(n for n in laws if opt.scores(n == default))
    methods = [_baseline(fit_df, test)]
    methods += [
        _law_score(n, fit_df, test, opt, default)
        for n in progress.track(laws, desc=f"backtest {protocol}", unit="law")
    ]
    return Backtest(protocol, cut, Metric.REL, tuple(methods))


def budget_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    return point_protocol(df, "budget", opt)


def size_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    return point_protocol(df, "size", opt)


def epochs_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    return point_protocol(df, "epochs", opt)


def frontier_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """The best loss of each hidden budget, by each frontier method of `fit --budget` and by the
    baseline power law of the fitted budgets' best runs."""
    runs = runs_table(df, opt.columns)
    held, cut = protocol_split(runs, "frontier", opt.holdout_above)
    labels = budget_labels(runs.C.to_numpy())
    fit_df = runs[~held]
    C_all, L_all = runs.C.to_numpy(), runs.loss.to_numpy()
    tC, tL, _ = frontier_points(C_all[held], L_all[held], labels[held])
    fC, fL, _ = frontier_points(C_all[~held], L_all[~held], labels[~held])
    cut.update(n_budgets_fit=int(fC.size), n_budgets_held_out=int(tC.size))
    target = pd.DataFrame({"C": tC})
    methods = [_frontier_baseline(fC, fL, target, tL)]
    methods += _frontier_methods(fit_df, target, tL, opt)
    return Backtest("frontier", cut, Metric.REL, tuple(methods))


def _frontier_baseline(fC, fL, target: pd.DataFrame, tL) -> MethodScore:
    if fC.size < 3:
        return MethodScore(FRONTIER_BASELINE, (), baseline=True, note=f"{fC.size} fitted budgets: need 3")
    b = baselines.fit_minima_power_law(fC, fL)
    pred = baselines.predict_minima_power_law(b, target.C.to_numpy())
    return MethodScore(FRONTIER_BASELINE, _points(target, tL, pred, *b.band(pred)), baseline=True)


FRONTIER_CHOSEN = "frontier_chosen"


def _frontier_methods(fit_df: pd.DataFrame, target: pd.DataFrame, tL, opt: Options) -> list[MethodScore]:
    """Each frontier method and the one `fit --budget` chooses (the default)."""
    names = [FRONTIER_CHOSEN]  # the one registered frontier method (it chooses among the frontier forms)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_law(fit_df, DEFAULT_LAW, bootstrap=opt.bootstrap, seed=opt.seed)
        law = ScalingLaw.from_fit(fit)
    except AnalysisError as e:
        return [MethodScore(n, (), default=n == FRONTIER_CHOSEN, note=f"not fitted: {e}") for n in names]
    if fit.frontier is None:
        return [MethodScore(n, (), default=n == FRONTIER_CHOSEN, note="no frontier model") for n in names]
    pred, lo, hi = frontier_loss(law, target.C.to_numpy())
    note = f"chose {fit.frontier.method}"
    return [MethodScore(FRONTIER_CHOSEN, _points(target, tL, pred, lo, hi), default=True, note=note)]


def _fit_scipy_chinchilla(
    table: pd.DataFrame, columns: Mapping[str, str] | None = None, **_
) -> baselines.BaselineResult:
    runs = runs_table(table, columns)
    b = baselines.fit_chinchilla(runs.N.to_numpy(float), runs.D.to_numpy(float), runs.loss.to_numpy(float))
    return baselines.BaselineResult(b, lambda x: baselines.predict_chinchilla(b, x["N"], x["D"]), len(runs))


def _fit_minima_power_law(
    table: pd.DataFrame, columns: Mapping[str, str] | None = None, **_
) -> baselines.BaselineResult:
    runs = runs_table(table, columns)
    C = runs.C.to_numpy(float)
    C, L, _ = frontier_points(C, runs.loss.to_numpy(float), budget_labels(C))
    b = baselines.fit_minima_power_law(C, L)
    return baselines.BaselineResult(b, lambda x: baselines.predict_minima_power_law(b, x["C"]), len(C))


baselines.register_baseline(
    BASELINE,
    Family.POINT,
    ("budget", "size", "epochs"),
    _fit_scipy_chinchilla,
    "Chinchilla by scipy least squares",
)
baselines.register_baseline(
    FRONTIER_BASELINE,
    Family.POINT,
    ("frontier",),
    _fit_minima_power_law,
    "a power law through each budget's best run",
)
