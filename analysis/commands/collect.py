"""`scalelab collect SOURCE [SOURCE ...] --out DIR`: the runs table, DIR/runs.csv.

From run directories (`--from sweep`, the default): one row per completed run found under the
directories (summary.json + the flattened Hydra config, see analysis.core.runs), with N, D, C and
loss as its first columns, so that `scalelab fit DIR/runs.csv` needs no column flags. From a
tracker (`--from tensorboard|mlflow|wandb`, analysis.core.trackers): the same table from runs
logged to TensorBoard event files, an MLflow tracking server or store, or a W&B runs export.

`--out DIR` writes DIR/runs.csv (DIR is created); an `--out` ending in .csv or .parquet writes
that file (deprecated: one note says so). `--curves` also writes the long per-step table;
`--tasks` writes the long downstream-task table (one row per run, eval and task: N, D, C, task,
task_loss, accuracy, chance, run, step), the LADDER.csv `scalelab fit-task` reads.
Runs that differ only in `optim.*` (an LR sweep per rung) are grouped (`hparam_group`) and the
best of each group is marked `selected`, the rows `fit` uses; a one-line note says so, and a
warning names any best run at the edge of the swept range.
"""

from __future__ import annotations

import argparse
import dataclasses
import mimetypes
import pathlib
import sys
import warnings

from analysis.commands._flags import add_json_argument
from analysis.commands._options import CommandOptions, emit_json
from models.base.errors import AnalysisError

SOURCES = ("sweep", "tensorboard", "mlflow", "wandb")
RUNS_FILE = "runs.csv"  # what `--out DIR` writes
TABLE_SUFFIXES = (".csv", ".parquet")  # an `--out` FILE (deprecated)
NOT_A_DIR_SUFFIXES = (".pq", ".jsonl", ".feather", ".arrow", ".tsv", ".txt", ".json", ".xlsx")
DEPRECATED_OUT = "note: --out FILE is deprecated: --out DIR writes DIR/runs.csv"

EXAMPLES = """\
examples:
  scalelab collect outputs/isoflop --out tables                # run directories -> tables/runs.csv
  scalelab collect --from tensorboard outputs/ --out tables    # the trainer's tracker=tensorboard runs
  scalelab collect --from mlflow http://127.0.0.1:5000 --experiment isoflop --out tables --curves c.csv
  scalelab collect --from wandb runs_export.csv --history history.csv --out tables
docs/fit.md: the columns, each source's formats, the status rules."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect",
        help="collect runs (run directories, TensorBoard, MLflow, W&B) into a runs table for `fit`",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="run or sweep directories (searched recursively); with --from: event-file directories "
        "(tensorboard), a tracking URI or mlruns / .db path (mlflow), a runs export .csv/.json (wandb)",
    )
    p.add_argument(
        "--from",
        dest="source",
        choices=SOURCES,
        default="sweep",
        help="what SOURCE is (default sweep: run directories)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="directory to write runs.csv in (created); a .csv/.parquet FILE still works (deprecated)",
    )
    p.add_argument("--curves", metavar="PATH", help="also write the per-step curves table (.csv or .parquet)")
    p.add_argument(
        "--tasks",
        metavar="PATH",
        help="also write the downstream-task table (fit-task's LADDER.csv: one row per run, eval, task)",
    )
    p.add_argument(
        "--include-unfinished",
        action="store_true",
        help="keep runs that did not complete (diverged, failed, unfinished) with their status",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="parse every run afresh instead of using the Parquet cache ($SCALELAB_CACHE_DIR)",
    )
    p.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="--from mlflow: only this experiment's runs (repeatable; default: every active one)",
    )
    p.add_argument(
        "--history",
        metavar="FILE",
        help="--from wandb: the history export (step rows with a run-name column) for --curves/--tasks",
    )
    p.add_argument(
        "--loss-metric",
        metavar="NAME",
        help="with --from: the metric whose last value is final_eval_loss (default: eval/loss, "
        "eval_loss, val/loss, val_loss, ... whichever a run logged)",
    )
    add_json_argument(p, "the runs table as {'columns': [...], 'runs': [{...}, ...]}")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectOptions(CommandOptions):
    sources: list[str]
    source: str = "sweep"
    out: str
    curves: str | None = None
    tasks: str | None = None
    include_unfinished: bool = False
    no_cache: bool = False
    experiment: list[str] | None = None
    history: str | None = None
    loss_metric: str | None = None


def out_target(out: str) -> tuple[pathlib.Path, bool]:
    """(the runs table's path, whether `--out` named the file itself: the deprecated form)."""
    path = pathlib.Path(out)
    suffix = path.suffix.lower()
    if suffix in TABLE_SUFFIXES and not path.is_dir():
        return path, True
    looks_like_a_file = suffix in NOT_A_DIR_SUFFIXES or (suffix and mimetypes.guess_type(path.name)[0])
    if looks_like_a_file and not path.is_dir():
        raise AnalysisError(
            f"--out {out}: a runs table file must end in {' or '.join(TABLE_SUFFIXES)}; "
            f"--out DIR writes DIR/{RUNS_FILE}"
        )
    if path.exists() and not path.is_dir():
        raise AnalysisError(f"--out {out} is a file: --out DIR writes DIR/{RUNS_FILE}")
    return path / RUNS_FILE, False


def _check_flags(opts: CollectOptions) -> None:
    """Flags that belong to another source are one error line, not silently ignored."""
    for flag, value, source in (
        ("--experiment", opts.experiment, "mlflow"),
        ("--history", opts.history, "wandb"),
    ):
        if value and opts.source != source:
            raise AnalysisError(f"{flag} is for --from {source} (got --from {opts.source})")
    if opts.loss_metric and opts.source == "sweep":
        raise AnalysisError(
            "--loss-metric is for --from tensorboard|mlflow|wandb (run directories' loss is "
            "summary.json's final_eval_loss)"
        )


def run(args: argparse.Namespace) -> int:
    opts = CollectOptions.from_args(args)
    _check_flags(opts)
    table_path, deprecated = out_target(opts.out)
    # pandas (and a tracker's package) load here, not at import, so `scalelab --help` stays fast.
    from analysis.core import runs, trackers

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", runs.RunWarning)
        if opts.source == "sweep":
            runs_df, curves = runs.load(
                *opts.sources, cache_dir=not opts.no_cache, include_unfinished=opts.include_unfinished
            )
            table = runs.with_roles(runs_df)
        else:
            table, curves = trackers.load(
                opts.source,
                opts.sources,
                experiments=opts.experiment,
                history_file=opts.history,
                loss_metric=opts.loss_metric,
                history=bool(opts.curves or opts.tasks),
                include_unfinished=opts.include_unfinished,
            )
            runs_df = table
    said = dict.fromkeys(
        (w.category, str(w.message)) for w in caught if issubclass(w.category, runs.RunWarning)
    )
    for category, msg in said:
        print(f"{'note' if issubclass(category, runs.RunNote) else 'warning'}: {msg}", file=sys.stderr)
    df, sel = runs.with_selection(table)
    _print_selection(sel)
    if not deprecated:
        table_path.parent.mkdir(parents=True, exist_ok=True)
    runs.write_table(df, table_path)
    print(f"wrote {table_path}: {len(df)} run(s), {len(df.columns)} columns (N, D, C, loss first)")
    if deprecated:
        print(DEPRECATED_OUT, file=sys.stderr)
    if opts.curves:
        if curves.empty and opts.source != "sweep":
            print(f"warning: no per-step history in {opts.source}; {opts.curves} is empty", file=sys.stderr)
        runs.write_table(curves, opts.curves)
        print(f"wrote {opts.curves}: {len(curves)} rows")
    if opts.tasks:
        tasks = runs.task_table(runs_df, curves if opts.source == "sweep" or not curves.empty else None)
        if tasks.empty:
            print(
                f"warning: no run logged task metrics (eval.tasks); {opts.tasks} has no rows", file=sys.stderr
            )
        runs.write_table(tasks, opts.tasks)
        print(
            f"wrote {opts.tasks}: {len(tasks)} rows, {tasks['task'].nunique()} task(s) (fit-task LADDER.csv)"
        )
    out = {"columns": list(df.columns), "runs": df.to_dict(orient="records")}
    if sel is not None:
        out["hparams"] = sel.to_dict()
    emit_json(opts.json, out)
    return 0


def _print_selection(sel) -> None:
    """The one line saying which runs fits will use, and the edge-of-range warnings."""
    if sel is None or not sel.active:
        return
    print(f"{sel.message} (column `selected`)")
    for w in sel.warnings:
        print(f"warning: {w}", file=sys.stderr)
