"""Batched L-BFGS in pure JAX: many independent starts minimised in one vectorised loop.

Why not SciPy: a scaling-law fit wants the best of thousands of starts (and then the same again
for every bootstrap resample). SciPy's L-BFGS-B runs one start at a time in Python; here every
start advances in lock-step inside one `jax.lax.while_loop` under `jax.vmap`, with exact
gradients from autodiff.

Why a hand-written loop rather than `optax.lbfgs`: under `vmap` a nested line-search loop runs
as long as its slowest member on every outer step. Here each loop iteration performs exactly one
function-and-gradient evaluation per start; whether that evaluation is a line-search trial or an
accepted step is per-start state. On top of that, `minimize_batch` runs the loop in rounds and
drops finished starts between rounds (compaction), so the batch pays for the evaluations each
start needs rather than for those of the slowest start. Measured (benchmarks/fit_speed.py,
docs/fit.md "The fitting engine"): vmapped `optax.lbfgs` with the same objective and tests
is 56-86x slower on Epoch's grid and bootstrap and needs twice the evaluations.

The command line pays for tracing: `minimize_batch` starts need no program of their own
(`fresh_state`), its host bookkeeping is numpy (no eager JAX op, each of which would be one
more program per process), and a round's length is a traced argument, so a caller that keeps
one width and one argument signature (as a point-law fit does) loads one program per precision.
A caller that names its objective (`program_key`) gets that program kept whole across processes
(`models.base.programs`): the next command line neither traces nor lowers it. Batches of more
than the width are drained by one host thread per core, on the same program.

The algorithm per start: L-BFGS two-loop recursion (memory `m`) with a weak-Wolfe line search
(bracketing: Armijo failure shrinks by safeguarded quadratic interpolation, curvature failure
expands by 4x), so every accepted pair has s.y > 0 even on the flat, nearly piecewise-linear
Huber objectives; a restart along -g when the line search collapses. Stopping: the infinity norm
of the gradient below `gtol`, or the relative decrease of f on an accepted step below `ftol`
(scaled by |f| itself, never by max(|f|, 1): the Huber objectives here are ~1e-3, and a
`max(|f|, 1)` rule is how the original Chinchilla fit stopped early), or the line search cannot
decrease f any more (round-off floor at the optimum), or `max_evals`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import pathlib
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from analysis.core.enums import FitStatus
from models.base import programs

# Status codes (per start), readable by users through the fit's convergence report.
RUNNING, CONVERGED_GTOL, CONVERGED_FTOL, STALLED, MAX_EVALS = 0, 1, 2, 3, 4
STATUS_NAMES = {
    RUNNING: FitStatus.RUNNING,
    CONVERGED_GTOL: FitStatus.GTOL,
    CONVERGED_FTOL: FitStatus.FTOL,
    STALLED: FitStatus.STALLED,
    MAX_EVALS: FitStatus.MAX_EVALS,
}
CONVERGED_CODES = (CONVERGED_GTOL, CONVERGED_FTOL, STALLED)


@dataclass(frozen=True)
class LBFGSConfig:
    """Tolerances of one minimisation phase (hashable: part of the jit cache key)."""

    memory: int = 10
    max_evals: int = 2000
    gtol: float = 1e-10
    ftol: float = 1e-14
    c1: float = 1e-4
    c2: float = 0.9
    max_ls: int = 40  # trials per line search before taking the best Armijo point (or restarting)


class State(NamedTuple):
    x: jax.Array  # accepted point (P,)
    f: jax.Array  # f(x)
    g: jax.Array  # grad f(x) (P,)
    d: jax.Array  # search direction (P,)
    gd: jax.Array  # g . d (< 0)
    t: jax.Array  # current trial step
    lo: jax.Array  # largest step known to satisfy Armijo but not curvature (0 = none)
    hi: jax.Array  # smallest step known to fail Armijo (inf = none)
    f_lo: jax.Array
    g_lo: jax.Array
    f_hi: jax.Array
    ls_n: jax.Array  # trials in the current line search
    S_MxP: jax.Array  # step history, slot 0 newest
    Y_MxP: jax.Array  # gradient-change history
    rho_M: jax.Array  # 1 / (s . y); 0 marks an empty slot
    n_eval: jax.Array
    n_iter: jax.Array  # accepted steps
    status: jax.Array


class MinimizeResult(NamedTuple):
    """Per-start results; the leading axis is the batch axis."""

    x: np.ndarray
    f: np.ndarray
    grad_norm: np.ndarray  # infinity norm of the gradient at x
    status: np.ndarray
    n_iter: np.ndarray
    n_eval: np.ndarray


def _two_loop(g, S_MxP, Y_MxP, rho_M):
    """H @ g by the L-BFGS two-loop recursion (slot 0 newest; empty slots have rho = 0)."""
    m = S_MxP.shape[0]

    def first(i, carry):
        q, alpha_M = carry
        a = rho_M[i] * jnp.dot(S_MxP[i], q)
        return q - a * Y_MxP[i], alpha_M.at[i].set(a)

    q, alpha_M = jax.lax.fori_loop(0, m, first, (g, jnp.zeros_like(rho_M)))
    sy, yy = jnp.dot(S_MxP[0], Y_MxP[0]), jnp.dot(Y_MxP[0], Y_MxP[0])
    gamma = jnp.where((rho_M[0] > 0) & (yy > 0), sy / jnp.where(yy > 0, yy, 1.0), 1.0)

    def second(j, r):
        i = m - 1 - j
        b = rho_M[i] * jnp.dot(Y_MxP[i], r)
        return r + S_MxP[i] * (alpha_M[i] - b)

    return jax.lax.fori_loop(0, m, second, gamma * q)


def _safe_vg(fun, x, args):
    f, g = jax.value_and_grad(fun)(x, *args)
    finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(g))
    return jnp.where(finite, f, jnp.inf), jnp.where(finite, g, 0.0), finite


def _first_step(g):
    return jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(g), 1e-300))


def init_state(fun: Callable, x0: jax.Array, args: tuple, cfg: LBFGSConfig) -> State:
    """Evaluate the start and set up a steepest-descent first line search."""
    f0, g0, finite = _safe_vg(fun, x0, args)
    dtype, P = x0.dtype, x0.shape[0]
    status = jnp.where(~finite, STALLED, jnp.where(jnp.max(jnp.abs(g0)) <= cfg.gtol, CONVERGED_GTOL, RUNNING))
    zero = jnp.zeros((), dtype)
    return State(
        x=x0,
        f=f0,
        g=g0,
        d=-g0,
        gd=-jnp.dot(g0, g0),
        t=_first_step(g0).astype(dtype),
        lo=zero,
        hi=jnp.asarray(jnp.inf, dtype),
        f_lo=f0,
        g_lo=g0,
        f_hi=jnp.asarray(jnp.inf, dtype),
        ls_n=jnp.asarray(0),
        S_MxP=jnp.zeros((cfg.memory, P), dtype),
        Y_MxP=jnp.zeros((cfg.memory, P), dtype),
        rho_M=jnp.zeros((cfg.memory,), dtype),
        n_eval=jnp.asarray(1),
        n_iter=jnp.asarray(0),
        status=jnp.asarray(status),
    )


class _Bracket(NamedTuple):
    """The line search's bracket after one trial: [lo, hi] with f (and g) at its ends."""

    lo: jax.Array
    hi: jax.Array
    f_lo: jax.Array
    f_hi: jax.Array
    g_lo: jax.Array
    t_next: jax.Array  # the next trial step if the search goes on
    collapsed: jax.Array  # the bracket is too narrow (or too many trials): stop searching


def _update_bracket(st: State, cfg: LBFGSConfig, ft, gt, armijo, curvature, ls_n) -> _Bracket:
    """Shrink or grow the bracket after a rejected trial and pick the next trial step:
    safeguarded quadratic interpolation on [lo, hi] (f, slope at lo; f at hi), else bisection;
    without an upper end yet, extrapolate 4x."""
    hi = jnp.where(~armijo, st.t, st.hi)
    f_hi = jnp.where(~armijo, ft, st.f_hi)
    grow = armijo & ~curvature
    lo = jnp.where(grow, st.t, st.lo)
    f_lo = jnp.where(grow, ft, st.f_lo)
    g_lo = jnp.where(grow, gt, st.g_lo)
    slope_lo = jnp.where(lo > 0, jnp.dot(g_lo, st.d), st.gd)
    width = hi - lo
    denom = 2.0 * (f_hi - f_lo - slope_lo * width)
    t_q = lo - slope_lo * width**2 / jnp.where(denom > 0, denom, 1.0)
    t_in = jnp.where(jnp.isfinite(f_hi) & (denom > 0), t_q, lo + 0.5 * width)
    t_in = jnp.clip(t_in, lo + 0.1 * width, lo + 0.5 * width)
    t_next = jnp.where(jnp.isfinite(hi), t_in, 4.0 * lo)
    collapsed = (
        jnp.isfinite(hi)
        & (width * jnp.sqrt(jnp.dot(st.d, st.d)) <= 1e-15 * (1.0 + jnp.sqrt(jnp.dot(st.x, st.x))))
    ) | (ls_n >= cfg.max_ls)
    return _Bracket(lo, hi, f_lo, f_hi, g_lo, t_next, collapsed)


def _next_direction(st: State, x_new, g_new):
    """Push the accepted (s, y) pair into the memory when it has positive curvature, then the new
    quasi-Newton direction (steepest descent when that is not a descent direction) and its
    first trial step. Returns (S, Y, rho, d, gd, t)."""
    s, y = x_new - st.x, g_new - st.g
    sy = jnp.dot(s, y)
    good_pair = sy > 1e-12 * jnp.sqrt(jnp.dot(s, s) * jnp.dot(y, y))
    S_new = jnp.where(good_pair, jnp.roll(st.S_MxP, 1, axis=0).at[0].set(s), st.S_MxP)
    Y_new = jnp.where(good_pair, jnp.roll(st.Y_MxP, 1, axis=0).at[0].set(y), st.Y_MxP)
    rho_new = jnp.where(
        good_pair, jnp.roll(st.rho_M, 1).at[0].set(1.0 / jnp.where(good_pair, sy, 1.0)), st.rho_M
    )
    d_new = -_two_loop(g_new, S_new, Y_new, rho_new)
    gd_new = jnp.dot(g_new, d_new)
    descent = gd_new < 0
    d_new = jnp.where(descent, d_new, -g_new)
    gd_new = jnp.where(descent, gd_new, -jnp.dot(g_new, g_new))
    rho_new = jnp.where(descent, rho_new, 0.0)
    t_new = jnp.where(descent & jnp.any(rho_new > 0), 1.0, _first_step(g_new))
    return S_new, Y_new, rho_new, d_new, gd_new, t_new


def _step(fun, args, cfg: LBFGSConfig, st: State) -> State:
    """One function+gradient evaluation: a line-search trial, possibly completing an iteration."""
    xt = st.x + st.t * st.d
    ft, gt, finite = _safe_vg(fun, xt, args)
    armijo = finite & (ft <= st.f + cfg.c1 * st.t * st.gd)
    curvature = jnp.dot(gt, st.d) >= cfg.c2 * st.gd
    ls_n = st.ls_n + 1
    accept_trial = armijo & curvature
    br = _update_bracket(st, cfg, ft, gt, armijo, curvature, ls_n)
    # A line search that collapses takes its best Armijo point if it has one. A fresh state's
    # trial is its start (`fresh_state`): rejected (f not finite there), there is nothing to search.
    collapsed = br.collapsed | (st.n_eval == 0)
    accept_lo = ~accept_trial & collapsed & (br.lo > 0)
    give_up = ~accept_trial & collapsed & (br.lo <= 0)
    take = accept_trial | accept_lo

    x_new = jnp.where(accept_trial, xt, st.x + br.lo * st.d)
    f_new = jnp.where(accept_trial, ft, br.f_lo)
    g_new = jnp.where(accept_trial, gt, br.g_lo)
    S_new, Y_new, rho_new, d_new, gd_new, t_new = _next_direction(st, x_new, g_new)
    conv_g = jnp.max(jnp.abs(g_new)) <= cfg.gtol
    conv_f = (st.f - f_new) <= cfg.ftol * jnp.abs(f_new)
    status_take = jnp.where(conv_g, CONVERGED_GTOL, jnp.where(conv_f, CONVERGED_FTOL, RUNNING))

    # Giving up on a quasi-Newton direction: restart along -g once; on -g itself: stalled.
    had_memory = jnp.any(st.rho_M > 0)
    restart = give_up & had_memory
    status = jnp.where(take, status_take, jnp.where(give_up & ~had_memory, STALLED, RUNNING))
    n_eval = st.n_eval + 1
    status = jnp.where((status == RUNNING) & (n_eval >= cfg.max_evals), MAX_EVALS, status)

    reset_ls = take | restart
    dtype = st.x.dtype
    inf = jnp.asarray(jnp.inf, dtype)
    return State(
        x=jnp.where(take, x_new, st.x),
        f=jnp.where(take, f_new, st.f),
        g=jnp.where(take, g_new, st.g),
        d=jnp.where(take, d_new, jnp.where(restart, -st.g, st.d)),
        gd=jnp.where(take, gd_new, jnp.where(restart, -jnp.dot(st.g, st.g), st.gd)),
        t=jnp.where(take, t_new, jnp.where(restart, _first_step(st.g), br.t_next)).astype(dtype),
        lo=jnp.where(reset_ls, 0.0, br.lo).astype(dtype),
        hi=jnp.where(reset_ls, inf, br.hi),
        f_lo=jnp.where(reset_ls, jnp.where(take, f_new, st.f), br.f_lo),
        g_lo=jnp.where(reset_ls, jnp.where(take, g_new, st.g), br.g_lo),
        f_hi=jnp.where(reset_ls, inf, br.f_hi),
        ls_n=jnp.where(reset_ls, 0, ls_n),
        S_MxP=jnp.where(take, S_new, jnp.where(restart, 0.0, st.S_MxP)),
        Y_MxP=jnp.where(take, Y_new, jnp.where(restart, 0.0, st.Y_MxP)),
        rho_M=jnp.where(take, rho_new, jnp.where(restart, 0.0, st.rho_M)),
        n_eval=n_eval,
        n_iter=st.n_iter + (take & (st.n_eval > 0)).astype(st.n_iter.dtype),  # see `fresh_state`
        status=status,
    )


def run(fun: Callable, st: State, args: tuple, cfg: LBFGSConfig, n_evals: int) -> State:
    """Advance one start by at most `n_evals` evaluations (or until it stops)."""

    def cond(carry):
        st, k = carry
        return (st.status == RUNNING) & (k < n_evals)

    def body(carry):
        st, k = carry
        return _step(fun, args, cfg, st), k + 1

    return jax.lax.while_loop(cond, body, (st, jnp.asarray(0)))[0]


def minimize(fun: Callable, x0: jax.Array, *args: Any, cfg: LBFGSConfig = LBFGSConfig()) -> State:
    """Minimise `fun(x, *args)` from one start (P,), to completion. Compose with `jax.vmap`."""
    return run(fun, init_state(fun, x0, args, cfg), args, cfg, cfg.max_evals)


def fresh_state(x0_SxP: np.ndarray, cfg: LBFGSConfig) -> State:
    """Host-side (numpy) states of starts that have not been evaluated yet, for `run`.

    The state is a line search along d = 0 from x0 with f = inf and trial step 0: the first
    evaluation of `_step` is then x0 itself, which always passes both Wolfe tests (f(x0) < inf,
    g.d = 0 = c2 gd) and is accepted as the first point; the pair (s = 0) is not stored, the
    direction becomes -g(x0) with the first step of `init_state`, and `n_eval == 0` marks that
    acceptance as no iteration. A non-finite f(x0) fails Armijo, and `_step` gives a rejected
    first trial up at once: STALLED after one evaluation, as `init_state` says. So after one
    evaluation the state is `init_state`'s, and starting needs no compiled program of its own
    (the round program does it)."""
    x0 = np.asarray(x0_SxP)
    dtype = jax.dtypes.canonicalize_dtype(x0.dtype)
    itype = jax.dtypes.canonicalize_dtype(np.int64)
    S, P = x0.shape

    def zeros(*shape, kind=dtype):
        return np.zeros((S, *shape), kind)

    def inf():
        return np.full(S, np.inf, dtype)

    return State(
        x=x0.astype(dtype),
        f=inf(),
        g=zeros(P),
        d=zeros(P),
        gd=zeros(),
        t=zeros(),
        lo=zeros(),
        hi=inf(),
        f_lo=inf(),
        g_lo=zeros(P),
        f_hi=inf(),
        ls_n=zeros(kind=itype),
        S_MxP=zeros(cfg.memory, P),
        Y_MxP=zeros(cfg.memory, P),
        rho_M=zeros(cfg.memory),
        n_eval=zeros(kind=itype),
        n_iter=zeros(kind=itype),
        status=np.full(S, RUNNING, itype),
    )


@lru_cache(maxsize=None)
def _mesh():
    """A 1-D mesh over the local devices: with several host devices each runs its own slots."""
    devices = jax.devices()
    return jax.make_mesh((len(devices),), ("b",), devices=devices) if len(devices) > 1 else None


def _round(fun, st, args, n_evals, cfg, batched_args, mesh):
    """One round: every slot advances by at most `n_evals` evaluations. `n_evals` is traced, so
    rounds of any length (the tail's longer ones too) reuse one compiled program per width."""
    axes = tuple(0 if b else None for b in batched_args)

    def local(st, n_evals, *args):
        # The loop runs over the batch with `_step` vmapped inside it: what vmapping `run` would
        # do (every slot steps while any runs, finished slots keep their state), traced once
        # rather than through the batching rule of a while loop, which traces its body anew.
        step = jax.vmap(lambda s, *a: _step(fun, a, cfg, s), in_axes=(0, *axes))

        def cond(carry):
            st, k = carry
            return jnp.any(st.status == RUNNING) & (k < n_evals)

        def body(carry):
            st, k = carry
            new, running = step(st, *args), st.status == RUNNING
            keep = jax.tree.map(
                lambda a, b: jnp.where(running.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, st
            )
            return keep, k + 1

        return jax.lax.while_loop(cond, body, (st, jnp.zeros((), n_evals.dtype)))[0]

    if mesh is None:
        return local(st, n_evals, *args)
    specs = tuple(PartitionSpec("b") if b else PartitionSpec() for b in batched_args)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(PartitionSpec("b"), PartitionSpec(), *specs),
        out_specs=PartitionSpec("b"),
    )(st, n_evals, *args)


_run_sharded = partial(jax.jit, static_argnames=("fun", "cfg", "batched_args", "mesh"))(_round)


def _run_batch(fun, st, args, cfg, batched_args, n_evals, program_key=None):
    """Run every slot; slots are split across host devices (one core each) when there are several.
    With a `program_key` (see `minimize_batch`) on one device, the round program is the one
    kept across processes (`models.base.programs`) when the compile cache is on."""
    mesh = _mesh()
    if mesh is not None and st.x.shape[0] % mesh.size == 0:
        sharding = NamedSharding(mesh, PartitionSpec("b"))
        st = jax.device_put(st, sharding)
        args = tuple(jax.device_put(a, sharding) if b else a for a, b in zip(args, batched_args))
    else:
        mesh = None
    n = np.int32(n_evals)
    if mesh is None and program_key is not None:
        prog = _kept_round(fun, st, args, cfg, batched_args, program_key)
        if prog is not None:
            return prog(st, args, n)
    return _run_sharded(fun, st, args, n, cfg, batched_args, mesh)


def _kept_round(fun, st, args, cfg, batched_args, program_key: str):
    """The round program of `_run_sharded` (one device) for these shapes from the program store, or
    None (store off, or nothing kept). Checked by a one-evaluation round before it is trusted."""

    def round_program(st, args, n_evals):
        return _round(fun, st, args, n_evals, cfg, batched_args, None)

    def check(prog):
        jax.block_until_ready(prog(st, args, np.int32(1)))

    key = f"lbfgs round | {program_key} | {cfg!r} | batched {batched_args} | lbfgs {_source_digest()}"
    return programs.compiled(round_program, (st, args, np.int32(0)), key, "lbfgs_round", check)


@lru_cache(maxsize=None)
def _source_digest() -> str:
    """This module's source: a kept round program is this code's."""
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()


MIN_WIDTH = 32  # the smallest batch: below it, a compiled program per start count costs more than it saves


def batch_width(n_starts: int, slots: int = 512) -> int:
    """The batch size `minimize_batch` uses for `n_starts` starts: the next power of two (at least
    `MIN_WIDTH`), at most `slots`, so that compiled shapes repeat across calls."""
    return min(slots, max(MIN_WIDTH, 1 << (max(n_starts, 1) - 1).bit_length()))


def _on_devices(width: int) -> int:
    """`width` rounded up to a multiple of the device count, so that slots split evenly."""
    n_dev = len(jax.devices())
    return -(-width // n_dev) * n_dev


def prepare_batch(
    fun: Callable,
    n_params: int,
    dtype,
    args: tuple,
    batched_args: tuple[bool, ...],
    cfg: LBFGSConfig,
    width: int,
    program_key: str | None = None,
) -> None:
    """Trace and compile (or load from the persistent cache) the round program a later
    `minimize_batch(fun, x0 (S, n_params) of dtype, args, batched_args, cfg, width=width)` runs,
    by running a round of zero evaluations. Call it in a background thread while another
    program computes (XLA releases the GIL), so that the later call starts at once."""
    W = _on_devices(width)
    st = fresh_state(np.zeros((W, n_params), dtype), cfg)
    host_args = tuple(jax.tree.map(_host, a) for a in args)
    idx = np.zeros(W, np.int32)
    _run_batch(fun, st, _gather(host_args, batched_args, idx), cfg, batched_args, 0, program_key)


def _host(v):
    """An argument as a host array (Python scalars stay as they are: jit keeps them weakly typed)."""
    return v if isinstance(v, (bool, int, float, complex)) else np.asarray(v)


def _put_shared(args: tuple, batched_args: tuple[bool, ...]) -> tuple:
    """The shared arguments on the device(s) (replicated over the mesh) once per
    `minimize_batch`, rather than sent again with every round; per-start ones stay on the host."""
    mesh = _mesh()
    target = NamedSharding(mesh, PartitionSpec()) if mesh is not None else None

    def put(v):
        return jax.device_put(v, target) if isinstance(v, np.ndarray) else v

    return tuple(a if b else jax.tree.map(put, a) for a, b in zip(args, batched_args))


def _gather(args: tuple, batched_args: tuple[bool, ...], idx: np.ndarray) -> tuple:
    """Rows `idx` of the per-start arguments (host numpy arrays); shared ones as they are."""
    return tuple(jax.tree.map(lambda v: v[idx], a) if b else a for a, b in zip(args, batched_args))


def _n_workers(n_starts: int, width: int, workers: int | None) -> int:
    """How many host threads `minimize_batch` drives batches from: as asked, else one per core
    (at most `MAX_WORKERS`) on a single device, never more than the starts fill batches of
    `width` (a half-empty batch costs what a full one does); several devices split each batch
    instead (`_run_batch`)."""
    if workers is None:
        if len(jax.devices()) > 1:
            return 1
        workers = min(MAX_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    return max(1, min(int(workers), -(-n_starts // width)))


MAX_WORKERS = 4  # host threads driving batches at once (XLA runs each batch on its caller's thread)


def _in_threads(job: Callable[[], None], n: int) -> None:
    """Run `job` on `n` host threads (here when n == 1), each under the caller's JAX configuration
    (its contexts, x64 and the default device, are per thread); re-raises a thread's error."""
    if n == 1:
        job()
        return
    x64, device = bool(jax.config.jax_enable_x64), jax.config.jax_default_device

    def worker() -> None:
        with jax.enable_x64(x64), jax.default_device(device):
            job()

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(worker) for _ in range(n)]:
            f.result()


def minimize_batch(
    fun: Callable,
    x0_SxP: np.ndarray | jax.Array,
    args: tuple = (),
    batched_args: tuple[bool, ...] | None = None,
    cfg: LBFGSConfig = LBFGSConfig(),
    slots: int = 512,
    round_evals: int = 16,
    tail_slots: int | None = None,
    *,
    width: int | None = None,
    workers: int | None = None,
    program_key: str | None = None,
    on_done: Callable[[int], None] | None = None,
) -> MinimizeResult:
    """Minimise `fun(x, *args)` from every row of `x0_SxP`; returns per-start results.

    `batched_args[i]`: whether `args[i]` has a leading start axis or is shared by all starts.
    A work queue: `slots` starts run `round_evals` evaluations at a time and finished starts hand
    their slot to waiting ones, so the batch pays for the evaluations each start needs with one
    compiled shape; with `tail_slots`, the last few unfinished starts move to a small batch running
    4x the evaluations per round. `width` fixes the batch width (one program for a caller's several
    batches); `workers` host threads run batches of that width on one program from one queue (the
    results do not depend on the number of workers); `program_key` names `fun` across processes so
    the persistent compile cache keeps its round program (`models.base.programs`). `on_done(k)`
    is told, from the worker threads, each time k more starts have finished (a progress bar).
    """
    x0 = np.asarray(x0_SxP)  # host bookkeeping in numpy: an eager jnp op is one more program
    S = x0.shape[0]
    if batched_args is None:
        batched_args = (False,) * len(args)
    batched_args = tuple(bool(b) for b in batched_args)
    args = _put_shared(tuple(jax.tree.map(_host, a) for a in args), batched_args)
    host = fresh_state(x0, cfg)
    pending = collections.deque(range(S))  # popleft() takes the lowest index, from any thread
    n_dev = len(jax.devices())
    W = _on_devices(width or batch_width(S, slots))
    W_tail = -(-tail_slots // n_dev) * n_dev if tail_slots else W

    def drain() -> None:
        width, n_evals = W, round_evals
        slot_idx = np.full(width, -1)
        while True:
            _fill(slot_idx, pending)
            live = slot_idx >= 0
            if not live.any():
                return
            if not pending and width > W_tail and live.sum() <= W_tail:  # the slow tail: a small batch
                slot_idx = np.concatenate([slot_idx[live], np.full(W_tail - live.sum(), -1)])
                live = slot_idx >= 0
                width, n_evals = W_tail, 4 * round_evals
            idx = np.where(live, slot_idx, slot_idx[live][0]).astype(np.int32)
            sub = jax.tree.map(lambda a: a[idx], host)
            sub_args = _gather(args, batched_args, idx)
            ran = _run_batch(fun, sub, sub_args, cfg, batched_args, n_evals, program_key)
            out = jax.tree.map(np.asarray, ran)
            rows = slot_idx[live]
            for field, value in zip(host._fields, out):
                getattr(host, field)[rows] = value[live]
            done = live & (out.status != RUNNING)
            slot_idx[done] = -1
            if on_done is not None and done.any():
                on_done(int(done.sum()))

    n_workers = _n_workers(S, W, workers)
    if n_workers > 1:  # the program(s) compiled once here, not by every thread at once
        for w in {W, W_tail}:
            idx = np.zeros(w, np.int32)
            sub = jax.tree.map(lambda a: a[idx], host)
            _run_batch(fun, sub, _gather(args, batched_args, idx), cfg, batched_args, 0, program_key)
    _in_threads(drain, n_workers)  # each thread writes only the rows of the starts it took
    return _result(host)


def _fill(slot_idx: np.ndarray, pending: collections.deque) -> None:
    """Give every free slot (-1) the next waiting start, while there are any."""
    for w in np.flatnonzero(slot_idx < 0):
        try:
            slot_idx[w] = pending.popleft()
        except IndexError:
            return


def _result(host) -> MinimizeResult:
    return MinimizeResult(
        x=host.x,
        f=host.f,
        grad_norm=np.max(np.abs(host.g), axis=-1),
        status=host.status,
        n_iter=host.n_iter,
        n_eval=host.n_eval,
    )
