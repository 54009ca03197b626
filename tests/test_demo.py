"""The main job (`python -m experiments.demo`), shrunk to seconds-long runs: killed with SIGKILL
mid-sweep and launched again, it completes, reusing every run that had finished, and ends by
printing the report path and the headline numbers including the held-out error."""

import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# eval.tasks=[]: the preset's downstream tasks would cost each run a scorer compile (the report's
# downstream section is tested in tests/test_report_downstream.py)
SMALL = ["--bootstrap", "50", "--budget", "1e11", "sweep.budgets=[3e9,6e9,1.2e10]", "sweep.ladder.depths=[1,2,3]",
         "sweep.min_steps=5", "train.batch_size=8", "model.seq_len=32", "train.eval_tokens=1024",
         "train.eval_every=0", "train.ckpt_every=10", "eval.tasks=[]"]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    e.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XLA_FLAGS="")
    return e


def finished(sw):
    out = {}
    for s in pathlib.Path(sw).glob("*/summary.json"):
        try:
            if json.loads(s.read_text()).get("status") == "completed":
                out[s.parent] = (s.parent / "metrics.jsonl").stat()
        except (OSError, ValueError):
            pass
    return out


def wait_unlocked(sw, timeout=60):
    """The sweep holds an flock on .sweep.lock; it is free once no process of the killed demo lives."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(pathlib.Path(sw) / ".sweep.lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError:
                time.sleep(0.2)
    pytest.fail("the killed demo's sweep is still running")


@pytest.mark.slow
def test_demo_killed_midway_then_relaunched_reuses_finished_runs(tmp_path):
    out = tmp_path / "demo"
    sw = out / "sweep"
    cmd = [sys.executable, "-m", "experiments.demo", "--out", str(out), *SMALL]
    p = subprocess.Popen(cmd, env=env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and len(finished(sw)) < 2:
            if p.poll() is not None:
                pytest.fail(f"demo ended early with {p.returncode}")
            time.sleep(0.2)
        assert len(finished(sw)) >= 2, "no run finished in time"
    finally:
        p.send_signal(signal.SIGKILL)  # only the demo: its sweep child must die with it
        p.wait()
    wait_unlocked(sw)
    done_before = finished(sw)
    stamps = {d: (st.st_size, st.st_mtime_ns) for d, st in done_before.items()}
    assert len(done_before) < 9, "the sweep finished before it was killed; nothing was tested"
    r = subprocess.run(cmd, env=env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    after = finished(sw)
    assert len(after) == 9
    assert {d: (after[d].st_size, after[d].st_mtime_ns) for d in done_before} == stamps, "a finished run was redone"
    plan = {x["run_dir"]: x for x in json.loads((sw / "sweep_plan.json").read_text())["runs"] if x.get("run_dir")}
    assert all(plan[d.name]["action"] == "reuse" for d in done_before)
    text = r.stdout
    assert "held-out check: fitted on C <= 6e+09" in text and "mean |error|" in text
    assert "law: L(N,D) =" in text and "at C = 1e+11 FLOPs: N* =" in text
    html = pathlib.Path(text.split("report: ")[1].split()[0])
    assert html.is_file() and html.read_text().count("<img") >= 6
    rep = json.loads((out / "report" / "report.json").read_text())
    assert rep["n_completed"] == 9 and rep["holdout"]["n_points"] == 3
