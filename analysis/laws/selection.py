"""`--law auto`: choose the Chinchilla form by how well each one extrapolated on the data itself.

A scaling law is used beyond its data, so the form to trust is the one that predicted best
*forward*: each candidate's fit already measures that with forward-chaining folds (fit below a
cut, predict every run above it; `intervals.PredictionError.fold_mae`, the mean |log error|).
The candidates are the Chinchilla law and its tied form (beta = alpha, one parameter fewer; the
form Gadre et al. 2024 fit, whose tokens-per-parameter optimum does not drift with the budget),
and, when the runs repeat their data (D > U), the data-constrained laws (effective data alone,
then with excess parameters; Muennighoff et al. 2023), all then scored where such a law is used,
on the folds of the user's own `backtest --protocol epochs` and `--protocol size`
(`repeated_folds`, `fold_error`). `fit` without --law makes this choice whenever the runs repeat.
The rule keeps the baseline form, Chinchilla's (`BASELINE`: the form of the simple least-squares
baseline every prediction is compared with), unless another candidate beats it by `PARSIMONY`
(10%) on *every* fold (`validation.choose_against`); among those that do, the simplest within
10% of the best mean error wins. Without repeated data the folds are the forward-chaining cuts of
each fit; with repeated data they are two: the runs of more than 4 epochs and the largest models,
each predicted from the rest, because the law is then used for both. One fold that happens to
favour a form can no longer overturn the baseline, and with fewer than `MIN_FOLDS` folds the
baseline is kept with a note (a fixed data-constrained default lost to plain Chinchilla on
held-back ladders: 7.2% vs 1.4% on larger models, 14% vs 8.8% on more epochs).

Selection uses only the fitted runs (with `holdout_above`, only those below the threshold), so
a held-out check stays honest; the chosen law is then refitted with the caller's bootstrap.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core import validation
from analysis.core.enums import DEFAULT_LAW
from analysis.core.table import FitNotice, resolve_inputs
from analysis.laws.choice import EPOCH_CRITERION, PARSIMONY, LawChoice
from analysis.laws.fitting import FitResult, fit_law
from analysis.laws.holdout import REPEAT_TOLERANCE, protocol_split, runs_table
from analysis.laws.registry import get_law
from models.base.errors import AnalysisError

AUTO = "auto"


def repeats(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> bool:
    """Whether some run trained on more tokens than it had unique ones (D > U)."""
    try:
        vals, _ = resolve_inputs(df, ("D", "U"), columns)
    except AnalysisError:
        return False
    return bool((vals["D"] > REPEAT_TOLERANCE * vals["U"]).any())


REPEATED_FOLDS = ("epochs", "size")  # the backtest protocols a repeated-data law is used for
MIN_FOLDS = 2  # fewer folds than this cannot tell a form from the baseline: the baseline is kept


EPOCH_SHARE = 0.6  # without runs beyond 4 epochs: fit on the least-repeated runs, at least this share


def repeated_folds(
    df: pd.DataFrame, columns, holdout_above: float | None = None
) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """When runs repeat their data the law is used to predict more epochs and larger models, so a
    form is scored as `backtest --protocol epochs` and `--protocol size` score it on the same table:
    {fold: (runs to fit, runs to predict)} with the protocols' default cuts (the runs of more than
    4 epochs; the largest model size). A table with no run beyond 4 epochs (the fitted part of an
    epochs backtest) holds out its most-repeated runs instead, keeping EPOCH_SHARE of them to fit.
    A fold that cannot be built (one model size, one epoch count) is left out."""
    if holdout_above is not None:  # select on the fitted runs only, as the folds do
        c = resolve_inputs(df, ("N", "D", "C"), columns)[0]["C"]
        df = df[c <= float(holdout_above)]
    runs = runs_table(df, columns)
    out = {}
    for protocol in REPEATED_FOLDS:
        try:
            held, _ = protocol_split(runs, protocol)  # the backtest protocols' own default cuts
        except AnalysisError:
            if protocol != "epochs":
                continue
            epochs = (runs.D / runs.U).to_numpy()
            held = epochs > validation.share_cut(epochs, EPOCH_SHARE) * REPEAT_TOLERANCE
            if not held.any() or held.all():
                continue
        out[protocol] = (runs[~held], runs[held])
    return out


def fold_error(fit_rows: pd.DataFrame, test: pd.DataFrame, name: str, probe: Mapping[str, Any]) -> float:
    """Law `name` fitted on `fit_rows` (a `runs_table`), its mean |log error| on `test`."""
    kw = {k: v for k, v in probe.items() if k != "holdout_above"}
    fit = fit_law(fit_rows, name, None, bootstrap=0, prediction_intervals=False, **kw)
    pred = fit.predict({k: test[k].to_numpy(float) for k in get_law(name).inputs})
    return validation.fold_mae([np.log(pred / test["loss"].to_numpy(float))])


def too_few_folds(family: str, baseline: str, folds: Mapping[str, Mapping[str, float]]) -> str | None:
    """The `note:` when the baseline was scored on fewer than MIN_FOLDS folds: too few to tell a
    form from it, so it is kept (None when there are enough, or no scored baseline at all)."""
    n = len(folds.get(baseline, {}))
    if n >= MIN_FOLDS or baseline not in folds:
        return None
    return (
        f"--law {family}: {n} fold{'s' * (n != 1)} on these runs (need {MIN_FOLDS}) cannot tell a "
        f"form from the baseline: kept {baseline}; more budgets, sizes or epochs would"
    )


def fit_chosen(
    df: pd.DataFrame,
    columns: Mapping[str, str] | None,
    order: tuple[str, ...],
    baseline: str,
    fit_kwargs: Mapping[str, Any],
    *,
    repeated: bool = False,
    criterion: str | None = None,
    family: str = AUTO,
    shared_folds: bool = False,
) -> FitResult:
    """`fit_law` with the law chosen among `order` (simplest first): `baseline` unless another
    form beats it by PARSIMONY on every forward-chaining fold of its own fit (with `repeated`: on
    the most-repeated runs and the largest models), `validation.choose_against` (`shared_folds`:
    a form that needs more of the ladder is compared on the folds both could be fitted on); the
    result's `law_selection` says which and why (`criterion` in words; `family`: the --law word)."""
    probe = {k: v for k, v in fit_kwargs.items() if k not in ("bootstrap", "prediction_intervals")}
    folds, skipped, probes = {}, {}, {}
    split_runs = repeated_folds(df, columns, probe.get("holdout_above")) if repeated else {}
    for name in order:
        try:
            if repeated:  # scored on held-out runs alone: no fit on every run needed
                folds[name] = {}
                for by, (fit_rows, test) in split_runs.items():
                    try:
                        folds[name][by] = fold_error(fit_rows, test, name, probe)
                    except AnalysisError as e:  # e.g. too few runs below the cut for this form
                        skipped.setdefault(name, f"{by} fold: {e}")
            else:
                probes[name] = fit_law(df, name, columns, bootstrap=0, prediction_intervals=True, **probe)
                folds[name] = {f"{c:.4g}": e for c, e in probes[name].prediction_error.fold_errors}
        except AnalysisError as e:
            folds.pop(name, None)
            skipped[name] = str(e)
            continue
    scores = {  # the pooled forward-chaining error (over every held-out run); repeated: the folds' mean
        k: probes[k].prediction_error.fold_mae if k in probes else float(np.mean(list(v.values())))
        for k, v in folds.items()
        if v
    }
    if not scores:
        if len(skipped) == 1 or len(set(skipped.values())) == 1:  # one reason: say it once
            raise AnalysisError(f"--law {family}: {next(iter(skipped.values()))}")
        raise AnalysisError(
            f"--law {family}: no candidate law could be fitted ("
            + "; ".join(f"{k}: {v}" for k, v in skipped.items())
            + ")"
        )
    chosen = validation.choose_against(baseline, folds, order, PARSIMONY, shared=shared_folds)
    note = too_few_folds(family, baseline, folds)
    if note is not None:
        chosen = baseline
    choice = LawChoice(
        note=note,
        chosen=chosen,
        fold_mae=scores,
        skipped=skipped,
        fold_errors=folds,
        baseline=baseline,
        disagreement=disagreement(probes),
        family=family,
    )
    if choice.disagreement:
        warnings.warn(choice.disagreement, FitNotice, stacklevel=2)
    if repeated:
        choice = dataclasses.replace(choice, criterion=EPOCH_CRITERION)
    elif criterion is not None:
        choice = dataclasses.replace(choice, criterion=criterion)
    if (
        choice.chosen in probes
        and fit_kwargs.get("bootstrap", 1000) == 0
        and fit_kwargs.get("prediction_intervals", True)
    ):
        fit = probes[choice.chosen]  # the probe already is the requested fit
    else:
        fit = fit_law(df, choice.chosen, columns, **fit_kwargs)
    return dataclasses.replace(fit, law_selection=choice)


DISAGREE_AT = 10.0  # candidates are compared at this many times the largest fitted compute


def disagreement(fits: Mapping[str, FitResult]) -> str | None:
    """A warning when two candidate forms predict a run at `DISAGREE_AT` x the top fitted budget
    (the top run's N and D each scaled by its square root) further apart than their 90% prediction
    intervals allow (the intervals do not overlap): the choice of form then decides the answer, and
    the fold errors that made it are the evidence to weigh (`backtest` shows them on more cuts)."""
    preds = {}
    for name, fit in fits.items():
        rng = fit.input_ranges
        if (
            fit.prediction_error is None
            or not {"N", "D"} <= rng.keys()
            or set(fit.law_obj.inputs) - {"N", "D"}
        ):
            continue
        k = DISAGREE_AT**0.5
        at = {"N": np.array([rng["N"][1] * k]), "D": np.array([rng["D"][1] * k])}
        pred, lo, hi = (float(v[0]) for v in fit.predict_interval(at))
        preds[name] = (pred, lo, hi)
    for a, (pa, la, ha) in preds.items():
        for b, (pb, lb, hb) in preds.items():
            if a < b and (ha < lb or hb < la):
                return (
                    f"--law auto: {a} and {b} disagree beyond their 90% intervals at {DISAGREE_AT:g}x the "
                    f"top budget ({pa:.4g} [{la:.4g}, {ha:.4g}] vs {pb:.4g} [{lb:.4g}, {hb:.4g}]): the form "
                    "decides the extrapolation; check both with `python -m analysis backtest`"
                )
    return None


def default_law(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> str:
    """The law `fit` fits without --law: `chinchilla` (`DEFAULT_LAW`), or, when the runs repeat
    their data (D > U), `auto`: the user's own epochs and size backtests decide whether a
    data-constrained form beats Chinchilla clearly enough to replace it (`fit_chosen`). A fixed
    data-constrained default lost to plain Chinchilla on held-back ladders (docs/fit.md)."""
    return AUTO if repeats(df, columns) else str(DEFAULT_LAW)
