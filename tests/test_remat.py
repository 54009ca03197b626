"""`model.remat = none | selective | full`: same numbers, less kept for the backward pass.

The three policies (models/transformer.py: REMAT_POLICIES) only change what the backward pass
keeps versus recomputes, so loss and gradients must agree to float32 rounding. What they keep is
measured twice: the residuals JAX saves between forward and backward (`saved_residuals`: what
the policy asks for, on any backend) must shrink strictly none > selective > full, and the
compiled step's temp memory must not grow along that order. XLA:CPU expands the optimization
barriers of `jax.checkpoint`, and CSE folds much of the recomputation back into the forward pass,
so on CPU the temp memory of `full` is about that of `selective` (GPU/TPU keep the barriers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re

import jax
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from experiments.train.steps import cross_entropy_loss
from models.base.errors import ConfigError
from models.config import REMAT, ModelConfig
from models.transformer import init_params

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=64)
BATCH = 4
_ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "u32": 4, "bool": 1, "i8": 1, "u8": 1}


def _loss_fn(remat: str):
    graphdef, params = init_params(dataclasses.replace(CFG, remat=remat), 3)
    return (lambda p, t: cross_entropy_loss(graphdef, p, t)), params


def residual_bytes(fn, *args) -> int:
    """Bytes of the residuals JAX keeps for the backward pass of `fn`, not counting the arguments
    themselves (parsed from the public `print_saved_residuals` report: one `f32[4,64] ...` line
    per residual)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(fn, *args)
    total = 0
    for line in buf.getvalue().splitlines():
        m = re.match(r"(\w+)\[([0-9,]*)\]", line)
        if m and "from the argument" not in line:
            total += math.prod(int(d) for d in m.group(2).split(",") if d) * _ITEMSIZE[m.group(1)]
    return total


def _tokens() -> jax.Array:
    return jax.random.randint(jax.random.key(0), (BATCH, CFG.seq_len + 1), 0, CFG.vocab_size)


@pytest.fixture(scope="module")
def results():
    """policy -> (loss, grads, saved residual bytes, compiled temp bytes)."""
    out = {}
    tokens = _tokens()
    for remat in REMAT:
        loss_fn, params = _loss_fn(remat)
        exe = jax.jit(jax.value_and_grad(loss_fn)).lower(params, tokens).compile()
        loss, grads = exe(params, tokens)
        out[remat] = (
            float(loss),
            grads,
            residual_bytes(lambda p: loss_fn(p, tokens), params),
            exe.memory_analysis().temp_size_in_bytes,
        )
    return out


@pytest.mark.parametrize("remat", ["selective", "full"])
def test_policies_give_the_same_loss_and_gradients(results, remat):
    loss0, grads0, *_ = results["none"]
    loss, grads, *_ = results[remat]
    assert abs(loss - loss0) <= 1e-6 * abs(loss0)
    for a, b in zip(jax.tree.leaves(grads0), jax.tree.leaves(grads)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)


def test_saved_residuals_shrink_none_selective_full(results):
    saved = [results[r][2] for r in REMAT]
    assert saved[0] > saved[1] > saved[2] > 0, dict(zip(REMAT, saved))
    # selective keeps no attention probabilities: (B, K, G, L, L) float32 per layer in `none`
    probs = BATCH * CFG.n_heads * CFG.seq_len**2 * 4
    assert saved[0] - saved[1] >= CFG.n_layers * probs, dict(zip(REMAT, saved))


def test_compiled_temp_memory_is_ordered(results):
    temp = [results[r][3] for r in REMAT]
    assert temp[0] > temp[1] >= temp[2], dict(zip(REMAT, temp))


@pytest.mark.parametrize(
    "value,policy",
    [
        (True, "full"),
        (False, "none"),
        ("true", "full"),
        ("False", "none"),
        ("selective", "selective"),
        ("none", "none"),
    ],
)
def test_booleans_are_aliases(value, policy):
    assert ModelConfig(remat=value).validate().remat == policy


def test_bad_policy_is_one_line_config_error():
    with pytest.raises(ConfigError, match=r"model.remat must be one of \('none', 'selective', 'full'\)"):
        ModelConfig(remat="some").validate()


def test_remat_override_composes_and_parses():
    """model.remat=true on the command line (Hydra types it str: 'True') is still `full`."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import experiments.train.config  # noqa: F401  (registers the schema)
    from models.base.configs import to_plain

    conf = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "conf")
    for override, policy in (
        ("model.remat=true", "full"),
        ("model.remat=selective", "selective"),
        ("model.remat=false", "none"),
    ):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=conf, version_base=None):
            raw = to_plain(compose("config", overrides=[override]))["model"]
        assert ModelConfig.from_mapping(raw).remat == policy, (override, raw["remat"])
