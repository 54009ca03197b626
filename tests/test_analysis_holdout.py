"""Held-out validation reproduces a known extrapolation error."""

import numpy as np
import pandas as pd
import pytest
from power_law import register as register_power_law

from analysis import AnalysisError, fit_law, holdout_validate


def _grid():
    N = np.repeat(np.geomspace(2e7, 3e9, 7), 7)
    D = np.tile(np.geomspace(4e8, 2e11, 7), 7)
    return N, D


def test_exact_law_extrapolates_exactly_and_a_known_shift_is_measured():
    E, A, B, al, be = 1.9, 600.0, 1800.0, 0.33, 0.35
    N, D = _grid()
    L = E + A / N**al + B / D**be
    C = 6 * N * D
    threshold = 1e20
    shifted = np.where(C > threshold, L * 1.01, L)  # the big runs are 1% worse than the law says
    fit = fit_law(pd.DataFrame({"N": N, "D": D, "loss": shifted}), bootstrap=0, holdout_above=threshold)
    h = fit.holdout
    assert h.n_points == int(np.sum(C > threshold)) == len(h.points) and h.threshold == threshold
    expected = 1 / 1.01 - 1  # predicted (the true law) vs actual (1% above it)
    for pt in h.points:
        assert pt.inputs["C"] > threshold
        assert pt.rel_error == pytest.approx(expected, abs=2e-4)
    assert h.mean_rel_error == pytest.approx(abs(expected), abs=2e-4)
    assert h.max_rel_error == pytest.approx(abs(expected), abs=2e-4)
    assert fit.n_points == int(np.sum(C <= threshold))


def test_misspecified_law_extrapolates_worse_than_the_right_one():
    N, D = _grid()
    L = 1.9 + 600.0 / N**0.33 + 1800.0 / D**0.35
    df = pd.DataFrame({"N": N, "D": D, "loss": L})
    right = holdout_validate(df, "chinchilla", bootstrap=0)
    wrong = holdout_validate(df, register_power_law(), bootstrap=0)  # L(N) alone: no data term
    assert right.holdout.mean_rel_error < 1e-4
    assert wrong.holdout.mean_rel_error > 10 * right.holdout.mean_rel_error


def test_threshold_outside_the_data_is_an_error():
    N, D = _grid()
    df = pd.DataFrame({"N": N, "D": D, "loss": 2 + 1e3 / N**0.3})
    with pytest.raises(AnalysisError, match="no run has C above"):
        fit_law(df, bootstrap=0, holdout_above=1e30)
    with pytest.raises(AnalysisError, match="nothing is left"):
        fit_law(df, bootstrap=0, holdout_above=1.0)
