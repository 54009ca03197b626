"""The registry of point scaling laws: functional form, parameter names, bounds and start grid.

A law is fitted in an *internal* parameterisation chosen for the optimiser (log-amplitudes, so
`A = exp(a)` stays positive and spans decades), and reported in its *public* one (the names a
paper uses: Chinchilla's `E, A, B, alpha, beta`). Each internal coordinate maps to exactly one
public parameter, either by `exp` (`log_params[i]`) or unchanged; that one-to-one map is what
makes fixing a parameter (`fixed={"E": 1.69}`) and reading bootstrap samples simple.

Every law returns the *log* of its prediction (`log_predict`), because fits minimise a Huber
loss of log residuals; sums of power laws are evaluated as log-sum-exp in log space, which is
exact where a direct `A * N**-alpha` would overflow or lose precision at 1e22 FLOPs.

Users add laws with `register_law` (a prediction function of named columns, parameter names and a
start grid); the CLI's `--law` and the report list whatever is registered.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from models.base.errors import AnalysisError


@jax.custom_jvp
def _log_near_one(s):
    """log(s) for s in [1, k] (a sum of exps after max-subtraction), fast in float64.

    XLA's float64 `log` on CPU is ~5x slower than its `exp`; a float32 log refined by one
    Newton step with a float64 exp is accurate to ~1e-15 and dominates the fit's speed.
    """
    if s.dtype != jnp.float64:
        return jnp.log(s)
    y0 = jnp.log(s.astype(jnp.float32)).astype(s.dtype)
    return y0 + (s * jnp.exp(-y0) - 1.0)


@_log_near_one.defjvp
def _log_near_one_jvp(primals, tangents):
    (s,), (ts,) = primals, tangents
    return _log_near_one(s), ts / s


def logsumexp(*terms):
    """log(sum(exp(t))) over broadcastable terms, stable and fast (see `_log_near_one`)."""
    terms = jnp.broadcast_arrays(*terms)
    m = terms[0]
    for t in terms[1:]:
        m = jnp.maximum(m, t)
    m = jax.lax.stop_gradient(m)
    return m + _log_near_one(sum(jnp.exp(t - m) for t in terms))


@dataclass(frozen=True, eq=False)
class Law:
    """One functional form. `log_predict(theta_P, logX)`: internal params and a tuple of log inputs
    (in `inputs` order) -> log of the predicted target. `grid(logX, logy)` -> internal starts."""

    name: str
    param_names: tuple[str, ...]
    inputs: tuple[str, ...]
    log_predict: Callable
    log_params: tuple[bool, ...]
    grid: Callable[[tuple, np.ndarray], np.ndarray]
    bounds: tuple[tuple[float, float], ...]
    formula: str
    description: str = ""
    min_distinct: Mapping[str, int] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    def to_public(self, theta_xP):
        """Internal -> public parameters (works on numpy or jax arrays, any leading axes)."""
        mod = jnp if isinstance(theta_xP, jax.Array) else np
        theta_xP = mod.asarray(theta_xP)
        return mod.where(np.asarray(self.log_params), mod.exp(theta_xP), theta_xP)

    def to_internal(self, public_xP):
        public_xP = np.asarray(public_xP, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.asarray(self.log_params), np.log(public_xP), public_xP)

    def predict(self, public_P, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted target (linear scale) at the given inputs, from public parameters."""
        theta = self.to_internal(np.asarray(public_P, dtype=float))
        logX = tuple(np.log(np.asarray(inputs[k], dtype=float)) for k in self.inputs)
        with jax.enable_x64(True):
            out = self.log_predict(jnp.asarray(theta), tuple(jnp.asarray(v) for v in logX))
            return np.exp(np.asarray(out))


_REGISTRY: dict[str, Law] = {}


def register(law: Law, *, replace: bool = False) -> Law:
    """Add a `Law` object to the registry (see `register_law` for the friendly form)."""
    if law.name in _REGISTRY and not replace:
        raise AnalysisError(f"a law named {law.name!r} is already registered; pass replace=True to override it")
    if not (len(law.param_names) == len(law.log_params) == len(law.bounds)):
        raise AnalysisError(f"law {law.name!r}: param_names, log_params and bounds must have the same length")
    _REGISTRY[law.name] = law
    return law


def register_law(
    name: str,
    predict: Callable,
    param_names: Sequence[str],
    inputs: Sequence[str],
    grid: Mapping[str, Sequence[float]] | np.ndarray,
    *,
    positive: Sequence[str] = (),
    bounds: Mapping[str, tuple[float, float]] | None = None,
    formula: str = "",
    description: str = "",
    replace: bool = False,
) -> Law:
    """Register a user law: `predict(p, cols) -> prediction` with `p` a dict of parameter name ->
    scalar and `cols` a dict of input column -> array (linear scale, jax arrays; use `jnp`).

    `grid` is either a dict name -> candidate start values (public scale; the full product is
    used) or an array (S, P) of public starts. Parameters listed in `positive` are optimised as
    logs (so they stay > 0). Example::

        register_law("inverse_sqrt", lambda p, c: p["E"] + p["A"] / jnp.sqrt(c["N"]),
                     ["E", "A"], ["N"], {"E": [1, 2], "A": [10, 1000]}, positive=["E", "A"])
    """
    param_names = tuple(param_names)
    inputs = tuple(inputs)
    unknown = set(positive) - set(param_names)
    if unknown:
        raise AnalysisError(f"positive names {sorted(unknown)} are not parameters of {name!r}")
    log_params = tuple(p in positive for p in param_names)
    if isinstance(grid, Mapping):
        missing = [p for p in param_names if p not in grid]
        if missing:
            raise AnalysisError(f"grid for law {name!r} lacks start values for {missing}")
        public_grid = np.array(list(itertools.product(*(grid[p] for p in param_names))), dtype=float)
    else:
        public_grid = np.atleast_2d(np.asarray(grid, dtype=float))
        if public_grid.shape[1] != len(param_names):
            raise AnalysisError(f"grid for law {name!r} must have {len(param_names)} columns")
    bounds = tuple((bounds or {}).get(p, (-np.inf, np.inf)) for p in param_names)
    law = Law(
        name=name, param_names=param_names, inputs=inputs, log_params=log_params, bounds=bounds,
        formula=formula or f"user law {name}", description=description,
        min_distinct={k: 2 for k in inputs}, log_predict=None, grid=None,  # set below
    )
    internal_grid = law.to_internal(public_grid)

    def log_predict(theta, logX):
        pub = jnp.where(jnp.asarray(log_params), jnp.exp(theta), theta)
        p = {k: pub[i] for i, k in enumerate(param_names)}
        cols = {k: jnp.exp(v) for k, v in zip(inputs, logX)}
        return jnp.log(predict(p, cols))

    object.__setattr__(law, "log_predict", log_predict)
    object.__setattr__(law, "grid", lambda logX, logy: internal_grid)
    return register(law, replace=replace)


def get_law(name: str) -> Law:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AnalysisError(f"unknown law {name!r}; known laws: {', '.join(known_laws())}") from None


def known_laws() -> list[str]:
    return sorted(_REGISTRY)


# ----------------------------------------------------------------------------- built-in laws


def _product_grid(*axes) -> Callable:
    starts = np.array(list(itertools.product(*axes)), dtype=float)
    return lambda logX, logy: starts


# Epoch AI's grid (Besiroglu et al. 2024): 4,500 starts in (e, a, b, alpha, beta).
CHINCHILLA_GRID = np.array(
    [
        (e, a, b, al, be)
        for al in np.arange(0.0, 2.01, 0.5)
        for be in np.arange(0.0, 2.01, 0.5)
        for e in np.arange(-1.0, 1.01, 0.5)
        for a in np.arange(0.0, 25.1, 5.0)
        for b in np.arange(0.0, 25.1, 5.0)
    ]
)


def _chinchilla(theta, logX):
    e, a, b, alpha, beta = theta
    logN, logD = logX
    return logsumexp(a - alpha * logN, b - beta * logD, e)


register(
    Law(
        name="chinchilla",
        param_names=("E", "A", "B", "alpha", "beta"),
        inputs=("N", "D"),
        log_predict=_chinchilla,
        log_params=(True, True, True, False, False),
        grid=lambda logX, logy: CHINCHILLA_GRID,
        bounds=((0.0, np.inf), (0.0, np.inf), (0.0, np.inf), (0.0, 3.0), (0.0, 3.0)),
        formula="L(N, D) = E + A / N^alpha + B / D^beta",
        description="Hoffmann et al. 2022 (Approach 3), fitted as Besiroglu et al. 2024 did.",
        min_distinct={"N": 2, "D": 2},
    )
)


def _pure_power(theta, logX):
    a, alpha = theta
    return a - alpha * logX[0]


def _power_with_floor(theta, logX):
    e, a, alpha = theta
    return logsumexp(a - alpha * logX[0], e)


def _data_scaled_grid(with_floor: bool) -> Callable:
    """Starts that follow the data's scale: a power law through the data's range of x and y."""

    def grid(logX, logy):
        lx = logX[0]
        alphas = np.array([0.05, 0.15, 0.3, 0.6, 1.0, 1.5])
        # a chosen so that A x^-alpha equals the median y at the median x.
        a = np.median(logy) + alphas * np.median(lx)
        shifts = np.array([-2.0, 0.0, 2.0])
        if not with_floor:
            return np.array([(ai + s, al) for ai, al in zip(a, alphas) for s in shifts])
        floors = np.min(logy) + np.log([0.25, 0.5, 0.8, 0.95])
        return np.array([(e, ai + s, al) for e in floors for ai, al in zip(a, alphas) for s in shifts])

    return grid


for _var, _what in (("N", "parameters"), ("D", "tokens"), ("C", "training FLOPs")):
    register(
        Law(
            name=f"kaplan_{_var.lower()}",
            param_names=("A", "alpha"),
            inputs=(_var,),
            log_predict=_pure_power,
            log_params=(True, False),
            grid=_data_scaled_grid(False),
            bounds=((0.0, np.inf), (0.0, 3.0)),
            formula=f"L({_var}) = A / {_var}^alpha",
            description=f"Kaplan et al. 2020 power law in {_what} (no irreducible term).",
            min_distinct={_var: 2},
        )
    )
    register(
        Law(
            name=f"kaplan_{_var.lower()}_e",
            param_names=("E", "A", "alpha"),
            inputs=(_var,),
            log_predict=_power_with_floor,
            log_params=(True, True, False),
            grid=_data_scaled_grid(True),
            bounds=((0.0, np.inf), (0.0, np.inf), (0.0, 3.0)),
            formula=f"L({_var}) = E + A / {_var}^alpha",
            description=f"Power law in {_what} with an irreducible loss E.",
            min_distinct={_var: 3},
        )
    )

register(
    Law(
        name="power",
        param_names=("E", "A", "alpha"),
        inputs=("x",),
        log_predict=_power_with_floor,
        log_params=(True, True, False),
        grid=_data_scaled_grid(True),
        bounds=((0.0, np.inf), (0.0, np.inf), (-3.0, 3.0)),
        formula="y = E + A * x^-alpha",
        description="Plain power law with offset for any positive metric y of any positive x.",
        min_distinct={"x": 3},
    )
)
