"""Hold-out holds out the top *budget*, not the top run (issue 18, fix 3): real sweeps give every
run of a budget a slightly different C (whole steps), so budgets are grouped before the top one
is chosen."""

import numpy as np
import pandas as pd
import pytest

from analysis import AnalysisError
from analysis.core import budgets
from analysis.laws import isoflop
from analysis.laws.fitting import holdout_validate
from analysis.laws.holdout import top_budget_threshold
from analysis.laws.registry import get_law

TRUTH = dict(E=1.8, A=480.0, B=2100.0, alpha=0.35, beta=0.37)
SIZES = np.geomspace(3e7, 1e9, 5)
BUDGETS = (1e18, 1e19, 1e20)


def jittered_sweep(seed=0, jitter=0.008):
    """An IsoFLOP sweep: 5 sizes per budget, each run's C off its budget by up to `jitter`
    (D rounded to whole steps per shape), loss from a known Chinchilla law."""
    rng = np.random.default_rng(seed)
    rows = []
    for C in BUDGETS:
        for N in SIZES:
            c = C * (1 + rng.uniform(-jitter, jitter))
            D = c / (6 * N)
            L = TRUTH["E"] + TRUTH["A"] / N ** TRUTH["alpha"] + TRUTH["B"] / D ** TRUTH["beta"]
            rows.append({"N": N, "D": D, "C": c, "loss": L * np.exp(rng.normal(0, 1e-3)), "budget": C})
    return pd.DataFrame(rows)


def test_runs_within_one_percent_are_one_budget():
    df = jittered_sweep()
    labels = budgets.group_budgets(df["C"].to_numpy())
    assert len(np.unique(labels)) == len(BUDGETS)
    assert all(len(np.unique(labels[df["budget"] == b])) == 1 for b in BUDGETS)
    np.testing.assert_allclose(budgets.budget_values(df["C"].to_numpy()), BUDGETS, rtol=0.01)
    assert isoflop.group_budgets is budgets.group_budgets  # the old import path keeps working


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_threshold_holds_out_exactly_the_top_budget(seed):
    df = jittered_sweep(seed)
    thr = top_budget_threshold(df, get_law("chinchilla"))
    held = df["C"] > thr
    # np.unique(C) would put the threshold between the two largest runs: one run held out.
    assert held.sum() == len(SIZES)
    assert set(df.loc[held, "budget"]) == {BUDGETS[-1]}


def test_holdout_validate_predicts_every_run_of_the_top_budget():
    df = jittered_sweep()
    grid = np.array([[1.5, 300.0, 1500.0, 0.3, 0.3], [2.0, 600.0, 3000.0, 0.4, 0.4]])
    fit = holdout_validate(df, "chinchilla", bootstrap=0, grid=grid, prediction_intervals=False)
    assert fit.holdout.n_points == len(SIZES)
    assert fit.n_points == len(SIZES) * (len(BUDGETS) - 1)
    assert {round(p.inputs["C"] / 1e20, 1) for p in fit.holdout.points} == {1.0}
    assert fit.holdout.mean_rel_error < 0.01  # the law is exact up to 0.1% noise


def test_one_budget_is_a_clear_error():
    df = jittered_sweep()
    one = df[df["budget"] == BUDGETS[0]]
    with pytest.raises(AnalysisError, match="two or more compute budgets"):
        top_budget_threshold(one, get_law("chinchilla"))
