"""Joint learning-rate x batch-size optima (`HparamOptions(joint=...)`, analysis/hparams/rungs.py) and
`backtest --protocol batch` on a synthetic grid with known optima.

The grid is the zoo's (`backtest_zoo.lr_batch_ladder`): 6 model sizes x2 apart (33M-1.07B) x 2
budgets, per rung 6 learning rates x 5 power-of-two batch sizes, x2 steps, shifted per rung; the
optima follow lr* = 3e-3 (N/1e8)^-0.3 (D/20N)^-0.1 and B* = 128 (N/1e8)^0.1 (D/2e9)^0.4, the loss
is quadratic in (ln lr, ln B) with a cross term. Tolerances are measured on seeds 0-9 (in each
test's comment) and set ~1.5x above the worst.
"""

import json
import pathlib
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import backtests as backtest
from analysis.cli import main
from analysis.hparams import fitting as HF
from analysis.hparams import rungs as R
from models.base.errors import AnalysisError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import backtest_zoo  # noqa: E402

LR, BATCH = "optim.lr", "train.batch_size"
HELD_OUT_N = 4.3e8  # fit on <= 268M, predict 537M and 1.07B


def true_optimum(param: str, N: float, D: float) -> float:
    """The optima of backtest_zoo.lr_batch_ladder."""
    if param == LR:
        return 3e-3 * (N / 1e8) ** -0.3 * (D / (20 * N)) ** -0.1
    return 128 * (N / 1e8) ** 0.1 * (D / 2e9) ** 0.4


def grid(seed: int = 0, noise: float = 0.002) -> pd.DataFrame:
    return backtest_zoo.lr_batch_ladder(seed, noise=noise)


def rung_errors(d: pd.DataFrame, param: str, joint: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(|dlog10| of each located interior rung optimum against the truth, whether its 90% interval
    holds the truth, how each was located)."""
    table, _ = HF.tidy(d)
    found = [r for r in HF.locate_rungs(table, param, HF.HparamOptions(joint=joint))[0] if r.usable]
    truth = np.array([true_optimum(param, r.N, r.D) for r in found])
    err = np.abs(np.log10(np.array([r.optimum for r in found]) / truth))
    covered = np.array([lo <= t <= hi for (lo, hi), t in zip((r.interval for r in found), truth)])
    return err, covered, [r.method for r in found]


# ---- the joint optimum ------------------------------------------------------------------------


def test_the_2d_vertex_is_exact_on_a_noise_free_grid_where_the_profile_is_not():
    # measured: quadratic <= 7e-7 dex (the 6-digit rounding of values); profile up to 0.016 (lr)
    # and 0.038 (batch): the best loss over a x2 batch grid is not a quadratic in ln lr
    d = grid(0, noise=0.0)
    for param in (LR, BATCH):
        err, _, how = rung_errors(d, param, "quadratic")
        assert len(err) >= 8 and set(how) == {"quadratic"}
        assert err.max() < 1e-5, (param, err)
        assert rung_errors(d, param, "profile")[0].max() > 0.01


def test_the_joint_optimum_recovers_both_optima_under_noise():
    # measured over seeds 0-9 (0.2% noise): mean |dlog10| per seed at worst 0.025 (lr) and 0.046
    # (batch), average 0.018 and 0.033 (the profile: 0.025 and 0.044); 90% intervals hold the
    # truth on 89-93% of rungs
    errs = {LR: [], BATCH: []}
    covered = []
    for seed in range(4):
        d = grid(seed)
        for param in errs:
            e, c, _ = rung_errors(d, param, "quadratic")
            errs[param].append(e.mean())
            covered += list(c)
    assert max(errs[LR]) < 0.04 and max(errs[BATCH]) < 0.07, errs
    assert np.mean(covered) >= 0.8


def test_grid_vertex_solves_a_known_quadratic_and_refuses_a_saddle():
    # loss = 2 + 0.02 (x - 1)^2 + 0.01 (y + 2)^2 + 0.01 (x - 1)(y + 2), expanded
    a, b, c, x0, y0 = 0.02, 0.01, 0.01, 1.0, -2.0
    coef = np.array(
        [
            2 + a * x0**2 + b * y0**2 + c * x0 * y0,
            -2 * a * x0 - c * y0,
            -2 * b * y0 - c * x0,
            a,
            b,
            c,
        ]
    )
    xs, ys, loss, curv = R.grid_vertex(coef)
    assert (xs, ys, loss) == pytest.approx((x0, y0, 2.0))
    assert curv == pytest.approx(a - c * c / (4 * b))  # the profile's curvature (batch re-tuned)
    saddle = coef.copy()
    saddle[5] = 0.05  # 4 a b < c^2: not positive definite
    assert np.isnan(R.grid_vertex(saddle)[0])


def test_a_rung_without_a_2d_grid_is_located_on_its_profile():
    d = grid(0)
    one_batch = d[(d.N > 5e8) | (d[BATCH] == d.groupby(["N", "D"])[BATCH].transform("min"))]
    table, _ = HF.tidy(one_batch)
    found = HF.locate_rungs(table, LR, HF.HparamOptions(joint="quadratic"))[0]
    assert {r.method for r in found if r.N < 5e8} == {"profile"}
    assert {r.method for r in found if r.N > 5e8} == {"quadratic"}


def test_an_unknown_joint_method_is_one_line():
    with pytest.raises(AnalysisError, match="unknown joint method 'cubic'; choose from profile, quadratic"):
        HF.fit_hparams(grid(0), [LR], HF.HparamOptions(joint="cubic"))


# ---- fit-hparams --predict ----------------------------------------------------------------------


def test_fit_hparams_predicts_one_row_per_param_and_target(tmp_path, capsys):
    d = grid(0)
    d[d.N < HELD_OUT_N].to_csv(tmp_path / "runs.csv", index=False)
    targets = pd.DataFrame({"N": [5.35e8, 5.35e8, 1.07e9, 1.07e9], "D": [1.07e10, 4.28e10, 2.14e10, 8.56e10]})
    targets.to_csv(tmp_path / "targets.csv", index=False)
    argv = ["fit-hparams", str(tmp_path / "runs.csv"), "--joint", "quadratic"]
    argv += ["--predict", str(tmp_path / "targets.csv"), "--json", str(tmp_path / "hp.json")]
    assert main(argv) == 0, capsys.readouterr().err
    j = json.loads((tmp_path / "hp.json").read_text())
    pred = j["predictions"]
    assert len(pred) == 2 * len(targets)
    assert [(p["param"], p["N"], p["D"]) for p in pred] == [
        (param, r.N, r.D) for r in targets.itertuples() for param in (LR, BATCH)
    ]
    for p in pred:
        assert {"param", "N", "D", "value", "interval"} <= set(p)
        assert p["interval"][0] < p["value"] < p["interval"][1]
        # measured on seed 0: at most 0.034 (lr) and 0.058 (batch) dex off the true optimum
        assert abs(np.log10(p["value"] / true_optimum(p["param"], p["N"], p["D"]))) < 0.09, p
    assert {r["method"] for r in j["rungs"]} == {"quadratic"}


# ---- backtest --protocol batch -------------------------------------------------------------------


def test_batch_protocol_has_one_baseline_and_one_default_row(tmp_path):
    bt = backtest.run(grid(0), "batch", backtest.Options(holdout_above_n=HELD_OUT_N, bootstrap=20))
    rows = bt.to_dict()["methods"]
    assert bt.protocol == "batch" and bt.cut["n_held_out"] == 4
    assert sum(r["baseline"] for r in rows) == 1 and sum(r["default"] for r in rows) == 1
    by = {r["method"]: r for r in rows}
    assert {"baseline_log_linear", "fit_hparams", "joint_profile", "joint_quadratic"} <= set(by)
    # measured on seed 0: the default 0.059 dex and 0% loss, the baseline 0.122 and 0.17%
    assert by["fit_hparams"]["mean_abs_dlog10"] < 0.75 * by["baseline_log_linear"]["mean_abs_dlog10"]
    assert by["fit_hparams"]["mean_loss_penalty"] < by["baseline_log_linear"]["mean_loss_penalty"]
    assert all("loss_penalty" in p for p in by["fit_hparams"]["points"])


def test_batch_protocol_reads_a_batch_size_alias(tmp_path):
    d = grid(0).rename(columns={BATCH: "global_batch", LR: "lr"})
    bt = backtest.run(d, "batch", backtest.Options(holdout_above_n=HELD_OUT_N, bootstrap=20))
    default = next(r for r in bt.rows() if r["default"])
    assert default["n"] == 4


def test_batch_protocol_without_a_batch_column_is_one_line(tmp_path, capsys):
    grid(0).drop(columns=BATCH).to_csv(tmp_path / "runs.csv", index=False)
    assert main(["backtest", str(tmp_path / "runs.csv"), "--protocol", "batch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "batch-size column" in err[0], err
