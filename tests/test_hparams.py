"""`python -m analysis fit-hparams` (analysis.hparams) on synthetic sweeps with a known optimum law.

The generator (`lr_sweep`, after ../shared/checks/hparams.sh): per rung (N, D) the optimal learning
rate is lr* = c N^p D^q; the loss is a Chinchilla-like base times 1 + kappa ln(lr / lr*)^2, with a
jittered x2 grid around lr* and 0.2% multiplicative loss noise. The tests check that the laws are
recovered (exponents inside their intervals, held-out optima within x1.5, 90% intervals that cover
about 90%), the rung optimum is the quadratic vertex, edge / flat rungs are flagged and left out,
a 2-D LR x batch grid is profiled, the penalty curve is the quadratic's, the form choice, and
that bad input is one line on stderr with exit 2. No training: every test is pure numpy/pandas.
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main
from analysis.hparams import fit_hparams, load_hparams
from analysis.hparams import rungs as R
from analysis.hparams.fitting import HparamOptions
from analysis.hparams.methods import options
from models.base.errors import AnalysisError

LR = "optim.lr"
BATCH = "train.batch_size"
TRUE_LAW = dict(c=0.5, p=-0.35, q=0.05)  # the hparams.sh law: lr* = 0.5 N^-0.35 D^0.05
HELD_OUT_N = 3e8  # fit below this model size, predict the ones above


def base_loss(N, D):
    return 1.8 + 480 / N**0.34 + 2100 / D**0.37


def lr_sweep(
    seed=0,
    law=TRUE_LAW,
    n_sizes=7,
    d_ratios=(20, 40, 80),
    d_fixed=None,
    n_values=7,
    spread=8.0,
    jitter=0.3,
    noise=0.002,
    kappa=0.02,
    shift=1.0,
    lr_of=None,
):
    """Runs table of an LR sweep: N log-spaced over 1e7..1e9, D = ratio x N (or the fixed `d_fixed`
    token counts for every N), `n_values` LRs log-spaced over lr*/spread .. lr* x spread, the grid
    shifted by a random factor exp(U(-jitter, jitter)) and by `shift`; `lr_of(N, D)` overrides the
    law. Column lr_true is the rung's true optimum (drop it before fitting)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(1e7, 1e9, n_sizes):
        for D in d_fixed if d_fixed is not None else [r * N for r in d_ratios]:
            best = lr_of(N, D) if lr_of else law["c"] * N ** law["p"] * D ** law["q"]
            grid = np.geomspace(best / spread, best * spread, n_values) * shift
            for lr in grid * np.exp(rng.uniform(-jitter, jitter)):
                loss = base_loss(N, D) * (1 + kappa * np.log(lr / best) ** 2) * np.exp(rng.normal(0, noise))
                rows.append({"N": N, "D": D, "C": 6 * N * D, LR: lr, "loss": loss, "lr_true": best})
    return pd.DataFrame(rows)


def split(d):
    """(fit table, held-out targets with their true optimum)."""
    small = d.N < HELD_OUT_N
    targets = d[~small][["N", "D", "lr_true"]].drop_duplicates().reset_index(drop=True)
    return d[small].drop(columns="lr_true"), targets


def strict_json(path):
    def no_constant(c):
        raise ValueError(f"non-strict JSON constant {c}")

    return json.loads(open(path).read(), parse_constant=no_constant)


def run_cli(tmp_path, d, *extra, targets=None):
    """fit-hparams through analysis.cli.main; (rc, JSON or None)."""
    d.to_csv(tmp_path / "runs.csv", index=False)
    argv = ["fit-hparams", str(tmp_path / "runs.csv"), *extra, "--json", str(tmp_path / "hp.json")]
    if targets is not None:
        targets.to_csv(tmp_path / "targets.csv", index=False)
        argv += ["--predict", str(tmp_path / "targets.csv")]
    rc = main(argv)
    return rc, (strict_json(tmp_path / "hp.json") if rc == 0 else None)


# ---- recovery of a known law ------------------------------------------------------------------


def test_cli_recovers_the_law_predicts_held_out_and_writes_strict_json(tmp_path, capsys):
    fit_df, targets = split(lr_sweep(seed=0))
    rc, j = run_cli(tmp_path, fit_df, "--hparam", LR, "--method", "fit_hparams", targets=targets[["N", "D"]])
    assert rc == 0
    assert j["method_choice"]["chosen"] == "fit_hparams" and j["method_choice"]["fold_errors"] == {}
    for key in ("params", "ci", "law_form", "rungs", "holdout", "penalty", "predictions"):
        assert key in j, key
    # q = 0.05 over D = 20..80 N is within the noise: N alone (p + q = -0.30) is an equal-error form
    assert j["law_form"][LR] in ("N_D", "N")
    assert j["holdout"][LR]["errors"]["N_D"] <= j["holdout"][LR]["errors"]["C"]
    pred = pd.DataFrame(j["predictions"])
    assert len(pred) == len(targets)
    ratio = pred["value"].to_numpy() / targets["lr_true"].to_numpy()
    assert np.all((ratio < 1.5) & (ratio > 1 / 1.5)), ratio
    assert np.all([lo < v < hi for v, (lo, hi) in zip(pred["value"], pred["interval"])])
    assert len(j["rungs"]) == (fit_df.N.nunique()) * 3
    out = capsys.readouterr().out
    assert out.startswith("hyperparameter laws") and "at N = " in out and "lr = " in out


def test_step_law_exponents_lie_inside_their_intervals():
    """Over 4 seeds the 90% intervals of p and q hold the true exponents (19/20 each over 20
    seeds when measured; seed 0 misses both), and they are intervals, not everything."""
    inside = {"p": 0, "q": 0}
    p_hat = []
    for seed in range(4):
        fit_df, _ = split(lr_sweep(seed=seed))
        law = fit_hparams(fit_df, [LR], HparamOptions(forms=("N_D",))).fits[LR].law
        ci = law.ci()
        for name in inside:
            lo, hi = ci[name]
            inside[name] += lo <= TRUE_LAW[name] <= hi
            assert hi - lo < 0.3
        p_hat.append(law.params()["p"])
    assert inside["p"] + inside["q"] >= 5, inside  # 6/8 measured; <= 4 has probability 0.5% at 90%
    assert np.mean(p_hat) == pytest.approx(TRUE_LAW["p"], abs=0.04)


def test_prediction_intervals_cover_about_90_percent_over_seeds():
    hits = total = 0
    for seed in range(4):
        fit_df, targets = split(lr_sweep(seed=seed))
        laws = fit_hparams(fit_df, [LR]).laws()
        for N, D, truth in targets.itertuples(index=False):
            _, lo, hi = laws.predict(LR, N, D)
            hits += lo <= truth <= hi
            total += 1
    assert 0.7 <= hits / total <= 1.0, f"coverage {hits}/{total}"


def test_predictions_one_per_row_and_param_in_targets_order(tmp_path):
    fit_df = batch_grid(seed=1)
    targets = pd.DataFrame({"N": [1e9, 2e7, 5e8], "D": [4e10, 1e9, 1e10]})
    rc, j = run_cli(tmp_path, fit_df, "--hparam", LR, "--hparam", BATCH, targets=targets)
    assert rc == 0
    pred = j["predictions"]
    assert len(pred) == 2 * len(targets)
    assert [(p["N"], p["D"]) for p in pred] == [(r.N, r.D) for r in targets.itertuples() for _ in (LR, BATCH)]
    assert [p["param"] for p in pred] == [LR, BATCH] * len(targets)
    for p in pred:
        assert set(p) >= {"N", "D", "param", "value", "interval"}
        assert p["interval"][0] <= p["value"] <= p["interval"][1]


# ---- the rung optimum -------------------------------------------------------------------------


def test_rung_optimum_is_the_quadratic_vertex_not_the_argmin():
    values = np.array([1e-4, 3e-4, 9e-4, 2.7e-3, 8.1e-3])
    true = 6e-4  # between the grid points 3e-4 and 9e-4, nearer 9e-4 in log
    losses = 3.0 * (1 + 0.05 * np.log(values / true) ** 2)
    r = R.locate(LR, 1e8, 2e9, 1.2e18, values, losses, noise=1e-3)
    assert r.best_tried == 9e-4
    assert r.optimum == pytest.approx(true, rel=1e-6)
    assert r.interval[0] < true < r.interval[1]
    assert r.loss_at_optimum == pytest.approx(3.0, rel=1e-9) and r.loss_at_optimum < r.best_loss
    assert r.kappa == pytest.approx(0.05, rel=1e-6)
    assert r.usable and r.flag is None and r.n_window == 3


@pytest.mark.parametrize("side,true", [("lowest", 3e-5), ("highest", 3e-2)])
def test_edge_flag_when_the_best_is_at_an_end_of_the_grid(side, true):
    values = np.geomspace(1e-4, 1e-2, 5)
    losses = 3.0 * (1 + 0.05 * np.log(values / true) ** 2)
    r = R.locate(LR, 1e8, 2e9, 1.2e18, values, losses, noise=1e-3)
    assert r.edge and not r.flat and not r.usable
    assert side in r.flag
    assert r.best_tried == (values[0] if side == "lowest" else values[-1])


@pytest.mark.parametrize(
    "losses", [[3.0] * 5, [2.6122448979591835] * 5, [3.0, 3.1, 3.2, 3.1, 3.0], [3.2, 3.0, 2.9, 2.85, 2.8]]
)
def test_flat_rungs_are_flagged(losses):
    """Constant, concave: no optimum (kappa nan). A constant loss once passed as convex through
    float round-off (polyfit curvature +4e-17) with a vertex anywhere."""
    values = np.geomspace(1e-4, 1e-2, 5)
    r = R.locate(LR, 1e8, 2e9, 1.2e18, values, np.array(losses), noise=1e-3)
    if losses[-1] < losses[-2]:  # monotone: the best is at the edge (flat or not)
        assert not r.usable and r.edge
        return
    assert r.flat and not r.usable and math.isnan(r.kappa)
    assert r.optimum == pytest.approx(r.best_tried, rel=1e-12) and "flat" in r.flag


def test_edge_rungs_are_left_out_of_the_law_unless_include_edges(tmp_path):
    d = lr_sweep(seed=2, n_values=5, spread=4).drop(columns="lr_true")
    # the smallest model's grids all sit above its optimum: best at the lowest value tried
    small = d.N == d.N.min()
    d.loc[small, LR] *= 20
    d.loc[small, "loss"] = [
        base_loss(N, D) * (1 + 0.02 * np.log(lr / (0.5 * N**-0.35 * D**0.05)) ** 2)
        for N, D, lr in d.loc[small, ["N", "D", LR]].itertuples(index=False)
    ]
    fit = fit_hparams(d, [LR])
    f = fit.fits[LR]
    edges = [r for r in f.rungs if r.edge]
    assert len(edges) == 3 and all(r.N == d.N.min() for r in edges)
    assert f.n_excluded == 3 and f.law.n_rungs == len(f.rungs) - 3
    assert all("lowest" in r.flag for r in edges)
    kept = fit_hparams(d, [LR], HparamOptions(include_edges=True)).fits[LR]
    assert kept.n_excluded == 0 and kept.law.n_rungs == len(f.rungs)
    rc, j = run_cli(tmp_path, d, "--hparam", LR, "--include-edges")
    assert rc == 0 and j["laws"][LR]["n_rungs"] == len(f.rungs)
    assert sum(r["edge"] for r in j["rungs"]) == 3


def test_flat_rung_is_reported_with_null_kappa_and_left_out(tmp_path):
    d = lr_sweep(seed=3).drop(columns="lr_true")
    rung = (d.N == d.N.max()) & (d.D == d[d.N == d.N.max()].D.min())
    d.loc[rung, "loss"] = 3.0  # no LR dependence at all
    rc, j = run_cli(tmp_path, d, "--hparam", LR, "--method", "fit_hparams")
    assert rc == 0  # strict JSON although kappa is nan
    flat = [r for r in j["rungs"] if r["flat"]]
    assert len(flat) == 1 and flat[0]["kappa"] is None and "flat" in flat[0]["flag"]
    assert j["laws"][LR]["n_excluded"] == 1


# ---- 2-D grid: LR x batch ---------------------------------------------------------------------

B_LAW = dict(c=0.2, q=0.5)  # B* = 0.2 D^0.5 (sequences)


def batch_grid(seed=0, noise=5e-4):
    """LR x batch grid per rung: B* = 0.2 D^0.5, and the optimal LR moves with batch size
    (lr*(B) = lr* (B / B*)^0.5), so only the profile over batch sizes puts the LR optimum at lr*
    (at the smallest batch it sits at lr*/4, averaged over the batch grid at lr*/sqrt(2)). Batch
    grid B* x 4^j (j = -2..1), LR grid lr* x 2^k (k = -3..3)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in np.geomspace(1e7, 1e9, 5):
        for D in (20 * N, 80 * N):
            lr0 = TRUE_LAW["c"] * N ** TRUE_LAW["p"] * D ** TRUE_LAW["q"]
            b0 = B_LAW["c"] * D ** B_LAW["q"]
            for j in range(-2, 2):  # asymmetric about B*: a mean over batches would miss lr*
                B = b0 * 4.0**j
                for k in range(-3, 4):
                    lr = lr0 * 2.0**k
                    pen = 0.02 * np.log(lr / (lr0 * (B / b0) ** 0.5)) ** 2 + 0.01 * np.log(B / b0) ** 2
                    loss = base_loss(N, D) * (1 + pen) * np.exp(rng.normal(0, noise))
                    rows.append({"N": N, "D": D, LR: lr, BATCH: B, "loss": loss})
    return pd.DataFrame(rows)


def test_2d_grid_fits_both_laws_with_the_lr_optimum_from_the_profile():
    d = batch_grid()
    fit = fit_hparams(d)  # default: every swept optim.* / train.batch_size column
    assert list(fit.fits) == [LR, BATCH]
    for r in fit.fits[LR].rungs:  # the profile's vertex is lr*, not lr*/4 (the smallest batch)
        assert r.optimum == pytest.approx(
            TRUE_LAW["c"] * r.N ** TRUE_LAW["p"] * r.D ** TRUE_LAW["q"], rel=0.1
        )
    for r in fit.fits[BATCH].rungs:
        assert r.optimum == pytest.approx(B_LAW["c"] * r.D ** B_LAW["q"], rel=0.1)
    b = fit.fits[BATCH].law
    assert b.form in ("D", "N_D")
    assert b.params()["q"] == pytest.approx(B_LAW["q"], abs=0.05)
    laws = fit.laws()
    v, lo, hi = laws.predict(BATCH, 3e9, 1.2e11)
    assert 1 / 1.5 < v / (B_LAW["c"] * 1.2e11 ** B_LAW["q"]) < 1.5 and lo < v < hi
    v, _, _ = laws.predict(LR, 3e9, 1.2e11)
    assert 1 / 1.5 < v / (TRUE_LAW["c"] * 3e9 ** TRUE_LAW["p"] * 1.2e11 ** TRUE_LAW["q"]) < 1.5


# ---- penalty curve ----------------------------------------------------------------------------


def test_penalty_curve_is_kappa_ln_k_squared():
    kappa = 0.03
    d = lr_sweep(seed=4, noise=0.0, jitter=0.2, kappa=kappa).drop(columns="lr_true")
    pen = fit_hparams(d, [LR]).to_json()["penalty"][LR]
    expected = [kappa * math.log(k) ** 2 for k in pen["k"]]
    # rel 1e-4: the values are read to 6 significant digits (VALUE_DIGITS), which moves kappa ~1e-5
    assert pen["loss_increase"] == pytest.approx(expected, rel=1e-4)
    assert pen["kappa_median"] == pytest.approx(kappa, rel=1e-4)
    assert pen["lo"] == pytest.approx(expected, rel=1e-4) and pen["hi"] == pytest.approx(expected, rel=1e-4)
    assert 2.0 in pen["k"] and 0.5 in pen["k"]


# ---- form choice ------------------------------------------------------------------------------


def test_a_compute_law_picks_c_or_an_equivalent_form():
    a = -0.15
    d = lr_sweep(seed=5, lr_of=lambda N, D: 2e1 * (6 * N * D) ** a).drop(columns="lr_true")
    f = fit_hparams(d, [LR]).fits[LR]
    err = f.holdout.errors
    assert err["C"] <= min(v for v in err.values() if v is not None) + 0.01
    assert err["N"] > err["C"] + 0.02 and err["D"] > err["C"] + 0.02
    assert f.law.form in ("C", "N_D")
    if f.law.form == "C":
        assert f.law.params()["a"] == pytest.approx(a, abs=0.03)
    else:
        assert f.law.params()["p"] == pytest.approx(f.law.params()["q"], abs=0.1)


def test_independent_n_and_d_picks_n_d():
    law = dict(c=0.5, p=-0.35, q=0.25)
    d = lr_sweep(seed=6, law=law, d_fixed=(1e9, 4e9, 1.6e10)).drop(columns="lr_true")
    f = fit_hparams(d, [LR]).fits[LR]
    assert f.law.form == "N_D", f.holdout.errors
    assert f.law.params()["q"] == pytest.approx(law["q"], abs=0.07)
    assert f.law.params()["p"] == pytest.approx(law["p"], abs=0.07)


# ---- bad input: one line on stderr, exit 2 ----------------------------------------------------


def _one_line_error(tmp_path, capsys, d, *extra, targets=None, needle=""):
    rc, _ = run_cli(tmp_path, d, *extra, targets=targets)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle in err, err
    return err


def test_a_rung_with_two_values_is_left_out_with_a_warning(tmp_path, capsys):
    d = lr_sweep(seed=7, n_values=5).drop(columns="lr_true")
    first = d[(d.N == d.N.min()) & (d.D == d.D.min())].index
    d = d.drop(first[2:])  # that rung keeps two learning rates
    for extra in (("--hparam", LR), ()):  # default --param too
        rc, j = run_cli(tmp_path, d, *extra)
        err = capsys.readouterr().err
        assert rc == 0, err
        assert "warning:" in err and "Traceback" not in err
        (skipped,) = j["skipped_rungs"]
        assert skipped["n_values"] == 2 and skipped["N"] == pytest.approx(d.N.min()) and skipped["reason"]


def test_a_parameter_never_swept_is_one_line(tmp_path, capsys):
    d = lr_sweep(seed=8).drop(columns="lr_true").assign(**{"optim.weight_decay": 0.1})
    _one_line_error(tmp_path, capsys, d, "--hparam", "optim.weight_decay", needle="never swept")


def test_a_missing_column_is_one_line(tmp_path, capsys):
    d = lr_sweep(seed=8).drop(columns="lr_true")
    _one_line_error(tmp_path, capsys, d, "--hparam", "optim.nosuch", needle="optim.lr")
    _one_line_error(tmp_path, capsys, d.drop(columns="N"), "--hparam", LR, needle="N")


def test_non_positive_values_are_one_line(tmp_path, capsys):
    d = lr_sweep(seed=8).drop(columns="lr_true")
    d.loc[3, LR] = 0.0
    _one_line_error(tmp_path, capsys, d, "--hparam", LR, needle="non-positive")


def test_targets_without_n_are_one_line(tmp_path, capsys):
    d = lr_sweep(seed=8).drop(columns="lr_true")
    _one_line_error(
        tmp_path, capsys, d, "--hparam", LR, targets=pd.DataFrame({"D": [1e10]}), needle="N and D"
    )


def test_load_hparams_rejects_other_json(tmp_path):
    (tmp_path / "fit.json").write_text(json.dumps({"law": "chinchilla", "params": {"E": 1.7}}))
    with pytest.raises(AnalysisError, match="not a fit-hparams result"):
        load_hparams(tmp_path / "fit.json")
    with pytest.raises(AnalysisError, match="not found"):
        load_hparams(tmp_path / "nope.json")


def test_hp_json_round_trips_through_load_hparams(tmp_path):
    fit_df, _ = split(lr_sweep(seed=0))
    rc, j = run_cli(tmp_path, fit_df, "--hparam", LR)
    assert rc == 0
    laws = load_hparams(tmp_path / "hp.json")
    chosen = options(j["method_choice"]["chosen"])  # the method the folds chose, fitted directly
    direct = fit_hparams(fit_df, [LR], chosen).laws().predict(LR, 1e9, 4e10)
    assert laws.predict(LR, 1e9, 4e10) == pytest.approx(direct, rel=1e-9)


def test_a_setting_that_follows_the_run_length_is_not_a_default_parameter():
    """optim.warmup_tokens is a fraction of each run's tokens: three batch sizes round a budget to
    three slightly different lengths (< 1% apart), which is not a sweep of the warm-up."""
    from analysis.hparams.fitting import swept_params, tidy

    d = lr_sweep(seed=2).drop(columns="lr_true")
    d["optim.warmup_tokens"] = 0.05 * d["D"] * (1 + 0.003 * (np.arange(len(d)) % 3))
    table, _ = tidy(d)
    assert swept_params(table) == [LR]
    assert list(fit_hparams(d).fits) == [LR]


def test_two_model_sizes_are_scored_leave_one_out():
    """Holding the largest of two model sizes out leaves one N: no form can be fitted on it, so
    the forms are scored leave-one-out over the rungs instead."""
    d = lr_sweep(seed=3, n_sizes=2, d_ratios=(20, 80)).drop(columns="lr_true")
    fit = fit_hparams(d, [LR])
    h = fit.fits[LR].holdout
    assert h is not None and h.held_out.startswith("leave-one-out over 4 rungs")
    assert len(h.rungs) == 4 and h.chosen in ("N", "C", "D")  # N_D: 3 coefficients need > 3 rungs


def test_hp_json_records_the_settings_the_runs_shared(tmp_path):
    d = lr_sweep(seed=4).drop(columns="lr_true")
    d["model.seq_len"], d["optim.schedule"], d["optim.warmup_tokens"] = 64, "wsd", 0.05 * d["D"]
    ctx = fit_hparams(d, [LR]).to_json()["context"]
    assert ctx["model.seq_len"] == 64 and ctx["optim.schedule"] == "wsd"
    assert ctx["warmup_fraction"] == pytest.approx(0.05)
