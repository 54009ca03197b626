"""The `python -m analysis fit` / `fit-curve` commands: JSON schema and one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synth_csv(path, n=6):
    rng = np.random.default_rng(0)
    N = np.repeat(np.geomspace(2e7, 3e9, n), n)
    D = np.tile(np.geomspace(4e8, 2e11, n), n)
    L = (1.9 + 600 / N**0.33 + 1800 / D**0.35) * np.exp(rng.normal(0, 0.001, N.size))
    pd.DataFrame({"N": N, "D": D, "loss": L}).to_csv(path, index=False)


def test_fit_json_schema(tmp_path, capsys):
    synth_csv(tmp_path / "d.csv")
    out = tmp_path / "o.json"
    rc = main(["fit", str(tmp_path / "d.csv"), "--law", "chinchilla", "--bootstrap", "30", "--holdout-above", "1e20",
               "--budget", "1e21", "--budget", "1e23", "--json", str(out)])
    assert rc == 0
    j = json.loads(out.read_text())
    for key in ("params", "ci", "objective", "n_points", "converged", "starts_at_optimum", "allocation", "holdout",
                "law", "param_names", "bootstrap_samples"):
        assert key in j, key
    assert j["param_names"] == ["E", "A", "B", "alpha", "beta"] == list(j["params"])
    assert len(j["bootstrap_samples"]) == 30 and len(j["bootstrap_samples"][0]) == 5
    assert [b["C"] for b in j["allocation"]["budgets"]] == [1e21, 1e23]
    for k in ("N_opt", "N_opt_ci", "D_opt", "D_opt_ci"):
        assert k in j["allocation"]["budgets"][0]
    assert {"a", "b"} <= set(j["allocation"])
    pt = j["holdout"]["points"][0]
    assert set(pt) >= {"N", "D", "C", "actual", "predicted", "rel_error"}
    assert {"mean_rel_error", "max_rel_error"} <= set(j["holdout"])
    assert "alpha" in capsys.readouterr().out


BAD = {
    "nan.csv": "N,D,loss\n1e8,2e9,3.1\n2e8,4e9,nan\n4e8,8e9,2.9\n",
    "few.csv": "N,D,loss\n1e8,2e9,3.1\n2e8,4e9,3.0\n",
    "cols.csv": "params,tokens,loss\n1e8,2e9,3.1\n",
    "empty.csv": "",
}


@pytest.mark.parametrize("name, expect", [("nan.csv", "NaN"), ("few.csv", "point"), ("cols.csv", "--n-col"),
                                          ("empty.csv", "empty"), ("missing.csv", "not found")])
def test_bad_input_one_line_no_traceback(tmp_path, name, expect):
    if name in BAD:
        (tmp_path / name).write_text(BAD[name])
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    p = subprocess.run([sys.executable, "-m", "analysis", "fit", str(tmp_path / name), "--json", str(tmp_path / "o.json")],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], p.stderr


def test_unknown_law_lists_laws(tmp_path, capsys):
    (tmp_path / "d.csv").write_text(BAD["nan.csv"])
    assert main(["fit", str(tmp_path / "d.csv"), "--law", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "known laws" in err and "chinchilla" in err


def test_fit_curve_json(shared_data, tmp_path):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    out = tmp_path / "c.json"
    rc = main(["fit-curve", "--law", "tissue", "--fit", str(d / "cosine_24000.csv"), "--fit-until", "16000",
               "--predict", str(d / "wsd_20000_24000.csv"), "--json", str(out)])
    assert rc == 0
    j = json.loads(out.read_text())
    assert set(j["params"]) == {"L0", "A", "alpha", "C"}
    for name in ("cosine_24000", "wsd_20000_24000"):
        assert {"mean_rel_error", "max_rel_error", "final_loss_pred", "final_loss_actual"} <= set(j["predictions"][name])
