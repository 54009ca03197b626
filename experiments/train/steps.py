"""Sharded train / eval steps: the compiled core that the trainer, tests and benchmarks share.

    ts = build_train_setup(model_cfg, tx, mesh, n_micro=2)
    params, opt_state = ts.init(seed)                  # sharded per sharding/rules.py
    params, opt_state, m = ts.train_step(params, opt_state, batch_NxMxL1)
    loss = ts.eval_step(params, batch_BxL1)
    loss = ts.eval_all(params, batches_KxBxL1)           # mean over K eval batches, one dispatch

`batch_NxMxL1` holds N micro-batches of M rows of seq_len+1 tokens (inputs = [:, :-1], targets =
[:, 1:]); the step averages the micro-batch gradients, which equals the big-batch gradient.
Gradient norm is measured before clipping.

A mixture of experts (`model.moe`) trains on the objective cross-entropy + optim.moe_aux_weight
x (sum of the routed layers' load-balancing losses) + optim.moe_z_weight x (sum of their router
z-losses) (`moe_objective`); the step's `loss` stays the cross-entropy (what eval, the scaling
laws and a dense run report), and its metrics add `moe_aux_loss`, `moe_z_loss` and
`moe_dropped_fraction`, one value per routed layer (means over the micro-batches).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from experiments.train.config import OptimConfig
from experiments.train.optimizer import RuntimeOptimizer
from models.axes import activation_sharding
from models.config import ModelConfig
from models.transformer import (
    MOE_STATS,
    MoEStats,
    Transformer,
    abstract_model,
    apply,
    apply_with_stats,
    logical_axes,
    split_params,
)
from sharding.pipeline import PipelineSpec, block_graphdef_and_axes, pipelined_blocks
from sharding.rules import BATCH_AXES, activation_sharding_fn, param_shardings


def cross_entropy_loss(
    graphdef: nnx.GraphDef, params: Any, tokens_BxL1: jax.Array, forward: Callable = apply
) -> jax.Array:
    """Mean next-token cross-entropy (nats) of the model on a window batch (`forward` =
    `apply`, or a pipelined equivalent with the same signature)."""
    return _cross_entropy(forward(graphdef, params, tokens_BxL1[:, :-1]), tokens_BxL1[:, 1:])


def _cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array) -> jax.Array:
    """Mean cross-entropy (nats) of the targets under the logits."""
    logz_BxL = jax.nn.logsumexp(logits_BxLxV, axis=-1)
    picked_BxL = jnp.take_along_axis(logits_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    return jnp.mean(logz_BxL - picked_BxL)


@dataclasses.dataclass(frozen=True)
class MoELossWeights:
    """The weights of a mixture of experts' auxiliary losses in the objective (`optim.moe_aux_weight`,
    `optim.moe_z_weight`; defaults: OptimConfig's)."""

    aux: float = OptimConfig.moe_aux_weight
    z: float = OptimConfig.moe_z_weight

    @classmethod
    def of(cls, optim: OptimConfig) -> "MoELossWeights":
        return cls(float(optim.moe_aux_weight), float(optim.moe_z_weight))


def moe_objective(
    graphdef: nnx.GraphDef, params: Any, tokens_BxL1: jax.Array, weights: MoELossWeights
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(objective, metrics) of a mixture of experts on a window batch: objective = cross-entropy +
    weights.aux * sum of the routed layers' load-balancing losses + weights.z * sum of their
    z-losses; metrics = {loss: the cross-entropy, moe_<stat>: per routed layer (MOE_STATS)}."""
    logits_BxLxV, stats = apply_with_stats(graphdef, params, tokens_BxL1[:, :-1])
    ce = _cross_entropy(logits_BxLxV, tokens_BxL1[:, 1:])
    objective = ce + weights.aux * jnp.sum(stats["aux_loss"]) + weights.z * jnp.sum(stats["z_loss"])
    return objective, {"loss": ce, **moe_metrics(stats)}


def moe_metrics(stats: MoEStats) -> dict[str, jax.Array]:
    """The step metrics of the routed layers' statistics: `moe_<stat>` (one value per layer)."""
    return {f"moe_{k}": jax.lax.stop_gradient(stats[k]) for k in MOE_STATS}


@dataclasses.dataclass
class TrainSetup:
    """Everything compiled for one (model, optimizer, mesh, micro-batching)."""

    model_cfg: ModelConfig
    mesh: Mesh
    graphdef: nnx.GraphDef
    axes: Any  # logical axis names per parameter
    param_shardings: Any
    opt_shardings: Any
    batch_sharding: NamedSharding  # for (N, M, L+1) train batches
    eval_batch_sharding: NamedSharding  # for (B, L+1) eval batches
    init: Callable[[int], tuple[Any, Any]]
    train_step: Callable[..., tuple[Any, Any, dict[str, jax.Array]]]
    eval_step: Callable[[Any, jax.Array], jax.Array]
    eval_all: Callable[[Any, jax.Array], jax.Array]  # mean loss over a (K, B, L+1) stack of batches
    loss_fn: Callable[[Any, jax.Array], jax.Array]  # the cross-entropy (eval's loss)
    tx: optax.GradientTransformation
    hp: dict[str, Any] | None = None  # the run's step scalars (RuntimeOptimizer), else None
    # (params, tokens) -> (objective, metrics): what the train step differentiates (the
    # cross-entropy for a dense model; `moe_objective` for a mixture of experts)
    objective_fn: Callable[[Any, jax.Array], tuple[jax.Array, dict[str, jax.Array]]] | None = None

    def abstract_state(self) -> tuple[Any, Any]:
        """ShapeDtypeStructs (with shardings) of (params, opt_state): restore targets."""
        p_shapes = jax.eval_shape(lambda: split_params(Transformer(self.model_cfg, rngs=nnx.Rngs(0)))[1])
        o_shapes = jax.eval_shape(self.tx.init, p_shapes)
        attach = lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh)
        return (
            jax.tree.map(attach, p_shapes, self.param_shardings),
            jax.tree.map(attach, o_shapes, self.opt_shardings),
        )


def _make_train_step(grad_fn: Callable, tx_of: Callable[[Any], Any], p_sh: Any, n_micro: int) -> Callable:
    """One optimizer step on N micro-batches: the mean of their gradients (scanned, so memory
    holds one micro-batch's activations), norm before clipping, update with `tx_of(hp)`.
    `grad_fn(params, batch) -> (metrics, grads)`; the step's metrics are their means over the
    micro-batches, plus `grad_norm`."""

    def train_step(params: Any, opt_state: Any, batch_NxMxL1: jax.Array, hp: Any = None):
        if n_micro == 1:
            metrics, grads = grad_fn(params, batch_NxMxL1[0])
        else:

            def micro(carry, mb_MxL1):
                g_acc, m_acc = carry
                m, g = grad_fn(params, mb_MxL1)
                return (jax.tree.map(jnp.add, g_acc, g), jax.tree.map(jnp.add, m_acc, m)), None

            zeros = jax.tree.map(jnp.zeros_like, params)
            m_zeros = jax.tree.map(
                lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(grad_fn, params, batch_NxMxL1[0])[0]
            )
            (grads, metrics), _ = jax.lax.scan(micro, (zeros, m_zeros), batch_NxMxL1)
            grads = jax.tree.map(lambda g: g / n_micro, grads)
            metrics = jax.tree.map(lambda m: m / n_micro, metrics)
        grads = jax.lax.with_sharding_constraint(grads, p_sh)
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = tx_of(hp).update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {**metrics, "grad_norm": grad_norm}

    return train_step


def _pipelined_forward(
    model_cfg: ModelConfig, abstract: Transformer, mesh: Mesh, pipe: PipelineSpec
) -> Callable:
    """`apply` with the blocks run through the pipeline of sharding/pipeline.py (embedding and
    head outside it, replicated over `stage`)."""
    block_gd, block_axes = block_graphdef_and_axes(abstract)

    def forward(graphdef: nnx.GraphDef, params: Any, tokens_BxL: jax.Array) -> jax.Array:
        model = nnx.merge(graphdef, jax.tree.map(lambda a: nnx.Param(a, eager_sharding=False), params))
        x_BxLxD = model.embed(tokens_BxL)
        x_BxLxD = pipelined_blocks(model.cfg, pipe, mesh, block_gd, block_axes, params, x_BxLxD)
        return model.logits(x_BxLxD)

    return forward


def opt_state_shardings(
    tx: optax.GradientTransformation, abstract_params: Any, p_sh: Any, replicated: NamedSharding
) -> Any:
    """Optimizer state shards like the parameter it belongs to; counters are replicated (the
    trainer's and the RL step's optimizer state alike)."""
    o_shapes = jax.eval_shape(tx.init, abstract_params)
    return optax.tree_map_params(
        tx,
        lambda _, sh: sh,
        o_shapes,
        p_sh,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct),
    )


def _optimizer_parts(tx: Any) -> tuple[RuntimeOptimizer | None, optax.GradientTransformation, Callable]:
    """(the RuntimeOptimizer or None, a transformation for state shapes, hp -> transformation)."""
    if isinstance(tx, RuntimeOptimizer):
        return tx, tx.tx(), tx.tx
    return None, tx, lambda _hp: tx


def _objective_and_grad(
    model_cfg: ModelConfig,
    loss_fn: Callable[[Any, jax.Array], jax.Array],
    graphdef: nnx.GraphDef,
    act_fn: Any,
    eval_sh: NamedSharding,
    moe_weights: MoELossWeights | None,
) -> tuple[Callable, Callable]:
    """(objective_fn, grad_fn) of the train step: `objective_fn(params, tokens) -> (objective,
    metrics)`, `grad_fn(params, tokens) -> (metrics, grads)`. A dense model differentiates the
    cross-entropy `loss_fn` itself (the program of before mixtures of experts existed); a mixture
    of experts `moe_objective` with the auxiliary losses, under the same activation shardings."""
    if model_cfg.moe is None:
        value_and_grad = jax.value_and_grad(loss_fn)

        def dense_grad(params: Any, tokens_BxL1: jax.Array) -> tuple[dict[str, jax.Array], Any]:
            loss, grads = value_and_grad(params, tokens_BxL1)
            return {"loss": loss}, grads

        return (lambda params, tokens: (loss_fn(params, tokens), {})), dense_grad

    def objective_fn(params: Any, tokens_BxL1: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        with activation_sharding(act_fn):
            tokens_BxL1 = jax.lax.with_sharding_constraint(tokens_BxL1, eval_sh)
            return moe_objective(graphdef, params, tokens_BxL1, moe_weights)

    moe_value_and_grad = jax.value_and_grad(objective_fn, has_aux=True)

    def moe_grad(params: Any, tokens_BxL1: jax.Array) -> tuple[dict[str, jax.Array], Any]:
        (_, metrics), grads = moe_value_and_grad(params, tokens_BxL1)
        return metrics, grads

    return objective_fn, moe_grad


def _forward(model_cfg: ModelConfig, abstract, mesh: Mesh, pipeline: PipelineSpec | None):
    """The model's forward: `apply`, or the blocks as a pipeline over the mesh's `stage` axis."""
    if pipeline is None or not pipeline.enabled:
        return apply
    if mesh.shape.get("stage", 1) != pipeline.stages:
        raise ValueError(f"mesh stage axis {mesh.shape.get('stage', 1)} != {pipeline.stages} pipeline stages")
    return _pipelined_forward(model_cfg, abstract, mesh, pipeline)


def build_train_setup(
    model_cfg: ModelConfig,
    tx: optax.GradientTransformation | RuntimeOptimizer,
    mesh: Mesh,
    n_micro: int = 1,
    donate: bool = True,
    pipeline: PipelineSpec | None = None,
    sequence_parallel: bool = False,
    moe_weights: MoELossWeights | None = None,
) -> TrainSetup:
    """Shardings from the logical-axis rules, and the jitted init / train / eval functions.
    `pipeline` (stages on the mesh's `stage` axis) runs the blocks as a pipeline. With a
    `RuntimeOptimizer` the train step takes the run's scalars as a fourth input,
    `train_step(params, opt_state, batch, hp)` (`TrainSetup.hp`), so runs that differ only in
    them share one compiled step; with a plain optax transformation it takes three.
    `moe_weights`: the auxiliary losses' weights of a mixture of experts (default: the
    RuntimeOptimizer's `optim.moe_*_weight`, else OptimConfig's defaults)."""
    runtime, tx, tx_of = _optimizer_parts(tx)
    abstract = abstract_model(model_cfg)
    forward = _forward(model_cfg, abstract, mesh, pipeline)
    graphdef, _ = nnx.split(abstract, nnx.Param)
    axes = logical_axes(abstract)
    p_sh = param_shardings(mesh, axes)
    replicated = NamedSharding(mesh, PartitionSpec())
    p_shapes = jax.eval_shape(lambda: split_params(Transformer(model_cfg, rngs=nnx.Rngs(0)))[1])
    o_sh = opt_state_shardings(tx, p_shapes, p_sh, replicated)
    batch_sh = NamedSharding(mesh, PartitionSpec(None, BATCH_AXES, None))
    eval_sh = NamedSharding(mesh, PartitionSpec(BATCH_AXES, None))
    act_fn = activation_sharding_fn(mesh, sequence_parallel)  # SP rules; CP attention if context > 1

    def loss_fn(params: Any, tokens_BxL1: jax.Array) -> jax.Array:
        with activation_sharding(act_fn):
            tokens_BxL1 = jax.lax.with_sharding_constraint(tokens_BxL1, eval_sh)
            return cross_entropy_loss(graphdef, params, tokens_BxL1, forward)

    if model_cfg.moe is not None and moe_weights is None:
        moe_weights = MoELossWeights.of(runtime.cfg) if runtime is not None else MoELossWeights()
    objective_fn, grad_fn = _objective_and_grad(model_cfg, loss_fn, graphdef, act_fn, eval_sh, moe_weights)

    def init_fn(seed: int) -> tuple[Any, Any]:
        params = split_params(Transformer(model_cfg, rngs=nnx.Rngs(seed)))[1]
        return params, tx.init(params)

    init_jit = jax.jit(init_fn, static_argnums=0, out_shardings=(p_sh, o_sh))
    train_step = _make_train_step(grad_fn, tx_of, p_sh, n_micro)
    hp_sh = () if runtime is None else (jax.tree.map(lambda _: replicated, runtime.hp),)
    train_jit = jax.jit(
        train_step,
        in_shardings=(p_sh, o_sh, batch_sh, *hp_sh),
        out_shardings=(p_sh, o_sh, replicated),
        donate_argnums=(0, 1) if donate else (),
    )
    eval_jit = jax.jit(loss_fn, in_shardings=(p_sh, eval_sh), out_shardings=replicated)

    def eval_all(params: Any, batches_KxBxL1: jax.Array) -> jax.Array:
        """The mean loss over K eval batches: one dispatch per eval, not K (lax.map keeps one
        batch's activations live)."""
        return jnp.mean(jax.lax.map(lambda b: loss_fn(params, b), batches_KxBxL1))

    eval_all_jit = jax.jit(eval_all, in_shardings=(p_sh, batch_sh), out_shardings=replicated)
    return TrainSetup(
        model_cfg=model_cfg,
        mesh=mesh,
        graphdef=graphdef,
        axes=axes,
        param_shardings=p_sh,
        opt_shardings=o_sh,
        batch_sharding=batch_sh,
        eval_batch_sharding=eval_sh,
        init=lambda seed: init_jit(int(seed)),
        train_step=train_jit,
        eval_step=eval_jit,
        eval_all=eval_all_jit,
        loss_fn=loss_fn,
        tx=tx,
        hp=None if runtime is None else runtime.hp,
        objective_fn=objective_fn,
    )
