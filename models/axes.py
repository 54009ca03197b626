"""Logical axis names for parameters and activations, and the hook that constrains activations.

The model only speaks *logical* names (`embed`, `mlp`, `heads`, ...). Mapping them to mesh axes is
the job of `sharding/rules.py`; while a step function is being traced it installs that mapping
with `activation_sharding(fn)`, and `constrain(x, names)` turns into
`jax.lax.with_sharding_constraint`. Outside that context `constrain` is the identity, so the model
runs unchanged on one device and in tests.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Sequence

import jax

# Parameter axes.
EMBED = "embed"  # d_model dimension of a weight
MLP = "mlp"  # d_ff dimension of a weight
HEADS = "heads"  # query-head dimension of a weight
KV_HEADS = "kv_heads"  # key/value-head dimension of a weight
KV = "kv"  # per-head feature dimension (d_head)
VOCAB = "vocab"  # vocabulary dimension of the embedding / head
NORM = "norm"  # the d_model dimension of a norm scale (never sharded)
EXPERT = "expert"  # the routed-expert dimension of a mixture-of-experts weight

# Activation axes.
BATCH = "batch"
LENGTH = "length"  # sequence inside attention / MLP (split over `context`)
RESID_LENGTH = "resid_length"  # sequence of the residual stream and norms (also over `tensor` with SP)
KV_LENGTH = "kv_length"  # key/value sequence inside attention (never split: gathered K/V)
ACT_EMBED = "act_embed"
ACT_MLP = "act_mlp"
ACT_HEADS = "act_heads"
ACT_KV_HEADS = "act_kv_heads"
ACT_VOCAB = "act_vocab"
ACT_EXPERT = "act_expert"  # the expert dimension of tokens dispatched to the routed experts
EXPERT_BATCH = "expert_batch"  # the group (sequence) dimension of dispatched tokens: the batch
# dim once the expert axis has moved from it to ACT_EXPERT (the all-to-all)

PARAM_AXES = (EMBED, MLP, HEADS, KV_HEADS, KV, VOCAB, NORM, EXPERT)
ACTIVATION_AXES = (
    BATCH,
    LENGTH,
    RESID_LENGTH,
    KV_LENGTH,
    ACT_EMBED,
    ACT_MLP,
    ACT_HEADS,
    ACT_KV_HEADS,
    ACT_VOCAB,
    ACT_EXPERT,
    EXPERT_BATCH,
    KV,
)

_local = threading.local()


@contextlib.contextmanager
def activation_sharding(to_sharding: Callable[[Sequence[str | None]], object]) -> Iterator[None]:
    """Within this block, `constrain(x, names)` applies `to_sharding(names)` to `x`.

    If `to_sharding` has an `attention` attribute (a kernel like models.transformer.ATTENTION's),
    `attention_kernel` returns it: the sharding layer swaps in context-parallel attention
    (sharding/context.py) when the sequence is split, without the model knowing the mesh.
    """
    prev = getattr(_local, "fn", None)
    _local.fn = to_sharding
    try:
        yield
    finally:
        _local.fn = prev


def attention_kernel(default: Callable) -> Callable:
    """The attention kernel the installed sharding asks for, else `default`."""
    return getattr(getattr(_local, "fn", None), "attention", None) or default


def sequence_split() -> bool:
    """Whether the installed sharding splits the sequence of activations over devices (context
    parallelism; its `sequence_split` attribute): the model then keeps batch and length apart."""
    return bool(getattr(getattr(_local, "fn", None), "sequence_split", False))


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """Constrain activation `x` (one logical name per dim) if a mapping is installed."""
    fn = getattr(_local, "fn", None)
    if fn is None:
        return x
    assert len(names) == x.ndim, (names, x.shape)
    return jax.lax.with_sharding_constraint(x, fn(tuple(names)))
