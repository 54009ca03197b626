"""Pipeline parallelism (sharding/pipeline.py) on 8 simulated CPU devices: pipelined layouts give
one device's loss and gradients, the compiled step really sends activations between stages, a
pipelined training run resumes to the uninterrupted result, and layers that do not split evenly
fail with one line before compiling. The schedules' tick tables (which item each stage runs at
each tick) are checked without compiling: breadth_first's order against interleaved's, and every
table's data flow through the state and stream buffers.

Tolerance: loss rtol 1e-5; gradients atol 1e-5 (sharded reductions sum in another order in
float32; measured max |dgrad| ~2e-7).
"""

from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from preempt import preempted_at

from experiments.train import loop as train_loop
from experiments.train.config import resolve_config
from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.base.errors import ConfigError
from models.config import ModelConfig
from sharding.layouts import PipelineSchedule
from sharding.mesh import make_mesh
from sharding.pipeline import schedule_table
from sharding.validate import PipelineSpec

REPO = Path(__file__).resolve().parents[1]
CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, d_ff=64, seq_len=16)
B = 8
# name -> ((data, fsdp, tensor), pipeline)
LAYOUTS = {
    "pp2": ((1, 1, 1), PipelineSpec(stages=2, micro_batches=4)),
    "pp2_dp2_tp2": ((2, 1, 2), PipelineSpec(stages=2, micro_batches=2, schedule="1f1b")),
    # M = 4 > P: interleaved (depth-first) and breadth_first run different orders
    "pp2x2v_fsdp2": (
        (1, 2, 1),
        PipelineSpec(stages=2, micro_batches=4, schedule="interleaved", virtual_stages=2),
    ),
    "pp2x2v_breadth_first_dp2_tp2": (
        (2, 1, 2),
        PipelineSpec(stages=2, micro_batches=4, schedule="breadth_first", virtual_stages=2),
    ),
    # M = 1 < P: each loop padded to P slots (interleaved refuses M < P)
    "pp2x2v_breadth_first_m1": (
        (1, 1, 1),
        PipelineSpec(stages=2, micro_batches=1, schedule="breadth_first", virtual_stages=2),
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


def _pipe(schedule, P, V, M):
    return PipelineSpec(stages=P, micro_batches=M, schedule=schedule, virtual_stages=V)


def test_breadth_first_runs_a_whole_loop_before_the_next():
    """Lamy-Poirier 2022: breadth-first runs all M micro-batches on a chunk before the next chunk;
    interleaved (Megatron, depth-first) takes P micro-batches through every chunk first."""
    bf, il = schedule_table(_pipe("breadth_first", 2, 2, 4)), schedule_table(_pipe("interleaved", 2, 2, 4))
    assert bf.order(0) == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
    assert il.order(0) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    # stage 1 runs stage 0's order one tick later; the last tick is stage 1's alone
    assert bf.order(1) == bf.order(0) and not bf.active[0, 1] and bf.active[1:, 1].all()
    assert bf.ticks == il.ticks == 4 * 2 + 2 - 1
    # per stage, breadth-first never goes back to an earlier chunk
    big = schedule_table(_pipe("breadth_first", 4, 3, 8))
    for p in range(4):
        assert [v for _, v in big.order(p)] == sorted(v for _, v in big.order(p))
    # M not a multiple of P: interleaved pads its last group of P, breadth-first does not
    assert schedule_table(_pipe("breadth_first", 4, 2, 6)).ticks == 6 * 2 + 4 - 1
    assert schedule_table(_pipe("interleaved", 4, 2, 6)).ticks == 6 * 2 + 4 - 1 + (2 - 1) * (4 - 6 % 4)
    # M < P: each breadth-first loop is padded to P slots
    assert schedule_table(_pipe("breadth_first", 4, 2, 2)).ticks == 2 * 2 + 4 - 1 + (2 - 1) * (4 - 2)


@pytest.mark.parametrize("schedule", list(PipelineSchedule))
def test_schedule_tables_carry_every_item_through_the_buffers(schedule):
    """Run the tick loop of pipelined_blocks on labels: an activation is (micro-batch, chunks
    applied). Every active stage must receive its item with exactly the chunks before it
    applied, and the stream must end with every micro-batch through all P * V chunks."""
    for P in range(1, 5):
        for V in range(1, 4) if schedule in ("interleaved", "breadth_first") else [1]:
            for M in range(1, 9):
                t = schedule_table(_pipe(schedule, P, V, M))
                stream, state = [(mb, 0) for mb in range(M)], [None] * P
                for tick in range(t.ticks):
                    inputs = [stream[t.micro_batch[tick, 0]], *state[:-1]]
                    out = [None] * P
                    for p in range(P):
                        if t.active[tick, p]:
                            mb, v = int(t.micro_batch[tick, p]), int(t.virtual_stage[tick, p])
                            assert inputs[p] == (mb, v * P + p), (schedule, P, V, M, tick, p)
                            out[p] = (mb, v * P + p + 1)
                    if t.active[tick, P - 1]:
                        stream[t.micro_batch[tick, P - 1]] = out[P - 1]
                    state = out
                assert stream == [(mb, P * V) for mb in range(M)]
                for p in range(P):  # each item once per stage, idle share = bubble
                    assert sorted(t.order(p)) == sorted((mb, v) for mb in range(M) for v in range(V))
                assert t.bubble == pytest.approx(1 - M * V / t.ticks)


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
    assert ref.status == "completed" and ref.mesh["stage"] == 2 and ref.mesh["devices"] == 4

    rd = tmp_path / "pre"
    with preempted_at(monkeypatch, 1):  # preempt (as under SLURM) at step 1
        first = train_loop.run(_cfg(*RUN), rd)
    assert first.status == "preempted" and 1 <= first.steps_done < 4, first
    resumed = train_loop.run(_cfg(*RUN), rd)
    assert resumed.status == "completed" and resumed.resumed_from_step == first.steps_done
    assert resumed.final_train_loss == pytest.approx(ref.final_train_loss, rel=1e-5)
    assert resumed.final_eval_loss == pytest.approx(ref.final_eval_loss, rel=1e-5)


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
        (
            [
                "model.n_layers=4",
                "sharding.pipeline=2",
                "sharding.pipeline_schedule=breadth_first",
                "sharding.virtual_stages=4",
                "train.micro_batches=2",
            ],
            "model.n_layers=4 is not divisible by sharding.pipeline",
        ),
        (
            ["model.n_layers=4", "sharding.pipeline=2", "sharding.virtual_stages=2", "train.micro_batches=2"],
            "sharding.virtual_stages=2 needs a looped schedule: sharding.pipeline_schedule=interleaved or "
            "breadth_first",
        ),
        (
            [
                "model.n_layers=4",
                "sharding.pipeline=2",
                "sharding.pipeline_schedule=interleaved",
                "sharding.virtual_stages=2",
                "train.micro_batches=1",
            ],
            "interleaved needs train.micro_batches >= sharding.pipeline .*breadth_first",
        ),
    ],
)
def test_bad_pipeline_config_is_one_line(overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        resolve_config(
            _cfg("model.n_heads=4", "model.d_model=32", "train.batch_size=8", *overrides), n_devices=8
        )
    assert "\n" not in str(e.value)


def test_breadth_first_config_resolves():
    """`sharding.pipeline_schedule=breadth_first` from the command line, with M = 1 < P = 2
    (which interleaved refuses, test_bad_pipeline_config_is_one_line)."""
    model = ["model.n_heads=4", "model.d_model=32", "model.n_layers=4", "train.batch_size=8"]
    pipe = ["sharding.pipeline=2", "sharding.virtual_stages=2", "train.micro_batches=1"]
    spec = resolve_config(_cfg(*model, *pipe, "sharding.pipeline_schedule=breadth_first"), n_devices=8)
    assert spec.pipeline == PipelineSpec(2, 1, PipelineSchedule.BREADTH_FIRST, 2)
