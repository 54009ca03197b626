"""Prediction intervals of point laws (analysis.core.intervals): the error model and its coverage."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from analysis.core import validation
from analysis.laws.fitting import fit_law


def test_drift_is_recovered_from_fold_errors():
    """e ~ N(0, noise^2 + budget^2 + (drift * decades)^2) -> the least-squares terms are the true ones."""
    rng = np.random.default_rng(0)
    d = rng.uniform(0.05, 1.0, 20000)
    e = rng.normal(0, np.sqrt(0.004**2 + (0.012 * d) ** 2))
    budget, drift = validation.drift_from_folds([e], [d], 0.004)
    assert drift == pytest.approx(0.012, rel=0.05) and budget < 0.002
    # a whole-budget offset shows as the intercept, not as drift
    e2 = rng.normal(0, np.sqrt(0.004**2 + 0.006**2 + (0.01 * d) ** 2))
    budget, drift = validation.drift_from_folds([e2], [d], 0.004)
    assert budget == pytest.approx(0.006, rel=0.15) and drift == pytest.approx(0.01, rel=0.15)
    # a law that extrapolates as well as it fits has neither (clipped at 0, not imaginary)
    assert validation.drift_from_folds([rng.normal(0, 0.002, 500)], [np.full(500, 0.5)], 0.004) == (0.0, 0.0)
    assert validation.drift_from_folds([], [], 0.004) == (0.0, 0.0)


def test_scatter_sd_is_calibrated_at_90_percent_and_ignores_one_wild_run():
    rng = np.random.default_rng(1)
    r = rng.normal(0, 0.01, 4000)
    assert validation.scatter_sd(r) == pytest.approx(0.01, rel=0.05)
    assert validation.scatter_sd(np.append(r, 5.0)) == pytest.approx(validation.scatter_sd(r), rel=0.01)


def test_fold_cuts_keep_enough_runs_to_fit():
    scale = np.repeat(np.geomspace(1e17, 1e21, 9), 5)
    cuts = validation.forward_cuts(scale)
    assert 1 <= len(cuts) <= validation.MAX_FOLDS and cuts == sorted(cuts)
    for c in cuts:
        assert (scale <= c).mean() >= validation.MIN_FIT_FRACTION and (scale > c).any()
    assert validation.forward_cuts(np.array([1e18, 1e18, 1e19])) == []  # two budgets: nothing to chain


def test_gaussian_interval_covers_90_percent():
    """Without bootstrap samples the interval is the Gaussian one: 90% of draws inside."""
    rng = np.random.default_rng(2)
    sd = np.full(20000, 0.01)
    lo, hi = validation.interval(np.zeros(20000), None, sd)
    y = np.exp(rng.normal(0, 0.01, 20000))
    assert validation.coverage(y, lo, hi) == pytest.approx(0.90, abs=0.01)
    # with samples the parameter spread widens it (1000 points: each draws 4000 times, and the
    # mean width over them is already within ~1% of its limit)
    samples = rng.normal(0, 0.01, (500, 1000))
    lo2, hi2 = validation.interval(np.zeros(1000), samples, sd[:1000])
    assert np.mean(np.log(hi2) - np.log(lo2)) == pytest.approx(
        np.mean(np.log(hi) - np.log(lo)) * math.sqrt(2), rel=0.05
    )


def _misspecified_isoflop(seed: int) -> pd.DataFrame:
    """An IsoFLOP ladder (5 budgets x 7 sizes) from a law the Chinchilla form cannot express: an
    N-D interaction term G / (N D)^0.12, plus 0.3% run scatter."""
    rng = np.random.default_rng(seed)
    E, A, B = rng.uniform(1.6, 2.2), rng.uniform(300, 900), rng.uniform(800, 3000)
    al, be, G = rng.uniform(0.3, 0.4), rng.uniform(0.3, 0.4), rng.uniform(5, 20)
    rows = []
    for C in np.geomspace(1e18, 1e20, 5):
        for N in np.geomspace(C**0.5 / 40, C**0.5 / 3, 7):
            D = C / (6 * N)
            L = E + A / N**al + B / D**be + G / (N * D) ** 0.12
            rows.append((N, D, L * np.exp(rng.normal(0, 0.003))))
    return pd.DataFrame(rows, columns=["N", "D", "loss"])


@pytest.mark.slow
def test_holdout_intervals_cover_a_misspecified_law():
    """Fit on the 3 smaller budgets (1e18-1e19), predict the top one (1e20, a decade out): the 90%
    intervals cover >= 80% of the held-out runs pooled over 8 ladders, while staying narrow
    (<= 3.5% of the loss). Without the forward-chaining drift term (parameter noise + scatter only)
    the same intervals cover far fewer, so this test fails if the misspecification term is dropped
    or mis-scaled."""
    inside, inside_no_drift, widths = [], [], []
    for seed in range(8):
        df = _misspecified_isoflop(seed)
        fit = fit_law(df, "chinchilla", bootstrap=0, holdout_above=3e19)
        h = fit.holdout
        assert h.coverage is not None and all(p.interval is not None for p in h.points)
        inside += [p.interval.lo <= p.actual <= p.interval.hi for p in h.points]
        widths.append(h.mean_interval_rel_width)
        pe = fit.prediction_error
        assert pe.n_folds >= 1 and pe.drift_per_decade > 0
        bare = dataclasses.replace(
            fit, prediction_error=dataclasses.replace(pe, drift_per_decade=0.0, budget_sd=0.0)
        )
        held = df[6 * df.N * df.D > 3e19]
        _, lo, hi = bare.predict_interval({"N": held.N.values, "D": held.D.values})
        inside_no_drift += list((held.loss.values >= lo) & (held.loss.values <= hi))
    assert np.mean(inside) >= 0.80, np.mean(inside)
    assert np.mean(widths) <= 0.035, np.mean(widths)
    assert np.mean(inside_no_drift) < 0.75, np.mean(inside_no_drift)


def test_holdout_json_carries_interval_and_coverage():
    rng = np.random.default_rng(3)
    N = np.repeat(np.geomspace(2e7, 3e9, 6), 6)
    D = np.tile(np.geomspace(4e8, 2e11, 6), 6)
    L = (1.8 + 400 / N**0.34 + 2000 / D**0.36) * np.exp(rng.normal(0, 0.002, N.size))
    fit = fit_law(pd.DataFrame({"N": N, "D": D, "loss": L}), bootstrap=30, holdout_above=1e20)
    out = fit.to_dict()
    h = out["holdout"]
    assert 0.0 <= h["coverage"] <= 1.0 and h["interval_level"] == 0.9
    for p in h["points"]:
        lo, hi = p["interval"]
        assert lo < p["predicted"] < hi
    assert set(out["prediction_error"]) >= {"noise_sd", "drift_per_decade", "scale_max", "level"}
    assert out["prediction_error"]["scale_max"] <= 1e20
