"""The cost model of a mixture of experts (issue 45): parameter counts, the expert-parallel all-to-all
against a hand calculation, expert memory split over ep, the ep axis of the layout search, and
dense shapes unchanged (a golden file of estimates made before the MoE terms existed)."""

import json
import pathlib

import pytest

from analysis.planning.planner import layouts_for
from analysis.planning.trainer import mesh_axes, trainer_features
from models.config import MoEConfig
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    FP32_PARAMS,
    Layout,
    LayoutError,
    ModelShape,
    estimate_step,
    load_hardware,
)
from sharding.costmodel.spec import moe_override

GOLDEN = pathlib.Path(__file__).parent / "fixtures" / "costmodel_dense_golden.json"
HW = load_hardware("h100-sxm")  # 8 devices per node
MIXTRAL = ModelShape(
    n_layers=32,
    d_model=4096,
    n_heads=32,
    n_kv_heads=8,
    seq_len=4096,
    vocab_size=32000,
    d_ff=14336,
    moe=MoEConfig(experts=8, top_k=2),
)


def small_moe(**moe) -> ModelShape:
    return ModelShape(
        n_layers=8, d_model=1024, n_heads=8, seq_len=2048, vocab_size=32000, moe=MoEConfig(**moe)
    )


def test_dense_estimates_unchanged():
    """Every dense estimate of the golden file (84 layouts of two shapes, bf16 and fp32, Megatron's
    and the trainer's GSPMD program), computed before the MoE terms, is reproduced to the bit."""
    golden = json.loads(GOLDEN.read_text())
    shapes = {k: ModelShape(**v) for k, v in golden["shapes"].items()}
    precisions = {"bf16": BF16_MIXED, "fp32": FP32_PARAMS}
    for row in golden["rows"]:
        est = estimate_step(shapes[row["shape"]], Layout(**row["layout"]), HW, precisions[row["precision"]])
        assert est.layout.ep == 1
        assert est.step_time_s == row["step_time_s"]
        assert est.memory.total == row["mem_bytes"]
        assert est.mfu == row["mfu"]
        assert est.collective_bytes() == row["collective_bytes"]


def test_dense_layout_search_has_no_expert_axis():
    shape = ModelShape(**json.loads(GOLDEN.read_text())["shapes"]["llama7b"])
    layouts = layouts_for(shape, 64, HW, 4 * 2**20)
    assert layouts and all(lo.ep == 1 for lo in layouts)
    with pytest.raises(LayoutError, match="dense"):
        estimate_step(shape, Layout(dp=8, ep=2, global_batch=8), HW)


def test_moe_layout_search_adds_expert_parallel_sizes():
    shape = small_moe(experts=8, top_k=2)
    layouts = layouts_for(shape, 16, HW, 2**20)
    eps = {lo.ep for lo in layouts}
    assert eps == {1, 2, 4, 8}  # divisors of dp that divide the 8 experts
    assert all(lo.dp % lo.ep == 0 and 8 % lo.ep == 0 for lo in layouts)
    with pytest.raises(LayoutError, match="routed experts; nearest valid: ep=4"):
        estimate_step(small_moe(experts=4, top_k=1), Layout(dp=8, ep=8, global_batch=8), HW)
    with pytest.raises(LayoutError, match="must divide dp"):
        estimate_step(shape, Layout(dp=6, ep=4, global_batch=6), HW)


def test_mixtral_parameter_counts():
    """Mixtral 8x7B: 46.7B parameters, 12.9B active (Jiang et al. 2024); MFU counts the active ones."""
    assert MIXTRAL.n_params == pytest.approx(46.70e9, rel=1e-3)
    assert MIXTRAL.n_params_active == pytest.approx(12.88e9, rel=1e-3)
    dense = ModelShape(
        n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, seq_len=4096, vocab_size=32000, d_ff=14336
    )
    assert MIXTRAL.model_flops_per_token() - dense.model_flops_per_token() == pytest.approx(
        6 * (MIXTRAL.n_params_active - dense.n_params)
    )
    g = MoEConfig(experts=8, top_k=2, granularity=4, shared_experts=1)  # fine-grained: same totals but router
    fine = ModelShape(
        n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, seq_len=4096, vocab_size=32000, d_ff=14336, moe=g
    )
    router_extra = 32 * 4096 * (32 - 8)
    shared = 32 * 3 * 4096 * (14336 // 4)
    assert fine.n_params - MIXTRAL.n_params == router_extra + shared


def test_counts_match_the_trainers_model():
    """Where the trainer builds a mixture of experts (models/flops.py's counts), the cost model's
    shape of its config counts the same parameters."""
    flops = pytest.importorskip("models.flops")
    if not hasattr(flops, "active_param_count") or "model.moe" not in trainer_features():
        pytest.skip("the trainer has no mixture of experts in this tree")
    from models.config import ModelConfig

    cfg = ModelConfig(
        vocab_size=512,
        d_model=128,
        n_layers=4,
        n_heads=4,
        seq_len=64,
        moe={"experts": 4, "top_k": 2, "every": 2},
    ).validate()
    shape = ModelShape.from_model_config(cfg)
    assert shape.n_params == flops.param_count(cfg)
    assert shape.n_params_active == flops.active_param_count(cfg)


def _expected_all_to_all(shape, lo, intra: bool):
    """The hand calculation: per routed layer and micro-batch, dispatch + combine forward and their
    gradients backward (4 calls), each an all-to-all of tokens x top_k x capacity x d_model bf16
    activations over the ep ranks: (ep - 1)/ep of the buffer on the wire, ep - 1 steps of latency."""
    moe = shape.moe
    tokens = shape.seq_len * lo.micro_batch
    buf = tokens * moe.top_k * moe.capacity_factor * shape.d_model * 2
    calls = 4 * shape.moe_layers * lo.grad_accum
    wire = (lo.ep - 1) / lo.ep * buf
    intra_eff, inter_eff = DEFAULT_EFFICIENCY.link_effs
    if intra:
        per_call = wire / (HW.intra_node_bw * intra_eff) + (lo.ep - 1) * HW.intra_node_latency_s
    else:
        bw = min(HW.intra_node_bw * intra_eff, HW.devices_per_node * HW.inter_node_bw * inter_eff)
        per_call = wire / bw + (lo.ep - 1) * HW.inter_node_latency_s
    return buf, calls, calls * wire, calls * per_call


@pytest.mark.parametrize(("dp", "ep", "intra"), [(8, 4, True), (16, 16, False)])
def test_all_to_all_matches_hand_calculation(dp, ep, intra):
    shape = small_moe(experts=16, top_k=2, capacity_factor=1.25, every=2)
    lo = Layout(dp=dp, ep=ep, micro_batch=2, global_batch=dp * 2 * 3, zero_stage=1)
    est = estimate_step(shape, lo, HW)
    (a2a,) = [c for c in est.collectives if c.kind == "all_to_all"]
    buf, calls, wire, seconds = _expected_all_to_all(shape, lo, intra)
    assert a2a.group_size == ep and a2a.link == ("intra" if intra else "inter")
    assert a2a.buffer_bytes == pytest.approx(buf)
    assert a2a.count == pytest.approx(calls)
    assert a2a.wire_bytes == pytest.approx(wire)
    assert a2a.time_s == pytest.approx(seconds)
    # nothing overlaps it: the step pays it in full
    no_ep = estimate_step(shape, lo.replace(ep=1), HW)
    assert not [c for c in no_ep.collectives if c.kind == "all_to_all"]


def test_expert_memory_split_over_ep():
    """Expert weights (and their gradients) split over ep; their ZeRO-1 optimizer states over the
    dp ranks either way; the expert gradients reduced over the dp / ep ranks holding them."""
    lo = Layout(dp=16, tp=2, micro_batch=1, global_batch=64, zero_stage=1, act_ckpt="full", sp=True)
    base = estimate_step(MIXTRAL, lo, HW)
    experts = MIXTRAL.routed_expert_params / lo.tp
    for ep in (2, 8):
        est = estimate_step(MIXTRAL, lo.replace(ep=ep), HW)
        saved = base.memory.params - est.memory.params
        assert saved == pytest.approx(experts * (1 - 1 / ep) * BF16_MIXED.param_bytes, rel=1e-9)
        assert est.memory.optimizer == pytest.approx(base.memory.optimizer, rel=1e-9)
        groups = {c.name: c.group_size for c in est.collectives}
        assert groups["expert_dp_grad_reduce_scatter"] == 16 // ep
        assert groups["dp_grad_reduce_scatter"] == 16


def test_trainer_mesh_and_overrides():
    lo = Layout(dp=8, ep=4, global_batch=16, zero_stage=0)
    assert mesh_axes(lo) == {"data": 2, "fsdp": 1, "tensor": 1, "expert": 4}
    assert moe_override(MoEConfig(experts=8, top_k=2)) == "{experts:8,top_k:2}"
    assert moe_override(MoEConfig(experts=64, top_k=1, capacity_factor=None, every=2)) == (
        "{experts:64,top_k:1,capacity_factor:null,every:2}"
    )
