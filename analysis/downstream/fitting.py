"""Fit a ladder and predict downstream accuracy: the entry points of `analysis.downstream`.

`fit_downstream(ladder)` runs, per task: step 1 (task loss L(N, D), fitted once when every task
shares one loss column), the candidates (`candidates`), their held-out errors (`holdout`), the
method (by default `auto`: per task the candidate with the lowest held-out error), the bootstrap
over runs of it and its error model (`intervals`). `DownstreamFit.predict(targets)` gives each
target's task loss, accuracy, 90% interval, method and warnings; `DownstreamFit.to_dict` is the
`fit-task --json` object. When every task shares one loss, the chain's step 2 regresses on step
1's fitted loss (`candidates`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from analysis.downstream import flags
from analysis.downstream.candidates import (
    AVERAGE,
    CANDIDATES,
    CHAIN,
    DIRECT,
    LAW_LOSS,
    OBSERVED_LOSS,
    SINGLE,
    CandidateFit,
    allowed,
    fit_all,
)
from analysis.downstream.data import TaskRows, read_ladder, read_targets
from analysis.downstream.holdout import FoldErrors, MethodChoice, distance, fold_errors, select
from analysis.downstream.intervals import (
    AccuracyError,
    HeldoutCheck,
    drift_per_decade,
    floor_of,
    heldout_check,
    interval,
    noise_sd,
    run_scatter,
)
from analysis.downstream.sigmoid import CEILING_ONE
from analysis.downstream.taskloss import TASK_LOSS_LAW, TaskLossFit, fit_task_loss, shared_loss
from models.base.errors import AnalysisError

METHODS = ("auto", AVERAGE, CHAIN, DIRECT)
# The held-out choice, an exception to docs/zoo.md's rule (which picks the average on the zoo's
# three 5-task Gadre ladders: 2.03 points against 2.92): over the paper's 13 tasks above chance the
# average misses by 4.01 points (auto 3.52) with over-wide intervals (95.7% coverage, 20.1 points;
# auto 88.0%, 16.9); docs/downstream.md, "Which method"
DEFAULT_METHOD = "auto"
# scale trends whose tasks a benchmark leaves out of its means (their warning says why)
EXCLUDED_TRENDS = (flags.FALLING, flags.EMERGING)


@dataclass(frozen=True)
class TaskPrediction:
    """One target's prediction (a row of `predictions` in `fit-task --json`)."""

    N: float
    D: float
    task: str
    task_loss: float  # step 1's predicted task loss at (N, D)
    task_loss_interval: tuple[float, float]  # its 90% prediction interval (NaN: no error model)
    accuracy: float  # the chosen method's predicted accuracy
    accuracy_interval: tuple[float, float]  # 90% prediction interval
    method: str  # "average", "chain" or "direct"
    warnings: tuple[str, ...]

    def to_dict(self) -> dict:
        lo_hi = [_json_float(v) for v in self.task_loss_interval]
        out = {**asdict(self), "task_loss_interval": lo_hi, "accuracy_interval": list(self.accuracy_interval)}
        return {**out, "warnings": list(self.warnings)}


@dataclass(frozen=True)
class TaskFit:
    """Everything fitted for one task."""

    rows: TaskRows
    step1: TaskLossFit
    chosen: object  # the candidate predictions use (a CandidateFit, or the methods.AverageFit)
    chain: CandidateFit  # the chain reported as step 2 (the chosen one, else the better chain)
    chain_ceilings: tuple  # (chain with ceiling 1, with ceiling fitted): their gap is interval term 4
    direct: CandidateFit  # the direct fit reported (the chosen one, else the better direct)
    selection: MethodChoice
    boot: object  # the chosen candidate's bootstrap refits (None: no bootstrap)
    n_boot: int  # resamples whose refits of both steps succeeded
    error_model: AccuracyError
    heldout: HeldoutCheck  # the error model on the held-out sizes (fit-side coverage and width)
    trend: tuple[str, str | None]  # flags.scale_trend: (verdict, reason)
    warnings: tuple[str, ...]  # task-level warnings, repeated on each prediction
    seed: int

    def predict(self, N: np.ndarray, D: np.ndarray) -> list[TaskPrediction]:
        N, D = np.asarray(N, float), np.asarray(D, float)
        loss = self.step1.predict(N, D)
        loss_lo, loss_hi = self.step1.interval(N, D)
        acc = self.chosen.predict(N, D)
        samples = None if self.boot is None else self.chosen.samples(self.boot, N, D)
        em = self.error_model
        sd = em.sd(distance(N, D, em.N_max, em.D_max, em.C_max), self._ceiling_gap(N, D, loss))
        lo, hi = interval(acc, samples, sd, em.level, seed=self.seed, floor=em.floor)
        return [
            TaskPrediction(
                N=float(N[i]),
                D=float(D[i]),
                task=self.rows.task,
                task_loss=float(loss[i]),
                task_loss_interval=(float(loss_lo[i]), float(loss_hi[i])),
                accuracy=float(acc[i]),
                accuracy_interval=(float(lo[i]), float(hi[i])),
                method=self.chosen.candidate.method,
                warnings=self._warnings(float(loss[i])),
            )
            for i in range(N.size)
        ]

    def _ceiling_gap(self, N: np.ndarray, D: np.ndarray, loss: np.ndarray) -> np.ndarray:
        """|chain(ceiling 1) - chain(ceiling fitted)| where the chain or the average reads step 2
        beyond the ladder's losses (`flags.step2_extrapolated`), else 0 (`intervals`, term 4)."""
        if self.chosen.candidate.method not in (CHAIN, AVERAGE):
            return np.zeros(N.size)
        k, lmin = self.chain.sigmoid.params["k"], float(self.rows.loss.min())
        far = np.array([flags.step2_extrapolation(float(x), lmin, k) is not None for x in loss])
        one, fitted = self.chain_ceilings
        return np.where(far, np.abs(one.predict(N, D) - fitted.predict(N, D)), 0.0)

    def _warnings(self, loss: float) -> tuple[str, ...]:
        out = list(self.warnings)
        if self.chosen.candidate.method in (CHAIN, AVERAGE):
            w = flags.step2_extrapolation(loss, float(self.rows.loss.min()), self.chain.sigmoid.params["k"])
            out += [w] if w else []
        return tuple(out)

    def to_dict(self) -> dict:
        return {
            "step1": self.step1.to_dict(),
            "step2": {**self.chain.sigmoid.to_dict(), "regressor": self.chain.regressor},
            "direct": self.direct.sigmoid.to_dict(),
            "n_runs": self.rows.n_runs,
            "n_points": self.rows.n_points,
            "method": self.chosen.candidate.method,
            "candidate": self.chosen.candidate.name,
            "selection": self.selection.to_dict(),
            "error_model": self.error_model.to_dict(),
            "heldout": self.heldout.to_dict(),
            "scale_trend": {
                "verdict": self.trend[0],
                "reason": self.trend[1],
                "excluded_from_means": self.trend[0] in EXCLUDED_TRENDS,
            },
            "chance": self.rows.chance,
            "chance_source": self.rows.chance_source,
            "task_loss_range": [float(self.rows.loss.min()), float(self.rows.loss.max())],
            "bootstrap": self.n_boot,
            "warnings": list(self.warnings),
        }


def _json_float(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _best_of(method: str, fits: dict, sel: MethodChoice) -> CandidateFit:
    """The `method` candidate the held-out check scored best (the chosen one when it is of `method`)."""
    if sel.method == method:
        return fits[sel.chosen]
    names = [c.name for c in SINGLE if c.method == method]
    scored = [n for n in names if math.isfinite(sel.fold_mae.get(n, math.nan))]
    return fits[min(scored, key=lambda n: sel.fold_mae[n]) if scored else names[-1]]


def _error_model(chosen, fe: FoldErrors) -> tuple[AccuracyError, HeldoutCheck]:
    rows = chosen.rows
    N, D, acc = rows.final("N"), rows.final("D"), rows.final("accuracy")
    fitted_noise, scatter = noise_sd(chosen.predict(N, D) - acc, N, D), run_scatter(acc, N, D)
    noise = max(fitted_noise, scatter)
    name = chosen.candidate.name
    e, d = fe.errors.get(name, np.zeros(0)), fe.distances.get(name, np.zeros(0))
    em = AccuracyError(
        run_scatter_sd=scatter,
        scatter_binds=scatter > fitted_noise,
        noise_sd=noise,
        drift_per_decade=drift_per_decade(e, d, noise),
        N_max=float(N.max()),
        D_max=float(D.max()),
        C_max=float((N * D).max()),
        n_fold_points=int(e.size),
        floor=floor_of(rows.chance, rows.accuracy),
    )
    return em, heldout_check(em, e, d)


def fit_task(
    rows: TaskRows,
    step1: TaskLossFit,
    fe: FoldErrors,
    *,
    method: str = DEFAULT_METHOD,
    seed: int = 0,
    regressor: str = OBSERVED_LOSS,
) -> TaskFit:
    """Select, fit and bootstrap one task's predictor (step 1 and its held-out errors given)."""
    cands = allowed(method)
    sel = select(fe, cands, default=next(c for c in cands if c.ceiling != CEILING_ONE))
    fits = fit_all(rows, step1, CANDIDATES, regressor)
    chosen = fits[sel.chosen]
    boot = chosen.bootstrap(step1.counts(), step1.runs) if step1.n_bootstrap else None
    n_boot = 0
    if boot is not None:
        probe = chosen.samples(boot, rows.final("N")[:1], rows.final("D")[:1])
        n_boot = int(np.sum(np.isfinite(probe)))
    rules = (flags.near_chance, flags.falls_with_scale, flags.emerging)
    warns = tuple(w for w in (*(rule(rows) for rule in rules), flags.no_holdout(sel.n_folds)) if w)
    em, held = _error_model(chosen, fe)
    return TaskFit(
        rows=rows,
        step1=step1,
        chosen=chosen,
        chain=_best_of(CHAIN, fits, sel),
        chain_ceilings=tuple(fits[c.name] for c in SINGLE if c.method == CHAIN),
        direct=_best_of(DIRECT, fits, sel),
        selection=sel,
        boot=boot,
        n_boot=n_boot,
        error_model=em,
        heldout=held,
        trend=flags.scale_trend(rows),
        warnings=warns,
        seed=seed,
    )


@dataclass(frozen=True)
class DownstreamFit:
    """A fitted ladder: one `TaskFit` per task (`task`: the one the registry's predict reads)."""

    tasks: dict  # task -> TaskFit, in ladder order
    law: str
    bootstrap: int
    seed: int
    method: str
    task: str | None = None

    def predict(self, targets: pd.DataFrame) -> list[TaskPrediction]:
        """Predictions for the rows of a TARGETS table (columns N, D, task), in its row order."""
        t = read_targets(targets, list(self.tasks))
        out: list[TaskPrediction | None] = [None] * len(t)
        for task, idx in t.groupby("task", sort=False).indices.items():
            for i, p in zip(idx, self.tasks[task].predict(t.N.to_numpy()[idx], t.D.to_numpy()[idx])):
                out[i] = p
        return out

    def predict_task(self, task: str, N: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, ...]:
        """(accuracy, 90% lo, 90% hi) of one task at arrays N, D."""
        preds = self.tasks[task].predict(N, D)
        return tuple(np.array([f(p) for p in preds]) for f in _FIELDS)

    @property
    def note(self) -> str:
        """Which candidate each task uses, e.g. "average (piqa, copa); chain/ceiling-one (arc_easy)"."""
        chosen: dict[str, list[str]] = {}
        for t, tf in self.tasks.items():
            chosen.setdefault(tf.chosen.candidate.name, []).append(t)
        return "chose " + "; ".join(f"{k} ({', '.join(v)})" for k, v in chosen.items())

    def summary(self) -> str:
        lines = [f"{len(self.tasks)} task(s), step 1 {self.law}, method {self.method}: {self.note}"]
        for t, tf in self.tasks.items():
            mae = tf.selection.fold_mae.get(tf.selection.chosen, math.nan)
            lines.append(
                f"  {t}: {tf.chosen.candidate.name}, held-out MAE {100 * mae:.2f} pts, {tf.trend[0]}"
            )
        return "\n".join(lines)

    def to_dict(self, predictions: list[TaskPrediction] | None = None) -> dict:
        return {
            "predictions": [p.to_dict() for p in predictions or []],
            "tasks": {k: v.to_dict() for k, v in self.tasks.items()},
            "settings": {
                "law": self.law,
                "bootstrap": self.bootstrap,
                "seed": self.seed,
                "method": self.method,
                "interval_level": 0.9,
            },
        }


_FIELDS = (lambda p: p.accuracy, lambda p: p.accuracy_interval[0], lambda p: p.accuracy_interval[1])


def fit_downstream(
    ladder: pd.DataFrame,
    *,
    law: str = TASK_LOSS_LAW,
    bootstrap: int = 200,
    seed: int = 0,
    method: str = DEFAULT_METHOD,
) -> DownstreamFit:
    """Fit every task of a LADDER table (see `analysis.downstream.data`)."""
    if method not in METHODS:
        raise AnalysisError(f"method must be one of {', '.join(METHODS)} (got {method!r})")
    if bootstrap < 0:
        raise AnalysisError(f"bootstrap must be >= 0 (got {bootstrap})")
    tasks = read_ladder(ladder)
    groups = [list(tasks)] if shared_loss(tasks) else [[t] for t in tasks]
    cands = allowed(method)
    fits = {}
    for group in groups:
        sub = {t: tasks[t] for t in group}
        ref = sub[group[0]]
        try:
            step1 = fit_task_loss(
                *(ref.final(k) for k in ("N", "D", "loss", "run")),
                law=law,
                bootstrap=bootstrap,
                seed=seed,
                shared=len(group) > 1,
            )
        except AnalysisError as e:
            raise AnalysisError(f"step 1 (task loss as law {law}) for {', '.join(group)}: {e}") from None
        # a loss shared by every task is a proxy: step 2 regresses on the law's loss (`candidates`)
        regressor = LAW_LOSS if len(group) > 1 else OBSERVED_LOSS
        errors = fold_errors(sub, law, cands, regressor)
        for t in group:
            fits[t] = fit_task(sub[t], step1, errors[t], method=method, seed=seed, regressor=regressor)
    return DownstreamFit(
        tasks={t: fits[t] for t in tasks}, law=law, bootstrap=bootstrap, seed=seed, method=method
    )
