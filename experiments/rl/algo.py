"""The switchable parts of a GRPO-family update, as pure JAX functions (unit-testable).

Shapes: P prompts x G completions per prompt = B = P*G rows, T completion tokens per row.
- advantages: `group` (GRPO: (r - group mean) / group std), `batch` (ScaleRL: group-centred,
  divided by the std of all rewards in the batch), `none` (Dr. GRPO: group-centred only);
- zero-variance filtering: groups whose G rewards are all equal carry no signal; when filtered,
  they drop out of the loss normaliser too (not just contribute zeros);
- losses per token: `ppo_clip` (PPO/GRPO surrogate with asymmetric clip [1-eps_low,
  1+eps_high], DAPO's "clip-higher") and `cispo` (MiniMax-M1: stop-gradient of the clipped
  importance weight times advantage times log-prob, so no token's gradient is dropped);
- KL to the reference policy per token: k1 = log pi - log ref, k3 = exp(ref - pi) - (ref - pi) - 1
  (Schulman's low-variance, non-negative estimator), added with coefficient beta;
- aggregation of token losses: `token` (mean over all kept tokens of the batch), `sample` (mean
  over kept rows of each row's token mean), `prompt` (mean over kept prompts of the token mean of
  each prompt's G completions, ScaleRL's prompt-level average).
The switches are `AlgoConfig` (`rl.algo.*`), with the other RL config dataclasses in
experiments/rl/config.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from experiments.rl.config import Advantage, Aggregation, AlgoConfig, KLEstimator, PolicyLoss

EPS = 1e-6


def advantages(rewards_PxG: jax.Array, kind: str) -> jax.Array:
    """Per-completion advantage (same shape as the rewards)."""
    centred = rewards_PxG - rewards_PxG.mean(axis=1, keepdims=True)
    if kind == Advantage.GROUP:
        return centred / (rewards_PxG.std(axis=1, keepdims=True) + EPS)
    if kind == Advantage.BATCH:
        return centred / (rewards_PxG.std() + EPS)
    if kind == Advantage.NONE:
        return centred
    raise ValueError(kind)


def nonzero_variance(rewards_PxG: jax.Array) -> jax.Array:
    """1.0 for groups whose rewards are not all equal (P,)."""
    return (rewards_PxG.max(axis=1) > rewards_PxG.min(axis=1)).astype(jnp.float32)


def kl_per_token(logp_BxT: jax.Array, ref_logp_BxT: jax.Array, estimator: str) -> jax.Array:
    """Per-token estimate of KL(pi || ref) on tokens sampled from pi."""
    d = ref_logp_BxT - logp_BxT
    if estimator == KLEstimator.K1:
        return -d
    return jnp.exp(d) - d - 1.0  # KLEstimator.K3


def token_losses(logp_BxT, old_logp_BxT, adv_B, cfg: AlgoConfig):
    """(loss_BxT, clipped_BxT): the policy-gradient loss per token and where clipping bit."""
    ratio = jnp.exp(logp_BxT - old_logp_BxT)
    a = adv_B[:, None]
    lo, hi = 1.0 - cfg.eps_low, 1.0 + cfg.eps_high
    if cfg.loss == PolicyLoss.PPO_CLIP:
        unclipped = ratio * a
        clipped_obj = jnp.clip(ratio, lo, hi) * a
        loss = -jnp.minimum(unclipped, clipped_obj)
        bit = clipped_obj < unclipped
    else:  # PolicyLoss.CISPO
        w = jax.lax.stop_gradient(jnp.clip(ratio, lo, hi))
        loss = -w * a * logp_BxT
        bit = (ratio < lo) | (ratio > hi)
    return loss, bit.astype(jnp.float32)


def aggregate(
    x_BxT: jax.Array, mask_BxT: jax.Array, keep_B: jax.Array, group_size: int, how: str
) -> jax.Array:
    """Scalar mean of token values under `mask` (tokens said) and `keep` (rows kept)."""
    m = mask_BxT * keep_B[:, None]
    if how == Aggregation.TOKEN:
        return (x_BxT * m).sum() / jnp.maximum(m.sum(), 1.0)
    if how == Aggregation.SAMPLE:
        per_row = (x_BxT * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
        return (per_row * keep_B).sum() / jnp.maximum(keep_B.sum(), 1.0)
    if how == Aggregation.PROMPT:
        P = x_BxT.shape[0] // group_size
        num = (x_BxT * m).reshape(P, -1).sum(1)
        den = m.reshape(P, -1).sum(1)
        keep_P = keep_B.reshape(P, group_size).max(1)
        return (num / jnp.maximum(den, 1.0) * keep_P).sum() / jnp.maximum(keep_P.sum(), 1.0)
    raise ValueError(how)


def policy_loss(
    logp_BxT, old_logp_BxT, ref_logp_BxT, rewards_PxG, mask_BxT, cfg: AlgoConfig
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The full objective for one update and its diagnostics. ref_logp may be None (beta = 0)."""
    P, G = rewards_PxG.shape
    adv_B = advantages(rewards_PxG, cfg.advantage).reshape(P * G)
    keep_B = (
        jnp.repeat(nonzero_variance(rewards_PxG), G)
        if cfg.zero_variance_filter
        else jnp.ones((P * G,), jnp.float32)
    )
    loss_BxT, clipped_BxT = token_losses(logp_BxT, old_logp_BxT, adv_B, cfg)
    aux = {}
    if ref_logp_BxT is not None and cfg.kl_beta > 0:
        kl_BxT = kl_per_token(logp_BxT, ref_logp_BxT, cfg.kl_estimator)
        loss_BxT = loss_BxT + cfg.kl_beta * kl_BxT
        aux["kl_train"] = aggregate(kl_BxT, mask_BxT, jnp.ones_like(keep_B), G, Aggregation.TOKEN)
    loss = aggregate(loss_BxT, mask_BxT, keep_B, G, cfg.aggregation)
    aux["clip_frac"] = aggregate(clipped_BxT, mask_BxT, keep_B, G, Aggregation.TOKEN)
    return loss, aux
