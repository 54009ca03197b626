"""scalelab.analysis — scaling-law fits with honest uncertainty.

Public API (import from `analysis`; loaded lazily so `python -m analysis --help` stays fast):

The notebook API (analysis/api.py; every method from one registry, analysis/core/methods.py):
    load(path_or_df) -> runs table (CSV, Parquet, a sweep directory or a DataFrame)
    fit(table, law="auto", family="point", **options) -> Fit (.predict(**inputs) -> Prediction
        with .mean .lo .hi, .summary(), .to_dict(), .plot(ax=None), .result: the family's record)
    backtest(table, protocol=...) -> Backtest (.to_dict(): the `backtest --json` schema)
    plan(budget, law=fit, hardware=..., gpus=...) -> Plan
    methods(family=None, protocol=None) -> [Method: name, family, protocols, role]

Point laws (one row per run):
    fit_law(df, law="chinchilla", columns=None, bootstrap=1000, seed=0, holdout_above=None,
            weights=None, fixed=None, grid=None) -> FitResult
        FitResult: .params .ci .se .bootstrap_samples (B, P in .param_names order) .objective
        .starts_at_optimum .converged .holdout .predict(df) .predict_samples(inputs)
        .allocation(budgets) .to_dict() .to_json(path) .summary()
    allocation(fit, budgets, flops_per_param_token=None) -> dict   (N*, D*, a, b with CIs)
    holdout_validate(df, law, threshold, ...) -> FitResult with .holdout
    approach1(df, ...), approach2(df, ...) / isoflop_profiles(df, ...), compare_approaches(fit, a2)
    laws: get_law(name), known_laws(), register_law(name, predict, param_names, inputs, grid, ...)

Loss curves (one run's loss against step under an LR schedule):
    load_curve(path_or_df), fit_curve(fit_curves, law="mpl", predict=..., fit_until=...)
        -> CurveFitResult (.params .predict(curve) .predictions .to_dict())

Hyperparameter laws (the optimal learning rate / batch size per rung and their power laws):
    fit_hparams(runs_df, params=None, opts=HparamOptions()) -> HparamFit (.fits .laws() .to_json())
    load_hparams("hp.json") -> HparamLaws (.predict(param, N, D, C=None) -> (value, lo90, hi90))

Runs written by the training core:
    runs.load(*paths) -> (runs_df, curves_df); runs.table(*paths) -> the runs table `fit` reads

Recipe comparison (which recipe wins, and by how much compute):
    load_ladders(inputs, by=None, ref=None) -> (REF Ladder, [OTHER Ladder]);
    compare_recipes(ref, others, method=None, budgets=None, bootstrap=200, seed=0)
        -> (Comparison (.to_dict(): compare --json), [PairFit])

Report and planning:
    build_report(sweep_dir, out_dir=None, budgets=None, bootstrap=1000, seed=0, hardware=None, gpus=1024)
        -> report dict (also written as report.{html,md,json} + figures/)
    Figures for notebooks: analysis.report.figures.* and analysis.rl.report.*_figure return
    matplotlib Figures; importing analysis never selects or switches the matplotlib backend.

Errors in user input raise `AnalysisError` with a one-line message.
"""

from __future__ import annotations

import importlib

from models.base.errors import AnalysisError

_EXPORTS = {
    "load": "analysis.api",
    "fit": "analysis.api",
    "backtest": "analysis.api",
    "plan": "analysis.api",
    "methods": "analysis.api",
    "Fit": "analysis.core.methods",
    "Prediction": "analysis.core.methods",
    "fit_law": "analysis.laws.fitting",
    "FitResult": "analysis.laws.fitting",
    "HUBER_DELTA": "analysis.laws.fitting",
    "allocation": "analysis.laws.allocation",
    "holdout_validate": "analysis.laws.fitting",
    "approach1": "analysis.laws.isoflop",
    "approach2": "analysis.laws.isoflop",
    "isoflop_profiles": "analysis.laws.isoflop",
    "compare_approaches": "analysis.laws.isoflop",
    "get_law": "analysis.laws.registry",
    "known_laws": "analysis.laws.registry",
    "register_law": "analysis.laws.registry",
    "Law": "analysis.laws.registry",
    "fit_curve": "analysis.curves.fitting",
    "load_curve": "analysis.curves.fitting",
    "Curve": "analysis.curves.fitting",
    "CurveFitResult": "analysis.curves.fitting",
    "get_curve_law": "analysis.curves.laws",
    "known_curve_laws": "analysis.curves.laws",
    "fit_hparams": "analysis.hparams.fitting",
    "load_hparams": "analysis.hparams.fitting",
    "build_report": "analysis.report.build",
    "compare_recipes": "analysis.compare.comparison",
    "load_ladders": "analysis.compare.ladders",
}

__all__ = ["AnalysisError", "runs", *_EXPORTS]


def __getattr__(name: str):
    if name == "runs":
        return importlib.import_module("analysis.core.runs")
    if name == "validation":
        return importlib.import_module("analysis.core.validation")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
