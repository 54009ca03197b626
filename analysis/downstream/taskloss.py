"""Step 1 of the chain: a task's loss as a scaling law L(N, D), with the project's robust fitter.

The fit is `analysis.laws.fitting.fit_law` on each run's last row (default law
`chinchilla_tied`, L = E + A/N^alpha + B/D^alpha: one parameter fewer than Chinchilla, and the
form Gadre et al. 2024 fitted; on their C4 validation loss it predicts the 1.4B/6.9B runs to
0.95% against 2.47% for the free form, docs/fit.md). `law="auto"` lets
`analysis.laws.selection.fit_auto` choose between the two forms by forward-chaining error.

`TaskLossFit.interval` is the law's own 90% prediction interval of the task loss (the project's
measured error model, docs/fit.md); the accuracy interval propagates step 1 separately.

Its bootstrap resamples runs: the rows are passed in run order, so resample b's count of run i
is `analysis.core.validation.bootstrap_counts(n_runs, B, seed)[b, i]`, the same counts the caller
uses to refit step 2 and the direct method. That joint resampling is what propagates step 1's
parameter uncertainty through step 2.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core.table import NParamsWarning
from analysis.core.validation import bootstrap_counts
from analysis.laws.fitting import FitResult, fit_law
from analysis.laws.methods import fit_auto
from analysis.laws.selection import AUTO

TASK_LOSS_LAW = "chinchilla_tied"


@dataclass(frozen=True)
class TaskLossFit:
    """A fitted task-loss law (the `step1` object of `fit-task --json`)."""

    law: str  # the law fitted (for law="auto", the one chosen)
    params: dict  # its parameters
    n_runs: int  # runs (points) fitted
    converged: bool  # the fitter's convergence verdict
    runs: tuple[int, ...]  # run codes fitted, in the order of the bootstrap counts' columns
    n_bootstrap: int  # resamples drawn (0: none)
    seed: int
    shared: bool  # one fit serves every task (their task_loss columns are identical)
    fit: FitResult | None = None  # the underlying fit (None after JSON round trips)

    def predict(self, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        return self.fit.predict({"N": np.asarray(N, float), "D": np.asarray(D, float)})

    def samples(self, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        """(B, n) predicted task loss under each bootstrap resample (NaN where a refit failed)."""
        with np.errstate(all="ignore"):
            return self.fit.predict_samples({"N": np.asarray(N, float), "D": np.asarray(D, float)})

    def interval(self, N: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """90% prediction interval of a new run's task loss at (N, D): the law's own measured
        error model (bootstrap + run scatter + held-out drift, `FitResult.predict_interval`);
        NaN where the fit has none (too few sizes for its forward-chaining folds)."""
        N, D = np.atleast_1d(np.asarray(N, float)), np.atleast_1d(np.asarray(D, float))
        if self.fit is None or self.fit.prediction_error is None:
            return np.full(N.shape, np.nan), np.full(N.shape, np.nan)
        _, lo, hi = self.fit.predict_interval({"N": N, "D": D})
        return lo, hi

    def counts(self) -> np.ndarray:
        """(B, n_runs) the resamples' run counts, columns in `runs` order."""
        return bootstrap_counts(self.n_runs, self.n_bootstrap, self.seed)

    def to_dict(self) -> dict:
        out = {
            "law": self.law,
            "formula": self.fit.law_obj.formula if self.fit else None,
            "params": {k: float(v) for k, v in self.params.items()},
            "n_runs": self.n_runs,
            "converged": self.converged,
            "bootstrap": self.n_bootstrap,
            "shared_by_tasks": self.shared,
        }
        if self.fit is not None and self.fit.law_selection is not None:
            out["law_selection"] = self.fit.law_selection.to_dict()
        return out


def fit_task_loss(
    N: np.ndarray,
    D: np.ndarray,
    loss: np.ndarray,
    runs: np.ndarray,
    *,
    law: str = TASK_LOSS_LAW,
    bootstrap: int = 0,
    seed: int = 0,
    shared: bool = False,
) -> TaskLossFit:
    """Fit `law` to one row per run (already in run order). Raises AnalysisError when the rows
    cannot identify the law (too few runs or sizes)."""
    df = pd.DataFrame({"N": np.asarray(N, float), "D": np.asarray(D, float), "loss": np.asarray(loss, float)})
    kwargs = dict(bootstrap=int(bootstrap), seed=seed, prediction_intervals=True, n_params="total")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NParamsWarning)
        warnings.filterwarnings("ignore", message=".*did not clearly converge.*")
        if law == AUTO:
            fit = fit_auto(df, None, **kwargs)
        else:
            fit = fit_law(df, law, None, **kwargs)
    return TaskLossFit(
        law=fit.law,
        params=dict(fit.params),
        n_runs=len(df),
        converged=bool(fit.converged),
        runs=tuple(int(r) for r in runs),
        n_bootstrap=int(bootstrap),
        seed=seed,
        shared=shared,
        fit=fit,
    )


def shared_loss(tasks: dict) -> bool:
    """True when every task has the same runs with the same (N, D, task_loss) on their last rows:
    the task loss is one shared loss (e.g. a validation loss), fitted once for all tasks."""
    rows = list(tasks.values())
    if len(rows) < 2:
        return False
    ref = [rows[0].final(k) for k in ("run", "N", "D", "loss")]
    for r in rows[1:]:
        cur = [r.final(k) for k in ("run", "N", "D", "loss")]
        if cur[0].shape != ref[0].shape or not all(np.array_equal(a, b) for a, b in zip(cur, ref)):
            return False
    return True
