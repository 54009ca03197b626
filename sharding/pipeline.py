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
  stage (looped schedules: interleaved, breadth_first) or where the head reads them after the
  last one.

Which item each stage runs at each tick is a table (`schedule_table`, passed to the scan as its
xs): the items (micro-batch, virtual stage) are laid out in slots, stage 0 runs slot t at tick t
and stage p runs slot t - p (an item moves one stage a tick). Micro-batches go in groups of G;
each group makes V loops round the stages, each loop W = max(G, P) slots wide (slot j < G of
loop v of group g holds micro-batch g * G + j at virtual stage v; the other slots are idle). An
item leaves the last stage P - 1 slots after entering stage 0 and is written back to its
micro-batch's slot of the stream, where stage 0 reads it again at least W >= P slots after it
last read it: the dependency (mb, v - 1) -> (mb, v) always holds. The run takes (last used
slot) + P ticks. Idle (stage, tick) entries compute on stale data whose results are never read
(the bubble), so the math (and the gradient, by `jax.grad` of the whole scan) is exactly the
unpipelined model's.

Schedules:
* `gpipe` (V = 1): one group of G = M micro-batches, M + P - 1 ticks (the bubble is the P - 1).
* `1f1b` is accepted and runs GPipe's forward order: under `jax.grad` XLA schedules the backward
  scan itself, so the 1F1B memory ordering (a stage starts backward of micro-batch i before
  forward of i + P) is not expressed; loss and gradients are identical, peak activation memory
  is GPipe's.
* `interleaved` (V > 1; Narayanan et al. 2021, Megatron's interleaved schedule): depth-first,
  groups of G = P micro-batches: a stage runs P micro-batches on chunk 0, the same P on chunk 1,
  ..., on chunk V - 1, then the next P. M * V + P - 1 ticks when P divides M; otherwise the last
  group is padded to P slots a loop ((V - 1) * (P - M mod P) idle ticks more). Needs M >= P.
* `breadth_first` (V > 1; Lamy-Poirier 2022, "Breadth-First Pipeline Parallelism",
  arXiv:2211.05953): one group of G = M: a stage runs all M micro-batches on chunk 0, then all
  M on chunk 1, and so on (the backward, the reverse of the scan, runs chunk V - 1 for all
  micro-batches first). M * V + P - 1 ticks for any M >= P (no multiple of P needed); with
  M < P each loop is padded to P slots ((V - 1) * (P - M) idle ticks more), which interleaved
  refuses. For M <= P the two orders coincide.
  What the paper gains from the order and this design does not express: each stage uses one
  chunk for M consecutive ticks, so a hand-written schedule gathers a sharded (FSDP) chunk once
  per loop and reduces its gradient once, overlapped with the loops still running. Here the
  chunk is picked by a dynamic index inside every tick and XLA places the fsdp gathers and the
  data-parallel gradient reductions in the tick loop for both looped schedules alike; the tick
  count and the activations kept for the backward are also the same as interleaved's when P
  divides M. So in this trainer breadth_first is the paper's order with equal math and cost,
  plus micro-batch counts interleaved cannot run without padding.

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

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models import axes
from models.config import ModelConfig
from models.transformer import BLOCK_FORWARD, Block, logical_axes
from sharding.layouts import PipelineSchedule
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


@dataclasses.dataclass(frozen=True)
class ScheduleTable:
    """Which item every stage works on at every tick: arrays [T, P] (T ticks, P stages).

    micro_batch[t, p], virtual_stage[t, p]: the item (micro-batch, virtual stage) stage p runs at
    tick t; active[t, p]: False in the bubble (the stage computes on stale data, never read).
    """

    micro_batch: np.ndarray
    virtual_stage: np.ndarray
    active: np.ndarray

    @property
    def ticks(self) -> int:
        return self.active.shape[0]

    @property
    def bubble(self) -> float:
        """Idle share of the stage-ticks (every stage is busy M * V ticks)."""
        return 1.0 - float(self.active.mean())

    def order(self, stage: int) -> list[tuple[int, int]]:
        """The (micro-batch, virtual stage) items of one stage, in the order it runs them."""
        rows = np.flatnonzero(self.active[:, stage])
        return [(int(self.micro_batch[t, stage]), int(self.virtual_stage[t, stage])) for t in rows]


def schedule_table(pipe: PipelineSpec) -> ScheduleTable:
    """The tick table of `pipe`'s schedule (see the module docstring: groups of G micro-batches,
    G = M breadth-first / gpipe / 1f1b, G = P depth-first interleaved, each loop W = max(G, P)
    slots wide; stage p runs slot t - p at tick t)."""
    P, V, M = pipe.stages, pipe.virtual_stages, pipe.micro_batches
    G = P if pipe.schedule == PipelineSchedule.INTERLEAVED else M
    W = max(G, P)  # an item is back at stage 0 P slots after it left: a loop needs >= P slots
    slot = np.arange(-(-M // G) * V * W)
    group, v, j = slot // (V * W), slot % (V * W) // W, slot % W
    mb = group * G + j
    used = (j < G) & (mb < M)
    ticks = int(np.flatnonzero(used)[-1]) + P  # the last item leaves stage P - 1
    s_TxP = np.arange(ticks)[:, None] - np.arange(P)[None, :]  # the slot each stage runs
    inside = (s_TxP >= 0) & (s_TxP < slot.size)
    s_TxP = np.clip(s_TxP, 0, slot.size - 1)
    active = inside & used[s_TxP]
    # idle entries point at item (0, 0): valid indices whose results are never read
    return ScheduleTable(
        micro_batch=np.where(active, mb[s_TxP], 0).astype(np.int32),
        virtual_stage=np.where(active, v[s_TxP], 0).astype(np.int32),
        active=active,
    )


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
    table = schedule_table(pipe)

    def run_chunk(w_Sx, x_mxLxD):
        """One stage chunk: its S layers in order (a scan over the stacked layer dim)."""

        def layer(x, w):
            block = nnx.merge(block_graphdef, jax.tree.map(lambda a: nnx.Param(a, eager_sharding=False), w))
            return fwd(block, x), None

        return jax.lax.scan(layer, x_mxLxD, w_Sx)[0]

    stage_ids = jnp.arange(P)

    def tick(carry, row):
        state_PxmxLxD, stream_MxmxLxD = carry
        mb_P, v_P, active_P = row  # this tick's row of the schedule table
        # stage 0 takes its item from the stream, stage p > 0 what stage p - 1 made last tick
        # (a shift, not a roll: stage 0 never reads the wrap-around, and without it XLA emits
        # one collective-permute p -> p + 1 per tick instead of a shift and a wrap)
        shifted = jnp.concatenate([jnp.zeros_like(state_PxmxLxD[:1]), state_PxmxLxD[:-1]], axis=0)
        fresh = jax.lax.dynamic_index_in_dim(stream_MxmxLxD, mb_P[0], axis=0, keepdims=False)
        inputs = jnp.where((stage_ids == 0)[:, None, None, None], fresh[None], shifted)
        inputs = jax.lax.with_sharding_constraint(inputs, act(STAGE_AXIS, BATCH_AXES, FREE, FREE))
        w = (
            jax.tree.map(lambda a: jax.vmap(lambda a_v_p, vi: a_v_p[vi], in_axes=(1, 0))(a, v_P), stacked)
            if V > 1
            else jax.tree.map(lambda a: a[0], stacked)
        )
        out = jax.vmap(run_chunk, spmd_axis_name=STAGE_AXIS)(w, inputs)
        out = jax.lax.with_sharding_constraint(out, act(STAGE_AXIS, BATCH_AXES, FREE, FREE))
        # the last stage writes its item back into the micro-batch's slot of the stream
        slot = mb_P[P - 1]
        old = jax.lax.dynamic_index_in_dim(stream_MxmxLxD, slot, axis=0, keepdims=False)
        new = jnp.where(active_P[P - 1], out[P - 1], old)
        stream_MxmxLxD = jax.lax.dynamic_update_index_in_dim(stream_MxmxLxD, new, slot, axis=0)
        return (out, stream_MxmxLxD), None

    stream = x_BxLxD.reshape(M, B // M, L, D)
    stream = jax.lax.with_sharding_constraint(stream, act(None, BATCH_AXES, FREE, FREE))
    state = jnp.zeros((P, B // M, L, D), x_BxLxD.dtype)
    rows = (jnp.asarray(table.micro_batch), jnp.asarray(table.virtual_stage), jnp.asarray(table.active))
    (_, stream), _ = jax.lax.scan(tick, (state, stream), rows)
    out = stream.reshape(B, L, D)
    return axes.constrain(out, (axes.BATCH, axes.LENGTH, axes.ACT_EMBED))


def block_graphdef_and_axes(abstract_model: Any) -> tuple[nnx.GraphDef, Any]:
    """The graphdef of one Block (to rebuild a block from a slice of stacked parameters) and the
    logical axis names of its parameters."""
    block: Block = abstract_model.block_0
    graphdef, _ = nnx.split(block, nnx.Param)
    return graphdef, logical_axes(abstract_model)["block_0"]
