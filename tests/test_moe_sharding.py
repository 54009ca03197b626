"""Expert parallelism (`sharding.expert`) on 8 simulated CPU devices matches one device, alone and
combined with data, fsdp and tensor parallelism; the experts' weights are split over `expert` and
the compiled step moves the routed tokens with all-to-alls (sharding/rules.py).

The model drops tokens (capacity factor 1.0) and has fine-grained (granularity 2) and shared
experts, so routing, capacity and dropping are all exercised: a routing group is one sequence,
never split by the mesh, so every layout routes every token as one device does.
Tolerances are tests/test_sharding.py's: loss rtol 1e-5; gradients rtol 1e-4 / atol 1e-6;
parameters after one AdamW step (eps=1e-3) atol 1e-6; the MoE statistics rtol 1e-5.

Every layout starts from the one-device reference's initial parameters and optimizer state,
placed on its own shardings, rather than compiling its own init (a third of a layout's
compile time): the layouts differ from the reference only in how the step runs, which is what
is compared.
"""

import math

import jax
import numpy as np
import pytest
from hlo_collectives import hlo_collective_bytes

from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.config import ModelConfig
from sharding.mesh import make_mesh
from sharding.rules import RULES, logical_to_spec

CFG = ModelConfig(
    vocab_size=64,
    d_model=32,
    n_layers=1,
    n_heads=4,
    d_ff=64,
    seq_len=16,
    moe={"experts": 4, "top_k": 2, "capacity_factor": 1.0, "shared_experts": 1, "granularity": 2},
)
B = 8
LAYOUTS = {  # ((data, fsdp, tensor), expert)
    "ep2_dp4": ((4, 1, 1), 2),
    "ep4_dp2": ((2, 1, 1), 4),
    "ep8": ((1, 1, 1), 8),
    "ep4_tp2": ((1, 1, 2), 4),
    "ep4_fsdp2": ((1, 2, 1), 4),
    "ep2_fsdp2_tp2": ((1, 2, 2), 2),
}


def _tx():
    cfg = OptimConfig(lr=1e-3, eps=1e-3)
    return make_optimizer(cfg, make_schedule(cfg, 10, 0))


def _batch():
    return np.asarray(jax.random.randint(jax.random.key(7), (1, B, CFG.seq_len + 1), 0, CFG.vocab_size))


def _run(sizes, expert, start=None):
    """One layout's objective, gradients and one train step; `start`: (params, opt_state) on the
    host to place on the layout's shardings (default: the layout's own init)."""
    ts = build_train_setup(CFG, _tx(), make_mesh(sizes, expert=expert), n_micro=1, donate=False)
    if start is None:
        params, opt = ts.init(0)
    else:
        params = jax.device_put(start[0], ts.param_shardings)
        opt = jax.device_put(start[1], ts.opt_shardings)
    vg = jax.jit(
        jax.value_and_grad(ts.objective_fn, has_aux=True),
        in_shardings=(ts.param_shardings, ts.eval_batch_sharding),
        out_shardings=(None, ts.param_shardings),
    )
    (obj, metrics), grads = vg(params, jax.device_put(_batch()[0], ts.eval_batch_sharding))
    batch = jax.device_put(_batch(), ts.batch_sharding)
    step = ts.train_step.lower(params, opt, batch).compile()
    new_params, _, m = step(params, opt, batch)
    return ts, (params, opt), obj, metrics, grads, new_params, m, step.as_text()


@pytest.fixture(scope="module")
def reference():
    _, start, obj, metrics, grads, new_params, m, _ = _run((1, 1, 1), 1)
    return jax.device_get((start, obj, metrics, grads, new_params, m))


def _max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_expert_parallel_layout_matches_one_device(layout, reference):
    sizes, expert = LAYOUTS[layout]
    r_start, r_obj, r_metrics, r_grads, r_new, r_m = reference
    ts, _, obj, metrics, grads, new_params, m, hlo = _run(sizes, expert, start=r_start)
    assert float(np.sum(r_metrics["moe_dropped_fraction"])) > 0  # the reference drops tokens
    np.testing.assert_allclose(float(obj), float(r_obj), rtol=1e-5)
    np.testing.assert_allclose(float(m["loss"]), float(r_m["loss"]), rtol=1e-5)
    for k in ("moe_aux_loss", "moe_z_loss", "moe_dropped_fraction"):
        np.testing.assert_allclose(np.asarray(m[k]), np.asarray(r_m[k]), rtol=1e-5, err_msg=k)
    check = lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    jax.tree.map(check, jax.device_get(grads), r_grads)
    new = jax.device_get(new_params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6), new, r_new)
    print(
        f"{layout}: |loss - 1 device| {abs(float(m['loss']) - float(r_m['loss'])):.1e}, "
        f"max |grad diff| {_max_diff(jax.device_get(grads), r_grads):.1e}, "
        f"max |param diff| after a step {_max_diff(new, r_new):.1e}"
    )

    # The arrays are sharded as the rule table says: the routed experts split over `expert`.
    shape = dict(zip(("data", "fsdp", "tensor"), sizes), expert=expert)
    axes_leaves = jax.tree.leaves(ts.axes, is_leaf=lambda x: isinstance(x, tuple))
    for arr, names in zip(jax.tree.leaves(new_params), axes_leaves):
        assert arr.sharding.spec == logical_to_spec(names)
        expect = tuple(d // _n(shape, RULES[n] if n else None) for d, n in zip(arr.shape, names))
        assert arr.addressable_shards[0].data.shape == expect, (names, arr.shape)
    w = new_params["block_0"]["mlp"]["w_gate_XxDxF"]
    assert w.addressable_shards[0].data.shape[0] == CFG.moe.routed_experts // expert
    # ... and the routed tokens travel by all-to-all (XLA's choice under the constraints).
    assert hlo_collective_bytes(hlo)["all_to_all"] > 0


def _n(shape, rule):
    if rule is None:
        return 1
    return math.prod(shape[a] for a in ((rule,) if isinstance(rule, str) else rule))
