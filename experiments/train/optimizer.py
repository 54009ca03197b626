"""Optimizer: optax AdamW with warmup + (cosine | linear | wsd | constant) schedule, global-norm
clipping and a weight-decay mask.

Lengths are given in tokens in the config (`optim.warmup_tokens`) and converted to steps by the
config validator, so a schedule means the same thing at every batch size. `OptimConfig` (the
`optim.*` keys, their types and defaults) lives with the other config dataclasses in
experiments/train/config.py.
The decay mask excludes 1-D parameters (norm scales, and biases if a model has them) and the
embedding matrices (input embedding and output head) unless `optim.decay_norms` /
`optim.decay_embeddings` say otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from experiments.train.config import OptimConfig, Schedule


def make_schedule(cfg: OptimConfig, total_steps: int, warmup_steps: int) -> optax.Schedule:
    """lr(step) for step = 0 .. total_steps-1: linear warmup from 0, then the named shape."""
    peak, floor = cfg.lr, cfg.lr * cfg.min_lr_ratio
    rest = max(total_steps - warmup_steps, 1)
    if cfg.schedule == Schedule.CONSTANT:
        after = optax.constant_schedule(peak)
    elif cfg.schedule == Schedule.COSINE:
        after = optax.cosine_decay_schedule(peak, rest, alpha=cfg.min_lr_ratio)
    elif cfg.schedule == Schedule.LINEAR:
        after = optax.linear_schedule(peak, floor, rest)
    else:  # Schedule.WSD: stable at peak, then linear decay over the last decay_fraction of the run
        decay = max(int(round(cfg.decay_fraction * total_steps)), 1)
        stable = max(rest - decay, 0)
        after = optax.join_schedules(
            [optax.constant_schedule(peak), optax.linear_schedule(peak, floor, decay)], [stable]
        )
    if warmup_steps <= 0:
        return after
    # Step s of warmup uses lr peak*(s+1)/warmup so the very first update is not zero.
    warm = lambda s: peak * (jnp.asarray(s, jnp.float32) + 1.0) / warmup_steps
    return optax.join_schedules([warm, after], [warmup_steps])


def _is_embedding(path: tuple[Any, ...]) -> bool:
    """The input embedding or the output head (parameter names `embed_*`, `head_*`)."""
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    return any(n.startswith(("embed_", "head_")) for n in names)


def decay_mask(params: Any, cfg: OptimConfig) -> Any:
    """True for parameters that get weight decay (same tree as params)."""

    def keep(path: tuple[Any, ...], leaf: Any) -> bool:
        if jnp.ndim(leaf) < 2:
            return cfg.decay_norms
        if _is_embedding(path):
            return cfg.decay_embeddings
        return True

    return jax.tree_util.tree_map_with_path(keep, params)


def _is_hidden_matrix(path: tuple[Any, ...], leaf: Any) -> bool:
    """A weight matrix between two width-sized dims (attention and MLP), not an embedding,
    the output head or a norm scale."""
    return jnp.ndim(leaf) >= 2 and not _is_embedding(path)


def scale_hidden_updates(factor: float) -> optax.GradientTransformation:
    """Multiply the updates of hidden matrices by `factor`: µP's per-layer Adam learning rate
    (lr / width multiplier for hidden weights; embeddings, head and norms keep lr). Applied after
    adamw, so decoupled weight decay scales with the learning rate, as in mup's MuAdamW."""

    def update(updates, state, params=None):
        del params
        return jax.tree_util.tree_map_with_path(
            lambda path, u: u * factor if _is_hidden_matrix(path, u) else u, updates
        ), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(
    cfg: OptimConfig, schedule: optax.Schedule, model: Any = None
) -> optax.GradientTransformation:
    """clip_by_global_norm(clip) -> adamw(schedule, mask=decay_mask) [-> µP hidden-matrix
    learning-rate scale 1 / model.width_mult when `model` (a ModelConfig) is µP]."""
    parts = []
    if cfg.clip:
        parts.append(optax.clip_by_global_norm(cfg.clip))
    parts.append(
        optax.adamw(
            schedule,
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=lambda p: decay_mask(p, cfg),
        )
    )
    width_mult = 1.0 if model is None else float(model.width_mult)
    if width_mult != 1.0:
        parts.append(scale_hidden_updates(1.0 / width_mult))
    return optax.chain(*parts)


LrFn = Callable[[int], float]
