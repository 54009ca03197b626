"""`fit --formula` (your own law, `--group`, `--shared`, `--formula search`): its flags, checks and
printing; the law itself is analysis/laws/formula.py."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from typing import Any

from analysis.commands._options import emit_json
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache


def add_formula_arguments(p: argparse.ArgumentParser) -> None:
    """Your own law (docs/fit.md "Your own law"): one argument group, terse help."""
    g = p.add_argument_group("your own law (docs/fit.md)")
    g.add_argument("--formula", action="append", metavar="EXPR", help="a law to fit; @FILE; search")
    g.add_argument("--input", dest="inputs", action="append", metavar="NAME[=COL]", help="an input column")
    g.add_argument("--target", action="append", metavar="COL", help="the column to fit (repeatable)")
    g.add_argument("--param", dest="params", action="append", metavar="P=LO:HI|X", help="bounds or a start")
    g.add_argument("--group", metavar="COL", help="one parameter set per value of COL")
    g.add_argument("--shared", metavar="P,Q", help="parameters tied across groups")
    g.add_argument("--scale", metavar="NAME", help="the input to extrapolate in (folds, intervals)")


def reemit(caught: list, notice: type, law: str = "", target: str = "") -> None:
    """The fit's warnings: each notice for the user (the N it fell back to, an untested decay
    constant, forms that disagree; with --formula every fit warning, its law named by the target)
    as one `warning:` line, the others as Python warns."""
    for w in caught:
        if issubclass(w.category, notice):
            text = str(w.message).replace(f"law {law}", f"the formula for {target}") if law else w.message
            print(f"warning: {text}", file=sys.stderr)
        else:
            warnings.warn(w.message, w.category, stacklevel=2)


# ---- your own law: --formula ----------------------------------------------------------------------
_NOT_WITH_FORMULA = {
    "--law": "law",
    "--approach2": "approach2",
    "--budget": "budget",
    "--at-optimum": "at_optimum",
    "--n-params": "n_params",
    "--n-col": "n_col",
    "--d-col": "d_col",
    "--c-col": "c_col",
    "--u-col": "u_col",
    "--x-col": "x_col",
    "--experts-col": "experts_col",
}


def _formulas(opts: Any, targets: list[str]) -> list[str]:
    """One formula per target: `--formula` repeated, or `@FILE` (a line per target), or one formula
    for every target."""
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    import pathlib

    texts: list[str] = []
    for item in opts.formula or []:
        if item.startswith("@"):
            # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
            from analysis.laws.formula import split_formulas

            path = pathlib.Path(item[1:])
            try:
                texts += split_formulas(path.read_text())
            except OSError as e:
                raise AnalysisError(f"--formula {item}: cannot read {path} ({e.strerror or e})") from None
        else:
            texts.append(item)
    if not texts:
        raise AnalysisError("--formula: no formula given (an @FILE has a formula per line)")
    if len(texts) == 1:
        return texts * len(targets)
    if len(texts) != len(targets):
        raise AnalysisError(
            f"{len(texts)} formulas for {len(targets)} targets: give one formula per --target, in order"
        )
    return texts


def run_formula(opts: Any) -> int:
    """`fit --formula`: fit (or search) a user's law for each --target; print, predict, write JSON."""
    for flag, field in _NOT_WITH_FORMULA.items():
        if getattr(opts, field):
            raise AnalysisError(f"{flag} does not apply to --formula (name columns with --input NAME=COLUMN)")
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    from analysis.core.runs import read_runs
    from analysis.core.table import read_table
    from analysis.laws import formula as fm
    from analysis.laws import formula_search, groups

    enable_compile_cache()
    targets = list(dict.fromkeys(opts.target or [opts.loss_col or _default_target(read_runs(opts.data))]))
    texts = _formulas(opts, targets)
    inputs = fm.parse_inputs(opts.inputs)
    params = fm.parse_param_options(opts.params)
    shared = [s.strip() for s in (opts.shared or "").split(",") if s.strip()]
    targets_df = None
    if opts.predict:
        try:
            targets_df = read_table(opts.predict)
        except AnalysisError as e:
            raise AnalysisError(f"--predict: {e}") from None
    data = read_runs(opts.data)
    fopts = groups.FormulaOptions(
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        fixed=opts.fix,
        delta=groups.FORMULA_DELTA if opts.delta is None else opts.delta,
        precision=opts.precision,
    )
    common = dict(
        inputs=inputs,
        params=params,
        group=opts.group,
        shared=shared,
        scale=opts.scale,
        weights=opts.weight_col,
        options=fopts,
        predict_df=targets_df,
    )
    fits, searches = {}, {}
    for target, text in zip(targets, texts):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            if text.strip().lower() == fm.SEARCH:
                searches[target] = formula_search.search(
                    data, target, holdout_above=opts.holdout_above, **common
                )
                for line in searches[target].lines():
                    print(line)
                text = searches[target].formula
                common_fit = dict(
                    common,
                    options=dataclasses.replace(fopts, extra_starts=searches[target].starts),
                    shared=list(searches[target].shared),  # with --group: the searched form's ties
                )
            else:
                common_fit = common
            fits[target] = groups.fit_formula(
                data, text, target, holdout_above=opts.holdout_above, **common_fit
            )
        reemit(caught, UserWarning, fits[target].model.name, target)
    result = _formula_result(fits, searches, targets_df, opts.predict)
    emit_json(opts.json, result)
    return 0


def _default_target(df) -> str:
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    from analysis.core.table import ALIASES

    for name in ALIASES["loss"]:
        if name in df.columns:
            return name
    raise AnalysisError("--formula: name the column to fit with --target COLUMN (no loss column found)")


def _formula_result(fits: dict, searches: dict, targets_df, predict_path: str | None) -> dict:
    """Print each target's fit (and its predictions); the JSON: one fit's schema, or with several
    targets `fits`, `formula` and `predictions_by_target` keyed by target."""
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    from analysis.laws import groups

    out: dict = {}
    for target, fit in fits.items():
        print(fit.summary())
        for line in fit.holdout_lines():
            print(line)
        d = fit.to_dict()
        if target in searches:
            d["search"] = searches[target].to_dict()
        if targets_df is not None:
            d["predictions"] = fit.prediction_rows(targets_df, f"--predict {predict_path}")
            for line in groups.prediction_lines(d["predictions"], predict_path, target):
                print(line)
        out[target] = d
    if len(out) == 1:
        return next(iter(out.values()))
    multi: dict = {
        "targets": list(out),
        "formula": {t: d["formula"] for t, d in out.items()},
        "fits": out,
    }
    if targets_df is not None:
        multi["predictions_by_target"] = {t: d["predictions"] for t, d in out.items()}
    return multi
