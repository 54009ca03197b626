"""`python -m analysis fit DATA.csv --law chinchilla ... --json OUT.json`: fit a point law.

Prints the parameters with CIs and the convergence report; `--json` writes the full result
(params, ci, objective, n_points, converged, starts_at_optimum, allocation, holdout,
param_names, bootstrap_samples, ...), the schema documented in docs/analysis.md.
A runs table from `collect` whose runs differ only in `optim.*` (an LR sweep per rung) is fitted
on the best run per (budget, shape) (analysis.laws.best_runs), said in one line and recorded as
`hparam_selection` in the JSON; `--all-runs` fits every row instead.
`--predict TARGETS.csv` adds `predictions`: per target row, in order, its inputs, the predicted
loss and its 90% prediction interval (`{N, D, U?, loss, interval: [lo, hi]}`).
"""

from __future__ import annotations

import argparse
import sys
import warnings

from analysis.commands._options import add_budget_argument, add_json_argument, emit_json
from analysis.laws.enums import NParams, Precision
from models.base.errors import AnalysisError


def _fixed(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise AnalysisError(f"--fix expects NAME=VALUE (e.g. --fix E=1.69), got {item!r}") from None
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="fit a scaling law to a table of runs (CSV)", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "data", help="CSV (or .parquet) with one row per run, e.g. from `python -m analysis collect`"
    )
    p.add_argument(
        "--law",
        default=None,
        help="law name (default: chinchilla, or data_constrained when the runs repeat their data, D > U; "
        "see docs/analysis.md), or auto: chinchilla or chinchilla_tied "
        "(beta = alpha), whichever predicted its own larger runs better (forward-chaining)",
    )
    p.add_argument(
        "--n-col",
        help="model-size column (default: N, n_params or 'Model Size'; with --n-params "
        "non_embedding: n_params_non_embedding or N_non_embedding)",
    )
    p.add_argument(
        "--n-params",
        choices=tuple(NParams),
        help="which parameter count N is: total (every parameter) or non_embedding (without the input "
        "embedding and untied output head, Kaplan et al.'s N; needs a column n_params_non_embedding, "
        "which `collect` writes). Default: non_embedding for the Kaplan laws of N (kaplan_n, "
        "kaplan_n_e), total for every other law (chinchilla). Recorded as n_params in the JSON",
    )
    p.add_argument("--d-col", help="tokens column (default: D or tokens; else derived as C/(6N))")
    p.add_argument("--c-col", help="compute column (default: C, flops or 'Training FLOP'; else 6ND)")
    p.add_argument("--loss-col", help="target column (default: loss or final_eval_loss)")
    p.add_argument("--x-col", help="input column of the generic 'power' law")
    p.add_argument(
        "--u-col",
        help="unique-tokens column of the data-constrained laws (default: U or unique_tokens)",
    )
    p.add_argument("--weight-col", help="column of per-run weights")
    p.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (default 1000; 0 = none)"
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument(
        "--holdout-above", type=float, help="leave runs with C above this out of the fit and predict them"
    )
    p.add_argument(
        "--at-optimum",
        action="store_true",
        help="with an LR sweep per rung: fit each rung's loss at its fitted optimum (the vertex of a "
        "quadratic in ln lr through the best run and its neighbours) instead of the best run's loss",
    )
    p.add_argument(
        "--all-runs",
        action="store_true",
        help=(
            "fit every row, also the non-best runs of an LR / optim.* sweep "
            "(default: best per (budget, shape))"
        ),
    )
    add_budget_argument(p, "to state the compute-optimal allocation N*, D* for")
    p.add_argument("--fix", action="append", metavar="NAME=VALUE", help="hold a parameter fixed; repeatable")
    p.add_argument(
        "--delta",
        type=float,
        default=1.0,
        help="Huber delta on log residuals (default 1: least squares, the zoo's choice; "
        "Hoffmann et al.'s is 1e-3)",
    )
    p.add_argument(
        "--precision",
        choices=tuple(Precision),
        default=Precision.AUTO,
        help="auto (default): float32 search + float64 polish for big grids; mixed: always; float64: never",
    )
    p.add_argument(
        "--approach2",
        choices=("parabola", "cubic", "law"),
        help=(
            "also fit IsoFLOP profiles (Approach 2) and report whether its exponent disagrees "
            "with the law fit"
        ),
    )
    _add_predict_argument(p)
    add_json_argument(p, "the fit (schema in docs/analysis.md)")
    p.set_defaults(func=run)


def _add_predict_argument(p: argparse.ArgumentParser) -> None:
    """`--predict TARGETS.csv`: the loss, with its 90% prediction interval, of runs not yet trained."""
    p.add_argument(
        "--predict",
        metavar="TARGETS.csv",
        help="also predict the loss of the runs in this CSV (one row per run: the law's inputs, N and D; "
        "U / unique_tokens for the data-constrained laws; x for power; C optional), each with its 90%% "
        "prediction interval: a table, and `predictions` in the JSON (one per row, in order)",
    )


def run(args: argparse.Namespace) -> int:
    # JAX and the fitting code load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.laws.fitting import fit_law
    from analysis.laws.points import FitNotice
    from analysis.laws.registry import get_law
    from models.base.jaxcache import enable_compile_cache

    enable_compile_cache()
    from analysis.laws.enums import DEFAULT_LAW
    from analysis.laws.selection import AUTO, default_law, fit_auto

    if args.law not in (AUTO, None):
        get_law(args.law)  # unknown law: fail before reading data
    columns = _columns(args)
    targets = _read_targets(args, columns)  # a bad TARGETS file fails before the fit
    data, selection = _fit_rows(args)
    if args.law is None:
        args.law = default_law(data, columns)
        if args.law != DEFAULT_LAW:
            print(
                f"law: {args.law} (the runs repeat their data, D > U; "
                "--law chinchilla counts repeats as fresh)"
            )
    kwargs = dict(
        bootstrap=args.bootstrap,
        seed=args.seed,
        holdout_above=args.holdout_above,
        weights=args.weight_col,
        fixed=_fixed(args.fix),
        delta=args.delta,
        precision=args.precision,
        n_params=args.n_params,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FitNotice)
        fit = (
            fit_auto(data, columns, **kwargs)
            if args.law == AUTO
            else fit_law(data, args.law, columns, **kwargs)
        )
    _reemit(caught, FitNotice)
    if fit.law_selection is not None:
        print(fit.law_selection.message)
    print(fit.summary())
    _print_n_params(fit)
    result = fit.to_dict(args.budget)
    if selection is not None:
        result["hparam_selection"] = selection
    _print_allocation(result, args.budget)
    _print_holdout(result.get("holdout"))
    if args.approach2:
        result.update(_approach2(fit, args, columns, data))
    if targets is not None:
        result["predictions"] = _predictions(fit, targets, args.predict)
        _print_predictions(result["predictions"], args.predict)
    emit_json(args.json, result)
    return 0


def _fit_rows(args: argparse.Namespace):
    """(rows to fit, the selection's record or None). A table with run configs (from `collect`)
    is reduced to the best run per (budget, shape) of an LR / optim.* sweep, recomputed from its
    config columns; a table without them but with a `selected` column keeps its marked rows."""
    from analysis.laws.best_runs import rows_to_fit
    from analysis.laws.points import read_table

    df = read_table(args.data)
    if args.all_runs and getattr(args, "at_optimum", False):
        raise AnalysisError("--at-optimum corrects the best run of each rung; drop --all-runs")
    if args.all_runs:
        return df, None
    rows, sel = rows_to_fit(df, args.loss_col)
    if sel is None:
        return rows, None
    print(sel.message)
    for w in sel.warnings:
        print(f"warning: {w}", file=sys.stderr)
    record = sel.to_dict()
    if not getattr(args, "at_optimum", False):
        return sel.selected, record
    from analysis.laws.points import ALIASES

    loss_cols = [args.loss_col] if args.loss_col else [c for c in ALIASES["loss"] if c in df.columns]
    if not loss_cols:
        raise AnalysisError("--at-optimum needs a loss column (loss or final_eval_loss)")
    rows, rungs = sel.at_optimum(loss_cols)
    moved = [r for r in rungs if r["loss_at_optimum"] is not None]
    print(f"--at-optimum: {len(moved)} of {len(rungs)} swept rungs fitted at their optimum's loss")
    record["at_optimum"] = rungs
    return rows, record


def _reemit(caught: list, notice: type) -> None:
    """The fit's warnings: each notice for the user (the N it fell back to, an untested decay
    constant, forms that disagree) as one `warning:` line, the others as Python warns."""
    for w in caught:
        if issubclass(w.category, notice):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn(w.message, w.category, stacklevel=2)


def _print_n_params(fit) -> None:
    kind = fit.n_params
    if kind is not None:
        what = "non-embedding parameters" if kind == NParams.NON_EMBEDDING else "all parameters"
        print(f"  N = {what} (column {fit.columns.get('N', '?')}); --n-params {kind}")


def _columns(args: argparse.Namespace) -> dict[str, str]:
    """Column roles the user named with --n-col/--d-col/...; the rest are found by name."""
    return {
        role: name
        for role, name in (
            ("N", args.n_col),
            ("D", args.d_col),
            ("C", args.c_col),
            ("loss", args.loss_col),
            ("x", args.x_col),
            ("U", args.u_col),
        )
        if name
    }


def _print_allocation(result: dict, budgets=None) -> None:
    if "allocation" not in result:
        return
    al = result["allocation"]
    ci = al.get("a_ci", [float("nan")] * 2)
    print(f"  allocation: N* ~ C^{al['a']:.4f} (CI [{ci[0]:.4f}, {ci[1]:.4f}]), D* ~ C^{al['b']:.4f}")
    frontier = result.get("frontier")
    if frontier is not None:
        print(f"  best loss per budget: {frontier['method']}, by {frontier['reason']}")
    for r in al["budgets"] if budgets else []:
        band = r.get("loss_interval")
        iv = f" [{band[0]:.4f}, {band[1]:.4f}]" if band else ""
        print(
            f"  at C = {r['C']:.3g}: N* = {r['N_opt']:.4g}, D* = {r['D_opt']:.4g}, "
            f"best loss {r['loss']:.4f}{iv} ({r['loss_method']})"
        )


def _print_holdout(h: dict | None) -> None:
    if h is not None:
        print(
            f"  held out {h['n_points']} runs above C={h['threshold']:.3g}: "
            f"mean |rel err| {h['mean_rel_error']:.3%}, "
            f"max {h['max_rel_error']:.3%}"
            + (
                f"; {h['coverage']:.0%} inside their 90% prediction intervals (mean width "
                f"{h['mean_interval_rel_width']:.2%})"
                if "coverage" in h
                else ""
            )
        )


def _approach2(fit, args: argparse.Namespace, columns: dict[str, str], data) -> dict:
    """IsoFLOP profiles (Approach 2) and their agreement with the law's exponent (`approach2` and
    `approach_comparison` in the JSON)."""
    from analysis.laws.isoflop import approach2, compare_approaches  # JAX-heavy; see run()

    a2 = approach2(
        data, columns, method=args.approach2, bootstrap=min(args.bootstrap, 1000) or 200, seed=args.seed
    )
    cmp_ = compare_approaches(fit, a2)
    print(f"  {cmp_['message']}")
    return {"approach2": a2, "approach_comparison": cmp_}


def _target_inputs(law, targets, columns: dict[str, str], path: str):
    """(role -> array, role -> column) of `law`'s inputs in TARGETS, found as in the fit: a column
    the fit used (or --n-col & co. named) when TARGETS has it, else the usual spellings; D from C / 6N.
    Any error is one line naming the file and the law."""
    from analysis.laws.points import ALIASES, resolve_inputs

    cols = {
        role: name
        for role, name in columns.items()
        if role in ALIASES and role != "loss" and not name.startswith("<") and name in targets.columns
    }
    try:
        return resolve_inputs(targets, law.inputs, cols)
    except AnalysisError as e:
        raise AnalysisError(f"--predict {path}: law {law.name}: {e}") from None


def _read_targets(args: argparse.Namespace, columns: dict[str, str]):
    """TARGETS (`--predict`) read and checked against the law's inputs before any fitting, or
    None without the flag. With --law auto the inputs every candidate law needs are checked here,
    the chosen law's own after the fit."""
    if not args.predict:
        return None
    from analysis.laws.points import read_table
    from analysis.laws.registry import get_law
    from analysis.laws.selection import AUTO, CANDIDATES

    try:
        targets = read_table(args.predict)
    except AnalysisError as e:
        raise AnalysisError(f"--predict: {e}") from None
    from analysis.laws.enums import DEFAULT_LAW

    # without --law the law is known after the data is read: check the inputs every law needs
    laws = [get_law(name) for name in (CANDIDATES if args.law == AUTO else (args.law or DEFAULT_LAW,))]
    for law in laws:
        if all(all(role in other.inputs for other in laws) for role in law.inputs):
            _target_inputs(law, targets, columns, args.predict)  # raises on the first missing input
    return targets


# Inputs a prediction entry repeats, in this order, besides the law's own (N and D whenever known)
PREDICTION_ROLES = ("N", "D", "U", "C", "x")


def _predictions(fit, targets, path: str) -> list[dict]:
    """One entry per TARGETS row, in row order: the inputs ({N, D, U (data-constrained laws)...}),
    the predicted `loss` (FitResult.predict) and its 90% prediction `interval` [lo, hi]
    (FitResult.predict_interval: parameter noise + run scatter + extrapolation drift)."""
    law = fit.law_obj
    vals, used = _target_inputs(law, targets, fit.columns, path)
    loss = fit.predict(targets, {r: c for r, c in used.items() if not c.startswith("<")})
    try:
        _, lo, hi = fit.predict_interval(vals)
    except AnalysisError as e:
        raise AnalysisError(f"--predict {path}: {e}") from None
    shown = [r for r in PREDICTION_ROLES if r in vals and (r in law.inputs or r in ("N", "D"))]
    return [
        {
            **{r: float(vals[r][i]) for r in shown},
            "loss": float(loss[i]),
            "interval": [float(lo[i]), float(hi[i])],
        }
        for i in range(len(targets))
    ]


def _print_predictions(rows: list[dict], path: str) -> None:
    """The predictions as a short table (every row; TARGETS files are user queries, not sweeps)."""
    from analysis.validation import PREDICTION_LEVEL

    roles = [k for k in rows[0] if k not in ("loss", "interval")]
    print(f"  predictions for {path} ({PREDICTION_LEVEL:.0%} prediction intervals):")
    print("    " + "".join(f"{r:>11}" for r in roles) + f"{'loss':>10}  interval")
    for row in rows:
        lo, hi = row["interval"]
        cells = "".join(f"{row[r]:>11.4g}" for r in roles)
        print(f"    {cells}{row['loss']:>10.4f}  [{lo:.4f}, {hi:.4f}]")
