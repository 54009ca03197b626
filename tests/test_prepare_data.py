"""`python -m experiments.prepare_data` (BPE tokenizer, shards, meta.json, resume) and the trainer
reading it with `data.dir` (memory-mapped shards, vocab from meta.json, bad directories)."""

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.prepare_data import build
from experiments.prepare_data.__main__ import main as prepare_main
from experiments.prepare_data.build import PrepareOptions, prepare
from experiments.prepare_data.sources import doc_is_val
from experiments.train.corpus import BatchSampler, DataConfig, ShardedTokens, load_corpus
from models.base.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
META_KEYS = {"vocab_size", "dtype", "tokenizer_sha256", "train_tokens", "val_tokens", "shards", "documents"}
WORDS = (
    "the model reads tokens from shards and the loss falls as the data grows; a scaling law "
    "fits loss against compute, parameters and tokens for every run of the sweep"
).split()


def _docs() -> list[str]:
    """~16 KB of text in 30 documents: word soup (so BPE finds merges) plus the awkward cases."""
    r = random.Random(0)
    docs = [" ".join(r.choice(WORDS) for _ in range(r.randint(40, 140))) for _ in range(27)]
    docs.append("unicode: café, naïve, 中文, emoji 🙂 and a tab\there")
    docs.append("a document that mentions <|endoftext|> literally must keep it as text")
    docs.append("code:\n    def f(x):\n        return x + 1\n")
    return docs


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("prep")
    src = root / "text"
    src.mkdir()
    for i, d in enumerate(_docs()):
        (src / f"doc{i:02d}.txt").write_text(d, encoding="utf-8")
    (src / "blank.txt").write_text("  \n")  # skipped: no text
    return src


def _opts(src: Path, out: Path, **kw) -> PrepareOptions:
    base = dict(
        inputs=(str(src),),
        out=out,
        vocab_size=320,
        chunk_chars=1500,
        shard_tokens=1200,
        workers=1,
        val_fraction=0.2,
        progress=False,
    )
    return PrepareOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def prepared(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("prep") / "data"
    return out, prepare(_opts(corpus_dir, out))


def _stream(out: Path, meta: dict, names: list[str]) -> np.ndarray:
    return np.concatenate([np.fromfile(out / n, dtype=meta["dtype"]) for n in names])


def _split_docs(tokens: np.ndarray, eot: int) -> list[np.ndarray]:
    assert tokens[0] == eot  # every document opens with EOT
    cuts = np.flatnonzero(tokens == eot)
    return [tokens[a + 1 : b] for a, b in zip(cuts, list(cuts[1:]) + [tokens.size])]


def test_prepare_writes_shards_of_whole_documents_that_decode_back(prepared):
    from tokenizers import Tokenizer

    out, meta = prepared
    assert META_KEYS <= set(meta) and json.loads((out / "meta.json").read_text()) == meta
    assert meta["vocab_size"] == 320 and meta["dtype"] == "uint16" and meta["split"] == "doc_hash"
    assert len(meta["shards"]) >= 3 and not (out / "progress.json").exists()
    assert not list(out.glob("val_part_*")) and not list(out.glob(".*.tmp"))
    assert sorted(p.name for p in out.glob("train_*.bin")) == [s["name"] for s in meta["shards"]]
    assert meta["train_tokens"] == sum(s["tokens"] for s in meta["shards"])
    for s in meta["shards"]:
        assert (out / s["name"]).stat().st_size == 2 * s["tokens"]
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 320 and tok.token_to_id("<|endoftext|>") == meta["eot_id"]
    docs = _docs()
    want_val = {d for d in docs if doc_is_val(d, 0.2)}
    assert 0 < len(want_val) < len(docs)
    decoded = {}
    for split, names in (("train", [s["name"] for s in meta["shards"]]), ("val", ["val.bin"])):
        ids = _split_docs(_stream(out, meta, names), meta["eot_id"])
        decoded[split] = {tok.decode(d.tolist()) for d in ids}
    assert decoded["val"] == want_val and decoded["train"] == set(docs) - want_val
    assert meta["documents"] == len(docs) == meta["train_documents"] + meta["val_documents"]
    assert meta["text_bytes"] == sum(len(d.encode()) for d in docs)


def test_worker_processes_write_the_same_bytes(corpus_dir, prepared, tmp_path):
    out, meta = prepared
    meta2 = prepare(_opts(corpus_dir, tmp_path / "w2", workers=2))
    assert meta2["corpus_sha256"] == meta["corpus_sha256"] and meta2["shards"] == meta["shards"]


def test_interrupted_preparation_resumes_without_redoing_finished_shards(
    corpus_dir, prepared, tmp_path, monkeypatch
):
    out, meta = prepared
    dst = tmp_path / "resume"

    def stop_after_two(i):
        if i == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(_opts(corpus_dir, dst), on_shard=stop_after_two)
    assert (dst / "progress.json").is_file() and not (dst / "meta.json").exists()
    with pytest.raises(ConfigError, match="has not finished"):
        load_corpus(DataConfig(dir=str(dst)))
    done = {p.name: p.stat().st_mtime_ns for p in dst.glob("train_*.bin")}
    assert sorted(done) == ["train_000000.bin", "train_000001.bin"]
    calls = []
    real = build._tokenize
    monkeypatch.setattr(build, "_tokenize", lambda docs: calls.append(len(docs)) or real(docs))
    meta2 = prepare(_opts(corpus_dir, dst))
    assert meta2["corpus_sha256"] == meta["corpus_sha256"] and meta2["shards"] == meta["shards"]
    assert {n: (dst / n).stat().st_mtime_ns for n in done} == done  # not rewritten
    skipped_docs = sum(s["documents"] for s in meta["shards"][:2])
    assert sum(calls) <= len(_docs()) - skipped_docs  # their documents not re-tokenized
    calls.clear()
    assert prepare(_opts(corpus_dir, dst))["corpus_sha256"] == meta["corpus_sha256"] and not calls


def test_tables_and_a_given_tokenizer(prepared, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, meta = prepared
    rows = _docs()[:12]
    with open(tmp_path / "a.jsonl", "w") as f:
        for d in rows[:6]:
            f.write(json.dumps({"id": 1, "text": d}) + "\n")
        f.write(json.dumps({"text": None}) + "\n")
    pq.write_table(pa.table({"text": rows[6:10] + [None, " "]}), tmp_path / "b.parquet")
    with pa.ipc.new_stream(
        tmp_path / "c.arrow", pa.schema([("text", pa.string())])
    ) as w:  # datasets' cache format
        w.write_table(pa.table({"text": rows[10:]}))
    m = prepare(
        PrepareOptions(
            inputs=(str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet"), str(tmp_path / "c.arrow")),
            out=tmp_path / "t",
            tokenizer=out / "tokenizer.json",
            workers=1,
            progress=False,
        )
    )
    assert m["tokenizer_sha256"] == meta["tokenizer_sha256"] and m["vocab_size"] == 320
    assert m["documents"] == 12 and m["tokenizer_source"].endswith("tokenizer.json")
    # Padded vocabulary: meta.json's vocab_size is the model's embedding rows.
    p = prepare(
        PrepareOptions(
            inputs=(str(tmp_path / "a.jsonl"),),
            out=tmp_path / "p",
            progress=False,
            tokenizer=out / "tokenizer.json",
            workers=1,
            pad_vocab_multiple=128,
        )
    )
    assert p["vocab_size"] == 384 and p["tokenizer_vocab_size"] == 320


@pytest.mark.parametrize(
    "argv,msg",
    [
        ([], "no input files given"),
        (["{tmp}/missing.txt"], "input not found"),
        (["{tmp}/blank.txt"], "the inputs hold no text"),
        (
            ["{tmp}/x.txt", "--tokenizer", "{tok}", "--vocab-size", "1000"],
            "tokenizer/vocab mismatch: --vocab-size 1000",
        ),
        (["{tmp}/x.txt", "--vocab-size", "100"], "--vocab-size must be at least 257"),
        (["{tmp}/bad.jsonl", "--vocab-size", "300"], "has no field 'text'"),
        (
            ["{tmp}/x.txt", "--vocab-size", "300", "--out", "{out}"],
            "already holds a corpus prepared from other inputs",
        ),
    ],
)
def test_bad_input_is_one_line(argv, msg, prepared, tmp_path, capsys):
    out, _ = prepared
    (tmp_path / "blank.txt").write_text(" \n\t")
    (tmp_path / "x.txt").write_text("some text " * 20)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    argv = [a.format(tmp=tmp_path, tok=out / "tokenizer.json", out=out) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    assert prepare_main(argv + ["--no-progress", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and msg in err and len(err.strip().splitlines()) == 1, err


def test_command_line_entry_point(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "experiments.prepare_data", "--out", str(tmp_path / "o")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.strip() == "error: no input files given", p.stderr


def test_trainer_maps_shards_as_one_stream(prepared):
    out, meta = prepared
    c = load_corpus(DataConfig(dir=str(out)))
    assert isinstance(c.train, ShardedTokens) and c.vocab_size == 320
    assert c.identity["tokenizer_sha256"] == meta["tokenizer_sha256"]
    assert c.identity["sha256"] == meta["corpus_sha256"] and c.identity["shards"] == len(meta["shards"])
    flat = _stream(out, meta, [s["name"] for s in meta["shards"]])
    assert c.train.size == flat.size == meta["train_tokens"] and c.val.size == meta["val_tokens"]
    b = int(c.train.bounds[1])  # a window across the first boundary
    assert np.array_equal(c.train[b - 5 : b + 7], flat[b - 5 : b + 7]) and c.train[b] == flat[b]
    s = BatchSampler(c.train, seq_len=32, batch_size=64, seed=1)
    batch = s.batch(3)
    assert np.array_equal(batch, BatchSampler(c.train, 32, 64, seed=1).batch(3))
    for row, o in zip(batch, s.offsets(3)):
        assert np.array_equal(row, flat[o : o + 33])
    crossing = [o for o in s.offsets(3) if any(o < bb < o + 33 for bb in c.train.bounds[1:-1])]
    assert crossing or len(meta["shards"]) == 1


def _copy(out: Path, dst: Path) -> Path:
    shutil.copytree(out, dst)
    return dst


def test_trainer_refuses_bad_directories_in_one_line(prepared, tmp_path):
    out, meta = prepared
    cases = []
    d = _copy(out, tmp_path / "nometa")
    (d / "meta.json").unlink()
    cases.append((d, "meta.json is missing"))
    d = _copy(out, tmp_path / "tok")
    (d / "tokenizer.json").write_text("{}")
    cases.append((d, "tokenizer/vocab mismatch"))
    d = _copy(out, tmp_path / "empty")
    (d / meta["shards"][1]["name"]).write_bytes(b"")
    cases.append((d, "is empty"))
    d = _copy(out, tmp_path / "dtype")
    np.fromfile(d / "train_000000.bin", dtype="uint16").astype("uint32").tofile(d / "train_000000.bin")
    cases.append((d, "disagrees with meta.json"))
    d = _copy(out, tmp_path / "metadtype")
    (d / "meta.json").write_text(json.dumps({**meta, "dtype": "uint32"}))
    cases.append((d, "disagrees with meta.json"))
    d = _copy(out, tmp_path / "odd")
    (d / "val.bin").write_bytes(b"\0" * 7)
    cases.append((d, "not a whole number of uint16"))
    d = _copy(out, tmp_path / "bigvocab")
    (d / "meta.json").write_text(json.dumps({**meta, "vocab_size": 70_000}))
    cases.append((d, "dtype uint16 but vocab_size 70000 needs uint32"))
    for d, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            load_corpus(DataConfig(dir=str(d)))
        assert "\n" not in str(e.value)


def test_vocab_comes_from_meta_and_a_mismatch_is_an_error(prepared):
    from test_train import cfg

    from experiments.train.config import resolve_config

    out, _ = prepared
    spec = resolve_config(cfg(f"data.dir={out}"), n_devices=1)
    assert spec.model.vocab_size == 320 and spec.data.resolved_source() == "prepared"
    assert resolve_config(cfg(f"data.dir={out}", "model.vocab_size=320"), n_devices=1).model.vocab_size == 320
    with pytest.raises(ConfigError, match=r"model.vocab_size=512 does not match data.dir's vocabulary \(320"):
        resolve_config(cfg(f"data.dir={out}", "model.vocab_size=512"), n_devices=1)
    with pytest.raises(ConfigError, match="not both"):
        resolve_config(cfg(f"data.dir={out}", "data.path=x.txt"), n_devices=1)
    with pytest.raises(ConfigError, match="eval.tasks"):
        resolve_config(cfg(f"data.dir={out}", "eval=code"), n_devices=1)


def test_training_on_a_prepared_corpus_records_its_tokenizer(prepared, tmp_path):
    from test_train import TINY, cfg

    from experiments.train.loop import run

    out, meta = prepared
    s = run(cfg(*TINY, f"data.dir={out}", "train.steps=3", "train.eval_every=3"), tmp_path / "run")
    assert s.status == "completed" and s.model["vocab_size"] == 320
    assert s.corpus["tokenizer_sha256"] == meta["tokenizer_sha256"]
    assert s.corpus["sha256"] == meta["corpus_sha256"] and s.corpus["dir"] == str(out.resolve())
    assert np.isfinite(s.final_eval_loss) and s.final_eval_loss < 2 * np.log(320)
