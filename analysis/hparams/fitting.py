"""`fit_hparams(table, params) -> HparamFit`: rung optima, laws, penalty curves, predictions.

The runs table (from `collect`, or any CSV) needs N (or n_params), D (or tokens; without it
D = C / 6N), loss (or final_eval_loss) and one column per hyperparameter named by its config key
(`optim.lr`, `train.batch_size`); C (or flops) is used when present, else 6ND (also for a run whose
C is missing, non-positive or more than x10 off the others' C / 6ND). Rows whose loss is not a
finite positive number (diverged runs) and, where the table says, runs not `completed` are left
out. Rungs with fewer than three values of a parameter, or no located optimum, are left out of
its law and listed (`ParamFit.skipped`, JSON `skipped_rungs`).

A rung is one model size N at one budget (`sweep.budget` / `budget` when the table has it) or,
without a budget column, one N at one D (token counts within 5% are one D: runs of another batch
size round a budget to a slightly different number of whole steps).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.core import progress
from analysis.core.best_runs import BUDGET_COLUMNS, D_COLUMNS, N_COLUMNS
from analysis.core.table import FLOPS_PER_PARAM_TOKEN, LOSS_COLUMNS, TABLE_COLUMNS
from analysis.hparams import laws as L
from analysis.hparams import rungs as R
from models.base.errors import AnalysisError
from models.base.rundir import HPARAMS_KIND, RunStatus

C_COLUMNS = TABLE_COLUMNS["C"]
BATCH_KEY = "train.batch_size"
D_TOLERANCE = 0.05  # token counts within 5% are one rung's D
C_RATIO_SPAN = 10.0  # a run's C / 6ND this far from the runs' median is not a compute count
# settings the runs shared, recorded in HP.json `context`: a plan states them as the recipe's
CONTEXT_KEYS = (
    "model.seq_len",
    "optim.schedule",
    "optim.min_lr_ratio",
    "optim.decay_fraction",
    "train.batch_size",
)
SWEPT_SPAN = 1.2  # a default parameter's values span more than x1.2 in some rung (a sweep, not rounding)
PENALTY_K = (0.125, 0.25, 0.5, 2**-0.5, 2**0.5, 2.0, 4.0, 8.0)  # multiples of the optimum
VERTEX, BEST_TRIED = "vertex", "best_tried"  # what a rung's optimum is to the law (`HparamOptions.optimum`)


@dataclasses.dataclass(frozen=True)
class HparamOptions:
    """How `fit_hparams` locates optima and fits laws."""

    window: int = R.DEFAULT_WINDOW  # values each side of the best that the rung quadratic uses
    forms: tuple[str, ...] = tuple(L.FORMS)  # candidate law forms
    include_edges: bool = False  # fit the law also to optima at the grid's edge
    seed: int = 0
    # the rung optimum the law goes through: the vertex, or (the baseline) the best value tried in
    # every located rung, edge and flat ones included, through the N form alone
    optimum: str = VERTEX


def _column(df: pd.DataFrame, names: Sequence[str], role: str, required: bool = True) -> str | None:
    col = next((c for c in names if c in df.columns), None)
    if col is None and required:
        raise AnalysisError(
            f"the runs table has no {role} column (looked for {', '.join(names)}); "
            f"its columns: {', '.join(map(str, df.columns[:20]))}"
        )
    return col


def _numeric(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col], errors="coerce").to_numpy(float)


def tidy(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(table with N, D, C, loss, rung and every original column; notes on rows left out)."""
    notes = []
    out = df.copy()
    if "status" in out.columns:
        bad = ~out["status"].astype(str).eq(RunStatus.COMPLETED)
        if bad.any():
            notes.append(f"{int(bad.sum())} run(s) not completed left out")
            out = out[~bad]
    N = _numeric(out, _column(out, N_COLUMNS, "model-size (N)"))
    loss = _numeric(out, _column(out, LOSS_COLUMNS, "loss"))
    ok = np.isfinite(loss) & (loss > 0)
    if (~ok).any():
        notes.append(f"{int((~ok).sum())} run(s) without a finite positive loss (diverged?) left out")
    D, C = _tokens_and_compute(out, N, ok, notes)
    out = out.assign(N=N, D=D, C=C, loss=loss)[ok].reset_index(drop=True)
    if out.empty:
        raise AnalysisError("no run has a finite positive loss: nothing to fit")
    bcol = _column(out, BUDGET_COLUMNS, "budget", required=False)
    budget = _numeric(out, bcol) if bcol else None
    out["rung"] = _rung_keys(out["N"].to_numpy(), out["D"].to_numpy(), budget)
    return out, notes


def _positive(v: np.ndarray) -> np.ndarray:
    return np.isfinite(v) & (v > 0)


def _tokens_and_compute(
    df: pd.DataFrame, N: np.ndarray, ok: np.ndarray, notes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(D, C) of every run. A run without a D (no D column, or a blank cell) has D = C / 6N. C is
    the table's where it is a finite positive number, else 6ND x the median C / 6ND of the runs
    that have one: a missing or non-positive C (a blank `flops` cell, an int64 overflow of 6*N*D)
    must not reach a law's log(C). Raises when a run kept (`ok`) has no positive N and D."""
    dcol = _column(df, D_COLUMNS, "token-count (D)", required=False)
    ccol = _column(df, C_COLUMNS, "compute", required=False)
    if dcol is None and ccol is None:
        _column(df, D_COLUMNS, "token-count (D)")  # raises: neither D nor a C to derive it from
    C = _numeric(df, ccol) if ccol else np.full(len(N), np.nan)
    D = _numeric(df, dcol) if dcol else np.full(len(N), np.nan)
    fill = ok & ~_positive(D) & _positive(C) & _positive(N)
    if fill.any():
        D = D.copy()
        D[fill] = C[fill] / (FLOPS_PER_PARAM_TOKEN * N[fill])
        notes.append(
            f"no token-count column: D = {ccol} / 6N"
            if dcol is None
            else f"{int(fill.sum())} run(s) without a positive {dcol}: D = {ccol} / 6N"
        )
    bad = ok & ~(_positive(N) & _positive(D))
    if bad.any():
        need = "N and D" + (f" (or a positive {ccol} to derive D from)" if ccol else "")
        raise AnalysisError(
            f"every run needs a positive {need}; fix the {int(bad.sum())} run(s) where they are "
            "missing or <= 0"
        )
    six_nd = np.full(len(N), np.nan)
    six_nd[ok] = FLOPS_PER_PARAM_TOKEN * N[ok] * D[ok]
    good = ok & _positive(C)
    ratio = float(np.median(C[good] / six_nd[good])) if good.any() else 1.0
    # a C off 6ND x the others' ratio by more than C_RATIO_SPAN is no compute count (a wrapped overflow)
    off = np.zeros(len(C))
    off[good] = np.abs(np.log(C[good] / (ratio * six_nd[good])))
    good &= off <= math.log(C_RATIO_SPAN)
    if ccol and (ok & ~good).any():
        notes.append(
            f"{int((ok & ~good).sum())} run(s) with a missing, non-positive or inconsistent {ccol} (more "
            f"than x{C_RATIO_SPAN:g} off 6ND x the runs' median {ccol} / 6ND, {ratio:.3g}): their C is "
            "6ND x that median (a bad C is often an int64 overflow of 6*N*D)"
        )
    return D, np.where(good, C, ratio * six_nd)


def _rung_keys(N: np.ndarray, D: np.ndarray, budget: np.ndarray | None) -> list[tuple]:
    keys: list[tuple] = [()] * len(N)
    n_key = [float(f"{v:.6g}") for v in N]
    if budget is not None and np.isfinite(budget).all():
        return [(n, float(f"{b:.6g}")) for n, b in zip(n_key, budget)]
    for n in sorted(set(n_key)):
        idx = sorted((i for i in range(len(N)) if n_key[i] == n), key=lambda i: D[i])
        start = None
        for i in idx:
            if start is None or D[i] > start * (1 + D_TOLERANCE):
                start = D[i]
            keys[i] = (n, float(f"{start:.6g}"))
    return keys


def swept_params(df: pd.DataFrame, min_values: int = R.MIN_VALUES) -> list[str]:
    """The `optim.*` / train.batch_size columns swept inside some rung: >= `min_values` distinct
    positive values spanning more than SWEPT_SPAN. Values that follow the run length
    (optim.warmup_tokens is a fraction of each run's tokens, which whole steps of another batch
    size move by < 1%) are not a sweep."""
    out = []
    for c in df.columns:
        if not (str(c).startswith("optim.") or c == BATCH_KEY):
            continue
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any() or (v <= 0).any():
            continue
        g = df.assign(_v=v).groupby("rung")["_v"]
        swept = (g.nunique() >= min_values) & (g.max() > SWEPT_SPAN * g.min())
        if swept.any():
            out.append(str(c))
    return out


def _no_swept_param(df: pd.DataFrame) -> AnalysisError:
    """The error when no column is swept with >= MIN_VALUES values in a rung: what to fix."""
    two = swept_params(df, min_values=2)
    if two:
        return AnalysisError(
            f"no rung has >= {R.MIN_VALUES} values of any hyperparameter ({', '.join(two)}: at most 2 "
            f"per rung); an optimum needs >= {R.MIN_VALUES} values in a rung: sweep a third value"
        )
    return AnalysisError(
        "no optim.* or train.batch_size column has >= 3 values in any rung; "
        "name the swept column with --hparam"
    )


def check_param(df: pd.DataFrame, param: str) -> None:
    if param not in df.columns:
        cands = [c for c in df.columns if str(c).startswith("optim.") or c == BATCH_KEY]
        raise AnalysisError(
            f"--hparam {param}: the runs table has no such column (hyperparameter columns: "
            f"{', '.join(map(str, cands)) or 'none'})"
        )
    v = pd.to_numeric(df[param], errors="coerce")
    if v.isna().any():
        raise AnalysisError(f"{param} has non-numeric or missing values; fix or drop those runs")
    if (v <= 0).any():
        bad = v[v <= 0].iloc[0]
        raise AnalysisError(f"{param} has non-positive values (e.g. {bad:g}); a law in log(value) needs > 0")
    if df.assign(_v=v).groupby("rung")["_v"].nunique().max() < 2:
        raise AnalysisError(
            f"{param} was never swept: every rung has one value; sweep it, or drop --hparam {param}"
        )


@dataclasses.dataclass(frozen=True)
class ParamFit:
    """Everything fitted for one hyperparameter."""

    param: str
    rungs: tuple[R.RungOptimum, ...]
    law: L.HparamLaw
    holdout: L.Holdout | None
    loss_noise: float
    loss_noise_source: str
    n_excluded: int  # rungs left out of the law (edge / flat)
    skipped: tuple[R.SkippedRung, ...] = ()  # rungs with no optimum: too few values, or not finite
    optimum: str = VERTEX  # the rung optimum the law went through (`HparamOptions.optimum`)

    def penalty(self) -> dict:
        kap = np.array([r.kappa for r in self.rungs if r.usable and math.isfinite(r.kappa)])
        if kap.size == 0:
            kap = np.array([r.kappa for r in self.rungs if math.isfinite(r.kappa)])
        k = np.array(PENALTY_K)
        curve = kap[:, None] * np.log(k)[None, :] ** 2 if kap.size else np.full((1, k.size), np.nan)
        return {
            "k": list(PENALTY_K),
            "loss_increase": np.median(curve, axis=0).tolist(),
            "lo": np.min(curve, axis=0).tolist(),
            "hi": np.max(curve, axis=0).tolist(),
            "kappa_median": float(np.median(kap)) if kap.size else None,
            "n_rungs": int(kap.size),
            "note": "relative loss increase at k x the rung optimum, from each rung's quadratic in ln(value)",
        }


def _rung_inputs(df: pd.DataFrame) -> dict[tuple, dict[str, float]]:
    """Per rung key, its N, D and C: the medians over its runs."""
    return {
        key: {k: float(np.median(g[k])) for k in ("N", "D", "C")}
        for key, g in df[["rung", "N", "D", "C"]].groupby("rung", sort=False)
    }


def _skipped(param: str, where: dict[str, float], best: pd.DataFrame, reason: str) -> R.SkippedRung:
    values = tuple(float(v) for v in best["_v"])
    return R.SkippedRung(param, **where, n_values=len(values), values=values, reason=reason)


def _too_few_everywhere(param: str, skipped: Sequence[R.SkippedRung]) -> AnalysisError:
    counts = pd.Series([s.n_values for s in skipped]).value_counts().sort_index(ascending=False)
    have = ", ".join(f"{n} rung(s) have {k}" for k, n in counts.items())
    eg = max(skipped, key=lambda s: (s.n_values, s.N, s.D))
    return AnalysisError(
        f"{param}: no rung has >= {R.MIN_VALUES} distinct values ({have}; e.g. {eg.describe()}); "
        f"sweep >= {R.MIN_VALUES} values of {param} (e.g. x0.5, x1, x2 around the best) in each rung to fit"
    )


def locate_rungs(
    df: pd.DataFrame, param: str, opts: HparamOptions
) -> tuple[list[R.RungOptimum], list[R.SkippedRung], float, str]:
    """(located rung optima, rungs left out with their reason, loss noise, its source). Rungs with
    fewer than MIN_VALUES values, or whose optimum is not finite, are left out; raises when no
    rung has MIN_VALUES values."""
    profiles = R.profiles(df, param)
    swept = [(k, b) for k, b in profiles if len(b) >= R.MIN_VALUES]
    at = _rung_inputs(df)
    skipped = [
        _skipped(param, at[k], b, R.too_few_reason(param, b["_v"].to_numpy(float)))
        for k, b in profiles
        if len(b) < R.MIN_VALUES
    ]
    if not swept:
        raise _too_few_everywhere(param, skipped)
    noise, source = R.pooled_noise(swept, opts.window)
    found = []
    for j, (key, best) in enumerate(swept):
        v, loss = best["_v"].to_numpy(float), best["loss"].to_numpy(float)
        r = R.locate(
            param, **at[key], values=v, losses=loss, noise=noise, window=opts.window, seed=opts.seed + j
        )
        why = R.unlocated_reason(r)
        if why is None:
            found.append(r)
        else:
            skipped.append(_skipped(param, at[key], best, why))
    return found, skipped, noise, source


def best_tried_interval(r: R.RungOptimum) -> tuple[float, float]:
    """The range the best value tried stands for: the half-steps (geometric midpoints) to its
    neighbours, the step to the one neighbour mirrored at an end of the grid."""
    v = np.log(r.values)
    i = int(np.argmin(np.abs(v - math.log(r.best_tried))))
    lo = v[i] - (v[i] - v[i - 1] if i > 0 else v[i + 1] - v[i]) / 2
    hi = v[i] + (v[i + 1] - v[i] if i + 1 < len(v) else v[i] - v[i - 1]) / 2
    return math.exp(lo), math.exp(hi)


def _fit_best_tried(
    param: str, found: list[R.RungOptimum], skipped: list[R.SkippedRung], noise: float, source: str, seed: int
) -> ParamFit:
    """The baseline's law: ln h* linear in ln N through the best value tried in every located rung
    (no vertex, no edge exclusion, no form choice)."""
    N = np.array([r.N for r in found])
    if np.unique(N).size < 2:
        raise AnalysisError(
            f"{param}: the baseline (ln {L.short_name(param)}* linear in ln N through each rung's best "
            f"value) needs rungs at >= 2 model sizes; these have {np.unique(N).size}"
        )
    inputs = {k: np.array([getattr(r, k) for r in found]) for k in ("N", "D", "C")}
    best = np.array([r.best_tried for r in found])
    kappa = np.array([r.kappa for r in found])
    hold = L.choose_form(param, inputs, best, kappa, ("N",))[1] if L.feasible(L.FORMS["N"], inputs) else None
    interval = np.array([best_tried_interval(r) for r in found])
    law = L.fit_power_law(param, L.FORMS["N"], inputs, best, seed, interval)
    return ParamFit(param, tuple(found), law, hold, noise, source, 0, tuple(skipped), BEST_TRIED)


def fit_param(df: pd.DataFrame, param: str, opts: HparamOptions) -> ParamFit:
    found, skipped, noise, source = locate_rungs(df, param, opts)
    if opts.optimum == BEST_TRIED:
        return _fit_best_tried(param, found, skipped, noise, source, opts.seed)
    used = [r for r in found if r.usable or (opts.include_edges and not r.flat)]
    if len(used) < 3:
        flags = [f"N={r.N:.3g}, D={r.D:.3g}: {r.flag}" for r in found if r.flag]
        flags += [s.describe() for s in skipped if s.n_values >= R.MIN_VALUES]
        more = f"; {len(flags) - 5} more" if len(flags) > 5 else ""
        left = f", {len(skipped)} left out with too few values" if skipped else ""
        raise AnalysisError(
            f"{param}: only {len(used)} of {len(found) + len(skipped)} rungs have an optimum inside the "
            f"grid{left} ({'; '.join(flags[:5])}{more}); widen the swept range (or pass --include-edges)"
        )
    inputs = {k: np.array([getattr(r, k) for r in used]) for k in ("N", "D", "C")}
    opt = np.array([r.optimum for r in used])
    kappa = np.array([r.kappa for r in used])
    form, hold = L.choose_form(param, inputs, opt, kappa, opts.forms)
    interval = np.array([r.interval for r in used])  # each optimum's own error: redrawn in the bootstrap
    law = L.fit_power_law(param, L.FORMS[form], inputs, opt, opts.seed, interval)
    return ParamFit(param, tuple(found), law, hold, noise, source, len(found) - len(used), tuple(skipped))


@dataclasses.dataclass(frozen=True)
class HparamFit:
    """The result of `fit_hparams`: one ParamFit per hyperparameter."""

    fits: dict[str, ParamFit]
    c_over_6nd: float  # median C / (6 N D) of the runs: converts (N, D) targets to C
    notes: tuple[str, ...]
    n_runs: int
    context: dict[str, Any] = dataclasses.field(default_factory=dict)  # settings every run shared

    def laws(self) -> "HparamLaws":
        return HparamLaws({p: f.law for p, f in self.fits.items()}, self.c_over_6nd, self.context)

    @property
    def note(self) -> str:
        """Which form each law chose (the backtest's note); the baseline's: none."""
        return "; ".join(f"chose {f.law.form}" for f in self.fits.values() if f.optimum == VERTEX)

    def summary(self) -> str:
        return "\n".join(
            f"{f.law.spec.expression(p, f.law.coef)} ({f.law.form}, {f.law.n_rungs} rungs, scatter "
            f"x{math.exp(f.law.scatter_sd):.2f})"
            for p, f in self.fits.items()
        )

    def to_dict(self) -> dict:
        return self.to_json()

    def to_json(self) -> dict:
        return {
            "kind": HPARAMS_KIND,
            "level": L.PREDICTION_LEVEL,
            "params": {p: f.law.params() for p, f in self.fits.items()},
            "ci": {p: f.law.ci() for p, f in self.fits.items()},
            "law_form": {p: f.law.form for p, f in self.fits.items()},
            "expression": {p: f.law.spec.expression(p, f.law.coef) for p, f in self.fits.items()},
            "laws": {
                p: {
                    **f.law.to_json(),
                    "n_excluded": f.n_excluded,
                    "n_skipped": len(f.skipped),
                    "optimum": f.optimum,
                }
                for p, f in self.fits.items()
            },
            "rungs": [r.to_json() for f in self.fits.values() for r in f.rungs],
            "skipped_rungs": [s.to_json() for f in self.fits.values() for s in f.skipped],
            "holdout": {p: f.holdout.to_json() if f.holdout else None for p, f in self.fits.items()},
            "penalty": {p: f.penalty() for p, f in self.fits.items()},
            "loss_noise": {
                p: {"value": f.loss_noise, "source": f.loss_noise_source} for p, f in self.fits.items()
            },
            "c_over_6nd": self.c_over_6nd,
            "context": self.context,
            "n_runs": self.n_runs,
            "notes": list(self.notes),
        }


def fit_hparams(
    df: pd.DataFrame,
    params: Sequence[str] | None = None,
    opts: HparamOptions | None = None,
    per_param: Mapping[str, HparamOptions] | None = None,
) -> HparamFit:
    """The laws of `params` (default: every swept one); `per_param` overrides `opts` for some of
    them (`fit-hparams` fits each parameter with the method its folds chose)."""
    opts = opts or HparamOptions()
    per_param = per_param or {}
    unknown = [f for o in (opts, *per_param.values()) for f in o.forms if f not in L.FORMS]
    if unknown:
        raise AnalysisError(f"unknown law form(s) {unknown}; choose from {', '.join(L.FORMS)}")
    table, notes = tidy(df)
    params = resolve_params(table, params)
    fits = {
        p: fit_param(table, p, per_param.get(p, opts))
        for p in progress.track(params, desc="fit-hparams", unit="param")
    }
    ratio = float(np.median(table["C"] / (FLOPS_PER_PARAM_TOKEN * table["N"] * table["D"])))
    return HparamFit(fits, ratio, tuple(notes), len(table), run_context(table, params))


def resolve_params(table: pd.DataFrame, params: Sequence[str] | None) -> list[str]:
    """The parameters to fit on a tidied table: `params` checked, else every swept one."""
    if params:
        for p in params:
            check_param(table, p)
        return list(params)
    found = swept_params(table)
    if not found:
        raise _no_swept_param(table)
    return found


def run_context(df: pd.DataFrame, params: Sequence[str]) -> dict[str, Any]:
    """The settings every run shared (the laws hold under them): CONTEXT_KEYS that have one value
    in the table, and the warm-up as a fraction of each run's tokens (its median)."""
    out: dict[str, Any] = {}
    for key in CONTEXT_KEYS:
        if key in df.columns and key not in params and df[key].nunique(dropna=False) == 1:
            v = df[key].iloc[0]
            out[key] = v.item() if hasattr(v, "item") else v
    if "optim.warmup_tokens" in df.columns and "optim.warmup_tokens" not in params:
        w = pd.to_numeric(df["optim.warmup_tokens"], errors="coerce") / df["D"]
        if w.notna().all():
            out["warmup_fraction"] = float(np.median(w))
    return out


@dataclasses.dataclass(frozen=True)
class HparamLaws:
    """Fitted hyperparameter laws read back from an HP.json: what sweeps and plans predict with."""

    laws: dict[str, L.HparamLaw]
    c_over_6nd: float = 1.0
    context: dict[str, Any] = dataclasses.field(default_factory=dict)  # HP.json `context`

    @property
    def params(self) -> list[str]:
        return list(self.laws)

    def predict(self, param: str, N: float, D: float, C: float | None = None) -> tuple[float, float, float]:
        """(value, 90% lo, 90% hi) of `param`'s optimum at one (N, D[, C])."""
        if param not in self.laws:
            raise AnalysisError(
                f"the hyperparameter laws have no law for {param} (they have: {', '.join(self.laws)})"
            )
        if C is None:
            C = self.c_over_6nd * FLOPS_PER_PARAM_TOKEN * N * D
        v, lo, hi = self.laws[param].predict(np.array([N]), np.array([D]), np.array([C]))
        return float(v[0]), float(lo[0]), float(hi[0])

    def describe(self, param: str) -> str:
        law = self.laws[param]
        return law.spec.expression(param, law.coef)


def load_hparams(path: str | os.PathLike) -> HparamLaws:
    """An HP.json written by `python -m analysis fit-hparams --json`; one-line errors."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            d = json.load(f)
    except FileNotFoundError:
        raise AnalysisError(f"hyperparameter laws file not found: {path}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise AnalysisError(f"cannot read hyperparameter laws {path}: {e}") from None
    return hparams_from_json(d, path)


def hparams_from_json(d: Any, where: str = "HP.json") -> HparamLaws:
    if not isinstance(d, Mapping) or d.get("kind") != HPARAMS_KIND or not isinstance(d.get("laws"), Mapping):
        raise AnalysisError(
            f"{where} is not a fit-hparams result (write one with python -m analysis fit-hparams --json)"
        )
    try:
        laws = {p: L.HparamLaw.from_json(v) for p, v in d["laws"].items()}
    except (KeyError, TypeError, ValueError) as e:
        raise AnalysisError(f"{where}: malformed law entry ({e}); rewrite it with fit-hparams") from None
    context = d.get("context") if isinstance(d.get("context"), Mapping) else {}
    return HparamLaws(laws, float(d.get("c_over_6nd") or 1.0), dict(context))
