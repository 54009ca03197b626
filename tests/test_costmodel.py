"""Unit tests of the analytic cost model: formulas against their published forms, invariants,
hardware catalogue and one-line errors."""

from __future__ import annotations

import dataclasses

import pytest

from models.base.errors import AnalysisError
from models.config import ModelConfig
from models.flops import non_embedding_param_count, param_count
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    Hardware,
    Layout,
    LayoutError,
    ModelShape,
    activation_bytes_per_layer,
    catalogue_names,
    estimate_step,
    load_hardware,
    validate_layout,
)
from sharding.costmodel.comm import collective_time, ranks_per_node

CATALOGUE = [
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "b200",
    "mi250x",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
]
LLAMA13B = ModelShape(n_layers=40, d_model=5120, n_heads=40, seq_len=2048, vocab_size=128000)
GPT = ModelShape(
    n_layers=24,
    d_model=2048,
    n_heads=16,
    seq_len=2048,
    vocab_size=51200,
    d_ff=4 * 2048,
    mlp="gelu",
    dropout=True,
)


def test_catalogue_complete_with_sources():
    assert set(CATALOGUE) <= set(catalogue_names())
    for name in CATALOGUE:
        hw = load_hardware(name)
        assert hw.peak_flops > 1e14 and hw.hbm_bytes > 1e10 and hw.devices_per_node >= 1
        for key in ("peak_flops", "hbm_bytes", "hbm_bw", "intra_node_bw", "inter_node_bw"):
            assert key in hw.sources, (name, key)


def test_alias_user_file_and_unknown_hardware(tmp_path):
    assert load_hardware("h100") == load_hardware("h100-sxm")
    a100 = load_hardware("a100-80gb")
    assert a100.devices_per_node == 8 and a100.inter_node_bw * 8 == pytest.approx(200e9)
    f = tmp_path / "mine.yaml"
    f.write_text(
        "peak_flops: 1e15\nhbm_bytes: 1e11\nhbm_bw: 4e12\ndevices_per_node: 4\n"
        "intra_node_bw: 4e11\ninter_node_bw: 5e10\n"
    )
    assert load_hardware(str(f)).name == "mine"
    with pytest.raises(AnalysisError, match="unknown hardware 'h900'.*a100-80gb"):
        load_hardware("h900")
    f.write_text("peak_flops: 1e15\n")
    with pytest.raises(AnalysisError, match="lacks"):
        load_hardware(str(f))


def test_param_count_matches_hagemann_sheets():
    # the sheets' MFU implies 14.00B / 33.77B / 66.86B parameters with a 128k vocabulary
    for (L, h, a), n in (((40, 5120, 40), 14.00e9), ((60, 6656, 52), 33.77e9), ((80, 8192, 64), 66.86e9)):
        s = ModelShape(n_layers=L, d_model=h, n_heads=a, seq_len=2048, vocab_size=128000)
        assert s.n_params == pytest.approx(n, rel=2e-3)


@pytest.mark.parametrize(
    "kw", [dict(), dict(n_kv_heads=2, tie_embeddings=True), dict(d_ff=320, vocab_size=1000, n_layers=3)]
)
def test_param_count_agrees_with_models_flops(kw):
    """ModelShape counts its own parameters (per component, for the stage split); for a shape the
    training model can build, the totals equal models.flops' (the one count of summary.json)."""
    cfg = ModelConfig(**{"d_model": 256, "n_heads": 8, "n_layers": 4, "vocab_size": 512, **kw})
    shape = ModelShape.from_model_config(cfg)
    assert shape.n_params == param_count(cfg)
    assert shape.n_params_non_embedding == non_embedding_param_count(cfg)


@pytest.mark.parametrize("t,sp", [(1, False), (2, False), (4, False), (4, True), (8, True)])
def test_activation_memory_reduces_to_korthikanti(t, sp):
    """GPT shape, dropout, fused softmax: sbh(10 + 24/t + 5as/(ht)) bytes per layer (no SP) and
    sbh/t·(34 + 5as/h) with SP — Korthikanti et al. 2022, Table 2 (fp16 masks of 1 byte)."""
    s, h, a, b = GPT.seq_len, GPT.d_model, GPT.n_heads, 1
    lo = Layout(tp=t, sp=sp, micro_batch=b, global_batch=8, attention="fused_softmax", fused_norm=True)
    got = activation_bytes_per_layer(GPT, lo)
    # our fused_softmax stores 2 bytes/score + 3 for dropout mask & output = 5as²b/t ✓
    sbh = s * b * h
    expect = sbh * (34 + 5 * a * s / h) / t if sp else sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert got == pytest.approx(expect, rel=1e-9)


def test_selective_recompute_drops_score_memory_only():
    lo = Layout(micro_batch=1, global_batch=8, attention="naive", fused_norm=True)
    full = activation_bytes_per_layer(GPT, lo)
    sel = activation_bytes_per_layer(GPT, lo, recompute_attention=True)
    assert full - sel == pytest.approx((6 + 3) * GPT.n_heads * GPT.seq_len**2)


def _est(model=LLAMA13B, hw="a100-80gb", **kw):
    base = dict(dp=64, tp=1, pp=1, micro_batch=1, global_batch=2048, zero_stage=1)
    base.update(kw)
    return estimate_step(model, Layout(**base), load_hardware(hw))


def test_zero_stages_shard_states_as_stated():
    z = {k: _est(zero_stage=k).memory for k in (0, 1, 2, 3)}
    n = LLAMA13B.n_params
    assert z[0].params == pytest.approx(2 * n) and z[0].optimizer == pytest.approx(12 * n)
    assert z[1].optimizer == pytest.approx(12 * n / 64) and z[1].grads == pytest.approx(2 * n)
    assert z[2].grads == pytest.approx(2 * n / 64)
    assert z[3].params == pytest.approx(2 * n / 64)


def test_pipeline_bubble_is_p_minus_1_over_m():
    for pp, mb in ((2, 1), (4, 2), (8, 1)):
        e = _est(dp=64 // pp, pp=pp, micro_batch=mb)
        m = e.layout.grad_accum
        assert e.time.bubble / (e.time.pipeline - e.time.bubble) == pytest.approx((pp - 1) / m)
    inter = _est(dp=16, pp=4, micro_batch=1, interleave=2)
    assert inter.time.bubble / (inter.time.pipeline - inter.time.bubble) == pytest.approx(
        3 / 2 / inter.layout.grad_accum
    )


def test_checkpointing_trades_memory_for_time_and_hfu():
    none, full = _est(dp=32, tp=2), _est(dp=32, tp=2, act_ckpt="full")
    assert full.memory.activations < 0.3 * none.memory.activations
    assert full.step_time_s > none.step_time_s
    assert full.hfu > full.mfu and none.hfu == pytest.approx(none.mfu)


def test_mfu_consistent_with_throughput():
    e = _est()
    flops_per_token = LLAMA13B.model_flops_per_token()
    assert e.mfu == pytest.approx(e.tokens_per_s * flops_per_token / (64 * 312e12))
    assert 0.2 < e.mfu < 0.8


def test_ring_collective_volume_and_links():
    hw = load_hardware("a100-80gb")
    t, wire, link = collective_time("all_reduce", 1e9, 8, 8, hw, 1.0)
    assert wire == pytest.approx(2 * 7 / 8 * 1e9) and link == "intra"
    assert t == pytest.approx(wire / 300e9 + 14 * hw.intra_node_latency_s)
    t2, _, link2 = collective_time("all_reduce", 1e9, 64, 8, hw, 1.0)
    assert link2 == "inter" and t2 > t  # 8 nodes: min(NVLink, 8 × 25 GB/s) = 200 GB/s
    assert ranks_per_node(hw, tp=8, dp=16, pp=1) == {"tp": 8, "cp": 1, "dp": 1, "pp": 1}
    assert ranks_per_node(hw, tp=2, dp=32, pp=2) == {"tp": 2, "cp": 1, "dp": 4, "pp": 1}
    # across nodes the ring is flat: each of its n − 1 steps waits for a network hop
    t3, wire3, _ = collective_time("all_gather", 1e9, 1536, 8, hw, (0.5, 0.25))
    assert t3 == pytest.approx(wire3 / (8 * 25e9 * 0.25) + 1535 * hw.inter_node_latency_s)
    t4, wire4, _ = collective_time("all_gather", 1e9, 8, 8, hw, (0.5, 0.25))  # NVLink at 0.5
    assert t4 == pytest.approx(wire4 / (300e9 * 0.5) + 7 * hw.intra_node_latency_s)


def test_zero3_collectives_per_weight_matrix_pay_more_latency_at_scale():
    """DeepSpeed/XLA ZeRO-3 gathers every weight matrix on its own (7 per SwiGLU layer with
    separate projections, 4 with fused), FSDP one flat parameter per layer: the same bytes, more
    ring latencies; at thousands of ranks and micro-batch 1 that is what makes ZeRO-3 slow, and
    per-GPU throughput falls as the same batch spreads over more GPUs."""
    hw = load_hardware("a100-80gb")
    m = ModelShape(
        n_layers=96,
        d_model=12288,
        n_heads=96,
        seq_len=2048,
        vocab_size=51200,
        d_ff=4 * 12288,
        mlp="gelu",
        tied_embeddings=True,
    )
    assert m.matrices_per_layer(True) == 4 and m.matrices_per_layer(False) == 6
    assert (
        ModelShape(n_layers=2, d_model=64, n_heads=2, seq_len=8, vocab_size=16).matrices_per_layer(False) == 7
    )
    lo = Layout(dp=1536, micro_batch=1, global_batch=1536, zero_stage=3, act_ckpt="full")
    per_matrix, per_layer = (estimate_step(m, lo.replace(zero3_per_matrix=f), hw) for f in (True, False))
    assert per_matrix.collective_bytes() == pytest.approx(per_layer.collective_bytes())
    assert per_matrix.time.dp_comm > per_layer.time.dp_comm
    mfus = [estimate_step(m, lo.replace(dp=n), hw).mfu for n in (384, 768, 1536)]
    assert mfus[0] > mfus[1] > mfus[2]


def test_dp_collectives_by_zero_stage():
    hw = "a100-80gb"
    n_bytes = 2 * LLAMA13B.n_params
    z0 = _est(hw=hw, zero_stage=0).collective_bytes()
    z1 = _est(hw=hw, zero_stage=1).collective_bytes()
    z3 = _est(hw=hw, zero_stage=3).collective_bytes()
    assert z0["all_reduce"] == pytest.approx(n_bytes)
    assert z1["reduce_scatter"] == pytest.approx(n_bytes) == z1["all_gather"]
    m = 2048 // 64
    assert z3["all_gather"] == pytest.approx(2 * m * n_bytes)  # fwd + bwd every micro-batch


def test_offload_moves_optimizer_off_device():
    on, off = _est(zero_stage=0), _est(zero_stage=0, offload_optimizer=True)
    assert off.memory.optimizer == 0 and on.memory.optimizer > 0
    assert off.time.optimizer > on.time.optimizer


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(dp=3, tp=2, pp=1, n=8), "does not match 8 devices; nearest valid mesh"),
        (dict(dp=8, tp=3, pp=1, n=None), "tp=3 must divide n_heads"),
        (dict(dp=7, tp=1, pp=1, n=None), "not divisible by dp"),
        (dict(dp=1, tp=1, pp=50, n=None), "exceeds n_layers"),
    ],
)
def test_impossible_layouts_are_one_line_errors(kw, msg):
    n = kw.pop("n")
    lo = Layout(micro_batch=1, global_batch=64, **kw)
    with pytest.raises(LayoutError, match=msg) as ei:
        validate_layout(LLAMA13B, lo, n)
    assert "\n" not in str(ei.value)


def test_bad_model_shape_errors():
    with pytest.raises(LayoutError, match="not divisible by n_heads"):
        ModelShape(n_layers=2, d_model=100, n_heads=3, seq_len=8, vocab_size=10)
    with pytest.raises(LayoutError, match="positive integer"):
        ModelShape(n_layers=0, d_model=128, n_heads=1, seq_len=8, vocab_size=10)


def test_efficiency_defaults_are_documented_fit():
    assert "Hagemann" in DEFAULT_EFFICIENCY.provenance
    assert 0 < DEFAULT_EFFICIENCY.gemm_eff_max < 1 and 0 < DEFAULT_EFFICIENCY.link_eff <= 1
    assert dataclasses.is_dataclass(BF16_MIXED)


def test_pipeline_send_over_a_shared_adapter():
    """With one network adapter per node (cloud instances), a device that sends alone gets the
    whole adapter; with one per device (DGX), its own; `nics_per_node` must be a positive int."""
    from sharding.costmodel.comm import p2p_time

    dgx = load_hardware("a100-80gb")
    one_nic = dataclasses.replace(dgx, nics_per_node=1)
    t_dgx = p2p_time(1e8, False, dgx, 1.0, senders=1)
    assert t_dgx == pytest.approx(1e8 / 25e9 + dgx.inter_node_latency_s)
    alone = p2p_time(1e8, False, one_nic, 1.0, senders=1)
    assert alone == pytest.approx(1e8 / 200e9 + dgx.inter_node_latency_s)
    assert p2p_time(1e8, False, one_nic, 1.0, senders=8) == pytest.approx(t_dgx)  # all 8 share it
    with pytest.raises(LayoutError, match="nics_per_node must be a positive integer"):
        Hardware.from_mapping(
            {
                "peak_flops": 1e12,
                "hbm_bytes": 1e9,
                "hbm_bw": 1e9,
                "devices_per_node": 4,
                "intra_node_bw": 1e9,
                "inter_node_bw": 1e9,
                "nics_per_node": 0,
            }
        )
