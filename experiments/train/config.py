"""The one validator: raw Hydra config -> `RunSpec` of checked, derived values.

Everything a run needs to know (model sizes, step counts, micro-batching, warmup steps, mesh axis
sizes, eval batches, divergence ceiling) is derived and checked here, before any JAX compile, so
that bad input ends with one `ConfigError` line naming the key. It touches JAX only to count
devices.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from experiments.train.corpus import DataConfig, check_paths, data_vocab_size
from experiments.train.optimizer import OptimConfig
from experiments.rundir import config_fingerprint, fingerprint_fields
from models.base.configs import to_plain
from models.config import ModelConfig
from models.base.configs import config_from_mapping
from models.base.errors import ConfigError
from models.flops import flops_per_token, non_embedding_param_count, param_count


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 16
    micro_batch_size: int | None = None
    tokens: float | None = None
    steps: int | None = None
    eval_every: int = 100
    eval_tokens: int = 16384
    ckpt_every: int = 100
    seed: int = 0
    log_every: int = 1
    loss_ceiling: float | None = None
    keep_checkpoints: int = 2
    progress_every_s: float = 2.0

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "TrainConfig":
        return config_from_mapping(cls, m, "train")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A validated run: the typed configs plus every derived number the trainer uses."""

    model: ModelConfig
    train: TrainConfig
    optim: OptimConfig
    data: DataConfig
    mesh_shape: tuple[int, int, int]   # resolved (data, fsdp, tensor)
    distributed: dict[str, Any]
    steps: int
    tokens_per_step: int
    total_tokens: int
    micro_batch_size: int
    n_micro: int
    warmup_steps: int
    eval_batch_size: int
    eval_batches: int
    loss_ceiling: float
    n_params: int
    n_params_non_embedding: int
    flops_per_token: int
    fingerprint: str
    fingerprint_fields: dict[str, Any]
    raw: dict[str, Any]

    @property
    def n_devices(self) -> int:
        return math.prod(self.mesh_shape)


def _int(name: str, v: Any, lo: int = 1) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ConfigError(f"{name} must be an integer >= {lo} (got {v!r})")
    return v


def resolve_config(cfg: Any, n_devices: int | None = None) -> RunSpec:
    """Validate the whole config and derive the run's numbers (raises ConfigError)."""
    raw = to_plain(cfg)
    if not isinstance(raw, dict):
        raise ConfigError("config must be a mapping")
    for group in ("model", "train", "optim", "data", "sharding"):
        if not isinstance(raw.get(group), dict):
            raise ConfigError(f"config group {group!r} is missing")
    data = DataConfig.from_mapping(raw["data"])
    check_paths(data)
    model = ModelConfig.from_mapping(raw["model"])
    optim = OptimConfig.from_mapping(raw["optim"])
    train = TrainConfig.from_mapping(raw["train"])

    dvocab = data_vocab_size(data)
    if model.vocab_size < dvocab:
        raise ConfigError(f"model.vocab_size={model.vocab_size} is smaller than the data's vocabulary "
                          f"({dvocab}); set model.vocab_size >= {dvocab}")

    batch = _int("train.batch_size", train.batch_size)
    micro = batch if train.micro_batch_size is None else _int("train.micro_batch_size", train.micro_batch_size)
    if batch % micro:
        raise ConfigError(f"train.micro_batch_size={micro} does not divide train.batch_size={batch}")
    tokens_per_step = batch * model.seq_len
    if train.steps is not None:
        steps = _int("train.steps", train.steps)
    elif train.tokens is not None:
        tok = train.tokens
        if isinstance(tok, bool) or not isinstance(tok, (int, float)) or not tok > 0 or tok != tok:
            raise ConfigError(f"train.tokens must be a positive number (got {tok!r})")
        steps = max(1, math.ceil(tok / tokens_per_step))
    else:
        raise ConfigError("give train.steps or train.tokens")
    total_tokens = steps * tokens_per_step
    eval_every = _int("train.eval_every", train.eval_every, lo=0)
    ckpt_every = _int("train.ckpt_every", train.ckpt_every, lo=0)
    _int("train.eval_tokens", train.eval_tokens)
    _int("train.seed", train.seed, lo=0)
    _int("train.log_every", train.log_every)
    _int("train.keep_checkpoints", train.keep_checkpoints)
    del eval_every, ckpt_every

    if optim.warmup_tokens is None:
        warmup_steps = int(round(0.05 * steps))
    else:
        if optim.warmup_tokens >= total_tokens and optim.warmup_tokens > 0:
            raise ConfigError(f"optim.warmup_tokens={optim.warmup_tokens:g} is not smaller than the run's "
                              f"{total_tokens} tokens")
        warmup_steps = int(math.ceil(optim.warmup_tokens / tokens_per_step))

    eval_bs = micro
    eval_batches = max(1, math.ceil(train.eval_tokens / (eval_bs * model.seq_len)))
    ceiling = train.loss_ceiling
    if ceiling is None:
        ceiling = 2.0 * math.log(model.vocab_size) + 1.0
    elif isinstance(ceiling, bool) or not isinstance(ceiling, (int, float)) or not ceiling > 0:
        raise ConfigError(f"train.loss_ceiling must be a positive number (got {ceiling!r})")

    sh = raw["sharding"]
    unknown = sorted(set(sh) - {"data", "fsdp", "tensor"})
    if unknown:
        raise ConfigError(f"unknown sharding key(s) {unknown}; known: data, fsdp, tensor")
    from sharding.mesh import resolve_axis_sizes
    from sharding.validate import validate_layout
    # Divisibility by the axes given explicitly first (the clearer message), then the device count.
    fixed = [sh.get(k, 1) for k in ("data", "fsdp", "tensor")]
    if all(isinstance(v, int) and not isinstance(v, bool) and (v >= 1 or v == -1) for v in fixed):
        validate_layout(model, *[max(v, 1) for v in fixed], micro_batch_size=micro, eval_batch_size=eval_bs)
    if n_devices is None:
        import jax
        n_devices = jax.device_count()
    mesh_shape = resolve_axis_sizes([sh.get("data", 1), sh.get("fsdp", 1), sh.get("tensor", 1)], n_devices)
    validate_layout(model, *mesh_shape, micro_batch_size=micro, eval_batch_size=eval_bs)

    return RunSpec(
        model=model, train=train, optim=optim, data=data, mesh_shape=mesh_shape,
        distributed=dict(raw.get("distributed") or {}),
        steps=steps, tokens_per_step=tokens_per_step, total_tokens=total_tokens,
        micro_batch_size=micro, n_micro=batch // micro, warmup_steps=warmup_steps,
        eval_batch_size=eval_bs, eval_batches=eval_batches, loss_ceiling=float(ceiling),
        n_params=param_count(model), n_params_non_embedding=non_embedding_param_count(model),
        flops_per_token=flops_per_token(model), fingerprint=config_fingerprint(raw),
        fingerprint_fields=fingerprint_fields(raw), raw=raw)
