"""Coverage of `fit-rl`'s 95% intervals and the rate of its identifiability flags on secret laws.

Protocol (`analysis.rl.secret`, the one ../shared/checks/rl.sh draws from): a random ScaleRL
sigmoid, A ~ U[0.5, 0.8], B ~ U[1.2, 2.4], C_mid ~ U[1e3, 4e3], R0 ~ U[0.1, 0.3]; 60 log-spaced
computes from C_mid/20 to 30 C_mid; pass rate = Binomial(1000, R)/1000 with the binomial stderr
of the measured rate. Each draw is fitted twice through `fit_recipe` (what `python -m analysis
fit-rl FILE.csv` calls): on the full window, and on the early window C < C_mid/2.

Printed: per parameter, the share of full-window fits whose 95% interval holds the truth, the
mean and median interval width and the RMS error; the share of early windows flagged
(`pre_midpoint` or `A_unbounded`); the share of full windows flagged (false flags: a full window
reaches 30x its midpoint, so every parameter is identifiable). The issue's targets: coverage of A
>= 93% and early-window flag rate >= 95% over 200 draws.

Usage: python benchmarks/rl_coverage.py [--draws 200] [--seed 0] [--workers 1] [--json OUT.json]
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

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis.rl.secret import PARAMS, evaluate  # noqa: E402

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _init_worker() -> None:
    from models.base.jaxcache import enable_compile_cache

    enable_compile_cache()


def run(draws: int, seed: int, workers: int) -> list[dict]:
    """Every draw's scores, in index order; `workers` > 1 runs them in spawned processes."""
    if workers <= 1:
        _init_worker()
        return [evaluate(seed, i) for i in range(draws)]
    for var in THREAD_VARS:  # one BLAS thread per worker: they would otherwise spin on each other
        os.environ.setdefault(var, "1")
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
        return list(pool.map(evaluate, [seed] * draws, range(draws)))


def _mean(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def summarise(rows: list[dict]) -> dict:
    """Coverage, widths, errors and flag rates over the draws (see the module docstring)."""
    full = [r["full"] for r in rows]
    out: dict = {"draws": len(rows), "full": {}, "early": {}}
    for k in PARAMS:
        widths = [f[f"{k}_width"] for f in full if f[f"{k}_width"] is not None]
        errs = [f[f"{k}_err"] for f in full if f[f"{k}_err"] is not None]
        rel = k in ("B", "C_mid")  # scale parameters: width and error relative to the truth
        if rel:
            widths = [f[f"{k}_width"] / r["truth"][k] for f, r in zip(full, rows) if f[f"{k}_width"]]
            errs = [f[f"{k}_err"] / r["truth"][k] for f, r in zip(full, rows) if f[f"{k}_err"] is not None]
        out["full"][k] = {
            "coverage": _mean([f[f"{k}_inside"] for f in full]),
            "mean_width": float(np.mean(widths)) if widths else None,
            "median_width": float(np.median(widths)) if widths else None,
            "rms_error": float(np.sqrt(np.mean(np.square(errs)))) if errs else None,
            "relative": rel,
        }
    out["full"]["flag_rate"] = _mean([f["flagged"] for f in full])
    out["full"]["any_flag_rate"] = _mean([bool(f["flags"]) for f in full])
    out["early"]["flag_rate"] = _mean([r["early"]["flagged"] for r in rows])
    out["misses_A"] = [
        {"index": r["index"], "truth": r["truth"]["A"], "err": r["full"]["A_err"]}
        for r in rows
        if r["full"]["A_inside"] is False
    ]
    out["unflagged_early"] = [r["index"] for r in rows if not r["early"]["flagged"]]
    out["falsely_flagged_full"] = [r["index"] for r in rows if r["full"]["flags"]]
    return out


def report(s: dict) -> str:
    lines = [f"{s['draws']} secret laws, full window (C_mid/20 .. 30 C_mid, 60 points):"]
    lines.append(f"  {'param':6s} {'coverage':>9s} {'mean width':>11s} {'median w':>9s} {'rms err':>9s}")
    for k in PARAMS:
        m = s["full"][k]
        cov = "n/a" if m["coverage"] is None else f"{100 * m['coverage']:.1f}%"
        tag = " (relative)" if m["relative"] else ""
        fmt = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        lines.append(
            f"  {k:6s} {cov:>9s} {fmt(m['mean_width']):>11s} {fmt(m['median_width']):>9s} "
            f"{fmt(m['rms_error']):>9s}{tag}"
        )
    lines.append(
        f"  full window flagged pre_midpoint/A_unbounded: {100 * s['full']['flag_rate']:.1f}% "
        f"(any flag: {100 * s['full']['any_flag_rate']:.1f}%) {s['falsely_flagged_full'][:10]}"
    )
    lines.append(
        f"early window (C < C_mid/2) flagged: {100 * s['early']['flag_rate']:.1f}% "
        f"(unflagged draws: {s['unflagged_early'][:10]})"
    )
    for m in s["misses_A"][:10]:
        lines.append(f"  A missed: draw {m['index']} true {m['truth']:.3f} error {m['err']:+.4f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="processes (each fit is single-threaded)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the summary and every draw")
    a = ap.parse_args()
    t0 = time.time()
    rows = run(a.draws, a.seed, a.workers)
    s = summarise(rows)
    print(report(s))
    print(f"({time.time() - t0:.0f} s, seed {a.seed})")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"summary": s, "draws": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
