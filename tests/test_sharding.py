"""Layouts on 8 simulated CPU devices match one device, arrays are really sharded as the rules
say, and impossible meshes fail before compiling with a message naming the dimension.

Tolerance: loss rtol 1e-5; gradients rtol 1e-4 / atol 1e-6 (sharded reductions sum in a
different order in float32); parameters after one AdamW step atol 1e-6, with eps=1e-3 because Adam's first
update g/(|g|+eps) would otherwise amplify rounding differences in near-zero gradients.
"""

import math

import jax
import numpy as np
import pytest

from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from models.base.errors import ConfigError
from models.config import ModelConfig
from sharding import distributed
from sharding.layouts import LAYOUTS, resolve_axis_sizes
from sharding.mesh import make_mesh
from sharding.rules import RULES, logical_to_spec
from sharding.validate import validate_mesh

CFG = ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=8, d_ff=128, seq_len=16)
B = 8
LAYOUT_SIZES = {
    "dp": (8, 1, 1),
    "fsdp": (1, 8, 1),
    "tp": (1, 1, 8),
    "dp_tp": (4, 1, 2),
    "fsdp_tp": (1, 4, 2),
}


def _tx():
    cfg = OptimConfig(lr=1e-3, eps=1e-3)
    return make_optimizer(cfg, make_schedule(cfg, 10, 0))


def _batch():
    return np.asarray(jax.random.randint(jax.random.key(7), (1, B, CFG.seq_len + 1), 0, CFG.vocab_size))


def _run(sizes):
    mesh = make_mesh(sizes)
    ts = build_train_setup(CFG, _tx(), mesh, n_micro=1, donate=False)
    params, opt = ts.init(0)
    batch = jax.device_put(_batch(), ts.batch_sharding)
    vg = jax.jit(
        jax.value_and_grad(ts.loss_fn),
        in_shardings=(ts.param_shardings, ts.eval_batch_sharding),
        out_shardings=(None, ts.param_shardings),
    )
    loss, grads = vg(params, jax.device_put(_batch()[0], ts.eval_batch_sharding))
    new_params, new_opt, m = ts.train_step(params, opt, batch)
    return ts, params, loss, grads, new_params, new_opt, m


@pytest.fixture(scope="module")
def reference():
    _, _, loss, grads, new_params, _, m = _run((1, 1, 1))
    return jax.device_get((loss, grads, new_params, m))


@pytest.mark.parametrize("layout", sorted(LAYOUT_SIZES))
def test_layout_matches_single_device(layout, reference):
    sizes = LAYOUT_SIZES[layout]
    ts, params, loss, grads, new_params, new_opt, m = _run(sizes)
    r_loss, r_grads, r_new, r_m = reference
    np.testing.assert_allclose(float(loss), float(r_loss), rtol=1e-5)
    np.testing.assert_allclose(float(m["loss"]), float(r_m["loss"]), rtol=1e-5)
    check = lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    jax.tree.map(check, jax.device_get(grads), r_grads)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6),
        jax.device_get(new_params),
        r_new,
    )

    # The arrays themselves are sharded as the rule table says, on the mesh.
    shape = dict(zip(("data", "fsdp", "tensor"), sizes))
    axes_leaves = jax.tree.leaves(ts.axes, is_leaf=lambda x: isinstance(x, tuple))
    for arr, names in zip(jax.tree.leaves(new_params), axes_leaves):
        assert arr.sharding.spec == logical_to_spec(names)
        expect = tuple(d // _n(shape, RULES[n]) for d, n in zip(arr.shape, names))
        assert arr.addressable_shards[0].data.shape == expect, (names, arr.shape)
        assert len(arr.sharding.device_set) == math.prod(sizes)
    # Adam moments follow their parameters (ZeRO-3 in the fsdp layouts).
    mu = new_opt[1][0].mu
    for p_arr, mu_arr in zip(jax.tree.leaves(new_params), jax.tree.leaves(mu)):
        assert mu_arr.sharding.spec == p_arr.sharding.spec
    if shape["fsdp"] > 1:
        wq = new_params["block_0"]["attn"]["wq_DxHxE"]
        assert wq.addressable_shards[0].data.shape[0] == CFG.d_model // shape["fsdp"]
    if shape["tensor"] > 1:
        w = new_params["block_0"]["mlp"]["w_down_FxD"]
        assert w.addressable_shards[0].data.shape[0] == CFG.ff // shape["tensor"]


def _n(shape, rule):
    if rule is None:
        return 1
    return math.prod(shape[a] for a in ((rule,) if isinstance(rule, str) else rule))


def test_named_layouts_resolve_on_8_devices():
    assert LAYOUTS == {
        "single": (1, 1, 1),
        "dp": (-1, 1, 1),
        "fsdp": (1, -1, 1),
        "tp": (1, 1, -1),
        "dp_tp": (-1, 1, 2),
        "fsdp_tp": (1, -1, 2),
    }  # conf/sharding/*.yaml
    assert resolve_axis_sizes(LAYOUTS["dp"], 8) == (8, 1, 1)
    assert resolve_axis_sizes(LAYOUTS["fsdp_tp"], 8) == (1, 4, 2)
    assert resolve_axis_sizes((2, -1, 2), 8) == (2, 2, 2)


@pytest.mark.parametrize(
    "sizes,msg",
    [
        ((1, 1, 3), "sharding.tensor=3 does not divide model.n_heads=8"),
        ((1, 3, 1), "sharding.fsdp=3 does not divide model.d_model=64"),
        ((3, 1, 1), "sharding.data*sharding.fsdp=3 does not divide train.micro_batch_size=8"),
    ],
)
def test_impossible_mesh_names_the_dimension(sizes, msg):
    with pytest.raises(ConfigError, match=msg.replace("*", r"\*")):
        validate_mesh(CFG, *sizes, micro_batch_size=B)


def test_kv_heads_must_split_over_tensor():
    cfg = ModelConfig(vocab_size=64, d_model=64, n_heads=8, n_kv_heads=2, d_ff=128, seq_len=16)
    with pytest.raises(ConfigError, match="sharding.tensor=4 does not divide model.n_kv_heads=2"):
        validate_mesh(cfg, 1, 1, 4, micro_batch_size=8)


@pytest.mark.parametrize(
    "sizes,n,msg",
    [
        ((-1, -1, 1), 8, "only one of"),
        ((3, -1, 1), 8, "does not divide the 8 available devices"),
        ((4, 4, 1), 8, "needs 16 devices but only 8"),
        ((0, 1, 1), 8, "sharding.data must be a positive integer or -1"),
    ],
)
def test_mesh_size_errors(sizes, n, msg):
    with pytest.raises(ConfigError, match=msg):
        resolve_axis_sizes(sizes, n)


def test_distributed_resolution_from_config_env_and_slurm():
    assert distributed.resolve({}, env={}) is None
    assert (
        distributed.resolve({"coordinator_address": "h:1", "num_processes": 1, "process_id": 0}, env={})
        is None
    )
    a = distributed.resolve(
        {"coordinator_address": "10.0.0.1:1234", "num_processes": 4, "process_id": 3}, env={}
    )
    assert a["num_processes"] == 4 and a["process_id"] == 3 and a["source"] == "config"
    e = distributed.resolve(
        {}, env={"SCALELAB_COORDINATOR": "h0:99", "SCALELAB_NUM_PROCESSES": "2", "SCALELAB_PROCESS_ID": "1"}
    )
    assert e["coordinator_address"] == "h0:99" and e["process_id"] == 1 and e["source"] == "env"
    s = distributed.resolve(
        {}, env={"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_STEP_NODELIST": "gpu[003-004,9],cpu1"}
    )
    assert s["coordinator_address"] == "gpu003:12355" and s["num_processes"] == 8 and s["process_id"] == 5
    with pytest.raises(ConfigError, match="process_id"):
        distributed.resolve({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2}, env={})
    with pytest.raises(ConfigError, match="host:port"):
        distributed.resolve({"coordinator_address": "nohost", "num_processes": 2, "process_id": 0}, env={})
