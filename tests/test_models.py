"""Model behaviour: causality, remat, GQA / tied head structure, dtypes, logical axes, config errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments.train.steps import cross_entropy_loss
from models.base.errors import ConfigError
from models.config import ModelConfig
from models.transformer import Transformer, apply, init_params, logical_axes, split_params

TINY = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=16)


def _tokens(cfg, b=2, seed=0, extra=1):
    return jax.random.randint(jax.random.key(seed), (b, cfg.seq_len + extra), 0, cfg.vocab_size)


def test_forward_shape_and_dtype():
    model = Transformer(TINY, rngs=nnx.Rngs(0))
    logits = model(_tokens(TINY, extra=0))
    assert logits.shape == (2, TINY.seq_len, TINY.vocab_size) and logits.dtype == jnp.float32


def test_causality_future_tokens_do_not_change_past_logits():
    model = Transformer(TINY, rngs=nnx.Rngs(1))
    t = _tokens(TINY, extra=0)
    cut = 7
    t2 = t.at[:, cut:].set((t[:, cut:] + 5) % TINY.vocab_size)
    a, b = model(t), model(t2)
    np.testing.assert_array_equal(np.asarray(a[:, :cut]), np.asarray(b[:, :cut]))
    assert not np.allclose(np.asarray(a[:, cut:]), np.asarray(b[:, cut:]))


def test_remat_matches_no_remat_loss_and_grads():
    g0, p = init_params(TINY, 3)
    g1, p1 = init_params(dataclasses.replace(TINY, remat=True), 3)
    jax.tree.map(np.testing.assert_array_equal, p, p1)
    t = _tokens(TINY)
    l0, gr0 = jax.jit(jax.value_and_grad(lambda p: cross_entropy_loss(g0, p, t)))(p)
    l1, gr1 = jax.jit(jax.value_and_grad(lambda p: cross_entropy_loss(g1, p, t)))(p)
    np.testing.assert_allclose(float(l0), float(l1), rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), gr0, gr1)


def test_remat_is_in_the_compiled_backward():
    """remat=True must actually recompute: the jaxpr holds a remat/checkpoint primitive."""
    g1, p = init_params(dataclasses.replace(TINY, remat=True), 0)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: cross_entropy_loss(g1, p, _tokens(TINY))))(p))
    assert "remat" in jaxpr or "checkpoint" in jaxpr


def test_tied_head_has_no_head_matrix_and_gqa_shapes():
    cfg = dataclasses.replace(TINY, tie_embeddings=True)
    _, p = init_params(cfg, 0)
    assert "head_DxV" not in p
    assert p["block_0"]["attn"]["wk_DxKxE"].shape == (32, 2, 8)
    assert p["block_0"]["attn"]["wq_DxHxE"].shape == (32, 4, 8)


def test_bf16_compute_keeps_f32_params_and_logits_close():
    cfg = dataclasses.replace(TINY, dtype="bfloat16")
    g, p = init_params(cfg, 0)
    g32, _ = init_params(TINY, 0)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p))
    t = _tokens(TINY, extra=0)
    lo16, lo32 = apply(g, p, t), apply(g32, p, t)
    assert lo16.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(lo16 - lo32))) < 0.1


def test_every_param_has_logical_axes():
    model = Transformer(TINY, rngs=nnx.Rngs(0))
    _, p = split_params(model)
    axes = logical_axes(model)
    flat_p = jax.tree_util.tree_leaves_with_path(p)
    flat_a = dict(jax.tree_util.tree_leaves_with_path(axes, is_leaf=lambda x: isinstance(x, tuple)))
    assert len(flat_p) == len(flat_a)
    for path, leaf in flat_p:
        names = flat_a[path]
        assert len(names) == leaf.ndim and all(isinstance(n, str) for n in names), (path, names)


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(d_model=100, n_heads=3), "model.n_heads=3 does not divide model.d_model=100"),
        (dict(n_kv_heads=3), "model.n_kv_heads=3 does not divide model.n_heads=4"),
        (dict(n_layers=0), "model.n_layers"),
        (dict(dtype="float16"), "model.dtype"),
        (dict(d_model=36, n_heads=4), "must be even"),
    ],
)
def test_config_errors_name_the_key(kw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        dataclasses.replace(TINY, **kw).validate()


def _naive_attention(q_BxLxKxGxE, k_BxLxKxE, v_BxLxKxE):
    """The textbook formula on the full L x L matrix, for comparison."""
    E = q_BxLxKxGxE.shape[-1]
    L = q_BxLxKxGxE.shape[1]
    s = jnp.einsum("blkge,bske->bkgls", q_BxLxKxGxE, k_BxLxKxE) / jnp.sqrt(E)
    s = jnp.where(jnp.tril(jnp.ones((L, L), bool)), s, -1e30)
    return jnp.einsum("bkgls,bske->blkge", jax.nn.softmax(s, axis=-1), v_BxLxKxE)


@pytest.mark.parametrize("L", [1, 37, 200, 520])
def test_block_causal_attention_equals_full_softmax_values_and_grads(L):
    from models.transformer import attention_blocks, causal_attention

    blocks = attention_blocks(L)
    assert blocks[0][0] == 0 and blocks[-1][1] == L and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    B, K, G, E = 2, 2, 3, 8
    kq, kk, kv, kw = jax.random.split(jax.random.PRNGKey(L), 4)
    q = jax.random.normal(kq, (B, L, K, G, E))
    k = jax.random.normal(kk, (B, L, K, E))
    v = jax.random.normal(kv, (B, L, K, E))
    w = jax.random.normal(kw, (B, L, K, G, E))
    np.testing.assert_allclose(
        jax.jit(causal_attention)(q, k, v), jax.jit(_naive_attention)(q, k, v), atol=2e-5, rtol=2e-5
    )
    g_blk = jax.jit(jax.grad(lambda *a: jnp.sum(causal_attention(*a) * w), argnums=(0, 1, 2)))(q, k, v)
    g_ref = jax.jit(jax.grad(lambda *a: jnp.sum(_naive_attention(*a) * w), argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(g_blk, g_ref):
        assert bool(jnp.all(jnp.isfinite(a)))
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=5e-5)


def test_benchmark_bare_step_is_the_same_model():
    """benchmarks/train_throughput.py's hand-written loss must equal the Flax model's, or its
    framework/bare ratio measures two different models."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput.py"
    spec = importlib.util.spec_from_file_location("train_throughput_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=160)
    g, p = init_params(cfg, 5)
    t = _tokens(cfg, b=2, seed=3)
    fw_vg = jax.jit(jax.value_and_grad(lambda p_, t_: cross_entropy_loss(g, p_, t_)))
    bare_vg = jax.jit(
        jax.value_and_grad(lambda p_, t_: bench.bare_loss(p_, t_, cfg.n_layers, cfg.n_heads, cfg.kv_heads))
    )
    fw, gf = fw_vg(p, t)
    bare, gb = bare_vg(p, t)
    np.testing.assert_allclose(float(bare), float(fw), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(gf), jax.tree.leaves(gb)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


def test_rope_is_the_rotate_half_rotation_and_depends_only_on_relative_position():
    """rope(x)[..., i] and [..., i + E/2] are the pair (x_i, x_{i+E/2}) rotated by
    pos * theta^(-2i/E) (written here with complex numbers, independently of models.transformer),
    and q.k after rope depends only on the distance between the two positions."""
    from models.transformer import rope

    B, L, N, E, theta = 2, 24, 3, 16, 10000.0
    x = np.random.default_rng(0).normal(size=(B, L, N, E)).astype(np.float32)
    z = x[..., : E // 2] + 1j * x[..., E // 2 :]
    ang = np.arange(L)[:, None] * theta ** (-np.arange(0, E, 2) / E)[None, :]
    zr = z * np.exp(1j * ang)[None, :, None, :]
    want = np.concatenate([zr.real, zr.imag], -1)
    np.testing.assert_allclose(np.asarray(rope(jnp.asarray(x), theta)), want, rtol=1e-5, atol=1e-5)

    q, k = (np.broadcast_to(v, (1, L, 1, E)).astype(np.float32) for v in x[0, :2, 0])
    dots = np.einsum(
        "blne,blne->bln",
        np.asarray(rope(jnp.asarray(q), theta))[:, 5:],
        np.asarray(rope(jnp.asarray(k), theta))[:, :-5],
    )[0, :, 0]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-4)  # same offset 5 at every position
