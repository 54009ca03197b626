"""Parameter and training-FLOP counts of `models.transformer.Transformer` (pure functions).

Conventions (documented because scaling-law fits depend on them):

* `param_count(cfg)`: every trainable parameter, exactly the size of the model's parameter tree
  (embedding V*D, per layer attention D*(H+2K)*E + H*E*D, SwiGLU 3*D*F, two norm scales D,
  final norm D, and an untied head D*V unless `tie_embeddings`).
* `non_embedding_param_count(cfg)`: `param_count` minus the vocabulary matrices (the input
  embedding and, when untied, the output head) -- Kaplan et al.'s N.
* `matmul_param_count(cfg)`: N_matmul, the weights that take part in a matmul per token: all
  attention and MLP weights plus the output head (the tied embedding counts once, as the head);
  the embedding *lookup* and norm scales do no matmul.
* `flops_per_token(cfg, causal=True)`: training FLOPs (forward + backward = 3x forward, 2 FLOPs
  per multiply-add) per token:

      6 * N_matmul + 6 * L * T * H * d_head            (causal, default)
      6 * N_matmul + 12 * L * T * H * d_head           (causal=False)

  where L = n_layers, T = seq_len (context), H * d_head = attention width. The attention term is
  QK^T and AV: forward 2 * 2 * T * H * d_head per token per layer, x3 for training = 12; causal
  masking means only half the score matrix is needed, hence 6. Elementwise work (softmax, norms,
  SwiGLU gate, RoPE, loss) is not counted, as in Kaplan/Chinchilla/PaLM accounting. XLA computes
  the full (masked) score matrix, so its `cost_analysis()` is comparable to `causal=False`.

MFU conventions. An MFU is "model FLOPs / (time x devices x peak)", and which FLOPs count as
model FLOPs differs between sources by up to ~2x on the attention term, so every MFU the project
prints or writes names its convention (`mfu_convention` next to `mfu`), one of `MFU_CONVENTIONS`:

* `MFU_CAUSAL` ("causal_6N+6LTHd"): `flops_per_token` above -- N = N_matmul, causal attention.
  The training loop's MFU (summary.json, metrics.jsonl).
* `MFU_PALM` ("palm_6N+12LHQT"): PaLM (Chowdhery et al. 2022, App. B) -- N = every parameter
  including the input embedding, non-causal attention 12 * L * H * Q * T (Q = d_head). The cost
  model's MFU (`python -m analysis plan`, `layout-eval`), comparable with published sheets
  (Hagemann et al. 2023). For the same run it is higher than the causal figure.
"""

from __future__ import annotations

from models.config import ModelConfig

MFU_CAUSAL = "causal_6N+6LTHd"
MFU_PALM = "palm_6N+12LHQT"
MFU_CONVENTIONS = {
    MFU_CAUSAL: (
        "6*N_matmul + 6*L*T*H*d_head FLOPs per token (causal attention; models.flops.flops_per_token)"
    ),
    MFU_PALM: "6*N_all_params + 12*L*H*Q*T FLOPs per token (PaLM App. B, non-causal attention)",
}


def _per_layer_params(cfg: ModelConfig) -> tuple[int, int]:
    """(matmul weights, norm scales) of one block."""
    D, H, K, E, F = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.d_head, cfg.ff
    attn = D * H * E + 2 * D * K * E + H * E * D
    mlp = 3 * D * F
    return attn + mlp, 2 * D


def param_count(cfg: ModelConfig) -> int:
    """Total trainable parameters (equals the size of the model's parameter pytree)."""
    mm, norm = _per_layer_params(cfg)
    V, D = cfg.vocab_size, cfg.d_model
    head = 0 if cfg.tie_embeddings else D * V
    return V * D + cfg.n_layers * (mm + norm) + D + head


def non_embedding_param_count(cfg: ModelConfig) -> int:
    """Parameters excluding the input embedding and the (untied) output head."""
    V, D = cfg.vocab_size, cfg.d_model
    head = 0 if cfg.tie_embeddings else D * V
    return param_count(cfg) - V * D - head


def matmul_param_count(cfg: ModelConfig) -> int:
    """N_matmul: attention + MLP weights of all layers plus the output head (tied or not)."""
    mm, _ = _per_layer_params(cfg)
    return cfg.n_layers * mm + cfg.d_model * cfg.vocab_size


def attention_flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Training FLOPs per token of the QK^T and AV products (see module docstring)."""
    k = 6 if causal else 12
    return k * cfg.n_layers * cfg.seq_len * cfg.n_heads * cfg.d_head


def flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Training (fwd+bwd) FLOPs per token: 6*N_matmul + 6*L*T*H*d_head (12*... if not causal)."""
    return 6 * matmul_param_count(cfg) + attention_flops_per_token(cfg, causal)


def forward_flops_per_token(cfg: ModelConfig, causal: bool = True) -> int:
    """Forward-only FLOPs per token (one third of the training figure)."""
    return flops_per_token(cfg, causal) // 3
