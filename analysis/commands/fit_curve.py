"""`python -m analysis fit-curve --law mpl --fit A.csv [...] [--predict X.csv ...]`.

Fits the multi-power law (Luo et al. 2025) on whole curves (CSV columns step, lr, loss; or run
directories) and/or on their first steps (`--fit-until STEP`), then predicts the rest of those
curves and every `--predict` curve, each point with a 90% forecast interval (a Gaussian log error
whose scatter, budget and drift terms are measured on the fit's own leave-one-curve-out and
early-part refits: `analysis/curves/intervals.py`). `--json` writes params, the convergence
report, `interval_model`, and `predictions`: curve name -> {mean_rel_error, max_rel_error,
final_loss_pred, final_loss_actual, n_points, interval_coverage, interval_mean_rel_width,
interval_final, step, predicted, interval_lo, interval_hi}. The fit is the multistart protocol (Luo
et al.'s: warm-up rises in the drop sum, their start, early-stopped AdamW, from 27 annealing starts,
the lowest objective kept; `analysis/curves/protocol.py`); with `--fix`, L-BFGS to the optimum.
"""

from __future__ import annotations

import argparse
import dataclasses

from analysis.commands._flags import add_fix_argument, add_json_argument
from analysis.commands._options import CommandOptions, emit_json, parse_fixed
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit-curve",
        help="fit the multi-power loss-curve law and forecast curves",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "--law",
        default="mpl",
        choices=("mpl", "cpt_curve"),
        help="mpl (Luo et al. 2025; default) or cpt_curve (a continual-pre-training sweep's base and "
        "continued runs: both domains' curves, docs/fit.md)",
    )
    p.add_argument("--fit", nargs="+", required=True, metavar="CURVE", help="curves to fit (CSV or run dir)")
    p.add_argument(
        "--predict-curves",
        dest="predict",
        nargs="*",
        default=[],
        metavar="CURVE",
        help="curves (schedules) to predict in full",
    )
    p.add_argument("--fit-until", type=int, help="fit only steps <= this; predict the later steps")
    add_fix_argument(p)
    p.add_argument(
        "--resolution",
        type=int,
        default=32,
        help="steps per annealing quadrature node (default 32; 1 = exact per-step sum)",
    )
    p.add_argument(
        "--warmup",
        choices=("linear", "constant"),
        default="linear",
        help="schedule before the first logged step (default: linear warm-up from 0)",
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        help="step where the linear warm-up ends (default: the first logged step)",
    )
    p.add_argument(
        "--search",
        dest="protocol",
        default=None,
        help="how the parameters are found: multistart (Luo et al.'s fit from 27 starts, the lowest "
        "objective; the default without --fix)",
    )
    p.add_argument(
        "--no-intervals",
        action="store_true",
        help="skip the forecast intervals (saves the calibration refits)",
    )
    add_json_argument(p, "params, the convergence report, per-curve prediction errors and 90%% intervals")
    p.set_defaults(func=run)


def _print_result(r) -> None:
    print(r.summary())
    if r.intervals is not None:
        m = r.intervals
        print(f"  90% intervals: {m.describe()}; from {len(m.refits)} refits, {len(m.units)} forecast curves")
    for name, e in r.predictions.items():
        line = (
            f"  {name}: mean |rel err| {e['mean_rel_error']:.3%}, max {e['max_rel_error']:.3%}, "
            f"final loss {e['final_loss_pred']:.4f} (actual {e['final_loss_actual']:.4f})"
        )
        if "interval_coverage" in e:
            lo, hi = e["interval_final"]
            line += f", 90% [{lo:.4f}, {hi:.4f}], {e['interval_coverage']:.0%} of points inside"
        print(line)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitCurveOptions(CommandOptions):
    law: str
    fit: list[str]  # curves to fit (CSV or run directory)
    predict: list[str]  # curves to predict in full
    fit_until: int | None
    fix: dict[str, float]  # parameters held fixed
    resolution: int
    warmup: str
    warmup_steps: int | None
    protocol: str | None
    no_intervals: bool


def run(args: argparse.Namespace) -> int:
    opts = FitCurveOptions.from_args(args, fix=parse_fixed(args.fix))
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.curves.fitting import fit_curve, load_curve

    if opts.law == "cpt_curve":
        return _cpt_curve(opts)
    enable_compile_cache()
    fit = [load_curve(c, warmup=opts.warmup, warmup_steps=opts.warmup_steps) for c in opts.fit]
    pred = [load_curve(c, warmup=opts.warmup, warmup_steps=opts.warmup_steps) for c in opts.predict]
    r = fit_curve(
        fit,
        opts.law,
        predict=pred,
        fit_until=opts.fit_until,
        fixed=opts.fix,
        resolution=opts.resolution,
        intervals=not opts.no_intervals,
        protocol=opts.protocol,
    )
    _print_result(r)
    emit_json(opts.json, r.to_dict())
    return 0


def _cpt_curve(opts: FitCurveOptions) -> int:
    """The continual-pre-training curve law on a sweep's base and continued runs (numpy + SciPy)."""
    from analysis.curves.cpt import fit_cpt_curves  # start-up time: SciPy and pandas load on use

    if opts.predict or opts.fit_until is not None or opts.fix:
        raise AnalysisError("--law cpt_curve takes --fit SWEEP_DIR [--json PATH] only")
    fit = fit_cpt_curves(opts.fit if len(opts.fit) > 1 else opts.fit[0])
    print(fit.summary())
    emit_json(opts.json, fit.to_dict())
    return 0
