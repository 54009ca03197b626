"""The `cpt` protocol: a continual-pre-training ladder (`+sweep=cpt`) with its largest model's
continued runs hidden; the `cpt` law (the default) and its per-domain Chinchilla baseline fitted on
the rest, each scored on both domains' final losses of the hidden runs, with 90% intervals.

The cut: every run that is not a base model at N above `--holdout-above-n` (default: the second
largest size with continued runs, so the largest one's are hidden); the base model itself stays in
the fit, as the model a lab is about to continue is trained and measured. With `--holdout-above D`
the cut is instead the continued runs whose new-token count D_B exceeds D (default off): how the
law extrapolates in D_B at every size. Only the continued runs at the ladder's main re-warm peak
are fitted and scored (analysis/laws/cpt.py). Each hidden run gives two points, its old-domain
loss (`domain` 0) and its new-domain loss (`domain` 1).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress
from analysis.laws.cpt import BASELINE, CPT, cpt_table, fit_cpt_table, fitted_rows, main_peak
from models.base.errors import AnalysisError


def _points(fit, test: pd.DataFrame) -> tuple[Point, ...]:
    p = fit.predict({k: test[k].to_numpy(float) for k in ("N", "D_A", "D_B", "r")})
    out = []
    for i in range(len(test)):
        row = test.iloc[i]
        x = {"N": float(row.N), "D_A": float(row.D_A), "D_B": float(row.D_B), "r": float(row.r)}
        for d, code in (("old", 0.0), ("new", 1.0)):
            out.append(
                Point(
                    {**x, "domain": code},
                    float(row[f"loss_{d}"]),
                    float(p[d][i]),
                    float(p[f"{d}_lo"][i]),
                    float(p[f"{d}_hi"][i]),
                )
            )
    return tuple(out)


def _score(law: str, fit_df: pd.DataFrame, test: pd.DataFrame, opt: Options) -> MethodScore:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_cpt_table(fit_df, law, bootstrap=opt.bootstrap, seed=opt.seed)
    except AnalysisError as e:
        return MethodScore(law, (), baseline=law == BASELINE, default=law == CPT, note=f"not fitted: {e}")
    return MethodScore(law, _points(fit, test), baseline=law == BASELINE, default=law == CPT)


def _cut(table: pd.DataFrame, opt: Options) -> tuple[np.ndarray, dict]:
    """(hidden rows, the cut's record)."""
    cont = (table.kind == "cpt").to_numpy()
    if opt.holdout_above is not None:
        thr = float(opt.holdout_above)
        held = cont & (table.D_B.to_numpy() > thr)
        what = f"continued runs with D_B > {thr:.4g}"
    else:
        sizes = np.unique(table.N[cont])
        if sizes.size < 3:
            raise AnalysisError(
                f"the cpt protocol hides the largest model's continued runs and fits the rest: it needs "
                f"continued runs at 3 or more model sizes (found {sizes.size})"
            )
        thr = float(sizes[-2]) if opt.holdout_above_n is None else float(opt.holdout_above_n)
        held = (table.kind != "base").to_numpy() & (table.N.to_numpy() > thr)
        what = f"N > {thr:.4g}: every run but the base model"
    if not (held & cont).any():
        raise AnalysisError(f"no continued run is hidden by the cut ({what}); lower the threshold")
    return held, {"what": what, "threshold": thr}


def cpt_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """Hide the cut's runs, fit the baseline and the cpt law on the rest, score both on the hidden
    continued runs at the main re-warm peak (both domains)."""
    table = cpt_table(df)
    held, cut = _cut(table, opt)
    fit_df = table[~held].reset_index(drop=True)
    fit_df.attrs.update(table.attrs)
    peak = main_peak(table)
    scored = held & (table.kind == "cpt").to_numpy()
    if peak is not None:
        scored &= np.isclose(table.peak.to_numpy(float), peak, rtol=1e-9)
    test = table[scored].reset_index(drop=True)
    cut.update(n_fit=int(len(fitted_rows(fit_df))), n_held_out=int(len(test)), points_per_run=2)
    methods = [
        _score(law, fit_df, test, opt)
        for law in progress.track([BASELINE, CPT], desc="backtest cpt", unit="law")
    ]
    notes = [] if peak is None else [f"continued runs at the main re-warm peak (optim.lr={peak:g}) only"]
    return Backtest("cpt", cut, Metric.REL, tuple(methods), warnings=tuple(notes))
