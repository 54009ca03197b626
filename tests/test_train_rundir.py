"""Single runs get a run directory named after their config (so the same command started again
resumes it), and the run directory holds a log of the console output."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import experiments.train.__main__  # noqa: F401 - registers ${scalelab.train_run:}
from experiments.rl.__main__ import run_name as rl_run_name  # registers ${scalelab.rl_run:}
from experiments.rundir import (
    UNRESOLVED_RUN_NAME,
    config_fingerprint,
    console_log,
    log_path,
    register_run_name,
    train_run_name,
)

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
]


def run_dir(config_name: str, *overrides: str) -> str:
    """hydra.run.dir as `python -m experiments.<...>` would resolve it for these overrides."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)
    return str(cfg.hydra.run.dir)


def test_train_run_dir_is_a_function_of_the_runs_fields():
    a = run_dir("config", "train.tokens=1e5")
    assert a == run_dir("config", "train.tokens=1e5")  # same command, same dir
    assert a.startswith("outputs/runs/d128l2-")
    assert run_dir("config", "train.tokens=2e5") != a  # another run
    assert run_dir("config", "model=small", "train.tokens=1e5") != a
    assert run_dir("config", "model=small").split("/")[-1].split("-")[0] != "d128l2"
    assert run_dir("config", "optim.lr=1e-2", "train.tokens=1e5") != a
    # Sharding and cadence do not make another run: the run resumes on another mesh.
    assert (
        run_dir(
            "config",
            "train.tokens=1e5",
            "sharding.fsdp=2",
            "train.eval_every=7",
            "train.ckpt_every=9",
            "train.progress_every_s=1",
        )
        == a
    )
    assert run_dir("config", "train.tokens=1e5", "hydra.run.dir=/tmp/x") == "/tmp/x"  # explicit wins


def test_train_run_dir_ends_with_the_summary_fingerprint():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=["model=small"])
    assert run_dir("config", "model=small").endswith("-" + config_fingerprint(cfg))
    assert train_run_name(cfg) == run_dir("config", "model=small").split("/")[-1]


def test_rl_run_dir_is_a_function_of_the_runs_fields():
    a = run_dir("rl", "rl.steps=10")
    assert a == run_dir("rl", "rl.steps=10") and a.startswith("outputs/rl/add-grpo-d64l2-")
    assert run_dir("rl", "rl.steps=20") != a
    assert run_dir("rl", "rl.steps=10", "rl.seed=1") != a
    assert (
        run_dir(
            "rl", "rl.steps=10", "rl.eval_every=5", "rl.ckpt_every=5", "rl.warm_start.cache_dir=/elsewhere"
        )
        == a
    )
    assert "-init-" in run_dir("rl", "rl.init=/some/run")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(config_name="rl", overrides=["rl.steps=10"])
    assert a == "outputs/rl/" + rl_run_name(cfg)


def test_an_unnameable_config_gets_a_placeholder():
    def boom(cfg):
        raise KeyError("model")

    register_run_name("scalelab.test_boom", boom)
    cfg = OmegaConf.create({"dir": "outputs/${scalelab.test_boom:}"})
    assert cfg.dir == f"outputs/{UNRESOLVED_RUN_NAME}"


def test_console_log_copies_stdout_stderr_and_logging_then_restores(tmp_path, capsys):
    out, err = sys.stdout, sys.stderr
    path = tmp_path / "r" / "train.log"
    with pytest.raises(SystemExit):
        with console_log(path):
            print("progress line")
            print("error: bad thing", file=sys.stderr)
            logging.getLogger("scalelab.test").warning("a logged warning")
            sys.exit(2)
    assert sys.stdout is out and sys.stderr is err
    text = path.read_text()
    assert "progress line\n" in text and "error: bad thing\n" in text and "a logged warning\n" in text
    print("after")  # no longer copied
    assert "after" not in path.read_text() and "progress line" in capsys.readouterr().out
    assert (
        log_path(
            tmp_path,
            "train",
            {"distributed": {"coordinator_address": "h:1", "num_processes": 2, "process_id": 1}},
        ).name
        == "train.1.log"
    )
    assert log_path(tmp_path, "train", {}).name == "train.log"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return subprocess.run(
        [sys.executable, "-m", "experiments.train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_same_command_again_resumes_in_the_same_dir_and_logs_to_train_log(tmp_path):
    args = [*TINY, "train.steps=4", "train.eval_every=2", "train.ckpt_every=2"]
    first = _cli(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-2000:]
    dirs = list((tmp_path / "outputs" / "runs").iterdir())
    assert len(dirs) == 1, dirs
    rd = dirs[0]
    log = (rd / "train.log").read_text()
    assert "step 4/4" in log and "completed: " in log and "eval" in log
    assert log.strip().splitlines() == first.stdout.strip().splitlines()
    summary = json.loads((rd / "summary.json").read_text())
    assert rd.name.endswith("-" + summary["config_fingerprint"])

    (rd / "summary.json").unlink()  # as if killed after its last checkpoint
    again = _cli(tmp_path, *args, "train.eval_every=4")  # cadence may change: same run
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from checkpoint at step 4/4" in again.stdout
    assert list((tmp_path / "outputs" / "runs").iterdir()) == [rd]
    done = _cli(tmp_path, *args)
    assert done.returncode == 0 and "already completed" in done.stdout
    log = (rd / "train.log").read_text()
    assert "resuming from checkpoint at step 4/4" in log and "already completed" in log

    bad = _cli(tmp_path, *TINY, "train.steps=-5")
    assert bad.returncode == 2
    bad_dirs = [d for d in (tmp_path / "outputs" / "runs").iterdir() if d != rd]
    assert len(bad_dirs) == 1
    assert (bad_dirs[0] / "train.log").read_text().strip().splitlines() == [
        "error: train.steps must be an integer >= 1 (got -5)"
    ]


def test_console_that_goes_away_does_not_fail_the_run(tmp_path):
    """A killed launcher closes the run's stdout pipe: writes must go on into train.log instead of
    raising BrokenPipeError (which ended runs `failed` and made a relaunch skip them)."""
    import io
    import sys

    from experiments.rundir import console_log

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    real = sys.stdout
    sys.stdout = ClosedPipe()
    try:
        with console_log(tmp_path / "train.log"):
            print("step 1")
            sys.stdout.flush()
            print("step 2")
    finally:
        sys.stdout = real
    assert (tmp_path / "train.log").read_text() == "step 1\nstep 2\n"
