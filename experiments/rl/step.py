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

from experiments.rl.algo import aggregate, nonzero_variance, policy_loss
from experiments.rl.config import Aggregation, AlgoConfig
from experiments.rl.policy import completion_logits, sample, token_entropy, token_logp
from experiments.rl.tasks import completion_mask, rewards
from experiments.train.steps import opt_state_shardings
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
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, self.param_shardings
        )

    def abstract_opt_state(self) -> Any:
        o = jax.eval_shape(self.tx.init, self.abstract_params())
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), o, self.opt_shardings
        )

    def place(self, params: Any) -> Any:
        """Put (host or single-device) params onto the mesh per the sharding rules."""
        return jax.device_put(params, self.param_shardings)

    def init_opt(self, params: Any) -> Any:
        return jax.jit(self.tx.init, out_shardings=self.opt_shardings)(params)


@dataclasses.dataclass(frozen=True)
class _Shardings:
    """Where parameters, optimizer state and rollout rows live on the mesh."""

    params: Any
    opt: Any
    replicated: NamedSharding
    rows: NamedSharding  # (B, ...) arrays split over the batch axes (data, fsdp)


def _shardings(
    model_cfg: ModelConfig, tx: optax.GradientTransformation, mesh: Mesh, abstract: nnx.Module
) -> _Shardings:
    p_sh = param_shardings(mesh, logical_axes(abstract))
    replicated = NamedSharding(mesh, PartitionSpec())
    p_shapes = jax.eval_shape(lambda: split_params(Transformer(model_cfg, rngs=nnx.Rngs(0)))[1])
    return _Shardings(
        params=p_sh,
        opt=opt_state_shardings(tx, p_shapes, p_sh, replicated),
        replicated=replicated,
        rows=NamedSharding(mesh, PartitionSpec(BATCH_AXES, None)),
    )


@dataclasses.dataclass(frozen=True)
class _Policy:
    """The pieces every traced RL function shares: model, shardings and the sampling shape."""

    graphdef: nnx.GraphDef
    sh: _Shardings
    act_fn: Callable
    prompt_len: int
    completion_len: int
    temperature: float

    def rows(self, x: jax.Array) -> jax.Array:
        return jax.lax.with_sharding_constraint(x, self.sh.rows)

    def logits(self, params: Any, seq_BxL: jax.Array) -> jax.Array:
        return completion_logits(self.graphdef, params, seq_BxL, self.prompt_len, self.temperature)

    def logp(self, params: Any, seq_BxL: jax.Array, comp_BxK: jax.Array) -> jax.Array:
        return token_logp(self.logits(params, seq_BxL), comp_BxK)


def _sample_groups(
    pol: _Policy,
    params: Any,
    ref_params: Any,
    prompts_PxP: jax.Array,
    answers_PxK: jax.Array,
    key: jax.Array,
    algo: AlgoConfig,
    G: int,
) -> dict[str, Any]:
    """G completions per prompt from the current policy, their rewards, and the fixed log-probs
    the loss compares against (reference when beta > 0, old policy when epochs > 1)."""
    n_prompts = prompts_PxP.shape[0]
    prompts_BxP = pol.rows(jnp.repeat(prompts_PxP, G, axis=0))
    answers_BxK = pol.rows(jnp.repeat(answers_PxK, G, axis=0))
    params_fixed = jax.lax.stop_gradient(params)
    comp_BxK, _ = sample(pol.graphdef, params_fixed, prompts_BxP, key, pol.completion_len, pol.temperature)
    seq_BxL = pol.rows(jnp.concatenate([prompts_BxP, comp_BxK], axis=1))
    return {
        "seq_BxL": seq_BxL,
        "comp_BxK": comp_BxK,
        "mask_BxK": completion_mask(comp_BxK),
        "reward_PxG": rewards(comp_BxK, answers_BxK).reshape(n_prompts, G),
        "ref_lp": pol.logp(ref_params, seq_BxL, comp_BxK) if algo.kl_beta > 0 else None,
        "old_lp": pol.logp(params_fixed, seq_BxL, comp_BxK) if algo.epochs > 1 else None,
    }


def _group_loss(pol: _Policy, p: Any, g: dict[str, Any], algo: AlgoConfig, G: int):
    """(policy loss, aux metrics incl. the sampling policy's token entropy) of params `p`."""
    logits = pol.logits(p, g["seq_BxL"])
    lp = token_logp(logits, g["comp_BxK"])
    old = jax.lax.stop_gradient(lp) if g["old_lp"] is None else g["old_lp"]
    loss, aux = policy_loss(lp, old, g["ref_lp"], g["reward_PxG"], g["mask_BxK"], algo)
    ones = jnp.ones((lp.shape[0],), jnp.float32)
    aux["entropy"] = aggregate(
        jax.lax.stop_gradient(token_entropy(logits)), g["mask_BxK"], ones, G, Aggregation.TOKEN
    )
    return loss, aux


def _make_rl_step(pol: _Policy, tx: optax.GradientTransformation, algo: AlgoConfig, G: int) -> Callable:
    """One GRPO-family step: sample groups, then `algo.epochs` optimizer updates on them."""

    def rl_step(params, opt_state, ref_params, prompts_PxP, answers_PxK, key):
        with activation_sharding(pol.act_fn):
            g = _sample_groups(pol, params, ref_params, prompts_PxP, answers_PxK, key, algo, G)

            def epoch(carry, _):
                p, o = carry
                (loss, aux), grads = jax.value_and_grad(
                    lambda q: _group_loss(pol, q, g, algo, G), has_aux=True
                )(p)
                grads = jax.lax.with_sharding_constraint(grads, pol.sh.params)
                gn = optax.tree.norm(grads)
                upd, o = tx.update(grads, o, p)
                return (optax.apply_updates(p, upd), o), {"loss": loss, "grad_norm": gn, **aux}

            (params, opt_state), per_epoch = jax.lax.scan(
                epoch, (params, opt_state), None, length=algo.epochs
            )
            m = {k: v.mean() for k, v in per_epoch.items()}
            m["entropy"] = per_epoch["entropy"][0]  # of the sampling policy
            m["train_reward"] = g["reward_PxG"].mean()
            m["zero_var_frac"] = 1.0 - nonzero_variance(g["reward_PxG"]).mean()
            return params, opt_state, m

    return rl_step


def _make_rollout(pol: _Policy) -> Callable:
    def rollout(params, ref_params, prompts_NxP, answers_NxK, key):
        """(reward_N, kl_N): exact-match rewards of one sample per row, and the sequence-level
        k1 estimate of KL(pi || ref) (unbiased on the policy's own samples)."""
        with activation_sharding(pol.act_fn):
            prompts_NxP = pol.rows(prompts_NxP)
            comp, lp = sample(pol.graphdef, params, prompts_NxP, key, pol.completion_len, pol.temperature)
            r = rewards(comp, pol.rows(answers_NxK))
            mask = completion_mask(comp)
            seq = pol.rows(jnp.concatenate([prompts_NxP, comp], axis=1))
            return r, ((lp - pol.logp(ref_params, seq, comp)) * mask).sum(1)

    return rollout


def build_rl_setup(
    model_cfg: ModelConfig,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    shape: TaskShape,
    algo: AlgoConfig,
    group_size: int,
    temperature: float,
) -> RLSetup:
    """Shardings from the logical-axis rules, and the jitted RL step and rollout."""
    abstract = abstract_model(model_cfg)
    graphdef, _ = nnx.split(abstract, nnx.Param)
    sh = _shardings(model_cfg, tx, mesh, abstract)
    pol = _Policy(
        graphdef, sh, activation_sharding_fn(mesh), shape.prompt_len, shape.completion_len, temperature
    )
    rep = sh.replicated
    step_jit = jax.jit(
        _make_rl_step(pol, tx, algo, group_size),
        in_shardings=(sh.params, sh.opt, sh.params, rep, rep, rep),
        out_shardings=(sh.params, sh.opt, rep),
        donate_argnums=(0, 1),
    )
    rollout_jit = jax.jit(
        _make_rollout(pol),
        in_shardings=(sh.params, sh.params, sh.rows, sh.rows, rep),
        out_shardings=(rep, rep),
    )
    return RLSetup(
        graphdef=graphdef,
        mesh=mesh,
        param_shardings=sh.params,
        opt_shardings=sh.opt,
        tx=tx,
        model_cfg=model_cfg,
        rl_step=step_jit,
        rollout=rollout_jit,
    )


def build_sft_step(setup: RLSetup, tx: optax.GradientTransformation, prompt_len: int) -> Callable:
    """Jitted supervised step on (prompt, answer+EOS) pairs: mean NLL of the completion tokens
    (at temperature 1: the warm start learns the task, the RL temperature is a sampling choice)."""
    act_fn = activation_sharding_fn(setup.mesh)
    replicated = NamedSharding(setup.mesh, PartitionSpec())
    rows = NamedSharding(setup.mesh, PartitionSpec(BATCH_AXES, None))
    o_sh = opt_state_shardings(tx, setup.abstract_params(), setup.param_shardings, replicated)

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
    step_jit = jax.jit(
        step,
        in_shardings=(setup.param_shardings, o_sh, rows, rows),
        out_shardings=(setup.param_shardings, o_sh, replicated),
        donate_argnums=(0, 1),
    )
    return init, step_jit
