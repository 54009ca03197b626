"""The real thing: `python -m experiments.train -m +sweep=isoflop` with the training core.

A tiny IsoFLOP sweep (2 budgets x 3 shapes, a few dozen steps each) trains end to end; the same
command again performs zero training steps and touches no finished run (the report on real runs
is exercised by tests/test_demo.py). The parallel launcher's per-run CPU limits are measured on real JAX runs.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = [
    "sweep.budgets=[3e9,6e9]",
    "sweep.ladder.depths=[1,2,3]",
    "sweep.min_steps=5",
    "train.batch_size=8",
    "model.seq_len=32",
    "train.eval_tokens=1024",
    "train.eval_every=0",
    "train.progress_every_s=60",
]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    e.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XLA_FLAGS="")
    return e


def sweep(sw, *extra):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            "-m",
            "+sweep=isoflop",
            *TINY,
            *extra,
            f"hydra.sweep.dir={sw}",
        ],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p.stdout + p.stderr


def metrics_state(sw):
    return {
        str(f): (f.stat().st_size, f.stat().st_mtime_ns)
        for f in sorted(pathlib.Path(sw).rglob("metrics.jsonl"))
    }


@pytest.mark.slow
def test_tiny_isoflop_sweep_then_relaunch_trains_nothing(tmp_path):
    sw = tmp_path / "sw"
    out = sweep(sw)
    summaries = [json.loads(p.read_text()) for p in sw.glob("*/summary.json")]
    assert len(summaries) == 6 and all(s["status"] == "completed" for s in summaries), out[-2000:]
    plan = json.loads((sw / "sweep_plan.json").read_text())["runs"]
    for r in plan:  # each run's compute is its budget, to within rounding to whole steps
        s = json.loads((sw / r["run_dir"] / "summary.json").read_text())
        assert s["tokens"] == r["tokens"] and abs(s["flops"] / r["budget"] - 1) < 0.06
    before = metrics_state(sw)
    out2 = sweep(sw)
    assert metrics_state(sw) == before, "relaunch touched a finished run"
    assert (
        "6 reused, 0 trained" in out2 and "step " not in out2.split("sweep plan")[-1].split("sweep done")[0]
    )


@pytest.mark.slow
def test_parallel_launcher_limits_real_jax_runs(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    sw = tmp_path / "sw"
    sweep(
        sw,
        "sweep.budgets=[6e9]",
        "sweep.ladder.depths=[2,3]",
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=2",
    )
    recs = [json.loads(l) for f in sw.glob("*/launches.jsonl") for l in f.read_text().splitlines()]
    assert len(recs) == 2
    a, b = recs
    assert a["start"] < b["end"] and b["start"] < a["end"], "runs were not concurrent"
    assert a["cpus"] != b["cpus"] and len(a["cpus"]) == len(b["cpus"]) == 1
    for r in recs:  # XLA pinned to one core: the process never used more than one core's time
        assert r["cpu_s"] <= 1.15 * r["wall_s"], r
