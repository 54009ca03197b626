"""Preemption and corrupt checkpoints: a SIGTERM'd training subprocess saves, says `preempted`,
exits EXIT_PREEMPTED and resumes to the uninterrupted result; the signal handler only sets a flag
and the previous handler (submitit's requeue) runs after the checkpoint; processes agree on the
stop step; a truncated newest checkpoint is skipped for the previous one with one warning line;
the SLURM launcher's checkpoint() resubmits the same job."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments import preemption
from experiments.preemption import PreemptionGuard
from experiments.rundir import EXIT_PREEMPTED
from experiments.train import loop as train_loop
from experiments.train.checkpoint import CheckpointError
from models.base.rundir import RunStatus, RunSummary, read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
    "sharding.data=1",
    "sharding.fsdp=1",
    "sharding.tensor=1",
]
# One config for every run here, so that one uninterrupted run is the reference of them all.
RUN = [*TINY, "train.steps=300", "train.ckpt_every=100", "train.eval_every=150", "train.keep_checkpoints=3"]


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def _env():
    return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", JAX_PLATFORMS="cpu")


def _summary(rd: Path) -> dict:
    return json.loads((rd / "summary.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted in-process run every interrupted one must end equal to (its checkpoint
    is also the RL tests' initial policy)."""
    rd = tmp_path_factory.mktemp("ref") / "run"
    return dict(train_loop.run(_cfg(*RUN), rd).as_dict(), run_dir=rd)  # the summary as on disk


def _signal_at(monkeypatch, step: int, sig: signal.Signals) -> None:
    """Send `sig` to this process while step `step` is being finished (mid-run, deterministic)."""
    orig = train_loop._finish_step

    def finish(loop, step_i, m, eval_params=None):
        if step_i == step:
            os.kill(os.getpid(), sig)
        return orig(loop, step_i, m, eval_params)

    monkeypatch.setattr(train_loop, "_finish_step", finish)


# ---- the guard --------------------------------------------------------------------------------------


def test_guard_only_sets_a_flag_then_restores_and_hands_over():
    calls = []

    def previous(signum, frame):
        calls.append(signum)

    old = signal.signal(signal.SIGUSR1, previous)
    try:
        with PreemptionGuard() as g:
            assert g.active and not g.should_stop()
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.01)
            assert g.should_stop() and g.signal_names() == ["SIGUSR1"]
            assert calls == []  # the previous handler waits for the checkpoint
        assert signal.getsignal(signal.SIGUSR1) is previous
        g.hand_over()
        assert calls == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)
    # Off the main thread Python allows no handlers: not preemptible, but no error either.
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("active", PreemptionGuard().__enter__().active))
    t.start()
    t.join()
    assert out == {"active": False}


def test_processes_agree_on_the_stop_step(tmp_path):
    """Two jax.distributed processes; only process 1 gets the flag at call 5. With lag 1 both see
    the combined flag at call 6 (never one without the other), with lag 0 both at call 5."""
    script = textwrap.dedent("""
        import sys, jax
        jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
        from experiments.preemption import StopVote
        out = []
        for lag in (1, 0):
            vote = StopVote(lag)
            out.append(next(k for k in range(20) if vote(int(sys.argv[2]) == 1 and k >= 5)))
        print("STOP", *out)
    """)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, f"127.0.0.1:{port}", str(i)],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    stops = [next((l.split()[1:] for l in o.splitlines() if l.startswith("STOP")), o[-800:]) for o in outs]
    assert stops == [["6", "5"], ["6", "5"]], stops


# ---- the trainer ------------------------------------------------------------------------------------


def test_sigterm_subprocess_saves_exits_and_resumes_to_the_uninterrupted_result(tmp_path, reference):
    """The issue's test: SIGTERM a training subprocess mid-run, start the same command again."""
    args = [sys.executable, "-m", "experiments.train", *RUN]
    rd = tmp_path / "pre"
    proc = subprocess.Popen(
        args + [f"hydra.run.dir={rd}"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (rd / "checkpoints" / "100").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    s = _summary(rd)
    assert proc.returncode == EXIT_PREEMPTED, err[-1500:]
    assert s["status"] == "preempted" and s["preempted_by"] == ["SIGTERM"]
    assert 100 <= s["steps_done"] < 300 and (rd / "checkpoints" / str(s["steps_done"])).is_dir()
    assert f"training preempted (SIGTERM) at step {s['steps_done']}, checkpoint saved" in err
    assert "Traceback" not in err

    resumed = subprocess.run(
        args + [f"hydra.run.dir={rd}"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    assert f"resuming from checkpoint at step {s['steps_done']}/300" in resumed.stdout
    a, b = reference, _summary(rd)
    assert b["status"] == "completed" and b["resumed_from_step"] == s["steps_done"]
    assert abs(a["final_eval_loss"] - b["final_eval_loss"]) <= 1e-5 * a["final_eval_loss"]
    assert [r["step"] for r in read_metrics(rd / "metrics.jsonl")] == list(range(1, 301))  # none twice


def test_previous_handler_requeues_only_after_checkpoint_and_summary(tmp_path, monkeypatch, reference):
    """Under submitit the handler the guard replaced (its SIGUSR2 requeue) must run after the
    checkpoint and the preempted summary exist; the resumed run ends bitwise where the reference
    does."""
    rd = tmp_path / "run"
    seen = []

    def submitit_like(signum, frame):
        seen.append(
            (
                signum,
                _summary(rd)["status"],
                sorted(int(p.name) for p in (rd / "checkpoints").iterdir() if p.name.isdigit()),
            )
        )

    old = signal.signal(signal.SIGUSR2, submitit_like)
    try:
        _signal_at(monkeypatch, 30, signal.SIGUSR2)
        s = train_loop.run(_cfg(*RUN), rd)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert s.status == "preempted" and s.steps_done == 32 and s.preempted_by == ["SIGUSR2"]
    assert seen == [(signal.SIGUSR2, "preempted", [32])]
    monkeypatch.undo()
    s2 = train_loop.run(_cfg(*RUN), rd)
    assert s2.status == "completed" and s2.resumed_from_step == 32
    assert s2.final_eval_loss == reference["final_eval_loss"]
    assert s2.final_train_loss == reference["final_train_loss"]


def test_cli_exit_code_and_multirun_contract(tmp_path):
    from experiments.rundir import run_guarded

    preempted = RunSummary.of(status=RunStatus.PREEMPTED, steps_done=7, preempted_by=["SIGUSR1"])
    for multirun in (False, True):
        with pytest.raises(SystemExit) as e:
            run_guarded(
                lambda c, d: preempted,
                {},
                tmp_path,
                multirun,
            )
        assert e.value.code == EXIT_PREEMPTED == 143


# ---- the RL loop ------------------------------------------------------------------------------------------


def _rl_cfg(init: Path) -> dict:
    """A tiny RL run (tests/test_rl_smoke.py's) from the policy in run directory `init`."""
    rl = {
        "steps": 6,
        "prompts_per_step": 8,
        "group_size": 4,
        "eval_every": 2,
        "eval_samples": 2,
        "temperature": 1.0,
        "seed": 0,
        "init": str(init),
        "ckpt_every": 2,
        "keep_checkpoints": 3,
        "progress_every_s": 0.0,
        "task": {"name": "add", "min_len": 1, "max_len": 1, "eval_size": 64, "eval_seed": 1, "train_pool": 0},
        "algo": {
            "name": "t",
            "advantage": "group",
            "loss": "ppo_clip",
            "aggregation": "token",
            "eps_low": 0.2,
            "eps_high": 0.28,
            "zero_variance_filter": True,
            "kl_beta": 0.05,
            "kl_estimator": "k3",
            "epochs": 2,
        },
        "start_check": {"min_pass_rate": 0.0, "max_zero_var_frac": 1.0, "probe_prompts": 16},
    }
    return {
        "optim": {"lr": 1e-3, "schedule": "constant", "weight_decay": 0.0, "clip": 1.0},
        "sharding": {"data": 1, "fsdp": 1, "tensor": 1},
        "rl": rl,
    }


def test_rl_loop_preempts_at_the_step_boundary_and_resumes(tmp_path, monkeypatch, reference):
    from experiments.rl import loop as rl_loop

    orig = rl_loop._rl_step

    def step(loop, i, key):
        if i == 2:  # SIGUSR1 during step 3 (0-based i = 2)
            os.kill(os.getpid(), signal.SIGUSR1)
        return orig(loop, i, key)

    rd = tmp_path / "rl"
    monkeypatch.setattr(rl_loop, "_rl_step", step)
    s = rl_loop.run(_rl_cfg(reference["run_dir"]), rd)
    monkeypatch.undo()
    assert s.status == "preempted" and s.steps_done == 3 and s.preempted_by == ["SIGUSR1"]
    assert (rd / "checkpoints" / "3").is_dir() and _summary(rd)["status"] == "preempted"
    s2 = rl_loop.run(_rl_cfg(reference["run_dir"]), rd)
    assert s2.status == "completed" and s2.resumed_from_step == 3 and s2.steps_done == 6
    assert s2.prompts_seen == 6 * 8
    assert [json.loads(l)["step"] for l in (rd / "metrics.jsonl").read_text().splitlines()] == [0, 2, 4, 6]


# ---- corrupt checkpoints --------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["every file", "largest array file"])
def test_truncated_newest_checkpoint_is_skipped_with_one_warning(
    tmp_path, monkeypatch, capfd, reference, damage
):
    rd = tmp_path / "run"
    _signal_at(monkeypatch, 113, signal.SIGTERM)  # stops after step 115: checkpoints 100, 115
    assert train_loop.run(_cfg(*RUN), rd).steps_done == 115
    monkeypatch.undo()
    files = sorted(
        (f for f in (rd / "checkpoints" / "115").rglob("*") if f.is_file()),
        key=lambda f: f.stat().st_size,
        reverse=True,
    )
    for f in files if damage == "every file" else files[:1]:  # a kill mid-save, a full disk
        f.write_bytes(b"")
    (rd / "summary.json").unlink()
    capfd.readouterr()
    s = train_loop.run(_cfg(*RUN), rd)
    out, err = capfd.readouterr()
    warnings = [l for l in out.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 1 and "checkpoint at step 115 unreadable" in warnings[0], out
    assert err.strip() == ""  # nothing else: no library tracebacks
    assert "resuming from step 100" in warnings[0]
    assert s.status == "completed" and s.resumed_from_step == 100
    assert s.final_eval_loss == reference["final_eval_loss"]
    assert (rd / "checkpoints.corrupt" / "115").is_dir()  # set aside, not deleted
    assert sorted(int(p.name) for p in (rd / "checkpoints").iterdir() if p.name.isdigit()) == [100, 200, 300]


def test_no_readable_checkpoint_is_an_error_not_a_restart(tmp_path, monkeypatch):
    rd = tmp_path / "run"
    _signal_at(monkeypatch, 3, signal.SIGTERM)
    assert train_loop.run(_cfg(*RUN), rd).steps_done == 5
    monkeypatch.undo()
    for f in (rd / "checkpoints").rglob("*"):
        if f.is_file():
            f.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no checkpoint under .* can be read \(step 5: "):
        train_loop.run(_cfg(*RUN), rd)
    assert _summary(rd)["status"] == "failed" and not (rd / "checkpoints.corrupt").exists()


# ---- SLURM requeue ---------------------------------------------------------------------------------------


def test_slurm_launcher_checkpoint_resubmits_the_same_job(tmp_path):
    """submitit calls the launcher's checkpoint() on its requeue signal: it must resubmit the same
    callable with the same job arguments (same overrides -> same run directory -> resume)."""
    pytest.importorskip("submitit")
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(
            "config",
            overrides=["hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path}"],
            return_hydra_config=True,
        )
    HydraConfig.instance().set_config(cfg)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=lambda c: None, config=cfg)
    job = (["model.n_layers=2"], "hydra.sweep.dir", 3, "job-3", {})
    delayed = launcher.checkpoint(*job)
    assert delayed.function is launcher and delayed.args == job and delayed.kwargs == {}
    assert cfg.hydra.launcher.additional_parameters.requeue is True
    assert preemption.PREEMPT_SIGNALS[-1] == signal.SIGUSR2  # submitit's default requeue signal
