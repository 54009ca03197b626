"""Multipliers measured on the runs themselves: what a backtest scores a method against.

At each budget of OTHER (the best run of the budget, `Ladder.frontier`), the measured multiplier
is the compute at which REF's own measured frontier reaches that loss, divided by the budget's C.
REF's frontier is read between its budgets by linear interpolation of log C in log L; beyond its
ends it is extended by the power law through its three end points (log C linear in log L), at
most `MAX_EXTRAPOLATION` decades: a point that would need more is not measured (and is counted).
No law is involved, so the truth does not favour any candidate method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.compare.ladders import Ladder

MAX_EXTRAPOLATION = 0.5  # decades of C beyond REF's smallest or largest budget a measurement may reach


@dataclass(frozen=True)
class Measured:
    """OTHER's budgets with a measured multiplier, and how many could not be measured."""

    C: np.ndarray  # OTHER's budget (its best run's C)
    log_m: np.ndarray  # natural log of the measured multiplier
    loss: np.ndarray  # OTHER's best loss there
    extrapolated: np.ndarray  # bool: REF's frontier was extended beyond its budgets
    n_unmeasured: int  # OTHER's budgets whose loss REF's frontier does not reach within the limit


def _end_slope(logC: np.ndarray, logL: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of log C ~ log L through up to three points (least squares)."""
    if logC.size < 2 or np.ptp(logL) <= 0:
        return math.nan, math.nan
    b, a = np.polyfit(logL, logC, 1)
    return float(a), float(b)


def ref_compute(ref: Ladder, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log C at which REF's measured frontier reaches each loss L, extrapolated?) (NaN: beyond
    `MAX_EXTRAPOLATION`, or a frontier that never falls)."""
    C, Lf = ref.frontier()
    logC, logL = np.log(C), np.log(Lf)
    keep = np.concatenate([[True], np.diff(logL) < 0])  # strictly falling: one C per loss
    logC, logL = logC[keep], logL[keep]
    x = np.log(np.asarray(L, float))
    out = np.full(x.shape, np.nan)
    extra = np.zeros(x.shape, bool)
    if logC.size < 2:
        return out, extra
    inside = (x <= logL[0]) & (x >= logL[-1])
    # np.interp needs increasing x: interpolate on -log L
    out[inside] = np.interp(-x[inside], -logL, logC)
    for end, sel in ((slice(-3, None), x < logL[-1]), (slice(0, 3), x > logL[0])):
        if not sel.any():
            continue
        a, b = _end_slope(logC[end], logL[end])
        if not math.isfinite(b) or b >= 0:
            continue
        guess = a + b * x[sel]
        edge = logC[-1] if end.start == -3 else logC[0]
        ok = np.abs(guess - edge) <= MAX_EXTRAPOLATION * math.log(10)
        vals = np.where(ok, guess, np.nan)
        out[sel], extra[sel] = vals, ok
    return out, extra


def measured(ref: Ladder, other: Ladder, above: float | None = None) -> Measured:
    """The measured multiplier at each budget of OTHER (above `above` when given)."""
    C, L = other.frontier()
    if above is not None:
        m = C > above
        C, L = C[m], L[m]
    logc, extra = ref_compute(ref, L)
    ok = np.isfinite(logc)
    return Measured(C[ok], logc[ok] - np.log(C[ok]), L[ok], extra[ok], int((~ok).sum()))
