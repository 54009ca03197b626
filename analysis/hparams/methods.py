"""The hyperparameter-law family's methods in the one registry (`analysis.core.methods`).

Each is fitted to a runs table on one hyperparameter (`param`, a config key: `optim.lr` by
default, `train.batch_size` for the batch law) and predicts its optimum at (N, D[, C]) with the
law's 90% interval:

- `fit_hparams` (default of the `lr` and `batch` protocols): what `fit-hparams` fits without
  flags, the power-law form chosen by leave-largest-out among N_D, C, D and N (`laws.FORMS`);
- `form_N_D`: the same with the N_D form only (Step Law's c N^p D^q): best on the zoo's batch
  backtests (docs/zoo.md);
- `baseline_log_linear` (baseline): ln h* = a + b ln N by ordinary least squares through each
  rung's best tried value (no vertex, no edge exclusion, no form choice), with the laws' interval
  (`fitting.HparamOptions(optimum=BEST_TRIED)`). `fit-hparams` keeps it unless a candidate beats it
  on the table's own forward-chaining folds (analysis/backtests/hparams.py, `choose_method`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.core.table import FLOPS_PER_PARAM_TOKEN
from analysis.hparams.fitting import BEST_TRIED, VERTEX, HparamFit, HparamOptions, fit_hparams

PROTOCOLS = ("lr", "batch")
DEFAULT, BASELINE = "fit_hparams", "baseline_log_linear"
LR_KEY = "optim.lr"


def _fit(forms: tuple[str, ...] | None, optimum: str = VERTEX):
    def fit(table: pd.DataFrame, param: str = LR_KEY, **options: Any) -> HparamFit:
        """`fit_hparams` on one parameter; options are `HparamOptions`' (window, include_edges, seed)."""
        opts = dataclasses.replace(HparamOptions(**options), optimum=optimum)
        return fit_hparams(table, [param], dataclasses.replace(opts, forms=forms) if forms else opts)

    return fit


def options(method: str, **options: Any) -> HparamOptions:
    """The `HparamOptions` a registered method of this family fits with (`fit-hparams --method`)."""
    if method == BASELINE:
        return HparamOptions(**{**options, "forms": ("N",), "optimum": BEST_TRIED})
    if method == "form_N_D":
        return HparamOptions(**{**options, "forms": ("N_D",)})
    return HparamOptions(**options)


def predict(fit: HparamFit, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """The optimum of the fitted parameter at N, D (C: given, else 6ND x the runs' C / 6ND)."""
    N, D = (np.asarray(inputs[k], float) for k in ("N", "D"))
    C = inputs.get("C")
    C = fit.c_over_6nd * FLOPS_PER_PARAM_TOKEN * N * D if C is None else np.asarray(C, float)
    return Prediction(*next(iter(fit.fits.values())).law.predict(N, D, C))


def plot(fit: Any, table: pd.DataFrame | None, ax: Any = None):
    """Each located rung optimum (with its interval) against N, and the method's prediction with
    its 90% band at the rungs' median tokens per parameter (any method of the family)."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    param, rungs = _first(fit)
    N, opt = np.array([r.N for r in rungs]), np.array([r.optimum for r in rungs])
    err = np.abs(np.array([r.interval for r in rungs]).T - opt)
    ax.errorbar(N, opt, yerr=err, fmt="o", ms=4, capsize=2, label="rung optima (90%)")
    grid = np.geomspace(N.min(), N.max() * 4, 40)
    ratio = float(np.median([r.D / r.N for r in rungs]))
    p = predict(fit, {"N": grid, "D": ratio * grid})
    ax.plot(grid, p.mean, lw=1.2, label=fit.summary().splitlines()[0])
    ax.fill_between(grid, p.lo, p.hi, alpha=0.15, lw=0)
    ax.set(xscale="log", yscale="log", xlabel=f"N (parameters; D = {ratio:.3g} N)", ylabel=f"optimal {param}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def _first(fit: HparamFit) -> tuple[str, tuple]:
    param, pf = next(iter(fit.fits.items()))
    return param, pf.rungs


for _name, _role, _fit_fn, _predict, _doc in (
    (DEFAULT, Role.DEFAULT, _fit(None), predict, "the power-law form chosen by leave-largest-out"),
    ("form_N_D", Role.CANDIDATE, _fit(("N_D",)), predict, "Step Law's form c N^p D^q alone"),
    (BASELINE, Role.BASELINE, _fit(("N",), BEST_TRIED), predict, "ln h* linear in ln N, best tried values"),
):
    register(Method(_name, Family.HPARAM, PROTOCOLS, _role, _fit_fn, _predict, plot, _doc))
