"""Hyperparameter-aware run selection: the best run per (budget, shape) of an LR sweep.

Why: a scaling law describes the loss a model shape reaches on a token budget *when trained
well*. A sweep that trains every rung at several learning rates (or other `optim.*` settings)
holds runs that are the same experiment done more or less well; fitting all of them mixes
under-tuned runs into the law and bends it. So runs are grouped by everything that defines the
science -- the flattened run config minus `optim.*` and minus keys that only change how a run is
run (sharding, multi-host start-up, sweep bookkeeping, eval/checkpoint/log cadence) -- plus the
parameter count and the planned token count. Within a group whose runs differ in some `optim.*`
value, the run with the lowest final loss is selected; a group whose runs all share their
optimiser settings (a single run, or repeats) is kept whole. The seed stays in the key: picking
the luckiest seed would bias the law low, so seeds are never merged.

A best run whose value of a swept hyperparameter is the lowest or highest one tried gets a
warning: the optimum may lie outside the swept range, and the law would then be fitted to
under-tuned runs after all.

Pure DataFrame in, DataFrame out (no file I/O), so `collect`, `fit` and `report` share it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.core.table import LOSS_COLUMNS, TABLE_COLUMNS
from analysis.core.vertex import MIN_VALUES, vertex
from models.base.rundir import RunStatus

OPTIM_PREFIX = "optim."
# Config keys that change how a run is run, not what it learns (never part of the group key).
NOT_SCIENCE_PREFIXES = (OPTIM_PREFIX, "sharding.", "distributed.", "hydra.", "sweep.")
NOT_SCIENCE_KEYS = frozenset(
    {
        "train.eval_every",
        "train.ckpt_every",
        "train.log_every",
        "train.keep_checkpoints",
        "train.progress_every_s",
        "train.loss_ceiling",
        # how a run is run: checkpoint cadence, and WSD branches (equal to the run trained alone)
        "train.ckpt_every_s",
        "train.async_checkpoints",
        "train.branch_from",
        "train.branch_step",
        "train.branch_points",
    }
)
# ... except a run's recipe (`sweep.recipes`, experiments/sweeps/recipes.py): two recipes are two
# experiments, even when they differ only in `optim.*`; never merged into one rung
SCIENCE_KEYS = frozenset({"sweep.recipe"})
# Columns of the runs table (analysis.core.runs) that say which shape and budget a run is (N and loss:
# analysis.core.table's, the same numbers under either name).
N_COLUMNS = TABLE_COLUMNS["N"]
D_COLUMNS = ("total_tokens", "tokens", "D")  # planned length first: a diverged run's `tokens` is partial
BUDGET_COLUMNS = ("budget", "sweep.budget")
SELECTED, GROUP = "selected", "hparam_group"


@dataclasses.dataclass(frozen=True)
class HparamGroup:
    """One (budget, shape) whose runs differ only in `optim.*`: what was tried, what won."""

    group: int
    label: str  # "C=1e+11, N=12,345" (or N and D without a budget)
    n_params: float
    tokens: float
    budget: float  # NaN when the table names none
    runs: tuple[str, ...]
    losses: tuple[float, ...]  # NaN for runs that did not complete
    values: dict[str, tuple[Any, ...]]  # swept optim.* key -> the value of each run
    best: str | None  # None: no run of the group completed
    best_loss: float
    edges: tuple[str, ...]  # "optim.lr=0.01 is the highest of 3 tried", ...

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "label": self.label,
            "N": self.n_params,
            "D": self.tokens,
            "budget": self.budget,
            "runs": list(self.runs),
            "losses": list(self.losses),
            "values": {k: list(v) for k, v in self.values.items()},
            "best": self.best,
            "best_loss": self.best_loss,
            "at_edge": list(self.edges),
        }


@dataclasses.dataclass(frozen=True)
class Selection:
    """The runs table with `hparam_group` and `selected` columns, and the swept groups."""

    table: pd.DataFrame  # every input row, in input order, plus the two columns
    varied: tuple[str, ...]  # optim.* keys that differ inside some group
    groups: tuple[HparamGroup, ...]  # the swept groups only (more than one optim setting)
    n_unchanged: int  # rows outside swept groups, kept as they are

    @property
    def active(self) -> bool:
        """Whether any runs were merged (an LR / hyperparameter sweep was found)."""
        return bool(self.groups)

    @property
    def x_param(self) -> str | None:
        """The hyperparameter to plot loss against: optim.lr when swept, else the first numeric one."""
        if OPTIM_PREFIX + "lr" in self.varied:
            return OPTIM_PREFIX + "lr"
        numeric = [
            k for k in self.varied if all(_is_number(v) for g in self.groups for v in g.values.get(k, ()))
        ]
        return numeric[0] if numeric else None

    @property
    def selected(self) -> pd.DataFrame:
        """The rows a law is fitted to."""
        return self.table[self.table[SELECTED]]

    @property
    def kind(self) -> str:
        return "LR sweep" if self.varied == (OPTIM_PREFIX + "lr",) else "hyperparameter sweep"

    @property
    def message(self) -> str:
        """One line saying what was merged (empty when nothing was)."""
        if not self.active:
            return ""
        kind = self.kind
        n = sum(len(g.runs) for g in self.groups)
        rest = f"; {self.n_unchanged} other run(s) kept as they are" if self.n_unchanged else ""
        return (
            f"{kind}: {n} runs in {len(self.groups)} groups differ only in {', '.join(self.varied)}; "
            f"fitting the best run per (budget, shape){rest}"
        )

    @property
    def warnings(self) -> list[str]:
        """Groups whose best run sits at the edge of the swept range, or that have no completed run."""
        out = []
        for g in self.groups:
            if g.best is None:
                out.append(f"{g.label}: no run of its {self.kind} completed; the rung is left out of the fit")
            for e in g.edges:
                out.append(
                    f"{g.label}: the best run has {e}; the optimum may lie outside the swept range "
                    "-- extend the sweep there"
                )
        return out

    def at_optimum(self, loss_cols: list[str], window: int = 1) -> tuple[pd.DataFrame, list[dict]]:
        """The selected rows with each swept rung's loss replaced by the loss at its fitted
        optimum: the vertex of a quadratic in ln(x_param) through the best run and its
        neighbours (analysis.core.vertex), so a rung is not charged for the grid's spacing. Rungs
        whose best is at the grid's edge, whose loss is not convex there, that swept more than
        one key or fewer than 3 values keep their best run's loss. Every column of `loss_cols` is
        set (a table's `loss` and `final_eval_loss` are the same number). Also returns one record per
        swept rung (label, best_loss, loss_at_optimum or None, optimum, why not)."""
        out = self.selected.copy()
        param, records = self.x_param, []
        for g in self.groups:
            rec = {"label": g.label, "best_loss": g.best_loss, "loss_at_optimum": None, "optimum": None}
            records.append(rec)
            if g.best is None or param is None or set(g.values) != {param}:
                rec["kept"] = "the rung swept another key than " + str(param)
                continue
            prof: dict[float, float] = {}
            for v, l in zip(g.values[param], g.losses):
                if math.isfinite(l) and float(v) > 0:
                    prof[float(v)] = min(l, prof.get(float(v), math.inf))
            if len(prof) < MIN_VALUES:
                rec["kept"] = f"fewer than {MIN_VALUES} values of {param} completed"
                continue
            xs = sorted(prof)
            vx = vertex(np.array(xs), np.array([prof[v] for v in xs]), window)
            if not vx.usable:
                rec["kept"] = "the best value is at the grid's edge" if vx.edge else "not convex"
                continue
            rec.update(loss_at_optimum=vx.loss, optimum=math.exp(vx.x))
            rows = (out[GROUP] == g.group).to_numpy()
            out.loc[rows, loss_cols] = vx.loss
        return out, records

    def to_dict(self) -> dict[str, Any]:
        """What report.json and `collect --json` record about the selection."""
        return {
            "active": self.active,
            "message": self.message,
            "varied": list(self.varied),
            "x_param": self.x_param,
            "n_runs": int(len(self.table)),
            "n_selected": int(self.table[SELECTED].sum()),
            "n_unchanged": self.n_unchanged,
            "groups": [g.to_dict() for g in self.groups],
            "warnings": self.warnings,
        }


def science_columns(df: pd.DataFrame) -> list[str]:
    """Config columns (dotted names from the flattened run config) that define what a run learns."""
    return [
        c
        for c in df.columns
        if isinstance(c, str)
        and "." in c
        and (not c.startswith(NOT_SCIENCE_PREFIXES) or c in SCIENCE_KEYS)
        and c not in NOT_SCIENCE_KEYS
    ]


def optim_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if isinstance(c, str) and c.startswith(OPTIM_PREFIX)]


def has_config(df: pd.DataFrame) -> bool:
    """Whether `df` is a runs table with the run configs in it (so a selection can be made)."""
    return bool(optim_columns(df))


def select_best_runs(df: pd.DataFrame, loss_col: str | None = None) -> Selection:
    """Group the runs of `df` by (science config, N, planned D) and select the best of each group
    that differs only in `optim.*`: in such a group only the run with the lowest loss among the
    eligible ones (finite positive loss and, where the table has a `status` column, `completed`)
    is `selected`. Rows of other groups are all `selected`: they are fitted (or refused by the
    fit's own checks) exactly as without a sweep."""
    table = df.copy()
    optim = optim_columns(table)
    if not optim or table.empty:
        table[GROUP] = np.arange(len(table))
        table[SELECTED] = True
        return Selection(table, (), (), int(len(table)))
    loss_col = loss_column(table, loss_col)
    keys = _group_keys(table)
    order = sorted(set(keys), key=lambda k: (_num_key(k[-2]), _num_key(k[-1]), k))
    gid = {k: i for i, k in enumerate(order)}
    table[GROUP] = [gid[k] for k in keys]
    eligible = _eligible(table, loss_col)
    selected = pd.Series(True, index=table.index)  # rows outside swept groups stay as they are
    groups, varied = [], []
    for i in range(len(order)):
        rows = np.flatnonzero(table[GROUP].to_numpy() == i)
        swept = [c for c in optim if len(rows) > 1 and _n_distinct(table[c].iloc[rows]) > 1]
        if not swept:
            continue
        varied += [c for c in swept if c not in varied]
        group = _choose(table, rows, swept, loss_col, eligible, i)
        selected.iloc[rows] = False
        if group.best is not None:
            selected.iloc[rows[list(group.runs).index(group.best)]] = True
        groups.append(group)
    table[SELECTED] = selected.to_numpy(bool)
    n_swept = sum(len(g.runs) for g in groups)
    return Selection(table, tuple(varied), tuple(groups), int(len(table) - n_swept))


def marked(df: pd.DataFrame) -> pd.Series:
    """The rows a table's `selected` column marks (true/1, as `collect` writes it, or read back)."""
    return df[SELECTED].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0")).astype(bool)


def rows_to_fit(df: pd.DataFrame, loss_col: str | None = None) -> tuple[pd.DataFrame, Selection | None]:
    """(the rows a point-law fit uses, the selection or None): a table with run configs (from
    `collect`) reduced to the best run per (budget, shape) of an LR / optim.* sweep, recomputed
    from its config columns; a table without them but with a `selected` column keeps its marked
    rows; any other table whole. `fit` and `backtest` both fit these rows."""
    if not has_config(df):
        return (df[marked(df)], None) if SELECTED in df.columns else (df, None)
    sel = select_best_runs(
        df.drop(columns=[c for c in (SELECTED, GROUP) if c in df.columns]), loss_col=loss_col
    )
    return (sel.selected, sel) if sel.active else (df, None)


def loss_column(df: pd.DataFrame, loss_col: str | None) -> str | None:
    if loss_col is not None:
        return loss_col if loss_col in df.columns else None
    return next((c for c in LOSS_COLUMNS if c in df.columns), None)


def _eligible(df: pd.DataFrame, loss_col: str | None) -> pd.Series:
    """Rows that can be selected: a finite positive loss and (if recorded) status `completed`.
    Without a loss column nothing can be judged, and every row stays selected."""
    if loss_col is None:
        return pd.Series(True, index=df.index)
    loss = pd.to_numeric(df[loss_col], errors="coerce")
    ok = np.isfinite(loss) & (loss > 0)
    if "status" in df.columns:
        ok &= df["status"].astype(str).eq(RunStatus.COMPLETED)
    return pd.Series(ok.to_numpy(bool), index=df.index)


def _first_number(df: pd.DataFrame, names: tuple[str, ...]) -> np.ndarray:
    """Per row, the first finite value among the columns `names` (NaN if none)."""
    out = np.full(len(df), np.nan)
    for c in names:
        if c in df.columns:
            v = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
            out = np.where(np.isnan(out), v, out)
    return out


def _group_keys(df: pd.DataFrame) -> list[tuple]:
    """One hashable key per row: its science config values, then N and the planned D."""
    cols = science_columns(df)
    N, D = _first_number(df, N_COLUMNS), _first_number(df, D_COLUMNS)
    values = [df[c].map(_norm).tolist() for c in cols]
    return [tuple(v[i] for v in values) + (_norm(N[i]), _norm(D[i])) for i in range(len(df))]


def _norm(v: Any) -> Any:
    """A config cell as a comparable key: numbers to 10 significant digits, missing as None."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if _is_number(v):
        return f"{float(v):.10g}"
    return str(v)


def _num_key(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def _is_number(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _n_distinct(s: pd.Series) -> int:
    return len({_norm(v) for v in s})


def _choose(
    df: pd.DataFrame, rows: np.ndarray, swept: list[str], loss_col: str | None, eligible: pd.Series, gid: int
) -> HparamGroup:
    """The best eligible run of one swept group and the edges of the range it sits at."""
    sub = df.iloc[rows]
    names = tuple(str(r) for r in (sub["run"] if "run" in sub.columns else sub.index))
    loss = (
        pd.to_numeric(sub[loss_col], errors="coerce").to_numpy(float)
        if loss_col
        else np.full(len(rows), np.nan)
    )
    ok = eligible.iloc[rows].to_numpy(bool) & np.isfinite(loss)
    best = int(np.argmin(np.where(ok, loss, np.inf))) if ok.any() else None
    values = {c: tuple(_plain(v) for v in sub[c]) for c in swept}
    edges = tuple(e for c in swept for e in [_edge(c, values[c], best)] if best is not None and e)
    N = _first_number(sub, N_COLUMNS)[0]
    D = _first_number(sub, D_COLUMNS)[0]
    budget = (
        float(np.nanmedian(_first_number(sub, BUDGET_COLUMNS))) if _has_any(sub, BUDGET_COLUMNS) else math.nan
    )
    return HparamGroup(
        group=gid,
        label=_label(budget, N, D),
        n_params=float(N),
        tokens=float(D),
        budget=budget,
        runs=names,
        losses=tuple(float(x) for x in loss),
        values=values,
        best=None if best is None else names[best],
        best_loss=math.nan if best is None else float(loss[best]),
        edges=edges,
    )


def _has_any(df: pd.DataFrame, names: tuple[str, ...]) -> bool:
    return bool(np.isfinite(_first_number(df, names)).any())


def _plain(v: Any) -> Any:
    """A cell as a JSON-friendly value (numpy scalars to Python, numbers kept numeric)."""
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v


def _edge(col: str, values: tuple[Any, ...], best: int) -> str | None:
    """'optim.lr=0.01 is the highest of 3 tried' when the best value is an end of the range."""
    nums = [float(v) for v in values if _is_number(v)]
    if not _is_number(values[best]) or len(set(nums)) < 2:
        return None
    v, n = float(values[best]), len(set(nums))
    if v == min(nums):
        return f"{col}={v:g}, the lowest of {n} values tried"
    if v == max(nums):
        return f"{col}={v:g}, the highest of {n} values tried"
    return None


def _label(budget: float, N: float, D: float) -> str:
    n = f"N={N:,.0f}" if math.isfinite(N) else "N=?"
    if math.isfinite(budget):
        return f"C={budget:.3g}, {n}"
    return f"{n}, D={D:.3g}" if math.isfinite(D) else n
