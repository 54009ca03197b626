"""`python -m analysis collect SWEEP_DIR [SWEEP_DIR ...] --out runs.csv`: the runs table.

One row per completed run found under the directories (summary.json + the flattened Hydra
config, see analysis.core.runs), with N, D, C and loss as its first columns, so that
`python -m analysis fit runs.csv` needs no column flags. `--out` ending in .parquet writes
Parquet; `--curves` also writes the long per-step table (metrics.jsonl of every run); `--tasks`
writes the long downstream-task table (one row per run, eval and task: N, D, C, task, task_loss,
accuracy, chance, run, step), the LADDER.csv `python -m analysis fit-task` reads.
Runs that differ only in `optim.*` (an LR sweep per rung) are grouped (`hparam_group`) and the
best of each group is marked `selected`, the rows `fit` uses; a one-line note says so, and a
warning names any best run at the edge of the swept range.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings

from analysis.commands._flags import add_json_argument
from analysis.commands._options import CommandOptions, emit_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect",
        help="collect run directories into a runs table (CSV/Parquet) for `fit`",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "sweep_dirs",
        nargs="+",
        metavar="SWEEP_DIR",
        help="sweep directory, run directory or any folder of runs (searched recursively)",
    )
    p.add_argument(
        "--out", required=True, metavar="PATH", help="runs table to write: .csv or .parquet (by extension)"
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
    add_json_argument(p, "the runs table as {'columns': [...], 'runs': [{...}, ...]}")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectOptions(CommandOptions):
    sweep_dirs: list[str]
    out: str
    curves: str | None
    tasks: str | None
    include_unfinished: bool
    no_cache: bool


def run(args: argparse.Namespace) -> int:
    opts = CollectOptions.from_args(args)
    # pandas loads here, not at import, so `python -m analysis --help` stays fast.
    from analysis.core import runs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", runs.RunWarning)
        runs_df, curves = runs.load(
            *opts.sweep_dirs, cache_dir=not opts.no_cache, include_unfinished=opts.include_unfinished
        )
    said = dict.fromkeys(
        (w.category, str(w.message)) for w in caught if issubclass(w.category, runs.RunWarning)
    )
    for category, msg in said:
        print(f"{'note' if issubclass(category, runs.RunNote) else 'warning'}: {msg}", file=sys.stderr)
    df, sel = runs.with_selection(runs.with_roles(runs_df))
    _print_selection(sel)
    runs.write_table(df, opts.out)
    print(f"wrote {opts.out}: {len(df)} run(s), {len(df.columns)} columns (N, D, C, loss first)")
    if opts.curves:
        runs.write_table(curves, opts.curves)
        print(f"wrote {opts.curves}: {len(curves)} rows")
    if opts.tasks:
        tasks = runs.task_table(runs_df, curves)
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
