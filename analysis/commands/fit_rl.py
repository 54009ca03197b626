"""`python -m analysis fit-rl INPUT... --json OUT.json`: fit an RL compute-performance law.

INPUT is an RL run directory or a CSV with columns compute, pass_rate[, stderr]; several inputs
are seeds of one recipe (pooled fit + per-seed fits + spread). Prints the verdict; when a flag
fires (pre_midpoint, A_unbounded, unstable) it prints the gain per decade of compute instead of
a ceiling.
"""

from __future__ import annotations

import argparse
import dataclasses

from analysis.commands._flags import add_fit_until_frac_argument, add_json_argument
from analysis.commands._options import CommandOptions, emit_json
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit-rl",
        help="fit pass rate vs RL compute (ScaleRL sigmoid)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="RL run directory or CSV (seeds)")
    p.add_argument("--law", default="sigmoid", help="sigmoid (ScaleRL; the RL family's one registered law)")
    p.add_argument(
        "--burn-in",
        type=float,
        default=None,
        metavar="C",
        help="exclude evaluations below this compute (default: runs: min(10%% of "
        "final compute, one pass over the prompts); CSV: none)",
    )
    p.add_argument(
        "--burn-in-frac",
        type=float,
        default=None,
        metavar="F",
        help="exclude the first fraction F of the final compute instead",
    )
    p.add_argument(
        "--r0", default="fit", help="fit (default) | start (fix to the measured start, as ScaleRL) | a number"
    )
    p.add_argument(
        "--ci",
        choices=("profile", "bootstrap"),
        default="profile",
        help="parameter intervals: profile likelihood (default) or bootstrap",
    )
    add_fit_until_frac_argument(p, None)
    add_json_argument(p, "the fit (params, ci, flags, verdict, per_seed, prediction)")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitRLOptions(CommandOptions):
    inputs: list[str]  # RL run directories or CSVs
    law: str
    burn_in: float | None
    burn_in_frac: float | None
    r0: str
    ci: str
    fit_until_frac: float | None


def run(args: argparse.Namespace) -> int:
    opts = FitRLOptions.from_args(args)
    # JAX-based fitting loads here, not at import, so `python -m analysis --help` stays fast.
    import analysis.rl.methods  # noqa: F401  (registers the RL law)
    from analysis.core.methods import Family, names
    from analysis.rl.curves import load_curve
    from analysis.rl.fitting import RLFitOptions, fit_recipe

    if opts.law not in names(Family.RL):
        raise AnalysisError(f"unknown --law {opts.law!r}; choose one of {', '.join(names(Family.RL))}")
    curves = [load_curve(i) for i in opts.inputs]
    fit_opts = RLFitOptions(
        burn_in=opts.burn_in,
        burn_in_frac=opts.burn_in_frac,
        r0=opts.r0,
        ci_method=opts.ci,
        fit_until_frac=opts.fit_until_frac,
    )
    enable_compile_cache()
    res = fit_recipe(curves, fit_opts)
    print(f"{opts.law} fit of {len(curves)} input(s): {res['verdict']}")
    _print_prediction(res, opts.fit_until_frac)
    for row in res.get("per_seed", []):
        line = f"  {row['input']}: {row['verdict']}"
        if "prediction" in row:
            line += f"; final |err| {row['prediction']['final_abs_error']:.3f}"
        print(line)
    emit_json(opts.json, res)
    return 0


def _print_prediction(res: dict, fit_until_frac: float | None) -> None:
    if "prediction" not in res:
        return
    pr = res["prediction"]
    tag = " (flagged: not a trustworthy extrapolation)" if pr["withheld"] else ""
    print(
        f"  prediction from the first {fit_until_frac:g} of compute: final "
        f"{pr['final_pred']:.3f} vs actual {pr['final_actual']:.3f} "
        f"(|err| {pr['final_abs_error']:.3f}, mean |err| {pr['mean_abs_error']:.3f}){tag}"
    )
