"""RL compute-performance laws: recovery with nominal coverage, flags, ScaleRL main recipe, CLI."""

import concurrent.futures
import json
import multiprocessing
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import analysis.rl.methods  # noqa: F401  (registers the RL law)
from analysis.core import methods as registry
from analysis.rl.curves import RLCurve, burn_in_cutoff, load_curve
from analysis.rl.fitting import RLFitOptions, fit_recipe
from analysis.rl.laws import RLPoints, fit_gao, fit_rl_law, gao_log, sigmoid
from models.base.errors import AnalysisError


def _binomial_curve(rng, A, B, Cm, R0, C, n=1000):
    R = sigmoid(C, A, B, Cm, R0)
    p = rng.binomial(n, R) / n
    return p, np.sqrt(p * (1 - p) / n)


def test_sigmoid_function_limits():
    C = np.array([0.0, 1e-9, 2542.0, 1e12])
    R = sigmoid(C, 0.61, 1.92, 2542.0, 0.3)
    assert R[0] == pytest.approx(0.3)
    assert R[2] == pytest.approx(0.3 + 0.31 / 2)
    assert R[3] == pytest.approx(0.61, abs=1e-6)


def _coverage_draw(seed: int) -> tuple[list[bool], float, tuple[str, ...]]:
    """One secret law (seeded), 30 evaluations with 1,000-prompt binomial noise, one fit: whether
    each 95% interval holds the truth, the error of A, and the flags. Module-level: a worker of a
    spawned process pool runs it."""
    rng = np.random.default_rng(seed)
    A, B, Cm, R0 = rng.uniform(0.5, 0.8), rng.uniform(1.2, 2.4), rng.uniform(1e3, 4e3), rng.uniform(0.1, 0.3)
    C = np.geomspace(Cm / 20, Cm * 30, 30)
    p, s = _binomial_curve(rng, A, B, Cm, R0, C)
    fit = fit_rl_law(RLPoints.make(C, p, s))
    inside = [fit.ci[k][0] <= v <= fit.ci[k][1] for k, v in (("A", A), ("B", B), ("C_mid", Cm))]
    return inside, abs(fit.params["A"] - A), fit.flags


@pytest.mark.slow
def test_recovery_with_nominal_coverage(monkeypatch):
    """80 secret laws: each profile-likelihood 95% interval (A, B, C_mid) holds the truth in at
    least 71 of them, and A is close.

    Power (binomial, independent draws): with n = 80 and "pass iff >= 71 inside", an interval
    whose real coverage is 80% passes with probability P(Bin(80, 0.80) >= 71) = 2.9%, and one
    with the nominal 95% fails with P(Bin(80, 0.95) < 71) = 0.65% per parameter (2% for the
    three). Measured with 120 draws: 114, 116, 116 of 120 (95-97%). The fits (0.6-1.3 s each)
    run in a pool of 2 single-threaded processes: BLAS threads of one would otherwise spin on
    the other's core."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")  # inherited by the workers spawned below
    ctx = multiprocessing.get_context("spawn")  # the test process may already hold JAX threads
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        draws = list(pool.map(_coverage_draw, range(80)))
    inside = np.array([d[0] for d in draws])
    assert max(d[1] for d in draws) < 0.03
    assert not any(d[2] for d in draws), [d[2] for d in draws if d[2]]
    for k, hits in zip(("A", "B", "C_mid"), inside.sum(axis=0)):
        assert hits >= 71, f"{k}: truth inside the 95% interval only {hits}/80 times"


def _secret_draw(index: int, seed: int = 0) -> dict:
    """Draw `index` of the issue's secret-law protocol (A ~ U[0.5, 0.8], B ~ U[1.2, 2.4], C_mid ~
    U[1e3, 4e3], R0 ~ U[0.1, 0.3]; 60 log-spaced computes from C_mid/20 to 30 C_mid, each pass rate
    the mean of 1,000 Bernoulli samples with its binomial stderr, as ../shared/checks/rl.sh writes
    its CSVs), fitted as `fit-rl FILE.csv` does on the full window and on C < C_mid/2: whether each
    is flagged, and the full window's error of A and whether its 95% interval holds the truth.
    Module-level: a worker of a spawned process pool runs it."""
    rng = np.random.default_rng([seed, index])
    A, B, Cm, R0 = rng.uniform(0.5, 0.8), rng.uniform(1.2, 2.4), rng.uniform(1e3, 4e3), rng.uniform(0.1, 0.3)
    C = np.geomspace(Cm / 20, Cm * 30, 60)
    p = rng.binomial(1000, sigmoid(C, A, B, Cm, R0)) / 1000
    s = np.sqrt(p * (1 - p) / 1000)
    out: dict = {"index": index}
    for window, keep in (("full", C > 0), ("early", C < 0.5 * Cm)):
        res = fit_recipe([RLCurve(window, C[keep], p[keep], s[keep], is_run=False)])
        (lo, hi), flags = res["ci"]["A"], res["flags"]
        out[window] = {
            "flagged": any(f in ("pre_midpoint", "A_unbounded") for f in flags),
            "A_inside": lo <= A <= hi,
            "A_err": res["params"]["A"] - A,
        }
    return out


@pytest.mark.slow
def test_secret_law_protocol_coverage_and_flags(monkeypatch):
    """The issue's protocol (`_secret_draw`: 60 log-spaced points from C_mid/20 to 30 C_mid,
    1,000-sample binomial noise), 100 seeded draws through `fit_recipe`: the 95% interval of A
    holds the truth in >= 90 (target 93% over 200), every early window (C < C_mid/2) but at most
    3 is flagged pre_midpoint or A_unbounded (target 95%), no full window is, and A is within
    0.02 everywhere (../shared/checks/rl.sh).

    Measured (the same protocol, 200 draws; docs/rl.md): A coverage 96.5% / 98.0% / 95.5% for seeds
    0 / 1 / 2, early windows flagged 100% / 99.5% / 100%, full windows flagged 0%; on these 100
    draws 95 / 100 / 0. Power: with real coverage 85% the A bound passes with probability
    P(Bin(100, 0.85) >= 90) = 7%, and the flag bound at a real 90% flag rate with
    P(Bin(100, 0.9) >= 97) = 0.8%."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")  # inherited by the workers spawned below
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        rows = list(pool.map(_secret_draw, range(100)))
    covered = sum(r["full"]["A_inside"] for r in rows)
    flagged = [r["index"] for r in rows if r["early"]["flagged"]]
    false_flags = [r["index"] for r in rows if r["full"]["flagged"]]
    worst = max(abs(r["full"]["A_err"]) for r in rows)
    assert covered >= 90, f"A inside its 95% interval in only {covered}/100 draws"
    assert len(flagged) >= 97, f"early windows flagged in only {len(flagged)}/100 draws"
    assert not false_flags, f"full windows flagged: draws {false_flags}"
    assert worst <= 0.02, f"A off by {worst:.4f}"


def test_pre_midpoint_window_is_flagged():
    rng = np.random.default_rng(7)
    for _ in range(3):
        A, B, Cm, R0 = (
            rng.uniform(0.5, 0.8),
            rng.uniform(1.2, 2.4),
            rng.uniform(1e3, 4e3),
            rng.uniform(0.1, 0.3),
        )
        C = np.geomspace(Cm / 20, Cm * 30, 60)
        p, s = _binomial_curve(rng, A, B, Cm, R0, C)
        early = C < 0.5 * Cm
        fit = fit_rl_law(RLPoints.make(C[early], p[early], s[early]))
        assert "pre_midpoint" in fit.flags or "A_unbounded" in fit.flags, fit.flags
        assert "A_unbounded" in fit.flags  # the ceiling cannot be bounded from below C_mid


@pytest.mark.parametrize("r0", ["fit", "start"])
def test_scalerl_main_recipe_recovers_A(r0):
    """ScaleRL main recipe (A=0.610, B=1.92, C_mid=2542 GPU-h, R0~0.3), a 1,000-prompt eval
    every 500 GPU-h, fitted on 1.5k-50k GPU-h plus the start: A within 0.02."""
    rng = np.random.default_rng(0)
    C = np.concatenate([[0.0], np.arange(1500.0, 50001.0, 500.0)])
    for _ in range(3):
        p, s = _binomial_curve(rng, 0.610, 1.92, 2542.0, 0.3, C)
        curve = RLCurve("scalerl", C, p, s, is_run=False)
        res = fit_recipe([curve], RLFitOptions(r0=r0))
        assert abs(res["params"]["A"] - 0.610) <= 0.02
        assert res["flags"] == []
        assert res["ci"]["A"][0] <= 0.610 + 0.02 and res["ci"]["A"][1] >= 0.610 - 0.02


def test_gao_forms_recovered():
    """Gao et al. 2023, d = sqrt(KL): RL form d (alpha - beta log d) ("log", peak at
    exp(alpha / beta - 1)) and best-of-n form d (alpha - beta d) ("linear", peak at alpha / 2 beta)."""
    kl = np.linspace(0.5, 40, 30)
    d = np.sqrt(kl)
    g = gao_log(d, 0.3, 0.08)
    assert g == pytest.approx(d * (0.3 - 0.08 * np.log(d)))
    rl = fit_gao(kl, g + np.random.default_rng(0).normal(0, 1e-3, d.size), "log")
    assert rl.alpha == pytest.approx(0.3, abs=0.01) and rl.beta == pytest.approx(0.08, abs=0.01)
    assert rl.d_peak == pytest.approx(np.exp(rl.alpha / rl.beta - 1))
    bon = fit_gao(kl, d * (0.2 - 0.03 * d), "linear")
    assert bon.alpha == pytest.approx(0.2, abs=1e-6) and bon.d_peak == pytest.approx(0.2 / 0.06)


def test_falling_reward_flags_unstable():
    C = np.linspace(100, 10000, 40)
    y = sigmoid(C, 0.7, 2.0, 1500, 0.1)
    y[-10:] -= np.linspace(0.0, 0.15, 10)
    fit = fit_rl_law(RLPoints.make(C, y, np.full_like(y, 0.01)))
    assert "unstable" in fit.flags


def test_bad_input_is_a_clear_error():
    with pytest.raises(AnalysisError, match="at least"):
        fit_rl_law(RLPoints.make([1.0, 2.0, 3.0], [0.1, 0.2, 0.3]))
    with pytest.raises(AnalysisError, match=r"\[0, 1\]"):
        fit_rl_law(RLPoints.make(np.arange(1, 9.0), np.full(8, 1.5)))
    with pytest.raises(AnalysisError, match="unknown CI method"):
        fit_rl_law(RLPoints.make(np.arange(1, 9.0), np.full(8, 0.5)), ci_method="jackknife")


def _run_dir(tmp_path, C, y, per_pass=None, prompts=None):
    d = tmp_path / "run"
    d.mkdir()
    rows = [
        {
            "step": i,
            "flops_rl": float(c),
            "pass_rate": float(v),
            "pass_rate_stderr": 0.01,
            "prompts_seen": int(prompts[i]) if prompts is not None else i * 10,
            "train_reward": 0.5,
            "zero_var_frac": 0.1,
        }
        for i, (c, v) in enumerate(zip(C, y))
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"status": "completed", "prompts_per_pass": per_pass}))
    return d


def test_run_dir_burn_in_policy(tmp_path):
    C = np.linspace(0, 1000, 21)
    d = _run_dir(tmp_path, C, sigmoid(C, 0.7, 2.0, 300, 0.1), per_pass=10, prompts=np.arange(21) * 10)
    curve = load_curve(d)
    assert curve.is_run
    assert burn_in_cutoff(curve) == pytest.approx(50.0)  # one pass (10 prompts) < 10% (100)
    assert burn_in_cutoff(curve, burn_in=7.0) == 7.0
    assert burn_in_cutoff(curve, frac=0.2) == pytest.approx(200.0)


def test_cli_json_schema_and_prediction(tmp_path):
    rng = np.random.default_rng(11)
    C = np.linspace(0, 20000, 41)
    paths = []
    for seed in range(2):
        p, s = _binomial_curve(rng, 0.65, 2.0, 2500, 0.2, C)
        f = tmp_path / f"s{seed}.csv"
        pd.DataFrame({"compute": C, "pass_rate": p, "stderr": s}).to_csv(f, index=False)
        paths.append(str(f))
    out = tmp_path / "o.json"
    r = subprocess.run(
        [sys.executable, "-m", "analysis", "fit-rl", *paths, "--fit-until-frac", "0.5", "--json", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["params"]) >= {"A", "B", "C_mid", "R0"}
    assert set(res["ci"]) == {"A", "B", "C_mid"} and all(len(v) == 2 for v in res["ci"].values())
    assert isinstance(res["flags"], list)
    pr = res["prediction"]
    assert set(pr) >= {"final_pred", "final_actual", "final_abs_error", "mean_abs_error"}
    assert pr["final_abs_error"] < 0.05
    assert len(res["per_seed"]) == 2 and res["seed_spread"]["A"]["n"] == 2


def test_cli_bad_input_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("compute,pass_rate\n1,0.2\n2,abc\n3,0.4\n")
    r = subprocess.run(
        [sys.executable, "-m", "analysis", "fit-rl", str(bad), "--json", str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "pass_rate" in r.stderr
    assert "Traceback" not in r.stderr
    argv = [sys.executable, "-m", "analysis", "fit-rl", str(bad), "--law", "powerlaw"]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "error: unknown --law 'powerlaw'; choose one of sigmoid"


def test_the_registered_sigmoid_fits_a_curve_table_and_predicts_with_an_interval():
    """`registry.get("sigmoid", "rl")(table)`: fit-rl's fit of a compute/pass_rate table; predict(C=)
    is the pass rate with the 90% band of the bootstrap refits, holding the secret law's curve."""
    rng = np.random.default_rng(5)
    C = np.geomspace(2000 / 20, 2000 * 30, 40)
    p, s = _binomial_curve(rng, 0.7, 1.6, 2000.0, 0.2, C)
    (m,) = registry.methods("rl")
    assert (m.name, m.role, m.protocols) == ("sigmoid", "default", ())
    fit = m(pd.DataFrame({"compute": C, "pass_rate": p, "stderr": s}), n_boot=100)
    assert fit.to_dict()["params"] == fit_recipe([RLCurve("table", C, p, s, False)])["params"]
    grid = np.array([1e3, 2e3, 2e4])
    pred = fit.predict(C=grid)
    assert np.all(pred.lo <= pred.mean) and np.all(pred.mean <= pred.hi)
    assert np.all(np.abs(pred.mean - sigmoid(grid, 0.7, 1.6, 2000.0, 0.2)) < 0.02)
    assert 0 < float(pred.hi[-1] - pred.lo[-1]) < 0.05 and "ceiling A" in fit.summary()
    assert fit.plot().axes


def test_variance_collapse_flags_unstable_only_inside_the_fit_window(tmp_path):
    from analysis.rl.curves import variance_collapsed

    C = np.linspace(0, 1000, 21)
    d = _run_dir(tmp_path, C, sigmoid(C, 0.7, 2.0, 300, 0.1))
    rows = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]
    for r in rows[15:]:
        r["zero_var_frac"], r["train_reward"] = 0.9, 0.5  # collapse late in the run
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = load_curve(d)
    assert variance_collapsed(curve)
    assert not variance_collapsed(curve, until=500.0)
    assert "unstable" in fit_recipe([curve])["flags"]
    assert "unstable" not in fit_recipe([curve], RLFitOptions(fit_until_frac=0.5))["flags"]


def test_box_wls_matches_a_bounded_least_squares_solver():
    """The closed-form inner solve (2 level parameters in a box; lo == hi holds one; infinite
    bounds have no face) against SciPy's bounded linear least squares."""
    from scipy.optimize import lsq_linear

    from analysis.rl.varpro import box_wls, moments

    rng = np.random.default_rng(0)
    boxes = [
        ([0.0, 0.0], [1.0, 1.0]),
        ([-1.0, 0.0], [1.0, np.inf]),
        ([0.3, 0.3], [0.3, 1.0]),  # first held at 0.3
        ([-np.inf, -np.inf], [np.inf, np.inf]),
    ]
    for trial in range(40):
        X = rng.uniform(0, 1, (1, 12, 2))
        y = X[0] @ rng.normal(0.5, 1.0, 2) + rng.normal(0, 0.1, 12)
        w = rng.uniform(0.5, 2.0, 12)
        lo, hi = (np.array(b) for b in boxes[trial % len(boxes)])
        lin, chi = box_wls(np, *moments(np, X, y, w), lo, hi)
        sw = np.sqrt(w)
        ref = lsq_linear(X[0] * sw[:, None], y * sw, bounds=(lo - 1e-15, hi + 1e-15 * (hi == lo)))
        assert chi[0] == pytest.approx(2 * ref.cost, rel=1e-9, abs=1e-12)
        np.testing.assert_allclose(lin[0], ref.x, atol=1e-6)


def test_objective_gradient_is_the_projected_chi2_gradient():
    """The engine's objective holds the level parameters constant under autodiff (Danskin): its
    gradient must equal finite differences of the projected chi^2 (levels re-solved)."""
    import jax

    from analysis.rl.varpro import Fitter, _chi2, sigmoid_spec, to_shape

    rng = np.random.default_rng(2)
    C = np.concatenate([[0.0], np.geomspace(100, 1e5, 20)])
    p, s = _binomial_curve(rng, 0.7, 1.5, 3000.0, 0.2, C)
    fitter = Fitter(sigmoid_spec(C, None), C, p, np.maximum(s, 0.005))
    cfg = fitter.base()
    args = (
        fitter.logC,
        fitter.start,
        fitter.y,
        fitter.w_RxN[0],
        cfg.nl_lo,
        cfg.nl_hi,
        cfg.lin_lo,
        cfg.lin_hi,
    )
    u = np.array([7.5, 0.3])
    with jax.enable_x64(True):
        g = np.asarray(jax.jit(jax.grad(_chi2))(u, *args))

    def projected(u):
        return fitter.level(to_shape(np, u[None, :], cfg.nl_lo, cfg.nl_hi), [cfg])[1][0]

    h = 1e-6
    fd = [(projected(u + h * e) - projected(u - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-5)


def test_profile_ends_sit_where_chi2_rises_by_the_threshold():
    """Each finite end of a profile interval is a root of chi2_profile - (chi2_min + 3.84 scale)."""
    from analysis.rl.laws import CHI2_95
    from analysis.rl.varpro import Fitter, profile_intervals, sigmoid_spec

    rng = np.random.default_rng(4)
    C = np.geomspace(150, 75000, 30)
    p, s = _binomial_curve(rng, 0.65, 1.8, 2500.0, 0.2, C)
    pts = RLPoints.make(C, p, s)
    fitter = Fitter(sigmoid_spec(pts.C, None), pts.C, pts.y, pts.s)
    best = fitter.solve([fitter.base(n_starts=4)])[0]
    params = [("lin", 1), ("nl", 0), ("nl", 1)]
    ends = profile_intervals(fitter, best, params, CHI2_95)
    held = [fitter.base().hold(k, i, v) for (k, i), e in zip(params, ends) for v in e[:2]]
    rise = np.array([sol.chi2 for sol in fitter.solve(held)]) - best.chi2
    assert not any(hit for e in ends for hit in e[2:])
    np.testing.assert_allclose(rise, CHI2_95, rtol=2e-3)


def test_bootstrap_intervals_resample_points_with_their_compute():
    """A resample keeps each point's compute with its pass rate (resampling counts as weights),
    so on a well-identified curve the bootstrap and profile intervals of A agree in size and
    both hold the truth."""
    rng = np.random.default_rng(3)
    C = np.geomspace(2000 / 20, 2000 * 30, 40)
    p, s = _binomial_curve(rng, 0.7, 1.6, 2000.0, 0.2, C)
    pts = RLPoints.make(C, p, s)
    prof = fit_rl_law(pts)
    boot = fit_rl_law(pts, ci_method="bootstrap", n_boot=100)
    assert boot.params == prof.params
    for fit in (prof, boot):
        assert fit.ci["A"][0] <= 0.7 <= fit.ci["A"][1]
    width = [f.ci["A"][1] - f.ci["A"][0] for f in (prof, boot)]
    assert 0.5 < width[1] / width[0] < 2.0, width
