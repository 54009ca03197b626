"""The `moe` protocol: a mixture-of-experts ladder (N, experts, loss, D where it varies) with its
largest models hidden; every MoE law and `--law moe`'s choice (the default) fitted on the rest and
scored on the hidden runs at every expert count, against the log-bilinear baseline.

The cut: runs with N above `holdout_above_n` (default: the largest model size). The baseline is
what a researcher writes first: ordinary least squares of log L on [1, x, ln E, x ln E] (x =
ln(N / 1e9)), plus ln D on an (N, D, E) ladder, with the naive interval of every baseline
(`analysis.backtests.baselines`).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis.backtests import baselines
from analysis.backtests.losses import Options, _points
from analysis.backtests.result import Backtest, MethodScore, Metric
from analysis.core import progress, validation
from analysis.core.methods import Family, names
from analysis.core.table import resolve
from analysis.laws.fitting import fit_law
from analysis.laws.moe import MOE, candidates, check_experts, fit_moe, varies_tokens
from analysis.laws.moe_forms import N_REF
from models.base.errors import AnalysisError

BASELINE = "baseline_log_bilinear"
ROLES = ("N", "experts", "D")  # what identifies a held-out run


def moe_runs(df: pd.DataFrame, opt: Options) -> pd.DataFrame:
    """The runs as N, experts, loss (and D on an (N, D, E) ladder), checked as `fit` checks them."""
    columns = dict(opt.columns or {})
    check_experts(df, columns)
    roles = ("N", "experts", "D") if varies_tokens(df, columns) else ("N", "experts")
    pts = resolve(df, roles, columns)
    out = pd.DataFrame({k: pts.inputs[k] for k in roles})
    out["loss"] = pts.y
    return out


def _design(runs: pd.DataFrame) -> np.ndarray:
    x, le = np.log(runs.N.to_numpy(float) / N_REF), np.log(runs.experts.to_numpy(float))
    cols = [np.ones_like(x), x, le, x * le]
    if "D" in runs:
        cols.append(np.log(runs.D.to_numpy(float)))
    return np.stack(cols, axis=1)


def _baseline(fit_df: pd.DataFrame, held: pd.DataFrame) -> MethodScore:
    b = baselines.fit_log_linear(_design(fit_df), fit_df.loss.to_numpy(float))
    pred = baselines.predict_log_linear(b, _design(held))
    return MethodScore(
        BASELINE, _points(held, held.loss.to_numpy(), pred, *b.band(pred), roles=ROLES), baseline=True
    )


def _law(name: str, fit_df: pd.DataFrame, held: pd.DataFrame, opt: Options) -> MethodScore:
    """One MoE law (or the family, `moe`: the default) fitted below the cut, scored above it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kw = dict(bootstrap=opt.bootstrap, seed=opt.seed, prediction_intervals=True)
            fit = fit_moe(fit_df, **kw) if name == MOE else fit_law(fit_df, name, **kw)
        pred, lo, hi = fit.predict_interval({k: held[k].to_numpy(float) for k in fit.law_obj.inputs})
    except AnalysisError as e:
        return MethodScore(name, (), default=name == MOE, note=f"not fitted: {e}")
    note = f"chose {fit.law_selection.chosen}" if name == MOE and fit.law_selection is not None else ""
    return MethodScore(
        name, _points(held, held.loss.to_numpy(), pred, lo, hi, roles=ROLES), default=name == MOE, note=note
    )


def moe_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """Hide the largest models (N above `holdout_above_n`), fit the baseline, every MoE law of the
    ladder's kind and `--law moe` below, score each on the hidden runs."""
    runs = moe_runs(df, opt)
    N = runs.N.to_numpy(float)
    held = validation.holdout_mask(N, opt.holdout_above_n)
    if not held.any():
        raise AnalysisError(f"no run has N above {opt.holdout_above_n:g}; lower --holdout-above-n")
    if held.all():
        raise AnalysisError("every run is held out: nothing is left to fit on (raise --holdout-above-n)")
    thr = float(N[~held].max()) if opt.holdout_above_n is None else float(opt.holdout_above_n)
    fit_df, test = runs[~held], runs[held]
    cut = {
        "what": f"N > {thr:.4g}",
        "threshold": thr,
        "n_fit": int((~held).sum()),
        "n_held_out": int(held.sum()),
    }
    forms = set(candidates(fit_df))  # the registered MoE methods that fit this kind of ladder
    scored = [n for n in names(Family.POINT, "moe") if n != BASELINE and (n == MOE or n in forms)]
    scored = [n for n in scored if opt.scores(n == MOE)]
    methods = [_baseline(fit_df, test)]
    methods += [_law(n, fit_df, test, opt) for n in progress.track(scored, desc="backtest moe", unit="law")]
    return Backtest("moe", cut, Metric.REL, tuple(methods))


def _fit_log_bilinear(table: pd.DataFrame, columns=None, **_) -> baselines.BaselineResult:
    runs = moe_runs(table, Options(columns=columns))
    b = baselines.fit_log_linear(_design(runs), runs.loss.to_numpy(float))
    keys = [k for k in ROLES if k in runs]
    return baselines.BaselineResult(
        b,
        lambda x: baselines.predict_log_linear(b, _design(pd.DataFrame({k: x[k] for k in keys}))),
        len(runs),
    )


baselines.register_baseline(
    BASELINE, Family.POINT, ("moe",), _fit_log_bilinear, "log-bilinear least squares in (ln N, ln E)"
)
