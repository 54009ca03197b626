"""Decoder-only transformer LM in Flax NNX.

token embedding -> n_layers x [RMSNorm -> causal GQA attention with RoPE -> residual,
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> output head (optionally tied to the embedding).
With `model.moe` set, the MLP of every `moe.every`-th layer is a routed mixture of SwiGLU experts
(`MoEMLP`: softmax top-k router, per-sequence expert capacity, einsum dispatch and combine,
optional shared experts); `Transformer.forward` / `apply_with_stats` also return each routed
layer's load-balancing loss, router z-loss and dropped fraction (`MoEStats`).

Numerics: parameters are float32; matmuls run in `cfg.dtype` (float32 or bfloat16; "auto" is
bfloat16 on GPU/TPU and float32 on CPU); attention scores, softmax, norms and the returned logits
are float32. The attention kernel is `cfg.attention` (see `ATTENTION`; "auto" is the block-causal
einsums below on CPU and `jax.nn.dot_product_attention` on accelerators: cuDNN flash attention on
an NVIDIA GPU, XLA's fused attention on TPU). Both "auto"s are resolved when the model is built
(`ModelConfig.resolved`), for the platform JAX runs on.

Every parameter carries its logical axis names as `out_sharding` metadata (eager sharding off:
placement is decided later by `sharding/`, from `logical_axes(model)`), and the main activations
are passed through `models.axes.constrain` with logical names.
Shapes are named in suffixes: B batch, L length, D d_model, H query heads, K kv heads,
G = H/K group size, E d_head, F d_ff, V vocab; in the routed layer X routed experts, C the
expert capacity, K the experts each token picks (top-k), S the tokens of one routing group.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from models import axes
from models.config import ModelConfig


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], std: float, names: tuple[str, ...]) -> nnx.Param:
    assert len(shape) == len(names)
    value = std * jax.random.truncated_normal(rngs.params(), -2.0, 2.0, shape, jnp.float32)
    return nnx.Param(value, out_sharding=names, eager_sharding=False)


def _ones(shape: tuple[int, ...], names: tuple[str, ...]) -> nnx.Param:
    return nnx.Param(jnp.ones(shape, jnp.float32), out_sharding=names, eager_sharding=False)


class RMSNorm(nnx.Module):
    """Root-mean-square norm computed in float32, with a learned per-channel scale."""

    def __init__(self, d: int, eps: float):
        self.scale = _ones((d,), (axes.NORM,))
        self.eps = eps

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        x = x_BxLxD.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return (x * self.scale[...]).astype(x_BxLxD.dtype)


def rope(x_BxLxNxE: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding (rotate-half convention), computed in float32."""
    _, L, _, E = x_BxLxNxE.shape
    inv_freq = 1.0 / (theta ** (jnp.arange(0, E, 2, dtype=jnp.float32) / E))
    ang_LxE2 = jnp.arange(L, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos = jnp.cos(ang_LxE2)[None, :, None, :]
    sin = jnp.sin(ang_LxE2)[None, :, None, :]
    x = x_BxLxNxE.astype(jnp.float32)
    x1, x2 = x[..., : E // 2], x[..., E // 2 :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BxLxNxE.dtype)


def _matmul(x_NxI: jax.Array, w_IxO: jax.Array, dt: jnp.dtype) -> jax.Array:
    return jnp.dot(x_NxI, w_IxO.astype(dt))


def _tokens(x_BxLxI: jax.Array) -> jax.Array:
    """The B*L tokens as the rows of a 2-D matmul (N x I), except when the sequence is split over
    devices (context parallelism): merging the batch dim with a split length dim is no tiled
    sharding, so XLA would gather the whole sequence; then x stays B x L x I (`_matmul`'s
    jnp.dot contracts the last dim all the same, and the callers' reshapes accept both)."""
    if axes.sequence_split():
        return x_BxLxI
    B, L, I = x_BxLxI.shape
    return x_BxLxI.reshape(B * L, I)


def attention_blocks(L: int) -> list[tuple[int, int]]:
    """Query blocks [(start, stop), ...] for block-causal attention: at most 8 blocks of >= 64.

    Block i only attends keys [0, stop_i), so the fully masked upper-right tiles of the score
    matrix are never computed (work (nb+1)/(2nb) of the full matrix); few, large blocks keep
    the matmuls efficient and the program small.
    """
    nb = max(1, min(8, L // 64))
    size = -(-L // nb)
    return [(a, min(a + size, L)) for a in range(0, L, size)]


def causal_attention(
    q_BxLxKxGxE: jax.Array,
    k_BxLxKxE: jax.Array,
    v_BxLxKxE: jax.Array,
    blocks: list[tuple[int, int]] | None = None,
) -> jax.Array:
    """softmax(q k^T / sqrt(E) + causal mask) v, scores and softmax in float32.

    Exactly the textbook formula, computed per query block (see `attention_blocks`) with the
    softmax normalisation applied after the PV matmul (o / z instead of (p / z) v): one pass less
    over the L x L scores in both directions, which is what dominates attention time on CPU.
    The row max is treated as a constant in the gradient (softmax is shift invariant, so the
    gradient is exact).
    """
    dt = q_BxLxKxGxE.dtype
    L, E = q_BxLxKxGxE.shape[1], q_BxLxKxGxE.shape[-1]
    q = q_BxLxKxGxE * jnp.asarray(1.0 / math.sqrt(E), dt)
    outs = []
    for a, b in blocks or attention_blocks(L):
        s_BxKxGxlxs = jnp.einsum(
            "blkge,bske->bkgls", q[:, a:b], k_BxLxKxE[:, :b], preferred_element_type=jnp.float32
        )
        visible_lxs = jnp.arange(a, b)[:, None] >= jnp.arange(b)[None, :]
        s_BxKxGxlxs = jnp.where(visible_lxs, s_BxKxGxlxs, -jnp.inf)
        m = jax.lax.stop_gradient(jnp.max(s_BxKxGxlxs, axis=-1, keepdims=True))
        p_BxKxGxlxs = jnp.exp(s_BxKxGxlxs - m)
        z_BxlxKxG = jnp.moveaxis(jnp.sum(p_BxKxGxlxs, axis=-1), 3, 1)
        o_BxlxKxGxE = jnp.einsum(
            "bkgls,bske->blkge", p_BxKxGxlxs.astype(dt), v_BxLxKxE[:, :b], preferred_element_type=jnp.float32
        )
        outs.append((o_BxlxKxGxE / z_BxlxKxG[..., None]).astype(dt))
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)


def fused_attention(
    q_BxLxKxGxE: jax.Array, k_BxLxKxE: jax.Array, v_BxLxKxE: jax.Array, implementation: str
) -> jax.Array:
    """The same causal GQA attention through `jax.nn.dot_product_attention` ("xla" or "cudnn").

    Query head h = k * G + g reads KV head k, exactly as in `causal_attention`. cuDNN runs a
    flash-attention kernel that never materialises the L x L scores and skips the masked half;
    XLA builds the masked score matrix and fuses it on GPU/TPU (on CPU it is the slower choice).
    """
    B, L, K, G, E = q_BxLxKxGxE.shape
    o_BxLxHxE = jax.nn.dot_product_attention(
        q_BxLxKxGxE.reshape(B, L, K * G, E),
        k_BxLxKxE,
        v_BxLxKxE,
        is_causal=True,
        implementation=implementation,
    )
    return o_BxLxHxE.reshape(B, L, K, G, E)


# model.attention -> kernel(q_BxLxKxGxE, k_BxLxKxE, v_BxLxKxE) -> o_BxLxKxGxE ("auto" is resolved
# by ModelConfig.resolved before the model is built).
ATTENTION = {
    "blocked": causal_attention,
    "xla": functools.partial(fused_attention, implementation="xla"),
    "cudnn": functools.partial(fused_attention, implementation="cudnn"),
}


class Attention(nnx.Module):
    """Causal multi-head attention with grouped KV heads (GQA when n_kv_heads < n_heads)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        D, H, K, E = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head
        std_in = 1.0 / math.sqrt(D)
        std_out = 1.0 / math.sqrt(H * E) / math.sqrt(2 * cfg.n_layers)
        self.wq_DxHxE = _param(rngs, (D, H, E), std_in, (axes.EMBED, axes.HEADS, axes.KV))
        self.wk_DxKxE = _param(rngs, (D, K, E), std_in, (axes.EMBED, axes.KV_HEADS, axes.KV))
        self.wv_DxKxE = _param(rngs, (D, K, E), std_in, (axes.EMBED, axes.KV_HEADS, axes.KV))
        self.wo_HxExD = _param(rngs, (H, E, D), std_out, (axes.HEADS, axes.KV, axes.EMBED))
        self.cfg = cfg

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        cfg = self.cfg
        dt = x_BxLxD.dtype
        B, L, D = x_BxLxD.shape
        H, K, E = cfg.n_heads, cfg.kv_heads, cfg.d_head
        # Sequence parallelism: the norm output arrives sequence-split over `tensor`; this is the
        # all-gather before the column-parallel projections (a no-op without SP).
        x_BxLxD = axes.constrain(x_BxLxD, (axes.BATCH, axes.LENGTH, axes.ACT_EMBED))
        # Projections as plain 2-D matmuls over the B*L tokens: XLA:CPU lays out the forward and
        # backward of 2-D dots far better than 3-D einsums (measured 1.5-2x on the MLP).
        x_NxD = _tokens(x_BxLxD)
        q = _matmul(x_NxD, self.wq_DxHxE[...].reshape(D, H * E), dt).reshape(B, L, H, E)
        k = _matmul(x_NxD, self.wk_DxKxE[...].reshape(D, K * E), dt).reshape(B, L, K, E)
        v = _matmul(x_NxD, self.wv_DxKxE[...].reshape(D, K * E), dt).reshape(B, L, K, E)
        q = axes.constrain(q, (axes.BATCH, axes.LENGTH, axes.ACT_HEADS, axes.KV))
        k = axes.constrain(k, (axes.BATCH, axes.LENGTH, axes.ACT_KV_HEADS, axes.KV))
        v = axes.constrain(v, (axes.BATCH, axes.LENGTH, axes.ACT_KV_HEADS, axes.KV))
        q, k = rope(q, cfg.rope_theta), rope(k, cfg.rope_theta)
        kernel = axes.attention_kernel(ATTENTION[cfg.attention])  # context-parallel when L is split
        o_BxLxKxGxE = kernel(q.reshape(B, L, K, H // K, E), k, v)
        o_BxLxHxE = axes.constrain(
            o_BxLxKxGxE.reshape(B, L, H, E), (axes.BATCH, axes.LENGTH, axes.ACT_HEADS, axes.KV)
        )
        out = _matmul(_tokens(o_BxLxHxE.reshape(B, L, H * E)), self.wo_HxExD[...].reshape(H * E, D), dt)
        # row-parallel output: all-reduce over `tensor`, or reduce-scatter along L under SP
        return axes.constrain(out.reshape(B, L, D), (axes.BATCH, axes.RESID_LENGTH, axes.ACT_EMBED))


class SwiGLU(nnx.Module):
    """MLP: (silu(x W_gate) * x W_up) W_down; `d_ff` (default `cfg.ff`) is its hidden width
    (the shared experts of a routed layer are one SwiGLU of their summed width)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, d_ff: int | None = None):
        D, F = cfg.d_model, cfg.ff if d_ff is None else d_ff
        self.w_gate_DxF = _param(rngs, (D, F), 1.0 / math.sqrt(D), (axes.EMBED, axes.MLP))
        self.w_up_DxF = _param(rngs, (D, F), 1.0 / math.sqrt(D), (axes.EMBED, axes.MLP))
        self.w_down_FxD = _param(
            rngs, (F, D), 1.0 / math.sqrt(F) / math.sqrt(2 * cfg.n_layers), (axes.MLP, axes.EMBED)
        )

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        dt = x_BxLxD.dtype
        B, L, D = x_BxLxD.shape
        x_BxLxD = axes.constrain(x_BxLxD, (axes.BATCH, axes.LENGTH, axes.ACT_EMBED))  # SP all-gather
        x_NxD = _tokens(x_BxLxD)
        g = _matmul(x_NxD, self.w_gate_DxF[...], dt)
        u = _matmul(x_NxD, self.w_up_DxF[...], dt)
        # silu written as g * sigmoid(g): jax.nn.silu's custom derivative costs XLA:CPU an extra
        # ~40% on the whole MLP backward; the math is identical.
        h_BxLxF = axes.constrain(
            (g * jax.nn.sigmoid(g) * u).reshape(B, L, -1), (axes.BATCH, axes.LENGTH, axes.ACT_MLP)
        )
        out = _matmul(_tokens(h_BxLxF), self.w_down_FxD[...], dt)
        return axes.constrain(out.reshape(B, L, D), (axes.BATCH, axes.RESID_LENGTH, axes.ACT_EMBED))


# ---- mixture of experts ------------------------------------------------------------------------

# What each routed layer reports (a dict of float32 scalars; `Transformer.forward` stacks them
# over the routed layers): the load-balancing loss, the router z-loss, the fraction of token
# choices dropped at the capacity.
MOE_STATS = ("aux_loss", "z_loss", "dropped_fraction")
MoEStats = dict[str, jax.Array]


def _top_k_one_hot(p_GxSxX: jax.Array, k: int) -> jax.Array:
    """The k largest entries of each row as one-hot int32 rows (G x S x k x X), largest first,
    the lower index first among equals (as `jax.lax.top_k`). By k rounds of argmax: XLA's SPMD
    partitioner splits an argmax over the batch dims, while it gathers the operand of a TopK
    onto every device."""
    X = p_GxSxX.shape[-1]
    picks, p = [], p_GxSxX
    for _ in range(k):
        one = jax.nn.one_hot(jnp.argmax(p, axis=-1), X, dtype=jnp.int32)
        picks.append(one)
        p = jnp.where(one > 0, -jnp.inf, p)
    return jnp.stack(picks, axis=2)


def top_k_routing(
    logits_GxSxX: jax.Array, top_k: int, capacity: int
) -> tuple[jax.Array, jax.Array, MoEStats]:
    """(dispatch_GxSxXxC, combine_GxSxXxC, stats) of softmax top-k routing with capacity.

    Per group g of S tokens (a sequence): p = softmax(logits) over the X experts; each token
    picks its `top_k` most probable experts; expert x gives its chosen (token, choice) pairs the
    slots 0, 1, ... of its buffer of `capacity`, all first choices of the group first (in token
    order), then all second choices, ... (GShard's priority: a token's lower choices drop first),
    and drops those past the capacity. dispatch[g, s, x, c] = 1 when token s sits in slot c of
    expert x; combine = dispatch * p[g, s, x], the weight of that expert's output in token s's
    (no renormalisation over the k picks: the gate is the router's probability, as in Switch and
    GShard, so the LM loss trains the router even at k = 1).

    stats (float32 scalars, means over the G groups):
    * aux_loss: X * sum_x f_x * P_x, f_x the fraction of the group's S * k choices that picked
      expert x (before dropping), P_x the group's mean router probability of x (Switch
      Transformer eq. 4 with k choices per token; GShard computes it per group too): 1 when
      routing is uniform, X when every token picks the same experts; its gradient flows through P;
    * z_loss: mean over tokens of logsumexp(logits)^2 (ST-MoE's router z-loss);
    * dropped_fraction: dropped choices / (S * k), no gradient.
    Everything is per group, so the result of a batch does not depend on how it is split over
    devices or micro-batches.
    """
    logits = logits_GxSxX.astype(jnp.float32)
    G, S, X = logits.shape
    K = top_k
    p_GxSxX = jax.nn.softmax(logits, axis=-1)
    chosen_GxSxKxX = _top_k_one_hot(p_GxSxX, K)
    # the slot each choice gets in its expert's buffer: choices in (k, s) order, counted per expert
    order_GxKSxX = jnp.swapaxes(chosen_GxSxKxX, 1, 2).reshape(G, K * S, X)
    before_GxKSxX = jnp.cumsum(order_GxKSxX, axis=1) - order_GxKSxX
    slot_GxSxK = jnp.swapaxes(jnp.sum(before_GxKSxX * order_GxKSxX, axis=-1).reshape(G, K, S), 1, 2)
    kept_GxSxK = slot_GxSxK < capacity
    dispatch_GxSxXxC = jnp.einsum(
        "gskx,gskc->gsxc",
        chosen_GxSxKxX.astype(jnp.float32) * kept_GxSxK[..., None],
        jax.nn.one_hot(slot_GxSxK, capacity, dtype=jnp.float32),
    )
    combine_GxSxXxC = dispatch_GxSxXxC * p_GxSxX[..., None]
    f_GxX = jnp.sum(chosen_GxSxKxX, axis=(1, 2)).astype(jnp.float32) / (S * K)
    aux = X * jnp.mean(jnp.sum(f_GxX * jnp.mean(p_GxSxX, axis=1), axis=-1))
    z = jnp.mean(jnp.square(jax.nn.logsumexp(logits, axis=-1)))
    dropped = 1.0 - jnp.mean(kept_GxSxK.astype(jnp.float32))
    return dispatch_GxSxXxC, combine_GxSxXxC, {"aux_loss": aux, "z_loss": z, "dropped_fraction": dropped}


class MoEMLP(nnx.Module):
    """Routed MLP (`model.moe`, models/config.py: MoEConfig): a float32 softmax router over X =
    experts * granularity SwiGLU experts of width d_ff / granularity, each token sent to its
    top_k * granularity most probable ones (`top_k_routing`), plus `shared_experts` always-on
    experts of the same width (one SwiGLU of their summed width: the sum of their outputs).

    Dispatch and combine are einsums with the capacity-limited dispatch / combine tensors
    (GShard, Lepikhin et al. 2021): tokens arrive batch-sharded (over data, fsdp and expert),
    the dispatch einsum gathers the local sequences' slots of every expert into X x B x C x D
    where the tokens are, which is then constrained expert-sharded (the `expert` mesh axis moves
    from the sequence dim to the expert dim: XLA's SPMD partitioner places an all-to-all there),
    the experts run as batched matmuls on their own devices, and their outputs go back to the
    tokens' devices (the all-to-all back) for the combine einsum. One routing group is one
    sequence, so routing never depends on the mesh. The router starts at `init_std` (near-uniform
    routing); the experts are initialised as the dense SwiGLU of their width.
    """

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        moe = cfg.moe
        D, X, F = cfg.d_model, moe.routed_experts, moe.expert_d_ff(cfg.ff)
        self.router_DxX = _param(rngs, (D, X), cfg.init_std, (axes.EMBED, None))
        self.w_gate_XxDxF = _param(rngs, (X, D, F), 1.0 / math.sqrt(D), (axes.EXPERT, axes.EMBED, axes.MLP))
        self.w_up_XxDxF = _param(rngs, (X, D, F), 1.0 / math.sqrt(D), (axes.EXPERT, axes.EMBED, axes.MLP))
        self.w_down_XxFxD = _param(
            rngs,
            (X, F, D),
            1.0 / math.sqrt(F) / math.sqrt(2 * cfg.n_layers),
            (axes.EXPERT, axes.MLP, axes.EMBED),
        )
        if moe.shared_experts:
            self.shared = SwiGLU(cfg, rngs, d_ff=moe.shared_experts * F)
        self.moe = moe

    def router_logits(self, x_BxLxD: jax.Array) -> jax.Array:
        """Router logits, float32 (B x L x X)."""
        B, L, _ = x_BxLxD.shape
        logits = _matmul(_tokens(x_BxLxD).astype(jnp.float32), self.router_DxX[...], jnp.float32)
        return axes.constrain(logits.reshape(B, L, -1), (axes.BATCH, axes.LENGTH, None))

    def __call__(self, x_BxLxD: jax.Array) -> tuple[jax.Array, MoEStats]:
        dt = x_BxLxD.dtype
        x_BxLxD = axes.constrain(x_BxLxD, (axes.BATCH, axes.LENGTH, axes.ACT_EMBED))  # SP all-gather
        capacity = self.moe.capacity(x_BxLxD.shape[1])  # a routing group is one sequence
        dispatch_BxLxXxC, combine_BxLxXxC, stats = top_k_routing(
            self.router_logits(x_BxLxD), self.moe.routed_top_k, capacity
        )
        # Dispatch where the tokens are (every expert's slots of the local sequences), then move
        # the `expert` split from the sequences to the experts: the all-to-all. (Constraining the
        # einsum's output to expert-sharded directly makes XLA all-gather the tokens instead.)
        xe_XxBxCxD = axes.constrain(
            jnp.einsum("bsxc,bsd->xbcd", dispatch_BxLxXxC.astype(dt), x_BxLxD),
            (None, axes.BATCH, None, axes.ACT_EMBED),
        )
        xe_XxBxCxD = axes.constrain(xe_XxBxCxD, (axes.ACT_EXPERT, axes.EXPERT_BATCH, None, axes.ACT_EMBED))
        g = jnp.einsum("xbcd,xdf->xbcf", xe_XxBxCxD, self.w_gate_XxDxF[...].astype(dt))
        u = jnp.einsum("xbcd,xdf->xbcf", xe_XxBxCxD, self.w_up_XxDxF[...].astype(dt))
        h_XxBxCxF = axes.constrain(
            g * jax.nn.sigmoid(g) * u, (axes.ACT_EXPERT, axes.EXPERT_BATCH, None, axes.ACT_MLP)
        )
        ye_XxBxCxD = axes.constrain(
            jnp.einsum("xbcf,xfd->xbcd", h_XxBxCxF, self.w_down_XxFxD[...].astype(dt)),
            (axes.ACT_EXPERT, axes.EXPERT_BATCH, None, axes.ACT_EMBED),
        )
        # back to the tokens' devices (the all-to-all back), then combine there
        ye_XxBxCxD = axes.constrain(ye_XxBxCxD, (None, axes.BATCH, None, axes.ACT_EMBED))
        y_BxLxD = jnp.einsum("bsxc,xbcd->bsd", combine_BxLxXxC.astype(dt), ye_XxBxCxD)
        if hasattr(self, "shared"):
            y_BxLxD = y_BxLxD + self.shared(x_BxLxD)
        return axes.constrain(y_BxLxD, (axes.BATCH, axes.RESID_LENGTH, axes.ACT_EMBED)), stats


class Block(nnx.Module):
    """Pre-norm residual block: attention then SwiGLU (`routed`: then the routed MoEMLP)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, routed: bool = False):
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, rngs)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MoEMLP(cfg, rngs) if routed else SwiGLU(cfg, rngs)
        self.routed = routed

    def forward(self, x_BxLxD: jax.Array) -> tuple[jax.Array, MoEStats | None]:
        """(block output, the routed layer's MoEStats or None for a dense block)."""
        x = x_BxLxD + self.attn(self.attn_norm(x_BxLxD))
        stats = None
        if self.routed:
            h, stats = self.mlp(self.mlp_norm(x))
        else:
            h = self.mlp(self.mlp_norm(x))
        x = x + h
        return axes.constrain(x, (axes.BATCH, axes.RESID_LENGTH, axes.ACT_EMBED)), stats

    def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
        return self.forward(x_BxLxD)[0]


def _block_forward(block: Block, x_BxLxD: jax.Array) -> jax.Array:
    return block(x_BxLxD)


def _block_forward_stats(block: Block, x_BxLxD: jax.Array) -> tuple[jax.Array, MoEStats | None]:
    return block.forward(x_BxLxD)


# model.remat -> what the backward pass keeps of each block (`jax.checkpoint` policies):
# * none: everything XLA wants to keep (attention probabilities included);
# * selective: the outputs of the weight matmuls (q, k, v, gate, up, ...; 2-D dots, no batch
#   dims) -- the attention scores/softmax/AV (batched einsums or the fused kernel), RoPE, norms
#   and the SwiGLU product are recomputed; MaxText's "minimal" policy;
# * full: only the block input; the whole block is run again in the backward pass.
REMAT_POLICIES = {
    "selective": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}
BLOCK_FORWARD = {
    "none": _block_forward,
    **{name: nnx.remat(_block_forward, policy=policy) for name, policy in REMAT_POLICIES.items()},
}
# ... the same for a routed block, which also returns its MoEStats
ROUTED_BLOCK_FORWARD = {
    "none": _block_forward_stats,
    **{name: nnx.remat(_block_forward_stats, policy=policy) for name, policy in REMAT_POLICIES.items()},
}


class Transformer(nnx.Module):
    """`Transformer(cfg, rngs=nnx.Rngs(seed))`; `model(tokens_BxL) -> logits_BxLxV` (float32)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        cfg = cfg.validate().resolved()  # concrete dtype and attention kernel for this platform
        self.cfg = cfg
        V, D = cfg.vocab_size, cfg.d_model
        self.embed_VxD = _param(rngs, (V, D), cfg.init_std, (axes.VOCAB, axes.EMBED))
        # Blocks are named attributes (block_0, block_1, ...) so the parameter tree has string
        # keys only, which keeps optimizer masks and Orbax checkpoints simple.
        for i in range(cfg.n_layers):
            setattr(self, f"block_{i}", Block(cfg, rngs, routed=i in cfg.moe_layers))
        self.final_norm = RMSNorm(D, cfg.norm_eps)
        if not cfg.tie_embeddings:
            self.head_DxV = _param(rngs, (D, V), cfg.init_std, (axes.EMBED, axes.VOCAB))

    def blocks(self) -> list[Block]:
        return [getattr(self, f"block_{i}") for i in range(self.cfg.n_layers)]

    def __call__(self, tokens_BxL: jax.Array) -> jax.Array:
        return self.forward(tokens_BxL)[0]

    def forward(self, tokens_BxL: jax.Array) -> tuple[jax.Array, MoEStats | None]:
        """(logits_BxLxV, stats): stats maps each MOE_STATS name to its values in the routed
        layers, in layer order (arrays of len(cfg.moe_layers)); None for a dense model."""
        x = self.embed(tokens_BxL)
        routed: list[MoEStats] = []
        for block in self.blocks():
            if block.routed:
                x, stats = ROUTED_BLOCK_FORWARD[self.cfg.remat](block, x)
                routed.append(stats)
            else:
                x = BLOCK_FORWARD[self.cfg.remat](block, x)
        stacked = {k: jnp.stack([st[k] for st in routed]) for k in MOE_STATS} if routed else None
        return self.logits(x), stacked

    # embed / logits: the parts before and after the blocks, separate so that a pipeline
    # (sharding/pipeline.py) can run the blocks its own way in between.
    def embed(self, tokens_BxL: jax.Array) -> jax.Array:
        # the table is gathered over `fsdp` first (as every ZeRO-3 weight is before use) and the
        # lookup reads a vocab-sharded table: without it XLA cannot move the gather's output from
        # the table's (fsdp, tensor) layout to the batch layout and replicates it every step
        table_VxD = axes.constrain(self.embed_VxD[...], (axes.VOCAB, None))
        x = jnp.take(table_VxD, tokens_BxL, axis=0).astype(jnp.dtype(self.cfg.dtype))
        return axes.constrain(x, (axes.BATCH, axes.RESID_LENGTH, axes.ACT_EMBED))

    def logits(self, x_BxLxD: jax.Array) -> jax.Array:
        cfg = self.cfg
        dt = jnp.dtype(cfg.dtype)
        x = self.final_norm(x_BxLxD)
        if cfg.width_mult != 1.0:  # µP readout: logits / width multiplier (ModelConfig.width_mult)
            x = x * jnp.asarray(1.0 / cfg.width_mult, x.dtype)
        if cfg.tie_embeddings:
            logits = jnp.einsum(
                "bld,vd->blv", x, self.embed_VxD[...].astype(dt), preferred_element_type=jnp.float32
            )
        else:
            logits = jnp.einsum(
                "bld,dv->blv", x, self.head_DxV[...].astype(dt), preferred_element_type=jnp.float32
            )
        return axes.constrain(logits.astype(jnp.float32), (axes.BATCH, axes.LENGTH, axes.ACT_VOCAB))


# ---- functional view used by the trainer, the sharding layer and the tests ---------------------


def split_params(model: Transformer) -> tuple[nnx.GraphDef, dict[str, Any]]:
    """(graphdef, params) with params a nested dict of float32 arrays (string keys only)."""
    graphdef, state = nnx.split(model, nnx.Param)
    return graphdef, nnx.to_pure_dict(state)


def logical_axes(model: Transformer) -> dict[str, Any]:
    """Same tree as `split_params(model)[1]`, each leaf the tuple of logical axis names."""
    state = nnx.state(model, nnx.Param)
    return nnx.to_pure_dict(
        jax.tree.map(
            lambda v: tuple(v.get_metadata()["out_sharding"]),
            state,
            is_leaf=lambda x: isinstance(x, nnx.Variable),
        )
    )


def abstract_model(cfg: ModelConfig) -> Transformer:
    """The model with shape-only parameters (no FLOPs, no memory): for specs and shapes."""
    return nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))


def apply(graphdef: nnx.GraphDef, params: dict[str, Any], tokens_BxL: jax.Array) -> jax.Array:
    """Pure forward pass: logits_BxLxV (float32) of the model given by (graphdef, params)."""
    return apply_with_stats(graphdef, params, tokens_BxL)[0]


def apply_with_stats(
    graphdef: nnx.GraphDef, params: dict[str, Any], tokens_BxL: jax.Array
) -> tuple[jax.Array, MoEStats | None]:
    """Pure forward pass with the routed layers' statistics: `Transformer.forward`."""
    model = nnx.merge(graphdef, jax.tree.map(lambda a: nnx.Param(a, eager_sharding=False), params))
    return model.forward(tokens_BxL)


def init_params(cfg: ModelConfig, seed: int) -> tuple[nnx.GraphDef, dict[str, Any]]:
    """Build the model with `nnx.Rngs(seed)` and return (graphdef, params)."""
    return split_params(Transformer(cfg, rngs=nnx.Rngs(seed)))
