"""`python -m analysis fit-curve --law {tissue,mpl} --fit A.csv [...] [--predict X.csv ...]`.

Fits a loss-curve law on whole curves (CSV columns step, lr, loss; or run directories) and/or on
their first steps (`--fit-until STEP`), then predicts the rest of those curves and every
`--predict` curve. `--json` writes params, the convergence report, and `predictions`:
curve name -> {mean_rel_error, max_rel_error, final_loss_pred, final_loss_actual}.
"""

from __future__ import annotations

import argparse

from analysis.commands._options import add_json_argument, emit_json
from analysis.commands.fit import _fixed


def register(subparsers) -> None:
    p = subparsers.add_parser("fit-curve", help="fit a loss-curve law (tissue, mpl) and forecast curves",
                              description=__doc__.splitlines()[0])
    p.add_argument("--law", default="mpl", help="curve law: mpl (Luo et al. 2025) or tissue (Tissue et al. 2024)")
    p.add_argument("--fit", nargs="+", required=True, metavar="CURVE", help="curves to fit (CSV or run dir)")
    p.add_argument("--predict", nargs="*", default=[], metavar="CURVE", help="curves to predict in full")
    p.add_argument("--fit-until", type=int, help="fit only steps <= this; predict the later steps")
    p.add_argument("--fix", action="append", metavar="NAME=VALUE", help="hold a parameter fixed; repeatable")
    p.add_argument("--resolution", type=int, default=32,
                   help="steps per annealing quadrature node (default 32; 1 = exact per-step sum)")
    p.add_argument("--warmup", choices=("linear", "constant"), default="linear",
                   help="schedule before the first logged step (default: linear warm-up from 0)")
    add_json_argument(p, "params, the convergence report and per-curve prediction errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.curves.fitting import fit_curve, load_curve
    from analysis.curves.laws import get_curve_law
    from analysis.jaxcache import enable_compile_cache

    enable_compile_cache()
    get_curve_law(args.law)
    fit = [load_curve(c, warmup=args.warmup) for c in args.fit]
    pred = [load_curve(c, warmup=args.warmup) for c in args.predict]
    r = fit_curve(fit, args.law, predict=pred, fit_until=args.fit_until, fixed=_fixed(args.fix),
                  resolution=args.resolution)
    print(f"law {r.law}: " + ", ".join(f"{k}={v:.6g}" for k, v in r.params.items()))
    print(f"  objective {r.objective:.6g}, {r.starts_at_optimum}/{r.n_starts} starts at the optimum; {r.status}")
    for name, e in r.predictions.items():
        print(f"  {name}: mean |rel err| {e['mean_rel_error']:.3%}, max {e['max_rel_error']:.3%}, "
              f"final loss {e['final_loss_pred']:.4f} (actual {e['final_loss_actual']:.4f})")
    emit_json(args, r.to_dict())
    return 0
