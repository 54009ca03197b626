"""What `forecast` reads: runs' loss curves (the whole curve of a finished run, the first part of one
still going) and each run's settings, from a curves table or from sweep directories.

A **curves table** (CSV or Parquet) has one row per logged step: `run`, `step`, `loss`, `D` (tokens
seen so far) and optionally `lr` (the learning rate at that step), plus per-run columns that hold one
value for the whole run: `total_steps` (required: the run's planned length in steps) and its
settings (`N`, `optim.*`, any other). A column counts as a setting when it holds one value in every
run; the per-step columns (`PER_STEP`) never do. Rows without a finite positive loss are dropped.

A table may also give a finished run's `final_loss` (per run): the loss it ended with, when that
is another loss than the curve's (the forecasts are then of it).

A **sweep directory** (or a run directory) is read through `analysis.core.runs` (metrics.jsonl, the
summary, the Hydra config flattened into `optim.lr` & co.): the curve is the run's training loss
(logged every `train.log_every` steps: dense, where the held-out loss is logged only every
`train.eval_every`), and a completed run's final loss is its summary's `final_eval_loss`, the loss
the scaling laws fit (so a forecast is of the final held-out loss); `total_steps` is
the summary's `steps`, or for a run still going its config's `train.steps` or `train.tokens` /
(`train.batch_size` x `model.seq_len`); `N` the summary's `n_params` or, still going, the config's
model (`models.flops.param_count`). Only settings that name what the run learns count for its rung
(`RUNG_PREFIXES`; cadences, sharding and trackers do not). WSD trunks are left out (their branches
are the runs), and so are runs still going with fewer than `MIN_POINTS` points (a note says so).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core import runs as runs_mod
from analysis.core.table import read_table
from models.base.errors import AnalysisError, ConfigError
from models.base.rundir import RunRole, RunStatus
from models.config import ModelConfig
from models.flops import param_count

MIN_POINTS = 2  # logged points a curve needs: a level and a slope
# Columns that vary along a run (never a setting); `D` and `lr` are read, the others ignored.
PER_STEP = ("step", "D", "tokens", "loss", "eval_loss", "lr", "flops", "grad_norm", "step_time_s")
PER_STEP_PREFIXES = ("task/",)
# Settings of a run in a sweep directory that decide what it learns (its rung is the runs equal in all
# of them but the chosen key); N and total_steps always count.
RUNG_PREFIXES = ("model.", "optim.", "data.", "train.batch_size", "train.tokens", "train.steps", "train.seed")
RUNG_EXTRA = ("sweep.budget", "sweep.recipe")  # a recipe (sweep.recipes) is never merged into another's rung
# Run-length bookkeeping that follows from the length (equal within a rung anyway).
NOT_RUNG = ("optim.warmup_tokens", "train.tokens", "train.steps", "data.cache_dir")
TARGET = "final_loss"  # optional per-run column: the loss a finished run ended with (e.g. its eval loss)
COMPLETE_RTOL = 1e-3  # a curve whose last step is within this of total_steps has finished


class ForecastNote(UserWarning):
    """Something `forecast` left out by design (shown as a `note:` line)."""


@dataclass(frozen=True)
class RunCurve:
    """One run's logged loss curve and what identifies it: strictly increasing steps, the loss (and
    the learning rate, when known) at those steps, its planned length and its settings."""

    run: str
    step: np.ndarray
    loss: np.ndarray
    total_steps: int
    settings: Mapping[str, Any] = field(default_factory=dict)
    lr: np.ndarray | None = None  # at the logged steps; None: not logged
    status: str | None = None  # a sweep run's summary status (None: from a table, or still going)
    plan: tuple[np.ndarray, np.ndarray] | None = None  # (steps, lr) of the planned schedule to its end
    # the loss the run ended with when the curve is of another loss (a sweep run: its final eval loss
    # under its training-loss curve); None: the curve's last loss
    target: float | None = None

    @property
    def frac_seen(self) -> float:
        return min(1.0, float(self.step[-1]) / self.total_steps)

    @property
    def finished(self) -> bool:
        return self.step.size > 0 and self.step[-1] >= self.total_steps * (1 - COMPLETE_RTOL)

    @property
    def final_loss(self) -> float:
        return float(self.loss[-1]) if self.target is None else float(self.target)

    def number(self, key: str) -> float:
        """The setting `key` as a float (NaN when missing or not a number)."""
        try:
            return float(self.settings.get(key))
        except (TypeError, ValueError):
            return math.nan

    def until(self, step: float) -> "RunCurve":
        """The curve up to `step` (its logged points at or before it)."""
        keep = self.step <= step
        lr = None if self.lr is None else self.lr[keep]
        return dataclasses.replace(self, step=self.step[keep], loss=self.loss[keep], lr=lr, target=None)


# ---- tables ------------------------------------------------------------------------------------------
def _is_per_step(col: str) -> bool:
    return col in PER_STEP or col.startswith(PER_STEP_PREFIXES)


def _total_steps(run: str, values: pd.Series) -> int:
    v = pd.to_numeric(values, errors="coerce").dropna().unique()
    if v.size == 0:
        raise AnalysisError(
            f"run {run}: no total_steps; give every run its planned length in steps (a total_steps column)"
        )
    if v.size > 1 or not v[0] > 0 or v[0] != round(v[0]):
        raise AnalysisError(f"run {run}: total_steps must be one positive whole number, got {sorted(v)}")
    return int(v[0])


def _plan(g: pd.DataFrame, last: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, lr) of every row with a step and an lr, when those run past the last loss: the
    planned schedule."""
    if "lr" not in g.columns:
        return None
    d = g.assign(step=pd.to_numeric(g["step"], errors="coerce"), lr=pd.to_numeric(g["lr"], errors="coerce"))
    d = d[np.isfinite(d["step"]) & np.isfinite(d["lr"])].sort_values("step").drop_duplicates("step")
    if d.empty or d["step"].iloc[-1] <= last:
        return None
    return d["step"].to_numpy(float), d["lr"].to_numpy(float)


def _checked_curve(run: str, g: pd.DataFrame, total: int, settings: dict, where: str) -> RunCurve | None:
    """The run's points with a finite positive loss, sorted by step (and its planned schedule when
    its lr runs past them); None when it has none."""
    d = g.assign(
        step=pd.to_numeric(g["step"], errors="coerce"), loss=pd.to_numeric(g["loss"], errors="coerce")
    )
    d = d[np.isfinite(d["step"]) & np.isfinite(d["loss"]) & (d["loss"] > 0)]
    d = d.sort_values("step", kind="stable").drop_duplicates("step", keep="last")
    if d.empty:
        return None
    step = d["step"].to_numpy(float)
    if np.any(step < 0) or step[-1] > total * (1 + COMPLETE_RTOL):
        raise AnalysisError(
            f"run {run} in {where}: steps must lie in [0, total_steps={total}], got up to {step[-1]:g}"
        )
    lr = pd.to_numeric(d["lr"], errors="coerce").to_numpy(float) if "lr" in d.columns else None
    if lr is not None and not np.all(np.isfinite(lr)):
        lr = None  # a partly logged schedule is no schedule
    return RunCurve(run, step, d["loss"].to_numpy(float), total, settings, lr, plan=_plan(g, step[-1]))


def curves_from_table(df: pd.DataFrame, where: str) -> list[RunCurve]:
    """One RunCurve per value of the table's `run` column (module docstring)."""
    missing = [c for c in ("run", "step", "loss") if c not in df.columns]
    if missing:
        raise AnalysisError(
            f"{where}: missing column(s) {', '.join(missing)}; a curves table needs run, step, D, loss "
            "per logged step and total_steps (and settings such as N, optim.lr) per run"
        )
    if "total_steps" not in df.columns:
        raise AnalysisError(
            f"{where}: no total_steps column; give every run its planned length in steps (total_steps)"
        )
    per_run = [c for c in df.columns if c not in ("run", "total_steps") and not _is_per_step(str(c))]
    constant = df.groupby("run", sort=False)[per_run].nunique(dropna=False).le(1).all() if per_run else []
    setting_cols = [c for c in per_run if bool(constant[c])] if per_run else []
    out = []
    for run, g in df.groupby("run", sort=True):
        total = _total_steps(str(run), g["total_steps"])
        first = g.iloc[0]
        settings = {c: first[c] for c in setting_cols if not _missing(first[c])}
        settings["total_steps"] = total
        settings.pop(TARGET, None)
        c = _checked_curve(str(run), g, total, settings, where)
        if c is not None:
            target = pd.to_numeric(g[TARGET], errors="coerce").dropna() if TARGET in g.columns else ()
            out.append(dataclasses.replace(c, target=float(target.iloc[0])) if len(target) else c)
    if not out:
        raise AnalysisError(f"{where}: no run has a finite positive loss")
    return out


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# ---- sweep directories ---------------------------------------------------------------------------------
def _planned_steps(row: Mapping[str, Any]) -> int | None:
    """A run's planned steps: its summary's `steps`, else train.steps, else train.tokens / (batch x seq)."""
    for key in ("steps", "train.steps"):
        v = row.get(key)
        if not _missing(v):
            return int(v)
    try:
        per_step = int(row["train.batch_size"]) * int(row["model.seq_len"])
        return max(1, math.ceil(float(row["train.tokens"]) / per_step))
    except (KeyError, TypeError, ValueError):
        return None


def _n_params(row: Mapping[str, Any]) -> float | None:
    v = row.get("n_params")
    if not _missing(v):
        return float(v)
    model = {k[len("model.") :]: v for k, v in row.items() if k.startswith("model.") and not _missing(v)}
    try:
        return float(param_count(ModelConfig.from_mapping(model)))
    except (ConfigError, TypeError, ValueError):
        return None


def _sweep_settings(row: Mapping[str, Any]) -> dict[str, Any]:
    keep = {
        k: v
        for k, v in row.items()
        if isinstance(k, str)
        and (k.startswith(RUNG_PREFIXES) or k in RUNG_EXTRA)
        and k not in NOT_RUNG
        and not _missing(v)
    }
    return keep


def curves_from_runs(path: str) -> list[RunCurve]:
    """One RunCurve per run directory under `path` (module docstring)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", runs_mod.RunWarning)  # unfinished runs are what this reads
        runs_df, curves_df = runs_mod.load(path, include_unfinished=True)  # finished runs: cached
    out, short = [], []
    by_run = {r: g for r, g in curves_df.groupby("run", sort=False)} if not curves_df.empty else {}
    for row in runs_df.to_dict("records"):
        if row.get("role") == RunRole.TRUNK:
            continue
        g = by_run.get(row["run"])
        total = _planned_steps(row)
        if g is None or total is None:
            continue
        settings = _sweep_settings(row)
        settings["N"] = _n_params(row)
        settings["total_steps"] = total
        c = _checked_curve(str(row["run"]), g, total, settings, path)
        status = None if _missing(row.get("status")) else str(row["status"])
        if status in (RunStatus.DIVERGED, RunStatus.FAILED):
            continue
        if c is None or c.step.size < MIN_POINTS:
            short.append(str(row["run"]))
            continue
        final = row.get("final_eval_loss") if status == RunStatus.COMPLETED else None
        target = None if _missing(final) else float(final)
        out.append(dataclasses.replace(c, status=status, target=target))
    if short:
        warnings.warn(
            f"left out {len(short)} run(s) with fewer than {MIN_POINTS} logged points: {', '.join(short)}",
            ForecastNote,
            stacklevel=2,
        )
    if not out:
        raise AnalysisError(f"{path}: no run with at least {MIN_POINTS} logged points to forecast from")
    return out


def read_curves(source: str | os.PathLike | pd.DataFrame, what: str) -> list[RunCurve]:
    """The runs of a curves table (path or DataFrame) or of a sweep / run directory."""
    if isinstance(source, pd.DataFrame):
        return curves_from_table(source, what)
    path = os.fspath(source)
    if not os.path.exists(path):
        raise AnalysisError(f"{what}: not found: {path}")
    if pathlib.Path(path).is_dir():
        return curves_from_runs(path)
    return curves_from_table(read_table(path), path)
