"""Parameter and training-FLOP counts of `models.transformer.Transformer` (pure functions).

Conventions (documented because scaling-law fits depend on them):

* `param_count(cfg)`: every trainable parameter, exactly the size of the model's parameter tree
  (embedding V*D, per layer attention D*(H+2K)*E + H*E*D, SwiGLU 3*D*F, two norm scales D,
  final norm D, and an untied head D*V unless `tie_embeddings`). A routed layer (`model.moe`)
  has instead of the SwiGLU its router D*X, X experts of 3*D*F_e and the shared experts'
  3*D*(shared*F_e), with X = experts * granularity and F_e = F / granularity (`moe_mlp_params`).
* `active_param_count(cfg)`: the parameters one token uses: `param_count` with each routed
  layer's experts counted k = top_k * granularity times instead of X times (router and shared
  experts whole: every token multiplies by them; `moe_mlp_active_params`). Equal to
  `param_count` for a dense model.
* `non_embedding_param_count(cfg)`: `param_count` minus the vocabulary matrices (the input
  embedding and, when untied, the output head) -- Kaplan et al.'s N.
* `matmul_param_count(cfg)`: N_matmul, the weights that take part in a matmul per token: all
  attention and MLP weights plus the output head (the tied embedding counts once, as the head);
  the embedding *lookup* and norm scales do no matmul. In a mixture of experts these are the
  active weights: the router, the k experts a token is sent to and the shared experts.
* `flops_per_token(cfg, causal=True)`: training FLOPs (forward + backward = 3x forward, 2 FLOPs
  per multiply-add) per token:

      6 * N_matmul + 6 * L * T * H * d_head            (causal, default)
      6 * N_matmul + 12 * L * T * H * d_head           (causal=False)

  where L = n_layers, T = seq_len (context), H * d_head = attention width. The attention term is
  QK^T and AV: forward 2 * 2 * T * H * d_head per token per layer, x3 for training = 12; causal
  masking means only half the score matrix is needed, hence 6. Elementwise work (softmax, norms,
  SwiGLU gate, RoPE, loss) is not counted, as in Kaplan/Chinchilla/PaLM accounting. XLA computes
  the full (masked) score matrix, so its `cost_analysis()` is comparable to `causal=False`.
  For a mixture of experts these are the *active* FLOPs (N_matmul active, router included): the
  model's work per token, without what the implementation adds -- the empty capacity slots the
  experts compute (capacity_factor x the routed work, or X / k of it dropless) and the dispatch /
  combine einsums (2 x 2*S*X*C*D per token and layer forward, S the group, C the capacity);
  `moe_executed_flops_per_token` counts those too.
* The per-block counts (`attention_params`, `mlp_params`, `block_params`,
  `attention_score_flops`, `palm_flops_per_token`) take plain sizes, so that the cost model's
  `ModelShape` (sharding/costmodel/spec.py), which also describes shapes this model cannot build
  (GELU MLPs), counts with the same functions as `param_count` does here.

MFU conventions. An MFU is "model FLOPs / (time x devices x peak)", and which FLOPs count as
model FLOPs differs between sources by up to ~2x on the attention term, so every MFU the project
prints or writes names its convention (`mfu_convention` next to `mfu`), one of `MFU_CONVENTIONS`:

* `MFU_CAUSAL` ("causal_6N+6LTHd"): `flops_per_token` above -- N = N_matmul, causal attention.
  The training loop's MFU (summary.json, metrics.jsonl).
* `MFU_ACTIVE` ("causal_6N_active+6LTHd"): the same for a mixture of experts, N = the active
  N_matmul (router, k routed experts, shared experts): "mfu (active FLOPs)". The training
  loop's MFU of an MoE run (`mfu_convention(cfg)` picks it).
* `MFU_PALM` ("palm_6N+12LHQT"): PaLM (Chowdhery et al. 2022, App. B) -- N = every parameter
  including the input embedding, non-causal attention 12 * L * H * Q * T (Q = d_head). The cost
  model's MFU (`python -m analysis plan`, `layout-eval`), comparable with published sheets
  (Hagemann et al. 2023). For the same run it is higher than the causal figure.
"""

from __future__ import annotations

from models.config import ModelConfig

MFU_CAUSAL = "causal_6N+6LTHd"
MFU_ACTIVE = "causal_6N_active+6LTHd"
MFU_PALM = "palm_6N+12LHQT"
MFU_CONVENTIONS = {
    MFU_CAUSAL: (
        "6*N_matmul + 6*L*T*H*d_head FLOPs per token (causal attention; models.flops.flops_per_token)"
    ),
    MFU_ACTIVE: (
        "active FLOPs: 6*N_matmul_active + 6*L*T*H*d_head per token, N_matmul_active = the weights one "
        "token uses (router, top-k routed experts, shared experts; models.flops.flops_per_token)"
    ),
    MFU_PALM: "6*N_all_params + 12*L*H*Q*T FLOPs per token (PaLM App. B, non-causal attention)",
}


NORMS_PER_LAYER = 2  # RMSNorm scales of a block: before attention and before the MLP


def attention_params(d_model: int, n_heads: int, kv_heads: int, d_head: int) -> int:
    """Weights of one attention block: Wq (D x H*E), Wk and Wv (D x K*E each), Wo (H*E x D)."""
    return d_model * n_heads * d_head + 2 * d_model * kv_heads * d_head + n_heads * d_head * d_model


def mlp_params(d_model: int, d_ff: int, gated: bool = True) -> int:
    """Weights of one MLP block: gate, up and down (3*D*F) when `gated` (SwiGLU, this repo's
    model), up and down (2*D*F) otherwise (the GELU MLP of the cost model's GPT shapes)."""
    return (3 if gated else 2) * d_model * d_ff


def moe_mlp_params(d_model: int, d_expert: int, experts: int, shared_experts: int = 0) -> int:
    """Weights of one routed MLP: the router (D x X), X SwiGLU experts of width `d_expert` and
    `shared_experts` more of that width. `experts` = X, the routed count (experts * granularity)."""
    return d_model * experts + (experts + shared_experts) * mlp_params(d_model, d_expert)


def moe_mlp_active_params(
    d_model: int, d_expert: int, experts: int, top_k: int, shared_experts: int = 0
) -> int:
    """Weights of one routed MLP that a token uses: the whole router (D x X: every token scores
    every expert), the `top_k` experts it is sent to and the shared experts."""
    return d_model * experts + (top_k + shared_experts) * mlp_params(d_model, d_expert)


def block_params(
    d_model: int, n_heads: int, kv_heads: int, d_head: int, d_ff: int, gated: bool = True
) -> int:
    """Parameters of one transformer block: attention, MLP and its two norm scales."""
    return (
        attention_params(d_model, n_heads, kv_heads, d_head)
        + mlp_params(d_model, d_ff, gated)
        + NORMS_PER_LAYER * d_model
    )


def attention_score_flops(n_layers: int, seq_len: int, attn_width: int, causal: bool = True) -> int:
    """Training FLOPs per token of the QK^T and AV products, `attn_width` = H * d_head: 6*L*T*H*E
    causal, 12*L*T*H*E over the full score matrix (see the module docstring)."""
    return (6 if causal else 12) * n_layers * seq_len * attn_width


def palm_flops_per_token(n_params: int, n_layers: int, attn_width: int, seq_len: int) -> float:
    """Model FLOPs per token under `MFU_PALM`: 6*N + 12*L*H*Q*T, N = every parameter including the
    input embedding (the cost model's `ModelShape.model_flops_per_token`)."""
    return 6.0 * n_params + attention_score_flops(n_layers, seq_len, attn_width, causal=False)


def _mlp_params(cfg: ModelConfig, layer: int, active: bool) -> int:
    """Weights of layer `layer`'s MLP: the SwiGLU, or the routed MLP's (`active`: those a token
    uses)."""
    D = cfg.d_model
    if layer not in cfg.moe_layers:
        return mlp_params(D, cfg.ff)
    moe = cfg.moe
    F = moe.expert_d_ff(cfg.ff)
    if active:
        return moe_mlp_active_params(D, F, moe.routed_experts, moe.routed_top_k, moe.shared_experts)
    return moe_mlp_params(D, F, moe.routed_experts, moe.shared_experts)


def _layers_matmul_params(cfg: ModelConfig, active: bool = False) -> int:
    """Matmul weights of all blocks (attention and MLPs; `active`: a token's share of routed ones)."""
    attn = attention_params(cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head)
    return sum(attn + _mlp_params(cfg, i, active) for i in range(cfg.n_layers))


def _param_count(cfg: ModelConfig, active: bool) -> int:
    V, D = cfg.vocab_size, cfg.d_model
    head = 0 if cfg.tie_embeddings else D * V
    norms = cfg.n_layers * NORMS_PER_LAYER * D + D
    return V * D + _layers_matmul_params(cfg, active) + norms + head


def param_count(cfg: ModelConfig) -> int:
    """Total trainable parameters (equals the size of the model's parameter pytree)."""
    return _param_count(cfg, active=False)


def active_param_count(cfg: ModelConfig) -> int:
    """Parameters one token uses (embeddings included): `param_count` with each routed layer's
    experts counted top_k * granularity times instead of experts * granularity times."""
    return _param_count(cfg, active=True)


def non_embedding_param_count(cfg: ModelConfig) -> int:
    """Parameters excluding the input embedding and the (untied) output head."""
    V, D = cfg.vocab_size, cfg.d_model
    head = 0 if cfg.tie_embeddings else D * V
    return param_count(cfg) - V * D - head


def matmul_param_count(cfg: ModelConfig) -> int:
    """N_matmul: attention + MLP weights of all layers plus the output head (tied or not); of a
    routed MLP the weights a token uses (router, top-k experts, shared experts)."""
    return _layers_matmul_params(cfg, active=True) + cfg.d_model * cfg.vocab_size


def attention_flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Training FLOPs per token of the QK^T and AV products (see module docstring)."""
    return attention_score_flops(cfg.n_layers, cfg.seq_len, cfg.n_heads * cfg.d_head, causal)


def flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Training (fwd+bwd) FLOPs per token: 6*N_matmul + 6*L*T*H*d_head (12*... if not causal)."""
    return 6 * matmul_param_count(cfg) + attention_flops_per_token(cfg, causal)


def moe_executed_flops_per_token(cfg: ModelConfig) -> int:
    """Training FLOPs per token that the einsum implementation of the routed layers runs on top of
    `flops_per_token` (which counts the model's active work only): every capacity slot of every
    expert computes, filled or not (X * C slots per group of S tokens instead of S * k), and the
    dispatch and combine einsums (each 2 * X * C * D per token forward). 0 for a dense model."""
    if cfg.moe is None:
        return 0
    moe, S, D = cfg.moe, cfg.seq_len, cfg.d_model
    X, K = moe.routed_experts, moe.routed_top_k
    C = moe.capacity(S)
    slots_beyond_active = X * C / S - K
    per_layer = 3 * (slots_beyond_active * 2 * mlp_params(D, moe.expert_d_ff(cfg.ff)) + 2 * 2 * X * C * D)
    return int(round(len(cfg.moe_layers) * per_layer))


def mfu_convention(cfg: ModelConfig) -> str:
    """The MFU convention the trainer uses for `cfg`: MFU_ACTIVE for a mixture of experts (its
    `flops_per_token` counts active FLOPs), else MFU_CAUSAL."""
    return MFU_CAUSAL if cfg.moe is None else MFU_ACTIVE


def mfu_label(cfg: ModelConfig) -> str:
    """How the trainer's console names its MFU's convention: the convention, with "active FLOPs"
    in front for a mixture of experts ("mfu 0.012 (active FLOPs, causal_6N_active+6LTHd)")."""
    convention = mfu_convention(cfg)
    return convention if convention == MFU_CAUSAL else f"active FLOPs, {convention}"


def forward_flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Forward-only FLOPs per token (one third of the training figure)."""
    return flops_per_token(cfg, causal) // 3
