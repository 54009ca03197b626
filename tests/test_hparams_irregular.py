"""`python -m analysis fit-hparams` on a table shaped like a real LR sweep (issue: it refused a whole
table over one 2-LR rung, and with such rungs dropped by hand crashed in `feasible` with
"SVD did not converge" after a NaN reached np.log).

The synthetic sweep: per rung (N, D = ratio x N) the loss is L0(N, D) + kappa (ln lr - ln lr*(N))^2
with lr*(N) = c N^p, small noise, fixed seed; each rung has its own log-spaced LR grid (2 to 7
values, its own spacing and offset: no two rungs share values); C = 6ND, D optionally absent. The
regression the issue hit: a C column with blank / int64-overflowed cells (6*N*D of integer N and D
wraps past 9.2e18) reached a law's log(C). No training: pure numpy/pandas.
"""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main

LR = "optim.lr"
LAW = dict(c=0.3, p=-0.3)  # lr* = 0.3 N^-0.3
HELD_OUT = (1.5e9, 3e9)  # model sizes predicted, not in the table
SIZES = np.geomspace(2e7, 9e8, 6)
TWO_LR = ((0, 10), (2, 20), (3, 40), (5, 10))  # (index into SIZES, D/N): rungs swept at two LRs only


def lr_star(N):
    return LAW["c"] * np.asarray(N, float) ** LAW["p"]


def irregular_sweep(seed=0, with_d=True, kappa=0.05, noise=0.002):
    """An irregular LR sweep: N log-spaced 2e7..9e8, D/N in (10, 20, 40); the TWO_LR rungs have
    two learning rates, the others 5-7 with a per-rung log spacing (x1.5..x2.2) and offset."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, N in enumerate(SIZES):
        for ratio in (10, 20, 40):
            D = ratio * N
            n_lr = 2 if (i, ratio) in TWO_LR else int(rng.integers(5, 8))
            step = rng.uniform(np.log(1.5), np.log(2.2))
            x = np.log(lr_star(N)) + rng.uniform(-0.3, 0.3) + step * (np.arange(n_lr) - (n_lr - 1) / 2)
            for lr in np.exp(x):
                L0 = 1.7 + 400 / N**0.34 + 2000 / D**0.28
                loss = L0 + kappa * (np.log(lr) - np.log(lr_star(N))) ** 2 + rng.normal(0, noise)
                rows.append({"N": N, "D": D, "C": 6 * N * D, LR: lr, "loss": loss})
    d = pd.DataFrame(rows)
    return d if with_d else d.drop(columns="D")


def fit_cli(tmp_path, d, capsys, *extra):
    """(rc, JSON or None, stdout, stderr) of fit-hparams through analysis.cli.main."""
    d.to_csv(tmp_path / "runs.csv", index=False)
    rc = main(["fit-hparams", str(tmp_path / "runs.csv"), *extra, "--json", str(tmp_path / "hp.json")])
    out, err = capsys.readouterr()
    j = json.loads((tmp_path / "hp.json").read_text()) if rc == 0 else None
    return rc, j, out, err


def held_out_dlog10(j):
    pred = pd.DataFrame(j["predictions"])
    return np.abs(np.log10(pred["value"].to_numpy() / lr_star(pred["N"].to_numpy())))


@pytest.mark.parametrize("with_d", [True, False], ids=["with-D", "C-only"])
@pytest.mark.parametrize("param", [[], ["--hparam", LR]], ids=["default-param", "param-lr"])
def test_irregular_sweep_fits_and_lists_the_two_lr_rungs(tmp_path, capsys, with_d, param):
    d = irregular_sweep(seed=0, with_d=with_d)
    targets = pd.DataFrame([{"N": N, "D": 20 * N} for N in HELD_OUT])
    targets.to_csv(tmp_path / "targets.csv", index=False)
    rc, j, out, err = fit_cli(tmp_path, d, capsys, *param, "--predict", str(tmp_path / "targets.csv"))
    assert rc == 0, err
    assert "Traceback" not in out + err
    skipped = j["skipped_rungs"]
    assert len(skipped) == len(TWO_LR)
    for s in skipped:
        assert s["param"] == LR and s["n_values"] == 2 and len(s["values"]) == 2
        assert "2 values of optim.lr" in s["reason"] and ">= 3" in s["reason"]
        assert s["C"] == pytest.approx(6 * s["N"] * s["D"], rel=1e-6)
    got = sorted((float(f"{s['N']:.6g}"), round(s["D"] / s["N"])) for s in skipped)
    assert got == sorted((float(f"{SIZES[i]:.6g}"), r) for i, r in TWO_LR)
    warns = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert len(warns) == len(TWO_LR) and all("2 values of optim.lr" in w for w in warns), err
    assert j["laws"][LR]["n_skipped"] == len(TWO_LR)
    assert held_out_dlog10(j).max() < 0.1, j["predictions"]


def test_bad_c_cells_do_not_reach_the_law(tmp_path, capsys):
    """The issue's traceback: C = 6*N*D computed on integer columns wraps past int64 (negative and
    wrapped-positive C) and one C is blank; C's log was NaN and `feasible` raised LinAlgError."""
    d = irregular_sweep(seed=1)
    d = d.assign(N=d["N"].round().astype("int64"), D=d["D"].round().astype("int64"))
    with np.errstate(over="ignore"):
        d["C"] = 6 * d["N"] * d["D"]  # int64 arithmetic: wraps for N D > 1.5e18
    assert (d["C"] <= 0).any()
    two = d.groupby(["N", "D"])[LR].transform("nunique") == 2
    d = d[~two].astype({"C": float})  # the 2-LR rungs dropped by hand, as in the issue
    d.iloc[3, d.columns.get_loc("C")] = np.nan  # and one blank C cell
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the "invalid value encountered in log"
        rc, j, out, err = fit_cli(tmp_path, d, capsys, "--hparam", LR)
    assert rc == 0, err
    assert "Traceback" not in out + err and j["skipped_rungs"] == []
    assert any("int64 overflow" in n for n in j["notes"])
    rungs = pd.DataFrame(j["rungs"])
    assert (np.isfinite(rungs["C"]) & (rungs["C"] > 0)).all()
    # every C that is non-positive, blank or wrapped beyond x10 of 6ND is 6ND again
    ratio = rungs["C"] / (6 * rungs["N"] * rungs["D"])
    assert ((ratio > 0.1) & (ratio < 10)).all(), ratio
    assert j["law_form"][LR] != "C" or j["holdout"][LR]["mean_abs_dlog10"] < 0.05


def test_every_rung_with_fewer_than_three_values_is_one_error_line(tmp_path, capsys):
    d = irregular_sweep(seed=2)
    d = d.sort_values(LR).groupby(["N", "D"]).head(2)  # every rung keeps its two lowest LRs
    for extra in ([], ["--hparam", LR]):
        rc, _, out, err = fit_cli(tmp_path, d, capsys, *extra)
        lines = err.strip().splitlines()
        assert rc == 2, err
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert "Traceback" not in out + err
        assert ">= 3" in lines[0] and "optim.lr" in lines[0]


def test_gemstones_two_lr_table_is_one_error_line(tmp_path, capsys):
    """Gemstones' hot runs and their half-LR reruns: two LRs per (N, D), never a traceback."""
    root = "/work/shared/data/gemstones/"
    try:
        hot = pd.read_csv(root + "hot_checkpoints.csv").assign(**{LR: 1.0})
        half = pd.read_csv(root + "half_lr_checkpoints.csv").assign(**{LR: 0.5})
    except FileNotFoundError:
        pytest.skip("shared Gemstones data not available")
    d = pd.concat([hot, half], ignore_index=True).rename(columns={"tokens": "D"})
    for extra in ([], ["--hparam", LR]):
        rc, _, out, err = fit_cli(tmp_path, d, capsys, *extra)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert "Traceback" not in out + err
