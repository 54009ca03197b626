"""`python -m analysis fit DATA.csv --law chinchilla ... --json OUT.json`: fit a point law.

Prints the parameters with CIs and the convergence report; `--json` writes the full result
(params, ci, objective, n_points, converged, starts_at_optimum, allocation, holdout,
param_names, bootstrap_samples, ...), the schema documented in docs/analysis.md.
"""

from __future__ import annotations

import argparse

from analysis.commands._options import add_budget_argument, add_json_argument, emit_json
from models.base.errors import AnalysisError


def _fixed(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise AnalysisError(f"--fix expects NAME=VALUE (e.g. --fix E=1.69), got {item!r}") from None
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("fit", help="fit a scaling law to a table of runs (CSV)", description=__doc__.splitlines()[0])
    p.add_argument("data", help="CSV (or .parquet) with one row per run, e.g. from `python -m analysis collect`")
    p.add_argument("--law", default="chinchilla", help="law name (default chinchilla; see docs/analysis.md)")
    p.add_argument("--n-col", help="model-size column (default: N, n_params or 'Model Size')")
    p.add_argument("--d-col", help="tokens column (default: D or tokens; else derived as C/(6N))")
    p.add_argument("--c-col", help="compute column (default: C, flops or 'Training FLOP'; else 6ND)")
    p.add_argument("--loss-col", help="target column (default: loss or final_eval_loss)")
    p.add_argument("--x-col", help="input column of the generic 'power' law")
    p.add_argument("--weight-col", help="column of per-run weights")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000; 0 = none)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--holdout-above", type=float, help="leave runs with C above this out of the fit and predict them")
    add_budget_argument(p, "to state the compute-optimal allocation N*, D* for")
    p.add_argument("--fix", action="append", metavar="NAME=VALUE", help="hold a parameter fixed; repeatable")
    p.add_argument("--delta", type=float, default=1e-3, help="Huber delta on log residuals (default 1e-3)")
    p.add_argument("--precision", choices=("auto", "mixed", "float64"), default="auto",
                   help="auto (default): float32 search + float64 polish for big grids; mixed: always; float64: never")
    p.add_argument("--approach2", choices=("parabola", "cubic", "law"),
                   help="also fit IsoFLOP profiles (Approach 2) and report whether its exponent disagrees with the law fit")
    add_json_argument(p, "the fit (schema in docs/analysis.md)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.jaxcache import enable_compile_cache
    from analysis.laws.fitting import fit_law
    from analysis.laws.registry import get_law

    enable_compile_cache()
    get_law(args.law)  # unknown law: fail before reading data
    columns = _columns(args)
    fit = fit_law(args.data, args.law, columns, bootstrap=args.bootstrap, seed=args.seed,
                  holdout_above=args.holdout_above, weights=args.weight_col, fixed=_fixed(args.fix),
                  delta=args.delta, precision=args.precision)
    print(fit.summary())
    result = fit.to_dict(args.budget)
    _print_allocation(result)
    _print_holdout(fit.holdout)
    if args.approach2:
        _add_approach2(fit, args, columns)
        result = fit.to_dict(args.budget)
    emit_json(args, result)
    return 0


def _columns(args: argparse.Namespace) -> dict[str, str]:
    """Column roles the user named with --n-col/--d-col/...; the rest are found by name."""
    return {role: name for role, name in (("N", args.n_col), ("D", args.d_col), ("C", args.c_col),
                                          ("loss", args.loss_col), ("x", args.x_col)) if name}


def _print_allocation(result: dict) -> None:
    if "allocation" not in result:
        return
    al = result["allocation"]
    ci = al.get("a_ci", [float("nan")] * 2)
    print(f"  allocation: N* ~ C^{al['a']:.4f} (CI [{ci[0]:.4f}, {ci[1]:.4f}]), D* ~ C^{al['b']:.4f}")


def _print_holdout(h: dict | None) -> None:
    if h is not None:
        print(f"  held out {h['n_points']} runs above C={h['threshold']:.3g}: mean |rel err| {h['mean_rel_error']:.3%}, "
              f"max {h['max_rel_error']:.3%}")


def _add_approach2(fit, args: argparse.Namespace, columns: dict[str, str]) -> None:
    """IsoFLOP profiles (Approach 2) and their agreement with the law's exponent, kept in the fit's extras."""
    from analysis.laws.isoflop import approach2, compare_approaches  # JAX-heavy; see run()

    a2 = approach2(args.data, columns, method=args.approach2,
                   bootstrap=min(args.bootstrap, 1000) or 200, seed=args.seed)
    cmp_ = compare_approaches(fit, a2)
    fit.extras.update(approach2=a2, approach_comparison=cmp_)
    print(f"  {cmp_['message']}")
