"""The batched L-BFGS engine: a batch started from host-side fresh states takes exactly the steps
of `init_state` + `run`, stalls on a non-finite start, and one width serves every batch size."""

import jax
import jax.numpy as jnp
import numpy as np

from analysis.laws import lbfgs
from analysis.laws.lbfgs import LBFGSConfig, minimize_batch


def rosenbrock(x, scale):
    return jnp.sum(scale * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_fresh_states_take_the_steps_of_init_state():
    cfg = LBFGSConfig(max_evals=500)
    x0 = np.random.default_rng(0).normal(size=(6, 4))
    with jax.enable_x64(True):
        got = minimize_batch(rosenbrock, x0, (100.0,), cfg=cfg)
        ref = jax.vmap(lambda x: lbfgs.minimize(rosenbrock, x, 100.0, cfg=cfg))(jnp.asarray(x0))
    np.testing.assert_array_equal(got.n_eval, np.asarray(ref.n_eval))
    np.testing.assert_array_equal(got.n_iter, np.asarray(ref.n_iter))
    np.testing.assert_allclose(got.x, np.asarray(ref.x), rtol=1e-12, atol=1e-12)
    assert np.all(np.isin(got.status, lbfgs.CONVERGED_CODES))


def test_non_finite_start_stalls_after_one_evaluation():
    x0 = np.array([[np.nan, 0.0], [0.5, 0.5]])
    with jax.enable_x64(True):
        r = minimize_batch(rosenbrock, x0, (1.0,))
    assert r.status[0] == lbfgs.STALLED and r.n_eval[0] == 1 and r.n_iter[0] == 0
    assert not np.isfinite(r.f[0]) and r.status[1] in lbfgs.CONVERGED_CODES


def test_one_width_for_every_batch_size():
    """Batches of 3 and of 70 starts at width 64 give what their own widths give."""
    with jax.enable_x64(True):
        for n in (3, 70):
            x0 = np.random.default_rng(n).uniform(-1.5, 1.5, size=(n, 3))
            fixed = minimize_batch(rosenbrock, x0, (10.0,), width=64)
            own = minimize_batch(rosenbrock, x0, (10.0,))
            np.testing.assert_array_equal(fixed.n_eval, own.n_eval)
            np.testing.assert_allclose(fixed.x, own.x, rtol=1e-12, atol=1e-12)
    assert lbfgs.batch_width(3) == lbfgs.MIN_WIDTH and lbfgs.batch_width(70) == 128
    assert lbfgs.batch_width(5000, slots=256) == 256
