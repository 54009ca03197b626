"""`data.max_unique_tokens` (issue 27, repeated data): a run trains on the first U tokens of the
training split, summary.json records `unique_tokens` and `epochs`, and `collect` has both columns.
A few tiny real runs (6 steps each)."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from analysis.core import runs as analysis_runs
from experiments.train.config import resolve_config
from experiments.train.corpus import BatchSampler, DataConfig, ShardedTokens, load_corpus
from experiments.train.loop import run
from models.base.errors import ConfigError
from models.base.rundir import RunSummary

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
    "train.steps=6",
    "train.eval_every=0",
    "train.ckpt_every=0",
]
CAP = 4_000  # > one batch (8 x 33 = 264 tokens), far below the ~10.9M-token stdlib split


def cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=[*TINY, *overrides])


def test_the_cap_is_a_prefix_of_the_split():
    full = load_corpus(DataConfig())
    capped = load_corpus(DataConfig(max_unique_tokens=CAP))
    assert capped.unique_tokens == CAP and capped.split_tokens == full.unique_tokens
    assert np.array_equal(np.asarray(capped.train), np.asarray(full.train[:CAP]))
    assert np.array_equal(np.asarray(capped.val), np.asarray(full.val))  # validation untouched
    assert capped.identity == full.identity
    # every window of every batch lies inside the prefix
    s = BatchSampler(capped.train, 32, 8, seed=0)
    assert all(int(s.offsets(i).max()) + 33 <= CAP for i in range(50))
    whole = load_corpus(DataConfig(max_unique_tokens=10**12))
    assert whole.unique_tokens == full.unique_tokens and "so the whole split" in whole.unique_line()


def test_sharded_prefix_stays_sharded():
    st = ShardedTokens([np.arange(5, dtype=np.uint16), np.arange(5, 12, dtype=np.uint16), np.arange(3)])
    assert np.array_equal(np.asarray(st.prefix(8)), np.concatenate([np.arange(5), np.arange(5, 8)]))
    assert isinstance(st.prefix(8), ShardedTokens) and st.prefix(8).size == 8
    assert isinstance(st.prefix(3), np.ndarray) and list(st.prefix(3)) == [0, 1, 2]


@pytest.mark.parametrize(
    "value, msg",
    [
        (0, r"data.max_unique_tokens must be a positive integer \(got 0\)"),
        (-5, r"data.max_unique_tokens must be a positive integer \(got -5\)"),
        (100, r"data.max_unique_tokens=100 is smaller than one batch of tokens .* = 264\)"),
    ],
)
def test_bad_caps_are_one_line_errors(value, msg):
    with pytest.raises(ConfigError, match=msg) as info:
        resolve_config(cfg(f"data.max_unique_tokens={value}"), n_devices=1)
    assert "\n" not in str(info.value)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_runs_train_on_the_prefix_and_collect_has_the_columns(tmp_path, capsys):
    dirs = {name: tmp_path / "sweep" / name for name in ("full", "cap", "cap4x", "huge")}
    run(cfg(), dirs["full"])
    run(cfg(f"data.max_unique_tokens={CAP}"), dirs["cap"])
    run(cfg(f"data.max_unique_tokens={4 * CAP}"), dirs["cap4x"])
    run(cfg("data.max_unique_tokens=1000000000000"), dirs["huge"])
    out = capsys.readouterr().out
    assert f"unique tokens {CAP:,} (the first of the" in out and "so the whole split" in out
    s = {k: _summary(d) for k, d in dirs.items()}
    assert all(v["status"] == "completed" for v in s.values())
    tokens = 6 * 8 * 32
    assert s["cap"]["unique_tokens"] == CAP and s["cap"]["epochs"] == pytest.approx(tokens / CAP)
    split = s["full"]["unique_tokens"]
    assert split == s["full"]["corpus"]["train_tokens"] and s["full"]["epochs"] == pytest.approx(
        tokens / split
    )
    # two caps draw other windows; a cap >= the split is the split, to the last bit
    assert s["cap"]["final_train_loss"] != s["cap4x"]["final_train_loss"]
    for key in ("final_train_loss", "final_eval_loss", "unique_tokens", "epochs"):
        assert s["huge"][key] == s["full"][key], key
    assert RunSummary.from_json(s["cap"]).unique_tokens == CAP  # a field of the one summary schema
    # a run written before the fields existed: NaN in the columns, never an error
    old = tmp_path / "sweep" / "old"
    shutil.copytree(dirs["full"], old)
    legacy = {k: v for k, v in _summary(old).items() if k not in ("unique_tokens", "epochs")}
    (old / "summary.json").write_text(json.dumps(legacy))
    df = analysis_runs.table(tmp_path / "sweep", cache_dir=False).set_index("run")
    assert {"unique_tokens", "epochs"} <= set(df.columns)
    assert df.loc["sweep/cap", "unique_tokens"] == CAP
    assert df.loc["sweep/cap", "epochs"] == pytest.approx(tokens / CAP)
    assert math.isnan(df.loc["sweep/old", "unique_tokens"]) and math.isnan(df.loc["sweep/old", "epochs"])
