"""Optimizer: optax AdamW with warmup + (cosine | linear | wsd | constant) schedule, global-norm
clipping and a weight-decay mask.

Lengths are given in tokens in the config (`optim.warmup_tokens`) and converted to steps by the
config validator, so a schedule means the same thing at every batch size.
The decay mask excludes 1-D parameters (norm scales, and biases if a model has them) and the
embedding matrices (input embedding and output head) unless `optim.decay_norms` /
`optim.decay_embeddings` say otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from models.base.configs import config_from_mapping
from models.base.errors import ConfigError

SCHEDULES = ("cosine", "linear", "wsd", "constant")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-3
    schedule: str = "cosine"
    warmup_tokens: float | None = None   # None: 5% of the run
    min_lr_ratio: float = 0.1            # final lr / peak lr for cosine / linear / wsd
    decay_fraction: float = 0.2          # wsd: fraction of the run spent decaying
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    clip: float | None = 1.0             # global-norm clip; None or 0 disables
    decay_norms: bool = False
    decay_embeddings: bool = False

    @classmethod
    def from_mapping(cls, m: dict[str, Any]) -> "OptimConfig":
        return config_from_mapping(cls, m, "optim")

    def validate(self) -> None:
        if self.name != "adamw":
            raise ConfigError(f"optim.name must be adamw (got {self.name!r})")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"optim.schedule must be one of {SCHEDULES} (got {self.schedule!r})")
        def num(name: str, lo: float, hi: float | None = None, lo_open: bool = True) -> None:
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
            ok = ok and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
            if not ok:
                rng = f"{'>' if lo_open else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")
                raise ConfigError(f"optim.{name} must be a number {rng} (got {v!r})")
        num("lr", 0.0)
        num("min_lr_ratio", 0.0, 1.0, lo_open=False)
        num("decay_fraction", 0.0, 1.0)
        num("weight_decay", 0.0, lo_open=False)
        num("b1", 0.0, 1.0, lo_open=False)
        num("b2", 0.0, 1.0, lo_open=False)
        num("eps", 0.0)
        if self.clip is not None:
            num("clip", 0.0, lo_open=False)
        if self.warmup_tokens is not None:
            num("warmup_tokens", 0.0, lo_open=False)


def make_schedule(cfg: OptimConfig, total_steps: int, warmup_steps: int) -> optax.Schedule:
    """lr(step) for step = 0 .. total_steps-1: linear warmup from 0, then the named shape."""
    peak, floor = cfg.lr, cfg.lr * cfg.min_lr_ratio
    rest = max(total_steps - warmup_steps, 1)
    if cfg.schedule == "constant":
        after = optax.constant_schedule(peak)
    elif cfg.schedule == "cosine":
        after = optax.cosine_decay_schedule(peak, rest, alpha=cfg.min_lr_ratio)
    elif cfg.schedule == "linear":
        after = optax.linear_schedule(peak, floor, rest)
    else:  # wsd: stable at peak, then linear decay over the last decay_fraction of the run
        decay = max(int(round(cfg.decay_fraction * total_steps)), 1)
        stable = max(rest - decay, 0)
        after = optax.join_schedules(
            [optax.constant_schedule(peak), optax.linear_schedule(peak, floor, decay)], [stable])
    if warmup_steps <= 0:
        return after
    # Step s of warmup uses lr peak*(s+1)/warmup so the very first update is not zero.
    warm = lambda s: peak * (jnp.asarray(s, jnp.float32) + 1.0) / warmup_steps
    return optax.join_schedules([warm, after], [warmup_steps])


def decay_mask(params: Any, cfg: OptimConfig) -> Any:
    """True for parameters that get weight decay (same tree as params)."""
    def keep(path: tuple[Any, ...], leaf: Any) -> bool:
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        is_embedding = any(n.startswith(("embed_", "head_")) for n in names)
        if jnp.ndim(leaf) < 2:
            return cfg.decay_norms
        if is_embedding:
            return cfg.decay_embeddings
        return True
    return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(cfg: OptimConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
    """clip_by_global_norm(clip) -> adamw(schedule, mask=decay_mask)."""
    parts = []
    if cfg.clip:
        parts.append(optax.clip_by_global_norm(cfg.clip))
    parts.append(optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                             weight_decay=cfg.weight_decay,
                             mask=lambda p: decay_mask(p, cfg)))
    return optax.chain(*parts)


LrFn = Callable[[int], float]
