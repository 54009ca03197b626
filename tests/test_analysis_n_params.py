"""`--n-params {total,non_embedding}` (issue 18, fix 5): Kaplan-form laws of N are fitted on
non-embedding N by default (Kaplan et al.'s N), Chinchilla on total N; the fit JSON records which;
a missing column is one line that names the column to add."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from power_law import register as _register_power_law

from analysis import AnalysisError, fit_law
from analysis.cli import main
from analysis.core.table import NParamsWarning, choose_n_column
from analysis.laws.registry import get_law
from analysis.report.build import _use_n_params

KAPLAN = _register_power_law()  # a law of N fitted on non-embedding N by default

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 50_000


def shapes_table():
    """Model shapes whose embedding (V*d, untied head too) is a large, size-dependent share of N,
    and a loss that follows a Kaplan law in *non-embedding* N exactly."""
    d = np.array([128, 192, 256, 384, 512, 768, 1024, 1536, 2048])
    n_layers = np.array([2, 3, 4, 6, 8, 12, 16, 20, 24])
    n_ne = 12 * n_layers * d.astype(float) ** 2
    n_total = n_ne + 2 * VOCAB * d
    loss = 1.7 + 300.0 * n_ne**-0.3
    return pd.DataFrame({"N": n_total, "n_params_non_embedding": n_ne, "loss": loss})


def test_kaplan_defaults_to_non_embedding_and_chinchilla_to_total():
    df = shapes_table()
    cols, kind = choose_n_column(df, get_law(KAPLAN))
    assert kind == "non_embedding" and cols["N"] == "n_params_non_embedding"
    cols, kind = choose_n_column(df.assign(D=1e9), get_law("chinchilla"))
    assert kind == "total" and "N" not in cols  # found by the usual N spellings


def test_the_choice_changes_the_fit_and_is_recorded():
    df = shapes_table()
    ne = fit_law(df, KAPLAN, bootstrap=0, prediction_intervals=False)
    assert ne.params["alpha"] == pytest.approx(0.3, rel=1e-3)
    assert ne.to_dict()["n_params"] == "non_embedding" and ne.columns["N"] == "n_params_non_embedding"
    total = fit_law(df, KAPLAN, bootstrap=0, n_params="total", prediction_intervals=False)
    assert total.to_dict()["n_params"] == "total" and total.columns["N"] == "N"
    assert abs(total.params["alpha"] - 0.3) > 0.02  # embeddings in N bend the power law


def test_requested_non_embedding_without_the_column_is_one_clear_error():
    df = shapes_table().drop(columns="n_params_non_embedding")
    with pytest.raises(AnalysisError, match="add a column n_params_non_embedding"):
        fit_law(df, KAPLAN, bootstrap=0, n_params="non_embedding", prediction_intervals=False)
    with pytest.raises(AnalysisError, match="--n-params must be one of"):
        choose_n_column(df, get_law(KAPLAN), n_params="embedding")


def test_the_default_falls_back_to_total_loudly():
    df = shapes_table().drop(columns="n_params_non_embedding")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = fit_law(df, KAPLAN, bootstrap=0, prediction_intervals=False)
    assert any(
        issubclass(w.category, NParamsWarning) and "n_params_non_embedding" in str(w.message) for w in caught
    )
    assert fit.to_dict()["n_params"] == "total"


def test_an_explicit_column_is_used_as_given():
    df = shapes_table().rename(columns={"n_params_non_embedding": "N_ne"})
    cols, kind = choose_n_column(df, get_law(KAPLAN), {"N": "N_ne"}, "non_embedding")
    assert cols["N"] == "N_ne" and kind == "non_embedding"
    cols, kind = choose_n_column(shapes_table(), get_law(KAPLAN), {"N": "n_params_non_embedding"})
    assert kind == "non_embedding"  # told by the column's name


def test_gadre_shared_data_carries_non_embedding_n(shared_data):
    runs = pd.read_csv(shared_data / "gadre2024_overtraining" / "runs.csv")
    c4 = runs[runs["dataset"] == "c4_original"]
    df = c4[["n_params", "n_params_non_embedding", "tokens", "loss_c4_val"]].rename(
        columns={"loss_c4_val": "loss"}
    )
    cols, kind = choose_n_column(df, get_law(KAPLAN))
    assert kind == "non_embedding" and cols["N"] == "n_params_non_embedding"
    assert (df["n_params_non_embedding"] < df["n_params"]).all()


def test_fit_cli_flag_and_json(tmp_path, capsys):
    shapes_table().to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "o.json"
    assert (
        main(["fit", str(tmp_path / "d.csv"), "--law", KAPLAN, "--bootstrap", "0", "--json", str(out)]) == 0
    )
    assert json.loads(out.read_text())["n_params"] == "non_embedding"
    assert "N = non-embedding parameters (column n_params_non_embedding)" in capsys.readouterr().out
    assert (
        main(
            [
                "fit",
                str(tmp_path / "d.csv"),
                "--law",
                KAPLAN,
                "--bootstrap",
                "0",
                "--n-params",
                "total",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["n_params"] == "total"


def test_fit_cli_missing_column_is_one_line(tmp_path):
    shapes_table().drop(columns="n_params_non_embedding").to_csv(tmp_path / "d.csv", index=False)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "fit",
            str(tmp_path / "d.csv"),
            "--law",
            "chinchilla",
            "--n-params",
            "non_embedding",
            "--bootstrap",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "n_params_non_embedding" in lines[0], p.stderr


def test_report_uses_one_n_everywhere():
    done = pd.DataFrame(
        {"n_params": [1e6, 2e6], "n_params_non_embedding": [4e5, 1.2e6], "tokens": [1e8, 1e8]}
    )
    assert _use_n_params(done, "total") is done
    swapped = _use_n_params(done, "non_embedding")
    assert swapped["n_params"].tolist() == [4e5, 1.2e6] and done["n_params"].tolist() == [1e6, 2e6]
    with pytest.raises(AnalysisError, match="n_params_non_embedding"):
        _use_n_params(done.drop(columns="n_params_non_embedding"), "non_embedding")


def test_collected_runs_table_carries_non_embedding_n(tmp_path):
    from analysis.core import runs

    for i, (n, ne) in enumerate(((1e6, 4e5), (4e6, 2.5e6), (1.6e7, 1.2e7), (6.4e7, 5.5e7), (2.6e8, 2.4e8))):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "n_params": n,
                    "n_params_non_embedding": ne,
                    "tokens": 1e8,
                    "flops": 6 * n * 1e8,
                    "final_eval_loss": 1.5 + 40 * ne**-0.3,
                }
            )
        )
    table = runs.table(tmp_path, cache_dir=False)
    assert sorted(table["n_params_non_embedding"]) == [4e5, 2.5e6, 1.2e7, 5.5e7, 2.4e8]
    fit = fit_law(table, KAPLAN, bootstrap=0, prediction_intervals=False)
    assert fit.columns["N"] == "n_params_non_embedding"
    assert fit.params["alpha"] == pytest.approx(0.3, rel=1e-3)
