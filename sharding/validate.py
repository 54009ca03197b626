"""Check, before anything is compiled, that a mesh divides the model and the batch.

Each failure names the config keys involved, e.g.
`sharding.tensor=3 does not divide model.n_heads=4`.
"""

from __future__ import annotations

import dataclasses

from models.base.errors import ConfigError
from models.config import ModelConfig


def validate_layout(
    model: ModelConfig,
    data: int,
    fsdp: int,
    tensor: int,
    micro_batch_size: int,
    eval_batch_size: int | None = None,
) -> None:
    """Raise ConfigError if any sharded dimension is not divisible by its mesh axes."""
    checks = [
        (tensor, "sharding.tensor", model.n_heads, "model.n_heads"),
        (tensor, "sharding.tensor", model.kv_heads, "model.n_kv_heads"),
        (tensor, "sharding.tensor", model.ff, "model.d_ff"),
        (tensor, "sharding.tensor", model.vocab_size, "model.vocab_size"),
        (fsdp, "sharding.fsdp", model.d_model, "model.d_model"),
        (data * fsdp, "sharding.data*sharding.fsdp", micro_batch_size, "train.micro_batch_size"),
    ]
    if eval_batch_size is not None:
        checks.append((data * fsdp, "sharding.data*sharding.fsdp", eval_batch_size, "the eval batch size"))
    for n, n_name, dim, dim_name in checks:
        if dim % n:
            raise ConfigError(
                f"{n_name}={n} does not divide {dim_name}={dim}; choose a mesh whose {n_name} divides it"
            )


# ---- pipeline parallelism (sharding/pipeline.py runs it) ------------------------------------

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline: P stages, V virtual stages each, M micro-batches, the schedule."""

    stages: int = 1
    micro_batches: int = 1
    schedule: str = "gpipe"
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
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be a positive integer (got {v!r})")
    if schedule not in PIPELINE_SCHEDULES:
        raise ConfigError(
            f"sharding.pipeline_schedule must be one of {PIPELINE_SCHEDULES} (got {schedule!r})"
        )
    if schedule != "interleaved" and virtual_stages != 1:
        raise ConfigError(
            f"sharding.virtual_stages={virtual_stages} needs sharding.pipeline_schedule=interleaved"
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
    if virtual_stages > 1 and micro_batches < stages:
        raise ConfigError(
            f"the interleaved schedule needs train.micro_batches >= sharding.pipeline "
            f"(got {micro_batches} < {stages})"
        )
    return PipelineSpec(stages, micro_batches, schedule, virtual_stages)


# ---- sequence and context parallelism (sharding/rules.py, sharding/context.py) -------------


def check_sequence_layout(
    model: ModelConfig, tensor: int | None, context: int, sequence_parallel: bool
) -> None:
    """One ConfigError line if `sharding.context` / `sharding.sequence_parallel` cannot split
    the sequence: SP needs tensor > 1, and the sequence must split evenly over context (and
    over context x tensor under SP). `tensor=None` (not resolved yet) skips the SP checks."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ConfigError(f"sharding.context must be a positive integer (got {context!r})")
    if not isinstance(sequence_parallel, bool):
        raise ConfigError(f"sharding.sequence_parallel must be true or false (got {sequence_parallel!r})")
    if tensor is None:
        sequence_parallel = False
    if sequence_parallel and tensor <= 1:
        raise ConfigError(
            "sharding.sequence_parallel=true needs sharding.tensor>1 "
            f"(got sharding.tensor={tensor}): it splits norms/residuals over the tensor axis"
        )
    if model.seq_len % context:
        raise ConfigError(
            f"sharding.context={context} does not divide model.seq_len={model.seq_len}; "
            "the sequence must split evenly over the context axis"
        )
    if sequence_parallel and model.seq_len % (context * tensor):
        raise ConfigError(
            f"sharding.context*sharding.tensor={context}*{tensor} does not divide "
            f"model.seq_len={model.seq_len}; sequence parallelism splits it over both"
        )
