"""Per-task and per-prediction warnings: when a downstream prediction should not be trusted
(docs/downstream.md, "Warnings", has the evidence behind each threshold).

- near chance: the median accuracy of the ladder's largest third of runs is within `NEAR_CHANCE` of
  chance (the median, not the best run: small eval sets put single runs 7-15 points up by luck);
- step 2 extrapolated: the predicted task loss is more than `LOGISTIC_UNITS` of the fitted sigmoid's
  scale below the ladder's lowest, k (L_min - L_pred) > 1;
- falls with scale: over the two largest sizes' finished runs, accuracy ~ 1 + ln N + ln D has an ln
  N slope with t <= `FALLING_T` (every candidate rises with size: the ladder contradicts them);
- emerging: the second-largest size sits near chance and the largest has risen from there faster
  than N^`EMERGING_EXPONENT` in headroom (only the foot of the rise is seen);
- no held-out check: too few model sizes to fit below the largest and predict it.
"""

from __future__ import annotations

import numpy as np

from analysis.core.validation import top_share
from analysis.downstream.data import MIN_SIZES, TaskRows

NEAR_CHANCE = 0.05  # accuracy points above chance below which a ladder has not left chance
LOGISTIC_UNITS = 1.0  # k * (loss below the ladder's minimum) beyond which step 2 is flagged
FALLING_T = -2.0  # t statistic of the ln N slope (two largest sizes) at or below which accuracy falls
EMERGING_EXPONENT = 1.5  # headroom growth d ln(headroom) / d ln N above which a rise is "emerging"
HEADROOM_RESOLUTION = 0.005  # headroom below half a point is treated as this (a ratio needs a floor)
FALLING, EMERGING, NEAR, RISING = "falls_with_scale", "emerging", "near_chance", "rising"


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


def _top_two(rows: TaskRows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(N, D, accuracy, sizes) of the finished runs of the ladder's two largest model sizes."""
    N, D, acc = rows.final("N"), rows.final("D"), rows.final("accuracy")
    sizes = np.unique(N)[-2:]
    m = np.isin(N, sizes)
    return N[m], D[m], acc[m], sizes


def size_slope_t(rows: TaskRows) -> float:
    """t statistic of the ln N coefficient of accuracy ~ 1 + ln N + ln D (ln D dropped when it is
    collinear with ln N) over the two largest sizes' finished runs; NaN when not estimable."""
    N, D, acc, _ = _top_two(rows)
    X = np.column_stack([np.ones(N.size), np.log(N), np.log(D)])
    if np.linalg.matrix_rank(X) < 3:
        X = X[:, :2]
    dof = N.size - X.shape[1]
    if dof < 1 or np.linalg.matrix_rank(X) < X.shape[1]:
        return float("nan")
    beta = np.linalg.lstsq(X, acc, rcond=None)[0]
    resid = acc - X @ beta
    cov = float(resid @ resid) / dof * np.linalg.inv(X.T @ X)
    se = float(np.sqrt(cov[1, 1]))
    return float(beta[1] / se) if se > 0 else float("nan")


def falls_with_scale(rows: TaskRows) -> str | None:
    t = size_slope_t(rows)
    if not t <= FALLING_T:
        return None
    return (
        f"falls with scale: accuracy falls from the ladder's second-largest to its largest size (ln N "
        f"slope t = {t:.1f}, given ln D); the fitted curves all rise with size, so the prediction "
        "extrapolates a trend the ladder contradicts"
    )


def growth_exponent(rows: TaskRows) -> tuple[float, float, float]:
    """(headroom of the second-largest size, of the largest, d ln(headroom) / d ln N between them):
    headroom = median accuracy above chance of a size's finished runs."""
    N, _, acc, sizes = _top_two(rows)
    h = [float(np.median(acc[N == s])) - rows.chance for s in sizes]
    g = np.log(max(h[1], HEADROOM_RESOLUTION) / max(h[0], HEADROOM_RESOLUTION)) / np.log(sizes[1] / sizes[0])
    return h[0], h[1], float(g)


def emerging(rows: TaskRows) -> str | None:
    prev, top, g = growth_exponent(rows)
    if not (prev < NEAR_CHANCE <= top and g > EMERGING_EXPONENT):
        return None
    return (
        f"emerging: the ladder's second-largest size sits {prev:+.3f} from chance and its largest "
        f"{top:+.3f} (headroom growing as N^{g:.1f}); only the foot of the rise is observed, so the "
        "curve's midpoint and ceiling, and the prediction, are guesses"
    )


def scale_trend(rows: TaskRows) -> tuple[str, str | None]:
    """(verdict, reason): "falls_with_scale", "near_chance", "emerging" or "rising" (reason None).
    Fit-side only: computed from the ladder's runs, never from the targets."""
    for verdict, rule in ((FALLING, falls_with_scale), (NEAR, near_chance), (EMERGING, emerging)):
        reason = rule(rows)
        if reason:
            return verdict, reason
    return RISING, None
