"""The `lr` protocol: hide the rungs of the largest models, fit the learning-rate law on the others,
predict the hidden rungs' optimum learning rate.

Each rung's measured optimum is what `fit-hparams` locates on it (the vertex of a quadratic in
ln lr through the best tried value and its neighbours, on every rung of the table). Scores: the
|log10| ratio of predicted to measured optimum, and the loss a researcher would lose by training
at the tried value nearest the prediction instead of the rung's best (relative). Candidates: the
law `fit-hparams` chooses without flags (the default), each law form alone, and the baseline, a
log-linear power law of the best tried value in N (ordinary least squares, no vertex, no choice).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis import validation
from analysis.backtest import baselines
from analysis.backtest.losses import Options
from analysis.backtest.result import Backtest, MethodScore, Metric, Point
from analysis.hparams import fitting as HF
from analysis.hparams import laws as HL
from analysis.hparams import rungs as HR
from models.base.errors import AnalysisError

PARAM = "optim.lr"
LR_ALIASES = ("optim.lr", "lr", "learning_rate", "peak_lr", "max_lr")
BASELINE = "baseline_log_linear"
DEFAULT = "fit_hparams"


def _with_lr(df: pd.DataFrame) -> pd.DataFrame:
    col = next((c for c in LR_ALIASES if c in df.columns), None)
    if col is None:
        raise AnalysisError(
            f"--protocol lr needs a learning-rate column (one of {', '.join(LR_ALIASES)}); "
            f"the table's columns: {', '.join(map(str, df.columns[:20]))}"
        )
    return df if col == PARAM else df.rename(columns={col: PARAM})


def _rung_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per rung whose optimum fit-hparams locates (`locate_rungs`, on every rung): N, D, C,
    best tried lr, the located optimum, and the rung's (lr, best loss) profile."""
    try:
        found = HF.locate_rungs(table, PARAM, HF.HparamOptions())[0]
    except AnalysisError as e:
        raise AnalysisError(
            f"no rung has >= {HR.MIN_VALUES} learning rates: nothing to back-test ({e})"
        ) from None
    rows = [
        dict(
            N=r.N,
            D=r.D,
            C=r.C,
            best=r.best_tried,
            optimum=r.optimum,
            usable=r.usable,
            v=np.asarray(r.values),
            y=np.asarray(r.losses),
        )
        for r in found
    ]
    return pd.DataFrame(rows)


def _penalty(row, pred: float) -> float:
    """Relative loss of the tried value nearest `pred` (in log) against the rung's best."""
    i = int(np.argmin(np.abs(np.log(row.v) - np.log(pred))))
    return float(row.y[i] / row.y.min() - 1)


def _points(held: pd.DataFrame, pred, lo, hi) -> tuple[Point, ...]:
    return tuple(
        Point(
            {"N": float(r.N), "D": float(r.D), "C": float(r.C)},
            float(r.optimum),
            float(p),
            float(a),
            float(b),
            penalty=_penalty(r, float(p)),
        )
        for r, p, a, b in zip(held.itertuples(), pred, lo, hi)
    )


def _law_method(name: str, fit_runs: pd.DataFrame, held: pd.DataFrame, forms: tuple[str, ...]) -> MethodScore:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = HF.fit_hparams(fit_runs, [PARAM], HF.HparamOptions(forms=forms))
    except AnalysisError as e:
        return MethodScore(name, (), default=name == DEFAULT, note=f"not fitted: {e}")
    law = fit.fits[PARAM].law
    pred, lo, hi = law.predict(held.N.to_numpy(), held.D.to_numpy(), held.C.to_numpy())
    note = f"chose {law.form}" if name == DEFAULT else ""
    return MethodScore(name, _points(held, pred, lo, hi), default=name == DEFAULT, note=note)


def _baseline(fitted: pd.DataFrame, held: pd.DataFrame) -> MethodScore:
    if len(fitted) < 2 or fitted.N.nunique() < 2:
        return MethodScore(BASELINE, (), baseline=True, note="fewer than 2 model sizes fitted")
    X = np.column_stack([np.ones(len(fitted)), np.log(fitted.N.to_numpy())])
    b = baselines.fit_log_linear(X, fitted.best.to_numpy())
    pred = baselines.predict_log_linear(b, np.column_stack([np.ones(len(held)), np.log(held.N.to_numpy())]))
    return MethodScore(BASELINE, _points(held, pred, *b.band(pred)), baseline=True)


def lr_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    table, notes = HF.tidy(_with_lr(df))
    rungs = _rung_table(table)
    if rungs.empty:
        raise AnalysisError(f"no rung has >= {HR.MIN_VALUES} learning rates: nothing to back-test")
    held_mask = validation.holdout_mask(rungs.N.to_numpy(), opt.holdout_above_n)
    thr = (
        opt.holdout_above_n
        if opt.holdout_above_n is not None
        else float(np.max(rungs.N.to_numpy()[~held_mask], initial=0.0))
    )
    if held_mask.all() or not held_mask.any():
        raise AnalysisError(
            f"holding out N > {thr:.4g} leaves {int((~held_mask).sum())} rung(s) to fit and "
            f"{int(held_mask.sum())} to predict; choose --holdout-above-n between the model sizes"
        )
    held = rungs[held_mask & rungs.usable.to_numpy()]
    if held.empty:
        raise AnalysisError(
            f"no held-out rung (N > {thr:.4g}) has its optimum inside its grid: nothing to score"
        )
    fit_runs = table[~validation.holdout_mask(table.N.to_numpy(), thr)].drop(columns=["rung"])
    methods = [_baseline(rungs[~held_mask], held), _law_method(DEFAULT, fit_runs, held, tuple(HL.FORMS))]
    methods += [_law_method(f"form_{f}", fit_runs, held, (f,)) for f in HL.FORMS]
    cut = {
        "what": f"rungs with N > {thr:.4g}",
        "threshold": float(thr),
        "n_fit": int((~held_mask).sum()),
        "n_held_out": int(len(held)),
        "n_held_out_edge": int(held_mask.sum() - len(held)),
    }
    return Backtest("lr", cut, Metric.DLOG10, tuple(methods), warnings=tuple(notes))
