"""model.attention and model.dtype: every kernel JAX can run on CPU gives the same loss and
gradients (float32 tolerance, grouped-query attention); "auto" picks the kernel and compute dtype
per platform; cudnn where it cannot run is one ConfigError line; MFU's peak reads "auto" the way
the model does; and SCALELAB_CACHE places the compile cache."""

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments.train.peak_flops import peak_flops_per_device
from experiments.train.steps import cross_entropy_loss
from models.base.errors import ConfigError
from models.base.jaxcache import compile_cache_dir
from models.config import ATTENTION_KERNELS, ModelConfig
from models.transformer import (
    ATTENTION,
    Transformer,
    abstract_model,
    apply,
    causal_attention,
    fused_attention,
    split_params,
)


def abstract_params(cfg: ModelConfig):
    """(graphdef, shape-only params) without running the initialiser."""
    return split_params(abstract_model(cfg))


# GQA (4 query heads share 2 KV heads) and L = 128, i.e. two query blocks in the blocked kernel.
GQA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=128)
CPU_KERNELS = ("blocked", "xla")  # cudnn needs an NVIDIA GPU


def _loss_and_grads(cfg: ModelConfig, params, tokens):
    graphdef, _ = abstract_params(cfg)
    loss, grads = jax.jit(jax.value_and_grad(lambda p: cross_entropy_loss(graphdef, p, tokens)))(params)
    return float(loss), grads


def test_every_cpu_kernel_gives_the_same_loss_and_gradients_with_gqa():
    params = jax.jit(lambda: split_params(Transformer(GQA, rngs=nnx.Rngs(0)))[1])()  # one compile
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, GQA.vocab_size, (2, GQA.seq_len + 1)))
    ref_loss, ref_grads = _loss_and_grads(dataclasses.replace(GQA, attention="blocked"), params, tokens)
    assert 3.0 < ref_loss < 5.5  # ~ln(64) at init: a real forward pass, not a constant
    loss, grads = _loss_and_grads(dataclasses.replace(GQA, attention="xla"), params, tokens)
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6), grads, ref_grads)
    g_attn = ref_grads["block_0"]["attn"]["wk_DxKxE"]
    assert float(jnp.max(jnp.abs(g_attn))) > 1e-4  # the attention path carries gradient
    # "auto" on CPU builds the blocked model itself (same program as the reference above)
    assert abstract_model(GQA).cfg == dataclasses.replace(GQA, attention="blocked", dtype="float32")


def test_kernels_agree_on_ragged_lengths_values_and_grads():
    """L = 200: three query blocks of unequal fill in the blocked kernel vs one masked matrix."""
    B, L, K, G, E = 2, 200, 2, 3, 8
    rng = np.random.default_rng(1)
    q, w = (jnp.asarray(rng.standard_normal((B, L, K, G, E)), jnp.float32) for _ in range(2))
    k, v = (jnp.asarray(rng.standard_normal((B, L, K, E)), jnp.float32) for _ in range(2))

    def out_and_grads(kernel):
        o, pullback = jax.vjp(ATTENTION[kernel], q, k, v)
        return o, pullback(w)  # grads of sum(o * w)

    got = {n: jax.jit(out_and_grads, static_argnums=0)(n) for n in CPU_KERNELS}
    np.testing.assert_allclose(got["xla"][0], got["blocked"][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(got["xla"][1], got["blocked"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    # the first query attends to itself only: its output is v[0] of its KV head
    np.testing.assert_allclose(
        got["xla"][0][:, 0], jnp.broadcast_to(v[:, 0, :, None], (B, K, G, E)), atol=1e-6
    )


def test_every_configured_kernel_has_an_implementation():
    assert set(ATTENTION) == set(ATTENTION_KERNELS) - {"auto"}
    assert ATTENTION["blocked"] is causal_attention and ATTENTION["xla"].func is fused_attention


@pytest.mark.parametrize(
    "platform,dtype,attention,want",
    [
        ("cpu", "auto", "auto", ("float32", "blocked")),
        ("gpu", "auto", "auto", ("bfloat16", "cudnn")),
        ("gpu", "float32", "auto", ("float32", "xla")),  # cuDNN flash attention has no f32 kernel
        ("tpu", "auto", "auto", ("bfloat16", "xla")),
        ("rocm", "auto", "auto", ("bfloat16", "xla")),  # no cuDNN on AMD GPUs
        ("cpu", "bfloat16", "xla", ("bfloat16", "xla")),  # explicit choices are kept
        ("gpu", "auto", "blocked", ("bfloat16", "blocked")),
    ],
)
def test_auto_resolution_per_platform(platform, dtype, attention, want):
    r = dataclasses.replace(GQA, dtype=dtype, attention=attention).resolved(platform)
    assert (r.dtype, r.attention) == want


def test_auto_on_gpu_falls_back_to_xla_for_head_widths_cudnn_cannot_take():
    wide = dataclasses.replace(GQA, d_model=1152, n_heads=4, n_kv_heads=None)  # d_head 288 > 128
    assert wide.resolved("gpu").attention == "xla"


@pytest.mark.parametrize(
    "cfg,needle",
    [
        (
            dataclasses.replace(GQA, attention="cudnn"),
            "model.attention=cudnn needs an NVIDIA GPU (JAX backend here: cpu)",
        ),
        (dataclasses.replace(GQA, attention="flash"), "model.attention must be one of"),
        (dataclasses.replace(GQA, dtype="float16"), "model.dtype must be one of"),
    ],
)
def test_bad_kernel_choices_are_one_config_error_line(cfg, needle):
    with pytest.raises(ConfigError) as e:
        Transformer(cfg, rngs=nnx.Rngs(0))  # where the trainer builds it: on this CPU backend
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cudnn_with_float32_compute_on_a_gpu_is_refused():
    with pytest.raises(ConfigError, match="needs model.dtype=bfloat16"):
        dataclasses.replace(GQA, attention="cudnn", dtype="float32").resolved("gpu")


def test_cpu_defaults_are_the_old_float32_blocked_model():
    """dtype/attention 'auto' on CPU trace to exactly the program of explicit float32 + blocked
    (so CPU results and the goldens are unchanged)."""
    default = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, seq_len=128)
    assert (default.dtype, default.attention) == ("auto", "auto")
    old = dataclasses.replace(default, dtype="float32", attention="blocked")
    t = jnp.zeros((2, 128), jnp.int32)
    jaxprs = [
        str(jax.make_jaxpr(lambda p, g=g: apply(g, p, t))(p)) for g, p in map(abstract_params, (default, old))
    ]
    assert jaxprs[0] == jaxprs[1] and "dot_product_attention" not in jaxprs[0]


def test_mfu_peak_reads_auto_dtype_as_the_model_does():
    h100 = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H100 80GB HBM3")
    peak, src = peak_flops_per_device(h100, "auto")
    assert peak == 989.0e12 and "bfloat16" in src
    assert peak_flops_per_device(h100, "float32")[0] == 495.0e12


def test_scalelab_cache_places_the_jax_cache(tmp_path):
    assert compile_cache_dir({"SCALELAB_CACHE": str(tmp_path)}) == tmp_path / "jax"
    both = {"SCALELAB_CACHE": str(tmp_path), "SCALELAB_JAX_CACHE": str(tmp_path / "x")}
    assert compile_cache_dir(both) == tmp_path / "x"  # the specific variable wins
    assert compile_cache_dir({"SCALELAB_JAX_CACHE": "0", "SCALELAB_CACHE": str(tmp_path)}) is None
    assert compile_cache_dir({}).parts[-3:] == (".cache", "scalelab", "jax")
