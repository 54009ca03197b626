"""The ladder and target tables of `fit-task`: validation, run identity, chance levels.

LADDER columns: `N, D, task, task_loss, accuracy`; optional `run` (the rows of one run are its
checkpoints), `chance` (the task's random-guess accuracy) and `C` (carried, not used: both steps
work in (N, D)). TARGETS columns: `N, D, task`. Every problem is one `AnalysisError` line.

Without a `run` column every row is its own run. With one, a run's last row (largest D) is the
finished model: step 1 (task loss as L(N, D)), the direct method, the held-out check and the
emergence check use those rows; step 2 (accuracy against task loss) uses every row, because a
checkpoint's (loss, accuracy) pair is as good an observation of that relation as a final one,
while its (N, D) is not a finished run of that size (the learning-rate schedule had not ended).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from models.base.errors import AnalysisError

LADDER_COLUMNS = ("N", "D", "task", "task_loss", "accuracy")
TARGET_COLUMNS = ("N", "D", "task")
MIN_SIZES = 3  # distinct N a task needs: a law in N, plus a held-out size to check it
CHANCE_TOLERANCE = 0.05  # how close the worst runs must sit to 1/k for chance to be inferred as 1/k
CHOICES = (2, 3, 4, 5)  # k-way multiple choice considered when inferring chance


@dataclass(frozen=True)
class TaskRows:
    """One task's ladder rows (all arrays share the row order; `last` marks each run's final row)."""

    task: str
    N: np.ndarray  # parameters of the row's model
    D: np.ndarray  # tokens seen at the row (a checkpoint's D is its tokens so far)
    loss: np.ndarray  # task loss at the row
    accuracy: np.ndarray  # accuracy in [0, 1]
    run: np.ndarray  # ladder-wide run code (int) of each row
    last: np.ndarray  # bool: the row is its run's last one (largest D)
    chance: float  # the task's chance accuracy (floor of step 2)
    chance_source: str  # "column", "inferred" (see `infer_chance`) or "default" (0)

    @property
    def n_runs(self) -> int:
        return int(self.last.sum())

    @property
    def n_points(self) -> int:
        return int(self.N.size)

    def final(self, name: str) -> np.ndarray:
        """Column `name` ("N", "D", "loss", "accuracy", "run") on the runs' last rows, in run order."""
        v = getattr(self, name)[self.last]
        return v[np.argsort(self.run[self.last], kind="stable")]


def _require(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisError(
            f"{what} lacks column(s) {', '.join(missing)}; it needs {', '.join(columns)} "
            f"and has {', '.join(map(str, df.columns))}"
        )
    if df.empty:
        raise AnalysisError(f"{what} has no rows")


def _numeric(df: pd.DataFrame, name: str, what: str) -> np.ndarray:
    """A finite numeric column (NaN, inf or text is an error naming the rows)."""
    v = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise AnalysisError(
            f"{what} column {name!r} has {int(bad.sum())} missing, NaN, inf or non-numeric "
            f"value(s) (rows {rows}); fix or remove those rows"
        )
    return v


def _positive(v: np.ndarray, name: str, what: str) -> np.ndarray:
    if np.any(v <= 0):
        i = int(np.flatnonzero(v <= 0)[0])
        raise AnalysisError(f"{what} column {name!r} must be > 0 (row {i} has {v[i]:g})")
    return v


def _tasks(df: pd.DataFrame, what: str) -> np.ndarray:
    t = df["task"]
    if t.isna().any():
        raise AnalysisError(f"{what} column 'task' has {int(t.isna().sum())} empty value(s)")
    return t.astype(str).str.strip().to_numpy()


def run_codes(df: pd.DataFrame, task: np.ndarray, N: np.ndarray, D: np.ndarray) -> np.ndarray:
    """An int per row naming its run: the `run` column's values, else one run per row of a task
    (the k-th row of (N, D) in one task is the same model as the k-th row of (N, D) in another)."""
    if "run" in df.columns:
        if df["run"].isna().any():
            raise AnalysisError(f"ladder column 'run' has {int(df['run'].isna().sum())} empty value(s)")
        keys = df["run"].astype(str).to_numpy()
        sizes = pd.Series(N).groupby(keys).nunique()
        if (sizes > 1).any():
            raise AnalysisError(
                f"run {sizes.index[sizes > 1][0]!r} has rows with different N; a run is one model"
            )
    else:
        k = pd.DataFrame({"t": task, "N": N, "D": D}).groupby(["t", "N", "D"]).cumcount().to_numpy()
        keys = np.array([f"{n!r}/{d!r}/{i}" for n, d, i in zip(N, D, k)])
    return pd.factorize(keys, sort=True)[0]


def last_rows(run: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Bool mask of each run's row with the largest D (the first such row on ties)."""
    order = np.lexsort((-D, run))
    first = np.ones(order.size, bool)
    first[1:] = run[order][1:] != run[order][:-1]
    mask = np.zeros(run.size, bool)
    mask[order[first]] = True
    return mask


def infer_chance(loss: np.ndarray, accuracy: np.ndarray) -> tuple[float, str]:
    """(chance, source) from the data when no `chance` column gives it.

    The rule: take the median accuracy of the worst runs (the fifth of the rows with the highest
    task loss, at least 3); if it lies within `CHANCE_TOLERANCE` (5 points) of 1/k for k in
    2..5 (k-way multiple choice), chance is the nearest such 1/k; otherwise chance is 0
    (open-ended tasks). The worst runs of a real ladder sit a few points above chance (piqa's
    smallest Gadre et al. models: 0.53 for a 2-way task), hence the tolerance. It guesses wrong
    for a ladder whose worst model is already well above chance, or an open-ended task whose
    worst accuracy happens to sit near 1/k: give a `chance` column then.
    """
    k = max(3, int(np.ceil(loss.size / 5)))
    worst = float(np.median(accuracy[np.argsort(-loss, kind="stable")[:k]]))
    levels = np.array([1.0 / c for c in CHOICES])
    i = int(np.argmin(np.abs(levels - worst)))
    if abs(levels[i] - worst) <= CHANCE_TOLERANCE:
        return float(levels[i]), "inferred"
    return 0.0, "default"


def _chance(
    df: pd.DataFrame, mask: np.ndarray, task: str, loss: np.ndarray, acc: np.ndarray
) -> tuple[float, str]:
    if "chance" not in df.columns:
        return infer_chance(loss, acc)
    v = _numeric(df.loc[mask], "chance", f"ladder (task {task})")
    if np.ptp(v) > 1e-12:
        raise AnalysisError(
            f"ladder column 'chance' differs between rows of task {task!r}; a task has one chance level"
        )
    if not 0 <= v[0] < 1:
        raise AnalysisError(f"ladder column 'chance' of task {task!r} must be in [0, 1) (got {v[0]:g})")
    return float(v[0]), "column"


def read_ladder(df: pd.DataFrame) -> dict[str, TaskRows]:
    """Validate a LADDER table; task -> its rows (tasks in first-appearance order)."""
    _require(df, LADDER_COLUMNS, "ladder")
    df = df.reset_index(drop=True)
    N = _positive(_numeric(df, "N", "ladder"), "N", "ladder")
    D = _positive(_numeric(df, "D", "ladder"), "D", "ladder")
    loss = _positive(_numeric(df, "task_loss", "ladder"), "task_loss", "ladder")
    acc = _numeric(df, "accuracy", "ladder")
    if np.any((acc < 0) | (acc > 1)):
        i = int(np.flatnonzero((acc < 0) | (acc > 1))[0])
        raise AnalysisError(
            f"ladder column 'accuracy' must be in [0, 1] (row {i} has {acc[i]:g}); "
            "give accuracy as a fraction, not in percent"
        )
    task = _tasks(df, "ladder")
    run = run_codes(df, task, N, D)
    out = {}
    for t in pd.unique(task):
        m = task == t
        if np.unique(N[m]).size < MIN_SIZES:
            raise AnalysisError(
                f"task {t!r} has {np.unique(N[m]).size} distinct model size(s) N; "
                f"fit-task needs at least {MIN_SIZES}"
            )
        chance, source = _chance(df, m, t, loss[m], acc[m])
        out[t] = TaskRows(
            task=t,
            N=N[m],
            D=D[m],
            loss=loss[m],
            accuracy=acc[m],
            run=run[m],
            last=last_rows(run[m], D[m]),
            chance=chance,
            chance_source=source,
        )
    return out


def read_targets(df: pd.DataFrame, known: list[str]) -> pd.DataFrame:
    """Validate a TARGETS table: columns N, D (positive, finite) and task (one of `known`)."""
    _require(df, TARGET_COLUMNS, "targets")
    df = df.reset_index(drop=True)
    N = _positive(_numeric(df, "N", "targets"), "N", "targets")
    D = _positive(_numeric(df, "D", "targets"), "D", "targets")
    task = _tasks(df, "targets")
    unknown = sorted(set(task) - set(known))
    if unknown:
        raise AnalysisError(
            f"targets name task(s) {', '.join(map(repr, unknown))} that the ladder does not have; "
            f"ladder tasks: {', '.join(known)}"
        )
    return pd.DataFrame({"N": N, "D": D, "task": task})
