"""One training step on one device: compute, communication, pipeline schedule, memory.

Time of a step under (interleaved) 1F1B with m micro-batches and p stages:

    slot  = max over stages (fwd + bwd [+ recompute] + TP collectives + launch overhead) + PP p2p
    step  = (m + (p − 1)/v) · slot · jitter(p)  +  exposed DP collectives  +  optimizer step

GEMMs run at a size-dependent fraction of peak, attention at a kernel-specific fraction, and
element-wise ops are bound by HBM bandwidth. MFU uses the PaLM model-FLOP convention
(`ModelShape.model_flops_per_token`); HFU adds recomputation.
"""

from __future__ import annotations

import dataclasses
import math

from sharding.costmodel.comm import Collective, make_collective, p2p_time, ranks_per_node
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from sharding.costmodel.hardware import Hardware
from sharding.costmodel.memory import MemoryBreakdown, memory_breakdown, stage_params
from sharding.costmodel.spec import BF16_MIXED, Layout, ModelShape, Precision, validate_layout

# E[max of p i.i.d. standard normals] (Tippett 1925), interpolated as sqrt(2 ln p) beyond 16.
_EXPECTED_MAX = {1: 0.0, 2: 0.5642, 4: 1.0294, 8: 1.4236, 16: 1.7660}


def expected_max_normal(p: int) -> float:
    if p in _EXPECTED_MAX:
        return _EXPECTED_MAX[p]
    if p < 16:
        lo = max(k for k in _EXPECTED_MAX if k <= p)
        hi = min(k for k in _EXPECTED_MAX if k >= p)
        w = (math.log(p) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return _EXPECTED_MAX[lo] + w * (_EXPECTED_MAX[hi] - _EXPECTED_MAX[lo])
    return math.sqrt(2 * math.log(p)) - 0.3


@dataclasses.dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per step. `*_per_microbatch` are for one micro-batch on the slowest stage."""

    gemm_per_microbatch: float
    attention_per_microbatch: float
    elementwise_per_microbatch: float
    overhead_per_microbatch: float
    tp_comm_per_microbatch: float
    pp_p2p_per_microbatch: float
    slot: float
    pipeline: float
    bubble: float
    dp_comm: float
    dp_comm_exposed: float
    optimizer: float
    step: float


@dataclasses.dataclass(frozen=True)
class StepEstimate:
    """Everything the model predicts for one optimizer step on one device."""

    model: ModelShape
    layout: Layout
    hardware: Hardware
    memory: MemoryBreakdown
    time: TimeBreakdown
    collectives: tuple[Collective, ...]
    model_flops: float  # per step, whole cluster
    hardware_flops: float  # incl. recomputation

    @property
    def step_time_s(self) -> float:
        return self.time.step

    @property
    def tokens_per_step(self) -> int:
        return self.layout.global_batch * self.model.seq_len

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_time_s * self.layout.n_devices * self.hardware.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time_s * self.layout.n_devices
                                      * self.hardware.peak_flops)

    @property
    def mem_bytes_per_device(self) -> float:
        return self.memory.total

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def collective_bytes(self) -> dict[str, float]:
        """Per device per step: buffer bytes summed over calls, by collective kind."""
        out: dict[str, float] = {}
        for c in self.collectives:
            out[c.kind] = out.get(c.kind, 0.0) + c.buffer_bytes * c.count
        return out

    def summary(self) -> dict[str, float | bool | str]:
        return {"step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "mfu": self.mfu, "hfu": self.hfu, "mem_gb_per_device": self.memory.total / 1e9,
                "fits": self.fits, "bubble_s": self.time.bubble,
                "dp_comm_exposed_s": self.time.dp_comm_exposed}


def _gemm_eff(eff: Efficiency, *dims: float) -> float:
    x = min(dims)
    return eff.gemm_eff_max * x / (x + eff.gemm_half_dim)


def estimate_step(model: ModelShape, layout: Layout, hardware: Hardware,
                  precision: Precision = BF16_MIXED,
                  eff: Efficiency = DEFAULT_EFFICIENCY) -> StepEstimate:
    """Predict memory and time of one optimizer step (raises `LayoutError` if impossible)."""
    validate_layout(model, layout)
    m, lo, hw = model, layout, hardware
    t, p, v, dp = lo.tp, lo.pp, lo.interleave, lo.dp
    sp = lo.sp and t > 1
    n_mb = lo.grad_accum
    s, b, h, f, V = m.seq_len, lo.micro_batch, m.d_model, m.ffn, m.vocab_size
    tok = s * b
    peak = hw.peak_flops
    ab = precision.act_bytes
    layers = math.ceil(m.n_layers / p)  # uneven splits: the fullest stage sets the pace
    full = lo.act_ckpt == "full"
    flash = lo.attention in ("flash1", "flash2")

    # ---- GEMMs of one layer (fwd FLOPs, device-local), time for fwd+bwd(+recompute) --------
    n_mlp_in = 2 * f if m.mlp == "swiglu" else f
    gemms = [(tok, (h + 2 * m.kv_dim) / t, h), (tok, h, h / t), (tok, n_mlp_in / t, h),
             (tok, h, f / t)]
    fwd_passes = 2.0 if full else 1.0  # full checkpointing re-runs the forward
    layer_gemm_flops = sum(2 * a * c * d for a, c, d in gemms)
    layer_gemm_time = sum(2 * a * c * d * (fwd_passes + 2) / (peak * _gemm_eff(eff, a, c, d))
                          for a, c, d in gemms)
    head_flops = 2 * tok * V / t * h
    head_time = 3 * head_flops / (peak * _gemm_eff(eff, tok, V / t, h))

    # ---- attention core -----------------------------------------------------------------------
    heads = m.n_heads / t
    attn_fwd_flops = 4 * b * s * s * m.head_dim * heads  # QK^T and AV, non-causal
    attn_recompute = 1.0 if (full or lo.act_ckpt == "selective") and not flash else 0.0
    attn_passes = fwd_passes + 2 if full else 3 + attn_recompute
    if flash:
        kernel_eff = eff.flash2_eff if lo.attention == "flash2" else eff.flash1_eff
        attn_time = 0.5 * attn_fwd_flops * attn_passes / (peak * kernel_eff)  # causal: half
    else:
        bmm_eff = _gemm_eff(eff, s, s, m.head_dim)
        traffic = eff.score_traffic_naive if lo.attention == "naive" else eff.score_traffic_fused
        scores = heads * s * s * b
        attn_time = (attn_fwd_flops * attn_passes / (peak * bmm_eff)
                     + traffic * scores * attn_passes / 3 / hw.hbm_bw)

    # ---- element-wise (HBM-bound) -------------------------------------------------------------
    rep = 1.0 / t if sp else 1.0
    elem_h = eff.elem_bytes_h + (0.0 if lo.fused_norm else eff.elem_bytes_h_unfused_norm)
    elem_bytes = tok * (h * elem_h * rep + f * eff.elem_bytes_f / t)
    elem_time = elem_bytes * (fwd_passes + 2) / 3 / hw.hbm_bw
    overhead = eff.layer_overhead_s * (fwd_passes + 2) / 3

    # ---- tensor-parallel collectives ------------------------------------------------------------
    # Per layer: forward reduces the outputs of the attention and MLP row-parallel matmuls (2);
    # backward reduces the input gradients of the column-parallel matmuls: 2 when QKV and
    # gate/up are fused, 3 (q, k, v) + 2 (gate, up) when they are separate. Full recompute
    # repeats the forward's 2. Per micro-batch: vocab-parallel embedding (fwd) and head input
    # gradient (bwd) reduce a (tokens, d_model) tensor, and the vocab-parallel softmax reduces
    # its max and sum (tokens fp32 values each).
    g = ranks_per_node(hw, t, dp, p)
    colls: list[Collective] = []
    act_buf = tok * h * ab
    bwd_calls = 2 if lo.fused_projections else (3 + (2 if m.mlp == "swiglu" else 1))
    tp_calls_per_layer = 2 * fwd_passes + bwd_calls
    tp_time_layer = 0.0
    tp_time_edge = 0.0  # embedding + head + softmax statistics, once per micro-batch
    if t > 1:
        kinds = (("all_gather", "reduce_scatter") if sp else ("all_reduce",))
        layer_calls = tp_calls_per_layer * m.n_layers / p * n_mb
        for kind in kinds:
            c = make_collective(f"tp_{kind}", kind, act_buf, layer_calls, t, g["tp"], hw,
                                eff.link_eff)
            colls.append(c)
            tp_time_layer += c.time_s / layer_calls * tp_calls_per_layer
        for name, kind, buf, calls in (("tp_embed_head", "all_reduce", act_buf, 2),
                                       ("tp_softmax_stats", "all_reduce", tok * 4.0, 2)):
            c = make_collective(name, kind, buf, calls * n_mb, t, g["tp"], hw, eff.link_eff)
            colls.append(c)
            tp_time_edge += c.time_s / n_mb
    tp_exposed_layer = tp_time_layer * (1 - eff.tp_overlap)

    # ---- one micro-batch on the slowest stage ---------------------------------------------------
    per_layer = layer_gemm_time + attn_time + elem_time + overhead + tp_exposed_layer
    loss_traffic = tok * V / t * 16.0 / hw.hbm_bw  # fp32 softmax + grad of the logits
    last_extra = head_time + loss_traffic
    stage_time = layers * per_layer + last_extra + tp_time_edge * (1 - eff.tp_overlap)
    p2p = 0.0
    if p > 1:
        same_node = g["pp"] >= p
        p2p_bytes = act_buf / t  # Megatron scatter/gather: each TP rank sends its 1/t
        p2p = 2 * v * p2p_time(p2p_bytes, same_node, hw, eff.link_eff)
        colls.append(Collective("pp_p2p", "p2p", 2, p2p_bytes, 2 * v * n_mb, 2 * v * n_mb * p2p_bytes,
                                p2p * n_mb, "intra" if same_node else "inter"))
    jitter = 1 + eff.stage_jitter * expected_max_normal(p)
    slot = (stage_time + p2p) * jitter
    pipeline = (n_mb + (p - 1) / v) * slot
    bubble = (p - 1) / v * slot

    # ---- data-parallel gradient / parameter collectives ----------------------------------------
    n_stage = max(stage_params(m, lo))
    grad_buf = n_stage * precision.reduce_bytes
    param_buf = n_stage * precision.param_bytes
    dp_time = 0.0
    if dp > 1:
        if lo.zero_stage == 0:
            specs = [("dp_grad_all_reduce", "all_reduce", grad_buf, 1)]
        elif lo.zero_stage in (1, 2):
            specs = [("dp_grad_reduce_scatter", "reduce_scatter", grad_buf, 1),
                     ("dp_param_all_gather", "all_gather", param_buf, 1)]
        else:  # ZeRO-3/FSDP: gather weights for fwd and bwd, scatter grads, every micro-batch
            gathers = 2 if lo.zero3_regather else 1
            specs = [("dp_param_all_gather", "all_gather", param_buf, gathers * n_mb),
                     ("dp_grad_reduce_scatter", "reduce_scatter", grad_buf, n_mb)]
        for name, kind, buf, count in specs:
            c = make_collective(name, kind, buf, count, dp, g["dp"], hw, eff.link_eff)
            colls.append(c)
            dp_time += c.time_s
    bwd_window = stage_time * 2 / (fwd_passes + 2)
    if lo.zero_stage >= 3:  # per-micro-batch collectives hide behind every micro-batch
        dp_exposed = n_mb * max(0.0, dp_time / n_mb - eff.dp_overlap * stage_time)
    else:
        dp_exposed = max(0.0, dp_time - eff.dp_overlap * bwd_window)

    # ---- optimizer step (HBM-bound Adam over the local shard, or on the host) ----------------
    shard = n_stage / (dp if lo.zero_stage >= 1 else 1)
    state_bytes = precision.master_bytes + precision.optimizer_bytes
    if lo.offload_optimizer:
        opt_time = (shard * eff.cpu_adam_s_per_param
                    + shard * (precision.grad_bytes + precision.param_bytes) / hw.host_bw)
    else:
        opt_time = shard * (2 * state_bytes + precision.grad_bytes + 2 * precision.param_bytes) \
            / hw.hbm_bw

    step = pipeline + dp_exposed + opt_time
    tokens = lo.global_batch * s
    model_flops = tokens * m.model_flops_per_token()
    recompute_per_token = 0.0
    if full:
        recompute_per_token = m.n_layers * (layer_gemm_flops * t / tok + attn_fwd_flops * t / tok)
    elif attn_recompute:
        recompute_per_token = m.n_layers * attn_fwd_flops * t / tok
    hardware_flops = model_flops + tokens * recompute_per_token

    mem = memory_breakdown(m, lo, precision, eff, hw.hbm_bytes)
    times = TimeBreakdown(
        gemm_per_microbatch=layers * layer_gemm_time + head_time,
        attention_per_microbatch=layers * attn_time,
        elementwise_per_microbatch=layers * elem_time + loss_traffic,
        overhead_per_microbatch=layers * overhead,
        tp_comm_per_microbatch=layers * tp_time_layer + tp_time_edge,
        pp_p2p_per_microbatch=p2p, slot=slot, pipeline=pipeline, bubble=bubble, dp_comm=dp_time,
        dp_comm_exposed=dp_exposed, optimizer=opt_time, step=step)
    return StepEstimate(model=m, layout=lo, hardware=hw, memory=mem, time=times,
                        collectives=tuple(colls), model_flops=model_flops,
                        hardware_flops=hardware_flops)
