"""Check, before anything is compiled, that a mesh divides the model and the batch.

Each failure names the config keys involved, e.g.
`sharding.tensor=3 does not divide model.n_heads=4`.
"""

from __future__ import annotations

from models.config import ModelConfig
from models.base.errors import ConfigError


def validate_layout(model: ModelConfig, data: int, fsdp: int, tensor: int,
                    micro_batch_size: int, eval_batch_size: int | None = None) -> None:
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
            raise ConfigError(f"{n_name}={n} does not divide {dim_name}={dim}; "
                              f"choose a mesh whose {n_name} divides it")
