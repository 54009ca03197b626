"""The best loss at a budget (analysis.laws.frontier): the direct power law, the choice between it
and the law's IsoFLOP minimum by forward-chaining, and the protocols of benchmarks/frontier_eval.py."""

from __future__ import annotations

import json
import math
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from analysis.laws.allocation import ScalingLaw
from analysis.laws.fitting import fit_law
from analysis.laws.frontier import (
    MIN_FRONTIER_POINTS,
    FrontierMethod,
    budget_labels,
    fit_power_law,
    frontier_points,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import frontier_eval  # noqa: E402


def _fit(df: pd.DataFrame, bootstrap: int = 100):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_law(df, "chinchilla", bootstrap=bootstrap)


def test_power_law_recovers_a_known_frontier_and_its_bounds():
    """Exact points of E + A (C/C_ref)^-alpha give back E, A, alpha; a frontier without a floor
    is fitted at E >= 0 (the bound) and extrapolates 100x beyond its points within 0.1%."""
    C = np.geomspace(1e17, 1e20, 8)
    for E, A, alpha, exact in ((1.9, 0.8, 0.15, True), (0.0, 2.5, 0.05, False)):
        L = E + A * (C / C.max()) ** -alpha
        E_hat, A_hat, a_hat = fit_power_law(C[None], L[None], np.ones((1, 8), bool), C.max())[0]
        assert E_hat >= 0
        far = E_hat + A_hat * 100.0**-a_hat
        assert far == pytest.approx(E + A * 100.0**-alpha, rel=1e-3)
        if exact:
            assert (E_hat, A_hat, a_hat) == pytest.approx((E, A, alpha), rel=1e-3)
    few = fit_power_law(C[None, :3], L[None, :3], np.ones((1, 3), bool), C.max())
    assert np.isnan(few).all() and MIN_FRONTIER_POINTS == 4


def test_frontier_points_group_isoflop_budgets_and_bin_scattered_runs():
    """An IsoFLOP sweep's runs (C ~1% apart within a budget) are one point per budget; runs that
    scatter in C (one per C) are binned at a quarter decade; resamples drop runs they did not draw."""
    C = np.repeat([1e17, 2e17, 4e17], 5) * (1 + 0.01 * np.tile(np.arange(5), 3))
    loss = np.arange(15.0)[::-1]
    labels = budget_labels(C)
    assert np.unique(labels).size == 3
    pC, pL, _ = frontier_points(C, loss, labels)
    assert list(pL) == [10.0, 5.0, 0.0]
    scattered = np.geomspace(1e17, 0.99e19, 40)  # two decades: 8 quarter-decade bins
    assert np.unique(budget_labels(scattered)).size == 8
    counts = np.ones((2, 15))
    counts[1, 14] = 0  # resample 1 lacks the best run of the top budget
    _, bL, present = frontier_points(C, loss, labels, counts)
    assert bL[0, 2] == 0.0 and bL[1, 2] == 1.0 and present.all()


def test_epoch_frontier_protocol(shared_data):
    """Epoch's runs fitted on C <= 1e20 (the check's protocol): the best run of each larger
    half-decade (up to 1.3e22, 130x beyond) is predicted within 2% on average (measured 1.42%,
    law_minimum chosen) and 4 of the 5 lie inside their 90% intervals (measured 5/5)."""
    d = pd.read_csv(shared_data / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    d = pd.DataFrame({"N": d["Model Size"], "C": d["Training FLOP"], "loss": d.loss})
    d["D"] = d.C / (6 * d.N)
    targets = frontier_eval.half_decade_best(d[d.C > 1e20])
    rows = _fit(d[d.C <= 1e20], 200).allocation(list(targets.C))["budgets"]
    pred = np.array([r["loss"] for r in rows])
    err = np.abs(pred / targets.loss.to_numpy() - 1)
    inside = [r["loss_interval"][0] <= t <= r["loss_interval"][1] for r, t in zip(rows, targets.loss)]
    assert len(rows) == 5 and err.mean() <= 0.02, err
    assert sum(inside) >= 4, inside
    assert {r["loss_method"] for r in rows} <= set(FrontierMethod)


def test_direct_frontier_wins_where_the_law_form_is_wrong():
    """On an IsoFLOP ladder of a surface the Chinchilla form cannot represent (benchmarks/
    frontier_eval.py's synthetic protocol, seed 2), forward-chaining picks the direct frontier:
    2-50x beyond the 6 fitted budgets it misses by < 1.5% where the law's minimum misses by > 4%
    (measured 0.29% and 5.42%), and every target lies inside its 90% interval."""
    r = frontier_eval.synthetic_one(2)
    assert r["chosen"] == FrontierMethod.POWER_LAW, r["reason"]
    m = r["methods"]
    assert m[FrontierMethod.POWER_LAW]["mean_abs_error"] < 0.015
    assert m[FrontierMethod.LAW_MINIMUM]["mean_abs_error"] > 0.04
    assert m[FrontierMethod.POWER_LAW]["coverage"] == 1.0


def test_too_few_budgets_use_the_law_minimum_and_json_round_trips(tmp_path):
    """Three budgets leave no fold with 4 frontier points: the law minimum, with the reason. A fit
    JSON read back by the planner gives the same loss, interval and method."""
    rng = np.random.default_rng(0)
    rows = []
    for C in (1e17, 3e17, 1e18):
        for f in np.geomspace(0.25, 4, 6):
            N = np.sqrt(C / 120) * f
            D = C / 6 / N
            rows.append(
                dict(N=N, D=D, C=C, loss=(1.8 + 400 / N**0.34 + 410 / D**0.28) * np.exp(rng.normal(0, 0.003)))
            )
    fit = _fit(pd.DataFrame(rows))
    assert fit.frontier.method == FrontierMethod.LAW_MINIMUM and "too few budgets" in fit.frontier.reason
    path = tmp_path / "fit.json"
    path.write_text(fit.to_json(budgets=[1e19]))
    a, b = fit.allocation([1e19])["budgets"][0], ScalingLaw.from_json(path).allocation([1e19])["budgets"][0]
    assert a["loss_method"] == b["loss_method"] == "law_minimum"
    assert b["loss"] == pytest.approx(a["loss"]) and b["loss_interval"] == pytest.approx(a["loss_interval"])
    assert json.loads(path.read_text())["frontier"]["method"] == "law_minimum"
    assert math.isfinite(b["loss_interval"][1])


def test_grid_search_budget_by_budget_is_the_full_grid():
    """The alpha grid's sums of squares computed budget by budget from a table of x powers equal,
    bit for bit, those of the (B, K, G) construction they replace, resamples lacking budgets
    included (their terms weigh 0)."""
    from analysis.laws import frontier

    rng = np.random.default_rng(5)
    runs_C = np.geomspace(1e17, 1e21, 40)
    C = rng.choice(runs_C, size=(30, 9))
    L = 1.8 + 40.0 * (C / 1e17) ** -0.2 * rng.uniform(0.98, 1.02, size=C.shape)
    m = rng.uniform(size=C.shape) > 0.15
    L = np.where(m, L, 1.0)
    ratio = C / runs_C.max()
    x = np.where(m[..., None], ratio[..., None] ** -frontier.ALPHA_GRID[None, None, :], 0.0)
    np.testing.assert_array_equal(frontier._grid_sse(ratio, L, m), frontier._sse(x, L, m))
