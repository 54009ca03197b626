"""Frozen inputs of the cost model: model shape, parallel layout, numeric precision.

The cost model never sees a live model or mesh: it works from these descriptions so that a
planner can evaluate thousands of candidate layouts for models that could never be built on the
machine running it. `validate_layout` turns impossible meshes into one-line `LayoutError`s that
name the nearest layout that would work. The fixed sets of a layout's string and stage fields are
enums (`LayoutAttention`, `ActCkpt`, `ZeroStage`, `Mlp`) whose values are the strings of the
CSV/JSON files.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from models import flops
from models.base.configs import is_int
from models.base.errors import AnalysisError, ConfigError
from models.config import MoEConfig, Remat
from models.shapes import LLAMA_MULTIPLE_OF, swiglu_d_ff
from sharding.layouts import PipelineSchedule
from sharding.validate import PIPELINE_SCHEDULES, head_splits, sequence_split


class LayoutAttention(enum.StrEnum):
    """`Layout.attention`: the attention kernel of the published layouts the cost model is fitted
    to (not the trainer's `model.attention`: sharding/costmodel/runs.py maps those onto these)."""

    NAIVE = "naive"  # unfused softmax: fp32 scores kept for backward
    FUSED_SOFTMAX = "fused_softmax"  # Megatron's fused scale-mask-softmax: bf16 scores kept
    FLASH1 = "flash1"  # FlashAttention (Dao et al. 2022): no score matrix in HBM
    FLASH2 = "flash2"  # FlashAttention-2 (Dao 2023)


FLASH_KERNELS = frozenset({LayoutAttention.FLASH1, LayoutAttention.FLASH2})  # no s x s scores stored
ATTENTION_KERNELS = tuple(k.value for k in LayoutAttention)  # as error messages print them
# Activation checkpointing (`Layout.act_ckpt`): the trainer's model.remat policies, same names.
ActCkpt = Remat
ACT_CKPT = tuple(c.value for c in ActCkpt)


class ZeroStage(enum.IntEnum):
    """`Layout.zero_stage` (Rajbhandari et al. 2020): which training state is sharded over the
    data-parallel ranks; each stage shards everything the one before does."""

    NONE = 0  # plain data parallelism: everything replicated
    OPTIMIZER = 1  # Adam moments and master weights sharded
    GRADIENTS = 2  # + gradients
    PARAMETERS = 3  # + parameters (= FSDP full sharding)


class Mlp(enum.StrEnum):
    """`ModelShape.mlp`: the MLP block."""

    SWIGLU = "swiglu"  # gate, up and down projections (Llama)
    GELU = "gelu"  # up and down projections (GPT)


class LayoutError(AnalysisError):
    """An impossible or unsupported layout/model/hardware combination (one-line message)."""


# A mixture of experts' routed MLP is the trainer's own `model.moe` (models/config.py, MoEConfig:
# experts and top_k at granularity 1, capacity_factor (None/0: dropless), every, shared_experts,
# granularity; `routed_experts`, `routed_top_k`, `expert_d_ff`): the cost model describes the
# routed shapes the trainer builds with the same object.


def moe_from_config(moe: Any) -> MoEConfig | None:
    """A shape's routed MLP from the trainer's `model.moe`: a MoEConfig, its mapping (a summary's
    `model`), or None (dense); `LayoutError` for a bad one."""
    if moe is None:
        return None
    try:
        return (moe if isinstance(moe, MoEConfig) else MoEConfig.from_mapping(moe)).validate()
    except ConfigError as e:
        raise LayoutError(str(e)) from None


def expert_slots(moe: MoEConfig) -> float:
    """Expert token slots computed (and sent) per routed token choice: the capacity factor (the
    capacity's padding), or routed_experts / routed_top_k when dropless (every expert sized for
    the whole group)."""
    return float(moe.capacity_factor) if moe.capacity_factor else moe.routed_experts / moe.routed_top_k


def moe_override(moe: MoEConfig) -> str:
    """The trainer's `model.moe={...}` value: experts and top_k, and the keys that differ from its
    defaults."""
    defaults = MoEConfig()
    parts = [f"experts:{moe.experts}", f"top_k:{moe.top_k}"]
    for f in dataclasses.fields(MoEConfig):
        v = getattr(moe, f.name)
        if f.name not in ("experts", "top_k") and v != getattr(defaults, f.name):
            parts.append(f"{f.name}:{'null' if v is None else format(v, 'g')}")
    return "{" + ",".join(parts) + "}"


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Architecture of a dense decoder-only transformer (pre-norm, RoPE, no biases).

    `d_ff=None` takes Llama's width (`models.shapes.swiglu_d_ff` with `multiple_of=256`, where the
    trainer's `ModelConfig` rounds to 64); `mlp="gelu"` gives a GPT-style 2-matrix MLP.
    `dropout=True` adds the dropout masks of Korthikanti et al. (GPT-3 style); Llama has none.
    """

    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    vocab_size: int
    d_ff: int | None = None
    n_kv_heads: int | None = None
    mlp: str = Mlp.SWIGLU.value
    tied_embeddings: bool = False
    dropout: bool = False
    moe: MoEConfig | None = None  # a mixture of experts' routed MLP (the trainer's model.moe); None: dense

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size"):
            v = getattr(self, name)
            if not is_int(v) or v <= 0:
                raise LayoutError(f"model {name} must be a positive integer (got {v!r})")
        if self.d_model % self.n_heads:
            raise LayoutError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.kv_heads <= 0 or self.n_heads % self.kv_heads:
            raise LayoutError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.mlp not in tuple(Mlp):
            raise LayoutError(f"mlp must be 'swiglu' or 'gelu' (got {self.mlp!r})")
        if self.moe is not None:
            object.__setattr__(self, "moe", moe_from_config(self.moe))
        if self.moe is not None and not self.gated:
            raise LayoutError(
                "a mixture of experts' experts are SwiGLU MLPs (mlp='swiglu'), as the trainer's"
            )
        if self.moe is not None:
            if self.moe.every > self.n_layers:
                raise LayoutError(
                    f"moe every={self.moe.every} exceeds n_layers={self.n_layers}: no layer is routed"
                )
            if self.ffn % self.moe.granularity:
                raise LayoutError(f"moe granularity={self.moe.granularity} does not divide d_ff={self.ffn}")

    @classmethod
    def from_model_config(cls, cfg: Any) -> "ModelShape":
        """From the training core's `models.config.ModelConfig` (duck-typed; SwiGLU, no dropout)."""
        return cls(
            n_layers=cfg.n_layers,
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            seq_len=cfg.seq_len,
            vocab_size=cfg.vocab_size,
            d_ff=cfg.ff,
            n_kv_heads=cfg.kv_heads,
            mlp=Mlp.SWIGLU.value,
            tied_embeddings=bool(cfg.tie_embeddings),
            moe=moe_from_config(getattr(cfg, "moe", None)),
        )

    # ---- derived sizes ------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else int(self.n_kv_heads)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn(self) -> int:
        return (
            swiglu_d_ff(self.d_model, multiple_of=LLAMA_MULTIPLE_OF) if self.d_ff is None else int(self.d_ff)
        )

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        """A gated (SwiGLU) MLP: three matrices, not two."""
        return self.mlp == Mlp.SWIGLU

    @property
    def attn_params_per_layer(self) -> int:
        return flops.attention_params(self.d_model, self.n_heads, self.kv_heads, self.head_dim)

    @property
    def mlp_params_per_layer(self) -> int:
        return flops.mlp_params(self.d_model, self.ffn, self.gated)

    @property
    def params_per_layer(self) -> int:
        return flops.block_params(
            self.d_model, self.n_heads, self.kv_heads, self.head_dim, self.ffn, self.gated
        )

    # ---- a mixture of experts (all 0 / the dense values for a dense shape) ----------------------
    @property
    def moe_layers(self) -> int:
        """Routed layers: i with (i + 1) % every == 0."""
        return 0 if self.moe is None else self.n_layers // self.moe.every

    @property
    def expert_ffn(self) -> int:
        """Hidden width of one routed (or shared) expert: d_ff / granularity."""
        return self.ffn if self.moe is None else self.moe.expert_d_ff(self.ffn)

    @property
    def expert_mlp_params(self) -> int:
        """Weights of one routed expert."""
        return flops.mlp_params(self.d_model, self.expert_ffn, self.gated)

    @property
    def moe_mlp_params_per_layer(self) -> int:
        """A routed layer's MLP weights: the router (d_model x routed experts), every routed expert
        and the shared ones (models/flops.py's count, the trainer's)."""
        moe = self.moe
        return flops.moe_mlp_params(self.d_model, self.expert_ffn, moe.routed_experts, moe.shared_experts)

    @property
    def moe_mlp_active_params_per_layer(self) -> int:
        """A routed layer's MLP weights one token uses: the router, its top_k (x granularity)
        experts and the shared ones (models/flops.py's count)."""
        moe = self.moe
        return flops.moe_mlp_active_params(
            self.d_model, self.expert_ffn, moe.routed_experts, moe.routed_top_k, moe.shared_experts
        )

    @property
    def routed_expert_params(self) -> int:
        """Weights of every routed expert in every routed layer: what expert parallelism splits."""
        return 0 if self.moe is None else self.moe_layers * self.moe.routed_experts * self.expert_mlp_params

    @property
    def block_params(self) -> int:
        """Parameters of all transformer blocks (routed MLPs counted whole)."""
        out = self.n_layers * self.params_per_layer
        if self.moe is not None:
            out += self.moe_layers * (self.moe_mlp_params_per_layer - self.mlp_params_per_layer)
        return out

    @property
    def active_block_params(self) -> int:
        """Parameters of all blocks that one token passes through (router, top_k experts, shared)."""
        out = self.n_layers * self.params_per_layer
        if self.moe is not None:
            out += self.moe_layers * (self.moe_mlp_active_params_per_layer - self.mlp_params_per_layer)
        return out

    @property
    def layer_params(self) -> float:
        """Parameters of one block, the mean over the blocks (`params_per_layer` when dense)."""
        return self.params_per_layer if self.moe is None else self.block_params / self.n_layers

    @property
    def layer_expert_params(self) -> float:
        """Routed-expert parameters of one block, the mean over the blocks (0 when dense)."""
        return self.routed_expert_params / self.n_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab_size * self.d_model

    def matrices_per_layer(self, fused_projections: bool = True) -> int:
        """Weight matrices of one layer: QKV (or q, k, v) and the output projection; the MLP's
        up/gate (fused or not) and down projections."""
        attn = (1 if fused_projections else 3) + 1
        if self.gated:
            return attn + (2 if fused_projections else 3)
        return attn + 2

    @property
    def n_params(self) -> int:
        """All parameters, embeddings included (the PaLM/Hagemann MFU convention's N).

        Summed here from the per-block counts of models/flops.py (`block_params`), not by
        `models.flops.param_count`, because the cost model needs the per-component counts
        (attention, MLP, embedding, head: `memory.stage_params` splits them over pipeline stages)
        and describes shapes the training model cannot build (GELU MLPs). For the shapes both
        describe (`from_model_config`) the counts are equal, which tests/test_costmodel.py checks.
        """
        return self.block_params + self.embedding_params + self.head_params + self.d_model

    @property
    def n_params_active(self) -> int:
        """Parameters one token passes through: `n_params` with each routed layer's experts counted
        top_k x granularity times (router and shared experts whole); `n_params` when dense."""
        return self.active_block_params + self.embedding_params + self.head_params + self.d_model

    @property
    def n_params_non_embedding(self) -> int:
        """`n_params` without the input embedding and the untied head (Kaplan et al.'s N;
        summary.json's `n_params_non_embedding`)."""
        return self.block_params + self.d_model

    def model_flops_per_token(self) -> float:
        """PaLM (Chowdhery et al. 2022, App. B) model FLOPs: 6N + 12·L·h·s, attention non-causal.

        N counts every parameter including the input embedding, as Hagemann et al. do, so that
        predicted MFU is directly comparable with the published sheets; for a mixture of experts
        the active ones (`n_params_active`: the work per token, not the weights held).
        """
        return flops.palm_flops_per_token(
            self.n_params_active, self.n_layers, self.n_heads * self.head_dim, self.seq_len
        )


@dataclasses.dataclass(frozen=True)
class Precision:
    """Bytes per element of each training-state tensor.

    Default = Megatron/DeepSpeed bf16 mixed precision: bf16 weights and gradients, fp32 master
    weights and Adam moments (2+2+4+8 = 16 bytes/param, Rajbhandari et al. 2020). `FP32_PARAMS`
    is the JAX training core of this repo: fp32 params and grads, no master copy.
    """

    param_bytes: int = 2
    grad_bytes: int = 2
    master_bytes: int = 4
    optimizer_bytes: int = 8  # Adam m and v
    act_bytes: int = 2
    grad_reduce_bytes: int | None = None  # dtype of the DP gradient collective; None = grad_bytes

    @property
    def reduce_bytes(self) -> int:
        return self.grad_bytes if self.grad_reduce_bytes is None else self.grad_reduce_bytes


# `Layout.pipeline_schedule`: the trainer's `sharding.pipeline_schedule` names, one enum for both
Schedule = PipelineSchedule


BF16_MIXED = Precision()
FP32_PARAMS = Precision(param_bytes=4, grad_bytes=4, master_bytes=0, optimizer_bytes=8, act_bytes=2)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one training step is laid out on `dp·tp·pp` devices.

    global_batch and micro_batch count sequences. zero_stage (`ZeroStage`): 0 = plain DP, 1 =
    optimizer state sharded over DP, 2 = + gradients, 3 = + parameters (= FSDP full sharding).
    `act_ckpt` (`ActCkpt`) is the activation checkpointing (none | selective | full: the
    trainer's `model.remat`; selective = Korthikanti et al.'s, recompute the attention core).
    `interleave` is the number of virtual pipeline stages per device (1 = plain 1F1B).
    `attention` (`LayoutAttention`) is the attention kernel: naive (unfused softmax),
    fused_softmax (Megatron fused kernel), flash1, flash2;
    `fused_norm` says whether RMSNorm is a fused kernel (saves activation memory and HBM traffic).
    `fused_projections`: Q/K/V and gate/up are one matmul each (Megatron), so backward needs one
    TP all-reduce per sub-layer input; False = separate matmuls, one all-reduce per projection
    (what XLA emits for this repo's model). `zero3_regather`: ZeRO-3/FSDP gathers weights again
    for backward (DeepSpeed, PyTorch FSDP reshard-after-forward); False = keeps the gathered
    weights from forward (XLA on this repo's model). `zero3_per_matrix`: ZeRO-3 gathers and
    reduce-scatters each weight matrix of a layer in a collective of its own (DeepSpeed ZeRO-3
    fetches parameter by parameter; XLA shards each weight); False = one collective per layer
    (PyTorch FSDP's flat-parameter units). Each collective pays its ring's latency. `ep`: expert
    parallelism over ep of the dp ranks (a mixture of experts' shapes only; below).

    `cp`: context parallelism (the trainer's `sharding.context`): the sequence is split over cp
    ranks, K and V are all-gathered per layer (sharding/context.py). `cp_joint_grad_reduce`: the
    gradients are reduced over the dp×cp ranks in one collective (Megatron-LM); False = over
    context, then over data (what XLA emits for this repo's model). `sp_bwd_regather`: sequence
    parallelism all-gathers the column-parallel inputs again in backward for the weight
    gradients (Megatron-LM, saves memory); False = keeps the gathered input (XLA).
    `gspmd_pipeline`: this repo's pipeline (sharding/pipeline.py) instead of Megatron's:
    parameters and optimizer state are replicated over the stages (not split), every stage
    computes and communicates on all M·V + P − 1 ticks (bubble ticks included), and activations
    move by a shift of each stage's whole micro-batch buffer (not scattered over TP).

    `pipeline_schedule` (`Schedule`, the trainer's names): `1f1b` (default; with
    `interleave` > 1 it is Megatron's depth-first interleaved schedule, as is `interleaved`),
    `gpipe` (all forwards, then all backwards: every micro-batch's activations alive), or
    `breadth_first` (Lamy-Poirier 2022, arXiv:2211.05953): `interleave` looped stages per device,
    all M micro-batches pass one stage chunk before the next, so ZeRO-3 gathers and scatters
    each chunk's weights once per step (not once per micro-batch), the DP gradient reduction of
    a finished chunk overlaps the backward of the others, and the activations of all M
    micro-batches are alive at once (GPipe-like memory). With pp = 1 it is breadth-first
    gradient accumulation (the same ZeRO-3 and overlap terms, no bubble).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    sp: bool = False
    zero_stage: int = ZeroStage.OPTIMIZER.value
    act_ckpt: str = ActCkpt.NONE.value
    attention: str = LayoutAttention.FLASH2.value
    fused_norm: bool = True
    interleave: int = 1
    offload_optimizer: bool = False
    fused_projections: bool = True
    zero3_regather: bool = True
    zero3_per_matrix: bool = True
    # Hybrid sharding (HSDP; the trainer's sharding.data x sharding.fsdp): the ZeRO-sharded states
    # are split over groups of `zero_group` DP ranks and replicated across the dp / zero_group
    # groups. None = over all dp ranks.
    zero_group: int | None = None
    cp: int = 1
    cp_joint_grad_reduce: bool = True
    sp_bwd_regather: bool = True
    gspmd_pipeline: bool = False
    pipeline_schedule: str = Schedule.ONE_F_ONE_B.value
    # Expert parallelism (a mixture of experts; the trainer's sharding.expert): the routed experts
    # split over `ep` of the dp ranks (which also split the batch), tokens sent to their experts'
    # ranks and back by all-to-alls; the expert gradients reduced over the dp / ep ranks that hold
    # the same experts. 1 = every rank holds every expert.
    ep: int = 1

    @property
    def breadth_first(self) -> bool:
        """The breadth-first schedule (all micro-batches through one stage chunk, then the next)."""
        return self.pipeline_schedule == Schedule.BREADTH_FIRST

    @property
    def all_microbatches_alive(self) -> bool:
        """Every micro-batch's activations are kept until its backward (GPipe, breadth-first)."""
        return self.pipeline_schedule in (Schedule.GPIPE, Schedule.BREADTH_FIRST)

    @property
    def n_devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero_shards(self) -> int:
        """DP ranks the ZeRO-sharded states are split over (dp unless `zero_group` says fewer)."""
        return self.dp if self.zero_group is None else self.zero_group

    @property
    def grad_accum(self) -> int:
        """Micro-batches per pipeline per step (m in the bubble formula (p-1)/m)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def replace(self, **kw: Any) -> "Layout":
        return dataclasses.replace(self, **kw)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest_mesh(n_devices: int, tp: int, pp: int) -> str:
    """Closest (tp, pp) with tp·pp dividing n_devices, as text for an error message."""
    best = min(
        ((t, p) for t in _divisors(n_devices) for p in _divisors(n_devices // t)),
        key=lambda tp_pp: (
            abs(math.log2(tp_pp[0] / tp)) + abs(math.log2(tp_pp[1] / pp)),
            tp_pp[0] * tp_pp[1],
        ),
    )
    return f"dp={n_devices // (best[0] * best[1])}, tp={best[0]}, pp={best[1]}"


def _validate_expert_split(model: ModelShape, lo: Layout) -> None:
    """`validate_layout`'s expert-parallel rules: ep only for a mixture of experts, dividing dp and
    the routed experts."""
    if lo.ep > 1 and model.moe is None:
        raise LayoutError(
            f"ep={lo.ep} splits a mixture of experts' experts, and the model is dense; use ep=1"
        )
    if lo.dp % lo.ep:
        raise LayoutError(
            f"ep={lo.ep} must divide dp={lo.dp}: expert parallelism runs over data-parallel ranks"
        )
    if model.moe is not None and model.moe.routed_experts % lo.ep:
        ok = max(d for d in _divisors(model.moe.routed_experts) if d <= lo.ep and lo.dp % d == 0)
        raise LayoutError(
            f"ep={lo.ep} must divide the {model.moe.routed_experts} routed experts; nearest valid: ep={ok}"
        )


def validate_layout(model: ModelShape, layout: Layout, n_devices: int | None = None) -> None:
    """Raise `LayoutError` (one line, with the nearest valid choice) for impossible layouts.

    The cost model's check of a planned `Layout` (the trainer checks its own mesh with
    `sharding.validate.validate_mesh`); the rules both share come from sharding/validate.py
    (`head_splits`, `sequence_split`). Unlike the trainer, pipeline stages may hold unequal
    numbers of layers (Megatron), so only interleaving needs pp x interleave to divide them.
    """
    lo = layout
    for name in ("dp", "tp", "pp", "cp", "micro_batch", "global_batch", "interleave", "ep"):
        v = getattr(lo, name)
        if not is_int(v) or v <= 0:
            raise LayoutError(f"layout {name} must be a positive integer (got {v!r})")
    _validate_expert_split(model, lo)
    if lo.zero_stage not in tuple(ZeroStage):
        raise LayoutError(f"zero_stage must be 0, 1, 2 or 3 (got {lo.zero_stage!r})")
    if lo.zero_group is not None and (
        not is_int(lo.zero_group) or lo.zero_group <= 0 or lo.dp % lo.zero_group
    ):
        raise LayoutError(f"zero_group={lo.zero_group!r} must be a positive divisor of dp={lo.dp}")
    if lo.act_ckpt not in ACT_CKPT:
        raise LayoutError(f"act_ckpt must be one of {ACT_CKPT} (got {lo.act_ckpt!r})")
    if lo.attention not in ATTENTION_KERNELS:
        raise LayoutError(f"attention must be one of {ATTENTION_KERNELS} (got {lo.attention!r})")
    if lo.pipeline_schedule not in PIPELINE_SCHEDULES:
        raise LayoutError(
            f"pipeline_schedule must be one of {PIPELINE_SCHEDULES} (got {lo.pipeline_schedule!r})"
        )
    if lo.pipeline_schedule == Schedule.INTERLEAVED and lo.interleave < 2 and lo.pp > 1:
        raise LayoutError("pipeline_schedule=interleaved needs interleave >= 2 virtual stages per device")
    if n_devices is not None and lo.n_devices != n_devices:
        hint = nearest_mesh(n_devices, lo.tp, lo.pp) if n_devices > 0 else "n_devices > 0"
        names, sizes = (
            ("dp×tp×pp×cp", (lo.dp, lo.tp, lo.pp, lo.cp))
            if lo.cp > 1
            else ("dp×tp×pp", (lo.dp, lo.tp, lo.pp))
        )
        raise LayoutError(
            f"{names} = {'×'.join(map(str, sizes))} = {lo.n_devices} does not "
            f"match {n_devices} devices; nearest valid mesh: {hint}"
        )
    if not all(split.even for split in head_splits(lo.tp, model.n_heads, model.kv_heads)):
        ok = [t for t in _divisors(model.kv_heads) if t <= max(lo.tp, 1)]
        raise LayoutError(
            f"tp={lo.tp} must divide n_heads={model.n_heads} and "
            f"kv heads={model.kv_heads}; nearest valid tp: {max(ok)}"
        )
    if lo.pp > model.n_layers:
        raise LayoutError(f"pp={lo.pp} exceeds n_layers={model.n_layers}; nearest valid: pp={model.n_layers}")
    if lo.interleave > 1 and model.n_layers % (lo.pp * lo.interleave):
        ok = [p for p in _divisors(model.n_layers) if p <= lo.pp * lo.interleave]
        raise LayoutError(
            f"pp×interleave = {lo.pp * lo.interleave} must divide n_layers="
            f"{model.n_layers}; nearest valid: {max(ok)}"
        )
    if lo.global_batch % (lo.dp * lo.micro_batch):
        per = lo.global_batch / lo.dp
        raise LayoutError(
            f"global_batch={lo.global_batch} is not divisible by dp×micro_batch = "
            f"{lo.dp}×{lo.micro_batch}; each DP rank would get {per:g} sequences"
        )
    if lo.interleave > 1 and lo.grad_accum % lo.pp:
        raise LayoutError(
            f"{'breadth-first' if lo.breadth_first else 'interleaved'} pipeline needs micro-batches "
            f"per step ({lo.grad_accum}) divisible by pp={lo.pp}; use interleave=1"
        )
    if lo.cp > 1 and not sequence_split(model.seq_len, lo.cp, lo.tp, lo.sp).even:
        raise LayoutError(
            f"context parallelism needs seq_len={model.seq_len} divisible by "
            f"cp={lo.cp}" + (f"×tp={lo.tp} (sequence parallel)" if lo.sp else "")
        )
    if lo.sp and not sequence_split(model.seq_len, 1, lo.tp, True).even:  # tp=1: a no-op, not an error
        raise LayoutError(f"sequence parallelism needs seq_len={model.seq_len} divisible by tp={lo.tp}")
