"""Per-task and per-prediction warnings: when a downstream prediction should not be trusted.

- near chance (emergence): the ladder's largest runs (the top third by N*D, at least 10) have a
  median accuracy within `NEAR_CHANCE` of the task's chance level. The sigmoid's rise is then not
  observed: its midpoint and slope, and so any prediction above chance, are guesses; tasks that
  "emerge" later look exactly like this on a small ladder. The median of the largest runs, not
  the best run, because a small evaluation set (Gadre et al.'s winogender: 60 items) puts single
  runs 7-15 points above chance by luck.
- step 2 extrapolated: the chain's predicted task loss lies below the lowest loss of the ladder
  by more than `LOGISTIC_UNITS` of the fitted sigmoid's scale, k (L_min - L_pred) > 1: the
  sigmoid's argument moves by more than one unit beyond anything observed (the odds of a correct
  answer above chance change by a factor e there), so the accuracy is the curve's assumption.
- no held-out check: the ladder has too few model sizes to fit below its largest and predict it,
  so the method was not chosen by evidence and the interval has no measured drift term (only
  the spread of the candidates' predictions stands for the extrapolation error).
"""

from __future__ import annotations

import numpy as np

from analysis.downstream.data import MIN_SIZES, TaskRows
from analysis.laws.intervals import top_share

NEAR_CHANCE = 0.05  # accuracy points above chance below which a ladder has not left chance
LOGISTIC_UNITS = 1.0  # k * (loss below the ladder's minimum) beyond which step 2 is flagged


def headroom(rows: TaskRows) -> float:
    """Median accuracy above chance of the ladder's largest third of runs (by N*D)."""
    top = top_share(rows.final("accuracy"), rows.final("N") * rows.final("D"))
    return float(np.median(top)) - rows.chance


def near_chance(rows: TaskRows) -> str | None:
    head = headroom(rows)
    if head >= NEAR_CHANCE:
        return None
    return (
        f"near chance: the ladder's largest runs sit {head:+.3f} from chance ({rows.chance:.3g}) (median of "
        "the top third); the sigmoid's rise is not observed (emergence), the prediction is a guess"
    )


def no_holdout(n_folds: int) -> str | None:
    if n_folds:
        return None
    return (
        f"no held-out check: the ladder needs more than {MIN_SIZES} model sizes to fit below its largest and "
        "predict it; the method is the default and the interval's only extrapolation term is the spread "
        "of the candidates' predictions"
    )


def step2_extrapolation(loss_pred: float, loss_min: float, k: float) -> str | None:
    units = k * (loss_min - loss_pred)
    if not units > LOGISTIC_UNITS:
        return None
    return (
        f"step 2 extrapolated: predicted task loss {loss_pred:.4g} is {loss_min - loss_pred:.3g} below the "
        f"ladder's lowest ({loss_min:.4g}), {units:.1f} logistic units of the fitted sigmoid; the accuracy "
        "there is not observed, only assumed to follow the curve"
    )
