"""A real single-node SLURM cluster (tests/cluster/slurm_up.sh): sweeps through
`hydra/launcher=slurm` (submitit), relaunch, scancel, preemption with requeue, a 2-task
`jax.distributed` job, and the one-line errors.

The cluster is this machine: slurmctld + slurmd + slurmdbd (accounting, so `sacct` works) on
127.0.0.1 ports picked free at start, state in a temp dir, stopped after the module. Where the
packages cannot be installed the tests skip with the script's one line -- never under CI=true.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

from models.base.rundir import read_metrics

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
REPO = pathlib.Path(__file__).resolve().parents[1]
UP, DOWN = REPO / "tests" / "cluster" / "slurm_up.sh", REPO / "tests" / "cluster" / "slurm_down.sh"
EXIT_CANNOT_INSTALL = 3  # slurm_up.sh: the packages are missing and cannot be installed
TINY = [
    "sweep.min_steps=5",
    "train.batch_size=8",
    "model.seq_len=32",
    "train.eval_tokens=1024",
    "train.eval_every=0",
    "train.progress_every_s=60",
]
SWEEP = ["+sweep=isoflop", "sweep.budgets=[3e9,6e9]", "sweep.ladder.depths=[1,2]", *TINY]
# one job per run, one CPU each: two run at once on the 2-CPU node
SLURM = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.tasks_per_node=1",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.timeout_min=7",
    "hydra.launcher.signal_delay_s=30",
]
# one longer run (checkpoints every 100 steps) for scancel and preemption
LONG = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
    "train.steps=600",
    "train.ckpt_every=100",
    "train.eval_every=300",
    "train.keep_checkpoints=3",
]


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(module: str, extra: str) -> None:
    """Import `module` or skip with one line; under CI=true a missing engine package fails."""
    try:
        __import__(module)
    except ImportError:
        msg = f"{module} is not installed: pip install -e '.[{extra}]'"
        if on_ci():
            pytest.fail(msg + " (CI=true: cluster tests must not skip)", pytrace=False)
        pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """Environment of a running single-node cluster (SLURM_CONF), stopped after the module."""
    require("hydra_plugins.hydra_submitit_launcher", "slurm")
    state = tmp_path_factory.mktemp("slurm")
    ports = {
        k: str(_free_port()) for k in ("SLURMCTLD_PORT", "SLURMD_PORT", "SLURMDBD_PORT", "SLURM_DB_PORT")
    }
    p = subprocess.run(
        ["bash", str(UP), str(state)],
        env=dict(os.environ, **ports),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode == EXIT_CANNOT_INSTALL and not on_ci():
        pytest.skip(p.stdout.strip().splitlines()[-1])
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "SLURM_"))}
    env.update(SLURM_CONF=str(state / "slurm.conf"), JAX_PLATFORMS="cpu", XLA_FLAGS="", PYTHONPATH=str(REPO))
    yield env
    subprocess.run(["bash", str(DOWN), str(state)], timeout=60)


def _train(env, *args, check=True, timeout=300) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "experiments.train", "-m", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p


def _summaries(sw: pathlib.Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(sw.glob("*/summary.json"))}


def _sacct(env, *fields: str) -> list[list[str]]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-S", "now-1hour", "-o", ",".join(fields)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [line.split("|") for line in out.splitlines() if line]


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _job_ids(env, name: str = "train") -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%A"], env=env, capture_output=True, text=True
    ).stdout
    return out.split()


def test_sweep_through_slurm_equals_local_and_relaunch_trains_nothing(slurm, tmp_path):
    """4 runs as a job array with the launcher's sbatch parameters (read back with sacct),
    results equal to the local launcher's; the same command again submits nothing."""
    sw = tmp_path / "slurm"
    out = _train(slurm, *SWEEP, *SLURM, f"hydra.sweep.dir={sw}")
    got = _summaries(sw)
    assert len(got) == 4 and all(s["status"] == "completed" for s in got.values()), out.stdout[-2000:]

    def array_jobs():  # the newest job array's elements
        rows = [r for r in _sacct(slurm, "JobID", "JobName", "Partition", "Timelimit", "AllocCPUS", "State")]
        rows = [r for r in rows if "_" in r[0]]
        last = max((int(r[0].split("_")[0]) for r in rows), default=-1)
        return [r for r in rows if int(r[0].split("_")[0]) == last]

    # accounting trails the job's end by a moment
    _wait(lambda: [r[-1] for r in array_jobs()] == ["COMPLETED"] * 4, 30, "sacct to show 4 completed jobs")
    assert all(r[2:5] == ["debug", "00:07:00", "1"] for r in array_jobs()), array_jobs()
    local = _train({**slurm, "SLURM_CONF": "/nonexistent"}, *SWEEP, f"hydra.sweep.dir={tmp_path / 'local'}")
    ref = _summaries(tmp_path / "local")
    assert ref.keys() == got.keys(), local.stdout[-1000:]
    for k in ref:
        assert got[k]["final_eval_loss"] == pytest.approx(ref[k]["final_eval_loss"], rel=1e-5), k
    n_jobs = len(_sacct(slurm, "JobID"))
    again = _train(slurm, *SWEEP, *SLURM, f"hydra.sweep.dir={sw}")
    assert "4 reused, 0 trained" in again.stdout + again.stderr
    assert len(_sacct(slurm, "JobID")) == n_jobs, "the relaunch submitted jobs"


def _start_long(env, sw: pathlib.Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.train", "-m", *LONG, *SLURM, *extra, f"hydra.sweep.dir={sw}"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run_dir(sw: pathlib.Path) -> pathlib.Path:
    dirs = [p.parent for p in sw.glob("*/config.yaml")] or [
        p for p in sw.iterdir() if (p / "checkpoints").is_dir()
    ]
    return dirs[0]


@pytest.fixture(scope="module")
def uninterrupted(slurm, tmp_path_factory):
    """The LONG run without interruption (local launcher): what interrupted runs must end equal to."""
    sw = tmp_path_factory.mktemp("ref")
    _train({**slurm, "SLURM_CONF": "/nonexistent"}, *LONG, f"hydra.sweep.dir={sw}")
    (s,) = _summaries(sw).values()
    return s


def _checkpointed(sw: pathlib.Path) -> bool:
    return any(sw.glob("*/checkpoints/100"))


def test_scancel_mid_run_then_relaunch_resumes(slurm, tmp_path, uninterrupted):
    sw = tmp_path / "sw"
    proc = _start_long(slurm, sw)
    _wait(lambda: _checkpointed(sw) or proc.poll() is not None, 240, "the first checkpoint")
    subprocess.run(["scancel", *_job_ids(slurm)], env=slurm, check=True)
    proc.communicate(timeout=120)
    (s,) = _summaries(sw).values()
    assert s["status"] != "completed"
    again = _train(slurm, *LONG, *SLURM, f"hydra.sweep.dir={sw}")
    (s,) = _summaries(sw).values()
    assert s["status"] == "completed" and s.get("resumed_from_step", 0) >= 100, again.stdout[-1500:]
    assert s["final_eval_loss"] == pytest.approx(uninterrupted["final_eval_loss"], rel=1e-5)


def test_preemption_signal_checkpoints_and_submitit_requeues(slurm, tmp_path, uninterrupted):
    """submitit's own signal (USR2, what SLURM sends before the time limit or on preemption)
    mid-run: checkpoint, `preempted`, submitit requeues the job, the run ends equal to an
    uninterrupted one."""
    sw = tmp_path / "sw"
    proc = _start_long(slurm, sw)
    _wait(lambda: _checkpointed(sw) or proc.poll() is not None, 240, "the first checkpoint")
    (job,) = _job_ids(slurm)
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm, check=True)
    _wait(
        lambda: (
            any(s.get("status") == "preempted" for s in _summaries(sw).values()) or proc.poll() is not None
        ),
        120,
        "status preempted",
    )
    # slurmctld holds a requeued batch job before it is eligible again (BeginTime = requeue time
    # + a fixed delay, ~2 min in SLURM 22.05); lift the hold so the test does not wait it out
    jid = job.split("_")[0]

    def pending_hold() -> str:
        info = subprocess.run(
            ["scontrol", "show", "job", jid], env=slurm, capture_output=True, text=True
        ).stdout
        return info if "JobState=PENDING" in info else ""

    _wait(lambda: pending_hold() or proc.poll() is not None, 60, "the requeued job")
    if pending_hold():
        print(
            "requeued:",
            [f for f in pending_hold().split() if f.startswith(("Reason=", "Restarts=", "StartTime="))],
        )
        subprocess.run(["scontrol", "update", f"JobId={jid}", "StartTime=now"], env=slurm, check=True)
    out, _ = proc.communicate(timeout=240)

    def job_state() -> str:
        info = subprocess.run(
            ["scontrol", "show", "job", jid], env=slurm, capture_output=True, text=True
        ).stdout
        return next((f.split("=", 1)[1] for f in info.split() if f.startswith("JobState=")), "GONE")

    # submitit's watcher polls sacct; once in CI it read the job between its two attempts as FAILED
    # and ended the launcher early ("has not produced any output (state: FAILED)") while SLURM ran
    # the requeued attempt anyway. What is tested is SLURM + submitit's requeue resuming the run:
    # wait for that attempt to end, then check it.
    _wait(
        lambda: job_state() not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING"), 240, "the requeued job"
    )
    (s,) = _summaries(sw).values()
    assert s["status"] == "completed" and s.get("resumed_from_step", 0) >= 100, out[-2000:]
    restarts = subprocess.run(
        ["scontrol", "show", "job", job.split("_")[0]], env=slurm, capture_output=True, text=True
    ).stdout
    assert "Restarts=1" in restarts or "requeue" in out.lower(), restarts[-500:]
    steps = [r["step"] for r in read_metrics(_run_dir(sw) / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 600  # no step logged twice
    diff = abs(s["final_eval_loss"] - uninterrupted["final_eval_loss"]) / uninterrupted["final_eval_loss"]
    print(f"preempted + requeued vs uninterrupted: relative final-loss difference {diff:.2e}")
    assert diff <= 1e-5


def test_two_task_job_runs_one_jax_distributed_training(slurm, tmp_path, uninterrupted):
    """--ntasks=2: two processes form one jax.distributed run from SLURM's environment (gloo
    on 127.0.0.1) and end equal to the single-process run."""
    sw = tmp_path / "sw"
    _train(
        slurm,
        *LONG,
        *[a for a in SLURM if "tasks_per_node" not in a],
        "hydra.launcher.tasks_per_node=2",
        "sharding.data=2",
        f"hydra.sweep.dir={sw}",
        timeout=400,
    )
    (s,) = _summaries(sw).values()
    assert s["status"] == "completed" and s["mesh"]["processes"] == 2, s.get("mesh")
    assert s["final_eval_loss"] == pytest.approx(uninterrupted["final_eval_loss"], rel=1e-4)


def test_bad_cluster_input_is_one_line(slurm, tmp_path):
    p = _train(
        slurm,
        *SWEEP,
        *SLURM,
        "hydra.launcher.partition=nope",
        f"hydra.sweep.dir={tmp_path / 'a'}",
        check=False,
    )
    err = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode != 0 and "Traceback" not in p.stderr and "partition" in err[-1].lower(), err[-5:]
    assert err[-1].startswith("error: hydra/launcher=slurm: SLURM refused the jobs: sbatch: error:"), err[-1]
    no_sbatch = {
        **slurm,
        "PATH": os.pathsep.join(
            d for d in slurm["PATH"].split(os.pathsep) if not (pathlib.Path(d) / "sbatch").exists()
        ),
    }
    assert shutil.which("sbatch", path=no_sbatch["PATH"]) is None
    p = _train(no_sbatch, *SWEEP, *SLURM, f"hydra.sweep.dir={tmp_path / 'b'}", check=False)
    last = (p.stdout + p.stderr).strip().splitlines()[-1]
    assert p.returncode != 0 and "Traceback" not in p.stderr and "sbatch" in last, last
