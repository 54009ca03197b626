"""The paper cost model against the real sharded train step compiled by XLA (8 CPU devices).

For data, fsdp, tensor, sequence-, context- and pipeline-parallel layouts of a small model,
`experiments.train.steps.build_train_setup`'s train step is lowered and compiled (not run), and:
- per-device params + optimizer state from the cost model match the compiled executable's
  argument bytes (minus the token batch) within 10%;
- predicted per-device memory (states + gradients + activations + logits + temporaries) matches
  arguments + temporaries of `compiled.memory_analysis()` within 10%, except the layouts in
  `MEMORY_GAPS` (measured gaps, explained there, guarded so they cannot grow unnoticed);
- predicted collective bytes per step match the collectives of the compiled HLO (while loops
  multiplied by their trip counts, tests/hlo_collectives.py) within 10% (`REDUCE_GAPS`: a
  measured exception); for the pipeline the stage-to-stage sends are compared with the tick
  loop's collective-permutes (`PP_GAPS`). docs/costmodel.md ("XLA") has these ratios as a table.

What the code really does, and the model is told (`Layout` flags): q/k/v and gate/up are
separate matmuls (`fused_projections=False`), XLA keeps FSDP-gathered weights and SP-gathered
inputs for backward (`zero3_regather=False`, `sp_bwd_regather=False`), reduces context-parallel
gradients over context, then data (`cp_joint_grad_reduce=False`), and the pipeline is
sharding/pipeline.py's (`gspmd_pipeline=True`). XLA's static buffer assignment has no allocator
fragmentation or framework overhead (`act_frag=1`, `mem_overhead_bytes=0`). XLA's CPU backend
lowers reduce-scatter as an all-reduce, so reductions are compared together; gathers separately.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
from hlo_collectives import hlo_collective_bytes

from experiments.train.steps import build_train_setup
from models.config import ModelConfig
from sharding.costmodel import FP32_PARAMS, Layout, ModelShape, Precision, estimate_step, load_hardware
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY
from sharding.mesh import make_mesh
from sharding.validate import PipelineSpec

CFG = ModelConfig(vocab_size=256, d_model=256, n_layers=4, n_heads=8, seq_len=64)
GLOBAL_BATCH = 16
# this repo: fp32 params, grads and Adam moments; dtype=float32 -> fp32 activations
PREC = Precision(**{**FP32_PARAMS.__dict__, "act_bytes": 4})
EFF = DEFAULT_EFFICIENCY.replace(act_frag=1.0, mem_overhead_bytes=0.0)
LAYOUTS = {  # name: ((data, fsdp, tensor), pipeline, context, sequence_parallel)
    "dp": ((8, 1, 1), None, 1, False),
    "fsdp": ((1, 8, 1), None, 1, False),
    "tp": ((1, 1, 8), None, 1, False),
    "dp_tp": ((4, 1, 2), None, 1, False),
    "fsdp_tp": ((1, 4, 2), None, 1, False),
    "dp_tp4_sp": ((2, 1, 4), None, 1, True),
    "dp_cp4": ((2, 1, 1), None, 4, False),
    "dp_tp_sp_cp": ((2, 1, 2), None, 2, True),
    "dp_tp_pp2": ((2, 1, 2), PipelineSpec(stages=2, micro_batches=4), 1, False),
    "dp_pp4": ((2, 1, 1), PipelineSpec(stages=4, micro_batches=4), 1, False),
    "dp_tp_pp2v2": (
        (2, 1, 2),
        PipelineSpec(stages=2, micro_batches=4, schedule="interleaved", virtual_stages=2),
        1,
        False,
    ),
}
PIPELINED = [n for n, spec in LAYOUTS.items() if spec[1] is not None]
# predicted / measured total memory outside 10%, as measured (jax 0.8 CPU), with the cause.
# fsdp, fsdp_tp: XLA keeps all gathered layer weights alive across forward and backward, the
# model counts two layers' worth. dp_tp, dp_tp4_sp: the model stores every activation per TP
# rank as Megatron does, XLA fuses some away or keeps others. The GSPMD pipeline keeps the
# stacked-weight copies, the tick loop's stream and state buffers and per-tick gradient
# accumulators the model leaves out.
MEMORY_GAPS = {
    "fsdp": 0.77,
    "fsdp_tp": 0.88,
    "dp_tp": 1.115,
    "dp_tp4_sp": 0.89,
    "dp_tp_pp2": 0.76,
    "dp_pp4": 0.61,
    "dp_tp_pp2v2": 0.70,
}
# model / HLO reductions: with virtual stages XLA gathers each tick's weights instead of
# reducing some of their gradients in the loop.
REDUCE_GAPS = {"dp_tp_pp2v2": 1.16}
# model / HLO stage-to-stage bytes: XLA's backward of the stage shift sends a second permute
# per tick at P = 2 (1.5x the model's one), and shifts only part of the buffer at P = 4.
PP_GAPS = {"dp_tp_pp2": 0.67, "dp_pp4": 1.20, "dp_tp_pp2v2": 0.67}


def model_layout(name: str) -> Layout:
    (data, fsdp, tensor), pipe, context, sp = LAYOUTS[name]
    dp, stages = data * fsdp, (pipe.stages if pipe else 1)
    micro = pipe.micro_batches if pipe else 1
    return Layout(
        dp=dp,
        tp=tensor,
        pp=stages,
        cp=context,
        sp=sp,
        micro_batch=GLOBAL_BATCH // (dp * micro),
        global_batch=GLOBAL_BATCH,
        interleave=pipe.virtual_stages if pipe else 1,
        zero_stage=3 if fsdp > 1 else 0,
        act_ckpt="none",
        attention="naive",
        fused_norm=False,
        fused_projections=False,
        zero3_regather=False,
        sp_bwd_regather=False,
        cp_joint_grad_reduce=False,
        gspmd_pipeline=True,
    )


def compile_layout(name: str):
    """(the train step of layout `name` compiled for 8 devices, per-device batch bytes)."""
    sizes, pipe, context, sp = LAYOUTS[name]
    mesh = make_mesh(sizes, stage=pipe.stages if pipe else 1, context=context)
    ts = build_train_setup(CFG, optax.adamw(1e-3), mesh, n_micro=1, pipeline=pipe, sequence_parallel=sp)
    params, opt = ts.abstract_state()
    batch = jax.ShapeDtypeStruct((1, GLOBAL_BATCH, CFG.seq_len + 1), jnp.int32, sharding=ts.batch_sharding)
    exe = ts.train_step.lower(params, opt, batch).compile()
    return exe, (GLOBAL_BATCH // (sizes[0] * sizes[1])) * (CFG.seq_len + 1) * 4


@pytest.fixture(scope="module")
def compiled():
    """name -> (compiled train step, per-device batch bytes), compiled lazily and cached."""
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 (simulated) devices")
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = compile_layout(name)
        return cache[name]

    return get


def _estimate(name: str):
    shape = ModelShape.from_model_config(CFG)
    return estimate_step(shape, model_layout(name), load_hardware("a100-80gb"), PREC, EFF)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_state_memory_matches_compiled_arguments(compiled, name):
    exe, batch_bytes = compiled(name)
    measured = exe.memory_analysis().argument_size_in_bytes - batch_bytes
    mem = _estimate(name).memory
    assert abs((mem.params + mem.optimizer) / measured - 1) <= 0.10, (name, mem, measured)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_total_memory_matches_compiled(compiled, name):
    exe, batch_bytes = compiled(name)
    ma = exe.memory_analysis()
    ratio = _estimate(name).memory.total / (ma.argument_size_in_bytes + ma.temp_size_in_bytes - batch_bytes)
    if name in MEMORY_GAPS:  # a known gap: it must not grow by more than 5 points
        assert abs(ratio - MEMORY_GAPS[name]) <= 0.05, (name, ratio)
    else:
        assert abs(ratio - 1) <= 0.10, (name, ratio)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_collective_bytes_match_compiled_hlo(compiled, name):
    exe, _ = compiled(name)
    hlo = hlo_collective_bytes(exe.as_text())
    pred = _estimate(name).collective_bytes()
    pred_reduce = pred.get("all_reduce", 0.0) + pred.get("reduce_scatter", 0.0)
    hlo_reduce = hlo["all_reduce"] + hlo["reduce_scatter"]
    assert hlo_reduce > 0
    ratio = pred_reduce / hlo_reduce
    assert abs(ratio - REDUCE_GAPS.get(name, 1.0)) <= (0.05 if name in REDUCE_GAPS else 0.10), (
        name,
        ratio,
        pred,
        hlo,
    )
    if name in PIPELINED:  # XLA's gathers of the tick loop's stream / stacked weights: no term
        return
    pred_gather, hlo_gather = pred.get("all_gather", 0.0), hlo["all_gather"]
    if max(pred_gather, hlo_gather) > 0.01 * hlo_reduce:
        assert abs(pred_gather / max(hlo_gather, 1) - 1) <= 0.10, (name, pred, hlo)


@pytest.mark.parametrize("name", PIPELINED)
def test_pipeline_sends_match_the_tick_loop(compiled, name):
    """The model's stage-to-stage bytes against the collective-permutes inside the tick loop
    (the stage shift and its transpose), as a known ratio that must not drift."""
    exe, _ = compiled(name)
    loop = hlo_collective_bytes(exe.as_text(), loops_only=True)
    ratio = _estimate(name).collective_bytes()["p2p"] / loop["collective_permute"]
    assert abs(ratio - PP_GAPS[name]) <= 0.05, (name, ratio)


def test_hlo_parser_counts_known_collectives():
    """The HLO counter on hand-written lines (so a parser bug cannot pass the checks above)."""
    hlo = "\n".join(
        [
            "%ar = f32[16,64,256]{2,1,0} all-reduce(%x), replica_groups=mesh['a'=8] {'a'}",
            "%ag = (f32[256,8]{1,0}, bf16[4]{0}) all-gather(%y, %z), replica_groups=mesh['a'=8] {'a'}",
            "%rs = f32[32]{0} reduce-scatter(%w), replica_groups=mesh['a'=2,'b'=4] {'b'}",
            "%cp = f32[8]{0} collective-permute(%v), source_target_pairs={{0,1},{2,3}}",
            "%d = f32[8]{0} all-gather-done(%ag2)",
        ]
    )
    got = hlo_collective_bytes(hlo, n_devices=8)
    assert got["all_reduce"] == 16 * 64 * 256 * 4
    assert got["all_gather"] == 256 * 8 * 4 + 4 * 2
    assert got["reduce_scatter"] == 32 * 4 * 4
    assert got["collective_permute"] == 8 * 4 * 2 / 8  # 2 of 8 devices send


def test_hlo_parser_multiplies_loop_bodies_by_trip_count():
    hlo = "\n".join(
        [
            "%body (p: f32[4]) -> f32[4] {",
            "  %ar = f32[4]{0} all-reduce(%p), replica_groups={{0,1}}",
            "}",
            "ENTRY %main (x: f32[4]) -> f32[4] {",
            "  %w = f32[4]{0} while(%x), condition=%cond, body=%body, "
            'backend_config={"known_trip_count":{"n":"5"}}',
            "  %ag = f32[4]{0} all-gather(%w), replica_groups={{0,1}}",
            "}",
        ]
    )
    assert hlo_collective_bytes(hlo)["all_reduce"] == 5 * 16
    assert hlo_collective_bytes(hlo, loops_only=True) == {
        "all_reduce": 80.0,
        "all_gather": 0.0,
        "reduce_scatter": 0.0,
        "collective_permute": 0.0,
        "all_to_all": 0.0,
    }
