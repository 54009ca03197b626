"""The policy view of the training core's transformer: tempered log-probs and static-shape decoding.

A sequence is prompt (P tokens) + completion (K tokens); the model sees the window
seq[:, :P+K-1] (W tokens) and its logits at positions P-1 .. P+K-2 score the K completion
tokens. The policy is softmax(logits / temperature) everywhere (sampling, loss, reference, KL),
so the importance ratios and the KL compare the distributions that actually generated the data.

Decoding runs K steps of a `lax.fori_loop` over a fixed (B, W) buffer (no KV cache: every step
re-runs the whole window, which the causal mask makes exact). Shapes never depend on the data,
so one compile serves the whole run.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from models.transformer import apply


def completion_logits(
    graphdef: nnx.GraphDef, params: Any, seq_BxL: jax.Array, prompt_len: int, temperature: float
) -> jax.Array:
    """Tempered logits_BxKxV for the K = L - prompt_len completion tokens of full sequences."""
    logits_BxWxV = apply(graphdef, params, seq_BxL[:, :-1])
    return logits_BxWxV[:, prompt_len - 1 :, :] / temperature


def token_logp(logits_BxKxV: jax.Array, tokens_BxK: jax.Array) -> jax.Array:
    """log pi(token) under the (already tempered) logits."""
    logz = jax.nn.logsumexp(logits_BxKxV, axis=-1)
    picked = jnp.take_along_axis(logits_BxKxV, tokens_BxK[..., None], axis=-1)[..., 0]
    return picked - logz


def token_entropy(logits_BxKxV: jax.Array) -> jax.Array:
    """Entropy (nats) of the policy's next-token distribution at each completion position."""
    logp = jax.nn.log_softmax(logits_BxKxV, axis=-1)
    return -(jnp.exp(logp) * logp).sum(-1)


def sample(
    graphdef: nnx.GraphDef,
    params: Any,
    prompts_BxP: jax.Array,
    key: jax.Array,
    completion_len: int,
    temperature: float,
) -> tuple[jax.Array, jax.Array]:
    """(completions_BxK int32, logp_BxK): K tokens sampled at `temperature` and their log-probs."""
    B, P = prompts_BxP.shape
    K = completion_len
    W = P + K - 1
    buf_BxW = jnp.zeros((B, W), jnp.int32).at[:, :P].set(prompts_BxP.astype(jnp.int32))
    out_BxK = jnp.zeros((B, K), jnp.int32)
    lp_BxK = jnp.zeros((B, K), jnp.float32)

    def body(t, carry):
        buf, out, lp = carry
        logits_BxWxV = apply(graphdef, params, buf)
        logits_BxV = (
            jax.lax.dynamic_index_in_dim(logits_BxWxV, P - 1 + t, axis=1, keepdims=False) / temperature
        )
        tok_B = jax.random.categorical(jax.random.fold_in(key, t), logits_BxV).astype(jnp.int32)
        lp_B = jnp.take_along_axis(jax.nn.log_softmax(logits_BxV), tok_B[:, None], axis=1)[:, 0]
        out = jax.lax.dynamic_update_index_in_dim(out, tok_B, t, axis=1)
        lp = jax.lax.dynamic_update_index_in_dim(lp, lp_B, t, axis=1)
        pos = jnp.minimum(P + t, W - 1)  # the last token is never fed back
        new = jax.lax.dynamic_update_index_in_dim(buf, tok_B, pos, axis=1)
        buf = jnp.where(P + t < W, new, buf)
        return buf, out, lp

    _, out_BxK, lp_BxK = jax.lax.fori_loop(0, K, body, (buf_BxW, out_BxK, lp_BxK))
    return out_BxK, lp_BxK
