"""The held-out check inside the ladder: fit below a model size, predict the sizes above it.

The ladder is asked its own question in miniature: drop its largest size (with >= 5 sizes, in a
second fold its two largest; each fold keeps `data.MIN_SIZES` sizes), refit every candidate (both
steps of the chain) on the rest, predict the dropped sizes' finished runs. The pooled errors pick
the candidate of `--method auto` (the lowest mean absolute error; ties to the first of
`candidates.CANDIDATES`) and, with their distances beyond each fold, set the intervals' drift
(`intervals`); using one fold for both makes the calibration slightly optimistic, which the
coverage measured on Gadre et al.'s runs includes (docs/downstream.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from analysis.core import validation
from analysis.downstream.candidates import CANDIDATES, OBSERVED_LOSS, Candidate, fit_all, subset
from analysis.downstream.data import MIN_SIZES, TaskRows
from analysis.downstream.taskloss import fit_task_loss
from models.base.errors import AnalysisError

MAX_FOLDS = 2


def cuts(N_final: np.ndarray) -> list[float]:
    """Fold thresholds: the largest and (ladders of >= 5 sizes) second-largest distinct N; a fold
    fits the runs below its threshold and predicts those at or above it."""
    return validation.top_levels(N_final, MAX_FOLDS, MIN_SIZES)


def distance(N: np.ndarray, D: np.ndarray, N_max: float, D_max: float, C_max: float) -> np.ndarray:
    """Decades beyond the fitted runs (0 inside): the larger of (decades beyond in N plus in D) and
    decades beyond the largest N*D. The second is what a compute-optimal target makes: its N and D
    can each lie inside the ladder's ranges (N_max from short runs, D_max from small models) while
    its loss lies well below every run's, and the error grows with that (the report's 10x budget)."""
    N, D = np.asarray(N, float), np.asarray(D, float)
    nd = np.maximum(np.log10(N / N_max), 0.0) + np.maximum(np.log10(D / D_max), 0.0)
    return np.maximum(nd, np.maximum(np.log10(N * D / C_max), 0.0))


@dataclass(frozen=True)
class FoldErrors:
    """Held-out errors of every candidate for one task, pooled over folds."""

    errors: dict = field(default_factory=dict)  # candidate name -> (n,) prediction - actual (accuracy)
    distances: dict = field(default_factory=dict)  # candidate name -> (n,) decades beyond the fold's fit
    n_folds: int = 0

    def add(self, name: str, e: np.ndarray, d: np.ndarray) -> "FoldErrors":
        errors, dist = dict(self.errors), dict(self.distances)
        errors[name] = np.concatenate([errors.get(name, np.zeros(0)), e])
        dist[name] = np.concatenate([dist.get(name, np.zeros(0)), d])
        return FoldErrors(errors, dist, self.n_folds)


def _task_fold(
    rows: TaskRows, fit_runs: np.ndarray, step1, cands: tuple[Candidate, ...], regressor: str
) -> dict:
    """candidate name -> (errors, distances) of one task in one fold."""
    fit_rows = subset(rows, fit_runs)
    test = rows.last & ~np.isin(rows.run, fit_runs)
    N, D, acc = rows.N[test], rows.D[test], rows.accuracy[test]
    fN, fD = fit_rows.final("N"), fit_rows.final("D")
    d = distance(N, D, fN.max(), fD.max(), (fN * fD).max())
    try:
        fits = fit_all(fit_rows, step1, cands, regressor)
    except (AnalysisError, np.linalg.LinAlgError, ValueError):
        return {}
    return {name: (f.predict(N, D) - acc, d) for name, f in fits.items()}


def fold_errors(
    tasks: dict[str, TaskRows],
    law: str,
    cands: tuple[Candidate, ...] = CANDIDATES,
    regressor: str = OBSERVED_LOSS,
) -> dict[str, FoldErrors]:
    """task -> pooled held-out errors, for tasks sharing one step-1 fit (a single task otherwise):
    the first task's last rows carry the shared (N, D, task_loss); `regressor` is the chain's
    step-2 loss (`methods`), as in the full fit."""
    ref = next(iter(tasks.values()))
    N, D, loss, run = (ref.final(k) for k in ("N", "D", "loss", "run"))
    out = {t: FoldErrors() for t in tasks}
    for cut in cuts(N):
        keep = N < cut
        try:
            step1 = fit_task_loss(N[keep], D[keep], loss[keep], run[keep], law=law)
        except AnalysisError:
            continue
        for t, rows in tasks.items():
            fe = out[t]
            for name, (e, d) in _task_fold(rows, run[keep], step1, cands, regressor).items():
                fe = fe.add(name, e, d)
            out[t] = FoldErrors(fe.errors, fe.distances, fe.n_folds + 1)
    return out


@dataclass(frozen=True)
class MethodChoice:
    """Which candidate a task uses, and the held-out evidence (`selection` in `fit-task --json`)."""

    chosen: str  # candidate name, e.g. "average" or "chain/ceiling-one"
    method: str  # "average", "chain" or "direct"
    fold_mae: dict  # candidate name -> mean |held-out error| (accuracy units; NaN: not measured)
    n_folds: int  # folds that contributed
    n_points: int  # held-out predictions behind the chosen candidate's score
    rule: str = "lowest mean absolute error on the ladder's largest size(s), fitted on the smaller ones"

    def to_dict(self) -> dict:
        return asdict(self)


def select(
    fe: FoldErrors, cands: tuple[Candidate, ...] = CANDIDATES, default: Candidate | None = None
) -> MethodChoice:
    """The candidate with the lowest held-out MAE (the first of `cands` on ties); `default`
    (else the first of `cands`) when nothing could be held out."""
    mae = {
        c.name: float(np.mean(np.abs(fe.errors[c.name])))
        if c.name in fe.errors and fe.errors[c.name].size
        else math.nan
        for c in cands
    }
    finite = [c for c in cands if math.isfinite(mae[c.name])]
    if not finite:
        pick = default if default in cands else cands[0]
        return MethodChoice(pick.name, pick.method, mae, 0, 0, rule="no held-out size: the default candidate")
    name = validation.choose(mae, [c.name for c in cands], margin=0.0)
    pick = next(c for c in finite if c.name == name)
    return MethodChoice(pick.name, pick.method, mae, fe.n_folds, int(fe.errors[pick.name].size))
