"""No layout the planner can emit makes XLA replicate a tensor it cannot reshard.

XLA's SPMD partitioner prints "Involuntary full rematerialization" (to stderr, from C++) when it
cannot move an array between two shardings and falls back to replicating it on every device, every
step. The embedding lookup did that under data=2 fsdp=2 tensor=2 (the gather read a table sharded
(vocab: tensor, embed: fsdp) and had to produce a batch-sharded output). This test compiles the
train step of each layout with the persistent compilation cache off (a program loaded from the
cache is not partitioned again and would print nothing) and fails on that line. The mixture of
experts (`model.moe`) is checked the same way on expert-parallel layouts (`sharding.expert`,
alone and with data, fsdp, tensor and sequence parallelism).
"""

import dataclasses

import jax
import numpy as np
import pytest

from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.config import ModelConfig
from sharding.mesh import make_mesh

CFG = ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=8, d_ff=128, seq_len=16)
B = 8
LAYOUTS = {  # (data, fsdp, tensor), sequence parallel
    "dp2_fsdp2_tp2": ((2, 2, 2), False),
    "dp2_fsdp2_tp2_sp": ((2, 2, 2), True),
    "dp2_fsdp4": ((2, 4, 1), False),
    "fsdp2_tp4": ((1, 2, 4), False),
    "dp4_tp2": ((4, 1, 2), False),
    "fsdp8": ((1, 8, 1), False),
}
WARNING = "Involuntary full rematerialization"


@pytest.fixture
def no_persistent_cache():
    old = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", old)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_train_step_compiles_without_involuntary_replication(layout, capfd, no_persistent_cache):
    sizes, sp = LAYOUTS[layout]
    _check_compiles_cleanly(CFG, make_mesh(sizes), sp, layout, capfd)


# A mixture of experts with dropping, fine-grained and shared experts: a dense layer, then a
# routed one of 8 experts (both transitions).
MOE_CFG = dataclasses.replace(
    CFG,
    moe={"experts": 4, "top_k": 2, "capacity_factor": 1.0, "granularity": 2, "shared_experts": 1, "every": 2},
)
MOE_LAYOUTS = {  # (data, fsdp, tensor), expert, sequence parallel
    "ep4_dp2": ((2, 1, 1), 4, False),
    "ep8": ((1, 1, 1), 8, False),
    "ep2_fsdp2_tp2": ((1, 2, 2), 2, False),
    "ep2_dp2_tp2_sp": ((2, 1, 2), 2, True),
    "ep4_fsdp2": ((1, 2, 1), 4, False),
}


@pytest.mark.parametrize("layout", sorted(MOE_LAYOUTS))
def test_moe_train_step_compiles_without_involuntary_replication(layout, capfd, no_persistent_cache):
    sizes, expert, sp = MOE_LAYOUTS[layout]
    _check_compiles_cleanly(MOE_CFG, make_mesh(sizes, expert=expert), sp, layout, capfd)


def _check_compiles_cleanly(cfg: ModelConfig, mesh, sp: bool, layout: str, capfd) -> None:
    opt = OptimConfig(lr=1e-3)
    ts = build_train_setup(
        cfg,
        make_optimizer(opt, make_schedule(opt, 10, 0)),
        mesh,
        n_micro=1,
        donate=False,
        sequence_parallel=sp,
    )
    params, opt_state = ts.init(0)
    batch = np.asarray(jax.random.randint(jax.random.key(0), (1, B, cfg.seq_len + 1), 0, cfg.vocab_size))
    capfd.readouterr()
    _, _, m = ts.train_step(params, opt_state, jax.device_put(batch, ts.batch_sharding))
    assert np.isfinite(float(m["loss"]))
    err = capfd.readouterr().err
    assert WARNING not in err, f"{layout}: XLA replicated a tensor it could not reshard:\n{err[:2000]}"
