"""`python -m analysis fit-hparams RUNS.csv [--param optim.lr] --json HP.json`: hyperparameter laws.

Per rung (N x budget), the optimum of each swept hyperparameter from a quadratic in its log
through the best value and its neighbours (with an interval, flagged at the grid's edge); a power
law of the optima (c N^p D^q, c C^a, c D^q or c N^p, chosen by leave-largest-out error) with 90%
prediction intervals; the loss penalty at k x the optimum. Without `--method` (or `--form`) each
parameter's method is chosen on the table's own forward-chaining folds (the `lr` / `batch`
backtest protocol): the baseline `baseline_log_linear` unless the law beats it by the parsimony
margin on every fold (JSON `method_choice`). `--predict TARGETS.csv` (N, D[, C]) adds
`predictions`. The JSON (params, ci, law_form, laws, rungs, holdout, penalty, predictions) is what
`sweep.hparams` and `plan --hparams` read. See docs/fit.md, "Hyperparameter laws".
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from analysis.commands._flags import (
    add_column_arguments,
    add_json_argument,
    add_runs_argument,
    add_seed_argument,
)
from analysis.commands._options import ColumnOptions, add_deprecated_alias, emit_json, json_to_stdout
from analysis.hparams.text import predictions, report_lines, warning_lines
from models.base.errors import AnalysisError
from models.base.jsonio import write_json

# the family's registered methods (analysis/hparams/methods.py), named here so --help stays light
METHODS = ("fit_hparams", "form_N_D", "baseline_log_linear")


EXAMPLES = """\
examples:
  scalelab fit-hparams runs.csv --hparam optim.lr --predict targets.csv
  scalelab fit-hparams outputs/lr_sweep --json hp.json
The method is chosen on the sweep's own folds (docs/fit.md, "Learning rate and batch size")."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit-hparams",
        help="fit learning-rate / batch-size laws to a sweep of runs",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_runs_argument(p)
    p.add_argument(
        "--hparam",
        dest="param",
        action="append",
        default=None,
        metavar="KEY",
        help="hyperparameter column (e.g. optim.lr); repeatable. Default: every optim.* / "
        "train.batch_size column with >= 3 values in some rung",
    )
    add_deprecated_alias(p, "--param", "--hparam", "param", append=True, metavar="KEY")
    p.add_argument(
        "--predict", metavar="CSV", help="points to predict the optima at (columns N, D; C optional)"
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="fit this method for every parameter (default: each parameter's method chosen on the "
        "table's own forward-chaining folds: baseline_log_linear unless a law beats it on every fold)",
    )
    p.add_argument(
        "--form",
        action="append",
        default=None,
        help="candidate law forms (N_D, C, D, N; repeatable; default all, chosen by leave-largest-out); "
        "forces the fit_hparams law",
    )
    p.add_argument(
        "--window",
        type=int,
        default=1,
        help="values each side of the best the rung quadratic uses (default 1)",
    )
    p.add_argument(
        "--include-edges", action="store_true", help="fit the laws also to optima at an edge of the grid"
    )
    p.add_argument(
        "--joint",
        choices=("profile",),
        default=None,
        help="a rung sweeping both optim.lr and train.batch_size: each optimum on its profile (the "
        "best over the other; the only method since the 2-D quadratic was dropped, docs/fit.md)",
    )
    add_seed_argument(p)
    add_column_arguments(p)
    add_json_argument(p, "the laws, rung optima, holdout, penalty curves and predictions")
    p.set_defaults(func=run)


def _targets(path: str) -> list[dict]:
    from analysis.core.table import read_table  # pandas and JAX: loaded when run, a fast --help

    t = read_table(path)
    for col in ("N", "D"):
        if col not in t.columns:
            raise AnalysisError(
                f"--predict {path}: needs columns N and D (C optional); it has {', '.join(t.columns)}"
            )
    rows = []
    for i, r in t.iterrows():
        vals = {k: float(r[k]) for k in ("N", "D", "C") if k in t.columns and r[k] == r[k]}
        if not all(v > 0 and math.isfinite(v) for v in vals.values()):
            raise AnalysisError(f"--predict {path}: row {i + 2} has a non-positive N, D or C")
        rows.append(vals)
    return rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitHparamsOptions(ColumnOptions):
    data: str  # the runs table
    param: list[str] | None  # hyperparameter columns (None: every swept one)
    predict: str | None  # TARGETS.csv
    method: str | None
    form: list[str] | None
    window: int
    include_edges: bool
    joint: str | None
    seed: int


def run(args: argparse.Namespace) -> int:
    opts = FitHparamsOptions.from_args(args)
    # the fits (pandas, JAX) load here, not at import, so `python -m analysis --help` stays fast
    from analysis.core.runs import read_runs
    from analysis.hparams.fitting import fit_hparams
    from analysis.hparams.laws import FORMS

    if opts.window < 1:
        raise AnalysisError(f"--window must be >= 1 (got {opts.window})")
    if opts.form and opts.method not in (None, "fit_hparams"):
        raise AnalysisError(
            f"--form chooses among the fit_hparams law's forms; --method {opts.method} has none"
        )
    targets = _targets(opts.predict) if opts.predict else None  # bad targets fail before the fit
    common = dict(window=opts.window, include_edges=opts.include_edges, seed=opts.seed)
    table = read_runs(opts.data, opts.columns())
    choices = _choices(table, opts, common)
    per_param = {p: _options(c.chosen, opts, common, FORMS) for p, c in choices.items()}
    fit = fit_hparams(table, list(choices), per_param=per_param)
    for line in warning_lines(fit):
        print(line, file=sys.stderr)
    out = fit.to_json()
    out["method_choice"] = _choice_json(choices)
    out["inputs"] = {"runs": str(opts.data), "predict": opts.predict}
    if targets is not None:
        out["predictions"] = predictions(fit.laws(), targets)
    to_file = opts.json and not json_to_stdout(opts.json)
    if to_file:  # written before the text, so a closed pipe (`| head`) cannot lose it
        write_json(opts.json, out)
    for line in report_lines(fit, targets, choices):
        print(line)
    notes = [c.note for c in choices.values() if c.note and not c.forced]
    if notes:  # one line, for every parameter the folds could not decide for
        print(f"note: {'; '.join(notes)}")
    if to_file:
        print(f"wrote {opts.json}")
    elif opts.json:
        emit_json(opts.json, out)
    return 0


@dataclasses.dataclass(frozen=True)
class _Forced:
    """The method a flag forced (no folds run): what `method_choice` records then."""

    param: str
    chosen: str
    flag: str
    forced: bool = True

    @property
    def note(self) -> str:
        return f"{self.param}: {self.chosen} forced by {self.flag}; no choice made"

    def summary(self) -> str:
        return f"{self.param}: {self.chosen} (forced by {self.flag})"

    def to_json(self) -> dict:
        from analysis.hparams.methods import BASELINE  # deferred: the fitting code loads JAX (fast --help)

        return {
            "param": self.param,
            "chosen": self.chosen,
            "baseline": BASELINE,
            "candidates": list(METHODS),
            "fold_errors": {},
            "note": self.note,
        }


def _choices(table, opts: FitHparamsOptions, common: dict) -> dict:
    """Per parameter, the method to fit: the flag's, else the one its folds choose
    (`analysis.backtests.hparams.choose_method`)."""
    # deferred: the fitting code loads JAX (fast --help)
    from analysis.backtests.hparams import choose_method
    from analysis.hparams.fitting import resolve_params, tidy

    params = resolve_params(tidy(table)[0], opts.param)
    if opts.method or opts.form:
        flag = f"--method {opts.method}" if opts.method else "--form"
        return {p: _Forced(p, opts.method or "fit_hparams", flag) for p in params}
    return {p: choose_method(table, p, **common) for p in params}


def _options(method: str, opts: FitHparamsOptions, common: dict, forms_all):
    from analysis.hparams.methods import options  # deferred: the fitting code loads JAX (fast --help)

    if method == "fit_hparams":
        return options(method, **common, forms=tuple(opts.form) if opts.form else tuple(forms_all))
    return options(method, **common)


def _choice_json(choices: dict) -> dict:
    """`method_choice`: the first parameter's record at the top (chosen, baseline, candidates,
    fold_errors, note, ...) and every parameter's under `by_param`."""
    by = {p: c.to_json() for p, c in choices.items()}
    return {**next(iter(by.values())), "by_param": by}
