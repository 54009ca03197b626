"""Check, before anything is compiled, that a mesh divides the model and the batch.

Each failure names the config keys involved, e.g.
`sharding.tensor=3 does not divide model.n_heads=4`.

Two validators check layouts, for different readers: `validate_mesh` here checks the trainer's
mesh (`sharding.*` sizes) against a `ModelConfig` and raises `ConfigError` naming config keys;
`sharding.costmodel.validate_layout` checks a planned `Layout` against a `ModelShape` and raises
`LayoutError` naming the nearest valid layout. The rules both apply are written once, here:
`head_splits` (tensor parallelism splits attention by heads) and `sequence_split` (context and
sequence parallelism split the sequence).
"""

from __future__ import annotations

import dataclasses

from models.base.configs import check_choice, check_int
from models.base.errors import ConfigError
from models.config import ModelConfig
from sharding.layouts import PipelineSchedule

# ---- divisibility rules (shared with sharding/costmodel/spec.py: validate_layout) ------------


@dataclasses.dataclass(frozen=True)
class Split:
    """One divisibility rule: `ranks` ranks of a mesh axis split a dimension of `size` evenly.

    axis: the mesh axis as its config key(s) (`sharding.tensor`, `sharding.data*sharding.fsdp`);
    dim: the dimension as its config key (`model.n_heads`, `train.micro_batch_size`).
    """

    axis: str
    ranks: int
    dim: str
    size: int

    @property
    def even(self) -> bool:
        return self.size % self.ranks == 0


def head_splits(tensor: int, n_heads: int, kv_heads: int) -> tuple[Split, Split]:
    """Tensor parallelism splits attention by heads and never a grouped-query group: `tensor`
    must divide the query heads and the KV heads."""
    return (
        Split("sharding.tensor", tensor, "model.n_heads", n_heads),
        Split("sharding.tensor", tensor, "model.n_kv_heads", kv_heads),
    )


def sequence_split(seq_len: int, context: int, tensor: int, sequence_parallel: bool) -> Split:
    """The sequence split over the context ranks, and under (Megatron) sequence parallelism also
    over the tensor ranks, which then hold norms and residuals split along it."""
    if sequence_parallel:
        return Split("sharding.context*sharding.tensor", context * tensor, "model.seq_len", seq_len)
    return Split("sharding.context", context, "model.seq_len", seq_len)


def expert_splits(model: ModelConfig, expert: int, tensor: int) -> list[Split]:
    """A mixture of experts' dims the mesh splits: the routed experts over `expert`, and the
    experts' (and shared experts') hidden width d_ff / granularity over `tensor`."""
    moe = model.moe
    if moe is None:
        return []
    width = "model.d_ff/model.moe.granularity"
    return [
        Split("sharding.expert", expert, "model.moe.experts*model.moe.granularity", moe.routed_experts),
        Split("sharding.tensor", tensor, width, moe.expert_d_ff(model.ff)),
    ]


def validate_mesh(
    model: ModelConfig,
    data: int,
    fsdp: int,
    tensor: int,
    micro_batch_size: int,
    eval_batch_size: int | None = None,
    expert: int = 1,
) -> None:
    """Raise ConfigError if any dimension the trainer shards (sharding/rules.py) is not divisible
    by its mesh axes: heads, KV heads, MLP width and vocabulary over `tensor`, d_model over
    `fsdp` (ZeRO-3), the batch rows over `data`*`fsdp`*`expert`, a mixture of experts' routed
    experts over `expert` (`expert_splits`). `sharding.expert` > 1 needs `model.moe`."""
    if expert > 1 and model.moe is None:
        raise ConfigError(
            f"sharding.expert={expert} splits the experts of a mixture of experts, and the model "
            "is dense; set model.moe (e.g. model.moe={experts:8,top_k:2}) or sharding.expert=1"
        )
    batch = "sharding.data*sharding.fsdp" + ("*sharding.expert" if expert > 1 else "")
    splits = [
        *head_splits(tensor, model.n_heads, model.kv_heads),
        Split("sharding.tensor", tensor, "model.d_ff", model.ff),
        Split("sharding.tensor", tensor, "model.vocab_size", model.vocab_size),
        Split("sharding.fsdp", fsdp, "model.d_model", model.d_model),
        *expert_splits(model, expert, tensor),
        Split(batch, data * fsdp * expert, "train.micro_batch_size", micro_batch_size),
    ]
    if eval_batch_size is not None:
        splits.append(Split(batch, data * fsdp * expert, "the eval batch size", eval_batch_size))
    for s in splits:
        if not s.even:
            raise ConfigError(
                f"{s.axis}={s.ranks} does not divide {s.dim}={s.size}; "
                f"choose a mesh whose {s.axis} divides it"
            )


# ---- pipeline parallelism (sharding/pipeline.py runs it) ------------------------------------

PIPELINE_SCHEDULES = tuple(s.value for s in PipelineSchedule)  # as error messages print them
# the schedules that run sharding.virtual_stages > 1 layer chunks per stage
LOOPED_SCHEDULES = (PipelineSchedule.INTERLEAVED.value, PipelineSchedule.BREADTH_FIRST.value)


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline: P stages, V virtual stages each, M micro-batches, the schedule."""

    stages: int = 1
    micro_batches: int = 1
    schedule: PipelineSchedule = PipelineSchedule.GPIPE
    virtual_stages: int = 1

    @property
    def enabled(self) -> bool:
        return self.stages > 1


def check_pipeline(
    n_layers: int,
    stages: int,
    schedule: str,
    virtual_stages: int,
    micro_batches: int,
    rows: int,
    batch_shards: int = 1,
) -> PipelineSpec:
    """Validate the pipeline keys against the model and the batch (one ConfigError line)."""
    for name, v in (
        ("sharding.pipeline", stages),
        ("sharding.virtual_stages", virtual_stages),
        ("train.micro_batches", micro_batches),
    ):
        check_int(name, v, lo=1, what="a positive integer")
    schedule = PipelineSchedule(check_choice("sharding.pipeline_schedule", schedule, PipelineSchedule))
    if schedule not in LOOPED_SCHEDULES and virtual_stages != 1:
        raise ConfigError(
            f"sharding.virtual_stages={virtual_stages} needs a looped schedule: "
            f"sharding.pipeline_schedule={' or '.join(LOOPED_SCHEDULES)} (got {schedule})"
        )
    if n_layers % (stages * virtual_stages):
        raise ConfigError(
            f"model.n_layers={n_layers} is not divisible by sharding.pipeline*"
            f"sharding.virtual_stages={stages}*{virtual_stages}; layers must split evenly"
        )
    if rows % micro_batches:
        raise ConfigError(
            f"train.micro_batches={micro_batches} does not divide the "
            f"train.micro_batch_size={rows} rows of a step"
        )
    if (rows // micro_batches) % batch_shards:
        raise ConfigError(
            f"sharding.data*sharding.fsdp={batch_shards} does not divide the "
            f"{rows // micro_batches} rows of a pipeline micro-batch "
            f"(train.micro_batch_size={rows} / train.micro_batches={micro_batches})"
        )
    if schedule == PipelineSchedule.INTERLEAVED and virtual_stages > 1 and micro_batches < stages:
        raise ConfigError(
            f"sharding.pipeline_schedule=interleaved needs train.micro_batches >= sharding.pipeline "
            f"(got {micro_batches} < {stages}); use sharding.pipeline_schedule=breadth_first for fewer"
        )
    return PipelineSpec(stages, micro_batches, schedule, virtual_stages)


# ---- sequence and context parallelism (sharding/rules.py, sharding/context.py) -------------


def check_sequence_layout(
    model: ModelConfig, tensor: int | None, context: int, sequence_parallel: bool
) -> None:
    """One ConfigError line if `sharding.context` / `sharding.sequence_parallel` cannot split
    the sequence: SP needs tensor > 1, and the sequence must split evenly over context (and
    over context x tensor under SP). `tensor=None` (not resolved yet) skips the SP checks."""
    check_int("sharding.context", context, lo=1, what="a positive integer")
    if not isinstance(sequence_parallel, bool):
        raise ConfigError(f"sharding.sequence_parallel must be true or false (got {sequence_parallel!r})")
    if tensor is None:
        sequence_parallel = False
    if sequence_parallel and tensor <= 1:
        raise ConfigError(
            "sharding.sequence_parallel=true needs sharding.tensor>1 "
            f"(got sharding.tensor={tensor}): it splits norms/residuals over the tensor axis"
        )
    if not sequence_split(model.seq_len, context, 1, False).even:
        raise ConfigError(
            f"sharding.context={context} does not divide model.seq_len={model.seq_len}; "
            "the sequence must split evenly over the context axis"
        )
    if sequence_parallel and not sequence_split(model.seq_len, context, tensor, True).even:
        raise ConfigError(
            f"sharding.context*sharding.tensor={context}*{tensor} does not divide "
            f"model.seq_len={model.seq_len}; sequence parallelism splits it over both"
        )
