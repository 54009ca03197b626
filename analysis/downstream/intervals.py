"""90% prediction intervals for a predicted accuracy, from the terms that actually vary.

The predicted accuracy of a new run at (N, D) is treated as

    acc = f_hat(N, D) + u_b + z,   z ~ Normal(0, noise^2 + max(drift * d, ceiling_gap)^2)

1. `u_b`, parameter uncertainty of both steps: the spread of the prediction over a bootstrap over
   runs; resample b refits step 1 and step 2 with the same run counts, so a run that pulls step 1
   pulls step 2 too, and the chain reads resample b's task loss in resample b's sigmoid.
2. `noise`, run-to-run scatter: the chosen candidate's in-sample residuals on the finished runs,
   the largest third by N*D, at the project's tail-calibrated scale (`validation.scatter_sd`),
   floored by a model-free measure (`run_scatter`: repeated runs at one (N, D), else each larger
   size's runs around a line in log D); `AccuracyError.scatter_binds` says where the floor decided.
3. `drift * d`, misspecification: d the decades beyond the ladder (`holdout.distance`), drift from
   the chosen candidate's forward-chained held-out errors: e^2 ~ noise^2 + drift^2 d^2 (least
   squares through the origin, drift >= 0; linear growth of the sd is an assumption).
4. `ceiling_gap`, only where step 2 is extrapolated (`flags.step2_extrapolation`):
   |chain(ceiling 1) - chain(ceiling fitted)| at the target, where the folds cannot measure the
   ceiling's error; the larger of terms 3 and 4 is used (both stand for the same error).

The interval is the 5%-95% range of 4,000 seeded draws of u_b + z around the full fit's prediction,
clipped to [floor, 1], floor = min(chance, the ladder's lowest accuracy) (copa's 11M runs score
below chance). It is the loss laws' noise-plus-drift model (`analysis.core.intervals`) in additive
accuracy units, with a two-input distance, the ceiling term and the clip: hence its own record,
`AccuracyError`. `HeldoutCheck` states its coverage and width on the held-out sizes themselves, a
fit-side check (optimistic: the drift is fitted to the same errors). docs/downstream.md has the
measurements.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from analysis.core.validation import PREDICTION_LEVEL, Z90, offsets, scatter_sd, top_share


@dataclass(frozen=True)
class AccuracyError:
    """The measured error model behind one task's intervals (`error_model` in the JSON)."""

    noise_sd: float  # run scatter around the curve (accuracy units)
    drift_per_decade: float  # growth of the error sd per decade beyond the ladder (accuracy units)
    N_max: float  # largest N of the ladder's runs (distance origin)
    D_max: float  # largest D of the ladder's runs
    C_max: float  # largest N*D of the ladder's runs
    n_fold_points: int  # held-out predictions behind `drift_per_decade` (0: not measured)
    floor: float = 0.0  # lower clip of the intervals: min(chance, the ladder's lowest accuracy)
    level: float = PREDICTION_LEVEL
    run_scatter_sd: float = 0.0  # model-free run-to-run scatter (`run_scatter`): noise_sd's floor
    scatter_binds: bool = False  # the floor, not the curve's residuals, set noise_sd

    def sd(self, d: np.ndarray, ceiling_gap: np.ndarray | float = 0.0) -> np.ndarray:
        """Sd of the noise + misspecification term at distance `d` (decades beyond the ladder);
        `ceiling_gap` (0 unless step 2 is extrapolated, see the module docstring) stands for the
        same misspecification where the folds cannot see it: the larger of the two is used."""
        d = np.maximum(np.asarray(d, float), 0.0)
        model = np.maximum(self.drift_per_decade * d, np.asarray(ceiling_gap, float))
        return np.sqrt(self.noise_sd**2 + model**2)

    def to_dict(self) -> dict:
        method = "bootstrap over runs (both steps) + run scatter + max(forward-chained drift x distance, "
        return {**asdict(self), "method": method + "ceiling gap where step 2 is extrapolated)"}


@dataclass(frozen=True)
class HeldoutCheck:
    """The error model applied to the chosen candidate's held-out errors (`heldout` in the JSON)."""

    n_points: int  # held-out predictions (finished runs of the held-out sizes)
    mae: float  # their mean absolute error (accuracy units)
    coverage: float  # share inside the model's 90% band at their distances (NaN: none)
    mean_width: float  # mean width of that band (accuracy units; NaN: none)

    def to_dict(self) -> dict:
        rule = "forward-chained: fit below the largest size(s), predict them; band = the error model's"
        out = {k: _finite(v) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return {**out, "rule": rule + " noise + drift at each point's distance (no bootstrap)"}


def heldout_check(em: AccuracyError, errors: np.ndarray, distances: np.ndarray) -> HeldoutCheck:
    e, d = np.asarray(errors, float), np.asarray(distances, float)
    ok = np.isfinite(e) & np.isfinite(d)
    if not ok.any():
        return HeldoutCheck(0, math.nan, math.nan, math.nan)
    half = Z90 * em.sd(d[ok])  # em.level is PREDICTION_LEVEL
    return HeldoutCheck(
        n_points=int(ok.sum()),
        mae=float(np.mean(np.abs(e[ok]))),
        coverage=float(np.mean(np.abs(e[ok]) <= half)),
        mean_width=float(np.mean(2 * half)),
    )


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def floor_of(chance: float, accuracies: np.ndarray) -> float:
    """The lowest accuracy the ladder supports: min(chance, its lowest run), at least 0."""
    return max(0.0, min(float(chance), float(np.min(accuracies))))


def noise_sd(residuals: np.ndarray, N: np.ndarray, D: np.ndarray) -> float:
    """Run scatter from in-sample residuals of the finished runs, on the largest third by N*D."""
    return scatter_sd(top_share(residuals, np.asarray(N, float) * np.asarray(D, float)))


def run_scatter(acc: np.ndarray, N: np.ndarray, D: np.ndarray) -> float:
    """Model-free run-to-run scatter of the accuracy (0 when nothing measures it): the pooled sd of
    runs repeated at one (N, D) (to 4 significant digits) when there are any; else the pooled
    residual sd of each size's runs around a least-squares line in log D, over the sizes with at
    least 3 token counts in the larger half of the ladder's sizes (scatter grows away from chance)."""
    acc, N, D = (np.asarray(x, float) for x in (acc, N, D))
    key = np.round(np.log10(N), 4) * 1e6 + np.round(np.log10(D), 4)
    ss, df = 0.0, 0
    for k in np.unique(key):
        a = acc[key == k]
        if a.size > 1:
            ss, df = ss + float(np.sum((a - a.mean()) ** 2)), df + a.size - 1
    if df:
        return math.sqrt(ss / df)
    sizes = np.unique(N)
    for n in sizes[sizes >= np.median(sizes)]:
        m = N == n
        if np.unique(D[m]).size < 3:
            continue
        x = np.log(D[m])
        coef = np.polyfit(x, acc[m], 1)
        ss, df = ss + float(np.sum((acc[m] - np.polyval(coef, x)) ** 2)), df + int(m.sum()) - 2
    return math.sqrt(ss / df) if df else 0.0


def drift_per_decade(errors: np.ndarray, distances: np.ndarray, noise: float) -> float:
    """sqrt of the least-squares slope of e^2 - noise^2 on d^2 (through the origin), >= 0."""
    e, d = np.asarray(errors, float), np.asarray(distances, float)
    ok = np.isfinite(e) & np.isfinite(d) & (d > 0)
    if not ok.any():
        return 0.0
    d2 = d[ok] ** 2
    slope = float(np.sum(d2 * (e[ok] ** 2 - noise**2)) / np.sum(d2**2))
    return math.sqrt(max(slope, 0.0))


def interval(
    pred: np.ndarray,
    samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
    floor: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] of pred + u_b + z, z ~ N(0, sd^2), u_b the bootstrap deviations (median-centred;
    `analysis.core.intervals.offsets`), clipped to [floor, 1]."""
    pred = np.atleast_1d(np.asarray(pred, float))
    lo, hi = offsets(samples_BxN, np.broadcast_to(np.asarray(sd_N, float), pred.shape), level, seed, draws)
    return np.clip(pred + lo, floor, 1.0), np.clip(pred + hi, floor, 1.0)
