"""`python -m analysis forecast PREFIX [--train COMPLETE] [--choose KEY] --json PATH`: each run's final
loss, with a 90% interval, from the part of its curve seen so far (analysis/forecast).

PREFIX and COMPLETE are curves tables (CSV / Parquet: run, step, D, loss and optionally lr per logged
step; total_steps, N and any optim.* setting per run) or sweep directories. The forecast learns the
rest of a curve from COMPLETE's finished runs (without --train: PREFIX's own finished runs). With
`--choose optim.lr`, the runs that differ only in that key form a rung, and `choices` holds, per
rung, the run most likely to end best (`p_best`) and every member's chance: by a forecaster's
forecasts only when its picks beat the lowest loss at the cut on the finished runs' folds, else by
the loss at the cut (a `note:` line says which). JSON: `runs` [{run, final_loss, interval, frac_seen,
method, log_sd, value}], `choices` [{run, value, p_best, rung, members}], `fits`, `notes`,
`method_choice` {chosen, baseline, candidates, fold_errors, fold_regrets, note, ...}.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

from analysis.commands._flags import add_column_arguments, add_json_argument
from analysis.commands._options import ColumnOptions, emit_json

EXAMPLES = """\
examples:
  scalelab forecast outputs/sweep_partial --train outputs/sweep_done
  scalelab forecast curves.csv --choose optim.lr --json fc.json   # which LR will end best
docs/fit.md, "Forecasts and early stopping"."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "forecast",
        help="forecast each run's final loss (90%% interval) from the first part of its curve",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "prefix",
        metavar="RUNS",
        help="the runs to forecast: a curves CSV, a Parquet file or a sweep dir",
    )
    p.add_argument(
        "--train",
        metavar="RUNS",
        help="finished runs the forecast learns from, as RUNS (default: RUNS' finished runs)",
    )
    p.add_argument(
        "--choose",
        metavar="KEY",
        help="a setting (e.g. optim.lr): per rung of runs differing only in it, the chance each ends best",
    )
    p.add_argument(
        "--method",
        default="auto",
        choices=("auto", "transfer", "ratio", "mpl"),
        help="auto (default: the baseline unless mpl or transfer beats it on the finished runs' folds), "
        "transfer (the "
        "curve's shape learned from COMPLETE), ratio (the baseline: the loss at the cut x the median "
        "final/cut ratio) or mpl (the multi-power law; needs lr)",
    )
    add_column_arguments(p)
    add_json_argument(p, "runs [{run, final_loss, interval, frac_seen}] and choices [{run, value, p_best}]")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForecastOptions(ColumnOptions):
    prefix: str
    train: str | None
    choose: str | None
    method: str


def _runs(path: str, opts: ForecastOptions):
    """A sweep directory as its path (its curves are read from the run directories), a table read
    with the shared reader and the column flags."""
    import pathlib  # deferred: with the runs module, as in run()

    from analysis.core.runs import read_runs  # deferred: pandas, loaded when run

    return path if pathlib.Path(path).is_dir() else read_runs(path, opts.columns())


def run(args: argparse.Namespace) -> int:
    opts = ForecastOptions.from_args(args)
    # pandas and the readers load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.forecast import ForecastNote, forecast_runs, read_curves

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefix = read_curves(_runs(opts.prefix, opts), opts.prefix)
        complete = read_curves(_runs(opts.train, opts), opts.train) if opts.train else prefix
        result = forecast_runs(prefix, complete, opts.choose, opts.method)
    for w in caught:
        word = "note" if issubclass(w.category, ForecastNote) else "warning"
        print(f"{word}: {str(w.message).splitlines()[0]}")
    if result.notes or result.fits or result.runs:
        print(result.summary())
    emit_json(opts.json, result.to_dict())
    return 0
