"""The on-disk format of a prepared corpus, shared by the writer (`python -m
experiments.prepare_data`) and the reader (`data.dir=DIR` in experiments/train/corpus.py).

A prepared directory holds:

* `tokenizer.json`: the Hugging Face tokenizer the shards were made with;
* `train_NNNNNN.bin`: training token shards, raw little-endian `dtype` (uint16 when the vocabulary
  fits in 16 bits, else uint32), whole documents only, each document preceded by the
  end-of-text token (so the stream reads `EOT doc EOT doc ...`, as in GPT-2 / nanoGPT);
* `val.bin`: the held-out documents in the same layout;
* `meta.json`: written last, so its presence means the preparation finished. It records the
  vocabulary, dtype, end-of-text id, the tokenizer's sha256, every shard's token count and
  sha256, and the corpus identity (`corpus_sha256`, a hash of the tokenizer and shard hashes).

Only NumPy and the standard library here: the trainer imports this without `tokenizers`.
Every problem the reader finds is a `ConfigError` whose one line names `data.dir` and the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from models.base.configs import is_int
from models.base.errors import ConfigError

FORMAT_VERSION = 1
META = "meta.json"
TOKENIZER = "tokenizer.json"
VAL = "val.bin"
PROGRESS = "progress.json"  # present only while a preparation is unfinished
REQUIRED_META = (
    "format_version",
    "vocab_size",
    "dtype",
    "eot_id",
    "tokenizer_sha256",
    "train_tokens",
    "val_tokens",
    "shards",
    "val",
    "documents",
    "corpus_sha256",
)


def shard_name(i: int) -> str:
    return f"train_{i:06d}.bin"


def val_part_name(i: int) -> str:
    """Held-out tokens of the documents of shard i, kept apart until val.bin is assembled."""
    return f"val_part_{i:06d}.bin"


def dtype_for_vocab(vocab_size: int) -> str:
    """The narrowest unsigned type that holds every token id (ids < vocab_size)."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def corpus_sha256(tokenizer_sha: str, shards: list[dict[str, Any]], val: dict[str, Any]) -> str:
    """Identity of the prepared corpus: the tokenizer plus every shard's content, in order."""
    parts = [tokenizer_sha] + [s["sha256"] for s in shards] + [val["sha256"]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _file_mode() -> int:
    """What open() would give a new file (mkstemp makes it private)."""
    old = os.umask(0)
    os.umask(old)
    return 0o666 & ~old


def write_atomic(path: Path, content: bytes | np.ndarray | str) -> None:
    """Write `path` via a temporary file in the same directory and a rename, so a reader (or a
    re-run after an interruption) sees the whole file or none of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, np.ndarray):
                f.write(memoryview(np.ascontiguousarray(content)).cast("B"))  # no copy
            else:
                f.write(content.encode() if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1) + "\n")


# ---- reading (the trainer's side) -------------------------------------------------------------


def read_meta(d: Path) -> dict[str, Any]:
    """meta.json of prepared directory `d`, checked for the keys the trainer needs."""
    p = d / META
    if not d.is_dir():
        raise ConfigError(f"data.dir: {d} is not a directory")
    if not p.is_file():
        hint = (
            " (the preparation has not finished: re-run the same prepare_data command)"
            if (d / PROGRESS).is_file()
            else " (make it with `python -m experiments.prepare_data`)"
        )
        raise ConfigError(f"data.dir: {p} is missing{hint}")
    try:
        meta = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"data.dir: {p} is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"data.dir: {p} must hold a JSON object")
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise ConfigError(f"data.dir: {p} lacks {missing}; re-run prepare_data")
    if meta["format_version"] != FORMAT_VERSION:
        raise ConfigError(
            f"data.dir: {p} has format_version {meta['format_version']}, this trainer "
            f"reads {FORMAT_VERSION}; re-run prepare_data"
        )
    v = meta["vocab_size"]
    if not is_int(v) or v < 2:
        raise ConfigError(f"data.dir: {p} has vocab_size {v!r}, not an integer >= 2")
    if meta["dtype"] not in ("uint16", "uint32"):
        raise ConfigError(f"data.dir: {p} has dtype {meta['dtype']!r}; must be uint16 or uint32")
    if np.iinfo(meta["dtype"]).max < v - 1:
        raise ConfigError(
            f"data.dir: {p} says dtype {meta['dtype']} but vocab_size {v} needs {dtype_for_vocab(v)}"
        )
    if not isinstance(meta["shards"], list) or not meta["shards"]:
        raise ConfigError(f"data.dir: {p} lists no training shards")
    return meta


def check_tokenizer(d: Path, meta: dict[str, Any]) -> None:
    """tokenizer.json is the one the shards were made with (its sha256 is in meta.json)."""
    p = d / TOKENIZER
    if not p.is_file():
        raise ConfigError(
            f"data.dir: {p} is missing (meta.json names tokenizer sha256 {meta['tokenizer_sha256'][:12]}...)"
        )
    got = sha256_file(p)
    if got != meta["tokenizer_sha256"]:
        raise ConfigError(
            f"data.dir: tokenizer/vocab mismatch: {p} has sha256 {got[:12]}... but the "
            f"shards were made with {meta['tokenizer_sha256'][:12]}... (meta.json); "
            "re-run prepare_data"
        )


def open_shard(d: Path, entry: Any, dtype: str) -> np.ndarray:
    """Memory-map one shard listed in meta.json, after checking it is there, non-empty and of
    the size meta.json states for its token count and dtype."""
    if not isinstance(entry, dict) or not {"name", "tokens"} <= set(entry):
        raise ConfigError(f"data.dir: {d / META} has a malformed shard entry {entry!r}")
    p = d / str(entry["name"])
    if not p.is_file():
        raise ConfigError(f"data.dir: shard {p} listed in meta.json is missing")
    size, item, tokens = p.stat().st_size, np.dtype(dtype).itemsize, int(entry["tokens"])
    if size == 0 or tokens == 0:
        raise ConfigError(f"data.dir: shard {p} is empty")
    if size != tokens * item:
        why = (
            f"{size} bytes is not a whole number of {dtype} tokens"
            if size % item
            else f"{size // item} {dtype} tokens, meta.json says {tokens}"
        )
        raise ConfigError(
            f"data.dir: shard {p} disagrees with meta.json ({why}; dtype or size "
            "mismatch, re-run prepare_data)"
        )
    return np.memmap(p, dtype=dtype, mode="r")
