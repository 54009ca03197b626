"""`python -m analysis fit DATA.csv --law chinchilla ... --json OUT.json`: fit a point law.

Prints the parameters with CIs and the convergence report; `--json` writes the full result
(params, ci, objective, n_points, converged, starts_at_optimum, allocation, holdout,
param_names, bootstrap_samples, ...), the schema documented in docs/analysis.md.
A runs table from `collect` whose runs differ only in `optim.*` (an LR sweep per rung) is fitted
on the best run per (budget, shape) (analysis.core.best_runs), said in one line and recorded as
`hparam_selection` in the JSON; `--all-runs` fits every row instead.
`--predict TARGETS.csv` adds `predictions`: per target row, in order, its inputs, the predicted
loss and its 90% prediction interval (`{N, D, U?, experts?, loss, interval: [lo, hi]}`).
`--law moe` fits a mixture-of-experts law in N (active parameters), experts and, where the runs
vary it, D, the form chosen by forward-chaining in N against the log-bilinear baseline
(analysis/laws/moe.py); `law_selection` in the JSON says which and why.
`--formula EXPR` fits a law you write (analysis/laws/formula.py, groups.py): `--input`, `--target`,
`--param` bounds and starts, `--group`/`--shared` per-group parameters, several targets; `--formula
search` searches a grammar of forms by the runs' own backtest (analysis/laws/formula_search.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings

from analysis.commands._fit_formula import add_formula_arguments, reemit, run_formula
from analysis.commands._flags import (
    add_bootstrap_argument,
    add_budget_argument,
    add_column_arguments,
    add_fix_argument,
    add_json_argument,
    add_law_argument,
    add_n_params_argument,
    add_runs_argument,
    add_seed_argument,
    law_name,
)
from analysis.commands._options import ColumnOptions, emit_json, parse_fixed
from analysis.core.enums import DEFAULT_LAW, NParams, Precision
from analysis.laws.text import fit_lines
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache

EXAMPLES = """\
examples:
  scalelab fit runs.csv --json fit.json                 # the default law, 95% CIs, the optimum
  scalelab fit outputs/isoflop --budget 1e21,1e22       # a sweep directory; N*, D* at two budgets
  scalelab fit runs.csv --law auto --holdout-above 1e20 # fit below 1e20 FLOPs, predict above
  scalelab fit runs.csv --predict targets.csv           # the loss of planned runs, 90% intervals
  scalelab fit runs.csv --formula "E + A / N**a + B / V**b" --input N=params --input V=vocab
  scalelab fit sft.csv --formula "A / (n**alpha + B) + C" --group model --shared alpha
docs/fit.md: the laws, the default's choice on repeated data, the JSON schema, your own law."""
USAGE = (
    "%(prog)s RUNS [--law NAME|FIT.json] [options]\n"
    "       %(prog)s RUNS --formula EXPR|@FILE|search [options]"
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit",
        help="fit a scaling law to runs (CSV, Parquet or a sweep directory)",
        description=__doc__.splitlines()[0],
        usage=USAGE,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_runs_argument(p)
    add_law_argument(
        p,
        "chinchilla (auto when the runs repeat their data: their own backtests choose)",
        "chinchilla, auto, data_constrained, moe, ...: `scalelab fit --law x` lists them",
    )
    add_column_arguments(p, x=True, experts=True)
    add_n_params_argument(p, None, "total (a user law: its registered default)")
    p.add_argument("--weight-col", metavar="NAME", help="column of per-run weights")
    add_bootstrap_argument(p, "for the CIs")
    add_seed_argument(p)
    p.add_argument(
        "--holdout-above", type=float, metavar="C", help="leave runs with C above this out; predict them"
    )
    p.add_argument(
        "--at-optimum",
        action="store_true",
        help="LR sweep per rung: fit each rung's loss at its fitted LR optimum, not its best run's",
    )
    p.add_argument(
        "--all-runs", action="store_true", help="fit every row, not only the best run per (budget, shape)"
    )
    add_budget_argument(p, "to state the compute-optimal N*, D* for")
    add_fix_argument(p)
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="Huber delta on log residuals (default 1e-3, Hoffmann et al.'s; --formula: 1 = least squares)",
    )
    p.add_argument(
        "--solver-precision",
        dest="precision",
        choices=tuple(Precision),
        default=Precision.AUTO,
        help="auto (default): float32 search + float64 polish for big grids; mixed: always; float64",
    )
    p.add_argument(
        "--approach2",
        choices=("parabola", "cubic", "law"),
        help="also fit IsoFLOP profiles (Approach 2) and compare their exponent",
    )
    p.add_argument(
        "--predict",
        metavar="CSV",
        help="points to predict at (the law's inputs: N, D; U, experts where the law has them)",
    )
    add_json_argument(p, "the fit (schema in docs/fit.md)")
    add_formula_arguments(p)
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitCommandOptions(ColumnOptions):
    data: str  # the runs table
    law: str | None  # None: chinchilla, or the data-constrained law when the runs repeat their data
    n_params: NParams | None
    weight_col: str | None
    bootstrap: int
    seed: int
    holdout_above: float | None
    at_optimum: bool
    all_runs: bool
    budget: list[float] | None
    fix: dict[str, float]  # parameters held fixed
    delta: float | None  # None: 1e-3 for a registered law, least squares (1) for --formula
    precision: Precision
    approach2: str | None
    predict: str | None  # TARGETS.csv
    formula: list[str] | None = None  # --formula (repeatable); None: a registered law (--law)
    inputs: list[str] | None = None
    target: list[str] | None = None
    params: list[str] | None = None
    group: str | None = None
    shared: str | None = None
    scale: str | None = None


def run(args: argparse.Namespace) -> int:
    opts = FitCommandOptions.from_args(
        args,
        fix=parse_fixed(args.fix),
        n_params=None if args.n_params is None else NParams(args.n_params),
        precision=Precision(args.precision),
        law=law_name(args.law),
    )
    if opts.formula:
        return run_formula(opts)
    if any(v for v in (opts.inputs, opts.target, opts.params, opts.group, opts.shared, opts.scale)):
        raise AnalysisError("--input, --target, --param, --group, --shared and --scale go with --formula")
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.core.table import FitNotice
    from analysis.laws.fitting import DEFAULT_DELTA
    from analysis.laws.methods import fit_point, law_choices
    from analysis.laws.selection import default_law
    from analysis.laws.targets import predict_targets, prediction_lines

    enable_compile_cache()
    if opts.law is not None and opts.law not in law_choices():  # fail before reading data
        raise AnalysisError(f"unknown law {opts.law!r}; choose from {', '.join(law_choices())}")
    columns = opts.columns()
    targets = _read_targets(opts, columns)  # a bad TARGETS file fails before the fit
    data, selection = _fit_rows(opts)
    law = opts.law
    if law is None:
        law = default_law(data, columns)
        if law != DEFAULT_LAW:
            print("law: auto (the runs repeat their data, D > U: their own epochs and size backtests choose)")
    kwargs = dict(
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        holdout_above=opts.holdout_above,
        weights=opts.weight_col,
        fixed=opts.fix,
        delta=DEFAULT_DELTA if opts.delta is None else opts.delta,
        precision=opts.precision,
        n_params=opts.n_params,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FitNotice)
        fit = fit_point(law, data, columns, **kwargs)
    reemit(caught, FitNotice)
    if fit.law_selection is not None:
        print(fit.law_selection.message)
        if fit.law_selection.note:
            print(f"note: {fit.law_selection.note}")
    print(fit.summary())
    result = fit.to_dict(opts.budget)
    if selection is not None:
        result["hparam_selection"] = selection
    for line in fit_lines(fit, result, opts.budget):
        print(line)
    if opts.approach2:
        result.update(_approach2(fit, opts, columns, data))
    if targets is not None:
        result["predictions"] = predict_targets(fit, targets, f"--predict {opts.predict}")
        for line in prediction_lines(result["predictions"], opts.predict):
            print(line)
    emit_json(opts.json, result)
    return 0


def _fit_rows(opts: FitCommandOptions):
    """(rows to fit, the selection's record or None). A table with run configs (from `collect`)
    is reduced to the best run per (budget, shape) of an LR / optim.* sweep, recomputed from its
    config columns; a table without them but with a `selected` column keeps its marked rows."""
    # deferred: pandas and the law modules, as in run()
    from analysis.core.best_runs import rows_to_fit
    from analysis.core.runs import read_runs
    from analysis.core.table import ALIASES

    df = read_runs(opts.data)
    if opts.all_runs and opts.at_optimum:
        raise AnalysisError("--at-optimum corrects the best run of each rung; drop --all-runs")
    if opts.all_runs or opts.law in ("cpt", "cpt_chinchilla"):  # cpt: re-warm probes are no LR sweep
        return df, None
    rows, sel = rows_to_fit(df, opts.loss_col)
    if sel is None:
        return rows, None
    print(sel.message)
    for w in sel.warnings:
        print(f"warning: {w}", file=sys.stderr)
    record = sel.to_dict()
    if not opts.at_optimum:
        return sel.selected, record
    loss_cols = [opts.loss_col] if opts.loss_col else [c for c in ALIASES["loss"] if c in df.columns]
    if not loss_cols:
        raise AnalysisError("--at-optimum needs a loss column (loss or final_eval_loss)")
    rows, rungs = sel.at_optimum(loss_cols)
    moved = [r for r in rungs if r["loss_at_optimum"] is not None]
    print(f"--at-optimum: {len(moved)} of {len(rungs)} swept rungs fitted at their optimum's loss")
    record["at_optimum"] = rungs
    return rows, record


def _approach2(fit, opts: FitCommandOptions, columns: dict[str, str], data) -> dict:
    """IsoFLOP profiles (Approach 2) and their agreement with the law's exponent (`approach2` and
    `approach_comparison` in the JSON)."""
    from analysis.laws.isoflop import approach2, compare_approaches  # deferred: pandas, as in run()

    a2 = approach2(
        data, columns, method=opts.approach2, bootstrap=min(opts.bootstrap, 1000) or 200, seed=opts.seed
    )
    cmp_ = compare_approaches(fit, a2)
    print(f"  {cmp_['message']}")
    return {"approach2": a2, "approach_comparison": cmp_}


def _read_targets(opts: FitCommandOptions, columns: dict[str, str]):
    """TARGETS (`--predict`) read and checked against the law's inputs before any fitting, or
    None without the flag. With --law auto the inputs every candidate law needs are checked here,
    the chosen law's own after the fit."""
    if not opts.predict:
        return None
    # deferred: the law modules load pandas and JAX, as in run()
    from analysis.core.table import read_table
    from analysis.laws.methods import candidates
    from analysis.laws.moe import FIXED_TOKEN_CANDIDATES, MOE
    from analysis.laws.selection import AUTO
    from analysis.laws.targets import check_targets

    try:
        targets = read_table(opts.predict)
    except AnalysisError as e:
        raise AnalysisError(f"--predict: {e}") from None
    # without --law the law is known after the data is read: check the inputs every law needs
    # --law moe: N and experts (D, when the fit's table varies it, is checked after the fit)
    laws = {AUTO: candidates(), MOE: FIXED_TOKEN_CANDIDATES}.get(opts.law, (opts.law or DEFAULT_LAW,))
    check_targets(targets, laws, columns, f"--predict {opts.predict}")
    return targets
