"""The `cpt-curve` protocol: every replay ratio of a continual-pre-training ladder hidden in turn.

For each base model, domain and replay ratio of its continued runs, the `cpt_curve` law
(`analysis/curves/cpt.py`) is fitted on the base run's curve and the other ratios' continued
curves, then predicts the hidden ratio's curves at every evaluation, with the 90% interval the
fit calibrates on its own ratios (leave one out again). The baseline, `nearest_replay`, is what one
does without a law: the measured curve of the nearest fitted replay ratio with the same new tokens
and re-warm peak, at the same steps. Each point is one evaluation (x: N, domain 0 old / 1 new,
replay, D_B, step of the continued phase).
"""

from __future__ import annotations

import numpy as np

from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress
from analysis.curves.cpt import (
    Z90,
    CptCurve,
    _fit_points,
    _groups,
    held_out_errors,
    load_cpt_curves,
    points,
    predict,
)
from models.base.errors import AnalysisError

LAW, BASELINE = "cpt_curve", "nearest_replay"


def _x(c: CptCurve, n_params: float, step: int) -> dict[str, float]:
    return {
        "N": n_params,
        "domain": 0.0 if c.domain == "old" else 1.0,
        "replay": c.replay,
        "D_B": c.tokens_b,
        "step": float(step - c.start),
    }


def _law_points(train: list[CptCurve], test: list[CptCurve], domain: str, n_params: float) -> list[Point]:
    p = _fit_points(points(train), domain)
    errs = held_out_errors(train, domain) if len({c.replay for c in train if c.continued}) >= 3 else {}
    s = float(np.sqrt(np.mean(np.concatenate(list(errs.values())) ** 2))) if errs else None
    out = []
    for c in test:
        pred = predict(p, points([c]), domain)
        lo, hi = (pred * np.exp(-Z90 * s), pred * np.exp(Z90 * s)) if s else (pred * np.nan, pred * np.nan)
        out += [
            Point(_x(c, n_params, t), float(y), float(f), float(a), float(b))
            for t, y, f, a, b in zip(c.steps, c.loss, pred, lo, hi)
        ]
    return out


def _nearest_points(train: list[CptCurve], test: list[CptCurve], n_params: float) -> list[Point]:
    out = []
    for c in test:
        same = [t for t in train if t.continued and t.tokens_b == c.tokens_b and np.isclose(t.peak, c.peak)]
        if not same:
            continue
        near = min(same, key=lambda t: (abs(t.replay - c.replay), t.replay))
        pred = np.interp(c.steps - c.start, near.steps - near.start, near.loss)
        out += [Point(_x(c, n_params, t), float(y), float(f)) for t, y, f in zip(c.steps, c.loss, pred)]
    return out


def cpt_curve_protocol(data, opt: Options) -> Backtest:
    curves = load_cpt_curves(data)
    law, base = [], []
    groups = list(_groups(curves).items())
    n_fit = n_held = 0
    for (b, domain), group in progress.track(groups, desc="backtest cpt-curve", unit="model x domain"):
        ratios = sorted({c.replay for c in group if c.continued})
        if len(ratios) < 2:
            continue
        n = group[0].n_params
        for r in ratios:
            train = [c for c in group if not (c.continued and c.replay == r)]
            test = [c for c in group if c.continued and c.replay == r]
            law += _law_points(train, test, domain, n)
            base += _nearest_points(train, test, n)
            n_fit += len(train)
            n_held += len(test)
    if not law:
        raise AnalysisError(
            "the cpt-curve protocol needs continued runs at 2 or more replay ratios per base model"
        )
    cut = {
        "what": "each replay ratio's continued curves in turn, per base model and domain",
        "threshold": None,
        "n_fit": n_fit,
        "n_held_out": n_held,
    }
    methods = (
        MethodScore(BASELINE, tuple(base), baseline=True),
        MethodScore(LAW, tuple(law), default=True),
    )
    return Backtest("cpt-curve", cut, Metric.REL, methods)
