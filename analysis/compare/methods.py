"""The compare family's methods (`fits.CompareMethod`) in the one registry, scored by the
`compare` backtest protocol (`auto_shrunk` its default, `no_difference` its baseline).

`fit(table, ref=None, other=None, by=None, columns=None, budgets=None, bootstrap=200, seed=0)`
splits a runs table holding two recipes by its recipe column (`recipe`, `sweep.recipe` or `by`)
into REF (`ref`, default the first) and OTHER, as `compare` does; the record prints and
serialises as compare's table and JSON; `predict(record, {"C": ...})` is the multiplier m(C)
with its 90% interval; `plot` draws m(C) with its band (on `ax`), or both frontiers and m(C).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.compare import render
from analysis.compare.comparison import PairModel, compare_recipes
from analysis.compare.fits import BASELINE, DEFAULT, DOCS, CompareMethod
from analysis.compare.ladders import RECIPE_COLUMNS, check_pair, choose_ref, split_by
from analysis.compare.result import Comparison
from analysis.core.methods import Family, Method, Prediction, Role, register
from models.base.errors import AnalysisError

PROTOCOLS = ("compare",)


@dataclass(frozen=True)
class RecipeFit:
    """One method's comparison of REF with OTHER (at the budgets asked for, default the top budget,
    10x and 100x it) and the fitted model behind it (what `predict` reads at any budget)."""

    comparison: Comparison
    model: PairModel

    def summary(self) -> str:
        return render.text(self.comparison)

    def to_dict(self) -> dict[str, Any]:
        return self.comparison.to_dict()


def _fit(name: CompareMethod):
    def fit(
        table: pd.DataFrame | None,
        ref: str | None = None,
        other: str | None = None,
        by: str | None = None,
        columns: Mapping[str, str] | None = None,
        budgets: Sequence[float] | None = None,
        bootstrap: int = 200,
        seed: int = 0,
    ) -> RecipeFit:
        if table is None:
            raise AnalysisError("a compare method is fitted to a runs table holding two recipes")
        by = by or next((c for c in RECIPE_COLUMNS if c in table.columns), "recipe")
        r, others = choose_ref(split_by(table, by, "the table", columns), ref, by)
        if other is not None:
            others = [o for o in others if o.name == other]
            if not others:
                raise AnalysisError(f"other={other!r}: no such recipe besides REF {r.name}")
        if len(others) > 1:
            names = ", ".join(o.name for o in others)
            raise AnalysisError(f"the table holds more than two recipes: name OTHER (other=: {names})")
        check_pair(r, others[0])
        comp, (model,) = compare_recipes(r, others, name, budgets, bootstrap, seed)
        return RecipeFit(comp, model)

    return fit


def predict(record: RecipeFit, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """The compute multiplier m(C) of OTHER over REF at budgets `C` (> 1: OTHER is better), with its
    90% interval (bootstrap plus the forward-chaining error of log m, widened to hold the point)."""
    if "C" not in inputs:
        raise AnalysisError("a compare method predicts the multiplier at budgets C (predict(C=...))")
    C = np.asarray(inputs["C"], float)
    lm, lo, hi, _ = record.model.log_interval(C.ravel())
    return Prediction(*(np.exp(v).reshape(C.shape) for v in (lm, lo, hi)))


def plot(record: RecipeFit, table: pd.DataFrame | None, ax: Any = None):
    """m(C) with its 90% band on `ax`; without one, a figure of both frontiers and m(C)."""
    if ax is None:
        return render.figure(record.comparison)
    render.multiplier_panel(ax, record.comparison)
    return ax.figure


for _m in CompareMethod:
    _role = Role.DEFAULT if _m == DEFAULT else Role.BASELINE if _m == BASELINE else Role.CANDIDATE
    register(Method(str(_m), Family.COMPARE, PROTOCOLS, _role, _fit(_m), predict, plot, DOCS[_m]))
