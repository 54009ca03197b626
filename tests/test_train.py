"""The training entry point: records, resume after SIGKILL, completed-run skip, divergence,
gradient accumulation, schedules, and bad-config errors (all before compiling)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from experiments.loop_core import ALREADY_COMPLETED
from experiments.train.config import resolve_config
from experiments.train.loop import HostSchedule, run
from experiments.train.optimizer import OptimConfig, decay_mask, hyperparams, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.base.errors import ConfigError
from models.base.rundir import RunStatus, RunSummary, read_metrics
from models.config import ModelConfig
from models.transformer import init_params
from sharding.mesh import make_mesh

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
SUMMARY_KEYS = {
    "status",
    "n_params",
    "n_params_non_embedding",
    "tokens",
    "flops",
    "final_train_loss",
    "final_eval_loss",
    "tokens_per_s",
    "mfu",
    "peak_flops_per_device",
    "mesh",
    "corpus",
    "wall_time_s",
}
METRIC_KEYS = {"step", "tokens", "flops", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"}


def cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_default_config_is_small_and_valid():
    spec = resolve_config(cfg(), n_devices=1)
    assert spec.n_params < 1_000_000 and spec.total_tokens <= 300_000
    assert spec.mesh_shape == (1, 1, 1) and spec.model.vocab_size == 256


def test_run_writes_metrics_summary_checkpoints_and_skips_when_done(tmp_path, capsys):
    rd = tmp_path / "run"
    c = cfg(*TINY, "train.steps=6", "train.eval_every=3", "train.ckpt_every=3")
    s = run(c, rd)
    on_disk = json.loads((rd / "summary.json").read_text())
    assert s.status == "completed" and SUMMARY_KEYS <= set(on_disk) and on_disk == s.as_dict()
    # every key the trainer wrote before the summary was typed (the v0 fixture), nulls included
    assert set(json.loads((REPO / "tests" / "fixtures" / "rundir_v0" / "summary.json").read_text())) <= set(
        on_disk
    )
    assert on_disk["resumed_from_step"] is None and on_disk["task_metrics"] == {}
    assert s.tokens == 6 * 8 * 32 and s.flops == s.tokens * s.flops_per_token
    assert s.corpus["files"] > 100 and s.mesh["devices"] == 1 and s.peak_flops_per_device > 0
    recs = read_metrics(rd / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert all(METRIC_KEYS <= set(r) for r in recs)
    assert [r["step"] for r in recs if "eval_loss" in r] == [3, 6]
    assert recs[-1]["loss"] == s.final_train_loss and recs[-1]["eval_loss"] == s.final_eval_loss
    assert sorted(p.name for p in (rd / "checkpoints").iterdir() if p.name.isdigit()) == ["3", "6"]
    assert "step 6/6" in capsys.readouterr().out
    # The checkpoint loads back for analysis and reproduces the final eval loss.
    from experiments.train.checkpoint import load_params
    from experiments.train.corpus import DataConfig, eval_sampler, load_corpus
    from models.transformer import apply

    mc, graphdef, params = load_params(rd)
    ev = eval_sampler(load_corpus(DataConfig()).val, mc.seq_len, 8)
    losses = []
    for j in range(2):  # eval_tokens=512 -> 2 batches of 8 x 32
        b = ev.batch(j)
        logits = np.asarray(apply(graphdef, params, b[:, :-1]))
        logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        losses.append(np.mean(logz - np.take_along_axis(logits, b[:, 1:, None], -1)[..., 0]))
    assert np.mean(losses) == pytest.approx(s.final_eval_loss, rel=1e-5)
    mtime = (rd / "metrics.jsonl").stat().st_mtime_ns
    again = run(c, rd)
    assert again.extra[ALREADY_COMPLETED] and (rd / "metrics.jsonl").stat().st_mtime_ns == mtime
    assert again.completed and again.final_eval_loss == s.final_eval_loss  # the summary on disk
    with pytest.raises(ConfigError, match="another config"):
        run(cfg(*TINY, "train.steps=7"), rd)


def test_divergence_stops_with_status_and_keeps_metrics(tmp_path):
    rd = tmp_path / "div"
    s = run(cfg(*TINY, "train.steps=5", "train.loss_ceiling=1.0"), rd)
    assert s.run_status is RunStatus.DIVERGED
    recs = read_metrics(rd / "metrics.jsonl")
    assert len(recs) == 1 and recs[0]["loss"] > 1.0
    assert json.loads((rd / "summary.json").read_text())["status"] == "diverged"


def test_grad_accumulation_equals_big_batch():
    mc = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, seq_len=16)
    oc = OptimConfig(lr=1e-3, eps=1e-3)
    tx = make_optimizer(oc, make_schedule(oc, 10, 0))
    mesh = make_mesh((1, 1, 1))
    batch = np.asarray(jax.random.randint(jax.random.key(0), (8, 17), 0, 64))
    out = []
    for n_micro in (1, 4):
        ts = build_train_setup(mc, tx, mesh, n_micro=n_micro, donate=False)
        params, opt = ts.init(0)
        out.append(jax.device_get(ts.train_step(params, opt, batch.reshape(n_micro, 8 // n_micro, 17))))
    (p1, _, m1), (p4, _, m4) = out
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-6)
    np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-7), p1, p4)


def test_schedules_and_decay_mask():
    oc = OptimConfig(lr=1.0, min_lr_ratio=0.1)
    cos = make_schedule(oc, 100, 10)
    assert float(cos(0)) == pytest.approx(0.1) and float(cos(9)) == pytest.approx(1.0)
    assert float(cos(99)) == pytest.approx(0.1, abs=1e-3)
    wsd = make_schedule(OptimConfig(lr=1.0, schedule="wsd", decay_fraction=0.2, min_lr_ratio=0.0), 100, 10)
    assert float(wsd(50)) == 1.0 and float(wsd(79)) == 1.0 and float(wsd(90)) == pytest.approx(0.5, abs=0.06)
    lin = make_schedule(OptimConfig(lr=1.0, schedule="linear", min_lr_ratio=0.0), 100, 0)
    assert float(lin(50)) == pytest.approx(0.5, abs=0.02)
    assert float(make_schedule(OptimConfig(lr=2.0, schedule="constant"), 100, 0)(77)) == 2.0
    params = jax.eval_shape(
        lambda: init_params(ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, seq_len=8), 0)[1]
    )
    mask = decay_mask(params, OptimConfig())
    assert mask["block_0"]["mlp"]["w_up_DxF"] and not mask["block_0"]["attn_norm"]["scale"]
    assert not mask["embed_VxD"] and not mask["head_DxV"]
    assert decay_mask(params, OptimConfig(decay_embeddings=True, decay_norms=True))["final_norm"]["scale"]


def test_host_schedule_equals_the_schedule_across_chunks():
    """The logged lr comes from chunked host-side values; they must be the schedule's own."""
    for kind in ("cosine", "wsd", "linear"):
        sched = make_schedule(OptimConfig(lr=3e-3, schedule=kind), 300, 20)
        host = HostSchedule(hyperparams(OptimConfig(lr=3e-3, schedule=kind), 300, 20), chunk=64)
        for i in (0, 1, 19, 20, 63, 64, 65, 127, 128, 200, 299):
            assert host(i) == pytest.approx(float(sched(i)), rel=1e-6), (kind, i)  # float32 rounding


@pytest.mark.parametrize(
    "overrides,msg",
    [
        (["train.steps=-5"], "train.steps must be an integer >= 1"),
        (["data.path=/nonexistent/x.bin"], "file not found: /nonexistent/x.bin"),
        (["model.d_model=100", "model.n_heads=3"], "model.n_heads=3 does not divide model.d_model=100"),
        (["sharding.tensor=3", "model.n_heads=4"], "sharding.tensor=3 does not divide model.n_heads=4"),
        (["train.micro_batch_size=3"], "train.micro_batch_size=3 does not divide train.batch_size=16"),
        (["optim.warmup_tokens=1e9"], "optim.warmup_tokens"),
        (["optim.schedule=cyclic"], "optim.schedule must be one of"),
        (["model.vocab_size=100"], "model.vocab_size=100 is smaller than the data's vocabulary"),
        (["train.tokens=null"], "give train.steps or train.tokens"),
        (["sharding.data=-1", "sharding.fsdp=-1"], "only one of"),
        (["optim.lr=-1"], "optim.lr must be a number > 0"),
    ],
)
def test_bad_config_errors_before_compile(overrides, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        resolve_config(cfg(*overrides), n_devices=8)


def _env():
    return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", JAX_PLATFORMS="cpu")


def test_cli_bad_input_is_one_line_without_traceback(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "experiments.train", "train.steps=-5", f"hydra.run.dir={tmp_path / 'r'}"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout
    assert p.stderr.strip().splitlines() == ["error: train.steps must be an integer >= 1 (got -5)"]


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted(tmp_path):
    args = [
        sys.executable,
        "-m",
        "experiments.train",
        "model.d_model=64",
        "model.n_layers=2",
        "model.n_heads=4",
        "model.seq_len=64",
        "train.batch_size=16",
        "train.steps=40",
        "train.ckpt_every=10",
        "train.eval_every=20",
        "train.eval_tokens=1024",
    ]
    full = subprocess.run(
        args + [f"hydra.run.dir={tmp_path / 'full'}"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert full.returncode == 0, full.stderr[-2000:]

    rd = tmp_path / "killed"
    proc = subprocess.Popen(
        args + [f"hydra.run.dir={rd}"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while not (rd / "checkpoints" / "10").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "run ended before it could be killed"
    assert not (rd / "summary.json").exists()
    resumed = subprocess.run(
        args + [f"hydra.run.dir={rd}"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from checkpoint at step" in resumed.stdout
    a = json.loads((tmp_path / "full" / "summary.json").read_text())
    b = json.loads((rd / "summary.json").read_text())
    assert 10 <= b["resumed_from_step"] < 40
    assert abs(a["final_train_loss"] - b["final_train_loss"]) <= 1e-6 * abs(a["final_train_loss"])
    assert abs(a["final_eval_loss"] - b["final_eval_loss"]) <= 1e-6 * abs(a["final_eval_loss"])
    ra, rb = read_metrics(tmp_path / "full" / "metrics.jsonl"), read_metrics(rd / "metrics.jsonl")
    assert [r["step"] for r in rb] == list(range(1, 41))  # no step logged twice
    assert [r["loss"] for r in ra] == pytest.approx([r["loss"] for r in rb], rel=1e-6)


def test_a_run_directory_trains_in_one_process_at_a_time(tmp_path):
    """While another live process holds a run directory (a worker a killed sweep left running,
    and the relaunched sweep), a second run there stops with one line and writes nothing; once
    the holder is gone, however it ended, the directory is free again."""
    from experiments.rundir import run_guarded

    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, pathlib, sys, time\n"
            f"p = pathlib.Path({str(run_dir)!r}); p.mkdir(parents=True)\n"
            "f = open(p / '.run.lock', 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        calls = []
        out = run_guarded(
            lambda c, d: calls.append(d) or RunSummary.of(status=RunStatus.COMPLETED),
            cfg(*TINY),
            run_dir,
            multirun=True,
        )
        assert out.status == "failed" and "another process is training" in out.error
        assert calls == [] and not (run_dir / "summary.json").exists()
    finally:
        holder.kill()
        holder.wait()
    out = run_guarded(
        lambda c, d: RunSummary.of(status=RunStatus.COMPLETED), cfg(*TINY), run_dir, multirun=True
    )
    assert out.completed  # the killed holder's lock went with it
