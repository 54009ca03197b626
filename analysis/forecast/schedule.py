"""A run's learning-rate schedule to its end, when it is known.

It is known when the run's `lr` column runs to its total_steps (a table's rows past the cut with an
lr and no loss: the planned schedule), or when a finished curve of the same shape exists: the run's
logged rates, divided by their peak, match within `SHAPE_RTOL` that curve's rates at the same
fractions of its length (from the peak on), and the rest of the run follows that shape at the run's
own peak rate (the runs of a sweep: one schedule shape, stretched to each run's length).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from analysis.curves.data import Curve, peak_index
from analysis.forecast.inputs import RunCurve

SHAPE_RTOL = 0.01
PLAN_POINTS = 64  # future steps the planned schedule is sampled at (plus the end)


def _normalised(c: RunCurve) -> tuple[np.ndarray, np.ndarray]:
    """(fraction of the run, rate / peak) of a curve's logged rates from its peak on."""
    p = peak_index(c.lr)
    return c.step[p:] / c.total_steps, c.lr[p:] / c.lr[p]


def planned(c: RunCurve, complete: Sequence[RunCurve]) -> Curve | None:
    """The run's curve with its planned schedule to total_steps (loss NaN after the cut), or None."""
    if c.lr is None or c.step.size < 2:
        return None
    if c.plan is not None:
        steps, lr = c.plan
    else:
        x, g = _normalised(c)
        best = None
        for d in complete:
            if d.lr is None or not d.finished:
                continue
            xd, gd = _normalised(d)
            if x[-1] > xd[-1]:
                continue
            err = float(np.max(np.abs(np.interp(x, xd, gd) - g))) if x.size else math.inf
            if err <= SHAPE_RTOL and (best is None or err < best[0]):
                best = (err, xd, gd)
        if best is None:
            return None
        future = np.unique(np.linspace(c.step[-1], c.total_steps, PLAN_POINTS + 1).round()[1:])
        steps = np.concatenate([c.step, future])
        lr = np.concatenate(
            [c.lr, c.lr[peak_index(c.lr)] * np.interp(future / c.total_steps, best[1], best[2])]
        )
    steps = np.asarray(steps, float)
    keep = np.concatenate([[True], np.diff(steps) > 0])
    loss = np.interp(steps[keep], c.step, c.loss)
    return Curve(c.run, steps[keep].astype(np.int64), loss, np.asarray(lr, float)[keep])


def known(runs: Sequence[RunCurve], complete: Sequence[RunCurve]) -> bool:
    """Whether every run's schedule is known to its end (and so the law can forecast it)."""
    return all(planned(c, complete) is not None for c in runs)
