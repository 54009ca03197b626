"""Compute budgets of a sweep: which runs share one.

Why a module of its own: real sweeps do not give every run of a budget the same C. A run trains
a whole number of steps, so C = k N D lands a fraction of a percent off the nominal budget, and
differently per shape. Anything that asks "which budget is this run in" (IsoFLOP profiles, the
report's budget column, the hold-out split that leaves the top budget out) must group first;
`np.unique(C)` sees one budget per run. Kept free of other analysis imports so that any module
of `analysis.laws` (holdout, isoflop) can use it without an import cycle.
"""

from __future__ import annotations

import numpy as np

BUDGET_RTOL = 0.1  # sorted compute values more than 10% apart start a new budget


def group_budgets(C: np.ndarray, rtol: float = BUDGET_RTOL) -> np.ndarray:
    """Integer budget label per point (0 = smallest): sorted compute values split where they jump
    by > rtol."""
    C = np.asarray(C, dtype=float)
    order = np.argsort(C)
    logc = np.log(C[order])
    labels_sorted = np.concatenate([[0], np.cumsum(np.diff(logc) > np.log1p(rtol))]).astype(int)
    labels = np.empty_like(labels_sorted)
    labels[order] = labels_sorted
    return labels


def budget_values(C: np.ndarray, rtol: float = BUDGET_RTOL) -> np.ndarray:
    """The grouped budgets, smallest first: each the geometric mean of its runs' C."""
    C = np.asarray(C, dtype=float)
    labels = group_budgets(C, rtol)
    return np.array([float(np.exp(np.mean(np.log(C[labels == g])))) for g in range(int(labels.max()) + 1)])
