"""The data-constrained laws (analysis/laws/repeated.py, registry `data_constrained`,
`data_constrained_d`): Muennighoff et al. 2023's effective data and parameters.

The synthetic ladder is the generator of ../shared/checks/datalimited.sh made a function: a
known law with R_D* = 15, 0.3% multiplicative noise, 6 model sizes x 3 corpus sizes x 1-32 epochs.
"""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main
from analysis.laws import repeated
from analysis.laws.fitting import fit_law
from analysis.laws.methods import fit_auto
from analysis.laws.registry import get_law

TRUTH = dict(E=1.9, A=400.0, B=1800.0, alpha=0.34, beta=0.28, R_D=15.0)


def ladder(seed=0, noise=0.003, epochs=(1, 2, 4, 8, 16, 32), truth=TRUTH):
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(2e7, 2e9, 6):
        for U in (1e9, 4e9, 1.6e10):
            for ep in epochs:
                D = U * ep
                true = float(repeated.loss(truth, N, D, U))
                rows.append(dict(N=N, D=D, U=U, loss=true * math.exp(rng.normal(0, noise)), truth=true))
    return pd.DataFrame(rows)


def test_effective_data_is_fresh_data_without_repeats_and_saturates():
    assert repeated.effective_data(5e9, 1e10, 15.0) == pytest.approx(5e9)  # D < U: D unique tokens
    assert repeated.effective_data(1e10, 1e10, 15.0) == pytest.approx(1e10)
    four = repeated.effective_data(4e10, 1e10, 15.0)
    assert 3.5e10 < four < 4e10  # ~4 epochs are nearly as good as fresh data
    assert repeated.effective_data(1e14, 1e10, 15.0) == pytest.approx(16e10, rel=1e-6)  # U (1 + R_D*)
    # one more epoch is worth exp(-R / R_D*) of a fresh one: < 1% past 1 + R_D* ln 100 epochs
    e = repeated.epochs_worth_it(15.0)
    d = repeated.effective_data(np.array([e, e + 1]) * 1e10, 1e10, 15.0)
    assert (d[1] - d[0]) / 1e10 == pytest.approx(0.01, rel=0.05)


def test_without_repeats_the_law_is_chinchilla():
    law = get_law("data_constrained")
    p = [TRUTH[k] for k in ("E", "A", "B", "alpha", "beta", "R_D")] + [5.0]
    N, D = np.array([1e8, 1e9]), np.array([2e9, 2e10])
    chin = TRUTH["E"] + TRUTH["A"] / N ** TRUTH["alpha"] + TRUTH["B"] / D ** TRUTH["beta"]
    # U >= D and N well below N_opt(U) (~4e10 for U = 1e15): every effective quantity is the plain one
    got = law.predict(p, {"N": N, "D": D, "U": np.full(2, 1e15)})
    assert got == pytest.approx(chin, rel=1e-12)
    # the effective-data form needs only D <= U
    got = get_law("data_constrained_d").predict(p[:6], {"N": N, "D": D, "U": 2 * D})
    assert got == pytest.approx(chin, rel=1e-12)


def test_fit_recovers_the_law_inside_its_cis_and_predicts_more_epochs():
    d = ladder()
    ep = d.D / d.U
    fit = fit_law(d[ep <= 4], "data_constrained_d", bootstrap=100, seed=0)
    for k in ("beta", "R_D"):
        lo, hi = fit.ci[k]
        assert lo <= TRUTH[k] <= hi, (k, fit.params[k], fit.ci[k])
    held = d[ep >= 8]
    pred = fit.predict({"N": held.N.to_numpy(), "D": held.D.to_numpy(), "U": held.U.to_numpy()})
    err = np.mean(np.abs(pred / held.truth.to_numpy() - 1))
    plain = fit_law(d[ep <= 4], "chinchilla", bootstrap=0)
    plain_err = np.mean(
        np.abs(plain.predict({"N": held.N.to_numpy(), "D": held.D.to_numpy()}) / held.truth - 1)
    )
    assert err < 0.01 and plain_err > 3 * err, (err, plain_err)  # Chinchilla misses repeated runs


def test_auto_picks_a_data_constrained_law_when_runs_repeat():
    d = ladder(seed=1)
    fit = fit_auto(d[d.D / d.U <= 8], bootstrap=0)
    sel = fit.law_selection
    assert sel.chosen.startswith("data_constrained") and sel.criterion.startswith("repeated data")
    assert min(sel.fold_mae["chinchilla"], sel.fold_mae["chinchilla_tied"]) > 2 * sel.fold_mae[sel.chosen]
    once = ladder(seed=1, epochs=(1,))  # no repeats: the data-constrained forms are not candidates
    fit = fit_auto(once, bootstrap=0)
    assert set(fit.law_selection.fold_mae) == {"chinchilla", "chinchilla_tied"}


def test_allocation_under_a_data_limit():
    p = dict(TRUTH, R_N=5.0)
    free = repeated.allocate(p, 1e22, math.inf)
    rich = repeated.allocate(p, 1e22, 1e3 * free["D"])
    assert rich["N"] == pytest.approx(free["N"], rel=0.01) and rich["penalty"] == pytest.approx(0, abs=1e-9)
    poor = repeated.allocate(p, 1e22, free["D"] / 16)
    assert poor["epochs"] > 16 and poor["penalty"] > 0.005 and poor["loss"] > free["loss"]


def _one_line(tmp_path, capsys, d, *extra):
    path = tmp_path / "runs.csv"
    d.to_csv(path, index=False)
    assert main(["fit", str(path), "--law", "data_constrained", "--bootstrap", "0", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def test_bad_unique_tokens_are_one_line(tmp_path, capsys):
    d = ladder().drop(columns="truth")
    assert "--u-col" in _one_line(tmp_path, capsys, d.drop(columns="U"))
    assert "non-positive" in _one_line(tmp_path, capsys, d.assign(U=np.where(d.index == 3, 0.0, d.U)))
    claimed = d.assign(epochs=d.D / d.U, D=np.where(d.index == 5, d.U / 2, d.D))
    claimed.loc[5, "epochs"] = 4.0
    msg = _one_line(tmp_path, capsys, claimed)
    assert "row 5" in msg and "epochs=4" in msg


def test_an_untested_r_n_falls_back_to_the_effective_data_law():
    """The ladder has no excess-parameter decay: the full law's R_N runs off (to ~1e17 on this
    seed's fit before the guard), far beyond any N / U_N in the runs. It would decide every
    extrapolation to larger models, so the fit says so and fits the law without it."""
    d = ladder(seed=2)
    with pytest.warns(UserWarning, match="R_N = .* the data do not test it"):
        fit = fit_law(d, "data_constrained", bootstrap=0, prediction_intervals=False)
    assert str(fit.law) == "data_constrained_d"
    (step,) = fit.fallback
    assert step.param == "R_N" and step.value > repeated.UNTESTED_FACTOR * step.max_repetition
    assert step.to == "data_constrained_d" and fit.to_dict()["fallback"] == [step.to_dict()]
    assert abs(fit.params["R_D"] / TRUTH["R_D"] - 1) < 0.3  # the tested constant is kept and recovered
    # a fixed R_N is the user's choice: no fallback
    fixed = fit_law(d, "data_constrained", bootstrap=0, prediction_intervals=False, fixed={"R_N": 5.0})
    assert str(fixed.law) == "data_constrained" and fixed.fallback == () and "fallback" not in fixed.to_dict()


def test_a_tested_decay_constant_is_kept():
    """R_D = 15 on runs repeated up to 31 times: the data test it, no fallback."""
    fit = fit_law(ladder(seed=3), "data_constrained_d", bootstrap=0, prediction_intervals=False)
    assert str(fit.law) == "data_constrained_d" and fit.fallback == ()
    seen = repeated.max_repetitions(fit.params, *(ladder(seed=3)[k] for k in "NDU"))
    assert seen["R_D"] == pytest.approx(31.0) and fit.params["R_D"] < repeated.UNTESTED_FACTOR * 31
