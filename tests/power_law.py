"""A power law in N with an irreducible loss, L = E + A / N^alpha, registered as a user law that
is fitted on non-embedding N by default: what the tests of `--n-params`, bounds and coverage use
(the project ships no Kaplan-form law: never better than Chinchilla's forms on the backtest zoo)."""

import jax.numpy as jnp

from analysis import register_law

NAME = "power_n_e"


def register() -> str:
    register_law(
        NAME,
        lambda p, c: p["E"] + p["A"] * jnp.power(c["N"], -p["alpha"]),
        ["E", "A", "alpha"],
        ["N"],
        {"E": [0.5, 1.0, 2.0], "A": [1.0, 10.0, 100.0, 1000.0], "alpha": [0.05, 0.15, 0.3, 0.6, 1.0]},
        positive=["E", "A"],
        bounds={"alpha": (0.0, 3.0)},
        default_n_params="non_embedding",
        formula="L = E + A / N^alpha",
        replace=True,
    )
    return NAME
