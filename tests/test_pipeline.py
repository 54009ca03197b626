"""Pipeline parallelism (sharding/pipeline.py) on 8 simulated CPU devices: pipelined layouts give
one device's loss and gradients, the compiled step really sends activations between stages, a
pipelined training run resumes to the uninterrupted result, and layers that do not split evenly
fail with one line before compiling.

Tolerance: loss rtol 1e-5; gradients atol 1e-5 (sharded reductions sum in another order in
float32; measured max |dgrad| ~2e-7).
"""

import os
import signal
from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from experiments.train import loop as train_loop
from experiments.train.config import resolve_config
from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.base.errors import ConfigError
from models.config import ModelConfig
from sharding.mesh import make_mesh
from sharding.validate import PipelineSpec

REPO = Path(__file__).resolve().parents[1]
CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, d_ff=64, seq_len=16)
B = 8
# name -> ((data, fsdp, tensor), pipeline)
LAYOUTS = {
    "pp2": ((1, 1, 1), PipelineSpec(stages=2, micro_batches=4)),
    "pp2_dp2_tp2": ((2, 1, 2), PipelineSpec(stages=2, micro_batches=2, schedule="1f1b")),
    "pp2x2v_fsdp2": (
        (1, 2, 1),
        PipelineSpec(stages=2, micro_batches=2, schedule="interleaved", virtual_stages=2),
    ),
}


def _grads(sizes, pipe):
    """(loss, grads, compiled HLO text) of the loss on one fixed batch."""
    tx = make_optimizer(OptimConfig(), make_schedule(OptimConfig(), 10, 0))
    mesh = make_mesh(sizes, stage=pipe.stages if pipe else 1)
    ts = build_train_setup(CFG, tx, mesh, donate=False, pipeline=pipe)
    params, _ = ts.init(0)
    batch = np.asarray(jax.random.randint(jax.random.key(7), (B, CFG.seq_len + 1), 0, CFG.vocab_size))
    batch = jax.device_put(batch, ts.eval_batch_sharding)
    vg = jax.jit(
        jax.value_and_grad(ts.loss_fn),
        in_shardings=(ts.param_shardings, ts.eval_batch_sharding),
        out_shardings=(None, ts.param_shardings),
    )
    compiled = vg.lower(params, batch).compile()
    loss, grads = compiled(params, batch)
    return jax.device_get(loss), jax.device_get(grads), compiled.as_text()


@pytest.fixture(scope="module")
def reference():
    return _grads((1, 1, 1), None)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_pipelined_layout_matches_one_device(name, reference):
    loss0, grads0, _ = reference
    loss, grads, hlo = _grads(*LAYOUTS[name])
    assert float(loss) == pytest.approx(float(loss0), rel=1e-5)
    assert jax.tree.structure(grads) == jax.tree.structure(grads0)
    for g, g0 in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0)):
        np.testing.assert_allclose(g, g0, atol=1e-5, rtol=1e-4)
    assert "collective-permute" in hlo  # activations move stage -> stage, not replicated compute


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


RUN = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=16",
    "train.batch_size=8",
    "train.eval_tokens=256",
    "train.progress_every_s=0",
    "train.steps=4",
    "train.ckpt_every=10",
    "train.eval_every=4",
    "sharding.pipeline=2",
    "sharding.data=2",
    "train.micro_batches=2",
]


def test_pipelined_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    ref = train_loop.run(_cfg(*RUN), tmp_path / "ref")
    assert ref["status"] == "completed" and ref["mesh"]["stage"] == 2 and ref["mesh"]["devices"] == 4

    orig = train_loop._finish_step

    def finish(loop, step_i, m, eval_params=None):  # preempt (as under SLURM) at step 1
        if step_i == 1:
            os.kill(os.getpid(), signal.SIGUSR2)
        return orig(loop, step_i, m, eval_params)

    rd = tmp_path / "pre"
    old = signal.signal(signal.SIGUSR2, lambda signum, frame: None)  # the "previous" handler
    try:
        with monkeypatch.context() as mp:
            mp.setattr(train_loop, "_finish_step", finish)
            first = train_loop.run(_cfg(*RUN), rd)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert first["status"] == "preempted" and 1 <= first["steps_done"] < 4, first
    resumed = train_loop.run(_cfg(*RUN), rd)
    assert resumed["status"] == "completed" and resumed["resumed_from_step"] == first["steps_done"]
    assert resumed["final_train_loss"] == pytest.approx(ref["final_train_loss"], rel=1e-5)
    assert resumed["final_eval_loss"] == pytest.approx(ref["final_eval_loss"], rel=1e-5)


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (
            ["model.n_layers=3", "sharding.pipeline=2"],
            "model.n_layers=3 is not divisible by sharding.pipeline",
        ),
        (
            [
                "model.n_layers=4",
                "sharding.pipeline=2",
                "sharding.pipeline_schedule=interleaved",
                "sharding.virtual_stages=4",
                "train.micro_batches=2",
            ],
            "model.n_layers=4 is not divisible",
        ),
        (["sharding.pipeline=2", "train.micro_batches=3"], "train.micro_batches=3 does not divide"),
        (["sharding.pipeline=2", "sharding.pipeline_schedule=zigzag"], "sharding.pipeline_schedule must be"),
    ],
)
def test_bad_pipeline_config_is_one_line(overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        resolve_config(
            _cfg("model.n_heads=4", "model.d_model=32", "train.batch_size=8", *overrides), n_devices=8
        )
    assert "\n" not in str(e.value)
