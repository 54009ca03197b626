"""analysis.core.runs.load on synthetic run directories shaped like the training core's output."""

import json
import warnings

import numpy as np
import pytest

from analysis import AnalysisError, load_curve, runs


def make_run(root, name, status="completed", n_params=1e6, steps=5, corrupt=False, summary=True, lr=1e-3):
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    lines = []
    for s in range(1, steps + 1):
        row = {
            "step": s * 10,
            "tokens": s * 1000,
            "flops": 6 * n_params * s * 1000,
            "loss": 5.0 / s,
            "lr": lr * (1 - 0.5 * s / steps),
            "grad_norm": 1.0,
            "step_time_s": 0.1,
            "tokens_per_s": 1e4,
            "mfu": 0.3,
        }
        if s % 2 == 0:
            row["eval_loss"] = 5.1 / s
        lines.append(json.dumps(row))
    if corrupt:
        lines.insert(2, '{"step": 25, "loss": ')  # a torn write
        lines.insert(4, "not json at all")
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (d / ".hydra" / "config.yaml").write_text(
        f"model:\n  d_model: 64\n  n_layers: 2\noptim:\n  lr: {lr}\n  betas: [0.9, 0.95]\n"
        f"train:\n  steps: {steps * 10}\n"
    )
    if summary:
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "n_params": n_params,
                    "n_params_non_embedding": n_params * 0.8,
                    "tokens": steps * 1000,
                    "flops": 6 * n_params * steps * 1000,
                    "final_train_loss": 5.0 / steps,
                    "final_eval_loss": 5.1 / steps,
                    "tokens_per_s": 1e4,
                    "mfu": 0.3,
                    "peak_flops_per_device": 1e12,
                    "mesh": {"data": 2, "tensor": 1},
                    "corpus": "synthetic",
                    "wall_time_s": 1.0,
                }
            )
        )
    return d


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    make_run(root, "n1", n_params=1e6)
    make_run(root, "n2", n_params=2e6, corrupt=True)
    make_run(root / "nested", "n3", n_params=4e6)
    make_run(root, "diverged", status="diverged")
    make_run(root, "unfinished", summary=False)
    return root


def test_load_tables_and_skips(sweep, tmp_path):
    with pytest.warns(UserWarning) as rec:
        runs_df, curves = runs.load(sweep, cache_dir=tmp_path / "cache")
    msgs = " ".join(str(w.message) for w in rec)
    assert "diverged" in msgs and "unfinished" in msgs and "corrupt line" in msgs
    assert sorted(runs_df["run"]) == ["sweep/n1", "sweep/n2", "sweep/nested/n3"]
    assert {
        "n_params",
        "tokens",
        "flops",
        "final_eval_loss",
        "model.d_model",
        "optim.lr",
        "train.steps",
    } <= set(runs_df.columns)
    assert runs_df["model.d_model"].tolist() == [64, 64, 64]
    assert json.loads(runs_df["optim.betas"].iloc[0]) == [0.9, 0.95]
    assert set(curves["run"]) == set(runs_df["run"])
    n2 = curves[curves.run == "sweep/n2"]
    assert n2["step"].tolist() == [10, 20, 30, 40, 50]  # corrupt lines skipped, the rest kept
    assert n2["eval_loss"].notna().sum() == 2


def test_cache_is_used_and_invalidated(sweep, tmp_path):
    cache = tmp_path / "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, _ = runs.load(sweep / "n1", cache_dir=cache)
        assert len(list(cache.glob("*.parquet"))) == 2
        # A cached table is returned when the files are unchanged...
        (next(cache.glob("*.run.parquet"))).stat()
        again, _ = runs.load(sweep / "n1", cache_dir=cache)
        assert again.to_dict("records") == first.to_dict("records")
        # ...and re-parsed when they change.
        summary = sweep / "n1" / "summary.json"
        s = json.loads(summary.read_text())
        s["final_eval_loss"] = 0.123
        summary.write_text(json.dumps(s) + " ")
        changed, _ = runs.load(sweep / "n1", cache_dir=cache)
        assert changed["final_eval_loss"].iloc[0] == 0.123


def test_runs_table_feeds_the_fit(tmp_path):
    from power_law import register

    from analysis import fit_law

    root = tmp_path / "s"
    for i, N in enumerate(np.geomspace(1e6, 1e8, 6)):
        make_run(root, f"r{i}", n_params=float(N))
    runs_df, _ = runs.load(root, cache_dir=False)
    runs_df["final_eval_loss"] = 1.5 + 40 * runs_df["n_params"] ** -0.3
    fit = fit_law(runs_df, register(), bootstrap=0)
    # a law registered with default_n_params="non_embedding" reads the non-embedding N that run
    # summaries carry
    assert fit.columns["N"] == "n_params_non_embedding" and fit.columns["loss"] == "final_eval_loss"
    assert fit.params["alpha"] == pytest.approx(0.3, rel=1e-3)


def test_run_dir_as_a_curve(sweep):
    c = load_curve(sweep / "n1")
    assert c.steps.tolist() == [20, 40]  # eval rows preferred when the run has evaluations
    assert c.loss[0] == pytest.approx(5.1 / 2)


def test_missing_paths_are_errors(tmp_path):
    with pytest.raises(AnalysisError, match="not found"):
        runs.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnalysisError, match="no run directories"):
        runs.load(tmp_path / "empty")


def _law_sweep(root):
    """16 completed runs whose final eval loss follows a known Chinchilla law exactly."""
    truth = dict(E=1.8, A=400.0, B=900.0, alpha=0.34, beta=0.30)
    for i, N in enumerate(np.geomspace(1e7, 1e9, 4)):
        for j, D in enumerate(np.geomspace(1e9, 1e11, 4)):
            d = make_run(root / f"C{j}", f"N{i}", n_params=float(N))
            s = json.loads((d / "summary.json").read_text())
            s.update(
                tokens=float(D),
                flops=6 * float(N) * float(D),
                final_eval_loss=truth["E"]
                + truth["A"] / N ** truth["alpha"]
                + truth["B"] / D ** truth["beta"],
            )
            (d / "summary.json").write_text(json.dumps(s))
    make_run(root / "C0", "diverged", status="diverged")
    return truth


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_collect_then_fit_needs_no_column_flags(tmp_path, capsys, suffix):
    """`python -m analysis collect SWEEP --out runs.csv` writes the table `fit runs.csv` reads as is."""
    import pandas as pd

    from analysis.cli import main

    truth = _law_sweep(tmp_path / "sweep")
    table = tmp_path / f"runs{suffix}"
    assert (
        main(
            [
                "collect",
                str(tmp_path / "sweep"),
                "--out",
                str(table),
                "--no-cache",
                "--curves",
                str(tmp_path / f"curves{suffix}"),
            ]
        )
        == 0
    )
    cap = capsys.readouterr()
    assert "diverged" in cap.err  # the skipped run is named on stderr
    df = pd.read_csv(table) if suffix == ".csv" else pd.read_parquet(table)
    assert list(df.columns[:4]) == ["N", "D", "C", "loss"] and len(df) == 16
    assert (df["N"] == df["n_params"]).all() and (df["loss"] == df["final_eval_loss"]).all()
    assert "model.d_model" in df.columns  # the flattened Hydra config rides along
    out = tmp_path / "fit.json"
    assert main(["fit", str(table), "--bootstrap", "0", "--json", str(out)]) == 0
    fit = json.loads(out.read_text())
    assert fit["columns"]["N"] == "N" and fit["n_points"] == 16
    for k in ("E", "alpha", "beta"):
        assert fit["params"][k] == pytest.approx(truth[k], rel=0.02), k


def test_collect_bad_output_suffix_is_one_line(sweep, tmp_path, capsys):
    from analysis.cli import main

    assert main(["collect", str(sweep), "--out", str(tmp_path / "runs.txt"), "--no-cache"]) == 2
    assert "must end in .csv or .parquet" in capsys.readouterr().err
    assert main(["collect", str(tmp_path / "nope"), "--out", str(tmp_path / "runs.csv")]) == 2
    assert "not found" in capsys.readouterr().err


def test_wsd_trunks_left_out_are_a_note_not_a_warning(tmp_path, capsys):
    """A WSD trunk is left out by design: `load` says so as a RunNote (a RunWarning subclass, so
    callers that catch warnings still see it), `collect` prints it as `note:`, and a skipped run
    stays a `warning:`."""
    from analysis.cli import main

    sweep = tmp_path / "sweep"
    for i, n in enumerate((1e6, 2e6)):
        make_run(sweep, f"r{i}", n_params=n)
    trunk = make_run(sweep, "trunk0", n_params=1e6)
    s = json.loads((trunk / "summary.json").read_text())
    (trunk / "summary.json").write_text(json.dumps({**s, "role": "trunk"}))
    make_run(sweep, "dead", status="failed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df, _ = runs.load(sweep, cache_dir=False)
    kinds = {w.category.__name__ for w in caught}
    assert {"RunNote", "RunWarning"} <= kinds and "trunk0" not in set(df["run"])
    assert main(["collect", str(sweep), "--out", str(tmp_path / "runs.csv"), "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert "note: left out 1 WSD trunk run(s)" in err
    assert "warning: skipped 1 run(s) that did not complete" in err and "warning: left out" not in err
