"""Loss curves: loading one run's logged curve (`load_curve`; several: `load_curves`) and rebuilding
its per-step learning-rate schedule from the rates logged at its steps (docs/fit.md, "Loss
curves"): the rate logged at step s drives the updates after s and is interpolated linearly between
logged steps; a change between two flat stretches is a step change; before the first logged step a
linear warm-up from 0 (ending at `warmup_steps` when given) or, with `warmup="constant"`, the first
logged rate. The law describes the loss after warm-up: only logged steps from the schedule's peak
(its first maximum, Luo et al.'s eta_0) on are fitted and scored (`law_steps`); the warm-up still
counts in S1, the area under the schedule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core.runs import find_run_dirs, metrics_frame
from analysis.core.table import ALIASES, read_table
from models.base.errors import AnalysisError

NAME_COLUMNS = ("run", "curve", "schedule", "name")  # a curves table's curve column
NO_CURVES = (
    "give a folder of curve CSVs (columns step, lr, loss), a run or sweep directory (metrics.jsonl), "
    "or a curves table with a run column and step, lr, loss"
)


@dataclass(frozen=True)
class Curve:
    """One run's logged curve: strictly increasing steps, loss and learning rate at those steps."""

    name: str
    steps: np.ndarray
    loss: np.ndarray
    lr: np.ndarray
    warmup: str = "linear"
    warmup_steps: int | None = None  # linear warm-up length (default: up to the first logged step)

    def schedule(self) -> np.ndarray:
        """Per-step learning rate eta[tau] of the update that produced step tau (tau = 0..last step).

        The rate logged at step s drives the updates after s, so eta[tau] is the logged schedule
        (linearly interpolated) at tau - 1. A gap whose rate changes while the gaps on both sides
        are flat is a step change (two-stage / step-decay schedules): the old rate holds up to
        the logged step where the new one first appears.
        """
        s, lr = self.steps, self.lr
        T, t0 = int(s[-1]), int(s[0])
        eta = np.empty(T + 1)
        tau = np.arange(t0 + 1, T + 1)
        eta[t0 + 1 :] = np.interp(tau - 1, s, lr)
        flat = np.isclose(lr[1:], lr[:-1], rtol=1e-9, atol=0.0)  # per gap (s[i], s[i+1]]
        for i in np.flatnonzero(~flat):
            before = i > 0 and flat[i - 1]
            after = i + 1 >= flat.size or flat[i + 1]
            if before and after:
                eta[s[i] + 1 : s[i + 1] + 1] = lr[i]
        if self.warmup == "linear":
            w = t0 if self.warmup_steps is None else int(self.warmup_steps)
            if not 1 <= w <= t0:
                raise AnalysisError(
                    f"curve {self.name}: warmup_steps must be in [1, first logged step {t0}], not {w}"
                )
            eta[: w + 1] = lr[0] * np.arange(w + 1) / w
            eta[w + 1 : t0 + 1] = lr[0]
        elif self.warmup == "constant":
            eta[: t0 + 1] = lr[0]
        else:
            raise AnalysisError(f"warmup must be 'linear' or 'constant', not {self.warmup!r}")
        return eta

    def law_start(self) -> int:
        """The first logged step the laws describe: the first one logged at the peak rate.

        A log that starts inside the warm-up has rising rates first; those steps are warm-up,
        which the laws do not model (they enter only through S1)."""
        return int(self.steps[peak_index(self.lr)])

    def law_steps(self) -> np.ndarray:
        """Logged steps from `law_start` on: the points a fit uses and an error is scored on."""
        return self.steps[self.steps >= self.law_start()]

    def until(self, step: int) -> "Curve":
        keep = self.steps <= step
        return Curve(
            self.name, self.steps[keep], self.loss[keep], self.lr[keep], self.warmup, self.warmup_steps
        )

    def loss_at(self, steps: np.ndarray) -> np.ndarray:
        """Logged loss at `steps` (which must be logged steps)."""
        return self.loss[np.searchsorted(self.steps, steps)]


PEAK_RTOL = 1e-6  # rates this close to the maximum count as the peak (logs round 3e-4 differently)


def peak_index(eta: np.ndarray) -> int:
    """Index of the schedule's first (near-)maximum: the end of warm-up, Luo et al.'s eta_0.
    Annealing drops eta[k-1] - eta[k] count only for k after it (a warm-up rise is not a
    negative drop)."""
    return int(np.argmax(eta >= np.max(eta) * (1 - PEAK_RTOL)))


def _curve_from_frame(
    df: pd.DataFrame, name: str, loss_col: str | None, warmup: str, warmup_steps: int | None = None
) -> Curve:
    cols = list(df.columns)
    lc = loss_col or next((c for c in ALIASES["loss"] if c in cols), None)
    missing = [c for c in ("step", "lr") if c not in cols] + ([] if lc in cols else [loss_col or "loss"])
    if missing:
        raise AnalysisError(
            f"curve {name}: missing column(s) {', '.join(missing)}; it has {', '.join(map(str, cols))} "
            "(a curve needs step, lr, loss)"
        )
    d = df[["step", "lr", lc]].apply(pd.to_numeric, errors="coerce").dropna()
    if d.empty:
        raise AnalysisError(f"curve {name}: no rows with numeric step, lr and {lc}")
    d = d.sort_values("step").drop_duplicates("step", keep="last")
    steps, lr, loss = d["step"].to_numpy(float), d["lr"].to_numpy(float), d[lc].to_numpy(float)
    if np.any(~np.isfinite(loss)) or np.any(loss <= 0):
        raise AnalysisError(f"curve {name}: {lc} must be finite and > 0")
    if np.any(~np.isfinite(lr)) or np.any(lr < 0) or lr[0] <= 0:
        raise AnalysisError(f"curve {name}: lr must be finite, >= 0, and > 0 at the first logged step")
    if np.any(steps < 0) or np.any(steps != np.round(steps)):
        raise AnalysisError(f"curve {name}: steps must be non-negative integers")
    if steps.size < 2:
        raise AnalysisError(f"curve {name}: needs at least 2 logged steps")
    return Curve(name, steps.astype(np.int64), loss, lr, warmup, warmup_steps)


def load_curve(
    source,
    name: str | None = None,
    loss_col: str | None = None,
    warmup: str = "linear",
    warmup_steps: int | None = None,
) -> Curve:
    """A curve from a CSV or Parquet file (columns step, lr, loss: `read_table`), a run directory
    (metrics.jsonl; eval_loss rows when the run has evaluations, else train loss), or a DataFrame.
    warmup_steps: where the linear warm-up ends (default: at the first logged step)."""
    if isinstance(source, Curve):
        return source
    if isinstance(source, pd.DataFrame):
        return _curve_from_frame(source, name or "curve", loss_col, warmup, warmup_steps)
    path = os.fspath(source)
    base = name or os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    if not os.path.isdir(path):
        return _curve_from_frame(read_table(path), base, loss_col, warmup, warmup_steps)
    m = metrics_frame(path)
    if m.empty:
        raise AnalysisError(f"{path}: no metrics.jsonl rows to build a curve from")
    if loss_col is None and "eval_loss" in m.columns and m["eval_loss"].notna().sum() >= 2:
        loss_col = "eval_loss"
    return _curve_from_frame(m, base, loss_col or "loss", warmup, warmup_steps)


def load_curves(data, **options) -> list[Curve]:
    """Curves as fit-curve loads them (`load_curve` with `options`): from a Curve, a list of curve
    sources, a folder of curve CSVs, a run or sweep directory (one curve per run), a curves table
    (CSV / Parquet / DataFrame; one curve per value of its run column, or one curve without one)."""
    if isinstance(data, Curve):
        return [data]
    if isinstance(data, (list, tuple)):
        return [c for d in data for c in load_curves(d, **options)]
    if isinstance(data, pd.DataFrame):
        return _table_curves(data, "curve", options)
    path = os.fspath(data)
    if not os.path.isdir(path):
        return _table_curves(read_table(path), os.path.splitext(os.path.basename(path))[0], options)
    csvs = sorted(f for f in os.listdir(path) if f.endswith(".csv"))
    if csvs:
        return [load_curve(os.path.join(path, f), **options) for f in csvs]
    runs = find_run_dirs([path])
    if not runs:
        raise AnalysisError(f"no loss curves in {path}: {NO_CURVES}")
    root = os.path.dirname(os.path.abspath(path.rstrip("/")))
    return [load_curve(r, name=os.path.relpath(r, root), **options) for r in runs]


def _table_curves(df: pd.DataFrame, name: str, options) -> list[Curve]:
    """One curve per value of the table's run column (eval_loss when a run logged it at least
    twice, as `load_curve` reads a run directory), or the whole table as one curve."""
    col = next((c for c in NAME_COLUMNS if c in df.columns), None)
    if col is None:
        return [load_curve(df, name=name, **options)]
    out = []
    for run, g in df.groupby(col, sort=True):
        ev = "eval_loss" in g.columns and g["eval_loss"].notna().sum() >= 2
        out.append(load_curve(g.drop(columns=[col]), str(run), "eval_loss" if ev else None, **options))
    if not out:
        raise AnalysisError(f"no loss curves in the table: {NO_CURVES}")
    return out
