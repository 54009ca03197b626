"""The multistart protocol (`fit-curve`'s fit): Luo et al.'s own fit of the multi-power law, read
(not copied) in their public code (github.com/thu-yao-01-luo/MultiPowerLaw, through the fork
Morphorxz/dlt25-final, commit 4d20cd9; docs/fit.md, "Accuracy on the MPL protocol"), run from
27 annealing starts with the lowest objective kept:

- law: the drop sum from step 1, warm-up rises included (`features(warmup_rises=True)`);
- objective: Huber (delta 1e-3) of log loss minus log prediction (clamped at 1e-10), every logged
  step weighted 1; raw parameters, not logs;
- start: regress log(loss - min loss + 0.01) on log S1, then L-BFGS from a 5 x 3 x 3 x 3 grid
  around that of the stand-in L0 + A S1^-alpha - B (eta_peak - eta(t)) (the batched L-BFGS of
  `analysis/core/lbfgs.py`, on log parameters); their C = 1, beta = gamma = 0.5, ours every
  (C, beta, gamma) of `MULTISTART_GRID` (their single run is fragile);
- AdamW (torch defaults, weight decay 0.01) with step 5e-2 for L0, A, B, C and 5e-3 for alpha,
  beta, gamma, at most 200 steps, stopped after 20 without improvement (after step 20) or at a
  gradient norm below 1e-5; kept: the iterate after the best objective's step. It stops ~100 steps
  in, well before the optimum: the early stop is the fit's regulariser.

Every row of point weights (the main fit and the calibration refits of `intervals.py`) gets its
own starts and runs, all rows in one vmapped loop.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.lbfgs import LBFGSConfig, minimize_batch
from analysis.curves.data import Curve
from analysis.curves.laws import Problem, feature_dict
from analysis.laws.fitting import huber
from models.base.errors import AnalysisError

# The start's grid: L0 within +-0.2 of the lowest fitted loss (5 values), A within +-0.1 of the
# regression's exp(intercept) and alpha within +-0.1 of its -slope (3 values each), B from 100 to
# 1000 (3 values); 0.01 keeps log(loss - min loss) finite at the lowest point.
INIT_L0_SPAN, INIT_L0_N = 0.2, 5
INIT_A_SPAN, INIT_ALPHA_SPAN, INIT_AA_N = 0.1, 0.1, 3
INIT_B_RANGE, INIT_B_N = (100.0, 1000.0), 3
INIT_LOSS_OFFSET = 0.01
# the AdamW starts: every (C, beta, gamma) of a grid around theirs (C = 1, beta = gamma = 0.5; C
# halved and doubled, beta and gamma +-0.2)
MULTISTART_C, MULTISTART_EXPONENTS = (0.5, 1.0, 2.0), (0.3, 0.5, 0.7)
MULTISTART_GRID = tuple(itertools.product(MULTISTART_C, MULTISTART_EXPONENTS, MULTISTART_EXPONENTS))
INIT_CFG = LBFGSConfig(max_evals=2000, ftol=1e-12)  # the stand-in's fit (theirs: ftol 1e-9, gtol 1e-6)

# AdamW: torch.optim.AdamW's defaults (their fit sets only the step sizes).
ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WEIGHT_DECAY = 0.9, 0.999, 1e-8, 1e-2
STEP_SCALE = 5e-2  # step size of L0, A, B, C
STEP_EXPONENT = 5e-3  # step size of alpha, beta, gamma
MAX_STEPS, PATIENCE, GRAD_STOP = 200, 20, 1e-5
# The loop's rounds (`_run_compacted`): steps per round; the running rows move to a batch of their
# own once they are at most SHRINK of the batch (each new batch size compiles the loop once, ~1 s);
# the smallest batch (below ~12 rows XLA's CPU code for the batch changes, and the iterates' last
# bits with it), and no shrinking below twice that (27 rows, one fit without intervals: no gain).
CHUNK_STEPS, SHRINK, MIN_BATCH = 20, 0.75, 16
PRED_FLOOR = 1e-10  # their clamp of the prediction before its log

EXPONENTS = ("alpha", "beta", "gamma")
STOP_NAMES = {
    0: "max steps",
    1: f"no improvement for {PATIENCE} steps",
    2: f"gradient norm below {GRAD_STOP:g}",
}
GRID_FLOOR = 1e-6  # a grid value <= 0 starts here (L-BFGS-B would start on its bound at 0; logs cannot)


def _stand_in_inputs(parts: list[tuple[Curve, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(log S1, eta_peak - eta(t)) per fitted point: the start's four-parameter model. eta(t) is
    the rate logged at t and eta_peak the curve's largest logged rate (their 3e-4)."""
    logS1, gap = [], []
    for c, t in parts:
        logS1.append(np.log(np.cumsum(c.schedule())[t]))
        gap.append(np.max(c.lr) - c.lr[np.searchsorted(c.steps, t)])
    return np.concatenate(logS1), np.concatenate(gap)


def _stand_in_objective(theta, logS1, gap, logy, w, delta):
    L0, A, alpha, B = (jnp.exp(theta[i]) for i in range(4))
    pred = L0 + A * jnp.exp(-alpha * logS1) - B * gap
    r = logy - jnp.log(jnp.where(pred > 0, pred, jnp.nan))
    return jnp.sum(w * huber(r, delta))


def _grid(logy: np.ndarray, logS1: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Their start grid for the points with weight > 0 (public L0, A, alpha, B rows)."""
    keep = w > 0
    y, x = np.exp(logy[keep]), logS1[keep]
    lmin = float(y.min())
    slope, intercept = np.polyfit(x, np.log(y - lmin + INIT_LOSS_OFFSET), 1)
    rows = itertools.product(
        np.linspace(lmin - INIT_L0_SPAN, lmin + INIT_L0_SPAN, INIT_L0_N),
        np.linspace(np.exp(intercept) - INIT_A_SPAN, np.exp(intercept) + INIT_A_SPAN, INIT_AA_N),
        np.linspace(-slope - INIT_ALPHA_SPAN, -slope + INIT_ALPHA_SPAN, INIT_AA_N),
        np.linspace(*INIT_B_RANGE, INIT_B_N),
    )
    return np.maximum(np.array(list(rows)), GRID_FLOOR)


def starts(problem: Problem, parts, weights: np.ndarray, anneal=MULTISTART_GRID) -> np.ndarray:
    """Their start for every row of point `weights`, once per row of `anneal` (C, beta, gamma):
    (R * K, 7) public MPL parameters, the K rows of one weight row together."""
    logS1, gap = _stand_in_inputs(parts)
    grids = [_grid(problem.logy, logS1, w) for w in weights]
    G = grids[0].shape[0]
    x0 = np.log(np.vstack(grids))
    W = np.repeat(weights, G, axis=0)
    with jax.enable_x64(True):
        fun = _stand_in_fun(problem.delta)
        args = (jnp.asarray(logS1), jnp.asarray(gap), jnp.asarray(problem.logy), jnp.asarray(W))
        r = minimize_batch(fun, x0, args, batched_args=(False, False, False, True), cfg=INIT_CFG, slots=256)
    f = np.where(np.isfinite(r.f), r.f, np.inf).reshape(len(weights), G)
    best = np.argmin(f, axis=1)
    if not np.all(np.isfinite(f[np.arange(len(weights)), best])):
        raise AnalysisError("mpl: the start's power-law fit is not finite; check the curves")
    four = np.exp(r.x.reshape(len(weights), G, 4)[np.arange(len(weights)), best])
    anneal = np.asarray(anneal, float)
    return np.hstack([np.repeat(four, len(anneal), axis=0), np.tile(anneal, (len(weights), 1))])


@lru_cache(maxsize=None)
def _stand_in_fun(delta: float):
    return lambda theta, logS1, gap, logy, w: _stand_in_objective(theta, logS1, gap, logy, w, delta)


@dataclass(frozen=True)
class AdamWResult:
    """Per row: the kept parameters (public), the objective and its gradient's infinity norm
    there, AdamW steps taken, stop code (`STOP_NAMES`)."""

    params: np.ndarray
    f: np.ndarray
    grad_norm: np.ndarray
    steps: np.ndarray
    stop: np.ndarray


@lru_cache(maxsize=None)
def _adamw_program(law, delta: float, n: int):
    step_size = jnp.asarray([STEP_EXPONENT if k in EXPONENTS else STEP_SCALE for k in law.param_names])

    def objective(p, F, logy, w):
        pred = law.predict(p, F, n)
        return jnp.sum(w * huber(logy - jnp.log(jnp.maximum(pred, PRED_FLOOR)), delta))

    value_and_grad = jax.value_and_grad(objective)

    def run(state, F, logy, w, limit):
        def cond(s):
            return (s[0] < limit) & (s[8] < 0)

        def body(s):
            i, p, m, v, f_min, stale, f_best, p_best, _ = s
            inf = jnp.asarray(jnp.inf, p.dtype)
            f, g = value_and_grad(p, F, logy, w)
            f = jnp.where(jnp.isfinite(f), f, inf)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            t = i + 1
            m = ADAM_BETA1 * m + (1 - ADAM_BETA1) * g
            v = ADAM_BETA2 * v + (1 - ADAM_BETA2) * g * g
            m_hat, v_hat = m / (1 - ADAM_BETA1**t), v / (1 - ADAM_BETA2**t)
            p_new = p * (1 - step_size * ADAM_WEIGHT_DECAY) - step_size * m_hat / (jnp.sqrt(v_hat) + ADAM_EPS)
            better = f < f_min
            f_min = jnp.where(better, f, f_min)
            stale = jnp.where(better, 0, stale + 1)
            stop = jnp.where(
                (i > PATIENCE) & (stale >= PATIENCE), 1, jnp.where(jnp.linalg.norm(g) < GRAD_STOP, 2, -1)
            )
            keep = (stop < 0) & (f < f_best)
            return (
                t,
                p_new,
                m,
                v,
                f_min,
                stale,
                jnp.where(keep, f, f_best),
                jnp.where(keep, p_new, p_best),
                stop,
            )

        return jax.lax.while_loop(cond, body, state)

    return jax.jit(jax.vmap(run, in_axes=(0, None, None, 0, None))), jax.jit(
        jax.vmap(value_and_grad, (0, None, None, 0))
    )


def _initial_state(p0: np.ndarray) -> list[np.ndarray]:
    """The AdamW loop's carry for every row, as `_adamw_program`'s body reads it: step, iterate,
    first and second moments, lowest objective, steps without improvement, kept objective, kept
    iterate, stop code (-1: running); copies: the rounds write into it, never into `p0`."""
    R, p0 = p0.shape[0], np.array(p0, np.float64)
    inf, z = np.full(R, np.inf), np.zeros_like(p0)
    count = lambda v: np.full(R, v, np.int64)  # noqa: E731  (the loop runs under enable_x64)
    return [count(0), p0, z, z.copy(), inf, count(0), inf.copy(), p0.copy(), count(-1)]


def _run_compacted(run, p0: np.ndarray, F, logy, weights: np.ndarray) -> list[np.ndarray]:
    """Every row's AdamW loop to its stop, in rounds of `CHUNK_STEPS` steps: a vmapped loop
    computes every row until the last one stops, so once a quarter of the batch has stopped the
    running rows go on alone (in a smaller batch: `MIN_BATCH` at least, filled with copies of a
    running row). Rows share no arithmetic, so each gets the iterates it would get in the full
    batch (checked bit for bit on the MPL sets' 162 rows: parameters, objectives, steps, stop
    codes); only the compute of rows that already stopped is saved, ~40% of a multistart fit
    with intervals (its rows stop after 33 to 200 steps, 105 on average)."""
    state = _initial_state(p0)
    rows, batch, step = np.arange(p0.shape[0]), p0.shape[0], 0
    while rows.size:
        if batch >= 2 * MIN_BATCH and rows.size <= batch * SHRINK:
            batch = max(MIN_BATCH, rows.size)
        take = np.concatenate([rows, np.full(max(batch - rows.size, 0), rows[0])])
        step = min(step + CHUNK_STEPS, MAX_STEPS)
        carry = tuple(jnp.asarray(x[take]) for x in state)
        out = run(carry, F, logy, jnp.asarray(weights[take]), step)
        for x, y in zip(state, out):
            x[rows] = np.asarray(y)[: rows.size]
        rows = rows[(state[8][rows] < 0) & (state[0][rows] < MAX_STEPS)]
    return state


def adamw(problem: Problem, p0: np.ndarray, weights: np.ndarray) -> AdamWResult:
    """Their AdamW run from every row of public starts `p0`, row i weighting the points by
    `weights[i]`; the objective is recomputed at the kept parameters."""
    run, objective = _adamw_program(problem.law, problem.delta, problem.F.n)
    with jax.enable_x64(True):
        F, logy = feature_dict(problem.F), jnp.asarray(problem.logy)
        weights = np.asarray(weights, np.float64)
        state = _run_compacted(run, p0, F, logy, weights)
        f, g = objective(jnp.asarray(state[7]), F, logy, jnp.asarray(weights))
    p, f, g = state[7], np.asarray(f), np.asarray(g)
    ok = np.isfinite(f) & np.all(p > 0, axis=1)
    steps, stop = state[0], np.maximum(state[8], 0)
    return AdamWResult(p, np.where(ok, f, np.inf), np.max(np.abs(g), axis=1), steps, stop)
