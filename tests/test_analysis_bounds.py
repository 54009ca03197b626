"""Declared bounds are enforced by construction (issue 18, fix 2): per-parameter transforms, a fit
that cannot leave them, near-bound warnings in `fit`'s summary and the report, and allocation
that refuses non-positive exponents instead of returning NaN."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from power_law import register as _register_power_law

from analysis import AnalysisError, fit_law, register_law
from analysis.laws.allocation import ScalingLaw, closed_form_optimum
from analysis.laws.fitting import HUBER_DELTA
from analysis.laws.registry import (
    CHINCHILLA_GRID,
    KNEE_FRACTION,
    NEAR_BOUND_FRACTION,
    Transform,
    bound_notes,
    get_law,
    known_laws,
)
from analysis.report.build import _bound_warnings

# A small Chinchilla start grid (public units) with exponents starting exactly on their lower
# bound, as Epoch's grid does: a fast stand-in for the 4,500 starts.
SMALL_GRID = np.array(
    [
        (e, a, b, al, be)
        for e in (1.0, 2.0)
        for a in (100.0, 1e4)
        for b in (100.0, 1e4)
        for al in (0.0, 0.5)
        for be in (0.0, 0.5)
    ]
)

KAPLAN = _register_power_law()


@pytest.mark.parametrize(
    "lo, hi, kind",
    [
        (0.0, 3.0, "interval"),
        (-3.0, 3.0, "interval"),
        (0.0, np.inf, "exp"),
        (1.5, np.inf, "lower"),
        (-np.inf, 2.0, "upper"),
        (-np.inf, np.inf, "identity"),
    ],
)
def test_transform_round_trips_and_never_leaves_its_bounds(lo, hi, kind):
    tr = Transform.for_bounds(lo, hi)
    assert tr.kind == kind
    t = np.random.default_rng(0).normal(0, 30, 2000)
    p = tr.public(t)
    assert np.all(p >= lo) and np.all(p <= hi)
    moderate = np.abs(t) < 5
    assert np.all((p[moderate] > lo) & (p[moderate] < hi))  # strictly inside where nothing underflows
    inside = p[moderate]
    np.testing.assert_allclose(tr.public(tr.internal(inside)), inside, rtol=1e-12, atol=1e-300)


def test_interval_is_the_identity_on_its_interior_with_exponential_tails():
    """The soft clamp keeps interior optima in the coordinates the optimiser used before
    (bit-exact), so Epoch's fit is unchanged; only the tails bend."""
    tr = Transform.for_bounds(0.0, 3.0)
    knee = KNEE_FRACTION * 3.0
    inner = np.linspace(knee, 3.0 - knee, 101)
    assert np.array_equal(tr.public(inner), inner) and np.array_equal(tr.internal(inner), inner)
    assert tr.public(np.array([knee - 1.0]))[0] == pytest.approx(knee * math.exp(-1.0 / knee))
    assert np.isnan(tr.internal(np.array([-0.1, 3.1]))).all()


@pytest.mark.parametrize("name", ["chinchilla", "data_constrained", "moe_joint", KAPLAN])
def test_every_internal_point_maps_inside_the_declared_bounds(name):
    law = get_law(name)
    theta = np.random.default_rng(1).normal(0, 20, (5000, law.n_params))
    pub = law.to_public(theta)
    for i, (lo, hi) in enumerate(law.bounds):
        assert np.all(pub[:, i] >= lo) and np.all(pub[:, i] <= hi), law.param_names[i]


def test_grid_starts_on_a_bound_are_moved_inside():
    law = get_law("chinchilla")
    assert (CHINCHILLA_GRID[:, 3:] == 0).any()  # Epoch's grid does start exponents at 0
    starts = law.starts((np.zeros(3), np.zeros(3)), np.zeros(3))
    assert starts.shape == (4500, 5) and np.all(np.isfinite(starts))
    pub = law.to_public(starts)
    assert pub[:, 3:].min() > 0 and pub[:, 3:].min() < 0.01
    np.testing.assert_allclose(pub[:, :3], np.exp(CHINCHILLA_GRID[:, :3]), rtol=1e-12)


def _rising_with_n(seed=0):
    """A sweep whose loss *rises* with N: the unconstrained fit takes alpha < 0 and its optimum is NaN."""
    rng = np.random.default_rng(seed)
    N = np.repeat(np.geomspace(2e7, 3e9, 6), 6)
    D = np.tile(np.geomspace(4e8, 2e11, 6), 6)
    L = (2.0 + 0.5 * (N / 1e8) ** 0.02 + 1500 / D**0.33) * np.exp(rng.normal(0, 0.002, N.size))
    return pd.DataFrame({"N": N, "D": D, "loss": L})


def test_a_fit_that_wants_a_negative_exponent_stays_in_bounds_and_says_so():
    fit = fit_law(_rising_with_n(), "chinchilla", grid=SMALL_GRID, bootstrap=20, prediction_intervals=False)
    for name, (lo, hi) in zip(fit.param_names, fit.law_obj.bounds):
        assert lo <= fit.params[name] <= hi, (name, fit.params[name])
        samples = fit.bootstrap_samples[:, fit.param_names.index(name)]
        assert np.all((samples >= lo) & (samples <= hi)), name
    assert "warning: law parameter alpha" in fit.summary()
    n_opt, d_opt = ScalingLaw.from_fit(fit).optimal(1e21)
    assert math.isfinite(n_opt) and math.isfinite(d_opt)


def test_user_law_bounds_are_enforced_and_fixed_values_checked():
    name = "bounded_power_test"
    register_law(
        name,
        lambda p, c: p["E"] + p["A"] * c["N"] ** -p["alpha"],
        ["E", "A", "alpha"],
        ["N"],
        {"E": [0.5, 1.0], "A": [10.0, 100.0], "alpha": [0.1, 0.3]},  # starts on the bound 0.1
        positive=["E", "A"],
        bounds={"alpha": (0.1, 0.5)},
        replace=True,
    )
    assert name in known_laws()
    N = np.geomspace(1e6, 1e10, 15)
    df = pd.DataFrame({"N": N, "loss": 1.0 + 300.0 * N**-0.8})  # true alpha 0.8 lies above the bound
    fit = fit_law(df, name, bootstrap=0, prediction_intervals=False)
    assert 0.1 < fit.params["alpha"] <= 0.5 and fit.params["E"] > 0 and fit.params["A"] > 0
    assert any(n.name == "alpha" for n in bound_notes(fit.law_obj, fit.params))
    with pytest.raises(AnalysisError, match="outside the bounds"):
        fit_law(df, name, bootstrap=0, fixed={"alpha": 0.7}, prediction_intervals=False)
    held = fit_law(df, name, bootstrap=0, fixed={"alpha": 0.3}, prediction_intervals=False)
    assert held.params["alpha"] == pytest.approx(0.3, abs=1e-12)


def test_positive_means_a_lower_bound_of_zero_for_user_laws():
    law = register_law(
        "positive_only_test",
        lambda p, c: p["A"] * c["N"] ** -0.1,
        ["A"],
        ["N"],
        {"A": [1.0]},
        positive=["A"],
        replace=True,
    )
    assert law.bounds == ((0.0, np.inf),) and law.transforms[0].kind == "exp"
    with pytest.raises(AnalysisError, match="outside the bounds"):
        fit_law(
            pd.DataFrame({"N": [1e6, 1e7, 1e8], "loss": [3.0, 2.5, 2.0]}),
            law,
            fixed={"A": -1.0},
            bootstrap=0,
            prediction_intervals=False,
        )


def test_bound_notes_flag_at_near_and_ci_but_not_fixed_or_kaplans_exponents():
    law = get_law(KAPLAN)  # E, A in (0, inf); alpha in (0, 3)
    width = 3.0
    near = 0.5 * NEAR_BOUND_FRACTION * width
    notes = bound_notes(law, {"E": 1.7, "A": 400.0, "alpha": near})
    assert [(n.name, n.where) for n in notes] == [("alpha", "near")]
    assert (
        bound_notes(law, {"E": 1.7, "A": 400.0, "alpha": 0.05}) == []
    )  # Kaplan et al.'s alpha_C: legitimate
    assert [n.where for n in bound_notes(law, {"E": 1.7, "A": 400.0, "alpha": 3.0})] == ["at"]
    ci = {"alpha": [0.01, 0.6], "E": [1.0, 2.0]}
    assert [(n.name, n.where) for n in bound_notes(law, {"E": 1.5, "A": 400.0, "alpha": 0.3}, ci)] == [
        ("alpha", "ci")
    ]
    assert [n.where for n in bound_notes(law, {"E": 1e-9, "A": 400.0, "alpha": 0.3})] == ["at"]
    half_line_ci = {"E": [1e-4, 1.9]}  # the bootstrap piles up against E = 0
    assert [
        (n.name, n.where) for n in bound_notes(law, {"E": 1.2, "A": 400.0, "alpha": 0.3}, half_line_ci)
    ] == [("E", "ci")]
    assert bound_notes(law, {"E": 1.7, "A": 400.0, "alpha": near}, fixed=("alpha",)) == []


def test_report_warns_near_a_bound_not_only_at_it():
    law = get_law("chinchilla")
    params = {"E": 1.8, "A": 400.0, "B": 2000.0, "alpha": 0.02, "beta": 0.35}  # 0.7% of [0, 3] from 0
    fit = SimpleNamespace(
        law_obj=law,
        param_names=law.param_names,
        params=params,
        fixed={},
        converged=True,
        ci={k: [v * 0.9, v * 1.1] for k, v in params.items()},
    )
    warns = _bound_warnings(fit)
    assert len(warns) == 1 and "alpha" in warns[0] and "bound 0" in warns[0]
    fit.params = dict(params, alpha=0.3)
    fit.ci = {k: [v * 0.9, v * 1.1] for k, v in fit.params.items()}
    assert _bound_warnings(fit) == []


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"beta": -0.2}, {"A": 0.0}, {"alpha": math.nan}])
def test_allocation_refuses_non_positive_exponents(bad):
    good = {"E": 1.7, "A": 400.0, "B": 410.0, "alpha": 0.34, "beta": 0.28}
    with pytest.raises(AnalysisError, match="no compute-optimal allocation"):
        ScalingLaw(**dict(good, **bad))
    row = np.array([dict(good, **bad)[k] for k in ("E", "A", "B", "alpha", "beta")])
    with pytest.raises(AnalysisError, match="no compute-optimal allocation"):
        closed_form_optimum(row, np.array([1e21]), 6.0)


def test_bootstrap_rows_with_a_non_positive_exponent_drop_out_of_the_cis():
    base = np.array([1.7, 400.0, 410.0, 0.34, 0.28])
    samples = np.tile(base, (20, 1)) * np.linspace(0.95, 1.05, 20)[:, None]
    samples[:3, 3] = -0.1
    law = ScalingLaw(*base, samples=samples)
    opt = closed_form_optimum(samples, np.array([1e21]), 6.0)
    assert np.isnan(opt["N_opt"][:3]).all() and np.isfinite(opt["N_opt"][3:]).all()
    row = law.allocation([1e21])["budgets"][0]
    assert all(math.isfinite(v) for v in row["N_opt_ci"])


def test_epoch_optimum_is_unchanged_by_the_reparametrisation(shared_data):
    """Epoch's Chinchilla optimum (objective 1.018274e-3) with the full 4,500-start grid."""
    d = pd.read_csv(shared_data / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    fit = fit_law(d, "chinchilla", bootstrap=0, prediction_intervals=False, delta=HUBER_DELTA)
    assert fit.objective == pytest.approx(1.018274e-3, rel=1e-6)
    ref = dict(E=1.8172, A=477.8, B=2143, alpha=0.3473, beta=0.3672)
    for k, v in ref.items():
        assert fit.params[k] == pytest.approx(v, rel=0.003 if k in "AB" else 0.001), k
    assert fit.converged and bound_notes(fit.law_obj, fit.params) == []
