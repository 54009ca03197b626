"""Loss-curve laws: schedule reconstruction, the multi-power-law benchmark, forecasting."""

import numpy as np
import pandas as pd
import pytest

from analysis import AnalysisError, fit_curve, load_curve
from analysis.curves.fitting import Curve, features

FIT = ("cosine_24000", "constant_24000", "wsdcon_9")
PREDICT = ("cosine_72000", "constant_72000", "wsd_20000_24000", "wsdld_20000_24000", "wsdcon_3", "wsdcon_18")


def test_schedule_reconstruction():
    steps = np.array([100, 200, 300, 400, 500])
    # Linear decay between logged points, linear warm-up before the first one.
    c = Curve("lin", steps, np.ones(5), np.array([1.0, 0.8, 0.6, 0.4, 0.2]))
    eta = c.schedule()
    assert eta[0] == 0 and eta[100] == pytest.approx(1.0) and eta[50] == pytest.approx(0.5)
    assert eta[251] == pytest.approx(0.7)  # the rate logged at 250 drives update 251
    # A step change between flat stretches holds the old rate through the logged step.
    s = Curve("step", steps, np.ones(5), np.array([1.0, 1.0, 0.1, 0.1, 0.1]))
    eta = s.schedule()
    assert np.all(eta[201:301] == 1.0) and np.all(eta[301:] == 0.1)


def test_features_match_a_direct_per_step_sum():
    steps = np.arange(0, 1001, 50) + 100
    lr = 1e-3 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * (steps - 100) / 1000)))
    c = Curve("cos", steps, np.ones(steps.size), lr)
    eta = c.schedule()
    t = int(steps[-1])
    C, beta, gamma = 2.0, 0.6, 0.6
    k = np.arange(101, t + 1)
    S = np.cumsum(eta)[t] - np.cumsum(eta)[k - 1]
    direct = np.sum((eta[k - 1] - eta[k]) * (1 - (1 + C * eta[k] ** -gamma * S) ** -beta))
    for res, tol in ((1, 1e-9), (8, 2e-3)):
        F = features([(c, steps)], resolution=res)
        sel = F.pair_j == steps.size - 1
        G = 1 - (1 + C * np.exp(-gamma * F.pair_logeta[sel] + F.pair_logS[sel])) ** -beta
        assert np.sum(F.pair_deta[sel] * G) == pytest.approx(direct, rel=tol)


@pytest.mark.slow
@pytest.mark.parametrize("size", ["25", "100"])
def test_multi_power_law_benchmark(shared_data, size):
    d = shared_data / "mpl_loss_curves" / f"csv_{size}"
    r = fit_curve([d / f"{n}.csv" for n in FIT], "mpl", predict=[d / f"{n}.csv" for n in PREDICT])
    assert set(r.predictions) == set(PREDICT)
    mean = np.mean([v["mean_rel_error"] for v in r.predictions.values()])
    worst = max(v["max_rel_error"] for v in r.predictions.values())
    assert mean <= 0.002 and worst <= 0.012, (mean, worst)
    assert r.converged and r.starts_at_optimum >= 2


def test_tissue_forecasts_the_rest_of_a_curve(shared_data):
    d = shared_data / "mpl_loss_curves" / "csv_100"
    r = fit_curve([d / "cosine_24000.csv"], "tissue", fit_until=12000, predict=[d / "wsdld_20000_24000.csv"])
    rest = r.predictions["cosine_24000"]
    assert rest["from_step"] > 12000
    assert rest["mean_rel_error"] < 0.005
    assert abs(rest["final_loss_pred"] - rest["final_loss_actual"]) / rest["final_loss_actual"] < 0.01
    assert r.fitted["cosine_24000"]["until"] == 12000


def test_constant_schedule_cannot_identify_annealing_terms(shared_data):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    with pytest.raises(AnalysisError, match="cannot be identified"):
        fit_curve([d / "constant_24000.csv"], "mpl")


def test_bad_curves_are_clear_errors(tmp_path):
    p = tmp_path / "c.csv"
    pd.DataFrame({"step": [1, 2], "loss": [3.0, 2.9]}).to_csv(p, index=False)
    with pytest.raises(AnalysisError, match="missing column"):
        load_curve(p)
    pd.DataFrame({"step": [1, 2, 3], "lr": [1e-3] * 3, "loss": [3.0, -1.0, 2.0]}).to_csv(p, index=False)
    with pytest.raises(AnalysisError, match="> 0"):
        load_curve(p)
    with pytest.raises(AnalysisError, match="unknown curve law"):
        fit_curve([p], "nope")
