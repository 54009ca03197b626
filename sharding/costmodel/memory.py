"""Per-device memory of one training step: states (params, grads, optimizer) and activations.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", §4, Table 2), generalised from GPT (GeLU MLP of 4h, dropout) to any MLP
width, SwiGLU, grouped-query attention, and attention kernels that do or do not store the
s×s score matrix. For GPT-3 shapes with dropout and a softmax that keeps only its 16-bit output
(`fused_softmax`: 2 bytes per score, + 1 for the dropout mask and 2 for its output = their
5as²b; `naive` keeps 6 bytes per score before dropout) it reduces to their sbh(34 + 5as/h)
bytes per layer (tensor parallel: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism
everything divides by t).
"""

from __future__ import annotations

import dataclasses
import enum
import math

from sharding.costmodel.efficiency import Efficiency
from sharding.costmodel.spec import (
    FLASH_KERNELS,
    ActCkpt,
    Layout,
    LayoutAttention,
    ModelShape,
    Precision,
    ZeroStage,
    expert_slots,
)

# Bytes stored per attention-score element for backward when the kernel materialises s×s scores.
# naive: fp32 softmax output kept for backward + its bf16 copy fed to the AV matmul (4 + 2);
# fused_softmax: Megatron's fused scale-mask-softmax keeps only its bf16 output (2).
SCORE_STORE_BYTES = {
    LayoutAttention.NAIVE: 6.0,
    LayoutAttention.FUSED_SOFTMAX: 2.0,
    LayoutAttention.FLASH1: 0.0,
    LayoutAttention.FLASH2: 0.0,
}
# Extra bytes per element kept by an un-fused (PyTorch op-by-op) RMSNorm beyond its bf16 input:
# the fp32 upcast (4) and the fp32 normalised tensor (4).
UNFUSED_NORM_EXTRA_BYTES = 8.0
# Bytes per logit element alive at the loss: bf16 logits (2), the fp32 softmax kept for backward
# (4) and the fp32 gradient of the logits (4), as in Megatron's vocab-parallel cross-entropy.
LOGITS_BYTES = 10.0
# Backward through a recomputed layer holds its rebuilt activations and their gradients.
RECOMPUTE_FACTOR = 2.0


class Stage(enum.StrEnum):
    """`MemoryBreakdown.stage`: the pipeline stage whose memory it is (the two that can be the
    fullest: the first holds the most in-flight activations, the last the logits)."""

    FIRST = "first"
    LAST = "last"


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device on the most loaded pipeline stage (`stage`: 'first' or 'last')."""

    params: float
    grads: float
    optimizer: float
    activations: float
    activations_per_layer: float  # one layer, one micro-batch, no checkpointing
    logits: float
    temporaries: float
    overhead: float
    capacity: float
    stage: Stage

    @property
    def total(self) -> float:
        return (
            self.params
            + self.grads
            + self.optimizer
            + self.activations
            + self.logits
            + self.temporaries
            + self.overhead
        )

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def as_gb(self) -> dict[str, float]:
        keys = ("params", "grads", "optimizer", "activations", "logits", "temporaries", "overhead")
        out = {k: getattr(self, k) / 1e9 for k in keys}
        out["total"] = self.total / 1e9
        out["capacity"] = self.capacity / 1e9
        return out


def activation_bytes_per_layer(
    m: ModelShape, lo: Layout, recompute_attention: bool = False, act_bytes: int = 2
) -> float:
    """Activation bytes one layer keeps for backward, for one micro-batch on one device.

    `recompute_attention` drops the s×s score terms (selective recomputation, Korthikanti §4.3).
    Context parallelism: s/cp tokens per device, except K and V, which are gathered to full
    length (sharding/context.py), and the (s/cp)×s scores.
    """
    t = lo.tp
    sp = lo.sp and t > 1
    rep = 1.0 / t if sp else 1.0  # tensors replicated across TP ranks unless sequence-parallel
    s, b, h, f = m.seq_len // lo.cp, lo.micro_batch, m.d_model, m.ffn
    s_kv = m.seq_len
    sbh = s * b * h
    ab = act_bytes
    norm = 2 * ab * sbh * rep  # each of the two norms keeps its input
    if not lo.fused_norm:
        norm += 2 * UNFUSED_NORM_EXTRA_BYTES * sbh * rep
    attn = ab * sbh * rep  # input of the QKV projection (norm output)
    attn += ab * b * (s * h + 2 * s_kv * m.kv_dim) / t  # Q, K, V (full-length K, V under cp)
    attn += ab * sbh / t  # attention context = input of the output projection
    if lo.attention in FLASH_KERNELS:
        attn += 4 * s * b * m.n_heads / t  # fp32 log-sum-exp per row
    elif not recompute_attention:
        per_score = SCORE_STORE_BYTES[lo.attention] + (3.0 if m.dropout else 0.0)
        attn += per_score * m.n_heads * s * s_kv * b / t
    mlp = ab * sbh * rep  # input of the first MLP matmul (norm output)
    mlp += (3 if m.gated else 2) * ab * s * b * f / t  # gate, up, gate·up | fc1, act
    if m.moe is not None:  # the mean over the layers, a routed layer's MLP in place of the dense one
        routed = moe_mlp_activation_bytes(m, lo, ab)
        mlp += m.moe_layers / m.n_layers * (routed - mlp)
    drop = 2 * sbh * rep if m.dropout else 0.0  # 1-byte masks after attention and MLP
    return norm + attn + mlp + drop


def moe_mlp_activation_bytes(m: ModelShape, lo: Layout, ab: int) -> float:
    """Activation bytes a routed MLP keeps for backward, one micro-batch on one device: its input
    (the norm output), the router's fp32 probabilities, the dispatched token slots (the tokens'
    top_k choices, padded to capacity) in and out of the experts, the experts' gate, up and
    gate·up, and the shared experts' (expert hidden width split over tp, as the dense MLP's)."""
    moe, t = m.moe, lo.tp
    rep = 1.0 / t if (lo.sp and t > 1) else 1.0
    tok = m.seq_len // lo.cp * lo.micro_batch
    slots = tok * moe.routed_top_k * expert_slots(moe)  # expert token slots of the device
    per_hidden = 3 if m.gated else 2
    out = ab * tok * m.d_model * rep  # router / experts' input
    out += 4.0 * tok * moe.routed_experts * rep  # router probabilities (fp32)
    out += 2 * ab * slots * m.d_model * rep  # dispatched slots and the experts' outputs before combine
    out += per_hidden * ab * slots * m.expert_ffn / t  # routed experts' hidden (split over tp)
    out += per_hidden * ab * tok * moe.shared_experts * m.expert_ffn / t  # shared experts' hidden
    return out


def in_flight_layers(m: ModelShape, lo: Layout) -> float:
    """Layer-activations held at once by the first pipeline stage under (interleaved) 1F1B.

    1F1B: stage 0 holds min(p, m) micro-batches of its L/p layers. Interleaved with v chunks:
    L·(1 + (p−1)/(p·v)) (Korthikanti et al. 2022, §4.2.3), capped by m micro-batches. GPipe and
    breadth-first: all m micro-batches of its L/p layers (also with pp = 1). The
    GSPMD pipeline (`gspmd_pipeline`) is GPipe-like: each of its M·V + P − 1 ticks keeps the
    activations of one chunk of L/(p·v) layers.
    """
    p, v, n_mb = lo.pp, lo.interleave, lo.grad_accum
    per_stage = math.ceil(m.n_layers / p)
    if lo.gspmd_pipeline and p > 1:  # backward of a scan over M·V + P − 1 ticks keeps every tick
        return (n_mb * v + p - 1) * per_stage / v
    if lo.all_microbatches_alive:
        # GPipe and breadth-first (Lamy-Poirier 2022, §3): every micro-batch passes all of the
        # device's layer chunks before the first backward, so all M are alive on all its layers
        return n_mb * per_stage
    if v == 1 or p == 1:
        return min(p, n_mb) * per_stage
    return min(m.n_layers * (1 + (p - 1) / (p * v)), n_mb * per_stage)


def layer_params_on_device(m: ModelShape, lo: Layout) -> float:
    """Parameters of one block on one rank before TP: `params_per_layer` for a dense shape; the
    mean block of a mixture of experts with its routed experts split over the ep ranks."""
    if m.moe is None:
        return m.params_per_layer
    return m.layer_params - m.layer_expert_params * (1 - 1 / lo.ep)


def stage_expert_params(m: ModelShape, lo: Layout) -> tuple[float, float]:
    """Routed-expert parameters held by one TP rank of the first and the last pipeline stage (after
    expert parallelism; 0 for a dense shape): their states are ZeRO-sharded over the dp / ep ranks
    that hold the same experts, not over all dp ranks."""
    if m.moe is None:
        return 0.0, 0.0
    layers = m.n_layers if lo.gspmd_pipeline else math.ceil(m.n_layers / lo.pp)
    return (layers * m.layer_expert_params / (lo.ep * lo.tp),) * 2


def expert_zero_shards(lo: Layout) -> int:
    """Ranks the ZeRO-sharded states of routed experts are split over: the ZeRO group's ranks that
    hold the same experts (zero_shards / ep, at least 1)."""
    return max(1, lo.zero_shards // lo.ep)


def stage_params(m: ModelShape, lo: Layout) -> tuple[float, float]:
    """Parameters held by one TP rank of the first and of the last pipeline stage (all of them
    under `gspmd_pipeline`, which replicates parameters over the stages); a mixture of experts'
    routed experts split over the ep ranks."""
    if lo.gspmd_pipeline:
        if m.moe is None:
            return (m.n_params / lo.tp,) * 2
        return ((m.n_params - m.routed_expert_params * (1 - 1 / lo.ep)) / lo.tp,) * 2
    per_stage_layers = math.ceil(m.n_layers / lo.pp) * layer_params_on_device(m, lo)
    first = per_stage_layers + m.embedding_params
    last = per_stage_layers + m.head_params + m.d_model
    if lo.pp == 1:
        first = last = first + m.head_params + m.d_model
    if m.tied_embeddings and lo.pp > 1:
        last += m.embedding_params  # the last stage keeps its own copy of the tied matrix
    return first / lo.tp, last / lo.tp


def memory_breakdown(
    m: ModelShape, lo: Layout, prec: Precision, eff: Efficiency, capacity: float
) -> MemoryBreakdown:
    """Memory of the most loaded pipeline stage (first: most activations; last: logits)."""
    act_layer = activation_bytes_per_layer(m, lo, act_bytes=prec.act_bytes)
    if lo.act_ckpt == ActCkpt.FULL:
        rep = 1.0 / lo.tp if (lo.sp and lo.tp > 1) else 1.0
        stored_layer = prec.act_bytes * m.seq_len // lo.cp * lo.micro_batch * m.d_model * rep
        recompute_buf = RECOMPUTE_FACTOR * act_layer  # one layer is rebuilt at a time in backward
    elif lo.act_ckpt == ActCkpt.SELECTIVE:
        stored_layer = activation_bytes_per_layer(m, lo, recompute_attention=True, act_bytes=prec.act_bytes)
        recompute_buf = act_layer - stored_layer
    else:
        stored_layer, recompute_buf = act_layer, 0.0
    dp, dpe = lo.zero_shards, expert_zero_shards(lo)  # ranks the ZeRO-sharded states are split over
    candidates = []
    for stage, n_par, n_exp in zip(
        (Stage.FIRST, Stage.LAST), stage_params(m, lo), stage_expert_params(m, lo)
    ):

        def zero(nbytes: float, stage_from: ZeroStage) -> float:
            """Bytes per device of a state of `nbytes` per parameter, ZeRO-sharded from `stage_from`:
            the replicated parameters over dp ranks, the routed experts over dp / ep."""
            if lo.zero_stage < stage_from:
                return n_par * nbytes
            return (n_par - n_exp) * nbytes / dp + n_exp * nbytes / dpe

        params = zero(prec.param_bytes, ZeroStage.PARAMETERS)
        grads = zero(prec.grad_bytes, ZeroStage.GRADIENTS)
        if lo.offload_optimizer and lo.zero_stage >= ZeroStage.GRADIENTS:
            # ZeRO-Offload streams each bucket of gradients to the host as backward produces it
            # (and accumulates them there): two layers' buckets in flight, not all of them
            grads = min(grads, 2 * layer_params_on_device(m, lo) / lo.tp * prec.grad_bytes)
        opt = (
            0.0
            if lo.offload_optimizer
            else zero(prec.master_bytes + prec.optimizer_bytes, ZeroStage.OPTIMIZER)
        )
        layers = in_flight_layers(m, lo) if stage == Stage.FIRST else math.ceil(m.n_layers / lo.pp)
        if lo.pp == 1:  # one stage: all layers; breadth-first accumulation keeps every micro-batch
            layers = m.n_layers * (lo.grad_accum if lo.all_microbatches_alive else 1)
        acts = eff.act_frag * (layers * stored_layer + recompute_buf)
        tokens = m.seq_len // lo.cp * lo.micro_batch
        logits = tokens * m.vocab_size / lo.tp * LOGITS_BYTES if stage == Stage.LAST else 0.0
        temps = 0.0
        if lo.zero_stage >= ZeroStage.PARAMETERS:  # gathered weights of the current and the prefetched layer
            temps += 2 * layer_params_on_device(m, lo) / lo.tp * prec.param_bytes
        if lo.attention in (
            LayoutAttention.NAIVE,
            LayoutAttention.FUSED_SOFTMAX,
        ):  # fp32 scores of the layer being computed
            temps += 4.0 * m.n_heads / lo.tp * m.seq_len**2 / lo.cp * lo.micro_batch
        candidates.append(
            MemoryBreakdown(
                params=params,
                grads=grads,
                optimizer=opt,
                activations=acts,
                activations_per_layer=act_layer,
                logits=logits,
                temporaries=temps,
                overhead=eff.mem_overhead_bytes,
                capacity=capacity,
                stage=stage,
            )
        )
    return max(candidates, key=lambda mb: mb.total)
