"""One d_ff rule, one count of parameters and FLOPs, and enums with the on-disk strings, shared by
the trainer's `ModelConfig` and the cost model's `ModelShape` (issue 32)."""

import pytest

from models import flops
from models.config import ModelConfig, default_d_ff
from models.shapes import LLAMA_MULTIPLE_OF, TRAINER_D_FF_MULTIPLE, swiglu_d_ff
from sharding.costmodel import (
    ACT_CKPT,
    ATTENTION_KERNELS,
    CollectiveKind,
    Layout,
    LayoutError,
    ModelShape,
    ZeroStage,
    estimate_step,
    load_hardware,
    validate_layout,
)
from sharding.layouts import PipelineSchedule, ShardingConfig
from sharding.validate import PIPELINE_SCHEDULES, head_splits, sequence_split


def test_swiglu_d_ff_keeps_both_callers_widths():
    """Llama's widths with multiple_of=256, the trainer's (tests/config_golden.py) with 64; and
    rounding floor(8d/3) up (Llama's code) gives the same as ceil(8d/3) for both multiples."""
    assert swiglu_d_ff(5120, LLAMA_MULTIPLE_OF) == 13824  # Llama 2 13B
    assert swiglu_d_ff(4096, LLAMA_MULTIPLE_OF) == 11008  # Llama 2 7B
    assert swiglu_d_ff(128, TRAINER_D_FF_MULTIPLE) == 384 == ModelConfig(d_model=128).ff
    for m in (TRAINER_D_FF_MULTIPLE, LLAMA_MULTIPLE_OF):
        for d in range(1, 3000):
            floor_rule = m * -(-int(8 * d / 3) // m)
            assert swiglu_d_ff(d, m) == floor_rule, (d, m)
    assert all(default_d_ff(d) == swiglu_d_ff(d, TRAINER_D_FF_MULTIPLE) for d in range(1, 3000))
    assert ModelShape(2, 5120, 40, 8, 10).ffn == 13824


@pytest.mark.parametrize("mlp", ["swiglu", "gelu"])
def test_model_shape_counts_with_models_flops(mlp):
    """ModelShape's per-component counts and PaLM FLOPs are models/flops.py's functions."""
    m = ModelShape(n_layers=3, d_model=256, n_heads=8, seq_len=64, vocab_size=500, n_kv_heads=2, mlp=mlp)
    gated = mlp == "swiglu"
    assert m.attn_params_per_layer == 2 * 256 * 256 + 2 * 256 * m.kv_dim
    assert m.mlp_params_per_layer == (3 if gated else 2) * 256 * m.ffn
    assert m.params_per_layer == flops.block_params(256, 8, 2, 32, m.ffn, gated)
    assert m.model_flops_per_token() == 6.0 * m.n_params + 12.0 * 3 * 256 * 64
    cfg = ModelConfig(d_model=256, n_heads=8, n_kv_heads=2, n_layers=3, vocab_size=500, seq_len=64)
    shape = ModelShape.from_model_config(cfg)
    assert shape.n_params == flops.param_count(cfg)
    assert flops.attention_flops_per_token(cfg, causal=False) == flops.attention_score_flops(
        3, 64, 256, False
    )


def test_enums_hold_the_on_disk_strings():
    assert tuple(PipelineSchedule) == PIPELINE_SCHEDULES == ("gpipe", "1f1b", "interleaved", "breadth_first")
    assert ShardingConfig().pipeline_schedule == "gpipe" and type(ShardingConfig().pipeline_schedule) is str
    assert ATTENTION_KERNELS == ("naive", "fused_softmax", "flash1", "flash2")
    assert ACT_CKPT == ("none", "selective", "full")
    assert tuple(ZeroStage) == (0, 1, 2, 3)
    lo = Layout(dp=8, micro_batch=1, global_batch=64, zero_stage=0)
    est = estimate_step(ModelShape(4, 512, 8, 256, 1000), lo, load_hardware("a100-80gb"))
    assert (
        set(est.collective_bytes()) == {"all_reduce"} and est.collectives[0].kind is CollectiveKind.ALL_REDUCE
    )
    assert est.memory.stage in ("first", "last")


def test_shared_divisibility_rules():
    """The trainer's and the cost model's validators apply the same head and sequence rules."""
    assert [s.even for s in head_splits(4, 8, 2)] == [True, False]
    assert sequence_split(32, 2, 8, True).ranks == 16 and not sequence_split(24, 2, 8, True).even
    with pytest.raises(LayoutError, match="tp=4 must divide n_heads=8 and kv heads=2"):
        validate_layout(ModelShape(2, 256, 8, 32, 10, n_kv_heads=2), Layout(tp=4, global_batch=4))
    with pytest.raises(LayoutError, match="context parallelism needs seq_len=24 divisible by cp=2×tp=8"):
        validate_layout(ModelShape(2, 256, 8, 24, 10), Layout(tp=8, cp=2, sp=True, global_batch=4))
