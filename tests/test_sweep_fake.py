"""The sweeper's idempotence and recovery, end to end through Hydra, with a fast fake trainer.

tests/sweep_fake_app.py has the training core's on-disk contract (metrics.jsonl, summary.json,
checkpoints, resume) but no JAX, so these tests exercise the real `-m +sweep=isoflop` path,
relaunches, SIGKILL recovery and failure handling in seconds. The same behaviour with the real
trainer is covered by tests/test_sweep_e2e.py.
"""

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
APP = REPO / "tests" / "sweep_fake_app.py"
# a fixed ladder (d = 32 L, 16-wide heads, depths 1-4) and budgets that give 2 + 3 trainable runs
# (the rest too short), independent of the preset's defaults
BUDGETS = "sweep.budgets=[1e10,3e10]"
LADDER = [
    "sweep.ladder.head_dim=16",
    "sweep.ladder.aspect_ratio=32",
    "sweep.ladder.depths=[1,2,3,4]",
    "train.batch_size=8",
]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    e.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return e


def cmd(sweep_dir, *extra):
    return [
        sys.executable,
        str(APP),
        "-m",
        "+sweep=isoflop",
        BUDGETS,
        *LADDER,
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.searchpath=[file://{REPO}/conf]",
        *extra,
    ]


def sweep(sweep_dir, *extra, check=True):
    p = subprocess.run(
        cmd(sweep_dir, *extra), env=env(), cwd=REPO, capture_output=True, text=True, timeout=180
    )
    if check:
        assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
    return p


def run_dirs(sweep_dir):
    return sorted(p.parent for p in pathlib.Path(sweep_dir).glob("*/.hydra"))


def snapshot(sweep_dir):
    """(size, mtime_ns) of every file in every run dir."""
    out = {}
    for d in run_dirs(sweep_dir):
        for f in d.rglob("*"):
            if f.is_file():
                st = f.stat()
                out[str(f.relative_to(sweep_dir))] = (st.st_size, st.st_mtime_ns)
    return out


def steps_trained(run_dir):
    f = pathlib.Path(run_dir) / "steps.log"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def plan_of(sweep_dir):
    return json.loads((pathlib.Path(sweep_dir) / "sweep_plan.json").read_text())["runs"]


def test_sweep_then_relaunch_trains_nothing_and_touches_nothing(tmp_path):
    sw = tmp_path / "sw"
    first = sweep(sw)
    dirs = run_dirs(sw)
    assert len(dirs) == 5, first.stdout[-3000:]
    for d in dirs:
        s = json.loads((d / "summary.json").read_text())
        assert s["status"] == "completed"
        cfg = (d / ".hydra" / "config.yaml").read_text()
        assert "budget:" in cfg
        assert sorted(steps_trained(d)) == list(range(1, max(steps_trained(d)) + 1))
    skipped = [r for r in plan_of(sw) if r["action"] == "skip"]
    assert len(skipped) == 3 and all("sweep.min_steps=20" in r["reason"] for r in skipped)
    before = snapshot(sw)
    second = sweep(sw)
    assert snapshot(sw) == before, "relaunch modified a finished run"
    assert all(r["action"] in ("reuse", "skip") for r in plan_of(sw))
    assert "sweep done: 8 planned, 5 reused, 0 trained, 3 skipped, 0 failed" in second.stderr + second.stdout


def test_other_overrides_compose_with_the_plan(tmp_path):
    sw = tmp_path / "sw"
    sweep(sw, "optim.lr=1e-3,3e-3", "train.batch_size=4")
    dirs = run_dirs(sw)
    assert len(dirs) == 2 * 6  # batch 4 halves tokens/step, so one more shape clears min_steps
    lrs = sorted(
        {
            float(
                next(
                    l for l in (d / ".hydra" / "overrides.yaml").read_text().splitlines() if "optim.lr=" in l
                ).split("=")[1]
            )
            for d in dirs
        }
    )
    assert lrs == [1e-3, 3e-3]
    assert len({d.name.rsplit("_", 1)[1] for d in dirs}) == 12  # distinct run ids


def test_sigkill_midway_then_relaunch_reuses_every_finished_run(tmp_path):
    sw = tmp_path / "sw"
    p = subprocess.Popen(
        cmd(sw, "fake.step_sleep=0.01", "train.ckpt_every=50"),  # the preset saves by time
        env=env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            done = [d for d in run_dirs(sw) if (d / "summary.json").exists()]
            started = [d for d in run_dirs(sw) if (d / "ckpt.json").exists() and d not in done]
            if len(done) >= 2 and started:
                break
            time.sleep(0.05)
        else:
            pytest.fail("sweep did not get going")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    interrupted = started[0]
    ckpt_step = json.loads((interrupted / "ckpt.json").read_text())["step"]
    finished = {d: steps_trained(d) for d in done}
    before = {k: v for k, v in snapshot(sw).items() if any(k.startswith(d.name) for d in done)}
    sweep(sw, "fake.step_sleep=0.01")  # the same command again
    after = snapshot(sw)
    assert all(after[k] == v for k, v in before.items()), "a finished run was touched"
    assert {d: steps_trained(d) for d in done} == finished
    assert len(run_dirs(sw)) == 5 and all(
        json.loads((d / "summary.json").read_text())["status"] == "completed" for d in run_dirs(sw)
    )
    steps = steps_trained(interrupted)
    total = max(steps)
    # resumed from the checkpoint: steps up to the checkpoint were trained exactly once
    assert all(steps.count(s) == 1 for s in range(1, ckpt_step + 1))
    assert sorted(set(steps)) == list(range(1, total + 1))
    actions = {r["run_dir"]: r for r in plan_of(sw) if r.get("run_dir")}
    assert actions[interrupted.name]["status_before"] == "interrupted"
    assert all(actions[d.name]["action"] == "reuse" for d in done)


def test_diverged_runs_are_kept_unless_rerun_failed(tmp_path):
    sw = tmp_path / "sw"
    out = sweep(sw, "fake.diverge_d_model=64")
    assert "3 trained, 3 skipped, 2 failed (2 diverged)" in out.stderr + out.stdout
    div = [d for d in run_dirs(sw) if json.loads((d / "summary.json").read_text())["status"] == "diverged"]
    assert len(div) == 2  # the d=64 rung at both budgets
    n = {d: len(steps_trained(d)) for d in div}
    sweep(sw, "fake.diverge_d_model=64")
    assert {d: len(steps_trained(d)) for d in div} == n
    sweep(sw, "fake.diverge_d_model=64", "sweep.rerun_failed=true")
    assert all(len(steps_trained(d)) > n[d] for d in div)


def test_failed_run_fails_the_sweep_with_one_line(tmp_path):
    sw = tmp_path / "sw"
    p = sweep(sw, "fake.crash_d_model=32", check=False)
    assert p.returncode != 0
    assert "2 of the 5 runs to train failed" in p.stderr and "fake crash" in p.stderr
    assert "Traceback" not in p.stderr
    # the other runs completed anyway
    ok = [d for d in run_dirs(sw) if json.loads((d / "summary.json").read_text())["status"] == "completed"]
    assert len(ok) == 3


def test_bad_sweep_config_and_busy_dir_give_clear_errors(tmp_path):
    sw = tmp_path / "sw"
    p = subprocess.run(
        cmd(sw, "sweep.ladder.depths=[]"), env=env(), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode != 0 and "sweep.ladder.depths is empty" in p.stderr and "Traceback" not in p.stderr
    sw.mkdir(exist_ok=True)
    with open(sw / ".sweep.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        p = sweep(sw, check=False)
    assert p.returncode != 0 and "in use by another running sweep" in p.stderr and "Traceback" not in p.stderr


def test_hparams_probe_fits_the_laws_then_trains_every_other_budget_at_them(tmp_path):
    """sweep.hparams=probe: the LR probe's budgets are trained at 3 learning rates, the laws are
    fitted (<sweep dir>/hparams.json), and the other budget's runs get the law's learning rate. The
    fake loss has an exactly quadratic penalty in ln(lr) around lr*(N) = 3e-3 (N / 1e5)^-0.2, so
    the law is exact and the planned learning rates are lr*(N) (4 significant digits)."""
    sw = tmp_path / "sw"
    c = [a for a in cmd(sw) if a != BUDGETS] + [
        "sweep.budgets=[1e10,3e10,1e11]",
        "sweep.lr_probe={lrs:[1e-3,9e-3],budgets:[1e10,3e10]}",
        "sweep.hparams=probe",
        "fake.lr_penalty=0.05",
    ]
    first = subprocess.run(c, env=env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:] + first.stdout[-2000:]
    hp = json.loads((sw / "hparams.json").read_text())
    assert hp["law_form"]["optim.lr"] in ("N", "N_D", "C")
    assert all(not r["edge"] for r in hp["rungs"]) and len(hp["rungs"]) == 5  # 2 + 3 probed rungs
    plan = plan_of(sw)
    late = [r for r in plan if r["budget"] == 1e11 and r["action"] != "skip"]
    early = [r for r in plan if r["budget"] in (1e10, 3e10) and r["action"] != "skip"]
    assert len(early) == 3 * 5 and len(late) >= 3
    for r in late:
        lr = float(next(o for o in r["overrides"] if o.startswith("optim.lr=")).split("=")[1])
        assert lr == pytest.approx(3e-3 * (r["n_params"] / 1e5) ** -0.2, rel=2e-3)
    before = snapshot(sw)
    second = subprocess.run(c, env=env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert (
        snapshot(sw) == before
        and f"{len(early) + len(late)} reused, 0 trained" in second.stdout + second.stderr
    )
