"""Bootstrap CIs cover the truth about 95% of the time (synthetic data from a known law).

Vectorised: the point fits of all repetitions run as one batch, then every (repetition,
resample) pair as another, through the same objective and optimiser the fits use.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from analysis.laws.fitting import objective_fn  # noqa: E402
from analysis.laws.registry import get_law  # noqa: E402
from analysis.laws.lbfgs import LBFGSConfig, minimize_batch  # noqa: E402


def test_percentile_bootstrap_coverage_near_95_percent():
    law = get_law("kaplan_n_e")
    truth = np.array([1.9, 400.0, 0.33])  # E, A, alpha
    R, B, n, sigma = 200, 200, 60, 0.01
    rng = np.random.default_rng(123)
    N = np.geomspace(1e7, 1e10, n)
    clean = law.predict(truth, {"N": N})
    logy_RxN = np.log(clean)[None, :] + rng.normal(0, sigma, (R, n))
    fun = objective_fn(law, (0, 1, 2), 1e-3)
    theta0 = law.to_internal(truth)
    cfg = LBFGSConfig(max_evals=1500)
    with jax.enable_x64(True):
        shared = (jnp.zeros(3), (jnp.asarray(np.log(N)),))
        fit = minimize_batch(fun, np.tile(theta0, (R, 1)), (*shared, logy_RxN, np.ones((R, n))),
                             batched_args=(False, False, True, True), cfg=cfg)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=R * B).astype(float)
        boot = minimize_batch(fun, np.repeat(fit.x, B, axis=0), (*shared, np.repeat(logy_RxN, B, axis=0), counts),
                              batched_args=(False, False, True, True), cfg=cfg)
    samples = law.to_public(boot.x).reshape(R, B, 3)
    lo, hi = np.percentile(samples, [2.5, 97.5], axis=1)  # (R, 3)
    covered = (lo <= truth) & (truth <= hi)
    coverage = covered.mean(axis=0)
    # 200 repetitions: binomial sd ~1.5 points; percentile bootstrap runs slightly narrow at n=60.
    assert np.all(coverage >= 0.88) and np.all(coverage <= 0.995), coverage
    assert abs(coverage.mean() - 0.95) <= 0.04, coverage
