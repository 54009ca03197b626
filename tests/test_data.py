"""Corpora (stdlib / text / token files), their identity and caching, and index-based batches."""

import hashlib

import numpy as np
import pytest

from experiments.train.corpus import (
    BatchSampler,
    DataConfig,
    _is_val,
    eval_sampler,
    load_corpus,
    stdlib_files,
)
from models.base.errors import ConfigError


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_stdlib_corpus_excludes_tests_and_is_identified(cache):
    root, rels = stdlib_files()
    assert rels == sorted(rels) and len(rels) > 100
    assert not any(
        part in ("test", "tests", "idle_test", "site-packages") for r in rels for part in r.split("/")
    )
    c1 = load_corpus(DataConfig())
    assert c1.vocab_size == 256 and c1.train.dtype == np.uint8
    ident = c1.identity
    assert ident["files"] == len(rels) and ident["bytes"] == c1.train.size + c1.val.size
    assert ident["val_files"] == sum(_is_val(r, 0.05) for r in rels) > 0
    assert ident["bytes"] == sum((root / r).stat().st_size for r in rels)
    # The first train file's bytes open the train split (files concatenated in sorted order).
    first = next(r for r in rels if not _is_val(r, 0.05))
    head = (root / first).read_bytes()[:64]
    assert bytes(c1.train[: len(head)]) == head
    c2 = load_corpus(DataConfig())  # second load comes from the cache
    assert c2.identity == ident and np.array_equal(c2.val[:1000], c1.val[:1000])
    assert len(list((cache / "corpus").iterdir())) == 1


def test_text_glob_source(tmp_path, cache):
    d = tmp_path / "txt"
    d.mkdir()
    for i in range(12):
        (d / f"f{i:02d}.txt").write_text(f"file {i} " * 50)
    c = load_corpus(DataConfig(path=str(d / "*.txt"), val_fraction=0.3))
    assert c.identity["files"] == 12 and c.identity["bytes"] == sum(p.stat().st_size for p in d.iterdir())
    assert c.train.size > 0 and c.val.size > 0
    one = load_corpus(DataConfig(path=str(d / "f00.txt")))
    assert one.identity["split"] == "tail" and one.val.size > 0


def test_token_files_bin_and_npy(tmp_path, cache):
    toks = np.arange(5000, dtype=np.uint16) % 1000
    toks.tofile(tmp_path / "t.bin")
    np.save(tmp_path / "t.npy", toks.astype(np.uint32))
    c = load_corpus(DataConfig(path=str(tmp_path / "t.bin"), vocab_size=1000))
    assert c.vocab_size == 1000 and c.train.size + c.val.size == 5000
    assert np.array_equal(c.train[:10], toks[:10])
    n = load_corpus(
        DataConfig(path=str(tmp_path / "t.npy"), vocab_size=1000, val_path=str(tmp_path / "t.bin"))
    )
    assert n.train.size == 5000 and n.val.size == 5000 and n.identity["split"] == "val_path"
    with pytest.raises(ConfigError, match="data.vocab_size is required"):
        load_corpus(DataConfig(path=str(tmp_path / "t.bin")))
    with pytest.raises(ConfigError, match="token id 999 >= data.vocab_size=500"):
        load_corpus(DataConfig(path=str(tmp_path / "t.bin"), vocab_size=500))
    with pytest.raises(ConfigError, match="file not found"):
        load_corpus(DataConfig(path=str(tmp_path / "missing.bin"), vocab_size=10))
    (tmp_path / "odd.bin").write_bytes(b"abc")
    with pytest.raises(ConfigError, match="not a whole number"):
        load_corpus(DataConfig(path=str(tmp_path / "odd.bin"), vocab_size=10))


def test_batches_are_pure_functions_of_seed_and_index():
    tokens = np.frombuffer(hashlib.sha256(b"x").digest() * 400, dtype=np.uint8)
    s = BatchSampler(tokens, seq_len=16, batch_size=8, seed=3)
    b5 = s.batch(5)
    assert b5.shape == (8, 17) and b5.dtype == np.int32
    assert np.array_equal(b5, BatchSampler(tokens, 16, 8, seed=3).batch(5))  # fresh sampler, same batch
    assert not np.array_equal(b5, s.batch(6))
    assert not np.array_equal(b5, BatchSampler(tokens, 16, 8, seed=4).batch(5))
    offs = s.offsets(5)
    for row, o in zip(b5, offs):
        assert np.array_equal(row, tokens[o : o + 17])
    assert np.array_equal(s.rows(5, np.array([6, 1])), b5[[6, 1]])  # a process's own rows
    ev = eval_sampler(tokens, 16, 8)
    assert np.array_equal(ev.batch(0), eval_sampler(tokens, 16, 8).batch(0))
    with pytest.raises(ConfigError, match="fewer than model.seq_len"):
        BatchSampler(tokens[:10], 16, 8, seed=0)


def test_sharded_batch_assembly_reads_only_its_rows():
    from jax.sharding import NamedSharding, PartitionSpec

    from experiments.train.loop import make_train_batch
    from sharding.mesh import make_mesh

    tokens = np.arange(10_000, dtype=np.uint16) % 251
    s = BatchSampler(tokens, seq_len=8, batch_size=16, seed=0)
    mesh = make_mesh((2, 2, 2))
    sh = NamedSharding(mesh, PartitionSpec(None, ("data", "fsdp"), None))
    requested = []
    orig = s.rows
    s.rows = lambda i, rows=None: (requested.append(np.asarray(rows)), orig(i, rows))[1]
    arr = make_train_batch(s, 3, n_micro=2, micro=8, sharding=sh)
    assert np.array_equal(np.asarray(arr).reshape(16, 9), orig(3))
    # 4 batch shards (data x fsdp), each read once (tensor replicas share it): 2 micro x 2 rows.
    assert len(requested) == 4 and all(len(r) == 4 for r in requested)
    assert sorted(np.concatenate(requested).tolist()) == list(range(16))
    for shard in arr.addressable_shards:
        assert shard.data.shape == (2, 2, 9)
