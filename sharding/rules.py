"""THE table from logical axis names (see models/axes.py) to mesh axes.

Mesh axes: `data` (pure data parallel: parameters replicated), `fsdp` (data parallel whose
parameters and optimizer state are sharded over it, ZeRO-3 style), `tensor` (Megatron-style
column/row split of attention heads, MLP width and vocabulary), `context` (the sequence split;
attention gathers K/V: sharding/context.py), `expert` (expert parallelism: the routed experts
of a mixture-of-experts layer split over it; everything else treats it as one more data-parallel
axis). A layout is nothing but the sizes of these axes: with one table, dp / fsdp / tp / ep and
their combinations all follow (a mesh axis of size 1 shards nothing).

Expert parallelism (GShard, Lepikhin et al. 2021) by GSPMD: the batch is split over
`data` x `fsdp` x `expert`, the experts' weights over `expert` (logical `expert`), and the routed
layer (models/transformer.py: MoEMLP) constrains its dispatched tokens to expert-sharded
(`act_expert` -> `expert`, their group dim `expert_batch` -> `data` x `fsdp`): the partitioner
moves the `expert` split from the batch dim to the expert dim with an all-to-all, and back after
the experts. The experts' d_model and hidden dims keep the `fsdp` and `tensor` rules, so ep
combines with fsdp and tp.

Megatron pairing falls out of the names: W_q/W_k/W_v and W_gate/W_up are split on their output
(heads / mlp) dim = column parallel, W_o and W_down on their input dim = row parallel, so each
attention or MLP sub-layer needs one reduction of its output.

Sequence parallelism (`sharding.sequence_parallel`, Korthikanti et al. 2022) changes one rule:
the residual stream's sequence dim (`resid_length`: embeddings, norms, residual adds) is split
over `tensor` as well, so the row-parallel outputs are reduce-scattered along the sequence
instead of all-reduced, and the column-parallel inputs (`length`) are all-gathered again.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models import axes

# Mesh axis order = the order of make_mesh's sizes (missing trailing ones are 1); stage and
# context were appended after (data, fsdp, tensor) so existing 3-tuples keep their meaning.
# `expert` comes last: the innermost (neighbouring) devices exchange the experts' all-to-all.
MESH_AXES = (
    "data",
    "fsdp",
    "tensor",
    "stage",
    "context",
    "expert",
)  # stage: pipeline stages (sharding/pipeline.py)
BATCH_AXES = ("data", "fsdp", "expert")

RULES: dict[str, tuple[str, ...] | str | None] = {
    # parameters
    axes.EMBED: "fsdp",  # ZeRO-3: every weight's d_model dim is split over fsdp
    axes.MLP: "tensor",
    axes.HEADS: "tensor",
    axes.KV_HEADS: "tensor",
    axes.VOCAB: "tensor",
    axes.KV: None,
    axes.NORM: None,
    axes.EXPERT: "expert",
    # activations
    axes.BATCH: BATCH_AXES,
    axes.LENGTH: "context",
    axes.RESID_LENGTH: "context",
    axes.KV_LENGTH: None,
    axes.ACT_EMBED: None,
    axes.ACT_MLP: "tensor",
    axes.ACT_HEADS: "tensor",
    axes.ACT_KV_HEADS: "tensor",
    axes.ACT_VOCAB: "tensor",
    axes.ACT_EXPERT: "expert",
    axes.EXPERT_BATCH: ("data", "fsdp"),
}


# Sequence parallelism: the residual stream is split over `tensor` too (see the docstring).
SEQUENCE_PARALLEL_RULES = {**RULES, axes.RESID_LENGTH: ("context", "tensor")}


def logical_to_spec(names: Sequence[str | None], rules: dict | None = None) -> PartitionSpec:
    """PartitionSpec for one array given its logical axis names (unknown name = error)."""
    rules = RULES if rules is None else rules
    out = []
    for n in names:
        if n is None:
            out.append(None)
            continue
        if n not in rules:
            raise KeyError(f"logical axis {n!r} has no rule in sharding/rules.py")
        out.append(rules[n])
    return PartitionSpec(*out)


def mesh_size(mesh_shape: dict[str, int], rule: tuple[str, ...] | str | None) -> int:
    """Number of shards a dim mapped by `rule` gets on a mesh of the given axis sizes."""
    if rule is None:
        return 1
    mesh_axes = (rule,) if isinstance(rule, str) else rule
    n = 1
    for a in mesh_axes:
        n *= mesh_shape[a]
    return n


def is_axes_leaf(x: Any) -> bool:
    return isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x)


def param_specs(axes_tree: Any) -> Any:
    """Tree of logical-name tuples -> tree of PartitionSpecs."""
    return jax.tree.map(logical_to_spec, axes_tree, is_leaf=is_axes_leaf)


def param_shardings(mesh: Mesh, axes_tree: Any) -> Any:
    """Tree of logical-name tuples -> tree of NamedShardings on `mesh`."""
    return jax.tree.map(lambda n: NamedSharding(mesh, logical_to_spec(n)), axes_tree, is_leaf=is_axes_leaf)


def activation_sharding_fn(mesh: Mesh, sequence_parallel: bool = False):
    """For models.axes.activation_sharding: logical names -> NamedSharding.

    `sequence_parallel` selects SEQUENCE_PARALLEL_RULES. When the mesh splits the sequence
    (`context` > 1) the function also carries `attention`, the context-parallel kernel that
    models.axes.attention_kernel hands to the model, and `sequence_split` (models.axes.sequence_split).
    """
    rules = SEQUENCE_PARALLEL_RULES if sequence_parallel else RULES
    cache: dict[tuple, NamedSharding] = {}

    def fn(names: tuple[str | None, ...]) -> NamedSharding:
        if names not in cache:
            cache[names] = NamedSharding(mesh, logical_to_spec(names, rules))
        return cache[names]

    fn.sequence_split = dict(mesh.shape).get("context", 1) > 1
    if fn.sequence_split:
        from sharding.context import gathered_kv_attention  # imports the model: only when needed

        fn.attention = gathered_kv_attention
    return fn
