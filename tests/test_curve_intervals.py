"""Forecast intervals of loss-curve fits: calibration splits, the forecast distance, scatter + drift
bounds and the JSON contract (their coverage of held-out curves on the public multi-power-law data is
tested next to the fit's accuracy in test_mpl_protocol.py and test_backtest_curve.py)."""

import json

import numpy as np
import pytest

from analysis import fit_curve
from analysis.cli import main
from analysis.core.intervals import PredictionError
from analysis.curves.fitting import Curve
from analysis.curves.intervals import CalibrationUnit, FitDomain, IntervalModel, Kind, UnitErrors, splits
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


def test_distance_counts_decades_of_area_beyond_the_fit_and_of_rate_below_it():
    fitted = _constant("fit", 24000)
    domain = FitDomain.of([(fitted, fitted.steps)])
    assert np.allclose(domain.decades(fitted, fitted.steps), 0.0)
    longer = _constant("longer", 72000)
    end = domain.decades(longer, longer.steps[-1:])[0]
    eta = longer.schedule()
    assert end == pytest.approx(np.log10(eta[:72001].sum() / eta[:24001].sum()), rel=1e-12)
    assert 0.45 < end < 0.5  # ~log10 3
    lower = _constant("lower", 24000, lr=1e-4)
    assert domain.decades(lower, lower.steps[-1:])[0] == pytest.approx(1.0, rel=1e-9)
    # both: the area and the rate distances add in quadrature
    both = _constant("both", 240000, lr=2e-4, every=1000)
    (h,), (r,) = domain.distance(both, both.steps[-1:])
    assert 0.7 < h < 0.72 and r == pytest.approx(np.log(5))  # ~ln 2 of area, ln 5 of rate
    assert domain.decades(both, both.steps[-1:])[0] == pytest.approx(np.hypot(h, r) / np.log(10))


def _terms(budget, drift=0.0, noise=0.0003):
    return PredictionError(noise, budget, drift, 1.0, "S1", 3, 30)


def test_bounds_add_scatter_and_drift_in_quadrature_per_kind_of_forecast():
    fitted = _constant("fit", 24000)
    domain = FitDomain.of([(fitted, fitted.steps)])
    units = (CalibrationUnit("leave-out fit", "fit", 10, 0.001, 0.0),)
    terms = {Kind.NEW_CURVE: _terms(0.0004, drift=0.002), Kind.LATER_STEPS: _terms(0.004)}
    m = IntervalModel(0.9, terms, units, domain, (), ("fit",))
    z = 1.6448536269514722
    # a new curve 3x longer at a third of the rate: h = ln 3 at the end, r = ln 3 throughout
    new = _constant("new", 72000, lr=1e-3 / 3)
    t = new.steps[[0, -1]]
    pred = np.array([3.0, 2.5])
    lo, hi = m.bounds(pred, new, t)
    h = np.maximum(np.log(new.schedule().cumsum()[t] / domain.S1_max), 0)
    d = np.hypot(h, np.log(3)) / np.log(10)
    sd = np.sqrt(0.0003**2 + 0.0004**2 + (0.002 * d) ** 2)
    np.testing.assert_allclose(hi, pred * np.exp(z * sd), rtol=1e-6)
    np.testing.assert_allclose(lo, pred * np.exp(-z * sd), rtol=1e-6)
    assert sd[1] > sd[0] and h[1] > 0
    # the later steps of a fitted curve take the early-part refits' terms
    lo2, hi2 = m.bounds(pred, fitted, fitted.steps[[-2, -1]])
    np.testing.assert_allclose(hi2, pred * np.exp(z * np.hypot(0.0003, 0.004)), rtol=1e-6)
    assert m.residual == pytest.approx(np.expm1(z * np.hypot(0.0003, 0.0004)), rel=1e-9)
    j = m.to_dict()
    assert j["rank_capped"] is False and "noise 0.030%" in j["method"]
    assert j["terms"]["new curve"]["drift_per_decade"] == 0.002


def test_error_terms_are_the_fold_drift_of_the_squared_errors():
    def unit(split, e, d=0.0):
        n = np.size(e)
        return UnitErrors(CalibrationUnit(split, "c", n, 0.0, d), np.asarray(e, float), np.full(n, d))

    # errors of 0.2% next to the data and 0.5% two decades away, noise 0.1%
    leave = [unit("leave-out a", [0.002, -0.002]), unit("leave-out b", [0.005, -0.005], d=2.0)]
    t = _fit_terms(leave, 0.001, FitDomain(1.0, 1.0))
    assert t.budget_sd == pytest.approx(np.sqrt(0.002**2 - 0.001**2), rel=1e-6)
    assert t.drift_per_decade == pytest.approx(np.sqrt(0.005**2 - 0.002**2) / 2, rel=1e-6)
    assert t.noise_sd == 0.001 and t.n_folds == 2 and t.n_fold_points == 4
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
                "--predict",
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


def test_without_intervals_the_fit_has_none(shared_data):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    r = fit_curve([d / "cosine_24000.csv"], fit_until=12000, intervals=False)
    assert r.intervals is None and r.to_dict()["interval_model"] is None
    assert "interval_coverage" not in r.predictions["cosine_24000"]
