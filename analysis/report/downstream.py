"""The report's "Downstream tasks" section: what the runs' task evals predict at the target budgets.

When the collected runs measured downstream tasks (`eval.tasks` in the trainer: `task_metrics` in
summary.json, `task/<name>/*` in metrics.jsonl), the report fits each task with
`analysis.downstream.fit_downstream` (compute -> task loss -> accuracy, held-out method choice,
90% prediction intervals; docs/downstream.md) on the same runs the law was fitted to, and predicts
each task at the compute-optimal (N*, D*) of the report's fitted law for every requested budget
and for 10x the largest swept budget (the budget the demo asks about). Accuracy at a budget
depends on how the budget is spent, so the target is the allocation the report recommends,
`ScalingLaw.from_fit(fit).optimal(C)`, the same one the planning section uses.

Each task is fitted on its own, so a task the ladder cannot support (fewer than 3 model sizes,
say) loses only its own predictions: its one-line reason becomes a warning in the section and in
the report's warning list, and the report is still written.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from analysis.core.runs import task_names, task_table
from analysis.downstream import fit_downstream
from analysis.laws.allocation import ScalingLaw
from models.base.errors import AnalysisError

TARGET_FACTOR = 10.0  # the budget every report predicts at: this many times the largest swept budget
MAX_BOOTSTRAP = (
    200  # downstream bootstrap resamples at most (fit-task's default), whatever --bootstrap the law gets
)
INTERVAL_LEVEL = 0.9


def target_budgets(requested: Sequence[float], budgets_swept: Sequence[float]) -> tuple[list[float], float]:
    """(the budgets to predict at, the 10x budget): the requested ones, plus 10x the largest swept
    budget when no requested budget already is it."""
    ten_x = TARGET_FACTOR * float(max(budgets_swept))
    out = [float(c) for c in requested]
    if not any(math.isclose(c, ten_x, rel_tol=1e-6) for c in out):
        out.append(ten_x)
    return out, ten_x


def ladder_table(done: pd.DataFrame, curves: pd.DataFrame | None) -> pd.DataFrame:
    """The LADDER table of the runs the law was fitted to: one row per (run, eval, task) when the
    curves carry task metrics (a run's rows are its checkpoints), else one row per (run, task)
    from the final eval. Rows without a finite task loss and accuracy are dropped."""
    table = pd.DataFrame()
    if curves is not None and not curves.empty:
        table = task_table(done, curves[curves["run"].isin(set(done["run"]))])
    if table.empty:
        table = task_table(done)
    for c in ("N", "D", "C", "task_loss", "accuracy", "chance"):
        table[c] = pd.to_numeric(table[c], errors="coerce")
    keep = np.isfinite(table["task_loss"]) & np.isfinite(table["accuracy"])
    return table[keep].reset_index(drop=True)


def _task_ladder(table: pd.DataFrame, task: str) -> pd.DataFrame:
    """One task's rows in fit-task's columns. The `chance` column is kept when the runs that report
    it agree (runs written before chance was logged leave NaN), else dropped so it is inferred."""
    sub = table[table["task"] == task]
    sub = sub[["N", "D", "task", "task_loss", "accuracy", "chance", "run"]].copy()
    ch = sub["chance"].dropna()
    if ch.empty or np.ptp(ch.to_numpy(float)) > 1e-12:
        return sub.drop(columns=["chance"])
    return sub.assign(chance=float(ch.iloc[0]))


def observed(table: pd.DataFrame, task: str) -> dict[str, Any]:
    """What the ladder saw of a task: runs, eval points, the range of the runs' final accuracies
    and task losses, the reported chance level and the accuracy of the largest-compute run."""
    sub = table[table["task"] == task]
    final = sub.sort_values("D", kind="stable").groupby("run", sort=False).tail(1)
    top = final.loc[(final["N"] * final["D"]).idxmax()]
    ch = sub["chance"].dropna()
    return {
        "n_runs": int(len(final)),
        "n_points": int(len(sub)),
        "n_sizes": int(final["N"].nunique()),
        "accuracy_range": [float(final["accuracy"].min()), float(final["accuracy"].max())],
        "task_loss_range": [float(final["task_loss"].min()), float(final["task_loss"].max())],
        "largest_run": {
            "run": str(top["run"]),
            "N": float(top["N"]),
            "D": float(top["D"]),
            "accuracy": float(top["accuracy"]),
        },
        "chance": float(ch.iloc[0]) if not ch.empty else None,
    }


def _fit_task(
    ladder: pd.DataFrame, targets: pd.DataFrame, task: str, bootstrap: int, seed: int
) -> tuple[dict, list[dict]]:
    """(the task's fit summary, its predictions at the targets); AnalysisError if it cannot be fitted."""
    fit = fit_downstream(ladder, bootstrap=bootstrap, seed=seed)
    preds = fit.predict(targets.assign(task=task))
    tf = fit.tasks[task]
    score = tf.selection.fold_mae.get(tf.selection.chosen, math.nan)
    info = {
        "method": tf.chosen.candidate.method,
        "candidate": tf.chosen.candidate.name,
        "heldout_mae": score,
        "chance": tf.rows.chance,
        "chance_source": tf.rows.chance_source,
        "bootstrap": tf.n_boot,
        "warnings": list(tf.warnings),
        "fit": tf.to_dict(),
    }
    rows = [dict(p.to_dict(), C=float(c)) for p, c in zip(preds, targets["C"])]
    return info, rows


def downstream_section(
    done: pd.DataFrame,
    curves: pd.DataFrame | None,
    fit,
    requested: Sequence[float],
    budgets_swept: Sequence[float],
    bootstrap: int,
    seed: int,
    warn: list[str],
) -> dict | None:
    """report.json's `downstream` object, or None when no run measured a task.

    `fit` is the report's Approach-3 FitResult (None when it failed: then there is no (N*, D*)
    to predict at, and the section says so). Failures are appended to `warn` as one line each."""
    tasks = task_names(done)
    if not tasks:
        return None
    budgets, ten_x = target_budgets(requested, budgets_swept)
    table = ladder_table(done, curves)
    boot = min(int(bootstrap), MAX_BOOTSTRAP)
    sec: dict[str, Any] = {
        "tasks": {},
        "predictions": [],
        "targets": [],
        "ten_x_budget": ten_x,
        "errors": [],
        "settings": {"bootstrap": boot, "seed": int(seed), "interval_level": INTERVAL_LEVEL},
    }
    for task in tasks:
        if (table["task"] == task).any():
            seen = observed(table, task)
            sec["tasks"][task] = {"observed": seen, "chance": seen["chance"]}  # replaced by the fit's chance
        else:
            sec["errors"].append(f"downstream task {task}: no run has a finite task loss and accuracy")
    try:
        targets = _targets(fit, budgets)
    except AnalysisError as e:
        sec["errors"].append(f"no downstream predictions: {e}")
    else:
        sec["targets"] = targets.to_dict("records")
        for task, entry in sec["tasks"].items():
            try:
                info, rows = _fit_task(_task_ladder(table, task), targets, task, boot, seed)
            except AnalysisError as e:
                entry["error"] = str(e)
                sec["errors"].append(f"downstream task {task}: {e}")
            else:
                entry.update(info)
                sec["predictions"] += rows
    warn += sec["errors"]
    return sec


def _targets(fit, budgets: list[float]) -> pd.DataFrame:
    """C, N*, D* of the report's law at each budget (AnalysisError without a usable law)."""
    if fit is None:
        raise AnalysisError(
            "the Chinchilla law was not fitted, so there is no compute-optimal (N*, D*) to predict at"
        )
    law = ScalingLaw.from_fit(fit, source="Chinchilla law fitted in this report")
    rows = [(c, *law.optimal(c)) for c in budgets]
    return pd.DataFrame(rows, columns=["C", "N", "D"])
