"""metrics.jsonl is strict JSON: a NaN or infinite metric is written as `null` and every reader
(the trainer's own `read_metrics`, the runs table, RL curves) reads it back as NaN."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.core import runs
from analysis.rl.curves import load_curve as load_rl_curve
from experiments.train.metrics import MetricsLog
from models.base.rundir import read_metrics


def strict_loads(line: str):
    """json.loads that refuses the NaN / Infinity extensions of Python's json module."""

    def refuse(const):
        raise ValueError(f"bare {const} in {line!r}")

    return json.loads(line, parse_constant=refuse)


def _write(path, records):
    log = MetricsLog(path)
    for r in records:
        log.write(r)
    log.close()


def test_nan_and_inf_are_written_as_null_and_read_back_as_nan(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write(
        path,
        [
            {"step": 1, "loss": 2.0, "mfu": float("nan"), "lr": np.float32(1e-3)},
            {"step": 2, "loss": float("inf"), "mfu": 0.25, "grad_norm": -math.inf},
        ],
    )
    lines = path.read_text().splitlines()
    rows = [strict_loads(line) for line in lines]  # every line is strict JSON
    assert rows[0]["mfu"] is None and rows[1]["loss"] is None and rows[1]["grad_norm"] is None
    assert rows[0]["lr"] == pytest.approx(1e-3)
    back = read_metrics(path)
    assert math.isnan(back[0]["mfu"]) and math.isnan(back[1]["loss"]) and math.isnan(back[1]["grad_norm"])
    assert back[0]["loss"] == 2.0 and back[1]["mfu"] == 0.25


def test_truncate_after_keeps_strict_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write(path, [{"step": s, "loss": float("nan") if s == 2 else 1.0 / s} for s in (1, 2, 3)])
    MetricsLog(path).truncate_after(2)
    assert [strict_loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]


def test_nan_metric_round_trips_through_the_runs_table(tmp_path):
    run = tmp_path / "sweep" / "r1"
    _write(
        run / "metrics.jsonl",
        [
            {"step": 1, "tokens": 100, "loss": 3.0, "mfu": float("nan")},
            {"step": 2, "tokens": 200, "loss": 2.5, "mfu": float("nan"), "eval_loss": float("nan")},
            {"step": 3, "tokens": 300, "loss": float("inf"), "mfu": 0.5, "eval_loss": 2.4},
        ],
    )
    (run / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "n_params": 1000,
                "tokens": 300,
                "flops": 1.8e6,
                "mfu": None,
                "final_eval_loss": 2.4,
            }
        )
    )
    curve = runs.metrics_frame(run)
    assert curve["mfu"].dtype.kind == "f" and curve["loss"].dtype.kind == "f"
    assert curve["mfu"].isna().tolist() == [True, True, False]
    assert curve["loss"].isna().tolist() == [False, False, True]
    assert curve["eval_loss"].isna().tolist() == [True, True, False]
    runs_df, curves_df = runs.load(tmp_path / "sweep", cache_dir=tmp_path / "cache")
    assert len(runs_df) == 1 and pd.isna(runs_df["mfu"].iloc[0])  # summary.json's null
    assert curves_df["mfu"].isna().sum() == 2 and curves_df["loss"].isna().sum() == 1
    _, cached = runs.load(tmp_path / "sweep", cache_dir=tmp_path / "cache")  # from the Parquet cache
    assert cached["mfu"].isna().sum() == 2 and cached["loss"].isna().sum() == 1


def test_rl_curve_reads_a_null_stderr_as_nan(tmp_path):
    run = tmp_path / "rl_run"
    _write(
        run / "metrics.jsonl",
        [
            {
                "step": s,
                "flops_rl": 1e6 * s,
                "pass_rate": 0.1 * s,
                "pass_rate_stderr": float("nan") if s == 1 else 0.01,
                "train_reward": None,
            }
            for s in (1, 2, 3)
        ],
    )
    for line in (run / "metrics.jsonl").read_text().splitlines():
        strict_loads(line)
    curve = load_rl_curve(run)
    assert np.isnan(curve.stderr).sum() == 1 and np.isfinite(curve.pass_rate).all()
