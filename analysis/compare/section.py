"""The report's "Recipes" section: a sweep of `sweep.recipes` (or several sweeps given together,
one recipe each) compared recipe by recipe against REF, with the figure.

REF is the sweep's first recipe (the order of `sweep.recipes` in its multirun.yaml, else the order
the runs table lists them); the report's other sections are fitted to REF's runs only, since one
law through two recipes' runs describes neither.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

import pandas as pd

from analysis.compare import render
from analysis.compare.comparison import compare_recipes
from analysis.compare.ladders import RECIPE_COLUMNS, Ladder, check_pair, load_ladders, split_by, sweep_order
from models.base.jsonio import write_figure_atomic

FIGURE = "recipes.png"


def recipe_column(df: pd.DataFrame) -> str | None:
    """The table's recipe column when it holds two recipes or more."""
    col = next((c for c in RECIPE_COLUMNS if c in df.columns), None)
    return col if col is not None and df[col].dropna().nunique() >= 2 else None


def ref_recipe(df: pd.DataFrame, sweep_dir: pathlib.Path | None = None) -> str | None:
    """REF of a table holding several recipes (None: it holds one or none)."""
    col = recipe_column(df)
    if col is None:
        return None
    seen = [str(v) for v in dict.fromkeys(df[col].dropna().tolist())]
    order = [r for r in sweep_order(sweep_dir) if r in seen]
    return (order or seen)[0]


def ref_only(df: pd.DataFrame, ref: str | None) -> pd.DataFrame:
    """The rows of recipe `ref` (the table itself when it holds one recipe)."""
    col = recipe_column(df)
    return df if ref is None or col is None else df[df[col].astype(str) == ref]


def _ladders(
    table: pd.DataFrame, source: str, ref: str | None, more: Sequence[str]
) -> tuple[Ladder, list[Ladder]]:
    if more:  # several sweeps given together: one recipe each, REF the first
        return load_ladders([source, *more])
    ladders = split_by(table, recipe_column(table) or "recipe", source)
    ref_l = next(x for x in ladders if x.name == ref)
    others = [x for x in ladders if x.name != ref]
    for o in others:
        check_pair(ref_l, o)
    return ref_l, others


def recipes_section(
    table: pd.DataFrame,
    source: str,
    out: pathlib.Path,
    budgets: Sequence[float] | None,
    bootstrap: int,
    seed: int,
    more: Sequence[str] = (),
    sweep_dir: pathlib.Path | None = None,
) -> dict | None:
    """The section ({markdown, recipes: compare's JSON, figure}) for a table of several recipes,
    or for `source` against the sweeps `more`; None when there is nothing to compare."""
    ref = ref_recipe(table, sweep_dir)
    if ref is None and not more:
        return None
    ref_l, others = _ladders(table, source, ref, more)
    comp, _ = compare_recipes(ref_l, others, None, budgets, bootstrap, seed)
    rel = f"figures/{FIGURE}"
    (out / "figures").mkdir(parents=True, exist_ok=True)
    write_figure_atomic(out / rel, render.figure(comp), dpi=120)
    return {"markdown": render.markdown(comp, figure=rel), "recipes": comp.to_dict(), "figure": rel}
