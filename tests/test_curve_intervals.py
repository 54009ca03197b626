"""Forecast intervals of loss-curve fits: calibration splits, the forecast distance, scatter + drift
bounds and the JSON contract (their coverage of held-out curves on the public multi-power-law data is
tested next to the fit's accuracy in test_mpl_protocol.py and test_backtest_curve.py)."""

import json

import numpy as np
import pytest

from analysis import fit_curve
from analysis.cli import main
from analysis.curves.fitting import Curve
from analysis.curves.intervals import (
    CalibrationUnit,
    FitDomain,
    IntervalModel,
    Kind,
    KindError,
    UnitErrors,
    splits,
)
from analysis.curves.intervals import _terms as _fit_terms


def _constant(name, last, lr=1e-3, first=1000, every=100):
    steps = np.arange(first, last + 1, every)
    return Curve(name, steps, np.full(steps.size, 3.0), np.full(steps.size, lr))


def test_splits_leave_each_curve_out_and_forecast_each_curve_from_its_beginning():
    parts = [(c, c.steps) for c in (_constant("a", 5000), _constant("b", 9000), _constant("c", 3000))]
    sizes = [p[1].size for p in parts]
    sp = splits(parts)
    assert [s.name for s in sp] == ["leave-out a", "leave-out b", "leave-out c", "first 0.5", "first 0.33"]
    owner = np.repeat(np.arange(3), sizes)
    for i, s in enumerate(sp[:3]):
        assert np.array_equal(s.test, owner == i) and np.array_equal(s.train, owner != i)
    steps = np.concatenate([p[1] for p in parts])
    for s, frac in zip(sp[3:], (1 / 2, 1 / 3)):
        assert np.array_equal(s.train, ~s.test)
        for i, (c, t) in enumerate(parts):
            cut = t[0] + frac * (t[-1] - t[0])
            assert np.all(steps[s.train & (owner == i)] <= cut) and np.all(steps[s.test & (owner == i)] > cut)
    # One curve: no leave-one-out, only the early-part forecasts.
    assert [s.name for s in splits(parts[:1])] == ["first 0.5", "first 0.33"]


def test_scale_counts_efolds_of_area_beyond_the_fit_and_of_rate_below_it():
    fitted = _constant("fit", 24000)
    domain = FitDomain.of([(fitted, fitted.steps)])
    inside = domain.scale(fitted, fitted.steps)
    assert np.allclose(inside, 1.0)
    longer = _constant("longer", 72000)
    end = domain.scale(longer, longer.steps[-1:])[0]
    eta = longer.schedule()
    assert end == pytest.approx(1 + np.log(eta[:72001].sum() / eta[:24001].sum()), rel=1e-12)
    assert 2.0 < end < 2.2  # ~1 + ln 3
    lower = _constant("lower", 24000, lr=1e-4)
    assert domain.scale(lower, lower.steps[-1:])[0] == pytest.approx(1 + np.log(10), rel=1e-9)


def _terms(budget, drift_h=0.0, drift_r=0.0, noise=0.0003):
    return KindError.of(noise, budget, drift_h, drift_r, 3)


def test_bounds_add_scatter_and_drift_in_quadrature_per_kind_of_forecast():
    fitted = _constant("fit", 24000)
    domain = FitDomain.of([(fitted, fitted.steps)])
    units = (CalibrationUnit("leave-out fit", "fit", 10, 0.001, 1.0),)
    terms = {Kind.NEW_CURVE: _terms(0.0004, drift_h=0.002, drift_r=0.001), Kind.LATER_STEPS: _terms(0.004)}
    m = IntervalModel(0.9, terms, units, domain, (), ("fit",))
    z = 1.6448536269514722
    # a new curve 3x longer at a third of the rate: h = ln 3 at the end, r = ln 3 throughout
    new = _constant("new", 72000, lr=1e-3 / 3)
    t = new.steps[[0, -1]]
    pred = np.array([3.0, 2.5])
    lo, hi = m.bounds(pred, new, t)
    h = np.array([0.0, np.log(3)])
    sd = np.sqrt(
        0.0003**2
        + 0.0004**2
        + (0.002 * np.maximum(np.log(new.schedule().cumsum()[t] / domain.S1_max), 0)) ** 2
        + (0.001 * np.log(3)) ** 2
    )
    np.testing.assert_allclose(hi, pred * np.exp(z * sd), rtol=1e-6)
    np.testing.assert_allclose(lo, pred * np.exp(-z * sd), rtol=1e-6)
    assert sd[1] > sd[0] and h[1] > 0
    # the later steps of a fitted curve take the early-part refits' terms
    lo2, hi2 = m.bounds(pred, fitted, fitted.steps[[-2, -1]])
    np.testing.assert_allclose(hi2, pred * np.exp(z * np.hypot(0.0003, 0.004)), rtol=1e-6)
    assert m.residual == pytest.approx(np.expm1(z * np.hypot(0.0003, 0.0004)), rel=1e-9)
    j = m.to_dict()
    assert j["rank_capped"] is False and "noise 0.030%" in j["method"]
    # held in the one error model: its drift per decade of the weighted distance
    assert j["terms"]["new curve"]["drift_per_decade"] == pytest.approx(0.002 * np.log(10))
    assert j["terms"]["new curve"]["distance_weights"] == [1.0, 0.5]


def test_error_terms_are_nonnegative_least_squares_of_the_squared_errors():
    def unit(split, e, h=0.0, r=0.0):
        n = np.size(e)
        u = CalibrationUnit(split, "c", n, 0.0, 1.0)
        return UnitErrors(u, np.asarray(e, float), np.full(n, h), np.full(n, r))

    # errors of 0.2% next to the data and 0.5% two e-folds of rate below it, noise 0.1%
    leave = [unit("leave-out a", [0.002, -0.002]), unit("leave-out b", [0.005, -0.005], r=2.0)]
    t = _fit_terms(leave, 0.001)
    assert t.error.budget_sd == pytest.approx(np.sqrt(0.002**2 - 0.001**2), rel=1e-6)
    drift_h, drift_r = t.drifts
    assert drift_r == pytest.approx(np.sqrt(0.005**2 - 0.002**2) / 2, rel=1e-6) and drift_h == 0
    assert t.error.noise_sd == 0.001 and t.error.n_folds == 2 and t.error.n_fold_points == 4
    assert leave[0].unit.kind == Kind.NEW_CURVE
    assert unit("first 0.5", [0.0]).unit.kind == Kind.LATER_STEPS


@pytest.mark.slow
def test_cli_json_carries_intervals(shared_data, tmp_path):
    """`fit-curve --json`: predictions[name].interval_coverage and the per-point bounds; the
    interval model says how it was calibrated (here on one curve: early-part refits only)."""
    d = shared_data / "mpl_loss_curves" / "csv_25"
    out = tmp_path / "c.json"
    assert (
        main(
            [
                "fit-curve",
                "--fit",
                str(d / "cosine_24000.csv"),
                "--fit-until",
                "16000",
                "--predict-curves",
                str(d / "wsd_20000_24000.csv"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    j = json.loads(out.read_text())
    for name in ("cosine_24000", "wsd_20000_24000"):
        p = j["predictions"][name]
        assert 0.0 <= p["interval_coverage"] <= 1.0 and p["interval_mean_rel_width"] > 0
        assert len(p["interval_lo"]) == len(p["interval_hi"]) == len(p["step"]) == p["n_points"]
        lo, hi = p["interval_final"]
        assert lo < p["final_loss_pred"] < hi
    m = j["interval_model"]
    assert set(m["refits"]) == {"first 0.5", "first 0.33"} and m["rank_capped"]


@pytest.mark.slow
def test_without_intervals_the_fit_has_none(shared_data):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    r = fit_curve([d / "cosine_24000.csv"], fit_until=12000, intervals=False)
    assert r.intervals is None and r.to_dict()["interval_model"] is None
    assert "interval_coverage" not in r.predictions["cosine_24000"]
