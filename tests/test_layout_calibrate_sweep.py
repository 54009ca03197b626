"""Measure -> calibrate -> plan: `layout-eval --calibrate SWEEP_DIR` fits the cost model's
efficiency constants to a trainer sweep's own runs, and `plan --efficiency` plans with them.

One real run (8 simulated CPU devices, data 2 x fsdp 2 x tensor 2) checks that a run directory
maps back to the layout it ran (`run_layout`). The calibration itself is checked on copies of that
run with other meshes and batch sizes whose throughputs are what the cost model predicts under
known "true" constants: the fit must recover step times the default constants miss.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from analysis.cli import main as analysis_main
from models.base.rundir import RunSummary
from sharding.costmodel import DEFAULT_EFFICIENCY, estimate_step, load_hardware
from sharding.costmodel.runs import TRAINER_PRECISION, read_run, run_layout

REPO = pathlib.Path(__file__).resolve().parents[1]
ENV = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="--xla_force_host_platform_device_count=8",
    PYTHONPATH=str(REPO),
)
RUN = [
    "model.d_model=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.vocab_size=256",
    "model.seq_len=32",
    "sharding.data=2",
    "sharding.fsdp=2",
    "sharding.tensor=2",
    "train.batch_size=8",
    "train.steps=3",
    "train.eval_every=0",
    "train.eval_tokens=512",
    "train.ckpt_every=0",
]
CPU_YAML = {
    "name": "cpu-sim",
    "peak_flops": 2.0e10,
    "hbm_bytes": 24.0e9,
    "hbm_bw": 1.0e10,
    "devices_per_node": 8,
    "intra_node_bw": 5.0e9,
    "inter_node_bw": 1.0e9,
    "device_kinds": ["cpu-sim-test"],
}
# the "true" constants the synthetic runs follow (far from the A100 defaults)
TRUE = DEFAULT_EFFICIENCY.replace(gemm_eff_max=0.35, layer_overhead_s=2e-4, link_eff=0.6)
VARIANTS = [  # (data, fsdp, tensor, batch_size, micro_batch_size)
    (8, 1, 1, 16, None),
    (4, 1, 2, 16, None),
    (2, 1, 4, 16, None),
    (1, 8, 1, 16, None),
    (2, 2, 2, 32, None),
    (4, 2, 1, 32, 16),
    (1, 2, 4, 8, None),
]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep") / "real"
    r = subprocess.run(
        [sys.executable, "-m", "experiments.train", *RUN, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return run_dir


@pytest.fixture()
def hw_yaml(tmp_path):
    path = tmp_path / "cpu-sim.yaml"
    path.write_text(yaml.safe_dump(CPU_YAML))
    return path


def test_run_layout_is_the_layout_the_run_ran(real_run):
    summary, config = read_run(real_run)
    shape, layout, act_bytes = run_layout(summary, config)
    assert (shape.d_model, shape.n_layers, shape.seq_len, shape.vocab_size) == (64, 2, 32, 256)
    assert shape.n_params == summary.n_params  # the trainer's d_ff, not the Llama rule
    assert (layout.dp, layout.tp, layout.pp, layout.cp) == (4, 2, 1, 1)
    assert (layout.zero_stage, layout.zero_group) == (3, 2)  # fsdp 2 within data 2: hybrid
    assert (layout.micro_batch, layout.global_batch, layout.grad_accum) == (2, 8, 1)
    assert act_bytes == 4 and layout.gspmd_pipeline and not layout.fused_projections


def _make_sweep(real_run: pathlib.Path, root: pathlib.Path, hw) -> list[float]:
    """Copies of the real run with other layouts and the throughput TRUE predicts for them."""
    times = []
    for i, (data, fsdp, tensor, batch, micro) in enumerate(VARIANTS):
        d = root / f"run{i}"
        shutil.copytree(real_run, d)
        summary = json.loads((d / "summary.json").read_text())
        cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
        cfg["sharding"].update(data=data, fsdp=fsdp, tensor=tensor)
        cfg["train"].update(batch_size=batch, micro_batch_size=micro)
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
        summary["mesh"].update(data=data, fsdp=fsdp, tensor=tensor, device_kind="cpu-sim-test")
        summary["tokens_per_step"] = batch * 32
        config = {"train.batch_size": batch, "train.micro_batch_size": micro}
        shape, layout, act = run_layout(RunSummary.from_json(summary), config)
        prec = TRAINER_PRECISION.__class__(**{**TRAINER_PRECISION.__dict__, "act_bytes": act})
        t = estimate_step(shape, layout, hw, prec, TRUE).step_time_s
        summary["tokens_per_s"] = batch * 32 / t
        (d / "summary.json").write_text(json.dumps(summary))
        times.append(t)
    oom = root / "oom"  # a run that failed out of memory is an OOM label, not a timing
    shutil.copytree(real_run, oom)
    s = json.loads((oom / "summary.json").read_text())
    s.update(status="failed", error="XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory", tokens_per_s=None)
    (oom / "summary.json").write_text(json.dumps(s))
    return times


def _cli(*argv: str) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `python -m analysis ARGV`."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = analysis_main(list(argv))
    return rc, buf.getvalue()


def test_calibrate_sweep_dir_recovers_the_runs_step_times(real_run, tmp_path, hw_yaml):
    sweep = tmp_path / "sweep"
    times = _make_sweep(real_run, sweep, load_hardware(hw_yaml))
    rc, out = _cli(
        "layout-eval",
        "--calibrate",
        str(sweep),
        "--hardware",
        str(hw_yaml),
        "--json",
        str(tmp_path / "eval.json"),
    )
    assert rc == 0, out
    fitted = json.loads((sweep / "efficiency.json").read_text())
    assert fitted["n_runs"] == len(VARIANTS) + 1
    assert fitted["leave_one_out_median_abs_step_error"] < 0.10  # each run from the others' fit
    assert fitted["scores"]["median_abs_mfu_error"] < 0.25 * fitted["scores_before"]["median_abs_mfu_error"]
    rows = json.loads((tmp_path / "eval.json").read_text())["rows"]
    timed = [r for r in rows if not r["oom"]]
    assert len(timed) == len(VARIANTS) and sum(r["oom"] for r in rows) == 1
    by_time = sorted(times)
    for r in timed:
        assert abs(r["pred_step_time_s"] / r["measured_step_time_s"] - 1) <= 0.10, r
    assert sorted(r["measured_step_time_s"] for r in timed) == pytest.approx(by_time)
    assert "--efficiency" in out and str(sweep / "efficiency.json") in out

    # plan with the user's constants: the same request now predicts the user's speed
    args = [
        "plan",
        "--budget",
        "1e15",
        "--hardware",
        str(hw_yaml),
        "--gpus",
        "8",
        "--seq-len",
        "32",
        "--vocab",
        "256",
        "--batch-tokens",
        "512",
    ]
    rc, _ = _cli(*args, "--json", str(tmp_path / "default.json"))
    rc2, _ = _cli(
        *args, "--efficiency", str(sweep / "efficiency.json"), "--json", str(tmp_path / "mine.json")
    )
    assert rc == rc2 == 0
    default = json.loads((tmp_path / "default.json").read_text())["best"]
    mine = json.loads((tmp_path / "mine.json").read_text())["best"]
    assert mine["step_time_s"] != pytest.approx(default["step_time_s"], rel=0.05)


def test_calibrate_sweep_errors_are_one_line(real_run, tmp_path, hw_yaml):
    few = tmp_path / "few"
    shutil.copytree(real_run, few / "only")
    cases = [
        (["layout-eval", "--calibrate", str(few), "--hardware", str(hw_yaml)], "needs >= 3"),
        (["layout-eval", "--calibrate", str(few)], "--hardware"),  # CPU: not in the catalogue
        # a CSV next to a sweep is predicted with the sweep's fit; one that is missing is one line
        (
            ["layout-eval", str(tmp_path / "x.csv"), "--calibrate", str(few), "--hardware", str(hw_yaml)],
            "needs >= 3",
        ),
        (["layout-eval"], "--calibrate MEASURED.csv|SWEEP_DIR"),
        (
            [
                "plan",
                "--budget",
                "1e15",
                "--hardware",
                "a100",
                "--gpus",
                "8",
                "--efficiency",
                str(tmp_path / "missing.json"),
            ],
            "efficiency file not found",
        ),
    ]
    for argv, needle in cases:
        rc, out = _cli(*argv)
        assert rc == 2 and needle in out and len(out.strip().splitlines()) == 1, (argv, out)
