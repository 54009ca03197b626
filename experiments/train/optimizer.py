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

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.train.config import PACKABLE_OPTIM_KEYS, OptimConfig, Schedule, wsd_decay_steps

# `schedule_value`'s shape index: the position of each Schedule in this tuple (a step input).
SCHEDULE_KINDS = (Schedule.COSINE, Schedule.LINEAR, Schedule.WSD, Schedule.CONSTANT)

# The scalars that differ between runs of one compiled program (packed runs, WSD branches): the
# train step takes them as an input (`Hyper`), so runs differing only in these share a compilation.
HYPER_KEYS = (
    "lr",
    "weight_decay",
    "min_lr_ratio",
    "warmup_steps",
    "total_steps",
    "decay_steps",
    "kind",
    "warmup_init",
)


def hyperparams(cfg: OptimConfig, total_steps: int, warmup_steps: int) -> dict[str, np.ndarray]:
    """The step inputs (`HYPER_KEYS`) of a run: float32 scalars, `kind` an int32 index into
    SCHEDULE_KINDS. wsd decays over round(decay_fraction * total_steps) steps (at least 1)."""
    decay = wsd_decay_steps(total_steps, cfg.decay_fraction)
    f32 = lambda v: np.asarray(v, np.float32)
    return {
        "lr": f32(cfg.lr),
        "weight_decay": f32(cfg.weight_decay),
        "min_lr_ratio": f32(cfg.min_lr_ratio),
        "warmup_steps": f32(warmup_steps),
        "total_steps": f32(total_steps),
        "decay_steps": f32(decay),
        "kind": np.asarray(SCHEDULE_KINDS.index(Schedule(cfg.schedule)), np.int32),
        "warmup_init": f32(cfg.warmup_init),
    }


def schedule_value(hp: dict[str, Any], step: Any) -> jax.Array:
    """lr(step), step = 0 .. total_steps-1, from the run's `hyperparams` (traced or concrete):
    linear warmup from warmup_init*peak (0 by default; step s of warmup uses
    peak*(init + (1-init)*(s+1)/warmup), so the first update is not zero), then the shape `kind`:
    cosine to min_lr_ratio*peak at the end of the run, linear to it, wsd (stable at peak, then
    linear to it over the last decay_steps), or constant.

    Steps count from the run's own start, so a run started from another's weights
    (`train.init_from`, continual pre-training) re-warms: warmup from `warmup_init * peak` (its
    parent's final lr, when set so) to its own peak, then re-decays over its own length."""
    s = jnp.asarray(step, jnp.float32)
    peak, warm, total = hp["lr"], hp["warmup_steps"], hp["total_steps"]
    floor = peak * hp["min_lr_ratio"]
    rest = jnp.maximum(total - warm, 1.0)
    t = s - warm  # steps since the end of warmup
    frac = jnp.clip(t / rest, 0.0, 1.0)
    cosine = peak * (hp["min_lr_ratio"] + (1.0 - hp["min_lr_ratio"]) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac)))
    linear = peak + (floor - peak) * frac
    stable = jnp.maximum(rest - hp["decay_steps"], 0.0)
    wsd = jnp.where(
        t < stable, peak, peak + (floor - peak) * jnp.clip((t - stable) / hp["decay_steps"], 0.0, 1.0)
    )
    after = jnp.select([hp["kind"] == k for k in range(3)], [cosine, linear, wsd], peak)
    init = hp.get("warmup_init", 0.0)
    warming = peak * (init + (1.0 - init) * (s + 1.0) / jnp.maximum(warm, 1.0))
    return jnp.where(s < warm, warming, after)


def make_schedule(cfg: OptimConfig, total_steps: int, warmup_steps: int) -> optax.Schedule:
    """lr(step) for step = 0 .. total_steps-1 with the run's scalars fixed (`schedule_value`)."""
    hp = hyperparams(cfg, total_steps, warmup_steps)
    return lambda step: schedule_value(hp, step)


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
    cfg: OptimConfig, schedule: optax.Schedule, model: Any = None, weight_decay: Any = None
) -> optax.GradientTransformation:
    """clip_by_global_norm(clip) -> adamw(schedule, mask=decay_mask) [-> µP hidden-matrix
    learning-rate scale 1 / model.width_mult when `model` (a ModelConfig) is µP].
    `weight_decay` (default cfg.weight_decay) may be a traced value (`RuntimeOptimizer`)."""
    parts = []
    if cfg.clip:
        parts.append(optax.clip_by_global_norm(cfg.clip))
    parts.append(
        optax.adamw(
            schedule,
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay if weight_decay is None else weight_decay,
            mask=lambda p: decay_mask(p, cfg),
        )
    )
    width_mult = 1.0 if model is None else float(model.width_mult)
    if width_mult != 1.0:
        parts.append(scale_hidden_updates(1.0 / width_mult))
    return optax.chain(*parts)


@dataclasses.dataclass(frozen=True)
class RuntimeOptimizer:
    """The trainer's optimizer with the per-run scalars (`HYPER_KEYS`) as train-step inputs:
    `tx(hp)` builds it inside the step from traced `hp`; `tx(None)` (this run's own `hp`) is
    for state shapes and init. Its optimizer state does not depend on the scalars, so one
    compiled step serves every run that differs only in them (experiments/train/pack.py)."""

    cfg: OptimConfig
    hp: dict[str, Any]  # this run's scalars (`hyperparams`)
    model: Any = None  # ModelConfig (µP learning-rate scale) or None

    def tx(self, hp: dict[str, Any] | None = None) -> optax.GradientTransformation:
        hp = self.hp if hp is None else hp
        return make_optimizer(self.cfg, lambda step: schedule_value(hp, step), self.model, hp["weight_decay"])

    @property
    def static_key(self) -> tuple[Any, ...]:
        """What the compiled step depends on: the optimizer's fields less the runtime scalars."""
        return tuple(
            (f.name, getattr(self.cfg, f.name))
            for f in dataclasses.fields(self.cfg)
            if f.name not in PACKABLE_OPTIM_KEYS
        )


LrFn = Callable[[int], float]
