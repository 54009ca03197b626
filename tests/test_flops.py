"""Parameter counts equal the real pytree; FLOPs/token agree with XLA's cost analysis."""

import jax
import jax.numpy as jnp
import pytest

from experiments.train.steps import cross_entropy_loss
from models.config import ModelConfig
from models.flops import (
    attention_flops_per_token,
    flops_per_token,
    matmul_param_count,
    non_embedding_param_count,
    param_count,
)
from models.transformer import init_params

CONFIGS = [
    ModelConfig(vocab_size=256, d_model=128, n_layers=2, n_heads=4, seq_len=128),
    ModelConfig(
        vocab_size=512, d_model=256, n_layers=2, n_heads=8, n_kv_heads=2, seq_len=128, tie_embeddings=True
    ),
    ModelConfig(vocab_size=256, d_model=192, n_layers=3, n_heads=6, d_ff=384, seq_len=64),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_param_counts_equal_pytree(cfg):
    _, params = init_params(cfg, 0)
    assert param_count(cfg) == sum(x.size for x in jax.tree.leaves(params))
    emb = params["embed_VxD"].size + (params["head_DxV"].size if "head_DxV" in params else 0)
    assert non_embedding_param_count(cfg) == param_count(cfg) - emb
    norms = sum(x.size for x in jax.tree.leaves(params) if x.ndim == 1)
    assert matmul_param_count(cfg) == param_count(cfg) - params["embed_VxD"].size - norms + (
        cfg.vocab_size * cfg.d_model if cfg.tie_embeddings else 0
    )


def test_causal_convention():
    cfg = CONFIGS[0]
    L, T, H, E = cfg.n_layers, cfg.seq_len, cfg.n_heads, cfg.d_head
    assert flops_per_token(cfg) == 6 * matmul_param_count(cfg) + 6 * L * T * H * E
    assert flops_per_token(cfg, causal=False) == 6 * matmul_param_count(cfg) + 12 * L * T * H * E
    assert attention_flops_per_token(cfg, causal=False) == 2 * attention_flops_per_token(cfg)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_flops_within_5pct_of_xla_cost_analysis(cfg):
    """XLA computes the full masked score matrix, so it is compared with causal=False."""
    graphdef, params = init_params(cfg, 0)
    B = 4
    tokens = jnp.zeros((B, cfg.seq_len + 1), jnp.int32)
    grad = jax.jit(jax.value_and_grad(lambda p, t: cross_entropy_loss(graphdef, p, t)))
    cost = grad.lower(params, tokens).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    xla = cost["flops"] / (B * cfg.seq_len)
    ours = flops_per_token(cfg, causal=False)
    assert abs(xla / ours - 1) < 0.05, (xla, ours)
