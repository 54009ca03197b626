"""RL building blocks: tasks and rewards, advantages, losses, aggregation, KL, decoding, FLOPs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.rl.algo import (
    AlgoConfig,
    advantages,
    aggregate,
    kl_per_token,
    nonzero_variance,
    policy_loss,
    token_losses,
)
from experiments.rl.flops import eval_flops, rl_step_flops
from experiments.rl.policy import completion_logits, sample, token_logp
from experiments.rl.tasks import EOS, TASKS, Task, TaskConfig, completion_mask, rewards
from models.base.errors import ConfigError
from models.config import ModelConfig
from models.transformer import init_params


def _toks(s: str) -> np.ndarray:
    return np.frombuffer(s.encode(), np.uint8).astype(np.int32)


@pytest.mark.parametrize("name", TASKS)
def test_tasks_fixed_length_seeded_and_correct(name):
    t = Task(TaskConfig(name=name, min_len=1, max_len=3, eval_size=64))
    a, b = t.eval_set(), Task(TaskConfig(name=name, min_len=1, max_len=3, eval_size=64)).eval_set()
    np.testing.assert_array_equal(a.prompts, b.prompts)  # fixed held-out set
    assert a.prompts.shape == (64, t.prompt_len) and a.answers.shape == (64, t.completion_len)
    assert (a.answers[:, -1] == EOS).all()
    assert set(np.unique(a.difficulty)) <= set(range(len(t.difficulty_names)))
    assert len(np.unique(a.difficulty)) > 1  # difficulty varies
    tr = t.train_batch(0, 5, 16)
    np.testing.assert_array_equal(tr.prompts, t.train_batch(0, 5, 16).prompts)
    assert not np.array_equal(tr.prompts, t.train_batch(0, 6, 16).prompts)
    np.testing.assert_array_equal(rewards(a.answers, a.answers), 1.0)


def test_add_answer_is_reversed_sum():
    t = Task(TaskConfig(name="add", min_len=1, max_len=3, eval_size=200))
    e = t.eval_set()
    for p, ans in zip(e.prompts[:50], e.answers[:50]):
        x, y = t.decode(p)[:-1].split("+")
        assert t.decode(ans) == str(int(x) + int(y)).zfill(4)[::-1] + "\n"


def test_reward_exact_match_with_eos():
    ans = _toks("021\n")[None]
    for comp, r in (("021\n", 1.0), ("02\n\n", 0.0), ("0211", 0.0), ("121\n", 0.0)):
        assert float(rewards(_toks(comp)[None], ans)[0]) == r, comp
    np.testing.assert_array_equal(completion_mask(_toks("0\nab")[None])[0], [1, 1, 0, 0])


def test_advantages_and_zero_variance():
    r = jnp.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    g = advantages(r, "group")
    np.testing.assert_allclose(g[0], [1, -1, -1, 1], atol=1e-4)
    np.testing.assert_allclose(g[1], 0.0)
    np.testing.assert_allclose(advantages(r, "none")[2], [0.25, 0.25, 0.25, -0.75])
    np.testing.assert_allclose(
        advantages(r, "batch")[2], np.array([0.25, 0.25, 0.25, -0.75]) / np.std(r), rtol=1e-4
    )
    np.testing.assert_array_equal(nonzero_variance(r), [1, 0, 1])


def test_aggregations_differ_as_defined():
    # P=2 prompts x G=2 rows, T=3 tokens; row lengths 3,1,2,3 (mask), all rows kept
    x = jnp.array([[1.0, 1, 1], [4, 0, 0], [2, 2, 0], [0, 0, 0]])
    m = jnp.array([[1.0, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    keep = jnp.ones(4)
    assert float(aggregate(x, m, keep, 2, "token")) == pytest.approx((3 + 4 + 4) / 9)
    assert float(aggregate(x, m, keep, 2, "sample")) == pytest.approx((1 + 4 + 2 + 0) / 4)
    assert float(aggregate(x, m, keep, 2, "prompt")) == pytest.approx((7 / 4 + 4 / 5) / 2)
    keep2 = jnp.array([1.0, 1, 0, 0])  # second prompt filtered out entirely
    assert float(aggregate(x, m, keep2, 2, "prompt")) == pytest.approx(7 / 4)
    assert float(aggregate(x, m, keep2, 2, "token")) == pytest.approx(7 / 4)


def test_ppo_clip_vs_cispo_gradients():
    old = jnp.zeros((1, 1))
    adv = jnp.array([1.0])
    lp = jnp.log(jnp.array([[1.5]]))  # ratio 1.5 > 1 + eps_high
    ppo = AlgoConfig(loss="ppo_clip", eps_low=0.2, eps_high=0.28)
    cis = AlgoConfig(loss="cispo", eps_low=1.0, eps_high=0.28)
    g_ppo = jax.grad(lambda l: token_losses(l, old, adv, ppo)[0].sum())(lp)
    g_cis = jax.grad(lambda l: token_losses(l, old, adv, cis)[0].sum())(lp)
    assert float(g_ppo[0, 0]) == 0.0  # clipped: no gradient
    assert float(g_cis[0, 0]) == pytest.approx(-1.28)  # -clip(w) * A, never dropped
    assert float(token_losses(lp, old, adv, ppo)[1][0, 0]) == 1.0
    lp_in = jnp.log(jnp.array([[1.1]]))
    assert float(token_losses(lp_in, old, adv, ppo)[1][0, 0]) == 0.0
    # negative advantage: the lower clip bites at ratio < 1 - eps_low
    assert float(token_losses(jnp.log(jnp.array([[0.5]])), old, -adv, ppo)[1][0, 0]) == 1.0


def test_kl_estimators_and_penalty():
    lp, ref = jnp.array([[-1.0, -2.0]]), jnp.array([[-1.5, -1.0]])
    np.testing.assert_allclose(kl_per_token(lp, ref, "k1"), [[0.5, -1.0]])
    k3 = kl_per_token(lp, ref, "k3")
    assert bool((k3 >= 0).all())
    r = jnp.array([[1.0, 0.0]])
    mask = jnp.ones((2, 2))
    lp2 = jnp.zeros((2, 2))
    base, _ = policy_loss(lp2, lp2, None, r, mask, AlgoConfig(kl_beta=0.0))
    with_kl, aux = policy_loss(lp2, lp2, lp2 - 1.0, r, mask, AlgoConfig(kl_beta=0.5))
    assert float(with_kl) > float(base) and float(aux["kl_train"]) > 0


def test_bad_algo_config_names_key():
    with pytest.raises(ConfigError, match="rl.algo.loss"):
        AlgoConfig.from_mapping({"loss": "reinforce"})
    with pytest.raises(ConfigError, match="unknown rl.algo"):
        AlgoConfig.from_mapping({"lossy": 1})


def test_decoding_logprobs_match_scoring_pass():
    """Static-shape decoding (K re-runs of the window) scores tokens exactly like one forward
    pass over the finished sequence, at the same temperature."""
    cfg = ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2, d_ff=64, seq_len=8)
    graphdef, params = init_params(cfg, 0)
    prompts = jnp.array(np.random.default_rng(0).integers(48, 58, (6, 5)), jnp.int32)
    comp, lp = sample(graphdef, params, prompts, jax.random.PRNGKey(1), 4, 0.7)
    seq = jnp.concatenate([prompts, comp], axis=1)
    lp2 = token_logp(completion_logits(graphdef, params, seq, 5, 0.7), comp)
    np.testing.assert_allclose(lp, lp2, atol=2e-5)


def test_flop_accounting_matches_hand_count():
    # d=64, 2 layers, 4 heads (d_head 16), d_ff 192, vocab 256, untied head.
    # N_matmul = 2 * (4*64*64 + 3*64*192) + 64*256 = 2 * (16384 + 36864) + 16384 = 122880
    # forward / token (window T=12) = 2*122880 + 2*2*12*4*16 = 245760 + 3072 = 248832
    cfg = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, d_ff=192, seq_len=99)
    fwd = 248832
    f = rl_step_flops(cfg, window=12, completion_len=5, prompts=32, group_size=8, epochs=1, kl_beta=0.0)
    rows = 32 * 8
    assert f.sample == rows * 5 * 12 * fwd
    assert f.train == rows * 12 * 3 * fwd
    assert f.reference == 0 and f.old_policy == 0
    f2 = rl_step_flops(cfg, 12, 5, 32, 8, epochs=2, kl_beta=0.1)
    assert f2.train == 2 * rows * 12 * 3 * fwd
    assert f2.reference == rows * 12 * fwd and f2.old_policy == rows * 12 * fwd
    assert f2.total == f2.sample + f2.train + f2.reference + f2.old_policy
    assert eval_flops(cfg, 12, 5, 512, 4) == 512 * 4 * (5 + 1) * 12 * fwd


def test_rl_step_sharded_matches_single_device():
    """One RL step on an 8-device (data=2, fsdp=2, tensor=2) mesh equals the 1-device step."""
    import optax

    from experiments.rl.step import TaskShape, build_rl_setup
    from sharding.mesh import make_mesh

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 (simulated) devices")
    cfg = ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2, d_ff=64, seq_len=8)
    task = Task(TaskConfig(name="add", min_len=1, max_len=2, eval_size=16))
    algo = AlgoConfig(kl_beta=0.1, epochs=2)
    b = task.train_batch(0, 0, 8)
    _, p0 = init_params(cfg, 0)
    out = []
    for sizes in ((1, 1, 1), (2, 2, 2)):
        tx = optax.adam(1e-2)
        setup = build_rl_setup(
            cfg,
            tx,
            make_mesh(sizes),
            TaskShape(task.prompt_len, task.completion_len),
            algo,
            group_size=4,
            temperature=1.0,
        )
        params = setup.place(jax.tree.map(jnp.array, p0))
        ref = setup.place(jax.tree.map(jnp.array, p0))
        new, _, m = setup.rl_step(
            params, setup.init_opt(params), ref, b.prompts, b.answers, jax.random.PRNGKey(3)
        )
        out.append((jax.device_get(new), {k: float(v) for k, v in m.items()}))
    (pa, ma), (pb, mb) = out
    assert ma["train_reward"] == mb["train_reward"]
    for k in ma:
        assert ma[k] == pytest.approx(mb[k], rel=1e-4, abs=1e-5), k
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5), pa, pb)
