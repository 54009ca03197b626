"""One training step on one device: compute, communication, pipeline schedule, memory.

Time of a step under (interleaved) 1F1B or breadth-first with m micro-batches and p stages:

    slot  = max over stages (fwd + bwd [+ recompute] + TP collectives + launch overhead) + PP p2p
    step  = (m + (p − 1)/v) · slot · jitter(p)  +  exposed DP collectives  +  optimizer step

GEMMs run at a size-dependent fraction of peak, attention at a kernel-specific fraction, and
element-wise ops are bound by HBM bandwidth. MFU uses the PaLM model-FLOP convention
(`ModelShape.model_flops_per_token`, `MFU_CONVENTION` = models.flops.MFU_PALM); HFU adds
recomputation.
"""

from __future__ import annotations

import dataclasses
import math

from models.flops import MFU_PALM
from sharding.costmodel.comm import (
    Collective,
    CollectiveKind,
    Link,
    make_collective,
    p2p_time,
    ranks_per_node,
)
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from sharding.costmodel.hardware import Hardware
from sharding.costmodel.memory import (
    MemoryBreakdown,
    expert_zero_shards,
    layer_params_on_device,
    memory_breakdown,
    stage_expert_params,
    stage_params,
)
from sharding.costmodel.spec import (
    BF16_MIXED,
    FLASH_KERNELS,
    ActCkpt,
    Layout,
    LayoutAttention,
    ModelShape,
    Precision,
    ZeroStage,
    expert_slots,
    validate_layout,
)

# The FLOPs the cost model's MFU counts (models/flops.py: MFU_CONVENTIONS); the training loop's
# MFU counts causal attention (MFU_CAUSAL), so the two differ for the same run.
MFU_CONVENTION = MFU_PALM

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
        """Model FLOPs utilisation under `MFU_CONVENTION` (PaLM's 6N + 12LHQT)."""
        return self.model_flops / (self.step_time_s * self.layout.n_devices * self.hardware.peak_flops)

    @property
    def mfu_convention(self) -> str:
        return MFU_CONVENTION

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time_s * self.layout.n_devices * self.hardware.peak_flops)

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
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "mfu_convention": MFU_CONVENTION,
            "hfu": self.hfu,
            "mem_gb_per_device": self.memory.total / 1e9,
            "fits": self.fits,
            "bubble_s": self.time.bubble,
            "dp_comm_exposed_s": self.time.dp_comm_exposed,
        }


def _gemm_eff(eff: Efficiency, *dims: float) -> float:
    """Fraction of peak a GEMM reaches: saturating in its smallest dimension."""
    x = min(dims)
    return eff.gemm_eff_max * x / (x + eff.gemm_half_dim)


@dataclasses.dataclass(frozen=True)
class _Step:
    """Inputs of one step estimate plus the quantities every term needs, derived once."""

    m: ModelShape
    lo: Layout
    hw: Hardware
    precision: Precision
    eff: Efficiency
    tok: int  # tokens of one micro-batch on one device (seq_len · micro_batch / cp)
    layers: int  # layers on the fullest pipeline stage (uneven splits: it sets the pace)
    fwd_passes: float  # forward passes per micro-batch: 2 when full checkpointing re-runs it
    sp: bool  # sequence parallelism in effect (needs tp > 1)
    full: bool  # full activation checkpointing
    flash: bool  # a flash-attention kernel (no score matrix in HBM)
    ranks: dict[str, int]  # members of each TP / CP / DP / PP group that share a node
    # collectives per micro-batch slot: the GSPMD pipeline computes (and communicates) on its
    # M·V + P − 1 ticks, bubble included, i.e. (M·V + P − 1)/(M·V) times per useful slot; the
    # bubble's time is already in the pipeline formula, so only byte counts use this
    tick_factor: float

    @classmethod
    def of(
        cls, model: ModelShape, layout: Layout, hardware: Hardware, precision: Precision, eff: Efficiency
    ) -> "_Step":
        full = layout.act_ckpt == ActCkpt.FULL
        mv = layout.grad_accum * layout.interleave
        tick_factor = (mv + layout.pp - 1) / mv if layout.gspmd_pipeline and layout.pp > 1 else 1.0
        return cls(
            m=model,
            lo=layout,
            hw=hardware,
            precision=precision,
            eff=eff,
            tok=model.seq_len * layout.micro_batch // layout.cp,
            layers=math.ceil(model.n_layers / layout.pp),
            fwd_passes=2.0 if full else 1.0,
            sp=layout.sp and layout.tp > 1,
            full=full,
            flash=layout.attention in FLASH_KERNELS,
            ranks=ranks_per_node(hardware, layout.tp, layout.dp, layout.pp, layout.cp, layout.ep),
            tick_factor=tick_factor,
        )


def _gemm_terms(st: _Step) -> tuple[float, float, float]:
    """(forward GEMM FLOPs of one layer, device-local; fwd+bwd(+recompute) time of those GEMMs;
    time of the LM-head GEMMs, once per micro-batch on the last stage)."""
    m, t, peak, eff, tok = st.m, st.lo.tp, st.hw.peak_flops, st.eff, st.tok
    h, f, V = m.d_model, m.ffn, m.vocab_size
    n_mlp_in = 2 * f if m.gated else f
    gemms = [(tok, (h + 2 * m.kv_dim) / t, h), (tok, h, h / t), (tok, n_mlp_in / t, h), (tok, h, f / t)]
    layer_gemm_flops = sum(2 * a * c * d for a, c, d in gemms)
    layer_gemm_time = sum(
        2 * a * c * d * (st.fwd_passes + 2) / (peak * _gemm_eff(eff, a, c, d)) for a, c, d in gemms
    )
    if m.moe is not None:  # the mean layer: a routed MLP's GEMMs in place of the dense MLP's
        w = m.moe_layers / m.n_layers
        dense = [(tok, n_mlp_in / t, h), (tok, h, f / t)]
        for sign, terms in ((-1.0, [(g, 1.0) for g in dense]), (1.0, _moe_gemms(st))):
            for (a, c, d), e_dim in terms:
                layer_gemm_flops += sign * w * 2 * a * c * d
                eff_dims = (a * e_dim, c, d)  # the GEMM of one expert: its share of the token slots
                layer_gemm_time += (
                    sign * w * 2 * a * c * d * (st.fwd_passes + 2) / (peak * _gemm_eff(eff, *eff_dims))
                )
    head_flops = 2 * tok * V / t * h
    head_time = 3 * head_flops / (peak * _gemm_eff(eff, tok, V / t, h))
    return layer_gemm_flops, layer_gemm_time, head_time


def _moe_gemms(st: _Step) -> list[tuple[tuple[float, float, float], float]]:
    """A routed MLP's GEMMs on one device, one micro-batch, forward: ((m, n, k), the share of the m
    rows one GEMM call sees). The router (tokens x routed experts x d_model); the routed experts
    over the device's token slots (each token's top_k choices padded to capacity; balanced, every
    device computes as many slots as it sends), each local expert a GEMM of ep / routed_experts of
    them; the shared experts over every token. Expert hidden widths split over tp."""
    m, t, tok = st.m, st.lo.tp, st.tok
    moe, h, fe = m.moe, m.d_model, m.expert_ffn
    slots = tok * moe.routed_top_k * expert_slots(moe)
    per_expert = st.lo.ep / moe.routed_experts
    n_in = 2 * fe if m.gated else fe
    out = [
        ((tok, moe.routed_experts, h), 1.0),
        ((slots, n_in / t, h), per_expert),
        ((slots, h, fe / t), per_expert),
    ]
    if moe.shared_experts:
        s = moe.shared_experts
        out += [((tok, s * n_in / t, h), 1.0), ((tok, h, s * fe / t), 1.0)]
    return out


def _attention_terms(st: _Step) -> tuple[float, float, float]:
    """(forward FLOPs of one layer's attention core (QK^T and AV, non-causal); 1.0 when
    checkpointing recomputes the non-flash core, else 0.0; its time per micro-batch).

    Flash kernels skip the masked half (causal) and run at a kernel-specific fraction of peak;
    unfused kernels run batched GEMMs and also move the score matrix through HBM.
    """
    m, lo, hw, eff = st.m, st.lo, st.hw, st.eff
    s, b, peak = m.seq_len, lo.micro_batch, hw.peak_flops
    heads = m.n_heads / lo.tp
    attn_fwd_flops = 4 * b * (s / lo.cp) * s * m.head_dim * heads  # cp: L/cp queries, all keys
    attn_recompute = 1.0 if (st.full or lo.act_ckpt == ActCkpt.SELECTIVE) and not st.flash else 0.0
    attn_passes = st.fwd_passes + 2 if st.full else 3 + attn_recompute
    if st.flash:
        kernel_eff = eff.flash2_eff if lo.attention == LayoutAttention.FLASH2 else eff.flash1_eff
        attn_time = 0.5 * attn_fwd_flops * attn_passes / (peak * kernel_eff)  # causal: half
    else:
        bmm_eff = _gemm_eff(eff, s / lo.cp, s, m.head_dim)
        traffic = (
            eff.score_traffic_naive if lo.attention == LayoutAttention.NAIVE else eff.score_traffic_fused
        )
        scores = heads * (s / lo.cp) * s * b
        attn_time = (
            attn_fwd_flops * attn_passes / (peak * bmm_eff) + traffic * scores * attn_passes / 3 / hw.hbm_bw
        )
    return attn_fwd_flops, attn_recompute, attn_time


def _elementwise_terms(st: _Step) -> tuple[float, float]:
    """(HBM-bound element-wise time of one layer (norms, activations, residuals; 1/tp of the
    d_model-wide traffic under sequence parallelism); fixed per-layer launch overhead)."""
    m, lo, eff = st.m, st.lo, st.eff
    rep = 1.0 / lo.tp if st.sp else 1.0
    elem_h = eff.elem_bytes_h + (0.0 if lo.fused_norm else eff.elem_bytes_h_unfused_norm)
    elem_bytes = st.tok * (m.d_model * elem_h * rep + m.ffn * eff.elem_bytes_f / lo.tp)
    if m.moe is not None:
        # a routed layer's hidden work is its token slots' and the shared experts', and it moves
        # every slot to its expert and back (a permutation: read and write, both ways)
        moe, w = m.moe, m.moe_layers / m.n_layers
        slots = moe.routed_top_k * expert_slots(moe)
        width = (slots + moe.shared_experts) * m.expert_ffn
        elem_bytes += (
            w
            * st.tok
            * (
                (width - m.ffn) * eff.elem_bytes_f / lo.tp
                + 4 * slots * m.d_model * st.precision.act_bytes * rep
            )
        )
    elem_time = elem_bytes * (st.fwd_passes + 2) / 3 / st.hw.hbm_bw
    overhead = eff.layer_overhead_s * (st.fwd_passes + 2) / 3
    return elem_time, overhead


def _layer_collectives(
    st: _Step, prefix: str, buf: float, per_layer: dict[str, float], n: int, g: int
) -> tuple[list[Collective], float]:
    """(collectives issued `per_layer[kind]` times per layer per micro-batch over a group of n
    ranks, g of them per node, on every layer of the stage and every micro-batch (bubble ticks
    of the GSPMD pipeline included); their time per layer per micro-batch)."""
    n_mb = st.lo.grad_accum * st.tick_factor
    colls, t_layer = [], 0.0
    for kind, calls_per_layer in per_layer.items():
        calls = calls_per_layer * st.m.n_layers / st.lo.pp * n_mb
        c = make_collective(f"{prefix}_{kind}", kind, buf, calls, n, g, st.hw, st.eff.link_effs)
        colls.append(c)
        t_layer += c.time_s / calls * calls_per_layer
    return colls, t_layer


def _tp_collectives(st: _Step) -> tuple[list[Collective], float, float]:
    """(TP collectives of the step; their time per layer per micro-batch; the embedding / head /
    softmax-statistics collectives' time per micro-batch), before overlap.

    Per layer: forward reduces the outputs of the attention and MLP row-parallel matmuls (2);
    backward reduces the input gradients of the column-parallel matmuls: 2 when QKV and
    gate/up are fused, 3 (q, k, v) + 2 (gate, up) when they are separate. Full recompute
    repeats the forward's 2. Under sequence parallelism each all-reduce becomes a
    reduce-scatter, and the column-parallel inputs are all-gathered: 2 in forward (+2 when
    recomputed), 2 in backward (the row-parallel output gradients), + 2 when backward gathers
    the inputs again for the weight gradients (`sp_bwd_regather`, Megatron-LM). Per
    micro-batch: vocab-parallel embedding (fwd) and head input gradient (bwd) reduce a (tokens,
    d_model) tensor, and the vocab-parallel softmax reduces its max and sum (tokens fp32
    values each). The GSPMD pipeline runs them on bubble ticks too (`tick_factor`).
    """
    m, lo, hw, eff, t = st.m, st.lo, st.hw, st.eff, st.lo.tp
    if t <= 1:
        return [], 0.0, 0.0
    n_mb = lo.grad_accum * st.tick_factor
    act_buf = st.tok * m.d_model * st.precision.act_bytes
    bwd_calls = 2 if lo.fused_projections else (3 + (2 if m.gated else 1))
    if st.sp:
        gathers = 2 * st.fwd_passes + 2 + (2 if lo.sp_bwd_regather else 0)
        per_layer = {
            CollectiveKind.ALL_GATHER: gathers,
            CollectiveKind.REDUCE_SCATTER: 2 * st.fwd_passes + bwd_calls,
        }
    else:
        per_layer = {CollectiveKind.ALL_REDUCE: 2 * st.fwd_passes + bwd_calls}
    colls, tp_time_layer = _layer_collectives(st, "tp", act_buf, per_layer, t, st.ranks["tp"])
    tp_time_edge = 0.0
    for name, kind, buf, calls in (
        ("tp_embed_head", CollectiveKind.ALL_REDUCE, act_buf, 2),
        ("tp_softmax_stats", CollectiveKind.ALL_REDUCE, st.tok * 4.0, 2),
    ):
        c = make_collective(name, kind, buf, calls * n_mb, t, st.ranks["tp"], hw, eff.link_effs)
        colls.append(c)
        tp_time_edge += c.time_s / n_mb
    return colls, tp_time_layer, tp_time_edge


def _ep_collectives(st: _Step) -> tuple[list[Collective], float]:
    """(expert-parallel all-to-alls of the step, their time per layer per micro-batch; the mean
    layer: routed layers' calls spread over all layers).

    Per routed layer and micro-batch the tokens' expert slots go to their experts' ranks and back:
    dispatch and combine in forward (again when full checkpointing recomputes it) and their
    gradients in backward, each an all-to-all over the ep ranks of a buffer of tokens x top_k x
    capacity factor x d_model activations (1/tp of them per rank under sequence parallelism)."""
    m, lo = st.m, st.lo
    if m.moe is None or lo.ep <= 1:
        return [], 0.0
    moe = m.moe
    rep = 1.0 / lo.tp if st.sp else 1.0
    buf = st.tok * moe.routed_top_k * expert_slots(moe) * m.d_model * st.precision.act_bytes * rep
    calls = (2 * st.fwd_passes + 2) * m.moe_layers / m.n_layers
    return _layer_collectives(st, "ep", buf, {CollectiveKind.ALL_TO_ALL: calls}, lo.ep, st.ranks["ep"])


def _pp_p2p(st: _Step) -> tuple[float, Collective | None]:
    """(send + receive time between neighbouring stages per micro-batch, the step's p2p
    collective); Megatron scatter/gather: each TP rank sends its 1/tp of the activations.
    GSPMD pipeline: every tick, stages 0..P−2 send their whole buffer forward and stages
    1..P−1 its gradient backward; the count is the mean over devices, (P − 1)/P per tick."""
    lo, p, v = st.lo, st.lo.pp, st.lo.interleave
    if p <= 1:
        return 0.0, None
    n_mb = lo.grad_accum
    same_node = st.ranks["pp"] >= p
    p2p_bytes = st.tok * st.m.d_model * st.precision.act_bytes / (1 if lo.gspmd_pipeline else lo.tp)
    sends = 2 * v * (st.tick_factor * (p - 1) / p if lo.gspmd_pipeline else 1.0)
    p2p = sends * p2p_time(
        p2p_bytes, same_node, st.hw, st.eff.link_effs, lo.tp * lo.cp * lo.dp
    )  # a stage's devices send at once
    coll = Collective(
        "pp_p2p",
        CollectiveKind.P2P,
        2,
        p2p_bytes,
        sends * n_mb,
        sends * n_mb * p2p_bytes,
        p2p * n_mb,
        Link.INTRA if same_node else Link.INTER,
    )
    return p2p, coll


def _cp_collectives(st: _Step) -> tuple[list[Collective], float]:
    """(context-parallel collectives of the step, their time per layer per micro-batch).

    sharding/context.py: every layer all-gathers K and V over the cp ranks in forward (again
    when full checkpointing recomputes it) and reduce-scatters their gradients in backward;
    the buffer is one full-length K (or V) of the micro-batch on one TP rank."""
    m, lo = st.m, st.lo
    if lo.cp <= 1:
        return [], 0.0
    kv_buf = lo.micro_batch * m.seq_len * m.kv_dim / lo.tp * st.precision.act_bytes
    return _layer_collectives(
        st,
        "cp_kv",
        kv_buf,
        {CollectiveKind.ALL_GATHER: 2 * st.fwd_passes, CollectiveKind.REDUCE_SCATTER: 2},
        lo.cp,
        st.ranks["cp"],
    )


def _pipeline(st: _Step, stage_time: float, p2p: float) -> tuple[float, float, float]:
    """(slot, pipeline time, bubble) of (interleaved) 1F1B: slot = the slowest stage's
    micro-batch incl. p2p, stretched by the expected max of p stages' jitter;
    pipeline = (m + (p − 1)/v) slots, of which (p − 1)/v are bubble."""
    p, v, eff = st.lo.pp, st.lo.interleave, st.eff
    jitter = 1 + eff.stage_jitter * expected_max_normal(p)
    slot = (stage_time + p2p) * jitter
    pipeline = (st.lo.grad_accum + (p - 1) / v) * slot
    bubble = (p - 1) / v * slot
    return slot, pipeline, bubble


ZERO3_GATHER, ZERO3_SCATTER = "dp_param_all_gather", "dp_grad_reduce_scatter"


def _zero3_rounds(st: _Step) -> int:
    """How often per step ZeRO-3 gathers every weight of the stage: once per micro-batch, or
    once per step under the breadth-first schedule."""
    return 1 if st.lo.breadth_first else st.lo.grad_accum


def _dp_collective_specs(st: _Step, n_stage: float) -> list[tuple[str, str, float, float, int, int]]:
    """(name, kind, buffer bytes, calls per step, group size, its members per node) of the DP
    collectives of the ZeRO stage. Hybrid sharding (`zero_group` < dp): the sharded collectives
    run within a group, and each rank's gradient shard is all-reduced across the dp / group
    replicas once per step."""
    lo, precision = st.lo, st.precision
    grad_buf = n_stage * precision.reduce_bytes
    param_buf = n_stage * precision.param_bytes
    f = lo.zero_shards if lo.zero_stage else lo.dp
    g = min(f, st.ranks["dp"])
    # context parallelism: the cp ranks see other tokens of the same sequences, so gradients are
    # reduced over them too: jointly with dp (one group of f·cp) or in a collective of their own
    joint = lo.cp > 1 and lo.cp_joint_grad_reduce
    fr, gr = (f * lo.cp, g * st.ranks["cp"]) if joint else (f, g)
    if lo.zero_stage == ZeroStage.NONE and lo.gspmd_pipeline and lo.pp > 1:
        # XLA reduces each tick's chunk weight gradients inside the tick loop (M·V + P − 1
        # times a chunk of L/(P·V) layers), the embedding / head / final norm once after it
        ticks = lo.grad_accum * lo.interleave + lo.pp - 1
        layer = layer_params_on_device(st.m, lo)
        chunk = math.ceil(st.m.n_layers / (lo.pp * lo.interleave)) * layer / lo.tp
        rest = n_stage - st.m.n_layers * layer / lo.tp
        specs = [
            ("dp_grad_all_reduce", CollectiveKind.ALL_REDUCE, rest * precision.reduce_bytes, 1, fr, gr),
            (
                "dp_grad_all_reduce_per_tick",
                CollectiveKind.ALL_REDUCE,
                chunk * precision.reduce_bytes,
                ticks,
                fr,
                gr,
            ),
        ]
    elif lo.zero_stage == ZeroStage.NONE:
        specs = [("dp_grad_all_reduce", CollectiveKind.ALL_REDUCE, grad_buf, 1, fr, gr)]
    elif lo.zero_stage in (ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS):
        specs = [
            ("dp_grad_reduce_scatter", CollectiveKind.REDUCE_SCATTER, grad_buf, 1, fr, gr),
            ("dp_param_all_gather", CollectiveKind.ALL_GATHER, param_buf, 1, f, g),
        ]
    else:  # ZeRO-3/FSDP: gather weights for fwd and bwd, scatter grads, every micro-batch,
        # one collective per weight matrix (DeepSpeed, XLA) or per layer (FSDP units): each pays
        # the ring's latency, which dominates at thousands of ranks and micro-batch 1.
        # Breadth-first: all micro-batches pass a chunk while its weights are gathered, so each
        # is gathered (and its gradient scattered) once per step (Lamy-Poirier 2022, §4)
        gathers = 2 if lo.zero3_regather else 1
        k = max(1, st.layers) * (st.m.matrices_per_layer(lo.fused_projections) if lo.zero3_per_matrix else 1)
        rounds = _zero3_rounds(st)
        specs = [
            (ZERO3_GATHER, CollectiveKind.ALL_GATHER, param_buf / k, gathers * rounds * k, f, g),
            (ZERO3_SCATTER, CollectiveKind.REDUCE_SCATTER, grad_buf / k, rounds * k, fr, gr),
        ]
    if lo.cp > 1 and not joint:
        specs.append(("cp_grad_all_reduce", CollectiveKind.ALL_REDUCE, grad_buf, 1, lo.cp, st.ranks["cp"]))
    if f < lo.dp:  # replicas of a shard sit f ranks apart: dp-ranks-per-node / f of them per node
        r = lo.dp // f
        specs.append(
            (
                "dp_grad_replica_all_reduce",
                CollectiveKind.ALL_REDUCE,
                grad_buf / f,
                1,
                r,
                max(1, min(r, st.ranks["dp"] // f)),
            )
        )
    return specs


def _expert_dp_specs(st: _Step, n_expert: float) -> list[tuple[str, str, float, float, int, int]]:
    """The DP collectives of the routed experts under expert parallelism: those of the ZeRO stage
    over the dp / ep ranks that hold the same experts (their members per node: `ep_dp`)."""
    lo = st.lo
    dp = lo.dp // lo.ep
    group = expert_zero_shards(lo)
    sub = lo.replace(
        dp=dp,
        ep=1,
        global_batch=lo.global_batch // lo.ep,
        zero_group=group if group < dp and dp % group == 0 else None,
    )
    ranks = {**st.ranks, "dp": st.ranks["ep_dp"]}
    specs = (
        _dp_collective_specs(dataclasses.replace(st, lo=sub, ranks=ranks), n_expert) if dp * lo.cp > 1 else []
    )
    return [(f"{EXPERT_PREFIX}{name}", *rest) for name, *rest in specs]


EXPERT_PREFIX = "expert_"  # the routed experts' own DP collectives (`_expert_dp_specs`)


def _dp_collectives(st: _Step, n_stage: float, n_expert: float = 0.0) -> tuple[list[Collective], float]:
    """(DP gradient / parameter collectives of the step, their total time before overlap).

    `n_expert` of the stage's `n_stage` parameters are routed experts split over ep > 1 ranks:
    their gradients are reduced over the dp / ep ranks that hold them (`_expert_dp_specs`).
    The GSPMD pipeline adds one all-reduce over the stages of every block's gradient: each
    stage computes the gradients of its own layers, and the parameters are replicated."""
    lo = st.lo
    specs = _dp_collective_specs(st, n_stage - n_expert) if lo.dp * lo.cp > 1 else []
    if n_expert:
        specs += _expert_dp_specs(st, n_expert)
    if lo.gspmd_pipeline and lo.pp > 1:
        blocks = st.m.n_layers * layer_params_on_device(st.m, lo) / lo.tp
        specs.append(
            (
                "pp_stage_grad_all_reduce",
                CollectiveKind.ALL_REDUCE,
                blocks * st.precision.reduce_bytes,
                1,
                lo.pp,
                st.ranks["pp"],
            )
        )
    colls, dp_time = [], 0.0
    for name, kind, buf, count, n, g in specs:
        c = make_collective(name, kind, buf, count, n, g, st.hw, st.eff.link_effs)
        colls.append(c)
        dp_time += c.time_s
    return colls, dp_time


def _dp_exposed(st: _Step, dp_time: float, stage_time: float, colls: list[Collective]) -> float:
    """DP communication not hidden behind compute.

    ZeRO-3: the next unit's gather is prefetched behind this unit's compute (`zero3_overlap` of
    the compute hides it), except the first gather and the last reduce-scatter of every round
    (micro-batch; step under breadth-first), which nothing precedes or follows; each ZeRO-3 call
    also costs the framework's host time `coll_op_overhead_s`, which no prefetch hides.
    Others: 1F1B / interleaved reduce once the last micro-batch's backward has made the
    gradients, so only that backward hides them (`dp_overlap`); breadth-first finishes a chunk's
    gradients for every micro-batch at once and reduces them behind the backward of the
    remaining chunks (`zero3_overlap`: the fraction of compute that hides a collective in
    flight), all but the last chunk's."""
    lo, eff, n_mb = st.lo, st.eff, st.lo.grad_accum
    bwd = stage_time * 2 / (st.fwd_passes + 2)
    if lo.zero_stage >= ZeroStage.PARAMETERS:
        rounds = _zero3_rounds(st)
        z3 = [c for c in colls if c.name.removeprefix(EXPERT_PREFIX) in (ZERO3_GATHER, ZERO3_SCATTER)]
        fill = rounds * sum(c.time_s / c.count for c in z3 if c.count)
        calls = sum(c.count for c in z3)
        hidden = eff.zero3_overlap * n_mb * stage_time
        return fill + max(0.0, dp_time - fill - hidden) + calls * eff.coll_op_overhead_s
    if lo.breadth_first:
        units = lo.interleave if lo.pp > 1 else max(1, st.layers)
        window = n_mb * bwd * (1 - 1 / units)
        return max(dp_time / units, dp_time - eff.zero3_overlap * window)
    return max(0.0, dp_time - eff.dp_overlap * bwd)


def _optimizer_time(st: _Step, n_stage: float, n_expert: float = 0.0) -> float:
    """Adam over the local shard: HBM-bound on the device, or CPU Adam plus PCIe transfers
    when the optimizer is offloaded. ZeRO shards the routed experts (`n_expert` of `n_stage`)
    over the dp / ep ranks that hold them."""
    lo, precision, hw = st.lo, st.precision, st.hw
    shard = n_stage
    if lo.zero_stage >= ZeroStage.OPTIMIZER:
        shard = (n_stage - n_expert) / lo.zero_shards + n_expert / expert_zero_shards(lo)
    state_bytes = precision.master_bytes + precision.optimizer_bytes
    if lo.offload_optimizer:
        return (
            shard * st.eff.cpu_adam_s_per_param
            + shard * (precision.grad_bytes + precision.param_bytes) / hw.host_bw
        )
    return shard * (2 * state_bytes + precision.grad_bytes + 2 * precision.param_bytes) / hw.hbm_bw


def _step_flops(
    st: _Step, layer_gemm_flops: float, attn_fwd_flops: float, attn_recompute: float
) -> tuple[float, float]:
    """(model FLOPs of the step, PaLM convention; hardware FLOPs = model + recomputation),
    whole cluster."""
    m, t, tok = st.m, st.lo.tp, st.tok
    tokens = st.lo.global_batch * m.seq_len
    model_flops = tokens * m.model_flops_per_token()
    recompute_per_token = 0.0
    if st.full:
        recompute_per_token = m.n_layers * (layer_gemm_flops * t / tok + attn_fwd_flops * t / tok)
    elif attn_recompute:
        recompute_per_token = m.n_layers * attn_fwd_flops * t / tok
    return model_flops, model_flops + tokens * recompute_per_token


@dataclasses.dataclass(frozen=True)
class _LayerTerms:
    """Every per-micro-batch term of one stage, computed once (`_layer_terms`)."""

    layer_gemm_flops: float
    layer_gemm_time: float
    head_time: float
    attn_fwd_flops: float
    attn_recompute: float
    attn_time: float
    elem_time: float
    overhead: float
    tp_colls: list[Collective]
    tp_time_layer: float
    tp_time_edge: float
    cp_colls: list[Collective]
    cp_time_layer: float
    ep_colls: list[Collective]  # a mixture of experts' all-to-alls (exposed: nothing overlaps them)
    ep_time_layer: float
    loss_traffic: float  # fp32 softmax and the gradient of the logits, on the last stage
    per_layer: float  # one layer: GEMMs, attention, element-wise, overhead, exposed TP/CP
    edge: float  # the last stage's extra: LM head, loss, vocab-parallel collectives


def _layer_terms(st: _Step) -> _LayerTerms:
    eff = st.eff
    layer_gemm_flops, layer_gemm_time, head_time = _gemm_terms(st)
    attn_fwd_flops, attn_recompute, attn_time = _attention_terms(st)
    elem_time, overhead = _elementwise_terms(st)
    tp_colls, tp_time_layer, tp_time_edge = _tp_collectives(st)
    cp_colls, cp_time_layer = _cp_collectives(st)
    ep_colls, ep_time_layer = _ep_collectives(st)
    per_layer = (
        layer_gemm_time
        + attn_time
        + elem_time
        + overhead
        + (tp_time_layer + cp_time_layer) * (1 - eff.tp_overlap)
    )
    if ep_colls:
        per_layer += ep_time_layer
    loss_traffic = st.tok * st.m.vocab_size / st.lo.tp * 16.0 / st.hw.hbm_bw
    edge = head_time + loss_traffic + tp_time_edge * (1 - eff.tp_overlap)
    return _LayerTerms(
        layer_gemm_flops,
        layer_gemm_time,
        head_time,
        attn_fwd_flops,
        attn_recompute,
        attn_time,
        elem_time,
        overhead,
        tp_colls,
        tp_time_layer,
        tp_time_edge,
        cp_colls,
        cp_time_layer,
        ep_colls,
        ep_time_layer,
        loss_traffic,
        per_layer,
        edge,
    )


def layer_and_head_time(
    model: ModelShape,
    layout: Layout,
    hardware: Hardware,
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
) -> tuple[float, float]:
    """(seconds of one transformer layer, forward + backward (+ recomputation), for one
    micro-batch on one device; seconds the last pipeline stage adds per micro-batch for the LM
    head and loss). A pipeline stage of k layers takes k·layer (+ head on the last stage)."""
    validate_layout(model, layout)
    t = _layer_terms(_Step.of(model, layout, hardware, precision, eff))
    return t.per_layer, t.edge


def _time_and_flops(
    st: _Step,
) -> tuple[TimeBreakdown, list[Collective], float, float]:
    """(time breakdown, collectives, model FLOPs, hardware FLOPs) of one step of a validated
    layout: `estimate_step` without the memory breakdown."""
    model, layout = st.m, st.lo
    t = _layer_terms(st)
    stage_time = st.layers * t.per_layer + t.edge
    p2p, p2p_coll = _pp_p2p(st)
    slot, pipeline, bubble = _pipeline(st, stage_time, p2p)
    n_stage = max(stage_params(model, layout))
    n_expert = max(stage_expert_params(model, layout)) if layout.ep > 1 else 0.0
    dp_colls, dp_time = _dp_collectives(st, n_stage, n_expert)
    dp_exposed = _dp_exposed(st, dp_time, stage_time, dp_colls)
    opt_time = _optimizer_time(st, n_stage, n_expert)
    model_flops, hardware_flops = _step_flops(st, t.layer_gemm_flops, t.attn_fwd_flops, t.attn_recompute)
    times = TimeBreakdown(
        gemm_per_microbatch=st.layers * t.layer_gemm_time + t.head_time,
        attention_per_microbatch=st.layers * t.attn_time,
        elementwise_per_microbatch=st.layers * t.elem_time + t.loss_traffic,
        overhead_per_microbatch=st.layers * t.overhead,
        tp_comm_per_microbatch=st.layers * t.tp_time_layer + t.tp_time_edge,
        pp_p2p_per_microbatch=p2p,
        slot=slot,
        pipeline=pipeline,
        bubble=bubble,
        dp_comm=dp_time,
        dp_comm_exposed=dp_exposed,
        optimizer=opt_time,
        step=pipeline + dp_exposed + opt_time,
    )
    colls = t.tp_colls + t.cp_colls + t.ep_colls + ([p2p_coll] if p2p_coll is not None else []) + dp_colls
    return times, colls, model_flops, hardware_flops


def estimate_step(
    model: ModelShape,
    layout: Layout,
    hardware: Hardware,
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
) -> StepEstimate:
    """Predict memory and time of one optimizer step (raises `LayoutError` if impossible).

    One micro-batch on the slowest stage = its layers' GEMMs, attention, element-wise work,
    launch overhead and exposed TP collectives, plus the LM head and loss on the last stage;
    the step = pipeline of those slots + exposed DP collectives + optimizer.
    """
    validate_layout(model, layout)
    times, colls, model_flops, hardware_flops = _time_and_flops(
        _Step.of(model, layout, hardware, precision, eff)
    )
    return StepEstimate(
        model=model,
        layout=layout,
        hardware=hardware,
        memory=memory_breakdown(model, layout, precision, eff, hardware.hbm_bytes),
        time=times,
        collectives=tuple(colls),
        model_flops=model_flops,
        hardware_flops=hardware_flops,
    )


def step_time_s(
    model: ModelShape,
    layout: Layout,
    hardware: Hardware,
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    validate: bool = True,
) -> float:
    """`estimate_step(...).step_time_s`, the same float, without the memory breakdown: a
    calibration's time fit evaluates it for every run at every trial of the constants
    (`validate=False` there: the layouts were validated once before the fit)."""
    if validate:
        validate_layout(model, layout)
    return _time_and_flops(_Step.of(model, layout, hardware, precision, eff))[0].step
