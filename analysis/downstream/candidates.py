"""The candidate predictors of a task's accuracy, fitted on one set of runs (`fit-task`'s internal
candidates; the registered methods are `auto`, `average` and the baseline, analysis/downstream/methods.py).

- `chain`: step 1 (task loss L(N, D), `taskloss`) then step 2 (accuracy as a sigmoid of the task
  loss), chained: step 2 at step 1's predicted loss (Bhagia et al. 2024's two-step method);
- `direct`: accuracy as a sigmoid of ln N and ln D on each run's last row (in the spirit of
  Krajewski et al. 2025, N and D apart: an over-trained small model is not a large short one);
- each with its ceiling fitted in [chance, 1] or at 1 (`sigmoid`): four single candidates;
- `average`: the mean of the four (uniform model averaging: which single curve wins a held-out
  check of one or two sizes is a noisy draw, and the curves err on different sides).

The chain's step 2 regresses accuracy on the `observed` loss of every row (a task's own loss,
checkpoints included) or, for a loss shared by every task (one validation loss, a noisy proxy whose
scatter would flatten the slope), on step 1's fitted `law` loss at each finished run (held-out
error 5.0 -> 4.4 points, ceiling 1; 4.3 -> 3.9 fitted; docs/downstream.md).

`CANDIDATES` is the tie-break order of the held-out choice (`auto`): the average first, then the
single ones simplest first. The single candidates are not registered or scored on their own (never
best in the zoo, docs/zoo.md) but stay: the average is their mean, and `auto` picks single
ones for some tasks on each of the zoo's Gadre ladders (its errors differ from the average's on all three).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analysis.downstream import sigmoid
from analysis.downstream.data import TaskRows
from analysis.downstream.taskloss import TaskLossFit

CHAIN, DIRECT, AVERAGE = "chain", "direct", "average"
OBSERVED_LOSS, LAW_LOSS = "observed", "law"  # the chain's step-2 regressor (see the module docstring)


@dataclass(frozen=True)
class Candidate:
    method: str  # "chain" or "direct"
    ceiling: str  # sigmoid.CEILING_FITTED or sigmoid.CEILING_ONE

    @property
    def name(self) -> str:
        return AVERAGE if self.method == AVERAGE else f"{self.method}/ceiling-{self.ceiling}"

    @property
    def form(self) -> sigmoid.Form:
        return sigmoid.LOSS if self.method == CHAIN else sigmoid.SIZE


SINGLE = (
    Candidate(CHAIN, sigmoid.CEILING_ONE),
    Candidate(CHAIN, sigmoid.CEILING_FITTED),
    Candidate(DIRECT, sigmoid.CEILING_ONE),
    Candidate(DIRECT, sigmoid.CEILING_FITTED),
)
AVERAGED = Candidate(AVERAGE, "mixed")
CANDIDATES = (AVERAGED,) + SINGLE


def allowed(method: str) -> tuple[Candidate, ...]:
    """The candidates a `method` setting may choose from ("auto": all of them)."""
    return tuple(c for c in CANDIDATES if method == "auto" or c.method == method)


def references(rows: TaskRows) -> dict:
    """Geometric means of N and D over the runs' last rows: the direct form's centre (it keeps the
    fit well conditioned; it does not change the fitted curve)."""
    return {
        "N_ref": float(np.exp(np.mean(np.log(rows.final("N"))))),
        "D_ref": float(np.exp(np.mean(np.log(rows.final("D"))))),
    }


def subset(rows: TaskRows, keep_runs: np.ndarray) -> TaskRows:
    """The rows of the runs in `keep_runs` (run codes)."""
    m = np.isin(rows.run, keep_runs)
    return replace(
        rows,
        N=rows.N[m],
        D=rows.D[m],
        loss=rows.loss[m],
        accuracy=rows.accuracy[m],
        run=rows.run[m],
        last=rows.last[m],
    )


@dataclass(frozen=True)
class CandidateFit:
    """One candidate fitted to one task's runs."""

    candidate: Candidate
    sigmoid: sigmoid.SigmoidFit  # step 2 (chain) or the direct sigmoid
    refs: dict  # N_ref, D_ref of the direct form
    step1: TaskLossFit | None  # the chain's step 1 (None for direct)
    rows: TaskRows  # the rows it was fitted on
    regressor: str = OBSERVED_LOSS  # the chain's step-2 loss: "observed" or "law" (unused by direct)

    def fitted_rows(self) -> np.ndarray:
        """Mask of `rows` the sigmoid was fitted on: every row (observed-loss chain) or the last rows."""
        return _fitted_rows(self.candidate, self.rows, self.regressor)

    def inputs(self, N: np.ndarray, D: np.ndarray, loss: np.ndarray | None) -> dict:
        return sigmoid.inputs(self.candidate.form, loss, N, D, self.refs)

    def predict(self, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        """Accuracy at (N, D); the chain goes through step 1's predicted task loss."""
        loss = self.step1.predict(N, D) if self.candidate.method == CHAIN else None
        return self.sigmoid.predict(self.inputs(N, D, loss))

    def samples(self, theta_BxP: np.ndarray, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        """(B, n) accuracy under resample b's parameters of both steps (the chain's step 2 reads
        resample b's predicted task loss); `theta_BxP` is what `bootstrap` returned."""
        loss = self.step1.samples(N, D) if self.candidate.method == CHAIN else None
        return sigmoid.predict_samples(self.sigmoid, theta_BxP, self.inputs(N, D, loss))

    def bootstrap(self, counts_BxR: np.ndarray, run_order: tuple[int, ...]) -> np.ndarray:
        """(B, P) sigmoid parameters refitted with each resample's run counts as row weights."""
        col = {r: i for i, r in enumerate(run_order)}
        m = self.fitted_rows()
        idx = np.array([col[r] for r in self.rows.run[m]])
        N, D = self.rows.N[m], self.rows.D[m]
        # the law-loss chain's resample b regresses on resample b's law (both steps move together)
        loss = self.step1.samples(N, D) if self._law() else self.rows.loss[m]
        X = self.inputs(N, D, loss)
        return sigmoid.bootstrap(self.sigmoid, X, self.rows.accuracy[m], counts_BxR[:, idx])

    def _law(self) -> bool:
        return self.candidate.method == CHAIN and self.regressor == LAW_LOSS


def _fitted_rows(cand: Candidate, rows: TaskRows, regressor: str) -> np.ndarray:
    if cand.method == CHAIN and regressor == OBSERVED_LOSS:
        return np.ones(rows.n_points, bool)
    return rows.last


def fit_candidate(
    cand: Candidate, rows: TaskRows, step1: TaskLossFit | None, regressor: str = OBSERVED_LOSS
) -> CandidateFit:
    """Fit `cand` to `rows` (the chain needs the matching step-1 fit; `regressor` picks its loss)."""
    refs = references(rows)
    m = _fitted_rows(cand, rows, regressor)
    loss = (
        step1.predict(rows.N[m], rows.D[m])
        if cand.method == CHAIN and regressor == LAW_LOSS
        else rows.loss[m]
    )
    X = sigmoid.inputs(cand.form, loss, rows.N[m], rows.D[m], refs)
    s = sigmoid.fit(cand.form, X, rows.accuracy[m], rows.chance, cand.ceiling, refs)
    return CandidateFit(
        candidate=cand,
        sigmoid=s,
        refs=refs,
        step1=step1 if cand.method == CHAIN else None,
        rows=rows,
        regressor=regressor,
    )


@dataclass(frozen=True)
class AverageFit:
    """The `average` candidate: the mean of the single candidates fitted to the same runs."""

    members: tuple[CandidateFit, ...]
    candidate: Candidate = AVERAGED

    @property
    def rows(self) -> TaskRows:
        return self.members[0].rows

    def predict(self, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        return np.mean([m.predict(N, D) for m in self.members], axis=0)

    def bootstrap(self, counts_BxR: np.ndarray, run_order: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """Each member refitted on the same resamples (so the average's spread is joint)."""
        return tuple(m.bootstrap(counts_BxR, run_order) for m in self.members)

    def samples(self, thetas: tuple[np.ndarray, ...], N: np.ndarray, D: np.ndarray) -> np.ndarray:
        return np.mean([m.samples(t, N, D) for m, t in zip(self.members, thetas)], axis=0)


def fit_all(
    rows: TaskRows,
    step1: TaskLossFit | None,
    cands: tuple[Candidate, ...] = CANDIDATES,
    regressor: str = OBSERVED_LOSS,
) -> dict:
    """candidate name -> fit, for `cands` (the average fits every single candidate it needs)."""
    single = {c.name: fit_candidate(c, rows, step1, regressor) for c in SINGLE}
    out = {c.name: single[c.name] for c in cands if c.method != AVERAGE}
    if AVERAGED in cands:
        out[AVERAGE] = AverageFit(members=tuple(single[c.name] for c in SINGLE))
    return out
