"""`python -m analysis backtest DATA --protocol P`: how each candidate method predicted the top of
your own ladder when it was hidden, next to the protocol's simple baseline and the default.

Protocols (docs/analysis.md, "Backtesting"): budget (runs above --holdout-above C; default the
largest budget), frontier (the best loss of each hidden budget), size (--holdout-above-n N),
epochs (--holdout-epochs-above E, default 4), lr (rungs above --holdout-above-n: their optimum
learning rate), downstream (the largest models' task accuracy), curve (schedules held out, as
fit-curve does), compare (a table of two recipes' ladders with a `recipe` column: the top
budgets of both hidden, the compute multiplier scored in log2), moe (a mixture-of-experts ladder,
N x experts (x D): the models above --holdout-above-n, default the largest, hidden; --law moe's
choice against the log-bilinear baseline), cpt (a continual-pre-training ladder: the largest
model's continued runs hidden, or with --holdout-above D those with more new tokens; --law cpt
against a per-domain Chinchilla baseline, both domains scored). Prints a table; --json,
--markdown and --figure write the same result.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import warnings

from analysis.commands._flags import (
    add_bootstrap_argument,
    add_column_arguments,
    add_json_argument,
    add_runs_argument,
    add_seed_argument,
)
from analysis.commands._options import ColumnOptions, emit_json
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache
from models.base.jsonio import write_text_atomic

EXAMPLES = """\
examples:
  scalelab backtest runs.csv                                   # hide the top budgets
  scalelab backtest runs.csv --protocol size --holdout-above-n 5e8
  scalelab backtest outputs/isoflop --protocol epochs --json bt.json
The default of every fitting command is chosen on these folds; docs/backtest.md."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "backtest",
        help="hide the top of a ladder, fit every candidate method, score it on what it did not see",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_runs_argument(p, what="downstream: fit-task's ladder; curve, cooldown, curve-prefix: curves")
    p.add_argument(
        "--protocol",
        default="budget",
        choices=(
            "budget",
            "frontier",
            "size",
            "epochs",
            "lr",
            "batch",
            "downstream",
            "curve",
            "cooldown",
            "compare",
            "curve-prefix",
            "moe",
            "cpt",
            "cpt-curve",
        ),
        help="what is hidden (default budget: the largest budgets; docs/backtest.md)",
    )
    p.add_argument(
        "--holdout-above", type=float, metavar="C", help="budget/frontier: hide runs with C above this"
    )
    p.add_argument(
        "--holdout-above-n",
        type=float,
        metavar="N",
        help="size/lr/downstream/moe: hide runs (rungs) with N above this",
    )
    p.add_argument(
        "--holdout-epochs-above",
        type=float,
        default=4.0,
        metavar="E",
        help="epochs: hide runs of more epochs (default 4)",
    )
    add_bootstrap_argument(p, "per candidate fit")
    add_column_arguments(p)
    add_seed_argument(p)
    p.add_argument(
        "--only-default",
        action="store_true",
        help="score the baseline and the default only, not every candidate (faster)",
    )
    p.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    p.add_argument("--figure", metavar="PATH", help="draw predicted against actual per method (PNG/PDF/SVG)")
    add_json_argument(p, "the backtest: protocol, cut, methods")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BacktestOptions(ColumnOptions):
    data: str
    protocol: str
    holdout_above: float | None
    holdout_above_n: float | None
    holdout_epochs_above: float
    bootstrap: int
    seed: int
    markdown: str | None
    figure: str | None
    only_default: bool


def _data(opts: BacktestOptions, backtest):
    """The runs (read with the shared reader and column flags), or for the curve protocols their path."""
    if backtest.Protocol(opts.protocol) in backtest.PATH_PROTOCOLS:
        if opts.columns():
            raise AnalysisError(f"--protocol {opts.protocol} reads curves: drop the column flags")
        return opts.data
    from analysis.core.runs import read_runs  # deferred: pandas, as in run()

    return read_runs(opts.data, opts.columns())


def run(args: argparse.Namespace) -> int:
    opts = BacktestOptions.from_args(args)
    # pandas, JAX and the fits load here, not at import, so `python -m analysis --help` stays fast.
    from analysis import backtests as backtest
    from analysis.backtests import render

    if opts.bootstrap < 0:
        raise AnalysisError(f"--bootstrap must be >= 0, got {opts.bootstrap}")
    for flag, path in (("markdown", opts.markdown), ("figure", opts.figure)):
        if path and not pathlib.Path(path).parent.is_dir():
            raise AnalysisError(f"--{flag}: directory {pathlib.Path(path).parent} does not exist")
    enable_compile_cache()
    opt = backtest.Options(
        holdout_above=opts.holdout_above,
        holdout_above_n=opts.holdout_above_n,
        holdout_epochs_above=opts.holdout_epochs_above,
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        only_default=opts.only_default,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bt = backtest.run(_data(opts, backtest), opts.protocol, opt)
    seen = dict.fromkeys(
        str(w.message).splitlines()[0] for w in caught if issubclass(w.category, UserWarning)
    )
    bt = dataclasses.replace(bt, warnings=tuple(bt.warnings) + tuple(seen))
    print(render.text(bt))
    if opts.markdown:
        write_text_atomic(opts.markdown, render.markdown(bt))
        print(f"wrote {opts.markdown}")
    if opts.figure:
        render.figure(bt, opts.figure)
        print(f"wrote {opts.figure}")
    emit_json(opts.json, bt.to_dict())
    return 0
