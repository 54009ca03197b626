"""Does a big fit's first pass find the optimum the whole grid finds? Every fit of the backtest zoo.

`analysis.laws.fitting.multistart` runs a big search (the 4,500-start Chinchilla
grid, the 2,916-start data-constrained ones) on a seeded quarter of its starts first, and keeps
that when `FIRST_PASS_AGREE` of them reach its optimum. This script runs every backtest of the
zoo (all methods, every fold, no bootstrap) with each accepted first pass checked against the
whole grid's search, and prints the largest differences in objective and parameters.

Usage: python benchmarks/first_pass_check.py [--only PROTOCOL ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import backtest_zoo  # noqa: E402

from analysis.core.enums import Precision  # noqa: E402
from analysis.laws import fitting  # noqa: E402

# protocols whose methods fit point laws with the big grids (curves, MoE and RL laws do not)
PROTOCOLS = ("budget", "frontier", "size", "epochs", "downstream", "compare", "lr", "batch")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(PROTOCOLS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    records: list[dict] = []
    fallbacks: list[dict] = []
    first_pass = fitting.multistart

    def checked(prob, starts, precision=Precision.AUTO):
        ms = first_pass(prob, starts, precision)
        mixed = precision == Precision.MIXED or (
            precision == Precision.AUTO and len(starts) * prob.search_work >= fitting.MIXED_MIN_WORK
        )
        if ms.grid_starts == ms.n_starts:
            if ms.n_starts >= fitting.FIRST_PASS_MIN_STARTS:
                fallbacks.append({"law": prob.law.name, "n": int(prob.logy.size), "mixed": mixed})
            return ms
        whole = Precision.MIXED if mixed else Precision.FLOAT64
        full = fitting._search(prob, np.asarray(starts, float), whole, fitting._StartRuns(prob))
        rel = (ms.objective - full.objective) / abs(full.objective)
        dtheta = float(np.max(np.abs(ms.theta - full.theta)))
        records.append(
            {
                "case": current[0],
                "law": prob.law.name,
                "n": int(prob.logy.size),
                "mixed": mixed,
                "first_at_optimum": ms.starts_at_optimum,
                "full_at_optimum": full.starts_at_optimum,
                "objective_rel_diff": float(rel),
                "max_abs_internal_param_diff": dtheta,
            }
        )
        return ms

    fitting.multistart = checked
    current = [""]
    t0 = time.perf_counter()
    for case in backtest_zoo.cases():
        if case.protocol not in args.only:
            continue
        current[0] = f"{case.dataset} | {case.protocol}"
        out = backtest_zoo.run_case(case, bootstrap=0)
        print(f"{current[0]}: {'refused' if out.error else 'ok'} ({out.seconds:.0f} s)", flush=True)
    worst = sorted(records, key=lambda r: -r["objective_rel_diff"])
    secs = time.perf_counter() - t0
    print(f"\n{len(records)} first passes kept, {len(fallbacks)} fell back to the whole grid; {secs:.0f} s")
    for r in worst[:10]:
        print(json.dumps(r))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"kept": records, "fell_back": fallbacks}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
