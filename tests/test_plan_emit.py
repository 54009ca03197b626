"""Plan → train: `python -m analysis plan ... --emit overrides` prints a command the trainer runs.

A small budget is planned for 8 devices; the emitted overrides run for a few steps on 8 simulated
CPU devices (`python -m experiments.train`, the command a user pastes), and the run's program,
compiled again from the run directory's composed config, holds per device the parameter and
optimizer-state bytes the plan predicts for its layout: within 10%, the tolerance of
tests/test_costmodel_xla.py. (Activation memory and step time are predicted for the planned GPU,
bf16 and flash attention; CPU float32 cannot measure them.)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from analysis.cli import main as analysis_main
from analysis.planning.planner import plan
from analysis.planning.trainer import missing_features, overrides, trainer_features, trainer_refusal
from sharding.costmodel import DEFAULT_EFFICIENCY, Layout, ModelShape

REPO = pathlib.Path(__file__).resolve().parents[1]
PLAN_ARGS = [
    "plan",
    "--budget",
    "3e13",
    "--hardware",
    "a100-80gb",
    "--gpus",
    "8",
    "--seq-len",
    "64",
    "--vocab",
    "256",
    "--batch-tokens",
    "1024",
]
STATE_TOLERANCE = 0.10
ENV = dict(
    os.environ,
    JAX_PLATFORMS="cpu",
    XLA_FLAGS="--xla_force_host_platform_device_count=8",
    PYTHONPATH=str(REPO),
)

# Compiles the run's train step from its composed config (.hydra/config.yaml), as the trainer
# builds it (experiments/train/loop.py: the step scalars as a fourth input), and prints the
# compiled per-device memory (XLA_FLAGS is set before JAX is imported: 8 simulated devices). With
# the persistent XLA cache the run wrote (SCALELAB_JAX_CACHE, tests/conftest.py) this is the run's
# own program read back, not a second compile of a near-identical one.
MEASURE = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    from omegaconf import OmegaConf
    from experiments.train.config import resolve_config
    from experiments.train.optimizer import RuntimeOptimizer, hyperparams
    from experiments.train.steps import build_train_setup
    from models.base.jaxcache import enable_compile_cache
    from sharding.mesh import make_mesh
    enable_compile_cache()
    spec = resolve_config(OmegaConf.load(sys.argv[1]))
    hp = hyperparams(spec.optim, spec.steps, spec.warmup_steps)
    runtime = RuntimeOptimizer(spec.optim, hp, spec.model)
    ts = build_train_setup(spec.model, runtime, make_mesh(spec.mesh_shape), n_micro=spec.n_micro)
    params, opt_state = ts.abstract_state()
    batch = jax.ShapeDtypeStruct((spec.n_micro, spec.micro_batch_size, spec.model.seq_len + 1),
                                 jnp.int32, sharding=ts.batch_sharding)
    rep = jax.sharding.NamedSharding(ts.mesh, jax.sharding.PartitionSpec())
    hp_in = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=rep), hp)
    m = ts.train_step.lower(params, opt_state, batch, hp_in).compile().memory_analysis()
    dp = spec.mesh_shape[0] * spec.mesh_shape[1]
    print(json.dumps({"argument": m.argument_size_in_bytes, "temp": m.temp_size_in_bytes,
                      "batch": spec.n_micro * spec.micro_batch_size // dp * (spec.model.seq_len + 1) * 4,
                      "hp": sum(v.nbytes for v in hp.values()), "mesh": list(spec.mesh_shape)}))
""")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """(plan JSON, printed lines) of the small budget, through the command line."""
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = analysis_main([*PLAN_ARGS, "--emit", "overrides", "--json", str(out)])
    lines = buf.getvalue().splitlines()
    assert rc == 0, lines
    return json.loads(out.read_text()), lines


def test_emit_prints_the_command_and_json_has_the_overrides(planned):
    data, lines = planned
    ov = data["best"]["overrides"]
    assert lines[-1].startswith("wrote ")  # --json; without it the command is the last line
    assert lines[-2].startswith("python -m experiments.train ") and lines[-2].split()[3:] == ov
    assert any(o.startswith("sharding.") for o in ov) and any(o.startswith("train.") for o in ov)
    assert any(o.startswith("model.remat=") for o in ov)
    assert data["mfu_convention"] == data["best"]["mfu_convention"] == "palm_6N+12LHQT"
    assert data["best"]["trainer"]["mfu_convention"] == "palm_6N+12LHQT"


def test_emitted_overrides_run_and_hold_the_predicted_state_memory(planned, tmp_path):
    data, _ = planned
    trainer = data["best"]["trainer"]
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "experiments.train",
        *data["best"]["overrides"],
        "train.steps=3",
        "train.eval_every=0",
        "train.eval_tokens=2048",
        "train.ckpt_every=0",
        f"hydra.run.dir={run_dir}",
    ]
    r = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["mfu_convention"] == "causal_6N+6LTHd"
    mesh = trainer["layout"]["mesh"]
    assert [summary["mesh"][k] for k in ("data", "fsdp", "tensor")] == [
        mesh["data"],
        mesh["fsdp"],
        mesh["tensor"],
    ]

    r = subprocess.run(
        [sys.executable, "-c", MEASURE, str(run_dir / ".hydra" / "config.yaml")],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    measured = json.loads(r.stdout.strip().splitlines()[-1])
    state = measured["argument"] - measured["batch"] - measured["hp"]  # params + Adam state per device
    gb = trainer["memory_gb"]
    predicted = (gb["params"] + gb["optimizer"]) * 1e9
    print(
        f"plan: {trainer['layout']['mesh']} predicted state {predicted / 1e6:.3f} MB/device, compiled "
        f"{state / 1e6:.3f} MB/device (temp {measured['temp'] / 1e6:.2f} MB)"
    )
    assert abs(predicted / state - 1) <= STATE_TOLERANCE, (predicted, state, measured)


def test_missing_features_name_what_the_trainer_lacks():
    feats = frozenset()
    lo = Layout(dp=16, tp=2, pp=4, micro_batch=1, global_batch=64, sp=True, zero_stage=1)
    got = " | ".join(missing_features(lo, feats))
    assert "pipeline parallelism (pp=4)" in got and "sequence parallelism" in got and "ZeRO-1" in got
    assert missing_features(Layout(dp=8, global_batch=8, zero_stage=3), feats) == []
    assert missing_features(lo, frozenset({"pipeline", "sequence_parallel", "train.micro_batches"}))[
        0
    ].startswith("ZeRO-1")


def test_overrides_map_the_layout_to_trainer_keys():
    shape = ModelShape(n_layers=4, d_model=256, n_heads=2, seq_len=64, vocab_size=256)
    lo = Layout(dp=4, tp=2, micro_batch=2, global_batch=32, zero_stage=3, act_ckpt="selective")
    ov = overrides(shape, lo, 1e6)
    assert ov == [
        "model.vocab_size=256",
        "model.d_model=256",
        "model.n_layers=4",
        "model.n_heads=2",
        "model.d_ff=768",
        "model.seq_len=64",
        "model.remat=selective",
        "sharding.data=1",
        "sharding.fsdp=4",
        "sharding.tensor=2",
        "train.batch_size=32",
        "train.micro_batch_size=8",
        "train.tokens=1000000",
    ]


def test_chinchilla_on_1024_a100s_emits_a_layout_the_trainer_has():
    """The issue's example: when the planner's best (here dp256 tp2+sp pp2, ZeRO-1, on constants
    whose ZeRO-3 gathers cannot overlap compute) needs axes the trainer lacks, the emitted plan is
    one it accepts, and the plan says what was missing."""
    default = plan(5.76e23, 1024, "a100-80gb")  # the shipped constants pick FSDP: nothing missing
    assert trainer_refusal(default.trainer.shape, default.trainer.layout) is None
    # the Megatron-LM stack (ZeRO-1 and pipelines; the default framework is the trainer's own)
    r = plan(
        5.76e23, 1024, "a100-80gb", eff=DEFAULT_EFFICIENCY.replace(zero3_overlap=0.0), framework="megatron"
    )
    t = r.trainer
    assert t.overrides and trainer_refusal(t.shape, t.layout) is None and t.estimate.fits
    assert t.missing == tuple(missing_features(r.best.layout)) and "ZeRO-1" in t.missing
    if "pipeline" not in trainer_features():
        assert r.best.layout.pp > 1 and t.layout.pp == 1
        assert any(m.startswith("pipeline parallelism") for m in t.missing)
    best = r.as_dict()["best"]
    assert best["overrides"] == t.overrides and best["trainer"]["missing"] == list(t.missing)
