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
from analysis.core import progress, validation
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


def _rung_table(table: pd.DataFrame, target: Target, wrap: bool = True) -> pd.DataFrame:
    """One row per rung whose optimum fit-hparams locates (`locate_rungs`, on every rung): N, D, C,
    the located optimum, whether it is usable, and the rung's (value, best loss) profile `v`, `y`.
    `wrap`: locate_rungs' error as the backtest's (else as it is: fit-hparams says it itself)."""
    try:
        found = HF.locate_rungs(table, target.key, HF.HparamOptions())[0]
    except AnalysisError as e:
        if not wrap:
            raise
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


def _score(method: Method, fit_runs: pd.DataFrame, held: pd.DataFrame, param: str, **options) -> MethodScore:
    """A registered method fitted on the runs below the cut, scored on the held-out rungs."""
    roles = {"default": method.role == Role.DEFAULT, "baseline": method.role == Role.BASELINE}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = method.fit(fit_runs, param=param, **options)
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
    scored = [m for m in scored if opt.scores(m.role != Role.CANDIDATE)]
    rows = [
        _score(m, fit_runs, held, target.key)
        for m in progress.track(scored, desc=f"backtest {target.protocol}", unit="method")
    ]
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


# ---- the choice `fit-hparams` makes on the user's own table -------------------------------------
MIN_FOLDS = 2  # folds the baseline and a candidate must both be scored on to tell them apart
MIN_FIT_SIZES = 2  # model sizes a fold keeps below its cut (the baseline's line needs two)


@dataclasses.dataclass(frozen=True)
class MethodChoice:
    """Which method `fit-hparams` fitted for one parameter, and the fold errors it chose by
    (the JSON's `method_choice`)."""

    param: str
    protocol: str
    chosen: str
    baseline: str
    candidates: tuple[str, ...]  # in the order of preference (the baseline first)
    fold_errors: dict[str, dict[str, float]]  # method -> fold ("hide N >= cut") -> mean |dlog10|
    note: str | None = None  # why the baseline was kept without a comparison, or the choice forced
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # method -> why never scored
    forced = False  # chosen by the folds (fit-hparams' record of a method flag says True)

    def to_json(self) -> dict:
        return {
            "param": self.param,
            "protocol": self.protocol,
            "chosen": self.chosen,
            "baseline": self.baseline,
            "candidates": list(self.candidates),
            "fold_errors": {k: dict(v) for k, v in self.fold_errors.items()},
            "note": self.note,
            "skipped": dict(self.skipped),
            "parsimony": validation.PARSIMONY,
            "criterion": (
                f"forward-chaining folds of the {self.protocol} protocol (hide the largest model size, "
                f"then the two largest, ...): {self.baseline} unless a candidate's |log10 error| is "
                f"{validation.PARSIMONY:.0%} lower on every fold"
            ),
        }

    def summary(self) -> str:
        mean = {k: float(np.mean(list(v.values()))) for k, v in self.fold_errors.items() if v}
        scores = ", ".join(f"{k} {v:.3f}" for k, v in mean.items())
        n = max((len(v) for v in self.fold_errors.values()), default=0)
        return f"{self.param}: {self.chosen} ({n} fold(s), mean |dlog10|: {scores or 'none scored'})"


def _target_of(param: str) -> Target:
    known = {t.key: t for t in (LR, BATCH)}
    return known.get(param) or Target(param, param, (param,), param, f"values of {param}")


def choose_method(df: pd.DataFrame, param: str, **options) -> MethodChoice:
    """The method `fit-hparams` fits for `param` without a method flag: the protocol's baseline
    (`baseline_log_linear`) unless a candidate (the default `fit_hparams` law, `form_N_D`) beats it
    by PARSIMONY on every forward-chaining fold of this table (`validation.choose_against`, shared
    folds: a law needs three rungs below the cut, the baseline two sizes). Fold k hides the k
    largest model sizes (as many as leave MIN_FIT_SIZES below the cut, at most MAX_FOLDS) and scores
    each method's prediction of the hidden rungs' located optimum (`<param>_true` where the table
    has it), as the lr / batch protocols do. With fewer than MIN_FOLDS folds scored for the
    baseline and a candidate, the baseline is kept and `note` says why. `options` go to every
    method's fit (window, include_edges, seed)."""
    target = _target_of(param)
    protocol = target.protocol if target in (LR, BATCH) else "lr"
    by_role = lambda m: (m.role != Role.BASELINE, m.role != Role.DEFAULT)  # noqa: E731
    ranked = sorted(methods(Family.HPARAM, protocol), key=by_role)
    order = tuple(m.name for m in ranked)
    baseline = order[0]
    truth_cols = _truth_columns(df)
    table = HF.tidy(df.drop(columns=truth_cols))[0]
    rungs = _rung_table(table, target, wrap=False)
    truth = _true_optima(df, target, rungs)
    if truth is not None:
        rungs = rungs.assign(optimum=np.where(np.isfinite(truth), truth, rungs.optimum))
    sizes = validation.levels(rungs.N.to_numpy(float)).size
    if sizes < 2:
        default = next(m.name for m in ranked if m.role == Role.DEFAULT)
        note = (
            f"{param}: one model size: the baseline {baseline} (a line in ln N) cannot be fitted; "
            f"fitted the default {default} (its form chosen among D and C) without a comparison"
        )
        return MethodChoice(param, protocol, default, baseline, order, {}, note, {})
    cuts = validation.top_levels(rungs.N.to_numpy(float), validation.MAX_FOLDS, MIN_FIT_SIZES)
    folds: dict[str, dict[str, float]] = {m: {} for m in order}
    skipped: dict[str, str] = {}
    folds_bar = progress.track(list(reversed(cuts)), desc=f"{param}: choosing the law", unit="fold")
    for cut in folds_bar:  # the most hidden first: the last fold hides the largest size alone
        above = rungs.N.to_numpy(float) >= cut * (1 - validation.LEVEL_RTOL)
        held = rungs[above & rungs.usable.to_numpy(bool)]
        if held.empty:
            continue
        fit_runs = table[table.N.to_numpy(float) < cut * (1 - validation.LEVEL_RTOL)].drop(columns=["rung"])
        label = f"N >= {cut:.4g}"
        for m in ranked:
            score = _score(m, fit_runs, held, target.key, **options)
            e = score.errors(Metric.DLOG10)
            if score.points and np.isfinite(e).all():
                folds[m.name][label] = float(np.mean(np.abs(e)))
            elif score.note:
                skipped[m.name] = score.note
    folds = {k: v for k, v in folds.items() if v}
    skipped = {k: v for k, v in skipped.items() if k not in folds}
    base = folds.get(baseline, {})
    shared = max((sum(f in base for f in v) for k, v in folds.items() if k != baseline), default=0)
    if shared < MIN_FOLDS:
        note = (
            f"{param}: {shared} fold(s) scored both the baseline and a candidate ({len(rungs)} rungs at "
            f"{sizes} model sizes; {MIN_FOLDS} are needed to "
            f"tell them apart): kept the baseline {baseline} (ln {_short(param)}* linear in ln N through "
            "each rung's best value)"
        )
        return MethodChoice(param, protocol, baseline, baseline, order, folds, note, skipped)
    chosen = validation.choose_against(baseline, folds, order, validation.PARSIMONY, shared=True)
    return MethodChoice(param, protocol, chosen, baseline, order, folds, None, skipped)


def _short(param: str) -> str:
    from analysis.hparams.laws import short_name  # deferred: only for a message

    return short_name(param)
