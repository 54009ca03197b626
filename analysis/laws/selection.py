"""`--law auto`: choose the Chinchilla form by how well each one extrapolated on the data itself.

A scaling law is used beyond its data, so the form to trust is the one that predicted best
*forward*: each candidate's fit already measures that with forward-chaining folds (fit below a
cut, predict every run above it; `intervals.PredictionError.fold_mae`, the mean |log error|).
The candidates are the Chinchilla law and its tied form (beta = alpha, one parameter fewer; the
form Gadre et al. 2024 fit, whose tokens-per-parameter optimum does not drift with the budget),
and, when the runs repeat their data (D > U), the data-constrained laws (effective data alone,
then with excess parameters; Muennighoff et al. 2023), all then scored where such a law is used:
fitted on the runs of the fewest epochs, predicting those of the most (`epoch_holdout_error`).
The rule is parsimonious: the simplest candidate whose fold error is within `PARSIMONY` (10%)
of the best wins, because fold errors of near-equal forms differ by noise, and the simpler form
extrapolates more stably when they do. Measured on the shared data (benchmarks/holdout_eval.py,
docs/analysis.md): the tied form wins on Epoch's Chinchilla runs (held-out error 0.92% vs
1.02% for the free form) and on most Gadre et al. compute hold-outs.

Selection uses only the fitted runs (with `holdout_above`, only those below the threshold), so
a held-out check stays honest; the chosen law is then refitted with the caller's bootstrap.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import pandas as pd

from analysis import validation
from analysis.laws.fitting import FitResult, fit_law
from models.base.errors import AnalysisError

AUTO = "auto"
CANDIDATES = ("chinchilla_tied", "chinchilla")  # simplest first
# ...and when the runs repeat their data (a U column with D > U somewhere): the data-constrained
# forms too, effective data alone before the excess-parameter term (analysis/laws/repeated.py)
REPEATED_CANDIDATES = (*CANDIDATES, "data_constrained_d", "data_constrained")
REPEAT_TOLERANCE = 1.01  # D > 1.01 U: a run that repeats (not one rounded to whole steps)
PARSIMONY = validation.PARSIMONY  # a more complex form must predict forward >10% better to be chosen


@dataclass(frozen=True)
class LawChoice:
    """Which law `--law auto` chose, and why (the `law_selection` object of `fit --json`)."""

    chosen: str  # the law fitted and reported
    fold_mae: dict[str, float]  # candidate -> mean |log error| of its forward-chaining predictions
    skipped: dict[str, str]  # candidate -> why it could not be fitted (e.g. a fixed parameter it lacks)
    parsimony: float = PARSIMONY
    criterion: str = "forward-chaining fold error; the simplest law within the parsimony margin of the best"

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "fold_mae": dict(self.fold_mae),
            "skipped": dict(self.skipped),
            "parsimony": self.parsimony,
            "criterion": self.criterion,
        }

    @property
    def message(self) -> str:
        scores = ", ".join(f"{k} {v:.3%}" for k, v in self.fold_mae.items())
        what = (
            "error on the most-repeated runs"
            if self.criterion == EPOCH_CRITERION
            else "forward-chaining error"
        )
        return f"--law auto chose {self.chosen} ({what}: {scores})"


def repeats(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> bool:
    """Whether some run trained on more tokens than it had unique ones (D > U)."""
    from analysis.laws.points import resolve_inputs

    try:
        vals, _ = resolve_inputs(df, ("D", "U"), columns)
    except AnalysisError:
        return False
    return bool((vals["D"] > REPEAT_TOLERANCE * vals["U"]).any())


EPOCH_SHARE = 0.6  # repeated data: fit on the runs of the fewest epochs (at least this share)
EPOCH_CRITERION = (
    "repeated data: mean |log error| on the runs of the most epochs, fitted on the others (at least "
    f"{EPOCH_SHARE:.0%} of the runs); the simplest law within the parsimony margin of the best"
)


def epoch_holdout_error(df: pd.DataFrame, name: str, columns, probe: Mapping[str, Any]) -> float:
    """When runs repeat their data the law is used to predict more epochs, so a form is scored
    there: fitted on the runs of the fewest epochs (the smallest epoch cut that keeps EPOCH_SHARE
    of the runs), it predicts the runs above the cut (mean |log error|)."""
    import numpy as np

    from analysis.laws.points import resolve, resolve_inputs
    from analysis.laws.registry import get_law

    inputs = get_law(name).inputs
    if probe.get("holdout_above") is not None:  # select on the fitted runs only, as the folds do
        c = resolve_inputs(df, ("N", "D", "C"), columns)[0]["C"]
        df = df[c <= float(probe["holdout_above"])]
    vals, _ = resolve_inputs(df, ("N", "D", "U"), columns)
    ep = vals["D"] / vals["U"]
    cut = validation.share_cut(ep, EPOCH_SHARE)
    fit_rows, test = ep <= cut * REPEAT_TOLERANCE, ep > cut * REPEAT_TOLERANCE
    if not test.any():
        raise AnalysisError("every run has the same number of epochs: nothing to hold out")
    kw = {k: v for k, v in probe.items() if k != "holdout_above"}
    fit = fit_law(df[fit_rows], name, columns, bootstrap=0, prediction_intervals=False, **kw)
    held = resolve(df[test], inputs, columns)
    pred = fit.predict({k: held.inputs[k] for k in inputs})
    return float(np.mean(np.abs(np.log(pred / held.y))))


def fit_auto(df: pd.DataFrame, columns: Mapping[str, str] | None = None, **fit_kwargs) -> FitResult:
    """`fit_law` with the law chosen among `CANDIDATES` (see the module docstring); the result's
    `extras["law_selection"]` says which and why."""
    probe = {k: v for k, v in fit_kwargs.items() if k not in ("bootstrap", "prediction_intervals")}
    scores, skipped, probes = {}, {}, {}
    repeated = repeats(df, columns)
    order = REPEATED_CANDIDATES if repeated else CANDIDATES
    for name in order:
        try:
            if repeated:  # scored on the most-repeated runs alone: no fit on every run needed
                scores[name] = epoch_holdout_error(df, name, columns, probe)
            else:
                probes[name] = fit_law(df, name, columns, bootstrap=0, prediction_intervals=True, **probe)
                scores[name] = probes[name].prediction_error.fold_mae
        except AnalysisError as e:
            skipped[name] = str(e)
            continue
    if not scores:
        raise AnalysisError(
            "--law auto: no candidate law could be fitted ("
            + "; ".join(f"{k}: {v}" for k, v in skipped.items())
            + ")"
        )
    choice = LawChoice(chosen=validation.choose(scores, order, PARSIMONY), fold_mae=scores, skipped=skipped)
    if repeated:
        choice = dataclasses.replace(choice, criterion=EPOCH_CRITERION)
    if (
        choice.chosen in probes
        and fit_kwargs.get("bootstrap", 1000) == 0
        and fit_kwargs.get("prediction_intervals", True)
    ):
        fit = probes[choice.chosen]  # the probe already is the requested fit
    else:
        fit = fit_law(df, choice.chosen, columns, **fit_kwargs)
    fit.extras["law_selection"] = choice.to_dict()
    return fit


def default_law(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> str:
    """The law `fit` fits without --law: `data_constrained` when the runs repeat their data (D > U:
    on the backtest zoo's 4 repeated-data ladders it is the one candidate no worse than the
    Chinchilla baseline by more than 10% on held-out epochs, 1.37% vs 2.86% leave-one-dataset-out,
    docs/backtests.md), else `DEFAULT_LAW` (chinchilla)."""
    from analysis.laws.enums import DEFAULT_LAW, LawName

    return str(LawName.DATA_CONSTRAINED) if repeats(df, columns) else str(DEFAULT_LAW)
