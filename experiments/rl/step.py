"""Compiled, sharded RL functions: one GRPO-family step, rollouts for evaluation, and the
supervised step of the warm start.

Sharding follows the training core: parameters and optimizer state are placed by
`sharding/rules.py` from the model's logical axis names, the B = P*G rollout rows are split over
the mesh's batch axes (data, fsdp), and activations are constrained through
`models.axes.activation_sharding` exactly as in `experiments/train/steps.py`.

    setup = build_rl_setup(model_cfg, tx, mesh, task_shape, rl_cfg)
    params, opt_state, m = setup.rl_step(params, opt_state, ref_params, prompts_PxP, answers_PxK, key)
    rewards_N, kl_N = setup.rollout(params, ref_params, prompts_NxP, answers_NxK, key)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from experiments.rl.algo import AlgoConfig, aggregate, nonzero_variance, policy_loss
from experiments.rl.policy import completion_logits, sample, token_entropy, token_logp
from experiments.rl.tasks import completion_mask, rewards
from models.axes import activation_sharding
from models.config import ModelConfig
from models.transformer import Transformer, abstract_model, logical_axes, split_params
from sharding.rules import BATCH_AXES, activation_sharding_fn, param_shardings


@dataclasses.dataclass(frozen=True)
class TaskShape:
    prompt_len: int
    completion_len: int


@dataclasses.dataclass
class RLSetup:
    graphdef: nnx.GraphDef
    mesh: Mesh
    param_shardings: Any
    opt_shardings: Any
    tx: optax.GradientTransformation
    model_cfg: ModelConfig
    rl_step: Callable[..., tuple[Any, Any, dict[str, jax.Array]]]
    rollout: Callable[..., tuple[jax.Array, jax.Array]]

    def abstract_params(self) -> Any:
        shapes = jax.eval_shape(lambda: split_params(Transformer(self.model_cfg, rngs=nnx.Rngs(0)))[1])
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            shapes, self.param_shardings)

    def abstract_opt_state(self) -> Any:
        o = jax.eval_shape(self.tx.init, self.abstract_params())
        return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                            o, self.opt_shardings)

    def place(self, params: Any) -> Any:
        """Put (host or single-device) params onto the mesh per the sharding rules."""
        return jax.device_put(params, self.param_shardings)

    def init_opt(self, params: Any) -> Any:
        return jax.jit(self.tx.init, out_shardings=self.opt_shardings)(params)


def build_rl_setup(model_cfg: ModelConfig, tx: optax.GradientTransformation, mesh: Mesh,
                   shape: TaskShape, algo: AlgoConfig, group_size: int,
                   temperature: float) -> RLSetup:
    abstract = abstract_model(model_cfg)
    graphdef, _ = nnx.split(abstract, nnx.Param)
    p_sh = param_shardings(mesh, logical_axes(abstract))
    replicated = NamedSharding(mesh, PartitionSpec())
    rows = NamedSharding(mesh, PartitionSpec(BATCH_AXES, None))
    p_shapes = jax.eval_shape(lambda: split_params(Transformer(model_cfg, rngs=nnx.Rngs(0)))[1])
    o_shapes = jax.eval_shape(tx.init, p_shapes)
    o_sh = optax.tree_map_params(tx, lambda _, sh: sh, o_shapes, p_sh,
                                 transform_non_params=lambda _: replicated,
                                 is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
    act_fn = activation_sharding_fn(mesh)
    P, K, G, T = shape.prompt_len, shape.completion_len, group_size, temperature

    def rows_(x):
        return jax.lax.with_sharding_constraint(x, rows)

    def logits_of(params, seq_BxL):
        return completion_logits(graphdef, params, seq_BxL, P, T)

    def rl_step(params, opt_state, ref_params, prompts_PxP, answers_PxK, key):
        with activation_sharding(act_fn):
            n_prompts = prompts_PxP.shape[0]
            prompts_BxP = rows_(jnp.repeat(prompts_PxP, G, axis=0))
            answers_BxK = rows_(jnp.repeat(answers_PxK, G, axis=0))
            params_fixed = jax.lax.stop_gradient(params)
            comp_BxK, _ = sample(graphdef, params_fixed, prompts_BxP, key, K, T)
            reward_PxG = rewards(comp_BxK, answers_BxK).reshape(n_prompts, G)
            mask_BxK = completion_mask(comp_BxK)
            seq_BxL = rows_(jnp.concatenate([prompts_BxP, comp_BxK], axis=1))
            ref_lp = (token_logp(logits_of(ref_params, seq_BxL), comp_BxK)
                      if algo.kl_beta > 0 else None)
            old_lp = (token_logp(logits_of(params_fixed, seq_BxL), comp_BxK)
                      if algo.epochs > 1 else None)

            def loss_fn(p):
                logits = logits_of(p, seq_BxL)
                lp = token_logp(logits, comp_BxK)
                old = jax.lax.stop_gradient(lp) if old_lp is None else old_lp
                loss, aux = policy_loss(lp, old, ref_lp, reward_PxG, mask_BxK, algo)
                ones = jnp.ones((lp.shape[0],), jnp.float32)
                aux["entropy"] = aggregate(jax.lax.stop_gradient(token_entropy(logits)),
                                           mask_BxK, ones, G, "token")
                return loss, aux

            def epoch(carry, _):
                p, o = carry
                (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(p)
                g = jax.lax.with_sharding_constraint(g, p_sh)
                gn = optax.tree.norm(g)
                upd, o = tx.update(g, o, p)
                return (optax.apply_updates(p, upd), o), {"loss": loss, "grad_norm": gn, **aux}

            (params, opt_state), per_epoch = jax.lax.scan(epoch, (params, opt_state), None,
                                                          length=algo.epochs)
            m = {k: v.mean() for k, v in per_epoch.items()}
            m["entropy"] = per_epoch["entropy"][0]          # of the sampling policy
            m["train_reward"] = reward_PxG.mean()
            m["zero_var_frac"] = 1.0 - nonzero_variance(reward_PxG).mean()
            return params, opt_state, m

    def rollout(params, ref_params, prompts_NxP, answers_NxK, key):
        """(reward_N, kl_N): exact-match rewards of one sample per row, and the sequence-level
        k1 estimate of KL(pi || ref) (unbiased on the policy's own samples)."""
        with activation_sharding(act_fn):
            prompts_NxP = rows_(prompts_NxP)
            comp, lp = sample(graphdef, params, prompts_NxP, key, K, T)
            r = rewards(comp, rows_(answers_NxK))
            mask = completion_mask(comp)
            seq = rows_(jnp.concatenate([prompts_NxP, comp], axis=1))
            ref_lp = token_logp(logits_of(ref_params, seq), comp)
            return r, ((lp - ref_lp) * mask).sum(1)

    step_jit = jax.jit(rl_step, in_shardings=(p_sh, o_sh, p_sh, replicated, replicated, replicated),
                       out_shardings=(p_sh, o_sh, replicated), donate_argnums=(0, 1))
    rollout_jit = jax.jit(rollout, in_shardings=(p_sh, p_sh, rows, rows, replicated),
                          out_shardings=(replicated, replicated))
    return RLSetup(graphdef=graphdef, mesh=mesh, param_shardings=p_sh, opt_shardings=o_sh, tx=tx,
                   model_cfg=model_cfg, rl_step=step_jit, rollout=rollout_jit)


def build_sft_step(setup: RLSetup, tx: optax.GradientTransformation, prompt_len: int) -> Callable:
    """Jitted supervised step on (prompt, answer+EOS) pairs: mean NLL of the completion tokens
    (at temperature 1: the warm start learns the task, the RL temperature is a sampling choice)."""
    act_fn = activation_sharding_fn(setup.mesh)
    replicated = NamedSharding(setup.mesh, PartitionSpec())
    rows = NamedSharding(setup.mesh, PartitionSpec(BATCH_AXES, None))
    o_shapes = jax.eval_shape(tx.init, setup.abstract_params())
    o_sh = optax.tree_map_params(tx, lambda _, sh: sh, o_shapes, setup.param_shardings,
                                 transform_non_params=lambda _: replicated,
                                 is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))

    def step(params, opt_state, prompts_BxP, answers_BxK):
        with activation_sharding(act_fn):
            seq = jnp.concatenate([prompts_BxP, answers_BxK], axis=1)

            def loss_fn(p):
                logits = completion_logits(setup.graphdef, p, seq, prompt_len, 1.0)
                return -token_logp(logits, answers_BxK).mean()

            loss, g = jax.value_and_grad(loss_fn)(params)
            upd, opt_state = tx.update(g, opt_state, params)
            return optax.apply_updates(params, upd), opt_state, loss

    init = jax.jit(tx.init, out_shardings=o_sh)
    step_jit = jax.jit(step, in_shardings=(setup.param_shardings, o_sh, rows, rows),
                       out_shardings=(setup.param_shardings, o_sh, replicated),
                       donate_argnums=(0, 1))
    return init, step_jit
