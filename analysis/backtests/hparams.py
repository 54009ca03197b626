"""The `lr` and `batch` protocols: hide the rungs of the largest models, fit the learning-rate (or
batch-size) law on the others, predict the hidden rungs' optimum.

Each rung's measured optimum is what `fit-hparams` locates on it without flags (on every rung).
Scores: the |log10| ratio of predicted to measured optimum, and the relative loss of training at
the tried value nearest the prediction instead of the rung's best (on the rung's profile). On a
synthetic ladder a column `<alias>_true` (e.g. `lr_true`; constant within a rung, never fitted on)
is the target instead: a located vertex carries the grid's and the noise's error (0.06 dex on the
zoo's irregular LR ladder). Methods: those the registry scores on the protocol
(analysis/hparams/methods.py): `fit_hparams` (default), `form_N_D`, `baseline_log_linear`.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import validation
from analysis.core.methods import Family, Method, Role, methods
from analysis.hparams import fitting as HF
from analysis.hparams import rungs as HR
from analysis.hparams.methods import BASELINE, DEFAULT  # noqa: F401  (registers the methods)
from models.base.errors import AnalysisError


@dataclasses.dataclass(frozen=True)
class Target:
    """The hyperparameter a protocol predicts: its config key, the column names read as it, and
    what the error lines call it."""

    protocol: str
    key: str
    aliases: tuple[str, ...]
    noun: str
    plural: str


LR = Target(
    "lr",
    "optim.lr",
    ("optim.lr", "lr", "learning_rate", "peak_lr", "max_lr"),
    "learning-rate",
    "learning rates",
)
BATCH = Target(
    "batch",
    "train.batch_size",
    ("train.batch_size", "batch_size", "global_batch", "batch"),
    "batch-size",
    "batch sizes",
)


def _alias(df: pd.DataFrame, target: Target) -> str | None:
    return next((c for c in target.aliases if c in df.columns), None)


def _with_keys(df: pd.DataFrame, target: Target) -> pd.DataFrame:
    """`df` with the target's column (required) and the other LR x batch column (when present)
    under their config keys: a joint fit finds its partner by key."""
    if _alias(df, target) is None:
        raise AnalysisError(
            f"--protocol {target.protocol} needs a {target.noun} column (one of "
            f"{', '.join(target.aliases)}); the table's columns: {', '.join(map(str, df.columns[:20]))}"
        )
    found = {_alias(df, t): t.key for t in (LR, BATCH) if _alias(df, t) not in (None, t.key)}
    return df.rename(columns=found)


TRUE_SUFFIX = "_true"  # a synthetic ladder's known optimum: `<alias>_true`


def _truth_columns(df: pd.DataFrame) -> list[str]:
    names = {a + TRUE_SUFFIX for t in (LR, BATCH) for a in t.aliases}
    return [c for c in df.columns if str(c) in names]


def _true_optima(runs: pd.DataFrame, target: Target, rungs: pd.DataFrame) -> np.ndarray | None:
    """Each rung's known optimum (median of `<alias>_true` over its runs, matched by N and D), or
    None when the table has no such column for the target."""
    col = next((a + TRUE_SUFFIX for a in target.aliases if a + TRUE_SUFFIX in runs.columns), None)
    if col is None or not {"N", "D"} <= set(runs.columns):
        return None
    logN, logD = np.log(runs.N.to_numpy(float)), np.log(runs.D.to_numpy(float))
    out = []
    for r in rungs.itertuples():
        m = (np.abs(logN - np.log(r.N)) < 1e-6) & (np.abs(logD - np.log(r.D)) < 0.05)
        out.append(float(np.median(runs[col].to_numpy(float)[m])) if m.any() else np.nan)
    return np.asarray(out)


def _rung_table(table: pd.DataFrame, target: Target) -> pd.DataFrame:
    """One row per rung whose optimum fit-hparams locates (`locate_rungs`, on every rung): N, D, C,
    the located optimum, whether it is usable, and the rung's (value, best loss) profile `v`, `y`."""
    try:
        found = HF.locate_rungs(table, target.key, HF.HparamOptions())[0]
    except AnalysisError as e:
        raise AnalysisError(
            f"no rung has >= {HR.MIN_VALUES} {target.plural}: nothing to back-test ({e})"
        ) from None
    keys = ("N", "D", "C", "optimum", "usable")
    return pd.DataFrame(
        [
            {**{k: getattr(r, k) for k in keys}, "v": np.array(r.values), "y": np.array(r.losses)}
            for r in found
        ]
    )


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


def _score(method: Method, fit_runs: pd.DataFrame, held: pd.DataFrame, param: str) -> MethodScore:
    """A registered method fitted on the runs below the cut, scored on the held-out rungs."""
    roles = {"default": method.role == Role.DEFAULT, "baseline": method.role == Role.BASELINE}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = method.fit(fit_runs, param=param)
    except AnalysisError as e:
        return MethodScore(method.name, (), **roles, note=f"not fitted: {e}")
    p = method.predict(record, {k: held[k].to_numpy(float) for k in ("N", "D", "C")})
    return MethodScore(method.name, _points(held, p.mean, p.lo, p.hi), **roles, note=record.note)


def _protocol(df: pd.DataFrame, opt: Options, target: Target) -> Backtest:
    """Hide the rungs above the cut, fit every candidate on the rest, score it on the hidden rungs'
    located optimum of `target`."""
    truth_cols = _truth_columns(df)
    table, notes = HF.tidy(_with_keys(df.drop(columns=truth_cols), target))
    rungs = _rung_table(table, target)
    if rungs.empty:
        raise AnalysisError(f"no rung has >= {HR.MIN_VALUES} {target.plural}: nothing to back-test")
    truth = _true_optima(df, target, rungs)
    if truth is not None:  # score against the known optimum
        rungs = rungs.assign(optimum=np.where(np.isfinite(truth), truth, rungs.optimum))
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
            f"no held-out rung (N > {thr:.4g}) has its {target.key} optimum inside its grid: nothing to score"
        )
    fit_runs = table[~validation.holdout_mask(table.N.to_numpy(), thr)].drop(columns=["rung"])
    # the baseline first, then the default and the candidates (the registry's order within a role)
    scored = sorted(methods(Family.HPARAM, target.protocol), key=lambda m: m.role != Role.BASELINE)
    rows = [_score(m, fit_runs, held, target.key) for m in scored if opt.scores(m.role != Role.CANDIDATE)]
    cut = {
        "what": f"rungs with N > {thr:.4g}",
        "threshold": float(thr),
        "n_fit": int((~held_mask).sum()),
        "n_held_out": int(len(held)),
        "n_held_out_edge": int(held_mask.sum() - len(held)),
        "target": "the known optimum" if truth is not None else "the located optimum",
    }
    return Backtest(target.protocol, cut, Metric.DLOG10, tuple(rows), warnings=tuple(notes))


def lr_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """The `lr` protocol: the optimum learning rate of the largest models' rungs."""
    return _protocol(df, opt, LR)


def batch_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """The `batch` protocol: the optimum batch size (`train.batch_size`) of the largest models' rungs."""
    return _protocol(df, opt, BATCH)
