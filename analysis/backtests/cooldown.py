"""Cooldown protocol `cooldown`: forecast the end loss of a warm-stable-decay branch ("cooldown") of
a model shape never cooled before, from that shape's constant-LR ("hot") curve up to the branch and
what the smaller shapes' cooldowns taught.

Input: a folder in the Gemstones layout (McLeish et al. 2025; `../shared/data/gemstones/SOURCE.md`):
`hot_checkpoints.csv` (model, N, step, loss: one constant-LR run per model) and `cooldowns.csv`
(model, N, branch_step, loss_at_branch, step_end, loss_end: one row per branch). The schedule is
assumed (their public code does not hold it): the hot rate constant from the first logged step
(linear warm-up before), a cooldown decaying it linearly to 0 by step_end; rates normalised to
`PEAK_LR` = 3e-4 (the law is invariant to the rate's unit up to A, B and C).

Held out: the shapes with N above `--holdout-above-n` (default: the largest third,
`validation.share_cut`); each of their branches is predicted from the hot curve up to its branch
step (its loss_at_branch included). Branches with fewer than `MIN_PREFIX` hot steps before them are
left out (a warning says how many).

Methods (the registry's protocol `cooldown`), scored on loss_end:
- `baseline_branch_ratio` (registered here): loss_at_branch x the fitted branches' median
  loss_end / loss_at_branch; 90% band: the central 90% of those ratios (`transfer.RatioFit`).
- `mpl` (fit-curve's default, so the protocol's default row, though the baseline beats it on
  Gemstones: docs/backtest.md, "Backtesting"): (1) per fitted shape, `fit_curve` on its hot curve
  plus one two-point curve per branch; (2) for a new shape, B as a power law in N over the fitted
  shapes and C, beta, gamma their median; L0, A, alpha fitted on its hot prefix with those fixed
  (L-BFGS); the law predicts the branch's end. 90% interval: the central 90% of the log errors of
  the same two stages leave-one-shape-out over the fitted shapes (`--bootstrap 0`: none).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

import analysis.curves.methods  # noqa: F401  (registers mpl, the protocol's default)
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress, validation
from analysis.core.methods import Family, Method, Prediction, Role, methods, register
from analysis.core.table import read_table
from analysis.curves.data import Curve, load_curve
from analysis.curves.fitting import fit_curve
from analysis.curves.laws import MPL
from analysis.forecast.transfer import RatioFit
from models.base.errors import AnalysisError

BASELINE = "baseline_branch_ratio"
HOT_FILE, COOLDOWN_FILE = "hot_checkpoints.csv", "cooldowns.csv"
HOT_COLUMNS = ("model", "N", "step", "loss")
COOLDOWN_COLUMNS = ("model", "N", "branch_step", "loss_at_branch", "step_end", "loss_end")
PEAK_LR = 3e-4  # the nominal constant rate of the hot runs (module docstring)
HELD_SHARE = 1 / 3  # without --holdout-above-n: the largest third of the shapes is held out
MIN_PREFIX = 3  # hot steps up to a branch: one per free parameter of the prefix fit (L0, A, alpha)
LAYOUT = (
    f"--protocol cooldown reads a folder holding {HOT_FILE} ({', '.join(HOT_COLUMNS)}) and "
    f"{COOLDOWN_FILE} ({', '.join(COOLDOWN_COLUMNS)}), the Gemstones layout"
)


@dataclass(frozen=True)
class Branch:
    """One cooldown: from the hot checkpoint at `step` (loss `loss`) to `end` (loss `loss_end`)."""

    step: int
    loss: float
    end: int
    loss_end: float


@dataclass(frozen=True)
class Shape:
    """One model shape: its hot curve and its cooldown branches."""

    model: str
    N: float
    hot: Curve
    branches: tuple[Branch, ...]

    def branch_curve(self, b: Branch) -> Curve:
        """The branch as a curve: two logged steps (branch and end), the rate decaying linearly to 0
        between them, the hot schedule before (warm-up to the hot curve's first logged step)."""
        return Curve(
            f"{self.model} {b.step}",
            np.array([b.step, b.end], np.int64),
            np.array([b.loss, b.loss_end]),
            np.array([PEAK_LR, 0.0]),
            warmup_steps=int(self.hot.steps[0]),
        )

    def prefix(self, b: Branch) -> Curve:
        """The hot curve up to the branch step, ending with the branch's own loss there."""
        c = self.hot.until(b.step - 1)
        return Curve(
            f"{self.model} hot to {b.step}",
            np.append(c.steps, b.step),
            np.append(c.loss, b.loss),
            np.append(c.lr, PEAK_LR),
        )


@dataclass(frozen=True)
class CooldownSplit:
    fit: tuple[Shape, ...]
    held: tuple[Shape, ...]
    cut: dict


# ---- input ----------------------------------------------------------------------------------------
def _read(folder: str, name: str, columns: Sequence[str]) -> pd.DataFrame:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise AnalysisError(f"{folder}: no {name}; {LAYOUT}")
    df = read_table(path)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path}: missing column(s) {', '.join(missing)}; {LAYOUT}")
    num = df[list(columns[1:])].apply(pd.to_numeric, errors="coerce")
    if num.isna().any().any() or (num.drop(columns="N").to_numpy() < 0).any() or (num.N <= 0).any():
        raise AnalysisError(f"{path}: {', '.join(columns[1:])} must be numbers (N > 0, the rest >= 0)")
    return pd.concat([df[["model"]].astype(str), num], axis=1)


def _branches(rows: pd.DataFrame, model: str) -> tuple[Branch, ...]:
    bad = rows[(rows.step_end <= rows.branch_step) | (rows.loss_at_branch <= 0) | (rows.loss_end <= 0)]
    if len(bad):
        raise AnalysisError(
            f"{COOLDOWN_FILE}: model {model} has a branch with step_end <= branch_step or a loss <= 0"
        )
    rows = rows.sort_values("branch_step")
    return tuple(
        Branch(int(r.branch_step), float(r.loss_at_branch), int(r.step_end), float(r.loss_end))
        for r in rows.itertuples()
    )


def load_shapes(data: pd.DataFrame | str) -> list[Shape]:
    """Every model of the cooldown table with its hot curve (`load_curve`'s checks) and branches."""
    if isinstance(data, pd.DataFrame):
        raise AnalysisError(f"{LAYOUT}, not one table")
    folder = os.fspath(data)
    if not os.path.exists(folder):
        raise AnalysisError(f"file not found: {folder}")
    if not os.path.isdir(folder):
        raise AnalysisError(f"{LAYOUT}; {folder} is a file")
    hot = _read(folder, HOT_FILE, HOT_COLUMNS)
    cool = _read(folder, COOLDOWN_FILE, COOLDOWN_COLUMNS)
    shapes = []
    for model, rows in cool.groupby("model", sort=True):
        h = hot[hot.model == model]
        if h.empty:
            raise AnalysisError(f"{COOLDOWN_FILE}: model {model} has no hot curve in {HOT_FILE}")
        frame = pd.DataFrame({"step": h.step, "lr": PEAK_LR, "loss": h.loss})
        curve = load_curve(frame, name=f"{model} hot")
        shapes.append(Shape(str(model), float(rows.N.iloc[0]), curve, _branches(rows, str(model))))
    return shapes


def _usable(shapes: list[Shape]) -> tuple[list[Shape], int]:
    """The shapes with their branches that have >= MIN_PREFIX hot steps up to them, and how many
    branches were left out."""
    out, dropped = [], 0
    for s in shapes:
        keep = tuple(b for b in s.branches if np.sum(s.hot.steps < b.step) + 1 >= MIN_PREFIX)
        dropped += len(s.branches) - len(keep)
        if keep:
            out.append(Shape(s.model, s.N, s.hot, keep))
    return out, dropped


def split_shapes(shapes: list[Shape], opt: Options) -> CooldownSplit:
    """Fitted and held-out shapes (module docstring): N above the cut is held out."""
    N = np.array([s.N for s in shapes])
    thr = opt.holdout_above_n
    if thr is None:
        thr = validation.share_cut(N, 1 - HELD_SHARE) if len(shapes) > 1 else float(N.max())
    held = validation.holdout_mask(N, thr)
    what = f"the cooldown ends of shapes with N > {thr:.4g}"
    if not held.any():
        raise AnalysisError(f"no shape with cooldowns has N > {thr:.4g}; lower --holdout-above-n")
    if held.all():
        raise AnalysisError(
            f"every shape with cooldowns has N > {thr:.4g}; nothing is left to fit: raise --holdout-above-n"
        )
    fit = tuple(s for s, h in zip(shapes, held) if not h)
    out = tuple(s for s, h in zip(shapes, held) if h)
    cut = {
        "what": what,
        "threshold": float(thr),
        "n_fit": len(fit),
        "n_held_out": len(out),
        "n_points_held_out": sum(len(s.branches) for s in out),
        "schedule": "cooldown: linear decay to 0 from the hot rate (assumed)",
        "fitted": [s.model for s in fit],
        "held_out": [s.model for s in out],
    }
    return CooldownSplit(fit, out, cut)


# ---- methods --------------------------------------------------------------------------------------
def _points(shapes: Sequence[Shape], predict) -> tuple[Point, ...]:
    """Every branch of `shapes` with `predict(shape, branch) -> (pred, lo, hi)`."""
    out = []
    for i, s in enumerate(shapes):
        for b in s.branches:
            pred, lo, hi = predict(s, b)
            x = {"shape": i, "N": s.N, "branch_step": b.step, "step_end": b.end}
            out.append(Point(x, b.loss_end, float(pred), float(lo), float(hi)))
    return tuple(out)


def fit_branch_ratio(table, **_) -> RatioFit:
    """The median loss_end / loss_at_branch of a cooldown folder's (or shapes') branches."""
    shapes = table if isinstance(table, (list, tuple)) else load_shapes(table)
    return RatioFit.of(np.array([b.loss_end / b.loss for s in shapes for b in s.branches]))


def predict_branch_ratio(fit: RatioFit, inputs) -> Prediction:
    x = np.asarray(inputs["loss_at_branch"], float)
    return Prediction(x * fit.ratio, x * fit.lo, x * fit.hi)


def _baseline(m: Method, split: CooldownSplit) -> MethodScore:
    f = m.fit(list(split.fit))

    def predict(s: Shape, b: Branch):
        p = m.predict(f, {"loss_at_branch": np.array([b.loss])})
        return p.mean[0], p.lo[0], p.hi[0]

    return MethodScore(m.name, _points(split.held, predict), baseline=True, note=f.note)


def _shape_fit(shape: Shape) -> dict[str, float]:
    """Stage 1: the law on one shape's hot curve and its branches, every parameter free."""
    curves = [shape.hot] + [shape.branch_curve(b) for b in shape.branches]
    return fit_curve(curves, intervals=False).params


def transfer(fits: Sequence[tuple[float, dict[str, float]]], N: float) -> dict[str, float]:
    """Stage 2's annealing parameters for a shape of size N from (N, params) of fitted shapes:
    the first (the drop's scale B) a power law in N, the others their median (module docstring)."""
    logN = np.log([n for n, _ in fits])
    out = {}
    for i, k in enumerate(MPL.anneal_params):
        y = np.log([p[k] for _, p in fits])
        if i == 0 and np.ptp(logN) > 0:
            slope, icpt = np.polyfit(logN, y, 1)
            out[k] = float(np.exp(icpt + slope * np.log(N)))
        else:
            out[k] = float(np.exp(np.median(y)))
    return out


def _predict_end(shape: Shape, b: Branch, fixed: dict[str, float]) -> float:
    """Stage 2: L0, A, alpha on the hot prefix with the annealing part fixed; the branch's end."""
    r = fit_curve([shape.prefix(b)], fixed=fixed, intervals=False)
    return float(r.predict(shape.branch_curve(b), np.array([b.end]))[0])


def _calibration(fits: list[tuple[Shape, dict[str, float]]]) -> tuple[float, float]:
    """Central 90% of the log errors of leave-one-shape-out forecasts over the fitted shapes."""
    if len(fits) < 3:
        return np.nan, np.nan
    errs = []
    for j, (s, _) in enumerate(fits):
        fixed = transfer([(o.N, p) for i, (o, p) in enumerate(fits) if i != j], s.N)
        errs += [np.log(b.loss_end / _predict_end(s, b, fixed)) for b in s.branches]
    lo, hi = validation.percentile_interval(np.array(errs))
    return float(lo), float(hi)


def _law_score(m: Method, split: CooldownSplit, opt: Options) -> MethodScore:
    """Stage 1 on the fitted shapes, stage 2 on every held-out branch."""
    default = m.role == Role.DEFAULT
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits = [(s, _shape_fit(s)) for s in split.fit]
            lo, hi = _calibration(fits) if opt.bootstrap > 0 else (np.nan, np.nan)
            by_n = [(s.N, p) for s, p in fits]

            def predict(s: Shape, b: Branch):
                pred = _predict_end(s, b, transfer(by_n, s.N))
                return pred, pred * np.exp(lo), pred * np.exp(hi)

            points = _points(split.held, predict)
    except AnalysisError as e:
        return MethodScore(m.name, (), default=default, note=f"not fitted: {e}")
    shared = transfer(by_n, split.held[-1].N)
    note = f"annealing at N={split.held[-1].N:.3g}: " + ", ".join(f"{k}={v:.4g}" for k, v in shared.items())
    return MethodScore(m.name, points, default=default, note=note)


def cooldown_protocol(data: pd.DataFrame | str, opt: Options = Options()) -> Backtest:
    """Backtest cooldown forecasts on shapes larger than the fitted ones (module docstring)."""
    shapes, dropped = _usable(load_shapes(data))
    if not shapes:
        raise AnalysisError(f"no branch has {MIN_PREFIX} hot steps up to it; log the hot curve more often")
    split = split_shapes(shapes, opt)
    ms = sorted(methods(Family.CURVE, "cooldown"), key=lambda m: m.role != Role.BASELINE)
    ms = [m for m in ms if opt.scores(m.role != Role.CANDIDATE)]
    rows = [
        _baseline(m, split) if m.role == Role.BASELINE else _law_score(m, split, opt)
        for m in progress.track(ms, desc="backtest cooldown", unit="method")
    ]
    notes = (
        (f"{dropped} branches with fewer than {MIN_PREFIX} hot steps up to them left out",) if dropped else ()
    )
    return Backtest("cooldown", split.cut, Metric.REL, tuple(rows), notes)


register(
    Method(
        BASELINE,
        Family.CURVE,
        ("cooldown",),
        Role.BASELINE,
        fit_branch_ratio,
        predict_branch_ratio,
        doc="a cooldown's end loss: its loss at the branch x the fitted branches' median end/branch ratio",
    )
)
