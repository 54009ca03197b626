"""Downstream tasks in the trainer (`eval.tasks`): the scorer's numbers against hand computations
and a model built to know the answers, greedy exact match against an explicit decoding loop,
held-out and deterministic examples, metrics.jsonl / summary.json / resume, the runs table, and
config errors."""

import json
import math
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import yaml
from flax import nnx
from hydra import compose, initialize_config_dir
from jax.sharding import NamedSharding, PartitionSpec

from analysis.cli import main as analysis_main
from analysis.core import runs
from experiments.train.config import resolve_config
from experiments.train.corpus import DataConfig, load_corpus
from experiments.train.loop import run
from experiments.train.tasks import EvalConfig, task_names
from experiments.train.tasks.base import BuildContext, TaskSet, assemble_rows, get_task
from experiments.train.tasks.probes import PROBE_LENGTHS
from experiments.train.tasks.scoring import TaskSuite, build_task_sets, row_scores, task_result
from models.base.errors import ConfigError
from models.base.rundir import read_metrics
from models.config import ModelConfig
from models.transformer import abstract_model, apply, init_params, logical_axes
from sharding.mesh import make_mesh
from sharding.rules import BATCH_AXES, param_shardings

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=256",
    "train.progress_every_s=0",
]
SHIPPED = ["py_continuation", "py_identifier", "rl_add", "rl_copy", "rl_parity", "rl_reverse", "rl_sort"]


def cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="module")
def val():
    return load_corpus(DataConfig()).val


# ---- the numbers ----------------------------------------------------------------------------


def test_row_scores_match_a_hand_computation():
    # One row [0, 1, 0] over vocab 2; the mask scores only the last token (0, predicted at t=1).
    logits = jnp.array([[[0.0, math.log(3.0)], [math.log(3.0), 0.0]]])  # p(1)=3/4 then p(0)=3/4
    tokens, mask = jnp.array([[0, 1, 0]]), jnp.array([[0.0, 1.0]])
    logp, exact = row_scores(logits, tokens, mask)
    assert float(logp[0]) == pytest.approx(math.log(0.75), rel=1e-6) and bool(exact[0])
    logp, exact = row_scores(logits, jnp.array([[0, 1, 1]]), mask)  # answer 1: p = 1/4, not argmax
    assert float(logp[0]) == pytest.approx(math.log(0.25), rel=1e-6) and not bool(exact[0])


def test_task_result_bits_per_byte_and_per_byte_choice():
    tokens, mask = assemble_rows([b"ab"] * 4, [b"x", b"yyyy", b"zz", b"w"], seq_len=7)
    ts = TaskSet("t", "choice", tokens, mask, 4, np.array([1]), 0.25)
    # Totals favour candidate 0 (-1 nat), per byte candidate 1 (-2 nats / 4 bytes = -0.5).
    logp = np.array([-1.0, -2.0, -3.0, -4.0])
    r = task_result(ts, logp, np.zeros(4, bool))
    assert r.accuracy == 1.0 and r.chance == 0.25
    assert r.loss == pytest.approx(2.0 / (4 * math.log(2)))  # bits per byte of the true row
    assert (
        task_result(TaskSet("t", "choice", tokens, mask, 4, np.array([0]), 0.25), logp, None).accuracy == 0.0
    )
    ex = TaskSet("e", "exact", tokens[:2], mask[:2], 1, np.array([0, 0]), 0.0)
    r = task_result(ex, np.array([-math.log(2), -8 * math.log(2)]), np.array([True, False]))
    assert r.accuracy == 0.5 and r.loss == pytest.approx((1.0 / 1 + 8.0 / 4) / 2)


def numpy_params(mc: ModelConfig, seed: int, std: float = 0.5):
    """(graphdef, random params) built with NumPy from the model's shapes: an eager init runs
    one small XLA computation per op and costs seconds on a busy CPU."""
    graphdef = nnx.split(abstract_model(mc), nnx.Param)[0]
    shapes = jax.eval_shape(lambda: init_params(mc, 0)[1])
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map_with_path(
        lambda path, s: (
            np.ones(s.shape, np.float32)
            if "norm" in jax.tree_util.keystr(path)
            else rng.normal(0.0, std, s.shape).astype(np.float32)
        ),
        shapes,
    )
    return graphdef, params


def bigram_params(mc: ModelConfig, params, successor: dict[int, int], scale: float = 10.0):
    """`params` changed into a model whose next token is successor[current token] with p ~ 1:
    blocks that add nothing to the residual, orthogonal embeddings for the tokens used, and a
    head that maps each token's embedding to its successor's logit."""
    for i in range(mc.n_layers):
        params[f"block_{i}"]["attn"]["wo_HxExD"][:] = 0.0
        params[f"block_{i}"]["mlp"]["w_down_FxD"][:] = 0.0
    params["embed_VxD"][:] = 0.0
    params["head_DxV"][:] = 0.0
    for d, tok in enumerate(sorted(successor)):
        params["embed_VxD"][tok, d] = 1.0
        params["head_DxV"][d, successor[tok]] = scale
    return params


def _chain_task(seq_len: int) -> list[TaskSet]:
    """Rows over bytes 'a'..'h' where the answer continues the cycle a->b->...->h->a."""
    letters = b"abcdefgh"
    nxt = lambda s, n: bytes(letters[(letters.index(s[-1]) + k) % 8] for k in range(1, n + 1))
    ctxs = [b"abc", b"efgh", b"ha"]
    exact = TaskSet(
        "exact",
        "exact",
        *assemble_rows(ctxs, [nxt(c, 3) for c in ctxs], seq_len),
        1,
        np.zeros(3, np.int64),
        0.0,
    )
    contexts, answers = [], []
    for c in ctxs:  # true candidate at index 2, the others break the cycle
        good = nxt(c, 2)
        contexts += [c] * 4
        answers += [good[::-1], b"hh", good, b"aaa"]
    choice = TaskSet("choice", "choice", *assemble_rows(contexts, answers, seq_len), 4, np.full(3, 2), 0.25)
    return [exact, choice]


def test_a_model_that_knows_the_answers_scores_accuracy_1_and_zero_loss():
    mc = ModelConfig(d_model=32, n_layers=1, n_heads=4, seq_len=16)
    letters = b"abcdefgh"
    graphdef, params = numpy_params(mc, 0)
    params = bigram_params(mc, params, {letters[i]: letters[(i + 1) % 8] for i in range(8)})
    mesh = make_mesh((1, 1, 1))
    p_sh = param_shardings(mesh, logical_axes(abstract_model(mc)))
    # The same model on answers that break the cycle: nothing right, and many bits per byte.
    wrong = TaskSet(
        "wrong", "exact", *assemble_rows([b"abc"], [b"ddd"], mc.seq_len), 1, np.zeros(1, np.int64), 0.0
    )
    suite = TaskSuite(
        _chain_task(mc.seq_len) + [wrong],
        graphdef,
        p_sh,
        NamedSharding(mesh, PartitionSpec(BATCH_AXES, None)),
        1,
    )
    res = suite.evaluate(jax.device_put(params, p_sh))
    for name in ("exact", "choice"):
        assert res[name].accuracy == 1.0 and res[name].loss < 1e-6, (name, res[name])
    assert res["wrong"].accuracy == 0.0 and res["wrong"].loss > 50


def test_exact_match_equals_greedy_decoding(val):
    """The teacher-forced argmax check agrees with an explicit greedy decoding loop."""
    mc = ModelConfig(d_model=32, n_layers=1, n_heads=4, seq_len=32)
    graphdef, params = numpy_params(mc, 3)
    forward = jax.jit(lambda t: apply(graphdef, params, t))
    contexts = [bytes(val[o : o + 20]) for o in (1000, 5000, 9000, 13000)]
    rows = np.zeros((8, mc.seq_len), np.int32)  # 4 contexts twice: one shape, one compile
    rows[:, :20] = [list(c) for c in contexts * 2]
    for t in range(20, 26):  # decode 6 bytes greedily, one forward pass per byte
        rows[:, t] = np.argmax(np.asarray(forward(rows))[:, t - 1], axis=-1)
    greedy = [bytes(r[20:26].astype(np.uint8)) for r in rows[:4]]
    flipped = [g[:3] + bytes([(g[3] + 1) % 256]) + g[4:] for g in greedy]
    tokens, mask = assemble_rows(contexts * 2, greedy + flipped, mc.seq_len)
    _, exact = row_scores(forward(tokens[:, :-1]), jnp.asarray(tokens), jnp.asarray(mask))
    assert np.asarray(exact).tolist() == [True] * 4 + [False] * 4


# ---- the examples ---------------------------------------------------------------------------


def test_examples_are_held_out_deterministic_and_fit_the_window(val):
    text = bytes(val)
    sets = build_task_sets(EvalConfig(tasks=SHIPPED, examples=8), val, seq_len=64)
    again = build_task_sets(EvalConfig(tasks=SHIPPED, examples=8), val, seq_len=64)
    other = build_task_sets(EvalConfig(tasks=SHIPPED, examples=8, seed=1), val, seq_len=64)
    for a, b, c in zip(sets, again, other):
        assert a.tokens_RxL1.shape == (8 * a.n_choices, 65) and a.n_examples == 8
        assert np.array_equal(a.tokens_RxL1, b.tokens_RxL1) and np.array_equal(a.answer_E, b.answer_E)
        assert not np.array_equal(a.tokens_RxL1, c.tokens_RxL1), a.name
    for ts in sets[:2]:  # the Python tasks: context + answer is held-out text
        for e in range(ts.n_examples):
            r = e * ts.n_choices + int(ts.answer_E[e])
            n = int(np.flatnonzero(ts.mask_RxL[r])[-1]) + 2
            assert bytes(ts.tokens_RxL1[r, :n].astype(np.uint8)) in text
    mc_set = sets[0]
    assert sorted(np.bincount(mc_set.answer_E, minlength=4).tolist()) != [0, 0, 0, 8]  # shuffled positions


def test_rl_probes_are_few_shot_prompts_of_the_rl_tasks():
    ts = get_task("rl_add").build(
        BuildContext(val=np.zeros(10, np.uint8), seq_len=64, examples=4, shots=3, seed=0)
    )
    row = bytes(ts.tokens_RxL1[0].astype(np.uint8)).rstrip(b"\0").decode()
    items = row.split("\n")[:-1]
    assert len(items) == 4  # 3 solved items + the query with its answer
    for item in items:
        a, rest = item.split("+")
        b, ans = rest.split("=")
        assert ans == str(int(a) + int(b)).zfill(4)[::-1]
    for name, (lo, hi) in PROBE_LENGTHS.items():  # the RL presets' item lengths
        preset = yaml.safe_load((REPO / "conf" / "rl" / "task" / f"{name}.yaml").read_text())
        assert (preset.get("min_len", 1), preset.get("max_len", 3)) == (lo, hi), name


# ---- the trainer, resume and the runs table -------------------------------------------------


def _task_recs(path):
    return [
        {k: v for k, v in r.items() if k.startswith("task/") or k == "step"}
        for r in read_metrics(path)
        if "eval_loss" in r
    ]


def test_run_logs_task_metrics_resumes_and_collect_reads_them(tmp_path):
    c = cfg(
        *TINY,
        "train.steps=4",
        "train.eval_every=2",
        "train.ckpt_every=2",
        "eval.tasks=[py_continuation,rl_add]",
        "eval.examples=4",
    )
    full = run(c, tmp_path / "sweep" / "full")
    recs = _task_recs(tmp_path / "sweep" / "full" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [2, 4]
    assert set(recs[-1]) == {
        "step",
        "task/py_continuation/loss",
        "task/py_continuation/accuracy",
        "task/rl_add/loss",
        "task/rl_add/accuracy",
    }
    tm = json.loads((tmp_path / "sweep" / "full" / "summary.json").read_text())["task_metrics"]
    assert tm == full.task_metrics and set(tm) == {"py_continuation", "rl_add"}
    assert tm["py_continuation"]["loss"] == recs[-1]["task/py_continuation/loss"] > 0
    assert tm["py_continuation"]["chance"] == 0.25 and 0 <= tm["rl_add"]["accuracy"] <= 1
    # Interrupted after the step-2 checkpoint, started again: the same task metrics.
    rd = tmp_path / "sweep" / "resumed"
    shutil.copytree(tmp_path / "sweep" / "full", rd)
    shutil.rmtree(rd / "checkpoints" / "4")
    (rd / "summary.json").unlink()
    resumed = run(c, rd)
    assert resumed.resumed_from_step == 2 and _task_recs(rd / "metrics.jsonl") == recs
    assert resumed.task_metrics == full.task_metrics
    # The runs table has per-task columns; task_table is the long table fit-task reads.
    table = runs.table(tmp_path / "sweep", cache_dir=False)
    assert table["task_loss/rl_add"].tolist() == [tm["rl_add"]["loss"]] * 2
    assert table["accuracy/py_continuation"].tolist() == [tm["py_continuation"]["accuracy"]] * 2
    runs_df, curves = runs.load(tmp_path / "sweep", cache_dir=False)
    final, per_eval = runs.task_table(runs_df), runs.task_table(runs_df, curves)
    assert list(final.columns) == ["N", "D", "C", "task", "task_loss", "accuracy", "chance", "run", "step"]
    assert len(final) == 4 and len(per_eval) == 8 and set(per_eval["D"]) == {2 * 256, 4 * 256}
    last = per_eval[per_eval["D"] == 4 * 256].sort_values(["run", "task"]).reset_index(drop=True)
    assert last[["task", "task_loss", "accuracy"]].equals(
        final.sort_values(["run", "task"]).reset_index(drop=True)[["task", "task_loss", "accuracy"]]
    )
    # `collect --tasks` writes that long table for fit-task.
    assert (
        analysis_main(
            [
                "collect",
                str(tmp_path / "sweep"),
                "--out",
                str(tmp_path / "runs.csv"),
                "--no-cache",
                "--tasks",
                str(tmp_path / "ladder.csv"),
            ]
        )
        == 0
    )
    ladder = pd.read_csv(tmp_path / "ladder.csv")
    assert len(ladder) == 8 and set(ladder["task"]) == {"py_continuation", "rl_add"}
    assert sorted(ladder["task_loss"]) == pytest.approx(sorted(per_eval["task_loss"]))


# ---- config ---------------------------------------------------------------------------------


def test_default_has_no_tasks_and_eval_code_lists_the_shipped_ones():
    assert resolve_config(cfg(), n_devices=1).eval.tasks == []
    assert resolve_config(cfg("eval=code"), n_devices=1).eval.tasks == SHIPPED
    assert sorted(SHIPPED) == task_names()


@pytest.mark.parametrize(
    "overrides,msg",
    [
        (["eval.tasks=[py_continuation,nope]"], "eval.tasks: unknown task 'nope'; known: py_continuation"),
        (["eval.tasks=[rl_add,rl_add]"], "eval.tasks lists a task twice"),
        (["eval.examples=0"], "eval.examples must be an integer >= 1"),
        (["eval.tasks=[py_identifier]", "model.seq_len=16"], "py_identifier needs model.seq_len >= 32"),
        (["eval.tasks=[rl_parity]", "model.seq_len=8"], "rl_parity needs model.seq_len >= 10"),
    ],
)
def test_bad_eval_config_is_one_config_error(overrides, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        resolve_config(cfg(*overrides), n_devices=1)
    assert "\n" not in str(e.value)


def test_tasks_need_a_byte_corpus(tmp_path):
    tok = tmp_path / "t.npy"
    np.save(tok, np.arange(5000, dtype=np.uint16) % 300)
    with pytest.raises(ConfigError, match="need a byte-level corpus"):
        resolve_config(
            cfg(f"data.path={tok}", "data.vocab_size=512", "model.vocab_size=512", "eval.tasks=[rl_add]"),
            n_devices=1,
        )
