"""Pipeline parallelism over the `stage` mesh axis: a scan over pipeline ticks, stages vmapped.

The design is MaxText's (`maxtext/layers/pipeline.py`), written for GSPMD rather than with
explicit `shard_map` + `ppermute`:

* the transformer blocks are stacked into arrays of shape [V, P, S, ...] (V virtual stages per
  device, P = `sharding.pipeline` stages, S = n_layers / (P * V) layers per stage chunk); the P
  dimension is constrained to the `stage` mesh axis, so device p only ever holds and runs its
  own layers (chunk (v, p) holds layers (v * P + p) * S ... + S - 1);
* a state buffer [P, m, L, D] (one micro-batch of activations per stage, P on `stage`) is
  advanced by a `lax.scan` over ticks: every tick all stages run their chunk at once
  (`jax.vmap(..., spmd_axis_name="stage")`), then the buffer is shifted by one stage (a
  concatenate over the `stage`-sharded dimension, which XLA lowers to one collective-permute
  p -> p + 1: the pp send/recv);
* a stream buffer [M, m, L, D] holds the micro-batches: the embeddings at the start; the last
  stage writes its outputs back into it, where stage 0 picks them up again for the next virtual
  stage (interleaved / circular schedule) or where the head reads them after the last one.

Stage p at tick t works on item k = t - p, micro-batch k mod M, virtual stage k // M; a run takes
M * V + P - 1 ticks (the GPipe bubble is the P - 1). The circular schedule needs M >= P so that
an item is back at stage 0 before it is needed. Ticks outside a stage's work compute on stale
data whose results are never read (the bubble), so the math (and the gradient, by `jax.grad` of
the whole scan) is exactly the unpipelined model's.

Schedules: `gpipe` (V = 1) and `interleaved` (V > 1) run as described. `1f1b` is accepted and
runs the same forward order as GPipe: under `jax.grad` XLA schedules the backward scan itself,
so the 1F1B memory ordering (a stage starts backward of micro-batch i before forward of i + P)
is not expressed; loss and gradients are identical, peak activation memory is GPipe's.

Embedding and head: computed outside the pipeline with the usual batch / tensor sharding, i.e.
replicated over `stage` (every stage computes them; their parameters are not split over stages).
Parameters and optimizer state keep the unpipelined tree (so checkpoints are the same) and are
replicated over `stage`; the blocks are sliced per stage inside the step.

Costs this design pays, measured against the compiled program (tests/test_costmodel_xla.py,
docs/costmodel.md; the cost model's `Layout.gspmd_pipeline`): parameters and Adam state are
not divided by P; with data parallelism XLA all-reduces each tick's chunk weight gradients
inside the tick loop (M·V + P − 1 reductions of a chunk instead of one per step); an
all-reduce over `stage` replicates the block gradients, and stacking the blocks costs
all-to-alls. Splitting the parameters over stages (a stacked parameter tree) would remove all
three.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models import axes
from models.config import ModelConfig
from models.transformer import BLOCK_FORWARD, Block, logical_axes
from sharding.rules import BATCH_AXES, logical_to_spec
from sharding.validate import PipelineSpec

STAGE_AXIS = "stage"


def _stack_blocks(params: dict[str, Any], cfg: ModelConfig, pipe: PipelineSpec) -> Any:
    """Per-layer block parameters -> one tree with leaves [V, P, S, ...] (layer (v*P+p)*S+s)."""
    V, P = pipe.virtual_stages, pipe.stages
    S = cfg.n_layers // (V * P)
    blocks = [params[f"block_{i}"] for i in range(cfg.n_layers)]
    return jax.tree.map(lambda *xs: jnp.stack(xs).reshape((V, P, S) + xs[0].shape), *blocks)


def _constrain_stacked(stacked: Any, block_axes: Any, mesh: Mesh) -> Any:
    """Put the P dimension of the stacked blocks on `stage`, the rest as the rules say."""

    def one(x, names):
        spec = PartitionSpec(None, STAGE_AXIS, None, *logical_to_spec(names))
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    return jax.tree.map(one, stacked, block_axes)


def pipelined_blocks(
    cfg: ModelConfig,
    pipe: PipelineSpec,
    mesh: Mesh,
    block_graphdef: nnx.GraphDef,
    block_axes: Any,
    params: dict[str, Any],
    x_BxLxD: jax.Array,
) -> jax.Array:
    """All n_layers blocks applied to x_BxLxD through the pipeline (same result as in sequence)."""
    P, V, M = pipe.stages, pipe.virtual_stages, pipe.micro_batches
    B, L, D = x_BxLxD.shape
    fwd = BLOCK_FORWARD[cfg.remat]
    stacked = _constrain_stacked(_stack_blocks(params, cfg, pipe), block_axes, mesh)
    act = lambda *names: NamedSharding(mesh, PartitionSpec(*names))
    # length / d_model of the buffers: left to XLA (context / sequence parallelism shard them)
    FREE = PartitionSpec.UNCONSTRAINED

    def run_chunk(w_Sx, x_mxLxD):
        """One stage chunk: its S layers in order (a scan over the stacked layer dim)."""

        def layer(x, w):
            block = nnx.merge(block_graphdef, jax.tree.map(lambda a: nnx.Param(a, eager_sharding=False), w))
            return fwd(block, x), None

        return jax.lax.scan(layer, x_mxLxD, w_Sx)[0]

    stage_ids = jnp.arange(P)

    def tick(carry, t):
        state_PxmxLxD, stream_MxmxLxD = carry
        # stage 0 takes the next item from the stream, stage p > 0 what stage p - 1 made last tick
        # (a shift, not a roll: stage 0 never reads the wrap-around, and without it XLA emits
        # one collective-permute p -> p + 1 per tick instead of a shift and a wrap)
        shifted = jnp.concatenate([jnp.zeros_like(state_PxmxLxD[:1]), state_PxmxLxD[:-1]], axis=0)
        fresh = jax.lax.dynamic_index_in_dim(stream_MxmxLxD, t % M, axis=0, keepdims=False)
        inputs = jnp.where((stage_ids == 0)[:, None, None, None], fresh[None], shifted)
        inputs = jax.lax.with_sharding_constraint(inputs, act(STAGE_AXIS, BATCH_AXES, FREE, FREE))
        k = t - stage_ids  # item each stage works on
        v = jnp.clip(k // M, 0, V - 1)  # its virtual stage
        w = (
            jax.tree.map(lambda a: jax.vmap(lambda a_v_p, vi: a_v_p[vi], in_axes=(1, 0))(a, v), stacked)
            if V > 1
            else jax.tree.map(lambda a: a[0], stacked)
        )
        out = jax.vmap(run_chunk, spmd_axis_name=STAGE_AXIS)(w, inputs)
        out = jax.lax.with_sharding_constraint(out, act(STAGE_AXIS, BATCH_AXES, FREE, FREE))
        k_last = t - (P - 1)
        done = (k_last >= 0) & (k_last < M * V)
        slot = jnp.clip(k_last, 0, None) % M
        old = jax.lax.dynamic_index_in_dim(stream_MxmxLxD, slot, axis=0, keepdims=False)
        new = jnp.where(done, out[P - 1], old)
        stream_MxmxLxD = jax.lax.dynamic_update_index_in_dim(stream_MxmxLxD, new, slot, axis=0)
        return (out, stream_MxmxLxD), None

    stream = x_BxLxD.reshape(M, B // M, L, D)
    stream = jax.lax.with_sharding_constraint(stream, act(None, BATCH_AXES, FREE, FREE))
    state = jnp.zeros((P, B // M, L, D), x_BxLxD.dtype)
    (_, stream), _ = jax.lax.scan(tick, (state, stream), jnp.arange(M * V + P - 1))
    out = stream.reshape(B, L, D)
    return axes.constrain(out, (axes.BATCH, axes.LENGTH, axes.ACT_EMBED))


def block_graphdef_and_axes(abstract_model: Any) -> tuple[nnx.GraphDef, Any]:
    """The graphdef of one Block (to rebuild a block from a slice of stacked parameters) and the
    logical axis names of its parameters."""
    block: Block = abstract_model.block_0
    graphdef, _ = nnx.split(block, nnx.Param)
    return graphdef, logical_axes(abstract_model)["block_0"]
