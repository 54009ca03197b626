"""The two ladders of a comparison: reading the inputs, splitting a table by recipe, the checks.

Each input of `python -m analysis compare` is a runs table (CSV/parquet) or a sweep directory
(collected as `python -m analysis collect` does); a table with a recipe column (`--by recipe`,
also found as `sweep.recipe`, the column a `sweep.recipes` sweep writes) holds several ladders.
Each ladder keeps the rows a point-law fit uses (`analysis.core.best_runs.rows_to_fit`: the best
run per rung of an LR sweep, chosen within the recipe, never across recipes) as N, D, C, loss.

Bad input is one line: a ladder with one budget (no trend can be seen on it), recipes whose
losses are different quantities (different loss columns, or run configs that measure the loss on
different data: `data.*` keys that differ), a recipe name that is not in the table.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from analysis.core import runs as runs_mod
from analysis.core import table as data_mod
from analysis.core.best_runs import rows_to_fit
from analysis.laws.frontier import budget_labels, frontier_points
from models.base.errors import AnalysisError
from models.base.rundir import RunStatus

RECIPE_COLUMNS = ("recipe", "sweep.recipe")  # `--by recipe` finds either
# run-config keys that decide what the loss is measured on: recipes that differ in one of them have
# losses on different data (a recipe's own corpus size, `data.max_unique_tokens`, is a recipe choice)
EVAL_PREFIXES = ("data.", "eval.tokens", "eval.split")
RECIPE_CHOICES = ("data.max_unique_tokens",)
MIN_BUDGETS = 2  # a ladder needs budgets at two scales at least: one budget shows no trend


@dataclass(frozen=True)
class Ladder:
    """One recipe's runs: N, D, C (training FLOPs) and loss, one row per fitted run."""

    name: str
    N: np.ndarray
    D: np.ndarray
    C: np.ndarray
    loss: np.ndarray
    loss_column: str  # the column the loss was read from
    source: str  # the file, directory or `table[recipe == name]` it came from
    eval_keys: tuple[tuple[str, str], ...] = ()  # (data.* key, value) constant over the ladder

    @property
    def n(self) -> int:
        return int(self.loss.size)

    @property
    def k(self) -> float:
        """FLOPs per parameter-token (C = k N D)."""
        return float(np.median(self.C / (self.N * self.D)))

    @property
    def labels(self) -> np.ndarray:
        """Budget label per run (IsoFLOP groups, else bins: `analysis.laws.frontier.budget_labels`)."""
        return budget_labels(self.C)

    @property
    def n_budgets(self) -> int:
        return int(np.unique(self.labels).size)

    def frontier(self) -> tuple[np.ndarray, np.ndarray]:
        """(C, best loss) of each budget, ascending in C; the loss is the running minimum (a larger
        budget can always train what a smaller one did, so its best loss is never worse)."""
        C, L, _ = frontier_points(self.C, self.loss, self.labels)
        order = np.argsort(C)
        return C[order], np.minimum.accumulate(L[order])

    def below(self, cut: float) -> "Ladder":
        """The runs with C at or below `cut`."""
        m = self.C <= cut
        return dataclasses.replace(self, N=self.N[m], D=self.D[m], C=self.C[m], loss=self.loss[m])


def read_input(path: str | pathlib.Path) -> pd.DataFrame:
    """A runs table (CSV/parquet) or a sweep directory (its completed runs, collected)."""
    return runs_mod.read_runs(path)


def ladder_of(df: pd.DataFrame, name: str, source: str, columns: Mapping[str, str] | None = None) -> Ladder:
    """The fitted runs of one recipe's table as a Ladder (rows with a missing or non-positive value
    are left out, a warning says how many)."""
    columns = dict(columns or {})
    df = rows_to_fit(df, columns.get("loss"))[0]
    loss_col = data_mod._find(df, "loss", columns.get("loss"))
    if loss_col is None:
        raise AnalysisError(f"{source}: {data_mod._missing(df, 'loss', 'loss')}")
    keep = np.ones(len(df), bool)
    for role in ("N", "D", "C", "loss"):
        col = data_mod._find(df, role, columns.get(role))
        if col is not None:
            v = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
            keep &= np.isfinite(v) & (v > 0)
    if "status" in df.columns:
        keep &= df["status"].astype(str).isin((RunStatus.COMPLETED, "nan")).to_numpy()  # nan: no summary
    if (~keep).any():
        warnings.warn(
            f"{source}: {int((~keep).sum())} of {len(df)} rows lack a usable N, D, C or loss; left out"
        )
    if not keep.any():
        raise AnalysisError(f"{source}: no row has a usable N, D (or C) and loss")
    try:
        pts = data_mod.resolve(df[keep], ("N", "D"), columns)
    except AnalysisError as e:
        raise AnalysisError(f"{source}: {e}") from None
    C = pts.inputs.get("C", data_mod.FLOPS_PER_PARAM_TOKEN * pts.inputs["N"] * pts.inputs["D"])
    return Ladder(
        name,
        np.asarray(pts.inputs["N"], float),
        np.asarray(pts.inputs["D"], float),
        np.asarray(C, float),
        np.asarray(pts.y, float),
        str(loss_col),
        source,
        _eval_keys(df[keep]),
    )


def _eval_keys(df: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The run-config keys that say what the loss is measured on, when constant over the table."""
    out = []
    for c in df.columns:
        if str(c).startswith(EVAL_PREFIXES) and str(c) not in RECIPE_CHOICES:
            vals = df[c].astype(str).unique()
            if len(vals) == 1:
                out.append((str(c), str(vals[0])))
    return tuple(out)


def recipe_column(df: pd.DataFrame, by: str) -> str:
    """The table's column `--by` names (`recipe` also finds `sweep.recipe`)."""
    names = (by,) + (RECIPE_COLUMNS if by in RECIPE_COLUMNS else ())
    col = next((c for c in names if c in df.columns), None)
    if col is None:
        raise AnalysisError(
            f"--by {by}: no column {' or '.join(dict.fromkeys(names))}; the table's columns: "
            f"{', '.join(map(str, df.columns[:30]))}"
        )
    return col


def split_by(
    df: pd.DataFrame, by: str, source: str, columns: Mapping[str, str] | None = None
) -> list[Ladder]:
    """One Ladder per value of the recipe column, in the order the values first appear."""
    col = recipe_column(df, by)
    values = [v for v in dict.fromkeys(df[col].tolist()) if not (isinstance(v, float) and math.isnan(v))]
    return [ladder_of(df[df[col] == v], str(v), f"{source}[{col} = {v}]", columns) for v in values]


def choose_ref(ladders: Sequence[Ladder], ref: str | None, by: str) -> tuple[Ladder, list[Ladder]]:
    """(REF, the OTHERs) of a table split by recipe: REF named by `--ref` (default: the first)."""
    names = [x.name for x in ladders]
    if len(ladders) < 2:
        raise AnalysisError(
            f"--by {by}: the table holds {len(ladders)} recipe ({', '.join(names) or 'none'}); "
            "a comparison needs two"
        )
    if ref is None:
        return ladders[0], list(ladders[1:])
    if ref not in names:
        raise AnalysisError(f"--ref {ref}: no such recipe; the table's recipes: {', '.join(names)}")
    return next(x for x in ladders if x.name == ref), [x for x in ladders if x.name != ref]


def check_pair(ref: Ladder, other: Ladder) -> None:
    """One line unless the two ladders can be compared: each has budgets at two scales at least,
    and both measure the same loss (the same loss column; the same `data.*` settings)."""
    for x in (ref, other):
        if x.n_budgets < MIN_BUDGETS:
            lo, hi = float(x.C.min()), float(x.C.max())
            at = f"C = {lo:.3g}" if hi <= lo * 1.1 else f"C {lo:.3g}-{hi:.3g}"
            raise AnalysisError(
                f"{x.name} ({x.source}): one budget only ({x.n} run(s) at {at}): a multiplier's trend "
                f"needs a ladder of at least {MIN_BUDGETS} budgets; add runs at other compute budgets"
            )
    if ref.loss_column != other.loss_column:
        raise AnalysisError(
            f"recipes on different losses: {ref.name}'s loss is column {ref.loss_column!r}, {other.name}'s "
            f"is {other.loss_column!r}; compare them on one loss (name it for both with --loss-col)"
        )
    a, b = dict(ref.eval_keys), dict(other.eval_keys)
    differ = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    if differ:
        k = differ[0]
        raise AnalysisError(
            f"recipes on different losses: {k} is {a[k]!r} for {ref.name} and {b[k]!r} for {other.name} "
            f"(columns {', '.join(differ)} differ): each loss is measured on its own data; evaluate both "
            "recipes on one held-out set"
        )


def sweep_order(sweep_dir: pathlib.Path | None) -> list[str]:
    """The recipes in the order `sweep.recipes` lists them (the sweep's multirun.yaml), or []."""
    f = None if sweep_dir is None else pathlib.Path(sweep_dir) / "multirun.yaml"
    if f is None or not f.is_file():
        return []
    try:
        recipes = ((yaml.safe_load(f.read_text()) or {}).get("sweep") or {}).get("recipes") or {}
    except (yaml.YAMLError, OSError, AttributeError):
        return []
    return [str(k) for k in recipes] if isinstance(recipes, dict) else []


def _name(path: str) -> str:
    p = pathlib.Path(path)
    return p.name if p.is_dir() else p.stem


def load_ladders(
    inputs: Sequence[str],
    by: str | None = None,
    ref: str | None = None,
    columns: Mapping[str, str] | None = None,
) -> tuple[Ladder, list[Ladder]]:
    """(REF, OTHERs) from the command's inputs: each input one recipe (REF the first, or the one
    `ref` names), or with `by` the inputs' rows together split by that column. One input with a
    recipe column (`recipe`, `sweep.recipe`) is split by it without `--by`."""
    if not inputs:
        raise AnalysisError("compare needs REF and at least one OTHER (or one table with --by recipe)")
    frames = [(str(p), read_input(p)) for p in inputs]
    if by is None and len(frames) == 1:
        by = next((c for c in RECIPE_COLUMNS if c in frames[0][1].columns), None)
        if by is None:
            raise AnalysisError(
                f"one input ({inputs[0]}) and no recipe column: give REF and OTHER as two inputs, or "
                "name the table's recipe column with --by COLUMN"
            )
    if by is not None:
        df = pd.concat([f for _, f in frames], ignore_index=True)
        src = inputs[0] if len(inputs) == 1 else f"{len(inputs)} inputs"
        ladders = split_by(df, by, src, columns)
        order = sweep_order(pathlib.Path(inputs[0])) if len(inputs) == 1 else []
        ladders.sort(key=lambda x: order.index(x.name) if x.name in order else len(order))
    else:
        names = [_name(p) for p, _ in frames]
        names = [n if names.count(n) == 1 else f"{n}#{i + 1}" for i, n in enumerate(names)]
        ladders = [ladder_of(f, n, p, columns) for n, (p, f) in zip(names, frames)]
    r, others = choose_ref(ladders, ref, by or "input")
    for o in others:
        check_pair(r, o)
    return r, others
