"""Collecting training runs into tables: `load(paths...) -> (runs_df, curves_df)`.

A run directory (written by the training core; its files, statuses and summary fields are
`models.base.rundir`, read here through its `RunDir` and its one `read_metrics`) holds
- `summary.json`: status (completed | diverged | failed), n_params, n_params_non_embedding, tokens,
  flops, final_train_loss, final_eval_loss, tokens_per_s, mfu, ... (written at the end);
- `metrics.jsonl`: one JSON object per logged step (step, tokens, flops, loss, lr, grad_norm,
  step_time_s, tokens_per_s, mfu, and eval_loss at eval steps);
- `.hydra/config.yaml`: the composed config, flattened here into dotted columns (`model.d_model`).

Run directories are found recursively under each path (a sweep directory, or a run itself).
Runs without `summary.json` (unfinished) or whose status is not `completed` (diverged, failed)
are skipped with one warning naming them; a corrupt `metrics.jsonl` line is skipped and counted,
never fatal. Each run's parsed tables are cached as Parquet (keyed by the source files' sizes and
modification times), so re-loading a large sweep reads two small files per run.

Downstream tasks (`eval.tasks` in the trainer): summary.json's `task_metrics` ({task: {loss,
accuracy, chance}}, the final eval) become the columns `task_loss/<task>`, `accuracy/<task>`,
`chance/<task>`, and metrics.jsonl's `task/<task>/loss` / `task/<task>/accuracy` stay in the curves
table; `task_table(runs_df, curves_df)` is the long table `python -m analysis fit-task` reads
(N, D, C, task, task_loss, accuracy, chance, run, step).

`table(*paths)` is the runs table `python -m analysis collect` writes (`write_table`: CSV or
Parquet): runs_df with the column roles `fit` looks for first — N, D, C, loss — in front, then
`selected` and `hparam_group` (`with_selection`): runs that differ only in `optim.*` (an LR sweep
per rung) form one group, and only the best run of each is `selected` for fits
(analysis.core.best_runs); every run stays in the table.

Repeated data: every table has `unique_tokens` (the tokens a run sampled from: its training split,
or `data.max_unique_tokens`) and `epochs` (tokens / unique_tokens) from summary.json
(`with_unique_columns`, applied by `with_roles`); runs written before the trainer recorded them
have NaN there.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import warnings
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import yaml

from analysis.core.best_runs import GROUP, SELECTED, Selection, has_config, select_best_runs
from models.base.errors import AnalysisError
from models.base.jsonio import write_bytes_atomic, write_text_atomic
from models.base.rundir import (
    HYDRA_CONFIG,
    MARKERS,
    METRICS_FILE,
    ROLE_FIELDS,
    ReadStatus,
    RunDir,
    RunRole,
    RunStatus,
    RunSummary,
    iter_run_dirs,
    read_metrics,
)

COMPLETED = RunStatus.COMPLETED  # the status of the runs `load` keeps


class RunWarning(UserWarning):
    """A run was skipped or partly unreadable (the message names it)."""


class RunNote(RunWarning):
    """Not a problem with the data: what the loader left out by design (WSD trunks, whose cooldown
    branches are the runs). Commands and the report show it as a `note:`, not a warning."""


def find_run_dirs(paths: Iterable[str | os.PathLike]) -> list[pathlib.Path]:
    """Every directory at or under `paths` holding a run marker file (`iter_run_dirs`), sorted,
    without duplicates."""
    found: set[pathlib.Path] = set()
    for p in paths:
        root = pathlib.Path(p)
        if not root.exists():
            raise AnalysisError(f"run path not found: {root}")
        found.update(rd.path.resolve() for rd in iter_run_dirs(root.parent if root.is_file() else root))
    return sorted(found)


def flatten(config: object, prefix: str = "") -> dict[str, object]:
    """Nested dicts -> {"a.b.c": value}; lists become JSON strings (one cell per key)."""
    out: dict[str, object] = {}
    if isinstance(config, dict):
        for k, v in config.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(config, (list, tuple)):
        out[prefix[:-1]] = json.dumps(config, default=str)
    else:
        out[prefix[:-1]] = config
    return out


def metrics_frame(run_dir: str | os.PathLike) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame sorted by step (`models.base.rundir.read_metrics`, the one
    reader: null -> NaN; corrupt or non-object lines are skipped, with one warning here)."""
    records = read_metrics(pathlib.Path(run_dir) / METRICS_FILE)
    if records.skipped:
        warnings.warn(records.skipped_message(), RunWarning, stacklevel=2)
    df = pd.DataFrame(list(records))
    if "step" in df.columns:
        df["step"] = pd.to_numeric(df["step"], errors="coerce")
        df = df.dropna(subset=["step"]).sort_values("step", kind="stable").reset_index(drop=True)
    for c in df.columns:
        if df[c].dtype == object:
            conv = pd.to_numeric(df[c], errors="coerce")
            if conv.notna().sum() == df[c].notna().sum():
                df[c] = conv
    return df


def _read_config(run_dir: pathlib.Path) -> dict[str, object]:
    path = run_dir / HYDRA_CONFIG
    if not path.is_file():
        return {}
    try:
        with open(path) as fh:
            cfg = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        warnings.warn(f"{path}: unreadable Hydra config, its columns are missing", RunWarning, stacklevel=2)
        return {}
    return flatten(cfg) if isinstance(cfg, dict) else {}


def read_run(run_dir: str | os.PathLike) -> tuple[RunSummary | None, dict[str, object]]:
    """(its summary, None when missing/corrupt; the flattened Hydra config) of one run."""
    run_dir = pathlib.Path(run_dir)
    return RunDir(run_dir).read_summary(), _read_config(run_dir)


def _signature(run_dir: pathlib.Path) -> str:
    parts = []
    for m in MARKERS:
        p = run_dir / m
        st = p.stat() if p.is_file() else None
        parts.append(f"{m}:{st.st_size}:{st.st_mtime_ns}" if st else f"{m}:-")
    return "|".join(parts)


def default_cache_dir() -> pathlib.Path:
    env = os.environ.get("SCALELAB_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "scalelab" / "runs"


def _cache_paths(cache_dir: pathlib.Path, run_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    key = hashlib.sha1(str(run_dir).encode()).hexdigest()[:20]
    return cache_dir / f"{key}.run.parquet", cache_dir / f"{key}.curve.parquet"


def _parse_run(run_dir: pathlib.Path, name: str) -> tuple[dict, pd.DataFrame]:
    rd = RunDir(run_dir)
    summary = rd.read_summary()
    row: dict[str, object] = {"run": name, "path": str(run_dir)}
    if summary is None:
        row["status"] = str(rd.status)  # ReadStatus: unfinished | corrupt-summary
    else:  # one column per key of the file, the keys this version does not know included
        fields = summary.as_dict()
        row.update({k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in fields.items()})
        row["status"] = str(fields.get("status", ReadStatus.UNKNOWN))  # a word kept as written
    for k, v in _read_config(run_dir).items():
        row[k if k not in row else f"config.{k}"] = v
    curve = metrics_frame(run_dir)
    if not curve.empty:
        curve.insert(0, "run", name)
    return row, curve


def _load_one(run_dir: pathlib.Path, name: str, cache_dir: pathlib.Path | None) -> tuple[dict, pd.DataFrame]:
    if cache_dir is None:
        return _parse_run(run_dir, name)
    sig = _signature(run_dir)
    run_p, curve_p = _cache_paths(cache_dir, run_dir)
    if run_p.is_file() and curve_p.is_file():
        try:
            cached = pd.read_parquet(run_p)
            if cached["_signature"].iloc[0] == sig:
                row = cached.drop(columns=["_signature"]).iloc[0].to_dict()
                row["run"] = name
                curve = pd.read_parquet(curve_p)
                if "run" in curve.columns:
                    curve["run"] = name
                return row, curve
        except Exception:  # a damaged cache file is just a cache miss
            pass
    row, curve = _parse_run(run_dir, name)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        rdf = pd.DataFrame([{**{k: _cell(v) for k, v in row.items()}, "_signature": sig}])
        rdf.to_parquet(run_p, index=False)
        curve.to_parquet(curve_p, index=False)
    except (OSError, ValueError, TypeError) as e:  # caching is an optimisation, never an error
        warnings.warn(f"could not cache {run_dir} ({type(e).__name__}: {e})", RunWarning, stacklevel=2)
    return row, curve


def _cell(v):
    """Parquet needs one type per column; mixed objects are stored as their JSON/str form."""
    if v is None or isinstance(v, (bool, int, float, str, np.floating, np.integer)):
        return v
    return json.dumps(v, default=str)


def load(
    *paths: str | os.PathLike,
    cache_dir: str | os.PathLike | None | bool = True,
    include_unfinished: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs under `paths` -> (runs_df: one row per completed run, curves_df: long per-step table).

    cache_dir: True (default location, $SCALELAB_CACHE_DIR or ~/.cache/scalelab/runs), a path,
    or False/None to disable caching. include_unfinished keeps skipped runs (with their status)
    in runs_df instead of dropping them.
    """
    if not paths:
        raise AnalysisError("runs.load needs at least one run or sweep directory")
    cdir = default_cache_dir() if cache_dir is True else (pathlib.Path(cache_dir) if cache_dir else None)
    dirs = find_run_dirs(paths)
    if not dirs:
        raise AnalysisError(
            f"no run directories (with {', '.join(MARKERS)}) under {', '.join(map(str, paths))}"
        )
    roots = [pathlib.Path(p).resolve() for p in paths]
    rows, curves, skipped, trunks, stopped = [], [], [], [], []
    for d in dirs:
        root = next((r for r in roots if d == r or r in d.parents), d)
        name = str(d.relative_to(root.parent))
        row, curve = _load_one(d, name, cdir)
        if row.get("role") == RunRole.TRUNK:  # a WSD trunk at constant LR: its branches are the runs
            trunks.append(name)
            continue
        if row["status"] != COMPLETED:
            early = row["status"] == RunStatus.STOPPED  # sweep.early_stop: by design, a note
            (stopped if early else skipped).append(name if early else f"{name} ({row['status']})")
            if not include_unfinished:
                continue
        rows.append(row)
        if not curve.empty:
            curves.append(curve)
    if skipped:
        warnings.warn(
            f"skipped {len(skipped)} run(s) that did not complete: {', '.join(skipped)}",
            RunWarning,
            stacklevel=2,
        )
    if stopped:
        warnings.warn(
            f"left out {len(stopped)} run(s) stopped early by sweep.early_stop (their forecast lost "
            f"their rung; a stopped run is never a finished loss): {', '.join(stopped)}",
            RunNote,
            stacklevel=2,
        )
    if trunks:
        warnings.warn(
            f"left out {len(trunks)} WSD trunk run(s) (constant LR; their cooldown branches are "
            f"the runs): {', '.join(trunks)}",
            RunNote,
            stacklevel=2,
        )
    runs_df = with_task_columns(pd.DataFrame(rows))
    curves_df = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=["run", "step"])
    if not runs_df.empty:
        keep = set(runs_df["run"])
        curves_df = curves_df[curves_df["run"].isin(keep)].reset_index(drop=True)
    return runs_df, curves_df


UNIQUE_COLUMNS = ("unique_tokens", "epochs")  # summary.json fields of repeated-data runs


def with_unique_columns(runs_df: pd.DataFrame) -> pd.DataFrame:
    """`runs_df` with numeric `unique_tokens` and `epochs` columns: NaN for a run without them
    (older summaries), `epochs` = tokens / unique_tokens where only the first is recorded."""
    if runs_df.empty:
        return runs_df
    out = runs_df.copy()
    nan = pd.Series(np.nan, index=out.index)
    for c in UNIQUE_COLUMNS:
        out[c] = pd.to_numeric(out[c], errors="coerce") if c in out.columns else nan
    if "tokens" in out.columns:
        derived = pd.to_numeric(out["tokens"], errors="coerce") / out["unique_tokens"].where(
            out["unique_tokens"] > 0
        )
        out["epochs"] = out["epochs"].fillna(derived)
    return out


EXPERTS_COLUMN, ACTIVE_COLUMN = "experts", "n_params_active"  # the MoE laws' roles (fit --law moe)
MOE_EXPERTS_KEY = "model.moe.experts"  # the trainer's expert count as `flatten` writes it


def with_moe_columns(runs_df: pd.DataFrame) -> pd.DataFrame:
    """`runs_df` of a sweep with routed runs (a `model.moe.experts` column) with `experts` (a dense
    run: 1) and `n_params_active` complete (a dense run's active count is its total), so `fit --law
    moe` reads the runs table as it is; a table without routed runs is returned unchanged."""
    if runs_df.empty or MOE_EXPERTS_KEY not in runs_df.columns:
        return runs_df
    out = runs_df.copy()
    if EXPERTS_COLUMN not in out.columns:
        out[EXPERTS_COLUMN] = pd.to_numeric(out[MOE_EXPERTS_KEY], errors="coerce").fillna(1.0)
    if "n_params" in out.columns:
        total = pd.to_numeric(out["n_params"], errors="coerce")
        active = pd.to_numeric(out[ACTIVE_COLUMN], errors="coerce") if ACTIVE_COLUMN in out.columns else total
        out[ACTIVE_COLUMN] = active.fillna(total)
    return out


# ---- downstream tasks ------------------------------------------------------------------------

TASK_PREFIXES = {"loss": "task_loss/", "accuracy": "accuracy/", "chance": "chance/"}
TASK_TABLE_COLUMNS = ("N", "D", "C", "task", "task_loss", "accuracy", "chance", "run", "step")


def _task_metrics(cell: object) -> dict:
    """A runs-table `task_metrics` cell (a dict, its JSON text from the cache, or missing)."""
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError:
            return {}
    return cell if isinstance(cell, dict) else {}


def with_task_columns(runs_df: pd.DataFrame) -> pd.DataFrame:
    """`runs_df` plus `task_loss/<task>`, `accuracy/<task>`, `chance/<task>` from each run's
    `task_metrics` (NaN for a run that did not measure that task)."""
    if runs_df.empty or "task_metrics" not in runs_df.columns:
        return runs_df
    parsed = [_task_metrics(c) for c in runs_df["task_metrics"]]
    names = sorted({t for m in parsed for t, v in m.items() if isinstance(v, dict)})
    cols = {
        f"{prefix}{t}": [pd.to_numeric((m.get(t) or {}).get(key), errors="coerce") for m in parsed]
        for t in names
        for key, prefix in TASK_PREFIXES.items()
    }
    extra = pd.DataFrame(cols, index=runs_df.index, dtype=float)
    return pd.concat([runs_df.drop(columns=[c for c in cols if c in runs_df.columns]), extra], axis=1)


def task_names(runs_df: pd.DataFrame) -> list[str]:
    """The tasks that have a `task_loss/<task>` column."""
    p = TASK_PREFIXES["loss"]
    return sorted(c[len(p) :] for c in runs_df.columns if isinstance(c, str) and c.startswith(p))


def task_table(runs_df: pd.DataFrame, curves_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The long downstream-task table (`fit-task`'s LADDER.csv): columns N, D, C, task,
    task_loss, accuracy, chance, run, step.

    Without `curves_df`: one row per (run, task) from the final eval (D = the run's tokens).
    With it: one row per (run, eval step, task) from metrics.jsonl, D = tokens seen at that
    eval, so a run's rows are its checkpoints and its last row is the final eval. Runs without
    the task, and evals where its loss is missing, give no row."""
    runs_df = with_roles(with_task_columns(runs_df))
    rows = _task_rows_from_curves(runs_df, curves_df) if curves_df is not None else _task_rows_final(runs_df)
    return pd.DataFrame(rows, columns=list(TASK_TABLE_COLUMNS))


def _task_rows_final(runs_df: pd.DataFrame) -> list[dict]:
    rows = []
    for _, r in runs_df.iterrows():
        for t in task_names(runs_df):
            loss = r.get(f"task_loss/{t}")
            if loss is not None and np.isfinite(loss):
                rows.append(
                    {
                        "N": r.get("N"),
                        "D": r.get("D"),
                        "C": r.get("C"),
                        "task": t,
                        "task_loss": loss,
                        "accuracy": r.get(f"accuracy/{t}"),
                        "chance": r.get(f"chance/{t}"),
                        "run": r["run"],
                        "step": r.get("steps"),
                    }
                )
    return rows


def _task_rows_from_curves(runs_df: pd.DataFrame, curves_df: pd.DataFrame) -> list[dict]:
    by_run = {r["run"]: r for _, r in runs_df.iterrows()}
    names = sorted(
        {
            c.split("/")[1]
            for c in curves_df.columns
            if isinstance(c, str) and c.startswith("task/") and c.endswith("/loss")
        }
    )
    if not names:
        return []
    measured = curves_df[[f"task/{t}/loss" for t in names]].notna().any(axis=1)
    evals = curves_df["run"].isin(list(by_run)) & measured
    rows = []
    for _, c in curves_df[evals].iterrows():
        r = by_run[c["run"]]
        for t in names:
            loss = pd.to_numeric(c.get(f"task/{t}/loss"), errors="coerce")
            if np.isfinite(loss):
                rows.append(
                    {
                        "N": r.get("N"),
                        "D": c.get("tokens"),
                        "C": c.get("flops"),
                        "task": t,
                        "task_loss": float(loss),
                        "accuracy": c.get(f"task/{t}/accuracy"),
                        "chance": r.get(f"chance/{t}", np.nan),
                        "run": c["run"],
                        "step": c.get("step"),
                    }
                )
    return rows


TABLE_SUFFIXES = (".csv", ".parquet")


def table(
    *paths: str | os.PathLike,
    cache_dir: str | os.PathLike | None | bool = True,
    include_unfinished: bool = False,
) -> pd.DataFrame:
    """The runs table of `paths`: `load(...)[0]` with N, D, C, loss in front (`with_roles`), then
    the hyperparameter selection columns (`with_selection`)."""
    runs_df = with_roles(load(*paths, cache_dir=cache_dir, include_unfinished=include_unfinished)[0])
    return with_selection(runs_df)[0]


def read_runs(
    path: str | os.PathLike, columns: Mapping[str, str] | None = None, include_unfinished: bool = False
) -> pd.DataFrame:
    """The runs a command reads, from any of the three inputs every command takes: a CSV, a
    Parquet file or a sweep directory (its completed runs, as `collect` writes them). `columns`
    ({role: column}, the --n-col & co. flags) copies each named column to its role's own name
    (N, D, C, loss, U, x, experts), which every reader looks for first."""
    from analysis.core.table import read_table  # table imports nothing of this module

    p = pathlib.Path(path)
    if p.is_dir():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunWarning)
            df = table(p, cache_dir=False, include_unfinished=include_unfinished)
    else:
        df = read_table(p)
    return with_named_columns(df, columns, str(path))


def with_named_columns(
    df: pd.DataFrame, columns: Mapping[str, str] | None, source: str = "the table"
) -> pd.DataFrame:
    """`df` with each user-named column ({role: column}) copied to the role's name; a name that
    is not a column is one error naming the columns there are."""
    if not columns:
        return df
    missing = [f"{c!r} ({role})" for role, c in columns.items() if c not in df.columns]
    if missing:
        shown = ", ".join(map(str, list(df.columns)[:20])) + (" ..." if len(df.columns) > 20 else "")
        raise AnalysisError(f"{source} has no column {', '.join(missing)}; its columns: {shown}")
    df = df.copy()
    for role, c in columns.items():
        if c != role:
            df[role] = df[c]
    return df


def with_selection(runs_df: pd.DataFrame) -> tuple[pd.DataFrame, Selection | None]:
    """`runs_df` with `selected` and `hparam_group` right after the role columns, and the
    selection behind them (None, and the table unchanged, when it holds no run configs)."""
    if not has_config(runs_df):
        return runs_df, None
    sel = select_best_runs(runs_df.drop(columns=[c for c in (SELECTED, GROUP) if c in runs_df.columns]))
    df = sel.table
    front = [c for c in ROLE_FIELDS if c in df.columns]
    rest = [c for c in df.columns if c not in front and c not in (SELECTED, GROUP)]
    return df[front + [SELECTED, GROUP] + rest], sel


def with_roles(runs_df: pd.DataFrame) -> pd.DataFrame:
    """`runs_df` with N, D, C, loss (numeric copies of n_params, tokens, flops, final_eval_loss)
    as its first columns, so `python -m analysis fit` finds them without column flags, the
    `unique_tokens` / `epochs` columns (`with_unique_columns`: U of the repeated-data laws) and,
    for a sweep with routed runs, `experts` and `n_params_active` (`with_moe_columns`)."""
    runs_df = with_moe_columns(with_unique_columns(runs_df))
    roles = {
        role: pd.to_numeric(runs_df[src], errors="coerce")
        for role, src in ROLE_FIELDS.items()
        if src in runs_df.columns and role not in runs_df.columns
    }
    return pd.concat([pd.DataFrame(roles, index=runs_df.index), runs_df], axis=1)


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> pathlib.Path:
    """Write a table as CSV or Parquet, chosen by the suffix; the file appears whole or not at all."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise AnalysisError(f"{path}: the runs table must end in {' or '.join(TABLE_SUFFIXES)}")
    if not path.parent.is_dir():
        raise AnalysisError(f"{path}: directory {path.parent} does not exist")
    if suffix == ".csv":
        write_text_atomic(path, df.to_csv(index=False))
        return path
    buf = io.BytesIO()
    _parquet_safe(df).to_parquet(buf, index=False)
    write_bytes_atomic(path, buf.getvalue())
    return path


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Parquet needs one type per column: object columns hold strings (non-strings as JSON)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = out[c].map(
                lambda v: (
                    None
                    if v is None or (isinstance(v, float) and np.isnan(v))
                    else v
                    if isinstance(v, str)
                    else json.dumps(v, default=str)
                )
            )
    return out
