"""The mixture-of-experts model (`model.moe`, models/transformer.py: MoEMLP, top_k_routing): its
equalities, capacity and dropping, the auxiliary losses, counts, exact resume and bad input.

Equalities, each against an independent computation:
* `model.moe` null is the dense model of before MoE existed, bit for bit (init and three AdamW
  steps, captured at commit d791013 on the machine below; to a tolerance on another CPU, whose
  XLA code differs: README, "Why the same command gives other numbers on another machine");
* experts=1, top_k=1, dropless == the dense SwiGLU with the same weights;
* top_k = experts with a uniform router == the average of the experts;
* the einsum dispatch / combine == a per-token loop in NumPy (slots, drops, outputs, losses);
* hand-computed capacities and drops (GShard's priority: first choices before second ones).
Tolerance 1e-5 absolute for the float32 layer outputs (of size ~1): the einsum and the loop sum
in other orders.
"""

import dataclasses
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hydra import compose, initialize_config_dir
from preempt import preempted_at

from experiments.train import loop as train_loop
from experiments.train.config import resolve_config
from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import MoELossWeights, build_train_setup, moe_objective
from models.base.errors import ConfigError
from models.base.rundir import read_metrics
from models.config import ModelConfig, MoEConfig
from models.flops import (
    active_param_count,
    attention_flops_per_token,
    flops_per_token,
    matmul_param_count,
    mfu_convention,
    moe_executed_flops_per_token,
    param_count,
)
from models.transformer import MoEMLP, SwiGLU, init_params, top_k_routing
from sharding.mesh import make_mesh

REPO = Path(__file__).resolve().parents[1]
ATOL = 1e-5


def _moe_cfg(**moe) -> ModelConfig:
    return ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=16, moe=moe)


# ---- null is the dense model ---------------------------------------------------------------------

DENSE = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, seq_len=16)
# Captured at d791013 (before MoE) by the same computation as `_dense_run`, on this CPU and JAX.
BEFORE_MOE = {
    "machine": ("x86_64", "AMD EPYC", "0.10.2"),
    "init": "f8c642c6c8485315",
    "losses": ["0x1.0b25320000000p+2", "0x1.0abf360000000p+2", "0x1.0aa0320000000p+2"],
    "final": "43b024dba7f13ff5",
}


def _tree_sha(tree) -> str:
    h = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(tree))[0]
    for path, leaf in sorted(leaves, key=lambda t: jax.tree_util.keystr(t[0])):
        h.update(jax.tree_util.keystr(path).encode())
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()[:16]


def _machine() -> tuple[str, str, str]:
    model = ""
    if Path("/proc/cpuinfo").is_file():
        lines = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")]
        model = lines[0].split(":", 1)[1].strip() if lines else ""
    return platform.machine(), model, jax.__version__


def _dense_run(cfg: ModelConfig) -> dict:
    opt = OptimConfig(lr=1e-2)
    ts = build_train_setup(
        cfg, make_optimizer(opt, make_schedule(opt, 3, 0)), make_mesh((1, 1, 1)), donate=False
    )
    params, o = ts.init(0)
    out = {"init": _tree_sha(params), "losses": []}
    for i in range(3):
        b = np.asarray(jax.random.randint(jax.random.key(i), (1, 8, cfg.seq_len + 1), 0, cfg.vocab_size))
        params, o, m = ts.train_step(params, o, jax.device_put(b, ts.batch_sharding))
        assert set(m) == {"loss", "grad_norm"}  # no MoE metrics for a dense model
        out["losses"].append(float(m["loss"]).hex())
    out["final"] = _tree_sha(params)
    return out


def test_moe_null_is_the_dense_model_of_before_bit_for_bit():
    assert DENSE.moe is None and DENSE.moe_layers == ()
    got = _dense_run(DENSE)
    if _machine() == BEFORE_MOE["machine"]:
        assert got == {k: BEFORE_MOE[k] for k in ("init", "losses", "final")}
    else:  # another CPU or JAX compiles other code: the same numbers to float32 rounding
        want = [float.fromhex(v) for v in BEFORE_MOE["losses"]]
        np.testing.assert_allclose([float.fromhex(v) for v in got["losses"]], want, rtol=1e-5)
    params = jax.eval_shape(lambda: init_params(DENSE, 0)[1])  # the tree only, not a second init
    assert set(params["block_0"]["mlp"]) == {"w_gate_DxF", "w_up_DxF", "w_down_FxD"}
    assert param_count(DENSE) == active_param_count(DENSE) and mfu_convention(DENSE) == "causal_6N+6LTHd"


# ---- the routed layer's equalities ------------------------------------------------------------


def _layer(cfg: ModelConfig, seed: int = 0) -> MoEMLP:
    return MoEMLP(cfg, nnx.Rngs(seed))


def _x(cfg: ModelConfig, B: int = 3, seed: int = 1) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (B, cfg.seq_len, cfg.d_model), jnp.float32)


def _swiglu(x, wg, wu, wd):
    g = x @ wg
    return (g * jax.nn.sigmoid(g) * (x @ wu)) @ wd


def test_one_expert_top_1_dropless_is_the_dense_mlp():
    cfg = _moe_cfg(experts=1, top_k=1, capacity_factor=None)
    moe = _layer(cfg)
    dense = SwiGLU(cfg, nnx.Rngs(5))
    dense.w_gate_DxF[...] = moe.w_gate_XxDxF[...][0]
    dense.w_up_DxF[...] = moe.w_up_XxDxF[...][0]
    dense.w_down_FxD[...] = moe.w_down_XxFxD[...][0]
    x = _x(cfg)
    y, stats = moe(x)
    diff = float(jnp.max(jnp.abs(y - dense(x))))
    print(f"experts=1 top_k=1 vs dense SwiGLU: max |diff| {diff:.2e}")
    assert diff < ATOL
    assert float(stats["dropped_fraction"]) == 0.0 and float(stats["aux_loss"]) == pytest.approx(1.0)


def test_top_k_all_experts_with_a_uniform_router_is_their_average():
    cfg = _moe_cfg(experts=4, top_k=4, capacity_factor=0)  # 0: dropless
    moe = _layer(cfg)
    moe.router_DxX[...] = jnp.zeros_like(moe.router_DxX[...])  # every expert p = 1/4
    x = _x(cfg)
    y, stats = moe(x)
    w = [m[...] for m in (moe.w_gate_XxDxF, moe.w_up_XxDxF, moe.w_down_XxFxD)]
    avg = sum(_swiglu(x, w[0][e], w[1][e], w[2][e]) for e in range(4)) / 4
    diff = float(jnp.max(jnp.abs(y - avg)))
    print(f"top_k=experts, uniform router vs average of the experts: max |diff| {diff:.2e}")
    assert diff < ATOL
    assert float(stats["aux_loss"]) == pytest.approx(1.0) and float(stats["dropped_fraction"]) == 0.0
    assert float(stats["z_loss"]) == pytest.approx(math.log(4) ** 2, rel=1e-6)


def _loop_reference(x, router, wg, wu, wd, top_k, capacity, shared=None):
    """Per group and per token in NumPy (float64): softmax, top-k (lower index first among
    equals), slots in (choice, token) order, drops past the capacity; y = sum of kept choices'
    p * expert(x) (+ the shared experts); the three statistics."""
    x, router = np.asarray(x, np.float64), np.asarray(router, np.float64)
    wg, wu, wd = (np.asarray(w, np.float64) for w in (wg, wu, wd))
    G, S, D = x.shape
    X = router.shape[1]
    y = np.zeros_like(x)
    aux, z, kept_n = 0.0, 0.0, 0

    def expert(e, v):
        g = v @ wg[e]
        return (g / (1 + np.exp(-g)) * (v @ wu[e])) @ wd[e]

    for g in range(G):
        logits = x[g] @ router
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        picks = [sorted(range(X), key=lambda e: (-p[s, e], e))[:top_k] for s in range(S)]
        fill = [0] * X
        for k in range(top_k):
            for s in range(S):
                e = picks[s][k]
                if fill[e] < capacity:
                    y[g, s] += p[s, e] * expert(e, x[g, s])
                    kept_n += 1
                fill[e] += 1
        f = np.bincount([e for s in range(S) for e in picks[s]], minlength=X) / (S * top_k)
        aux += X * np.sum(f * p.mean(0)) / G
        lse = logits.max(-1) + np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))
        z += np.mean(lse**2) / G
    if shared is not None:
        y += np.asarray(shared(jnp.asarray(x, jnp.float32)), np.float64)
    return y, {"aux_loss": aux, "z_loss": z, "dropped_fraction": 1 - kept_n / (G * S * top_k)}


@pytest.mark.parametrize(
    "moe",
    [
        dict(experts=4, top_k=2, capacity_factor=0.5),  # drops
        dict(experts=4, top_k=1, capacity_factor=1.0),
        dict(experts=2, top_k=2, capacity_factor=1.25, granularity=2, shared_experts=1),  # 4 experts, top-4
        dict(experts=4, top_k=2, capacity_factor=None),  # dropless
    ],
    ids=["k2_drops", "k1", "fine_shared", "dropless"],
)
def test_einsum_dispatch_equals_a_per_token_loop(moe):
    cfg = _moe_cfg(**moe)
    layer = _layer(cfg, seed=3)
    # a router large enough that routing is uneven (the default init is near uniform)
    layer.router_DxX[...] = layer.router_DxX[...] * 40
    x = _x(cfg, B=4, seed=2)
    y, stats = layer(x)
    ref_y, ref = _loop_reference(
        x,
        layer.router_DxX[...],
        layer.w_gate_XxDxF[...],
        layer.w_up_XxDxF[...],
        layer.w_down_XxFxD[...],
        cfg.moe.routed_top_k,
        cfg.moe.capacity(cfg.seq_len),
        shared=getattr(layer, "shared", None),
    )
    diff = float(np.max(np.abs(np.asarray(y, np.float64) - ref_y)))
    print(f"{moe}: einsum vs per-token loop max |diff| {diff:.2e}, dropped {ref['dropped_fraction']:.3f}")
    assert diff < ATOL
    for k, v in ref.items():
        assert float(stats[k]) == pytest.approx(v, rel=1e-5, abs=1e-7), k
    if moe.get("capacity_factor") == 0.5:
        assert ref["dropped_fraction"] > 0.1  # the case does drop


# ---- capacity and dropping, by hand -------------------------------------------------------------


def test_capacity_formula_by_hand():
    assert MoEConfig(experts=4, top_k=2, capacity_factor=1.25).capacity(64) == 40  # ceil(1.25*64*2/4)
    assert MoEConfig(experts=4, top_k=2, capacity_factor=1.25, granularity=2).capacity(64) == 40
    assert MoEConfig(experts=8, top_k=1, capacity_factor=1.0).capacity(20) == 3  # ceil(2.5)
    assert MoEConfig(experts=4, top_k=2, capacity_factor=8.0).capacity(64) == 64  # at most S
    assert MoEConfig(experts=4, top_k=2, capacity_factor=None).capacity(64) == 64  # dropless
    assert MoEConfig(experts=64, top_k=1, capacity_factor=0.01).capacity(64) == 1  # at least 1


def test_dropping_by_hand_first_choices_before_second_ones():
    """S=4 tokens, 2 experts, both picked by every token (k=2), capacity 2 (factor 0.5).
    First choices: tokens 0, 1, 2 -> expert 0, token 3 -> expert 1. Expert 0 takes tokens 0, 1
    (token 2's first choice drops); expert 1 takes token 3's first choice, then token 0's second;
    tokens 1, 2 second choices (expert 1) and token 3's (expert 0) drop: 4 of 8 choices dropped."""
    logits = jnp.asarray([[[2.0, 0.0], [1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]])
    capacity = MoEConfig(experts=2, top_k=2, capacity_factor=0.5).capacity(4)
    assert capacity == 2
    dispatch, combine, stats = top_k_routing(logits, 2, capacity)
    want = np.zeros((1, 4, 2, 2))
    want[0, 0, 0, 0] = want[0, 1, 0, 1] = 1  # expert 0: tokens 0, 1
    want[0, 3, 1, 0] = want[0, 0, 1, 1] = 1  # expert 1: token 3 (first choice), token 0 (second)
    np.testing.assert_array_equal(np.asarray(dispatch), want)
    p = np.asarray(jax.nn.softmax(logits, -1))
    np.testing.assert_allclose(np.asarray(combine), want * p[..., None], rtol=1e-6)
    assert float(stats["dropped_fraction"]) == 0.5
    # every token picked both experts: f = (1/2, 1/2), so aux = 2 * (mean p_0 + mean p_1) / 2 = 1
    assert float(stats["aux_loss"]) == pytest.approx(1.0)

    # top-1 with capacity 2 of 4 tokens (factor 1): tokens 0 and 1 fill expert 0, token 2 drops
    dispatch, _, stats = top_k_routing(
        logits, 1, MoEConfig(experts=2, top_k=1, capacity_factor=1.0).capacity(4)
    )
    assert np.asarray(dispatch)[0].sum(axis=(1, 2)).tolist() == [1, 1, 0, 1]
    assert float(stats["dropped_fraction"]) == 0.25
    # f = (3/4, 1/4): aux = 2 * (3/4 mean p_0 + 1/4 mean p_1)
    assert float(stats["aux_loss"]) == pytest.approx(
        2 * (0.75 * p[0, :, 0].mean() + 0.25 * p[0, :, 1].mean()), rel=1e-6
    )


# ---- the auxiliary loss balances ---------------------------------------------------------------


def test_aux_loss_alone_pulls_a_skewed_router_towards_balance():
    """Token vectors with a common component and a router whose expert-0 column points along it:
    every token goes to expert 0. Adam steps on the load-balancing loss alone (router weights
    only) spread the tokens over the experts."""
    x = jax.random.normal(jax.random.key(4), (4, 16, 32)) + 0.5  # the common component: the skew
    router = (jax.random.normal(jax.random.key(9), (32, 4)) * 0.02).at[:, 0].add(0.1)

    def aux(r):
        return top_k_routing(jnp.einsum("bsd,dx->bsx", x, r), 1, 16)[2]["aux_loss"]

    def load(r):
        picks = np.asarray(jnp.argmax(jnp.einsum("bsd,dx->bsx", x, r), -1)).ravel()
        return np.bincount(picks, minlength=4) / picks.size

    tx = optax.adam(0.01)
    state, r = tx.init(router), router
    grad = jax.jit(jax.grad(aux))
    for _ in range(50):
        upd, state = tx.update(grad(r), state)
        r = optax.apply_updates(r, upd)
    (a0, l0), (a1, l1) = (float(aux(router)), load(router)), (float(aux(r)), load(r))
    print(f"aux {a0:.3f} -> {a1:.3f}; expert loads {l0.round(2).tolist()} -> {l1.round(2).tolist()}")
    assert l0.max() == 1.0 and a0 > 2.0  # all tokens on expert 0
    assert a1 < 1.2 and l1.max() < 0.5 and l1.min() > 0.05  # balanced: 1.0 and 1/4 each at best


def test_objective_adds_the_weighted_auxiliary_losses():
    cfg = _moe_cfg(experts=4, top_k=2, every=2)
    graphdef, params = init_params(cfg, 0)
    tokens = jax.random.randint(jax.random.key(0), (2, cfg.seq_len + 1), 0, cfg.vocab_size)
    obj0, m0 = moe_objective(graphdef, params, tokens, MoELossWeights(0.0, 0.0))
    obj, m = moe_objective(graphdef, params, tokens, MoELossWeights(0.5, 0.25))
    assert float(obj0) == float(m0["loss"]) and m["moe_aux_loss"].shape == (1,)  # one routed layer (1)
    want = float(m["loss"]) + 0.5 * float(m["moe_aux_loss"].sum()) + 0.25 * float(m["moe_z_loss"].sum())
    assert float(obj) == pytest.approx(want, rel=1e-6)


# ---- counts -------------------------------------------------------------------------------------

COUNT_CFGS = [
    _moe_cfg(experts=4, top_k=2),
    _moe_cfg(experts=4, top_k=1, every=2, shared_experts=2, granularity=4),
    dataclasses.replace(_moe_cfg(experts=3, top_k=3), tie_embeddings=True, n_kv_heads=2),
]


@pytest.mark.parametrize("cfg", COUNT_CFGS, ids=["e4k2", "every2_shared_fine", "tied_gqa"])
def test_total_and_active_counts(cfg):
    _, params = init_params(cfg, 0)
    assert param_count(cfg) == sum(x.size for x in jax.tree.leaves(params))
    moe, D, F = cfg.moe, cfg.d_model, cfg.ff // cfg.moe.granularity
    X, K = moe.routed_experts, moe.routed_top_k
    routed = [i for i in range(cfg.n_layers) if (i + 1) % moe.every == 0]
    assert cfg.moe_layers == tuple(routed)
    # a token uses the router, k of the X experts and the shared ones: X - k experts' weights idle
    assert param_count(cfg) - active_param_count(cfg) == len(routed) * (X - K) * 3 * D * F
    dense = dataclasses.replace(cfg, moe=None)
    # at granularity g, k*g experts of width F/g: a token uses as many MLP weights as top_k dense MLPs
    per_layer_active = D * X + (K + moe.shared_experts) * 3 * D * F
    assert matmul_param_count(cfg) == matmul_param_count(dense) + len(routed) * (
        per_layer_active - 3 * D * cfg.ff
    )
    assert flops_per_token(cfg) == 6 * matmul_param_count(cfg) + attention_flops_per_token(cfg)
    assert mfu_convention(cfg) == "causal_6N_active+6LTHd"


def test_active_flops_plus_the_dispatch_overhead_match_xla():
    """XLA's cost analysis of the MoE forward + backward counts the executed FLOPs: the active
    ones (non-causal attention, as XLA computes the full score matrix) plus the empty capacity
    slots and the dispatch / combine einsums (`moe_executed_flops_per_token`)."""
    cfg = ModelConfig(
        vocab_size=256, d_model=128, n_layers=2, n_heads=4, seq_len=64, moe={"experts": 4, "top_k": 2}
    )
    graphdef, params = init_params(cfg, 0)
    B = 4
    tokens = jnp.zeros((B, cfg.seq_len + 1), jnp.int32)
    grad = jax.jit(jax.grad(lambda p, t: moe_objective(graphdef, p, t, MoELossWeights())[0]))
    cost = grad.lower(params, tokens).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    xla = cost["flops"] / (B * cfg.seq_len)
    ours = flops_per_token(cfg, causal=False) + moe_executed_flops_per_token(cfg)
    print(f"XLA {xla:,.0f} vs counted {ours:,.0f} FLOPs/token ({xla / ours - 1:+.1%})")
    assert abs(xla / ours - 1) < 0.05, (xla, ours)


# ---- training: micro-batches, exact resume ------------------------------------------------------


def test_gradient_accumulation_equals_the_big_batch():
    """Routing groups are sequences, so 2 micro-batches of 4 rows train as one batch of 8."""
    cfg = dataclasses.replace(_moe_cfg(experts=4, top_k=2, capacity_factor=1.0), n_layers=1)
    opt = OptimConfig(lr=1e-2, eps=1e-3)
    batch = np.asarray(jax.random.randint(jax.random.key(3), (8, cfg.seq_len + 1), 0, cfg.vocab_size))
    out = []
    for n_micro in (1, 2):
        ts = build_train_setup(
            cfg, make_optimizer(opt, make_schedule(opt, 4, 0)), make_mesh((1, 1, 1)), n_micro
        )
        params, o = ts.init(0)
        b = jax.device_put(batch.reshape(n_micro, 8 // n_micro, -1), ts.batch_sharding)
        out.append(jax.device_get(ts.train_step(params, o, b)))
    (p1, _, m1), (p2, _, m2) = out
    assert float(m1["moe_dropped_fraction"].sum()) > 0  # capacity factor 1 drops some
    for k in m1:
        np.testing.assert_allclose(m1[k], m2[k], rtol=1e-5, err_msg=k)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), p1, p2)


RUN = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.seq_len=16",
    "model.moe={experts:4,top_k:2,capacity_factor:1.0,shared_experts:1}",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
    "train.steps=20",
    "train.ckpt_every=10",
    "train.eval_every=10",
]


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_moe_run_resumed_after_10_steps_equals_20_steps(tmp_path, monkeypatch):
    """Train 20 steps; train 10, stop (a preemption signal after step 10), relaunch: the same
    losses, auxiliary losses and dropped fractions, bit for bit."""
    ref = train_loop.run(_cfg(*RUN), tmp_path / "ref")
    assert ref.status == "completed" and ref.n_params_active < ref.n_params
    assert set(ref.moe_layers) == {"0"} and ref.mfu_convention == "causal_6N_active+6LTHd"
    assert ref.moe_dropped_fraction == ref.moe_layers["0"]["dropped_fraction"] > 0

    rd = tmp_path / "two"
    with preempted_at(monkeypatch, 8):  # finishing step 9 while step 10 runs: stops after step 10
        first = train_loop.run(_cfg(*RUN), rd)
    assert first.status == "preempted" and first.steps_done == 10, first.steps_done
    resumed = train_loop.run(_cfg(*RUN), rd)
    assert resumed.status == "completed" and resumed.resumed_from_step == first.steps_done
    for k in ("final_train_loss", "final_eval_loss", "moe_aux_loss", "moe_z_loss", "moe_dropped_fraction"):
        assert getattr(resumed, k) == getattr(ref, k), k
    assert resumed.moe_layers == ref.moe_layers
    ra, rb = read_metrics(tmp_path / "ref" / "metrics.jsonl"), read_metrics(rd / "metrics.jsonl")
    assert [r["step"] for r in rb] == list(range(1, 21))
    for k in (
        "loss",
        "moe_aux_loss",
        "moe/layer_0/aux_loss",
        "moe/layer_0/z_loss",
        "moe/layer_0/dropped_fraction",
    ):
        assert [r[k] for r in ra] == [r[k] for r in rb], k


# ---- bad input: one line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (["model.moe={experts:2,top_k:3}"], "model.moe.top_k=3 is larger than model.moe.experts=2"),
        (["model.moe={experts:0}"], "model.moe.experts must be a positive integer (got 0)"),
        (["model.moe={experts:4,capacity_factor:-1.0}"], "model.moe.capacity_factor must be a number >= 0"),
        (["model.moe={experts:4,every:3}"], "model.moe.every=3 is larger than model.n_layers=2"),
        (
            ["model.moe={granularity:5}"],
            "model.moe.granularity=5 does not divide the MLP width model.d_ff=384",
        ),
        (["model.moe={expert:4}"], "unknown model.moe key(s) ['expert']"),
        (["model.moe=4"], "model.moe must be a mapping such as {experts: 8, top_k: 2} or null"),
        (
            ["sharding.expert=2"],
            "sharding.expert=2 splits the experts of a mixture of experts, and the model is dense",
        ),
        (
            ["model.moe={experts:3,top_k:1}", "sharding.expert=2"],
            "sharding.expert=2 does not divide model.moe.experts*model.moe.granularity=3",
        ),
        (
            ["model.moe={experts:4}", "sharding.expert=4", "train.batch_size=6"],
            "sharding.data*sharding.fsdp*sharding.expert=4 does not divide train.micro_batch_size=6",
        ),
        (
            ["model.moe={experts:4}", "sharding.pipeline=2"],
            "model.moe does not run with sharding.pipeline > 1",
        ),
        (["model.moe={experts:4}", "sharding.context=2"], "model.moe does not run with sharding.context > 1"),
        (["optim.moe_aux_weight=-1"], "optim.moe_aux_weight must be a number >= 0.0"),
    ],
)
def test_bad_moe_config_is_one_config_error(overrides, msg):
    with pytest.raises(ConfigError) as e:
        resolve_config(_cfg(*overrides), n_devices=8)
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_cli_top_k_above_experts_is_one_error_line(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            "model.moe={experts:2,top_k:3}",
            f"hydra.run.dir={tmp_path / 'r'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout
    assert p.stderr.strip().splitlines() == [
        "error: model.moe.top_k=3 is larger than model.moe.experts=2: a token cannot be sent to more "
        "experts than there are"
    ]
    assert not json.loads((tmp_path / "r" / "summary.json").read_text()).get("traceback")
