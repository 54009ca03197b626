"""`python -m analysis fit-task LADDER.csv --predict TARGETS.csv --json OUT.json`: downstream accuracy.

LADDER.csv: `N, D, task, task_loss, accuracy` (optional `run`, `chance`, `C`); TARGETS.csv:
`N, D, task`. Per task: step 1 fits the task loss as L(N, D), step 2 the accuracy as a sigmoid
of the task loss; a direct sigmoid of (N, D) and the average of both compete, and a held-out check
on the ladder's largest size picks one (`method`). Each target gets its task loss, accuracy, 90% interval and
warnings; `--json` writes {"predictions": [...] in TARGETS order, "tasks": {task: {step1,
step2, n_runs, n_points, method, ...}}, "settings"}. See docs/downstream.md.
"""

from __future__ import annotations

import argparse
import dataclasses

from analysis.commands._flags import (
    add_bootstrap_argument,
    add_column_arguments,
    add_json_argument,
    add_runs_argument,
    add_seed_argument,
    law_name,
)
from analysis.commands._options import ColumnOptions, emit_json
from models.base.jaxcache import enable_compile_cache

EXAMPLES = """\
examples:
  scalelab fit-task ladder.csv --predict targets.csv --json tasks.json
  scalelab fit-task outputs/isoflop --predict targets.csv   # a sweep: its runs' task metrics
docs/downstream.md: the two steps, the methods and their backtest."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit-task",
        help="predict downstream-task accuracy (compute -> task loss -> accuracy)",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_runs_argument(p, "ladder", "a table: N, D, task, task_loss, accuracy [, run, chance, C]")
    p.add_argument(
        "--predict",
        required=True,
        metavar="CSV",
        help="points to predict at: N, D, task",
    )
    p.add_argument(
        "--law",
        default="chinchilla_tied",
        metavar="NAME|FIT.json",
        help="the step-1 law of the task loss: chinchilla_tied (default), chinchilla, or auto "
        "(the better by forward-chaining); a name or a fit's JSON",
    )
    p.add_argument(
        "--method",
        choices=("auto", "average", "chain", "direct"),
        default="auto",
        help="auto (default): per task, the candidate that predicted the ladder's largest size best "
        "from the smaller ones (the chain, the direct fit, or their average); average, chain or "
        "direct: restrict the choice to that method",
    )
    add_bootstrap_argument(p, "of the runs for the intervals")
    add_seed_argument(p)
    add_column_arguments(p)
    add_json_argument(p, "the predictions and per-task fits")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitTaskOptions(ColumnOptions):
    ladder: str  # the ladder table
    predict: str  # the targets table
    law: str
    method: str
    bootstrap: int
    seed: int


def _ladder(opts: FitTaskOptions):
    """The ladder: a table, or a sweep directory's runs as their task table (`collect --tasks`)."""
    import pathlib  # deferred: with the runs module, as in run()

    from analysis.core import runs  # deferred: pandas and the run readers, loaded when run

    if pathlib.Path(opts.ladder).is_dir():
        return runs.with_named_columns(runs.task_table(runs.read_runs(opts.ladder)), opts.columns())
    return runs.read_runs(opts.ladder, opts.columns())


def run(args: argparse.Namespace) -> int:
    opts = FitTaskOptions.from_args(args, law=law_name(args.law))
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.core.table import read_table
    from analysis.downstream import fit_downstream
    from analysis.downstream.data import read_ladder, read_targets
    from analysis.laws.registry import get_law
    from analysis.laws.selection import AUTO

    if opts.law != AUTO:
        get_law(opts.law)  # unknown law: fail before reading data
    ladder, targets = _ladder(opts), read_table(opts.predict)
    read_targets(targets, list(read_ladder(ladder)))  # bad input fails before the (seconds-long) fits
    enable_compile_cache()
    fit = fit_downstream(ladder, law=opts.law, bootstrap=opts.bootstrap, seed=opts.seed, method=opts.method)
    predictions = fit.predict(targets)
    _print(fit, predictions)
    emit_json(opts.json, fit.to_dict(predictions))
    return 0


def _print(fit, predictions) -> None:
    """Human-readable lines: one per task (method, held-out error), one per prediction."""
    for task, tf in fit.tasks.items():
        sel = tf.selection
        score = sel.fold_mae.get(sel.chosen)
        held = f"held-out MAE {100 * score:.2f} pts" if score == score else "no held-out check"
        print(
            f"{task}: {tf.chosen.candidate.name} ({held}; step 1 {tf.step1.law}, {tf.rows.n_runs} runs, "
            f"chance {tf.rows.chance:.3g} [{tf.rows.chance_source}])"
        )
        for w in tf.warnings:
            print(f"  warning: {w}")
        em = tf.error_model
        if em.scatter_binds:
            print(
                f"  note: interval noise set by the run-to-run scatter ({100 * em.run_scatter_sd:.2f} pts), "
                "not the curve's residuals: no interval is narrower than the ladder's scatter allows"
            )
    for p in predictions:
        lo, hi = p.accuracy_interval
        print(
            f"  {p.task} N={p.N:.4g} D={p.D:.4g}: task loss {p.task_loss:.4g}, accuracy {p.accuracy:.4f} "
            f"[{lo:.4f}, {hi:.4f}] ({p.method})"
            + "".join(f"\n    warning: {w}" for w in p.warnings if w not in fit.tasks[p.task].warnings)
        )
