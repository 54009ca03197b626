"""The registry of point scaling laws: functional form, parameter names, bounds and start grid.

A law is fitted in an *internal* parameterisation chosen for the optimiser and reported in its
*public* one (the names a paper uses: Chinchilla's `E, A, B, alpha, beta`). Each internal
coordinate maps to exactly one public parameter through a `Transform` chosen from the declared
bounds, so every bound holds by construction (the optimiser is unconstrained in the internal
coordinates and can never step outside):

- (lo, hi) both finite (Chinchilla's alpha, beta in (0, 3)): a *soft clamp*, `t` itself on the
  interval's interior [lo + k, hi - k] (k = `KNEE_FRACTION` of the width) and exponential tails
  `lo + k exp((t - lo - k) / k)` / `hi - k exp((hi - k - t) / k)` beyond, joined with matching
  value and slope. A sigmoid enforces the same bounds, but bends the whole interval: on the Epoch
  data it cost the bootstrap 59% more function evaluations; the soft clamp leaves interior optima
  in the coordinates the optimiser had before (identical iterates) and puts small exponents on a
  log scale, which suits them;
- (0, inf): `exp(t)` (log-amplitudes: A spans decades, and these are Epoch AI's own coordinates);
- (lo, inf) / (-inf, hi): `lo + exp(t)` / `hi - exp(t)`;
- unbounded: `t` unchanged.

That one-to-one map is what makes fixing a parameter (`fixed={"E": 1.69}`) and reading bootstrap
samples in public units simple. Start grids are given in public units and moved a hair inside
the bounds (`START_MARGIN`), since a start exactly on a bound is an infinite internal value.

Every law returns the *log* of its prediction (`Law.log_predict(theta, logX)`, internal
parameters), because fits minimise a Huber loss of log residuals. The formula itself
(`Law.log_form`) receives the parameters as the fast path wants them: the log of each parameter
flagged in `log_params` (for an `exp` transform that log is the internal coordinate itself, no
work), the public value of the others. Sums of power laws are evaluated as log-sum-exp in log
space, which is exact where a direct `A * N**-alpha` would overflow or lose precision at 1e22 FLOPs.

Users add laws with `register_law` (a prediction function of named columns, parameter names,
bounds and a start grid); the CLI's `--law` and the report list whatever is registered.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.enums import BoundPosition, LawName, NParams, TransformKind
from analysis.laws import moe_forms, repeated
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
    """log(sum(exp(t))) over broadcastable terms, stable and fast (see `_log_near_one`).

    On numpy values (no jax array or tracer among the terms) it is computed by numpy, so a
    built-in law evaluates a prediction on the host without compiling anything."""
    if not any(isinstance(t, jax.Array) for t in terms):
        terms = np.broadcast_arrays(*terms)
        m = terms[0]
        for t in terms[1:]:
            m = np.maximum(m, t)
        return m + np.log(sum(np.exp(t - m) for t in terms))
    terms = jnp.broadcast_arrays(*terms)
    m = terms[0]
    for t in terms[1:]:
        m = jnp.maximum(m, t)
    m = jax.lax.stop_gradient(m)
    return m + _log_near_one(sum(jnp.exp(t - m) for t in terms))


START_MARGIN = 1e-3  # grid starts on a bound move this fraction of the interval inside it
KNEE_FRACTION = 0.05  # an interval's soft clamp is the identity except within this fraction of each end
NEAR_BOUND_FRACTION = 0.01  # a fitted value this close to a bound (fraction of the interval) is flagged
# On a half-line to +inf a value this large is running off to it (law parameters are O(1e-3..1e5);
# the scale constants fitted on the shared data are <= ~1e4; a generic power law of x ~ 1e20 may
# reach ~1e10)
RUNAWAY_VALUE = 1e15


@dataclass(frozen=True)
class Transform:
    """Internal coordinate t -> public parameter p, with p inside (lo, hi) for every finite t.

    `kind` (`TransformKind`): identity (unbounded), exp (0, inf), lower lo + exp(t), upper
    hi - exp(t), interval the soft clamp (identity inside, exponential tails; see the module
    docstring).
    Chosen from the bounds by `for_bounds`.
    """

    kind: TransformKind
    lo: float = -math.inf
    hi: float = math.inf

    @classmethod
    def for_bounds(cls, lo: float, hi: float) -> "Transform":
        lo, hi = float(lo), float(hi)
        if math.isnan(lo) or math.isnan(hi) or not lo < hi:
            raise AnalysisError(f"bounds ({lo}, {hi}) must satisfy lo < hi")
        if math.isfinite(lo) and math.isfinite(hi):
            return cls(TransformKind.INTERVAL, lo, hi)
        if math.isfinite(lo):
            return cls(TransformKind.EXP if lo == 0.0 else TransformKind.LOWER, lo, hi)
        if math.isfinite(hi):
            return cls(TransformKind.UPPER, lo, hi)
        return cls(TransformKind.IDENTITY, lo, hi)

    def public(self, t, mod=np):
        """p(t) on numpy (mod=np) or jax (mod=jnp) arrays."""
        if self.kind == TransformKind.IDENTITY:
            return t
        if self.kind == TransformKind.EXP:
            return mod.exp(t)
        if self.kind == TransformKind.LOWER:
            return self.lo + mod.exp(t)
        if self.kind == TransformKind.UPPER:
            return self.hi - mod.exp(t)
        k, a, b = self.knee, self.lo + self.knee, self.hi - self.knee
        # tails on clamped arguments: the branch `where` drops never overflows (no NaN gradient),
        # and the interior is `t` itself, bit for bit
        lower = self.lo + k * mod.exp((mod.minimum(t, a) - a) / k)
        upper = self.hi - k * mod.exp((b - mod.maximum(t, b)) / k)
        return mod.where(t < a, lower, mod.where(t > b, upper, t))

    @property
    def knee(self) -> float:
        return KNEE_FRACTION * (self.hi - self.lo)

    def log_public(self, t, mod=np):
        """log p(t): the internal coordinate itself for `exp` (the fast path), else log of p."""
        return t if self.kind == TransformKind.EXP else mod.log(self.public(t, mod))

    def internal(self, p: np.ndarray) -> np.ndarray:
        """t(p); +-inf on a bound, NaN outside the bounds."""
        p = np.asarray(p, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.kind == TransformKind.IDENTITY:
                return p
            if self.kind == TransformKind.EXP:
                return np.log(p)
            if self.kind == TransformKind.LOWER:
                return np.log(p - self.lo)
            if self.kind == TransformKind.UPPER:
                return np.log(self.hi - p)
            k, a, b = self.knee, self.lo + self.knee, self.hi - self.knee
            lower = a + k * np.log((p - self.lo) / k)
            upper = b - k * np.log((self.hi - p) / k)
            out = np.where(p < a, lower, np.where(p > b, upper, p))
            return np.where((p < self.lo) | (p > self.hi), np.nan, out)

    def inside(self, p: np.ndarray, margin: float = START_MARGIN) -> np.ndarray:
        """`p` moved inside the bounds so that a start on (or past) a bound has a finite internal
        value: clipped `margin` of the width inside an interval; on a half-line, whose scale is
        unknown, only values on or past the bound move, to `margin` * max(1, |bound|) inside."""
        p = np.asarray(p, dtype=float)
        if self.kind == TransformKind.INTERVAL:
            step = margin * (self.hi - self.lo)
            return np.clip(p, self.lo + step, self.hi - step)
        step = margin * max(1.0, abs(self.lo) if math.isfinite(self.lo) else abs(self.hi))
        p = np.where(p <= self.lo, self.lo + step, p)
        return np.where(p >= self.hi, self.hi - step, p)


@dataclass(frozen=True, eq=False)
class Law:
    """One functional form. `log_form(view, logX)`: a tuple of parameters (the log of those in
    `log_params`, the public value of the others) and a tuple of log inputs (in `inputs` order)
    -> log of the predicted target. `grid(logX, logy)` -> (S, P) public starts. Each parameter's
    `bounds` (lo, hi) pick its `Transform`, so a fit can never leave them."""

    name: str
    param_names: tuple[str, ...]
    inputs: tuple[str, ...]
    log_form: Callable
    log_params: tuple[bool, ...]
    grid: Callable[[tuple, np.ndarray], np.ndarray]
    bounds: tuple[tuple[float, float], ...]
    formula: str
    description: str = ""
    min_distinct: Mapping[str, int] = field(default_factory=dict)
    # which parameter count N a fit uses unless told (`--n-params`)
    default_n_params: NParams = NParams.TOTAL
    # `log_form` evaluates numpy inputs with numpy alone (arithmetic and `logsumexp`, as the
    # built-in laws): `predict` then runs on the host; other laws' predictions run compiled
    numpy_form: bool = False
    # the input whose distance beyond the fitted runs the forward-chaining folds and prediction
    # intervals measure (None: C when the runs have it, else the law's first input); the MoE laws
    # extrapolate in N at the expert counts they were fitted on
    scale: str | None = None

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    @cached_property
    def transforms(self) -> tuple[Transform, ...]:
        return tuple(Transform.for_bounds(lo, hi) for lo, hi in self.bounds)

    def to_public(self, theta_xP):
        """Internal -> public parameters (numpy or jax arrays, any leading axes)."""
        mod = jnp if isinstance(theta_xP, jax.Array) else np
        theta_xP = mod.asarray(theta_xP)
        with np.errstate(over="ignore"):
            cols = [tr.public(theta_xP[..., i], mod) for i, tr in enumerate(self.transforms)]
        return mod.stack(cols, axis=-1)

    def to_internal(self, public_xP) -> np.ndarray:
        """Public -> internal parameters; +-inf on a bound and NaN outside one."""
        public_xP = np.asarray(public_xP, dtype=float)
        cols = [tr.internal(public_xP[..., i]) for i, tr in enumerate(self.transforms)]
        return np.stack(cols, axis=-1)

    def internal_starts(self, public_SxP) -> np.ndarray:
        """Public start values -> internal starts, moved just inside the bounds (`START_MARGIN`)."""
        p = np.atleast_2d(np.asarray(public_SxP, dtype=float))
        inside = np.stack([tr.inside(p[:, i]) for i, tr in enumerate(self.transforms)], axis=-1)
        return self.to_internal(inside)

    def starts(self, logX: tuple, logy: np.ndarray) -> np.ndarray:
        """The law's default internal starts for data (logX, logy)."""
        return self.internal_starts(self.grid(logX, logy))

    def view(self, theta_P) -> tuple:
        """What `log_form` receives for internal parameters `theta_P` (jax, last axis P)."""
        return tuple(
            tr.log_public(theta_P[..., i], jnp) if lg else tr.public(theta_P[..., i], jnp)
            for i, (tr, lg) in enumerate(zip(self.transforms, self.log_params))
        )

    def log_predict(self, theta_P, logX):
        """Log prediction from internal parameters (the fit's objective calls this)."""
        return self.log_form(self.view(theta_P), logX)

    def predict(self, public_P, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted target (linear scale) at the given inputs, from public parameters (evaluated
        from the public values directly, so values on a bound predict too)."""
        pub = np.asarray(public_P, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            view = tuple(np.log(pub[..., i]) if lg else pub[..., i] for i, lg in enumerate(self.log_params))
        logX = tuple(np.log(np.asarray(inputs[k], dtype=float)) for k in self.inputs)
        if self.numpy_form:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return np.exp(np.asarray(self.log_form(view, logX), dtype=float))
        with jax.enable_x64(True):
            out = self._compiled_form(
                tuple(jnp.asarray(v) for v in view), tuple(jnp.asarray(v) for v in logX)
            )
            return np.exp(np.asarray(out))

    @cached_property
    def _compiled_form(self) -> Callable:
        """`log_form` compiled once per input shape (eager jnp would compile every op)."""
        return jax.jit(self.log_form)

    def check_value(self, name: str, value: float) -> None:
        """A one-line error unless `value` lies strictly inside parameter `name`'s bounds."""
        lo, hi = self.bounds[self.param_names.index(name)]
        if not lo < value < hi:
            raise AnalysisError(
                f"{name}={value:g} is outside the bounds ({lo:g}, {hi:g}) that law {self.name} "
                f"enforces; choose a value strictly inside them"
            )


@dataclass(frozen=True)
class BoundNote:
    """A fitted parameter at or near one of its bounds (`where`: at, near, or its CI reaching it)."""

    name: str
    value: float
    bound: float
    where: BoundPosition
    lo: float
    hi: float

    @property
    def message(self) -> str:
        what = {
            BoundPosition.AT: "sits at",
            BoundPosition.NEAR: "is within {:.0%} of the interval from".format(NEAR_BOUND_FRACTION),
            BoundPosition.CI: "has a CI reaching",
        }[self.where]
        return (
            f"law parameter {self.name} = {self.value:.4g} {what} its bound {self.bound:g} (bounds "
            f"({self.lo:g}, {self.hi:g})): the data barely determine it; treat the law and its "
            "allocation with care"
        )


def bound_notes(
    law: Law,
    params: Mapping[str, float],
    ci: Mapping[str, Sequence[float]] | None = None,
    fixed: Sequence[str] = (),
    frac: float = NEAR_BOUND_FRACTION,
) -> list[BoundNote]:
    """Free parameters at or near a bound. On an interval: within `frac` of its width (point
    estimate or a CI end). On a half-line (no width): at the bound to round-off, or a CI whose
    near end lies within `frac` of the way from the bound to the estimate (the bootstrap piles
    up against the bound). Parameters in `fixed` are the user's choice and never flagged."""
    out = []
    for name, (lo, hi) in zip(law.param_names, law.bounds):
        if name in fixed or name not in params:
            continue
        v = float(params[name])
        ci_lo, ci_hi = (ci or {}).get(name, (math.nan, math.nan))
        if not math.isfinite(hi) and abs(v) >= RUNAWAY_VALUE:
            # no finite bound is near, the estimate ran off towards +inf (a decay constant the
            # data never test, e.g. R_N without excess-parameter runs)
            out.append(BoundNote(name, v, hi, BoundPosition.AT, lo, hi))
            continue
        for bound, sign in ((lo, 1.0), (hi, -1.0)):
            if not math.isfinite(bound):
                continue
            other = hi if sign > 0 else lo
            near_end = ci_lo if sign > 0 else ci_hi
            gap = sign * (v - bound)
            if math.isfinite(other):
                width = other - bound
                where = (
                    BoundPosition.AT
                    if gap <= 1e-6 * abs(width)
                    else BoundPosition.NEAR
                    if gap <= frac * abs(width)
                    else BoundPosition.CI
                    if math.isfinite(near_end) and sign * (near_end - bound) <= frac * abs(width)
                    else None
                )
            else:
                tiny = 1e-6 * max(1.0, abs(bound))
                # measured against the estimate, not the CI's far end: a scale parameter whose CI
                # spans decades (B in [3e3, 4e5]) is poorly determined but nowhere near 0
                ci_gap = sign * (near_end - bound) if math.isfinite(near_end) else math.nan
                where = (
                    BoundPosition.AT if gap <= tiny else BoundPosition.CI if ci_gap <= frac * gap else None
                )
            if where:
                out.append(BoundNote(name, v, bound, where, lo, hi))
                break
    return out


_REGISTRY: dict[str, Law] = {}


def register(law: Law, *, replace: bool = False) -> Law:
    """Add a `Law` object to the registry (see `register_law` for the friendly form)."""
    if law.name in _REGISTRY and not replace:
        raise AnalysisError(
            f"a law named {law.name!r} is already registered; pass replace=True to override it"
        )
    if not (len(law.param_names) == len(law.log_params) == len(law.bounds)):
        raise AnalysisError(f"law {law.name!r}: param_names, log_params and bounds must have the same length")
    for name, (lo, hi), lg in zip(law.param_names, law.bounds, law.log_params):
        try:
            Transform.for_bounds(lo, hi)
        except AnalysisError as e:
            raise AnalysisError(f"law {law.name!r}, parameter {name}: {e}") from None
        if lg and not lo >= 0:
            raise AnalysisError(
                f"law {law.name!r}: {name} is used as a log, so its lower bound must be >= 0 (got {lo})"
            )
    if law.default_n_params not in tuple(NParams):
        raise AnalysisError(
            f"law {law.name!r}: default_n_params must be one of {', '.join(NParams)}, "
            f"not {law.default_n_params!r}"
        )
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
    default_n_params: NParams | str = NParams.TOTAL,
    protocols: Sequence[str] = (),
) -> Law:
    """Register a user law: `predict(p, cols) -> prediction` with `p` a dict of parameter name ->
    scalar and `cols` a dict of input column -> array (linear scale, jax arrays; use `jnp`).

    `grid` is either a dict name -> candidate start values (public scale; the full product is
    used) or an array (S, P) of public starts. Parameters listed in `positive` stay > 0 (lower
    bound 0; optimised as logs). `bounds` name -> (lo, hi) are enforced by construction too
    (see `Transform`): a fit never leaves them. `default_n_params` (`NParams`: total or non_embedding)
    is the parameter count N the law is fitted on unless `--n-params` says otherwise. The law
    becomes a point method of `analysis.methods()`; with `protocols=("budget",)` (a law of N and D)
    it is one of `fit --law auto`'s candidates too. Example::

        register_law("inverse_sqrt", lambda p, c: p["E"] + p["A"] / jnp.sqrt(c["N"]),
                     ["E", "A"], ["N"], {"E": [1, 2], "A": [10, 1000]}, positive=["E", "A"])
    """
    param_names = tuple(param_names)
    inputs = tuple(inputs)
    unknown = (set(positive) | set(bounds or {})) - set(param_names)
    if unknown:
        raise AnalysisError(f"positive/bounds names {sorted(unknown)} are not parameters of {name!r}")
    public_grid = _public_grid(name, grid, param_names)
    law_bounds = []
    for p in param_names:
        lo, hi = (float(v) for v in (bounds or {}).get(p, (-np.inf, np.inf)))
        law_bounds.append((max(lo, 0.0), hi) if p in positive else (lo, hi))

    def log_form(view, logX):
        p = dict(zip(param_names, view))
        cols = {k: jnp.exp(v) for k, v in zip(inputs, logX)}
        return jnp.log(predict(p, cols))

    law = Law(
        name=name,
        param_names=param_names,
        inputs=inputs,
        log_params=(False,) * len(param_names),
        bounds=tuple(law_bounds),
        formula=formula or f"user law {name}",
        description=description,
        min_distinct={k: 2 for k in inputs},
        log_form=log_form,
        grid=lambda logX, logy: public_grid,
        default_n_params=default_n_params,
    )
    register(law, replace=replace)
    USER_LAWS[name] = tuple(protocols)
    for listener in ON_REGISTER:  # analysis.laws.methods: the method registry lists it too
        listener(name, tuple(protocols))
    return law


# the laws `register_law` added (name -> protocols), and who to tell of each new one:
# analysis.laws.methods makes each a point method, those registered before it loaded included
USER_LAWS: dict[str, tuple[str, ...]] = {}
ON_REGISTER: list[Callable[[str, tuple[str, ...]], object]] = []


def _public_grid(name: str, grid, param_names: tuple[str, ...]) -> np.ndarray:
    """(S, P) public starts from a dict of per-parameter values (full product) or an array."""
    if isinstance(grid, Mapping):
        missing = [p for p in param_names if p not in grid]
        if missing:
            raise AnalysisError(f"grid for law {name!r} lacks start values for {missing}")
        return np.array(list(itertools.product(*(grid[p] for p in param_names))), dtype=float)
    public_grid = np.atleast_2d(np.asarray(grid, dtype=float))
    if public_grid.shape[1] != len(param_names):
        raise AnalysisError(f"grid for law {name!r} must have {len(param_names)} columns")
    return public_grid


def get_law(name: str) -> Law:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AnalysisError(f"unknown law {name!r}; known laws: {', '.join(known_laws())}") from None


def known_laws() -> list[str]:
    """Registered law names, sorted (plain strings, the built-in `LawName`s among them)."""
    return sorted(str(k) for k in _REGISTRY)


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
# The same starts in public units (E, A, B = exp(e, a, b)); alpha, beta = 0 starts are moved
# START_MARGIN inside their bound by `Law.internal_starts`.
CHINCHILLA_PUBLIC_GRID = np.column_stack([np.exp(CHINCHILLA_GRID[:, :3]), CHINCHILLA_GRID[:, 3:]])


def _chinchilla(view, logX):
    e, a, b, alpha, beta = view  # e, a, b: logs of E, A, B (exp transforms: the internal values)
    logN, logD = logX
    return logsumexp(a - alpha * logN, b - beta * logD, e)


register(
    Law(
        name=LawName.CHINCHILLA,
        param_names=("E", "A", "B", "alpha", "beta"),
        inputs=("N", "D"),
        log_form=_chinchilla,
        log_params=(True, True, True, False, False),
        grid=lambda logX, logy: CHINCHILLA_PUBLIC_GRID,
        bounds=((0.0, np.inf), (0.0, np.inf), (0.0, np.inf), (0.0, 3.0), (0.0, 3.0)),
        formula="L(N, D) = E + A / N^alpha + B / D^beta",
        description="Hoffmann et al. 2022 (Approach 3), fitted as Besiroglu et al. 2024 did.",
        min_distinct={"N": 2, "D": 2},
        numpy_form=True,
    )
)


def _chinchilla_tied(view, logX):
    e, a, b, alpha = view
    logN, logD = logX
    return logsumexp(a - alpha * logN, b - alpha * logD, e)


# Epoch's grid with one shared exponent (900 starts).
TIED_PUBLIC_GRID = np.unique(CHINCHILLA_PUBLIC_GRID[:, :4], axis=0)

register(
    Law(
        name=LawName.CHINCHILLA_TIED,
        param_names=("E", "A", "B", "alpha"),
        inputs=("N", "D"),
        log_form=_chinchilla_tied,
        log_params=(True, True, True, False),
        grid=lambda logX, logy: TIED_PUBLIC_GRID,
        bounds=((0.0, np.inf), (0.0, np.inf), (0.0, np.inf), (0.0, 3.0)),
        formula="L(N, D) = E + A / N^alpha + B / D^alpha",
        description="Chinchilla form with one exponent for N and D (alpha = beta), the form Gadre et al. "
        "2024 fit for over-training laws: one fewer parameter, and tokens per parameter at "
        "the optimum independent of the budget.",
        min_distinct={"N": 2, "D": 2},
        numpy_form=True,
    )
)


def _data_constrained(view, logX):
    """Muennighoff et al. 2023 eq. 5 in logs (analysis/laws/repeated.py): Chinchilla's terms in
    the effective parameters N' and effective data D'."""
    e, a, b, alpha, beta, r_d, r_n = view
    logN, logD, logU = logX
    log_dp = repeated.log_effective(logU, logD, r_d)
    log_un = _minimum(logN, repeated.log_n_opt(a, b, alpha, beta, logU))
    log_np = repeated.log_effective(log_un, logN, r_n)
    return logsumexp(a - alpha * log_np, b - beta * log_dp, e)


def _data_constrained_d(view, logX):
    """Only repeated data decays (R_D*): for ladders without models beyond N_opt(U)."""
    e, a, b, alpha, beta, r_d = view
    logN, logD, logU = logX
    return logsumexp(a - alpha * logN, b - beta * repeated.log_effective(logU, logD, r_d), e)


def _minimum(x, y):
    return jnp.minimum(x, y) if isinstance(x, jax.Array) or isinstance(y, jax.Array) else np.minimum(x, y)


# Starts: a coarser Chinchilla grid (972 of Epoch's 4,500 points) x the decay constants over the
# range the paper's fits and ours span (R* 3 .. 60; Muennighoff et al.: R_D* 15.4, R_N* 5.3)
_DC_CHINCHILLA = np.array(
    [
        (np.exp(e), np.exp(a), np.exp(b), al, be)
        for e in (-1.0, 0.0, 1.0)
        for a in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
        for b in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
        for al in (0.2, 0.5, 1.0)
        for be in (0.2, 0.5, 1.0)
    ]
)
_R_STARTS = (3.0, 15.0, 60.0)
DC_D_GRID = np.array([(*row, r) for row in _DC_CHINCHILLA for r in _R_STARTS])
# R_N paired with R_D (3x fewer starts than their product; the fits above converge the same)
DC_GRID = np.array([(*row, rd, rn) for row in _DC_CHINCHILLA for rd, rn in zip(_R_STARTS, (2.0, 6.0, 20.0))])
_DC_BOUNDS = ((0.0, np.inf), (0.0, np.inf), (0.0, np.inf), (0.0, 3.0), (0.0, 3.0))

register(
    Law(
        name=LawName.DATA_CONSTRAINED,
        param_names=("E", "A", "B", "alpha", "beta", "R_D", "R_N"),
        inputs=("N", "D", "U"),
        log_form=_data_constrained,
        log_params=(True, True, True, False, False, False, False),
        grid=lambda logX, logy: DC_GRID,
        bounds=(*_DC_BOUNDS, (0.0, np.inf), (0.0, np.inf)),
        formula="L = E + A / N'^alpha + B / D'^beta, D' = U + U R_D (1 - e^(-R/R_D)), R = D/U - 1; "
        "N' likewise with U_N = min(N, N_opt(U)) and R_N",
        description="Muennighoff et al. 2023 (eq. 5): repeated tokens and excess parameters decay in value.",
        min_distinct={"N": 2, "D": 2},
        numpy_form=True,
    )
)
register(
    Law(
        name=LawName.DATA_CONSTRAINED_D,
        param_names=("E", "A", "B", "alpha", "beta", "R_D"),
        inputs=("N", "D", "U"),
        log_form=_data_constrained_d,
        log_params=(True, True, True, False, False, False),
        grid=lambda logX, logy: DC_D_GRID,
        bounds=(*_DC_BOUNDS, (0.0, np.inf)),
        formula="L = E + A / N^alpha + B / D'^beta, D' = U + U R_D (1 - e^(-R/R_D)), R = D/U - 1",
        description="Muennighoff et al. 2023's effective data alone (no excess-parameter term).",
        min_distinct={"N": 2, "D": 2},
        numpy_form=True,
    )
)


# ---- mixture of experts (analysis/laws/moe_forms.py; `fit --law moe` chooses among them) ----------
_MOE_INPUTS = ("N", "experts")
_MOE_D_INPUTS = ("N", "experts", "D")
_FREE = (-np.inf, np.inf)
_CLARK_E = ((0.0, moe_forms.E_SPLIT), (moe_forms.E_SPLIT, np.inf))  # E_start < E_SPLIT < E_max
_MOE_COMMON = dict(default_n_params=NParams.ACTIVE, numpy_form=True, scale="N")
_BILINEAR = "log L = d + a x + b ln E + c x ln E, x = ln(N / 1e9)"
_CLARK = (
    "log L = d + a x + b ln Ê + c x ln Ê, x = ln(N / 1e9), "
    "1/Ê = 1/(E - 1 + (1/E_start - 1/E_max)^-1) + 1/E_max"
)
_JOINT_N = "L = c + A Ê^delta (N/1e9)^-(alpha + gamma ln Ê), Ê as moe_clark's"
for _law in (
    Law(
        name=LawName.MOE_BILINEAR,
        param_names=("d", "a", "b", "c"),
        inputs=_MOE_INPUTS,
        log_form=moe_forms.bilinear,
        log_params=(False,) * 4,
        grid=moe_forms.bilinear_grid,
        bounds=(_FREE,) * 4,
        formula=_BILINEAR,
        description="Log-bilinear in (ln N, ln E): the MoE baseline (fixed-token ladders).",
        min_distinct={"N": 2, "experts": 2},
        **_MOE_COMMON,
    ),
    Law(
        name=LawName.MOE_CLARK,
        param_names=("d", "a", "b", "c", "E_start", "E_max"),
        inputs=_MOE_INPUTS,
        log_form=moe_forms.clark,
        log_params=(False,) * 6,
        grid=moe_forms.clark_grid,
        bounds=(_FREE,) * 4 + _CLARK_E,
        formula=_CLARK,
        description="Clark et al. 2022 (Unified Scaling Laws for Routed Language Models, eq. 7-8): "
        "log-bilinear in N and the saturating expert count Ê (fixed-token ladders).",
        min_distinct={"N": 2, "experts": 4},
        **_MOE_COMMON,
    ),
    Law(
        name=LawName.MOE_JOINT_N,
        param_names=("c", "A", "alpha", "gamma", "delta", "E_start", "E_max"),
        inputs=_MOE_INPUTS,
        log_form=moe_forms.joint_n,
        log_params=(True, True, False, False, False, False, False),
        grid=moe_forms.joint_n_grid,
        bounds=((0.0, np.inf), (0.0, np.inf), (0.0, 3.0), (-1.0, 1.0), (-3.0, 3.0)) + _CLARK_E,
        formula=_JOINT_N,
        description="Ludziejewski et al. 2025's joint MoE law at one token count: an irreducible loss "
        "and a power law in N whose coefficient and exponent move with ln Ê (Clark et al.'s Ê).",
        min_distinct={"N": 3, "experts": 4},
        **_MOE_COMMON,
    ),
    Law(
        name=LawName.MOE_BILINEAR_D,
        param_names=("d", "a", "b", "c", "e"),
        inputs=_MOE_D_INPUTS,
        log_form=moe_forms.bilinear_d,
        log_params=(False,) * 5,
        grid=moe_forms.bilinear_d_grid,
        bounds=(_FREE,) * 5,
        formula=_BILINEAR + " + e ln(D / 1e10)",
        description="Log-bilinear in (ln N, ln E) plus a log-linear token term: the MoE baseline of "
        "(N, D, E) ladders.",
        min_distinct={"N": 2, "experts": 2, "D": 2},
        **_MOE_COMMON,
    ),
    Law(
        name=LawName.MOE_JOINT,
        param_names=("c", "A", "alpha", "gamma", "delta", "B", "beta", "zeta", "omega", "E_start", "E_max"),
        inputs=_MOE_D_INPUTS,
        log_form=moe_forms.joint,
        log_params=(True, True, False, False, False, True, False, False, False, False, False),
        grid=moe_forms.joint_grid,
        bounds=(
            (0.0, np.inf),
            (0.0, np.inf),
            (0.0, 3.0),
            (-1.0, 1.0),
            (-3.0, 3.0),
            (0.0, np.inf),
            (0.0, 3.0),
            (-1.0, 1.0),
            (-3.0, 3.0),
            *_CLARK_E,
        ),
        formula=_JOINT_N + " + B Ê^omega (D/1e10)^-(beta + zeta ln Ê)",
        description="Ludziejewski et al. 2025 (Joint MoE Scaling Laws) with Clark et al.'s Ê: "
        "Chinchilla's two power laws whose coefficients and exponents move with ln Ê.",
        min_distinct={"N": 3, "experts": 4, "D": 2},
        **_MOE_COMMON,
    ),
):
    register(_law)
