"""µP (`model.parametrization=mup`): the coordinate check of Yang et al. (Tensor Programs V).

Train the same 2-layer model at widths 16 and 256 (heads of width 8) for 5 Adam steps at one
learning rate, and measure how far the activations moved from their initial values: the last
residual stream and the logits. Under µP (width multiplier = d_model / 16) the movement stays
O(1) as the width grows 16x; under standard parametrisation it grows with the width (measured:
x6 for both), which is why one learning rate cannot serve a ladder of widths. (The checks compare
the two ends of the ladder; a middle width, 64, only cost a third more.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from experiments.train.config import OptimConfig
from experiments.train.optimizer import make_optimizer, make_schedule
from models.base.errors import ConfigError
from models.config import ModelConfig
from models.transformer import Transformer, apply, split_params

WIDTHS = (16, 256)


def _movement(parametrization: str, d: int, steps: int = 5, lr: float = 1e-2) -> tuple[float, float]:
    """(mean |Δ last residual stream|, mean |Δ logits|) after `steps` Adam steps."""
    cfg = ModelConfig(
        vocab_size=256,
        d_model=d,
        n_layers=2,
        n_heads=d // 8,
        seq_len=32,
        dtype="float32",
        attention="blocked",
        parametrization=parametrization,
        mup_base_d_model=16 if parametrization == "mup" else None,
    )
    graphdef, params = split_params(Transformer(cfg, rngs=nnx.Rngs(0)))
    oc = OptimConfig(lr=lr, schedule="constant", warmup_tokens=0.0, weight_decay=0.0)
    tx = make_optimizer(oc, make_schedule(oc, steps, 0), cfg)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (16, 33)))

    def loss(p):
        logits = apply(graphdef, p, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def activations(p):
        model = nnx.merge(graphdef, jax.tree.map(lambda a: nnx.Param(a), p))
        x = model.embed(tokens[:, :-1])
        for block in model.blocks():
            x = block(x)
        return x, model.logits(x)

    def step(_, state):
        p, o = state
        updates, o = tx.update(jax.grad(loss)(p), o, p)
        return optax.apply_updates(p, updates), o

    @jax.jit
    def moved(p):
        """The activations before and after the steps, one compiled program (activations run
        eagerly op by op, and a step compiled apart, took twice as long)."""
        x0, l0 = activations(p)
        p, _ = jax.lax.fori_loop(0, steps, step, (p, tx.init(p)))
        x1, l1 = activations(p)
        return jnp.mean(jnp.abs(x1 - x0)), jnp.mean(jnp.abs(l1 - l0))

    residual, logits = moved(params)
    return float(residual), float(logits)


@pytest.fixture(scope="module")
def movement():
    return {(p, d): _movement(p, d) for p in ("sp", "mup") for d in WIDTHS}


def test_mup_activations_stay_order_one_as_width_grows(movement):
    for i, name in enumerate(("residual", "logits")):
        mup = [movement[("mup", d)][i] for d in WIDTHS]
        assert 0.4 <= mup[-1] / mup[0] <= 2.0, (name, mup)  # 16x the width, O(1) movement


def test_standard_parametrisation_fails_the_same_check(movement):
    """The check can fail: SP's movement grows with width (so µP's flatness is not an accident)."""
    for i, name in enumerate(("residual", "logits")):
        sp = [movement[("sp", d)][i] for d in WIDTHS]
        assert sp[-1] / sp[0] >= 3.0, (name, sp)


def test_base_width_is_standard_parametrisation(movement):
    """At the base width the width multiplier is 1: µP and SP are the same model and optimizer."""
    assert movement[("mup", 16)] == pytest.approx(movement[("sp", 16)], rel=1e-6)


def test_mup_scales_only_hidden_matrices():
    cfg = ModelConfig(
        vocab_size=64,
        d_model=64,
        n_layers=1,
        n_heads=8,
        seq_len=16,
        parametrization="mup",
        mup_base_d_model=16,
    )
    assert cfg.width_mult == 4.0
    _, params = split_params(Transformer(cfg, rngs=nnx.Rngs(0)))
    oc = OptimConfig(lr=1e-2, schedule="constant", warmup_tokens=0.0, weight_decay=0.0, clip=0.0)
    sgd_like = jax.tree.map(jnp.ones_like, params)
    plain = make_optimizer(oc, make_schedule(oc, 1, 0))
    mup = make_optimizer(oc, make_schedule(oc, 1, 0), cfg)
    u_plain, _ = plain.update(sgd_like, plain.init(params), params)
    u_mup, _ = mup.update(sgd_like, mup.init(params), params)
    ratio = jax.tree.map(lambda a, b: float(jnp.mean(a / b)), u_mup, u_plain)
    assert ratio["block_0"]["attn"]["wq_DxHxE"] == pytest.approx(0.25)
    assert ratio["block_0"]["mlp"]["w_down_FxD"] == pytest.approx(0.25)
    assert ratio["embed_VxD"] == ratio["head_DxV"] == ratio["final_norm"]["scale"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"parametrization": "ntk"}, "model.parametrization must be one of"),
        ({"mup_base_d_model": 16}, "needs model.parametrization=mup"),
        ({"parametrization": "mup", "mup_base_d_model": 0}, "positive integer"),
    ],
)
def test_bad_mup_settings_are_one_line(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        ModelConfig(**kw).validate()
