"""Held-out agreement with Hagemann et al. 2023's measured layouts (CC BY-NC-SA 4.0 data read from
../shared/data, never copied). The split is fixed in benchmarks/hagemann_layouts.py; the scores of
the shipped constants are asserted so they cannot silently regress, and the calibration script
must reproduce the shipped constants."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from sharding.costmodel import DEFAULT_EFFICIENCY

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "hagemann_layouts.py"


@pytest.fixture(scope="module")
def bench(shared_data):
    spec = importlib.util.spec_from_file_location("hagemann_layouts", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, shared_data / "hagemann2023_layouts"


def test_split_is_fixed(bench):
    mod, data = bench
    ms, _, test = mod.measurements(mod.load_table(data))
    assert len(ms) == 964  # 984 runs minus 20 kernel-unavailable / other errors
    assert test.count(True) == 469 and test.count(False) == 495
    assert [mod.held_out(t) for t in (132173, 132174, 132176)] == [
        mod.held_out(t) for t in (132173, 132174, 132176)
    ]


def test_held_out_scores_meet_targets(bench):
    mod, data = bench
    res = mod.evaluate(DEFAULT_EFFICIENCY, data)
    ho = res["held_out"]
    assert ho["n_timed"] >= 150
    # the shipped constants are fitted to four sources (benchmarks/external_layouts.py); issue
    # 16's bar for them on this held-out half: rho >= 0.9, median <= 2 points
    assert ho["spearman_mfu"] >= 0.90  # shipped 0.911
    assert ho["median_abs_mfu_error"] <= 0.02  # shipped 0.0188
    assert ho["oom_accuracy"] >= 0.90  # shipped 0.906


def test_hagemann_only_fit_still_reaches_its_own_figures(bench):
    """Fitted to this source alone, the model reaches what it did before the joint fit (0.927,
    1.35 points): the physics did not get worse, the shipped constants trade a little of this
    source for the others."""
    mod, data = bench
    res = mod.evaluate(mod.fit(data), data)["held_out"]
    assert res["spearman_mfu"] >= 0.92 and res["median_abs_mfu_error"] <= 0.015
