"""`python -m analysis backtest DATA --protocol P`: how each candidate method predicted the top of
your own ladder when it was hidden, next to the protocol's simple baseline and the default.

Protocols (docs/analysis.md, "Backtesting"): budget (runs above --holdout-above C; default the
largest budget), frontier (the best loss of each hidden budget), size (--holdout-above-n N),
epochs (--holdout-epochs-above E, default 4), lr (rungs above --holdout-above-n: their optimum
learning rate), downstream (the largest models' task accuracy), curve (schedules held out, as
fit-curve does). Prints a table; --json, --markdown and --figure write the same result.
"""

from __future__ import annotations

import pathlib

from analysis.commands._options import add_json_argument, emit_json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "backtest",
        help="hide the top of a ladder, fit every candidate method, score it on what it did not see",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "data",
        help="runs table (CSV or parquet); downstream: fit-task's ladder table (N, D, task, task_loss, "
        "accuracy); curve: what fit-curve reads",
    )
    p.add_argument(
        "--protocol",
        required=True,
        choices=("budget", "frontier", "size", "epochs", "lr", "batch", "downstream", "curve", "cooldown"),
        help="what is hidden (docs/analysis.md, 'Backtesting')",
    )
    p.add_argument(
        "--holdout-above", type=float, metavar="C", help="budget/frontier: hide runs with C above this"
    )
    p.add_argument(
        "--holdout-above-n",
        type=float,
        metavar="N",
        help="size/lr/downstream: hide runs (rungs) with N above this",
    )
    p.add_argument(
        "--holdout-epochs-above",
        type=float,
        default=4.0,
        metavar="E",
        help="epochs: hide runs of more epochs (default 4)",
    )
    p.add_argument(
        "--bootstrap", type=int, default=100, help="bootstrap resamples per candidate fit (default 100)"
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap and interval seed (default 0)")
    p.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    p.add_argument("--figure", metavar="PATH", help="draw predicted against actual per method (PNG/PDF/SVG)")
    add_json_argument(p, "the backtest: protocol, cut, methods")
    p.set_defaults(func=run)


def run(args) -> int:
    import dataclasses
    import warnings

    from analysis import backtest
    from analysis.backtest import render
    from models.base.errors import AnalysisError
    from models.base.jaxcache import enable_compile_cache
    from models.base.jsonio import write_text_atomic

    if args.bootstrap < 0:
        raise AnalysisError(f"--bootstrap must be >= 0, got {args.bootstrap}")
    for flag in ("markdown", "figure"):
        path = getattr(args, flag)
        if path and not pathlib.Path(path).parent.is_dir():
            raise AnalysisError(f"--{flag}: directory {pathlib.Path(path).parent} does not exist")
    enable_compile_cache()
    opt = backtest.Options(
        holdout_above=args.holdout_above,
        holdout_above_n=args.holdout_above_n,
        holdout_epochs_above=args.holdout_epochs_above,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bt = backtest.run(args.data, args.protocol, opt)
    seen = dict.fromkeys(
        str(w.message).splitlines()[0] for w in caught if issubclass(w.category, UserWarning)
    )
    bt = dataclasses.replace(bt, warnings=tuple(bt.warnings) + tuple(seen))
    print(render.text(bt))
    if args.markdown:
        write_text_atomic(args.markdown, render.markdown(bt))
        print(f"wrote {args.markdown}")
    if args.figure:
        render.figure(bt, args.figure)
        print(f"wrote {args.figure}")
    emit_json(args, bt.to_dict())
    return 0
