"""Speed of the Chinchilla fit: vectorised JAX L-BFGS vs SciPy L-BFGS-B in a process pool.

Times, on Epoch AI's reconstruction of the Chinchilla runs (5 highest losses dropped):
1. the full 4,500-start grid fit (cold = including XLA compilation, warm = compiled);
2. a 1,000-resample bootstrap (each resample from the full-data optimum + 2 more starts);
3. the usual way: SciPy L-BFGS-B (exact numpy gradient) from each grid start, and the bootstrap
   the same way (the same resamples and starts), spread over a pool of as many processes as
   JAX has devices (one per core: both get every core) — on a random subset of
   starts/resamples, scaled to the full count (or all of them with --full);
and compares the optima: the objective gap of the grid fits (ours minus SciPy's: negative =
ours lower, positive = SciPy found a lower optimum), and every timed resample's optimum. SciPy's
default tolerances stop the resample fits early (see `main`), so the bootstrap speed-up is given
against the loop with tolerances matched to ours, next to the default loop.
4. `optax.lbfgs` (zoom line search; the same objective, memory, Wolfe constants and stopping
   tests), vmapped over starts, against our engine in float64 on the same starts: a random
   subset of the grid and the first resamples of the bootstrap (the issue asks whether the
   library could replace ours: within 1.5x and as accurate).
Targets: grid < 5 s, bootstrap < 60 s on 2 CPU cores, >= 20x faster than SciPy.

    python benchmarks/fit_speed.py [--subset 300] [--full] [--processes 2] [--optax-starts 256]
        [--optax-resamples 100] [--only-optax] [--bootstrap 1000] [--json OUT.json]
    python benchmarks/fit_speed.py --quick --json /tmp/fit_speed.json   # smoke run (the test's)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import sys
import time

# Use every core: one host device per core, each minimising its share of the starts.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count() or 1}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# SciPy's pool: one single-threaded process per core. L-BFGS-B's BLAS calls would otherwise wake
# OpenBLAS threads that spin on the other core (measured: one process used 1.9 cores, two ran
# slower than one). Set before numpy is imported, here and in the spawned workers.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.optimize import minimize  # noqa: E402
from scipy.special import huber  # noqa: E402

from analysis.core.validation import bootstrap_counts  # noqa: E402
from analysis.laws.fitting import fit_law  # noqa: E402
from analysis.laws.registry import CHINCHILLA_GRID  # noqa: E402

DATA = (
    pathlib.Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "chinchilla_epoch"
    / "svg_extracted_data.csv"
)
DELTA = 1e-3  # Hoffmann et al.'s Huber delta: every fit timed here uses it (fit_law's default is 1)


def load() -> pd.DataFrame:
    d = pd.read_csv(DATA)
    return d[d.loss < d.loss.nlargest(5).min()]


def scipy_objective(logN, logD, logL, w):
    """Sum of Huber(log L - LSE(a - alpha logN, b - beta logD, e)) and its exact gradient."""

    def f(p):
        e, a, b, al, be = p
        T = np.stack([a - al * logN, b - be * logD, np.full_like(logN, e)])
        # Log-sum-exp by hand: scipy.special.logsumexp (array-API generic since SciPy 1.15)
        # costs 0.5 ms here, 50x this, and would make the baseline unfairly slow.
        m = T.max(axis=0)
        ex = np.exp(T - m)
        tot = ex.sum(axis=0)
        lse = m + np.log(tot)
        r = logL - lse
        soft = ex / tot  # d lse / d term
        dh = np.clip(r, -DELTA, DELTA)  # d huber / d r
        g_lse = -w * dh
        grad = np.array(
            [
                np.sum(g_lse * soft[2]),
                np.sum(g_lse * soft[0]),
                np.sum(g_lse * soft[1]),
                np.sum(g_lse * soft[0] * -logN),
                np.sum(g_lse * soft[1] * -logD),
            ]
        )
        return float(np.sum(w * huber(DELTA, r))), grad

    return f


def scipy_fit(f, starts, options=None):
    best = (np.inf, None)
    for x0 in starts:
        r = minimize(f, x0, jac=True, method="L-BFGS-B", options=options)
        if r.fun < best[0]:
            best = (r.fun, r.x)
    return best


# A one-point fit from one start: what a worker runs first, to load SciPy's optimiser.
_WARM_JOB = (np.zeros(1), np.zeros(1), np.zeros(1), np.ones(1), np.zeros((1, 5)), None)


def _scipy_job(job):
    """Pool worker: the best L-BFGS-B optimum over `starts` for one weighting of the points
    (module-level and fed arrays, not a closure, so that it pickles)."""
    logN, logD, logL, w, starts, options = job
    return scipy_fit(scipy_objective(logN, logD, logL, w), starts, options)


def _worker_pid(_: int) -> int:
    """A short job that names its worker: seeing every pid means every worker has started."""
    time.sleep(0.05)
    return os.getpid()


def scipy_pool(processes: int) -> concurrent.futures.ProcessPoolExecutor:
    """A started pool (spawned: JAX's threads already run in this process, so no fork) whose
    workers have all imported this module and run one fit, so that the timings below leave out
    process start-up and imports (a worker imports on its first job, not when it is spawned)."""
    pool = concurrent.futures.ProcessPoolExecutor(
        processes,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_scipy_job,
        initargs=(_WARM_JOB,),
    )
    seen: set[int] = set()
    while len(seen) < processes:
        seen.update(pool.map(_worker_pid, range(4 * processes)))
    return pool


def scipy_grid_fit(pool, data, starts, processes: int):
    """The grid fit in 16 chunks of starts per process (a start costs from 10 to 300 function
    evaluations, so a few chunks per process would leave one busy while the other idles); the
    best optimum over all of them."""
    chunks = np.array_split(starts, min(len(starts), 16 * processes))
    jobs = [(*data, np.ones(data[0].size), chunk, None) for chunk in chunks]
    return min(pool.map(_scipy_job, jobs), key=lambda r: r[0])


def time_jax(df: pd.DataFrame, boot_seed: int, n_boot: int = 1000):
    """The JAX grid fit and `n_boot`-resample bootstrap, each timed warm (after a compiling run)."""
    t = time.perf_counter()
    fit_law(df, bootstrap=0, delta=DELTA)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    fit = fit_law(df, bootstrap=0, delta=DELTA)
    grid_s = time.perf_counter() - t
    print(
        f"JAX grid fit, 4,500 starts: {grid_s:.2f} s warm ({cold:.2f} s cold, incl. compilation); "
        f"objective {fit.objective:.10g}, {fit.starts_at_optimum} polished starts at the optimum"
    )
    t = time.perf_counter()
    # compiles the bootstrap's shapes (its tail batch)
    fit_law(df, bootstrap=n_boot, seed=boot_seed + 1, delta=DELTA)
    boot_cold = time.perf_counter() - t - grid_s
    t = time.perf_counter()
    fitb = fit_law(df, bootstrap=n_boot, seed=boot_seed, delta=DELTA)
    boot_s = time.perf_counter() - t - grid_s
    print(
        f"JAX bootstrap, {n_boot:,} resamples: {boot_s:.2f} s warm ({boot_cold:.2f} s cold); "
        f"fit + bootstrap {boot_s + grid_s:.2f} s; "
        f"SE E {fitb.se['E']:.4f} alpha {fitb.se['alpha']:.4f} beta {fitb.se['beta']:.4f}"
    )
    return fit, grid_s, fitb, boot_s, cold


def time_scipy_grid(pool, P: int, data, fit, idx: np.ndarray, full: bool) -> tuple[float, float]:
    """SciPy from the grid starts `idx`: seconds for all 4,500 (scaled) and the objective gap
    ours - SciPy's best (negative = ours lower)."""
    # A random subset of starts: the timing per start is fair, but the subset's best can miss
    # the optimum 4,500 starts find (a negative gap); --full compares like with like.
    t = time.perf_counter()
    sf, sx = scipy_grid_fit(pool, data, CHINCHILLA_GRID[idx], P)
    per_start = (time.perf_counter() - t) / idx.size
    sx_pub = np.r_[np.exp(sx[:3]), sx[3:]]
    gap = fit.objective - sf
    print(
        f"SciPy L-BFGS-B, {P} processes: {per_start * 1e3:.2f} ms/start (wall) -> "
        f"{per_start * CHINCHILLA_GRID.shape[0]:.1f} s for 4,500 starts "
        f"({'measured' if full else f'{idx.size} run, scaled'}); best objective {sf:.10g}"
    )
    print(
        f"  optimum JAX  E={fit.params['E']:.5f} A={fit.params['A']:.2f} B={fit.params['B']:.1f} "
        f"alpha={fit.params['alpha']:.5f} beta={fit.params['beta']:.5f}"
    )
    print(
        f"  optimum SciPy E={sx_pub[0]:.5f} A={sx_pub[1]:.2f} B={sx_pub[2]:.1f} "
        f"alpha={sx_pub[3]:.5f} beta={sx_pub[4]:.5f}"
        f"  (objective gap, ours - SciPy: {gap:+.3e}; negative = ours lower)"
    )
    return per_start * CHINCHILLA_GRID.shape[0], gap


def time_scipy_bootstrap(
    pool, P: int, data, fit, fitb, boot_seed: int, pick: np.ndarray, full: bool, n_boot: int = 1000
) -> dict:
    """SciPy on the very resamples (and starts) the JAX bootstrap used: seconds for `n_boot`
    (scaled), per tolerance setting, and each resample's optimum compared with ours.

    SciPy's default tolerances stop early here: its ftol is relative to max(|f|, 1) and this
    objective is ~1e-3 (the Chinchilla paper's own early-stopping trap), so it is also timed with
    tolerances matched to the JAX fit (relative decrease 1e-14 * |f|, gradient 1e-10)."""
    counts = bootstrap_counts(data[0].size, n_boot, boot_seed)
    x0s = fitb.law_obj.to_public(fitb.bootstrap_x0)  # the same starts the JAX bootstrap used for every
    x0s = np.column_stack(
        [np.log(x0s[:, :3]), x0s[:, 3:]]
    )  # resample, in SciPy's (log E, log A, log B, alpha, beta)
    matched = dict(ftol=1e-14 * fit.objective, gtol=1e-10, maxiter=2000, maxfun=2000)
    seconds = {}
    for name, opts in (("default tolerances", {}), ("matched tolerances", matched)):
        t = time.perf_counter()
        jobs = [(*data, counts[i].astype(float), x0s, opts) for i in pick]
        res = list(pool.map(_scipy_job, jobs, chunksize=max(1, pick.size // (16 * P))))
        seconds[name] = (time.perf_counter() - t) / pick.size * n_boot
        ours = fitb.bootstrap_samples[pick]
        errs = np.max([np.abs(np.r_[np.exp(x[:3]), x[3:]] / o - 1) for (_, x), o in zip(res, ours)], axis=1)
        gaps = np.array(
            [
                scipy_objective(*data, counts[i].astype(float))(np.r_[np.log(o[:3]), o[3:]])[0] - f
                for i, (f, _), o in zip(pick, res, ours)
            ]
        )
        print(
            f"SciPy bootstrap, {P} processes, {name} (same {len(x0s)} starts per resample): "
            f"{seconds[name]:.1f} s "
            f"for {n_boot:,} resamples{'' if full else f' ({pick.size} run, scaled)'}; "
            "resample optima vs JAX: "
            f"median {np.median(errs):.1e}, max {errs.max():.1e} relative (worst parameter); objective gap "
            f"ours - SciPy: min {gaps.min():+.2e}, max {gaps.max():+.2e}; SciPy lower by > 1e-9 relative in "
            f"{np.sum(gaps > 1e-9 * np.array([f for f, _ in res]))} of {pick.size}"
        )
    return seconds


def optax_minimize_batch(fun, cfg, max_iter: int):
    """`optax.lbfgs` with its zoom line search (Wolfe constants, memory and trial limit from
    `cfg`) vmapped over starts, each start in a `lax.while_loop` stopped by our tests: gradient
    infinity norm <= cfg.gtol, relative decrease <= cfg.ftol * |f| on a step, or `max_iter`
    iterations. Returns a jitted f(x0 (S, F), w (S, n), shared) -> (x, f, iterations, evaluations)."""
    import jax
    import jax.numpy as jnp
    import optax
    import optax.tree_utils as otu

    from analysis.core.lbfgs import _mesh

    opt = optax.lbfgs(
        memory_size=cfg.memory,
        linesearch=optax.scale_by_zoom_linesearch(
            max_linesearch_steps=cfg.max_ls, slope_rtol=cfg.c1, curv_rtol=cfg.c2
        ),
    )

    def one(x0, w, shared):
        def f(x):
            return fun(x, *shared, w)

        value_and_grad = optax.value_and_grad_from_state(f)

        def step(carry):
            x, state, _, k, n_eval = carry
            value, grad = value_and_grad(x, state=state)
            updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
            n_eval = n_eval + otu.tree_get(state, "num_linesearch_steps")
            return optax.apply_updates(x, updates), state, value, k + 1, n_eval

        def going(carry):
            _, state, f_prev, k, _ = carry
            value, grad = otu.tree_get(state, "value"), otu.tree_get(state, "grad")
            improving = (f_prev - value > cfg.ftol * jnp.abs(value)) & jnp.isfinite(value)
            return (k == 0) | ((k < max_iter) & (jnp.max(jnp.abs(grad)) > cfg.gtol) & improving)

        carry = (x0, opt.init(x0), jnp.asarray(jnp.inf, x0.dtype), 0, 0)
        x, state, _, k, n_eval = jax.lax.while_loop(going, step, carry)
        return x, otu.tree_get(state, "value"), k, n_eval

    batched = jax.vmap(one, in_axes=(0, 0, None))
    mesh = _mesh()  # one host device per core, as our engine gets: each runs its share of starts
    if mesh is None:
        return jax.jit(batched)
    spec = jax.sharding.PartitionSpec
    return jax.jit(
        jax.shard_map(
            batched, mesh=mesh, in_specs=(spec("b"), spec("b"), spec()), out_specs=spec("b"), check_vma=False
        )
    )


def _optax_vs_ours(prob, x0, w, label: str, fn, n_groups: int) -> dict:
    """Time ours (float64 `run_starts`, warm) and optax (compiled first, then timed) on the same
    starts and weights; compare the best objective of each of `n_groups` equal groups of starts."""
    import jax
    import jax.numpy as jnp

    from analysis.core.lbfgs import _mesh
    from analysis.laws import fitting as F

    F.run_starts(prob, x0[:8], w[:8])  # our program for this width is usually loaded by now
    t = time.perf_counter()
    ours = F.run_starts(prob, x0, w)
    ours_s = time.perf_counter() - t
    with jax.enable_x64(True):
        tf, logX, logy, _ = prob.args(np.float64)
        shared = (jnp.asarray(tf), tuple(jnp.asarray(v) for v in logX), jnp.asarray(logy))
        xs, ws = jnp.asarray(x0, jnp.float64), jnp.asarray(prob.pad_weights(w), jnp.float64)
        if _mesh() is not None:  # split over the devices as our engine's slots are
            sharding = jax.sharding.NamedSharding(_mesh(), jax.sharding.PartitionSpec("b"))
            xs, ws = jax.device_put(xs, sharding), jax.device_put(ws, sharding)
        t = time.perf_counter()
        compiled = fn.lower(xs, ws, shared).compile()
        compile_s = time.perf_counter() - t
        t = time.perf_counter()
        _, f_opt, iters, evals = jax.block_until_ready(compiled(xs, ws, shared))
        optax_s = time.perf_counter() - t
    f_ours = np.where(np.isfinite(ours.f), ours.f, np.inf).reshape(n_groups, -1).min(axis=1)
    f_opt = np.where(np.isfinite(f_opt), np.asarray(f_opt), np.inf).reshape(n_groups, -1).min(axis=1)
    gap = (f_ours - f_opt) / np.abs(f_opt)  # negative: ours lower
    print(
        f"{label}: ours {ours_s:.2f} s ({ours.n_eval.sum()} evaluations), optax.lbfgs vmapped "
        f"{optax_s:.2f} s ({int(np.sum(evals))} evaluations, up to {int(np.max(iters))} iterations; "
        f"compile {compile_s:.1f} s) = {optax_s / ours_s:.0f}x ours; best objective ours - optax: "
        f"median {np.median(gap):+.1e}, max {gap.max():+.1e} relative (optax lower by > 1e-9 in "
        f"{int(np.sum(gap > 1e-9))} of {n_groups})"
    )
    return {"ours": ours_s, "optax": optax_s, "max_gap": float(gap.max())}


def time_optax(df: pd.DataFrame, fitb, n_starts: int, n_resamples: int) -> dict:
    """optax.lbfgs against our engine, both float64 with the same objective and tolerances, on
    `n_starts` random starts of Epoch's grid (best objective of the subset) and the first
    `n_resamples` resamples of the 1,000-resample bootstrap (each from its 3 starts)."""
    from analysis.core import table as data_mod
    from analysis.laws import fitting as F
    from analysis.laws.registry import get_law

    law = get_law("chinchilla")
    columns, _ = data_mod.choose_n_column(df, law, None, None)
    prob = F.prepare(law, data_mod.resolve(df, law.inputs, columns), None, F.HUBER_DELTA)
    starts = F._starts(law, prob, None)
    import jax

    n_starts -= n_starts % len(jax.devices())  # the batch splits evenly over the devices
    pick = np.random.default_rng(0).choice(
        starts.shape[0], size=min(n_starts, starts.shape[0]), replace=False
    )
    fn = optax_minimize_batch(prob.fun, F._CFG64, max_iter=F._CFG64.max_evals)
    x0 = starts[np.sort(pick)]
    out = {
        "grid": _optax_vs_ours(
            prob, x0, np.tile(prob.w, (x0.shape[0], 1)), f"grid, {x0.shape[0]} starts", fn, 1
        )
    }
    boot_x0 = fitb.bootstrap_x0[:, list(prob.free_idx)]  # the internal starts of every resample
    xb, wb = F.bootstrap_jobs(prob, boot_x0, fitb.bootstrap_samples.shape[0], fitb.seed)
    rows = slice(0, n_resamples * boot_x0.shape[0])
    out["bootstrap"] = _optax_vs_ours(
        prob,
        xb[rows],
        wb[rows],
        f"bootstrap, {n_resamples} resamples x {boot_x0.shape[0]} starts",
        fn,
        n_resamples,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--subset", type=int, default=300, help="SciPy starts/resamples actually run (then scaled)"
    )
    ap.add_argument("--full", action="store_true", help="run SciPy from all 4,500 starts and 1,000 resamples")
    ap.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        help="SciPy's pool size (default: one per core, as JAX gets one device per core)",
    )
    ap.add_argument("--optax-starts", type=int, default=256, help="grid starts optax.lbfgs is timed on")
    ap.add_argument("--optax-resamples", type=int, default=100, help="bootstrap resamples optax is timed on")
    ap.add_argument("--only-optax", action="store_true", help="skip the SciPy comparison")
    ap.add_argument("--bootstrap", type=int, default=1000, help="resamples of the timed bootstrap")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 50 resamples, SciPy on 8 starts, no optax"
    )
    ap.add_argument("--json", type=pathlib.Path, help="write the timings here")
    ap.add_argument("--no-optax", action="store_true", help="skip the optax comparison (~40 s of compiling)")
    args = ap.parse_args(argv)
    if args.quick:  # every timed part but optax's (its compiles alone take ~40 s)
        args.bootstrap, args.subset, args.full, args.no_optax = 50, 8, False, True
    if not DATA.is_file():
        print(f"data not found: {DATA}", file=sys.stderr)
        return 2
    df = load()
    import jax

    print(
        f"{len(df)} points; JAX {jax.__version__} on {len(jax.devices())} CPU device(s), "
        f"{os.cpu_count()} cores"
    )
    boot_seed, n_boot = 0, args.bootstrap
    fit, grid_s, fitb, boot_s, grid_cold = time_jax(df, boot_seed, n_boot)
    opt = (
        None if args.no_optax else time_optax(df, fitb, args.optax_starts, min(args.optax_resamples, n_boot))
    )
    out = {
        "benchmark": "fit_speed",
        "quick": args.quick,
        "n_points": len(df),
        "devices": len(jax.devices()),
        "cores": os.cpu_count(),
        "grid_starts": int(CHINCHILLA_GRID.shape[0]),
        "grid_s": grid_s,
        "grid_cold_s": grid_cold,
        "objective": float(fit.objective),
        "bootstrap_resamples": n_boot,
        "bootstrap_s": boot_s,  # fit + bootstrap less the warm grid fit: noisy when small (--quick)
        "fit_plus_bootstrap_s": boot_s + grid_s,
        "optax": opt,
    }
    if args.only_optax:
        _write_json(args.json, out)
        return 0
    logN, logD, logL = (np.log(df[c].to_numpy(float)) for c in ("Model Size", "Training FLOP", "loss"))
    data = (logN, logD - np.log(6.0) - logN, logL)
    P = max(1, args.processes)
    rng = np.random.default_rng(0)
    k = CHINCHILLA_GRID.shape[0] if args.full else min(args.subset, CHINCHILLA_GRID.shape[0])
    idx = rng.choice(CHINCHILLA_GRID.shape[0], size=k, replace=False)
    kb = n_boot if args.full else min(args.subset, n_boot)
    pick = np.sort(rng.choice(n_boot, size=kb, replace=False))
    pool = scipy_pool(P)
    try:
        scipy_grid, gap = time_scipy_grid(pool, P, data, fit, idx, args.full)
        scipy_boot = time_scipy_bootstrap(pool, P, data, fit, fitb, boot_seed, pick, args.full, n_boot)
    finally:
        pool.shutdown()
    print(
        f"RESULT grid {grid_s:.2f} s (target < 5), bootstrap {boot_s:.2f} s (target < 60), "
        f"grid speed-up {scipy_grid / grid_s:.1f}x, "
        f"bootstrap speed-up {scipy_boot['matched tolerances'] / boot_s:.1f}x "
        f"(vs SciPy with tolerances that reach the same optima; "
        f"{scipy_boot['default tolerances'] / boot_s:.1f}x vs its "
        f"default tolerances, which stop early), SciPy on {P} processes; grid objective gap ours - SciPy "
        f"{gap:+.3e} ({gap / fit.objective:+.2e} relative; negative = ours lower)"
        + (
            ""
            if opt is None
            else f"; optax.lbfgs {opt['grid']['optax'] / opt['grid']['ours']:.0f}x slower on the grid, "
            f"{opt['bootstrap']['optax'] / opt['bootstrap']['ours']:.0f}x on the bootstrap"
        )
    )
    out["scipy"] = {
        "processes": P,
        "grid_s_scaled": scipy_grid,
        "grid_starts_run": int(idx.size),
        "objective_gap": float(gap),
        "bootstrap_s_scaled": scipy_boot,
        "bootstrap_resamples_run": int(pick.size),
    }
    out["grid_speedup"] = scipy_grid / grid_s
    out["bootstrap_speedup_matched"] = scipy_boot["matched tolerances"] / boot_s
    _write_json(args.json, out)
    return 0


def _write_json(path: pathlib.Path | None, out: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    raise SystemExit(main())
