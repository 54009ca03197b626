"""Held-out validation: the one place that cuts a ladder, scores what a fit did beyond the cut,
turns those scores into intervals and picks a method from them.

Every law family (point laws, the frontier, repeated data, hyperparameter laws, downstream tasks,
loss curves, RL) asks the same question of its own data: fitted below a cut, how well does a
method predict what lies above it? This module owns the pieces of that answer, so a fix to one of
them reaches every family and `python -m analysis backtest` measures exactly what the fits use:

- **cuts** (`forward_cuts`, `top_levels`, `top_k_cut`, `share_cut`, `holdout_mask`,
  `prefix_mask`): where a ladder is cut
  (by budget, size, epochs, hyperparameter rung, curve prefix (`prefix_mask`) or downstream model
  size: the caller passes the scale column);
- **fold errors** (`scatter_sd`, `top_share`, `drift_from_folds`, `fold_mae`): the run scatter,
  the budget offset and the drift per decade measured from fold errors;
- **intervals** (`percentile_interval`, `offsets`, `interval`, `coverage`): the central
  percentile range every reported interval uses, and its coverage;
- **bootstrap draws** (`bootstrap_counts`, `bootstrap_indices`): case resamples from a seed;
- **the padded batch** (`padded_rows`, `pad_rows`): rows padded with weight 0 to few compiled
  shapes before a problem is handed to the L-BFGS engine (`analysis.core.lbfgs`);
- **the choice** (`choose`): the first method, in the caller's order of preference (simplest or
  safest first), whose held-out error is within a margin of the best.

This module imports NumPy and the standard library only, so every analysis unit may use it.
"""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist
from typing import Mapping, Sequence

import numpy as np

PREDICTION_LEVEL = 0.90  # the level of every prediction interval the tools report
MAX_FOLDS = 6
MIN_FIT_FRACTION = 0.4  # a forward-chaining fold fits on at least this share of the runs
TOP_SHARE = 1 / 3  # run scatter is measured on the largest third of the fitted runs
# The smallest log-error sd an interval carries: the round-off of a float64 fit (parameters
# polished to a relative decrease of 1e-14) and of its prediction decades beyond the data, far
# below any measured scatter (Epoch's runs: 7e-3)
ROUNDOFF_SD = 1e-12
PARSIMONY = 0.10  # a method later in the order of preference must score >10% better to be chosen
LEVEL_RTOL = 1e-6  # two scale values closer than this (relative) are one level of the ladder


# ---- cuts ---------------------------------------------------------------------------------------
def levels(values: np.ndarray, rtol: float = LEVEL_RTOL) -> np.ndarray:
    """The distinct levels of a scale column (values within `rtol` of each other are one level),
    ascending; non-finite values are ignored."""
    v = np.sort(np.asarray(values, dtype=float).ravel())
    v = v[np.isfinite(v)]
    if not v.size:
        return v
    keep = np.concatenate([[True], np.diff(v) > rtol * np.abs(v[1:])])
    return v[keep]


def level_index(values: np.ndarray, rtol: float = LEVEL_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """(`levels(values, rtol)`, the index of each value's nearest level in log space): the runs of
    each level, e.g. runs whose lengths differ by a few logged steps as one run length."""
    lv = levels(values, rtol)
    return lv, np.abs(np.log(values)[:, None] - np.log(lv)[None, :]).argmin(axis=1)


def forward_cuts(
    scale: np.ndarray, max_folds: int = MAX_FOLDS, min_fit_fraction: float = MIN_FIT_FRACTION
) -> list[float]:
    """Forward-chaining cut points: geometric midpoints between consecutive distinct scales whose
    fit side holds at least `min_fit_fraction` of the runs, at most `max_folds` of them, evenly
    spread (the largest cuts first kept, as they look most like the real extrapolation). A fold
    fits `scale <= cut` and predicts `scale > cut`."""
    s = np.sort(np.asarray(scale, dtype=float))
    lv = np.unique(s)
    if lv.size < 3:
        return []
    mids = np.sqrt(lv[:-1] * lv[1:])
    frac = np.searchsorted(s, mids, side="right") / s.size
    mids = mids[frac >= min_fit_fraction]
    if mids.size <= max_folds:
        return [float(m) for m in mids]
    pick = np.unique(np.round(np.linspace(0, mids.size - 1, max_folds)).astype(int))
    return [float(mids[i]) for i in pick]


def top_levels(values: np.ndarray, n_cuts: int, min_left: int) -> list[float]:
    """Leave-largest-out cuts: the largest `n_cuts` distinct levels, each kept only when at least
    `min_left` distinct levels lie below it. A fold fits `values < cut` and predicts the rest."""
    lv = levels(values)
    return [float(lv[-j]) for j in range(1, n_cuts + 1) if lv.size - j >= min_left]


def share_cut(values: np.ndarray, share: float) -> float:
    """The smallest observed value that keeps at least `share` of the runs at or below it (a fold
    fits `values <= cut`)."""
    return float(np.quantile(np.asarray(values, dtype=float), share, method="lower"))


def top_k_cut(values: np.ndarray, k: int) -> float:
    """The cut that holds out at least the `k` largest values: the geometric midpoint between the
    k-th largest distinct level and the next one below (a fold fits `values <= cut`)."""
    lv = levels(values)[::-1]
    v = np.sort(np.asarray(values, dtype=float))[::-1]
    kth = v[min(k, v.size) - 1]
    below = lv[lv < kth * (1 - LEVEL_RTOL)]
    return float(np.sqrt(kth * below[0])) if below.size else float(kth)


def prefix_mask(steps: np.ndarray, fraction: float) -> np.ndarray:
    """Mask of a curve's prefix: the points within the first `fraction` of its span of steps (a
    curve-prefix fold fits them and forecasts the rest)."""
    t = np.asarray(steps, dtype=float)
    return t <= t[0] + fraction * (t[-1] - t[0])


def holdout_mask(values: np.ndarray, above: float | None = None, rtol: float = LEVEL_RTOL) -> np.ndarray:
    """Mask of the held-out runs: those above `above` (None: those at the largest level, within
    `rtol`). Everything else is fitted."""
    v = np.asarray(values, dtype=float)
    if above is None:
        return np.isclose(v, np.nanmax(v), rtol=rtol)
    return v > above * (1 + rtol)


# ---- fold errors --------------------------------------------------------------------------------
def scatter_sd(r: np.ndarray) -> float:
    """The sd of Gaussian scatter with the same 90% quantile of |r - median| as the residuals:
    calibrated where the interval is used (its 90% tails), unmoved by one wild run (unlike the
    RMS), and not fooled by a narrow core with wide tails (unlike the MAD, which on the Epoch
    runs is half the tail's scale)."""
    r = np.asarray(r, dtype=float)
    r = r[np.isfinite(r)]
    if r.size < 2:
        return 0.0
    return float(
        np.quantile(np.abs(r - np.median(r)), PREDICTION_LEVEL) / norm_ppf(0.5 + PREDICTION_LEVEL / 2)
    )


def top_share(
    values: np.ndarray, scale: np.ndarray, share: float = TOP_SHARE, min_points: int = 10
) -> np.ndarray:
    """The `values` of the runs in the top `share` of `scale` (at least `min_points`, else all):
    scatter grows with scale on real ladders (Epoch's top-budget runs scatter twice as much as
    its small ones), and predictions are made beyond the top, so the top sets the noise."""
    values, scale = np.asarray(values, dtype=float), np.asarray(scale, dtype=float)
    k = max(min_points, int(math.ceil(share * scale.size)))
    if k >= scale.size:
        return values
    return values[np.argsort(scale, kind="stable")[-k:]]


def drift_from_folds(
    errors: Sequence[np.ndarray], decades: Sequence[np.ndarray], noise_sd: float
) -> tuple[float, float]:
    """(budget_sd, drift_per_decade) from fold errors: non-negative least squares of
    e^2 - noise^2 ~ budget_sd^2 + drift^2 * decades^2. `budget_sd` is the error a law makes at a
    budget it never saw even right next to its data (a whole IsoFLOP curve sits off the law),
    `drift` the growth with distance; a law that extrapolates as well as it fits has neither."""
    e = np.concatenate([np.asarray(x, float) for x in errors]) if errors else np.zeros(0)
    d = np.concatenate([np.asarray(x, float) for x in decades]) if decades else np.zeros(0)
    ok = np.isfinite(e) & np.isfinite(d)
    if ok.sum() < 2:
        return 0.0, 0.0
    y, X = e[ok] ** 2 - noise_sd**2, np.stack([np.ones(ok.sum()), d[ok] ** 2], axis=1)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    if coef[0] < 0 or coef[1] < 0:  # NNLS on two coefficients: the best single-term fits
        c0 = max(float(np.mean(y)), 0.0)
        c1 = max(float(np.sum(X[:, 1] * y) / np.sum(X[:, 1] ** 2)), 0.0) if np.any(X[:, 1] > 0) else 0.0
        sse0, sse1 = np.sum((y - c0) ** 2), np.sum((y - c1 * X[:, 1]) ** 2)
        coef = np.array([c0, 0.0]) if sse0 <= sse1 else np.array([0.0, c1])
    return math.sqrt(max(coef[0], 0.0)), math.sqrt(max(coef[1], 0.0))


def fold_mae(errors: Sequence[np.ndarray]) -> float:
    """Mean |error| over all held-out predictions (NaN without any finite one)."""
    e = np.abs(np.concatenate([np.asarray(x, float).ravel() for x in errors])) if errors else np.zeros(0)
    e = e[np.isfinite(e)]
    return float(e.mean()) if e.size else math.nan


# ---- intervals ----------------------------------------------------------------------------------
def percentile_interval(samples: np.ndarray, level: float = PREDICTION_LEVEL, axis: int = 0) -> np.ndarray:
    """Central `level` percentile range of `samples` along `axis`, ignoring non-finite values
    (bootstrap resamples far from the optimum can overflow): an array of shape (2, ...) holding
    lo and hi, NaN where no finite sample is left."""
    s = np.asarray(samples, dtype=float)
    s = np.where(np.isfinite(s), s, np.nan)
    q = [50 * (1 - level), 50 * (1 + level)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is NaN, said by the value
        return np.nanpercentile(s, q, axis=axis)


def percentile_bounds(values: np.ndarray, level: float = PREDICTION_LEVEL) -> list[float]:
    """[lo, hi] (floats) central percentile interval of the finite `values`, flattened; [nan, nan]
    when none is finite."""
    return [float(x) for x in percentile_interval(np.asarray(values, dtype=float).ravel(), level)]


def offsets(
    samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[np.ndarray, np.ndarray]:
    """Central `level` range (lo, hi) of u_b + z around a prediction: u_b the bootstrap
    deviations from their median (resamples with a non-finite value dropped), z ~ N(0, sd^2),
    sampled with a fixed seed; with fewer than 10 usable resamples, the Gaussian range alone."""
    sd_N = np.asarray(sd_N, dtype=float)
    q = 0.5 + level / 2
    s = None if samples_BxN is None else np.asarray(samples_BxN, dtype=float)
    s = None if s is None else s[np.all(np.isfinite(s), axis=1)]
    if s is None or len(s) < 10:
        z = norm_ppf(q)
        return -z * sd_N, z * sd_N
    rng = np.random.default_rng(seed)
    b = rng.integers(0, len(s), size=draws)
    tot = (s - np.median(s, axis=0, keepdims=True))[b] + rng.standard_normal((draws, sd_N.size)) * sd_N
    lo, hi = percentile_interval(tot, level)
    return lo, hi


def interval(
    log_pred_N: np.ndarray,
    log_pred_samples_BxN: np.ndarray | None,
    sd_N: np.ndarray,
    level: float = PREDICTION_LEVEL,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] (linear units) of log y = log_pred + u_b + z, z ~ N(0, sd^2), u_b the bootstrap
    deviations of the prediction (none: the Gaussian term alone, analytically)."""
    log_pred_N = np.atleast_1d(np.asarray(log_pred_N, dtype=float))
    lo, hi = offsets(
        log_pred_samples_BxN,
        np.broadcast_to(np.asarray(sd_N, dtype=float), log_pred_N.shape),
        level,
        seed,
        draws,
    )
    return np.exp(log_pred_N + lo), np.exp(log_pred_N + hi)


def norm_ppf(q: float) -> float:
    """Standard normal quantile (the standard library's, so the CLI's fast path needs no SciPy)."""
    return NormalDist().inv_cdf(q)


def coverage(actual: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Fraction of `actual` values inside [lo, hi] (NaN without any value)."""
    a = np.asarray(actual, dtype=float)
    return float(np.mean((a >= lo) & (a <= hi))) if a.size else math.nan


# ---- bootstrap draws ----------------------------------------------------------------------------
def bootstrap_counts(n: int, n_resamples: int, seed: int | np.random.Generator) -> np.ndarray:
    """(n_resamples, n) case-resampling counts (how often each point is drawn; every resample
    keeps all points, so one compiled program serves every resample with counts as weights)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(float)


def bootstrap_indices(n: int, n_resamples: int, seed: int | np.random.Generator) -> np.ndarray:
    """(n_resamples, n) case-resampling indices (for fits that take the drawn points themselves)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n))


# ---- the padded batch ---------------------------------------------------------------------------
def padded_rows(n: int, min_rows: int = 128, quantum: int | None = None) -> int:
    """The row count a problem of `n` points is padded to before it is handed to the engine, so
    that problems of similar size share one compiled program: the next power of two (at least
    `min_rows`), or with `quantum`, the next multiple of it (at least `min_rows`)."""
    if quantum is not None:
        return max(min_rows, -(-n // quantum) * quantum)
    return max(min_rows, 1 << (max(n, 1) - 1).bit_length())


def pad_rows(a: np.ndarray, rows: int, value: float | bool = 0.0) -> np.ndarray:
    """`a` with its last axis padded to `rows` entries of `value` (a padded point's weight is 0)."""
    a = np.asarray(a)
    extra = rows - a.shape[-1]
    if extra <= 0:
        return a
    return np.concatenate([a, np.full(a.shape[:-1] + (extra,), value, a.dtype)], axis=-1)


# ---- the choice ---------------------------------------------------------------------------------
def choose(scores: Mapping[str, float], order: Sequence[str], margin: float = PARSIMONY) -> str:
    """The first method of `order` (simplest or safest first) whose held-out error is within
    `margin` (relative) of the best finite one; the last method of `order` present in `scores`
    when none could be scored. Fold errors of near-equal methods differ by noise, so a method
    later in the order must be clearly better to be chosen."""
    finite = {k: v for k, v in scores.items() if v is not None and math.isfinite(v)}
    if not finite:
        present = [k for k in order if k in scores]
        if not present:
            raise ValueError("choose: no method of the order was scored")
        return present[-1]
    best = min(finite.values())
    return next(k for k in order if k in finite and finite[k] <= best * (1 + margin) + 1e-15)


def choose_against(
    baseline: str,
    folds: Mapping[str, Mapping[object, float]],
    order: Sequence[str],
    margin: float = PARSIMONY,
    shared: bool = False,
) -> str:
    """The baseline, unless another method of `order` beats it by `margin` on every fold.

    `folds[method][fold]` is the method's held-out error on one fold (a forward-chaining cut, the
    most-repeated runs, the largest models, ...). A challenger qualifies when it was scored on
    every fold the baseline was, with an error at most (1 - margin) x the baseline's on each; of
    those, the first of `order` within `margin` of the best mean error wins. A wrong pick then
    needs every fold to mislead in the same direction: one lucky fold (the old rule's mean over
    two folds) cannot overturn the baseline. Without a scored baseline: `choose` on the means.

    `shared`: a challenger that needs more of the ladder than the baseline (a third model size)
    cannot be fitted on the smallest cuts; it is then compared on the folds both were scored on,
    which must include the baseline's last fold (the largest cut, the one most like the real
    extrapolation; folds are given in the order of their cuts); the challengers that qualify are
    compared with each other on the folds they all share."""
    base = {f: e for f, e in folds.get(baseline, {}).items() if math.isfinite(e)}
    if shared and base:
        return _choose_shared(baseline, base, folds, order, margin)
    means = {k: float(np.mean(list(v.values()))) for k, v in folds.items() if v}
    means = {k: v for k, v in means.items() if math.isfinite(v)}
    if not base:
        return choose(means, order, margin) if means else baseline
    qualified = {
        k: means[k]
        for k in order
        if k != baseline
        and k in means
        and all(f in folds[k] and folds[k][f] <= (1 - margin) * e + 1e-15 for f, e in base.items())
    }
    if not qualified:
        return baseline
    return choose(qualified, order, margin)


def _choose_shared(
    baseline: str,
    base: Mapping[object, float],
    folds: Mapping[str, Mapping[object, float]],
    order: Sequence[str],
    margin: float,
) -> str:
    """`choose_against(..., shared=True)`: each challenger against the baseline on the folds both
    were scored on (the baseline's last fold among them); the qualified ones compared with each
    other on the folds they all share."""
    last = list(base)[-1]
    qualified = []
    for k in order:
        mine = {f: e for f, e in folds.get(k, {}).items() if f in base and math.isfinite(e)}
        if k == baseline or last not in mine:
            continue
        if all(e <= (1 - margin) * base[f] + 1e-15 for f, e in mine.items()):
            qualified.append(k)
    if not qualified:
        return baseline
    common = [f for f in base if all(f in folds[k] for k in qualified)]
    means = {k: float(np.mean([folds[k][f] for f in common])) for k in qualified}
    return choose(means, order, margin)


# the two-sided 90% normal quantile: a Gaussian error in log units -> the 90% interval's half-width
Z90 = norm_ppf(0.5 + PREDICTION_LEVEL / 2)
