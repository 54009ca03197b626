"""The downstream family's methods in the one registry (`analysis.core.methods`).

Each is fitted to a `fit-task` LADDER table (N, D, task, task_loss, accuracy; optional run, chance,
C) and predicts a task's accuracy at (N, D) with its 90% interval. Which task: the `task` option
at fit time (a ladder of one task needs none), or a `task` input at predict time, the task's index
in the record's `tasks` (ladder order; the backtest's points carry it so).

- `auto` (default of the `downstream` protocol and `fit-task --method`): per task the candidate
  with the lowest held-out error inside the ladder (analysis/downstream/candidates.py);
- `average`: the mean of the four single candidates (chain and direct, ceiling fitted or 1);
- `baseline_linear_log_c` (baseline): per task, accuracy = a + b ln C (C = 6ND) by ordinary least
  squares on the finished runs, +- Z90 x the scatter of its residuals, clipped to [0, 1].

`auto` stays the default against docs/zoo.md's rule, which picks `average` on the zoo's three
5-task Gadre et al. ladders (mean 2.03 points against auto's 2.92): over the paper's 13 tasks above
chance the average misses by 4.01 points against auto's 3.52, with over-wide intervals (95.7%
coverage, 20.1 points wide; auto 88.0%, 16.9), and on a synthetic ladder a band half as wide as
the average's still holds 27 of 32 new runs (docs/downstream.md, "Which method").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.core.validation import Z90, scatter_sd
from analysis.downstream.candidates import AVERAGE
from analysis.downstream.data import read_ladder
from analysis.downstream.fitting import DownstreamFit, fit_downstream
from analysis.downstream.taskloss import TASK_LOSS_LAW
from models.base.errors import AnalysisError

PROTOCOLS = ("downstream",)
DEFAULT, BASELINE = "auto", "baseline_linear_log_c"


def _one_task(task: str | None, tasks: Mapping[str, Any]) -> str | None:
    if task is not None and task not in tasks:
        raise AnalysisError(f"task {task!r} is not in the ladder (its tasks: {', '.join(tasks)})")
    return task if task is not None or len(tasks) > 1 else next(iter(tasks))


def _fit(method: str):
    def fit(
        table: pd.DataFrame,
        task: str | None = None,
        law: str = TASK_LOSS_LAW,
        bootstrap: int = 200,
        seed: int = 0,
    ) -> DownstreamFit:
        """`fit_downstream` on every task of the ladder (tasks that share a loss share step 1)."""
        fit = fit_downstream(table, law=law, bootstrap=bootstrap, seed=seed, method=method)
        return dataclasses.replace(fit, task=_one_task(task, fit.tasks))

    return fit


def predict(record: Any, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """Accuracy at N, D (and `task`, a task index, per row or for all) with its 90% interval."""
    N, D = np.broadcast_arrays(*(np.asarray(inputs[k], float) for k in ("N", "D")))
    names = list(record.tasks)
    if "task" in inputs:
        rows = np.broadcast_to(np.asarray(inputs["task"]).astype(int), N.shape)
        tasks = np.array(names, dtype=object)[rows]
    elif record.task is not None:
        tasks = np.full(N.shape, record.task, dtype=object)
    else:
        raise AnalysisError(f"which task? fit with task=... or predict with task=<index into {names}>")
    out = np.full((3, *N.shape), np.nan)
    for t in dict.fromkeys(tasks.ravel()):
        m = tasks == t
        out[:, m] = record.predict_task(t, N[m], D[m])
    return Prediction(*out)


def plot(record: Any, table: pd.DataFrame | None, ax: Any = None):
    """One task's finished runs (accuracy against compute) and the method's prediction along each
    model size's tokens (x3 beyond the largest), with its 90% band."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    import matplotlib
    from matplotlib.figure import Figure

    if table is None:
        raise AnalysisError("the plot needs the ladder table the method was fitted on")
    task = record.task or next(iter(record.tasks))
    rows = read_ladder(table)[task]
    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    N, D, acc = (rows.final(k) for k in ("N", "D", "accuracy"))
    sizes = np.unique(N)
    ax.scatter(6 * N * D, acc, c=np.log10(N), cmap="viridis", s=24, edgecolor="k", lw=0.4, zorder=3)
    for i, n in enumerate(sizes):
        d = np.geomspace(D[N == n].min(), 3 * D[N == n].max(), 30)
        mean, lo, hi = record.predict_task(task, np.full(d.size, n), d)
        color = matplotlib.colormaps["viridis"](i / max(1, sizes.size - 1))
        ax.plot(6 * n * d, mean, color=color, lw=1.2)
        ax.fill_between(6 * n * d, lo, hi, color=color, alpha=0.12, lw=0)
    ax.set_xscale("log")
    ax.set_xlabel("training compute C = 6ND (FLOPs)")
    ax.set_ylabel(f"{task} accuracy")
    ax.grid(True, which="both", alpha=0.3)
    return fig


@dataclasses.dataclass(frozen=True)
class LinearLogC:
    """The baseline per task: accuracy = a + b ln C, +- `half` (the 90% half-width)."""

    tasks: dict[str, tuple[float, float, float]]  # task -> (a, b, half)
    task: str | None = None
    note = ""

    def predict_task(self, task: str, N: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, ...]:
        a, b, half = self.tasks[task]
        f = a + b * np.log(6 * np.asarray(N, float) * np.asarray(D, float))
        return tuple(np.clip(v, 0.0, 1.0) for v in (f, f - half, f + half))

    def summary(self) -> str:
        return "\n".join(
            f"{t}: accuracy = {a:.4g} + {b:.4g} ln C (+-{h:.3g})" for t, (a, b, h) in self.tasks.items()
        )

    def to_dict(self) -> dict:
        return {"tasks": {t: dict(zip(("a", "b", "half_width_90"), v)) for t, v in self.tasks.items()}}


def _fit_linear_log_c(table: pd.DataFrame, task: str | None = None, **_: Any) -> LinearLogC:
    fits = {}
    for t, rows in read_ladder(table).items():
        x, y = np.log(6 * rows.final("N") * rows.final("D")), rows.final("accuracy")
        b, a = np.polyfit(x, y, 1)
        fits[t] = (float(a), float(b), float(Z90 * scatter_sd(y - (a + b * x))))
    return LinearLogC(fits, _one_task(task, fits))


for _name, _role, _fit_fn, _doc in (
    (DEFAULT, Role.DEFAULT, _fit(DEFAULT), "per task, the candidate with the lowest held-out error"),
    (AVERAGE, Role.CANDIDATE, _fit(AVERAGE), "the mean of the chain and direct sigmoids (ceiling fitted, 1)"),
    (BASELINE, Role.BASELINE, _fit_linear_log_c, "per task, accuracy linear in ln C (least squares)"),
):
    register(Method(_name, Family.DOWNSTREAM, PROTOCOLS, _role, _fit_fn, predict, plot, _doc))
