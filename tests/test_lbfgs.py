"""The batched L-BFGS engine: a batch started from host-side fresh states takes exactly the steps
of `init_state` + `run`, stalls on a non-finite start, and one width serves every batch size."""

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core import lbfgs
from analysis.core.lbfgs import LBFGSConfig, minimize_batch


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


def test_workers_do_not_change_a_start():
    """Two host threads draining one queue (each its own batch of the same width) give every start
    exactly the steps one thread gives it: same points, objectives, counts and statuses."""
    x0 = np.random.default_rng(7).uniform(-1.5, 1.5, size=(150, 3))
    with jax.enable_x64(True):
        one = minimize_batch(rosenbrock, x0, (10.0,), width=32, workers=1)
        two = minimize_batch(rosenbrock, x0, (10.0,), width=32, workers=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert lbfgs._n_workers(150, 32, 2) == 2 and lbfgs._n_workers(20, 32, 4) == 1


def test_a_kept_round_program_is_the_jitted_one(tmp_path, monkeypatch):
    """With a program key and a program store, the round program is compiled once, kept, and
    loaded by a later process (here: with this process's loaded programs forgotten): every run
    gives what the jitted round gives, bit for bit. A broken stored program is dropped and compiled
    anew; a run without a key stores nothing; the store keeps its most recently used programs."""
    from models.base import programs

    monkeypatch.setattr(programs, "directory", lambda: tmp_path)
    monkeypatch.setattr(lbfgs, "_mesh", lambda: None)  # the store serves the one-device round
    monkeypatch.setattr(programs, "_loaded", {})
    x0 = np.random.default_rng(3).uniform(-1.5, 1.5, size=(40, 3))

    def fit(key):
        with jax.enable_x64(True):
            return minimize_batch(rosenbrock, x0, (10.0,), width=32, program_key=key)

    ref = fit(None)
    assert not list(tmp_path.iterdir())
    kept = fit("rosenbrock test")
    (stored,) = tmp_path.glob("lbfgs_round-*.xla")
    programs._loaded.clear()
    loaded = fit("rosenbrock test")
    stored.write_bytes(b"not a program")
    programs._loaded.clear()
    rebuilt = fit("rosenbrock test")
    assert stored.stat().st_size > 1000
    monkeypatch.setattr(programs, "MAX_KEPT", 1)
    other = fit("rosenbrock test, another key")
    assert len(list(tmp_path.glob("*.xla"))) == 1 and not stored.exists()  # the least recently used goes
    for got in (kept, loaded, rebuilt, other):
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(a, b)
