"""RL end to end on a tiny model: a few steps, metrics/summary contents, FLOP counters, resume
after a failure from the last checkpoint (same result as an uninterrupted run), completed-run
skip, the weak-start refusal, and the Hydra command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.loop_core import ALREADY_COMPLETED
from experiments.rl import loop as rl_loop
from experiments.rl.warmstart import StartTooWeak
from models.base.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _cfg(cache: Path, **rl_over):
    rl = {
        "steps": 6,
        "prompts_per_step": 8,
        "group_size": 4,
        "eval_every": 2,
        "eval_samples": 2,
        "temperature": 1.0,
        "seed": 0,
        "init": None,
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
        "warm_start": {
            "target_pass_rate": 0.1,
            "max_steps": 400,
            "check_every": 20,
            "batch_size": 64,
            "lr": 3e-3,
            "warmup_steps": 5,
            "dev_size": 64,
            "seed": 0,
            "cache_dir": str(cache),
        },
        "start_check": {"min_pass_rate": 0.0, "max_zero_var_frac": 1.0, "probe_prompts": 16},
    }
    rl.update(rl_over)
    return {
        "model": {"vocab_size": 256, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "seq_len": 8},
        "optim": {"lr": 1e-3, "schedule": "constant", "weight_decay": 0.0, "clip": 1.0},
        "sharding": {"data": 1, "fsdp": 1, "tensor": 1},
        "rl": rl,
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warm_cache")


def _rows(d: Path):
    return [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines() if l.strip()]


@pytest.mark.slow
def test_rl_end_to_end_and_resume(tmp_path, cache, monkeypatch):
    a = tmp_path / "a"
    s = rl_loop.run(_cfg(cache), a)
    assert s.status == "completed" and s.steps_done == 6
    assert json.loads((a / "summary.json").read_text()) == s.as_dict()
    rows = _rows(a)
    assert [r["step"] for r in rows] == [0, 2, 4, 6]
    per_step = s.flops_per_step
    assert per_step["reference"] > 0 and per_step["old_policy"] > 0  # beta > 0, 2 epochs
    for r in rows:
        assert r["flops_rl"] == pytest.approx(r["step"] * per_step["total"])
        assert r["flops_sample"] + r["flops_train"] + r["flops_reference"] + r[
            "flops_old_policy"
        ] == pytest.approx(r["flops_rl"])
        assert r["flops_eval"] == pytest.approx((rows.index(r) + 1) * s.flops_per_eval)
        assert r["prompts_seen"] == 8 * r["step"]
        assert 0 <= r["pass_rate"] <= 1 and r["pass_rate_stderr"] >= 0
        assert set(r["pass_rate_by_difficulty"]) == {"1d"}
    for k in ("train_reward", "zero_var_frac", "kl", "entropy", "clip_frac", "wall_s"):
        assert rows[-1][k] is not None, k
    assert s.final_pass_rate == rows[-1]["pass_rate"] and s.n_params > 0

    # Same run, failing after its step-4 checkpoint; started again it resumes there.
    b = tmp_path / "b"
    from experiments.rl.tasks import Task

    orig = Task.train_batch

    def boom(self, seed, step, n):
        if step == 4:
            raise RuntimeError("simulated crash")
        return orig(self, seed, step, n)

    monkeypatch.setattr(Task, "train_batch", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        rl_loop.run(_cfg(cache), b)
    assert json.loads((b / "summary.json").read_text())["status"] == "failed"
    monkeypatch.setattr(Task, "train_batch", orig)
    s2 = rl_loop.run(_cfg(cache), b)
    assert s2.resumed_from_step == 4 and s2.completed
    rb = _rows(b)
    assert [r["step"] for r in rb] == [0, 2, 4, 6]
    for ra, rb_ in zip(rows, rb):
        for k in ("pass_rate", "flops_rl", "kl", "train_reward", "prompts_seen"):
            assert ra[k] == pytest.approx(rb_[k], abs=1e-6), (k, ra["step"])
    again = rl_loop.run(_cfg(cache), b)
    assert again.extra[ALREADY_COMPLETED] and again.final_pass_rate == s2.final_pass_rate
    # a completed run of another config is refused, as the trainer's is (the fingerprint check)
    with pytest.raises(
        ConfigError, match=r"already holds a completed run of another config \(rl.seed: 0 -> 1"
    ):
        rl_loop.run(_cfg(cache, seed=1), b)


@pytest.mark.slow
def test_weak_start_is_refused(tmp_path, cache):
    cfg = _cfg(cache, start_check={"min_pass_rate": 0.99, "max_zero_var_frac": 1.0, "probe_prompts": 16})
    with pytest.raises(StartTooWeak, match="start too weak"):
        rl_loop.run(cfg, tmp_path / "weak")


@pytest.mark.slow
def test_cli_runs_and_rejects_bad_config(tmp_path, cache):
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        SCALELAB_CACHE=str(tmp_path / "c"),
    )
    tiny = [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.d_ff=64",
        "rl.task.max_len=1",
        "rl.task.eval_size=64",
        "rl.eval_samples=2",
        "rl.prompts_per_step=8",
        "rl.group_size=4",
        "rl.warm_start.target_pass_rate=0.1",
        "rl.warm_start.dev_size=64",
        "rl.start_check.probe_prompts=16",
        f"rl.warm_start.cache_dir={cache}",
    ]
    run_dir = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.rl",
            "rl.steps=2",
            "rl.eval_every=1",
            *tiny,
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "completed" and (run_dir / ".hydra" / "config.yaml").exists()
    assert len(_rows(run_dir)) == 3
    log = (run_dir / "rl.log").read_text()  # the console output, kept in the run dir
    assert "step 2/2 | pass@1" in log and "completed: final held-out pass@1" in log
    assert log.strip().splitlines() == r.stdout.strip().splitlines()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.rl",
            *tiny,
            "rl.group_size=1",
            f"hydra.run.dir={tmp_path / 'bad'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "rl.group_size" in bad.stderr


@pytest.mark.parametrize("sharding", [{"pipeline": 2}, {"context": 2}, {"sequence_parallel": True}])
def test_rl_refuses_the_trainer_only_axes_in_one_line(tmp_path, sharding):
    """The RL loop has data/fsdp/tensor only: a pipeline, context or SP setting is refused, not ignored."""
    cfg = _cfg(tmp_path)
    cfg["sharding"].update(sharding)
    with pytest.raises(ConfigError, match="not implemented yet for RL runs"):
        rl_loop.resolve(cfg, n_devices=8)
