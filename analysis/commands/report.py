"""`python -m analysis report SWEEP_DIR|RUNS_TABLE [--out DIR] [--budget C ...]`: the fitted-law report.

RUNS_TABLE: a .csv / .parquet / .pq runs table (`python -m analysis collect`'s, or one's own with
N, D and/or C, loss, optionally U), its columns found as `python -m analysis fit` finds them
(--n-col & co. name others); sections that need run directories are left out, said in one line."""

from __future__ import annotations

import argparse
import dataclasses

from analysis.commands._flags import (
    add_bootstrap_argument,
    add_budget_argument,
    add_column_arguments,
    add_json_argument,
    add_n_params_argument,
    add_seed_argument,
    add_unique_tokens_argument,
)
from analysis.commands._options import ColumnOptions, emit_json
from models.base.errors import AnalysisError


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportOptions(ColumnOptions):
    sweep_dir: str  # a sweep directory or a runs table
    more_sweeps: tuple[str, ...] = ()  # further sweeps, one recipe each: the "Recipes" section
    out: str | None
    budget: list[float] | None
    bootstrap: int
    seed: int
    hardware: str | None
    gpus: int
    n_params: str
    hparams: str | None
    unique_tokens: float | None


def _build(opts: ReportOptions, build_report) -> dict:
    return build_report(
        opts.sweep_dir,
        opts.out,
        budgets=opts.budget,
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        hardware=opts.hardware,
        gpus=opts.gpus,
        n_params=opts.n_params,
        hparams=opts.hparams,
        unique_tokens=opts.unique_tokens,
        columns=opts.columns(),
        recipes_from=opts.more_sweeps,
    )


def _run(args: argparse.Namespace) -> int:
    opts = ReportOptions.from_args(args)
    # The report pulls in JAX, pandas and matplotlib; loaded here so `--help` stays fast.
    from analysis.report.build import build_report
    from analysis.report.render import headline
    from models.base.jaxcache import enable_compile_cache

    enable_compile_cache()  # the law fits compile the same programs as `fit`: reuse them

    if opts.gpus <= 0:
        raise AnalysisError(f"--gpus must be a positive integer (got {opts.gpus})")
    if opts.unique_tokens is not None:  # a bad U fails before the fits
        # deferred, as the report above: the planner loads JAX
        from analysis.planning.data_limit import check_unique_tokens
        from analysis.planning.planner import DEFAULT_BATCH_TOKENS

        check_unique_tokens(opts.unique_tokens, DEFAULT_BATCH_TOKENS)
    from analysis.core import progress  # deferred: as the report's modules above

    with progress.bar(total=None, desc="report", unit="s"):  # the fits' own bars stack below it
        rep = _build(opts, build_report)
    if rep.get("verdict"):
        print(rep["verdict"])  # the answer first, as on the report's first screen
    for line in [] if rep.get("rl_only") else headline(rep):
        print(line)
    for n in rep.get("notes", []):
        print(f"note: {n}")
    for w in rep["warnings"]:
        print(f"warning: {w}")
    print(f"report: {rep['paths']['html']} (and report.md, report.json, figures/)")
    emit_json(opts.json, rep)
    return 0


EXAMPLES = """\
examples:
  scalelab report outputs/isoflop                       # outputs/isoflop/report/report.html
  scalelab report runs.csv --out rep --budget 1e22      # a runs table; the verdict at 1e22 FLOPs
  scalelab report outputs/ref outputs/other --out rep   # two recipes: adds the Recipes section
docs/report.md: how to read it."""


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="fitted-law report of a sweep or a runs table (HTML + Markdown + PNG figures)",
        description="Fit the law to the runs, check it on the held-out largest budget, and write "
        "report.html, report.md, report.json and figures: a verdict first, then the details.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sweep_dir",
        metavar="RUNS",
        help="runs: a sweep directory, a CSV or a Parquet file",
    )
    p.add_argument(
        "more_sweeps",
        nargs="*",
        metavar="OTHER_SWEEP",
        help="further sweeps or runs tables, one recipe each: adds a 'Recipes' section comparing them "
        "with SWEEP_DIR (python -m analysis compare); a sweep of sweep.recipes gets it on its own",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory (default: SWEEP_DIR/report; for a table T.csv: T-report beside it)",
    )
    add_budget_argument(p, "to state N*/D* for (default: 10x the largest swept budget)")
    add_bootstrap_argument(p, "for CIs")
    add_seed_argument(p)
    p.add_argument(
        "--hardware",
        default=None,
        metavar="NAME",
        help="with --budget: add a planning section (shape, layout, days) per budget on this hardware "
        "(a conf/hardware name such as h100-sxm, or a YAML path)",
    )
    p.add_argument("--gpus", type=int, default=1024, help="devices for the planning section (default 1024)")
    add_n_params_argument(p, "total", "total (the Chinchilla law's N); the fits, profiles and figures use it")
    p.add_argument(
        "--hparams",
        default=None,
        metavar="HP.json",
        help="hyperparameter laws from `python -m analysis fit-hparams --json`: adds the "
        "'Hyperparameter law' section and tunes the planning sections' recipe (default: "
        "SWEEP_DIR/hparams.json or SWEEP_DIR/../hparams.json when one exists)",
    )
    add_unique_tokens_argument(p, "each planning section (with --hardware and --budget)")
    add_column_arguments(p, "runs-table columns (as in `python -m analysis fit`; a runs table only)")
    add_json_argument(p, "the report's numbers (the same as report.json)")
    p.set_defaults(func=_run)
