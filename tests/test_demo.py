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
# Three shapes, the fewest around an inside optimum: the middle one (12k parameters) wins every
# budget by >= 0.08 nats (measured with a fourth, 26k, between it and 49k: that one came within
# 0.01 of the middle at 8e10 and cost a trunk and two branch processes; each process of the
# sweep costs seconds of start-up and compile whatever it trains).
SHAPES = [
    "{n_layers:1,d_model:8,n_heads:1}",
    "{n_layers:1,d_model:16,n_heads:2}",
    "{n_layers:2,d_model:32,n_heads:4}",
]
# eval.tasks=[]: the preset's downstream tasks would cost each run a scorer compile (the report's
# downstream section is tested in tests/test_report_downstream.py)
SCALED = [
    "--bootstrap",
    "20",
    "--budget",
    "1e12",
    "sweep.budgets=[2e10,4e10,8e10]",
    f"sweep.shapes=[{','.join(SHAPES)}]",
    "sweep.min_steps=50",
    "sweep.lr_probe=null",
    "sweep.hparams=null",  # the probe -> law -> sweep path: tests/test_sweep_fake.py
    "eval.tasks=[]",
    "train.eval_every=0",
    "train.eval_tokens=4096",
]


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
def test_demo_killed_midway_relaunched_reuses_runs_and_teaches_a_law(tmp_path):
    """One scaled-down demo: SIGKILLed once two runs finished, relaunched, it reuses them; its
    report has every IsoFLOP minimum inside the ladder and leads with the answer."""
    out = tmp_path / "demo"
    sw = out / "sweep"
    cmd = [sys.executable, "-m", "experiments.demo", "--out", str(out), *SCALED]
    # its own process group, so that the kill below takes the parallel launcher's worker processes
    # too, as a killed job's cgroup would: an orphaned worker still training a run would race the
    # relaunch for the same run directory (the demo's sweep child dies with it by PDEATHSIG, the
    # launcher's loky workers do not)
    p = subprocess.Popen(
        cmd, env=env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.time() + 400
        while time.time() < deadline and len(finished(sw)) < 2:
            if p.poll() is not None:
                pytest.fail(f"demo ended early with {p.returncode}")
            time.sleep(0.2)
        assert len(finished(sw)) >= 2, "no run finished in time"
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    wait_unlocked(sw)
    done_before = finished(sw)
    stamps = {d: (st.st_size, st.st_mtime_ns) for d, st in done_before.items()}
    r = subprocess.run(cmd, env=env(), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    plan = {
        x["run_dir"]: x for x in json.loads((sw / "sweep_plan.json").read_text())["runs"] if x.get("run_dir")
    }
    to_train = [x for x in plan.values() if x["action"] != "skip"]
    assert len(done_before) < len(to_train), "the sweep finished before it was killed; nothing was tested"
    after = finished(sw)
    assert len(after) == len(to_train)
    assert {d: (after[d].st_size, after[d].st_mtime_ns) for d in done_before} == stamps, (
        "a finished run was redone"
    )
    assert all(plan[d.name]["action"] == "reuse" for d in done_before)
    html = pathlib.Path(r.stdout.split("report: ")[1].split()[0])
    page = html.read_text() if html.is_file() else ""
    assert page.count("<img") + page.count('class="ifig"') >= 6  # PNGs and interactive figures
    assert page.index('id="verdict"') < page.index("<figure")  # the report answers first
    rep = json.loads((out / "report" / "report.json").read_text())
    by_budget: dict[float, list[tuple[float, float]]] = {}
    for run in rep["runs"]:
        if run["status"] == "completed":
            by_budget.setdefault(run["budget"], []).append((run["N"], run["loss"]))
    assert len(by_budget) == 3
    for budget, pts in by_budget.items():
        ns = sorted(n for n, _ in pts)
        best = min(pts, key=lambda p: p[1])[0]
        assert ns[0] < best < ns[-1], (budget, sorted(pts))  # a smaller and a larger shape trained
    assert not any("optimum may lie" in w for w in rep["warnings"]), rep["warnings"]
    hold = rep["holdout"]
    fitted = [x for x in to_train if x.get("role") != "trunk"]  # WSD trunks are not runs of the law
    assert len(fitted) == len(to_train) - len(SHAPES)  # one trunk per shape: the demo branches its budgets
    assert hold["held_out_budget"] == 8e10 and hold["n_points"] == len(SHAPES)
    assert rep["n_completed"] == len(fitted)
    assert all(len(p["interval"]) == 2 for p in hold["points"]) and 0 <= hold["coverage"] <= 1
    assert rep["law"]["allocation"]["budgets"][0]["C"] == 1e12  # N*/D* beyond the largest budget
    assert rep["law"]["allocation"]["budgets"][0]["N_opt_ci"]
    md = (out / "report" / "report.md").read_text()
    head, _, rest = md.partition("## Warnings")
    assert "law: L(N,D)" in head and "held-out check:" in head and "figures/isoflop.png" in head
    assert "## Held-out runs" in rest and "90% interval" in rest
    printed = r.stdout.splitlines()
    assert any(line.startswith("held-out check:") for line in printed)
