"""Training data: corpora as flat token arrays, and deterministic index-based batches.

Five sources (chosen by `data.source`, or by `data.dir` / `data.path` when `source: auto`):

* `stdlib` (default, no download): the `.py` files of the running Python's standard library,
  sorted by relative path, test directories and site-packages excluded, as raw bytes (vocab 256).
  Files go to train or held-out validation by a hash of their relative path.
* `cpp` (no download): a second domain for continual pre-training, the C++ headers (`.h`,
  `.hpp`) that every pyarrow wheel ships under `pyarrow/include` (Apache Arrow's C++ API,
  Apache License 2.0; experiments/data/SOURCE.md), as raw bytes, split like `stdlib`.
* `text`: local text files or globs, as bytes (vocab 256), split the same way.
* `tokens`: pre-tokenized nanoGPT-style files, raw `.bin` (`data.dtype` uint16/uint32) or `.npy`,
  with a stated `data.vocab_size`; validation is `data.val_path` or the tail of the file.
* `prepared`: a directory made by `python -m experiments.prepare_data` (`data.dir`): token
  shards, val.bin, tokenizer.json and meta.json (experiments/prepare_data/format.py), which
  states the vocabulary and dtype. Every shard is memory-mapped; the train split is their
  concatenation (`ShardedTokens`), so a window may run from one shard into the next, exactly as
  in one long file. meta.json, the tokenizer's sha256 and every shard's size are checked at load.

Byte corpora are cached as uint8 arrays under `data.cache_dir` (default ~/.cache/scalelab) keyed
by the file list, sizes and mtimes, so a run starts without re-reading the sources. Every corpus
carries an identity (file count, byte count, SHA-256) that the run records.

Unique tokens (`data.max_unique_tokens: U`): the run trains on the first U tokens of the
training split only, always the same prefix of the same split (byte corpora: the training files
in sorted relative-path order, the last one cut; token files and prepared shards: the first U
tokens of the file / of the shards in order). Validation is untouched, so runs with different
caps are scored on the same held-out tokens. A cap of at least the split is the split (said in
the run's header line); null (the default) is the whole split. Summary.json records the figure
as `unique_tokens` and `epochs` = tokens trained / unique tokens (a nominal count: windows are
drawn at random offsets, so one "epoch" is not every token exactly once).

Mixtures (`data.mixture: {name: weight}`, experiments/train/mixture.py): a run trains on several
named corpora at once (the built-in `stdlib` and `cpp`, or `data.corpora.<name>`), each row of
a batch drawn from one of them in the given proportions, and is evaluated on each one's
validation split (`data.eval_corpora` adds corpora it is scored on without training on them).

Sampling: batch i of a run is a pure function of (seed, i): the row offsets come from
`np.random.default_rng([seed, i])`, so resuming at step i needs no replay. Callers ask for
*rows* of a batch; a multi-host process reads only the rows its devices hold.
"""

from __future__ import annotations

import dataclasses
import glob as globlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.prepare_data import format as fmt  # NumPy-only: the trainer needs no tokenizers
from models.base.configs import config_from_mapping
from models.base.errors import ConfigError

_EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
_EVAL_STREAM = 0x5EED_E7A1  # eval batches are the same for every run seed


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """`data.*`: which corpus and how it is split (the defaults are conf/data/stdlib.yaml; this
    class is also the Hydra schema of `data.*`, registered by experiments/train/config.py)."""

    source: str = "auto"  # auto | stdlib | cpp | text | tokens | prepared
    dir: str | None = None  # prepared: directory made by `python -m experiments.prepare_data`
    path: Any = None  # file, glob, or list of them (text/tokens)
    val_path: str | None = None  # tokens: separate validation file
    dtype: str = "uint16"  # tokens: element type of a raw .bin file
    vocab_size: int | None = None  # tokens: required; bytes: 256; prepared: from meta.json
    val_fraction: float = 0.05
    cache_dir: str = "~/.cache/scalelab"
    # train on the first U tokens of the training split only (None = the whole split): a
    # deterministic prefix, so a sweep can vary the unique data on one corpus (module docstring)
    max_unique_tokens: int | None = None
    # continual pre-training (experiments/train/mixture.py; docs/train.md): train on named corpora
    # in these proportions, {name: weight} (weights >= 0 summing to 1; None = this corpus alone);
    # names: this corpus's source (stdlib, cpp, text, tokens, prepared), the built-in stdlib and
    # cpp, or a key of `corpora`. The cap above applies to this corpus only.
    mixture: Any = None
    eval_corpora: Any = None  # names of corpora also evaluated (eval_loss/<name>), not trained on
    corpora: Any = None  # more named corpora, {name: {data.* keys of that corpus}}

    @classmethod
    def from_mapping(cls, m: dict[str, Any]) -> "DataConfig":
        return config_from_mapping(cls, m, "data")

    def resolved_source(self) -> str:
        if self.source not in ("auto", "stdlib", "cpp", "text", "tokens", "prepared"):
            raise ConfigError(
                f"data.source must be auto, stdlib, cpp, text, tokens or prepared (got {self.source!r})"
            )
        if self.source != "auto":
            return self.source
        if self.dir not in (None, ""):
            return "prepared"
        if self.path in (None, "", []):
            return "stdlib"
        first = self.path[0] if isinstance(self.path, (list, tuple)) else self.path
        return "tokens" if str(first).endswith((".bin", ".npy")) else "text"


@dataclasses.dataclass
class Corpus:
    """Train and validation token arrays (1-D, any unsigned int dtype) plus their identity.

    `train` is what a run samples from: the training split, or its first `data.max_unique_tokens`
    tokens (`split_tokens` then keeps the whole split's size; `identity` always describes the
    whole corpus, so runs with different caps still share one corpus identity)."""

    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    identity: dict[str, Any]
    split_tokens: int | None = None  # the whole training split's size (None: `train` is the split)
    cap: int | None = None  # data.max_unique_tokens as asked (None: no cap)

    @property
    def unique_tokens(self) -> int:
        """Tokens the run can sample from: summary.json `unique_tokens`."""
        return int(self.train.size)

    def unique_line(self) -> str:
        """How many unique tokens the run trains on, for the run's header line."""
        if self.cap is None:
            return f"unique tokens {self.unique_tokens:,} (the whole training split)"
        split = self.split_tokens if self.split_tokens is not None else self.unique_tokens
        if self.cap >= split:
            return (
                f"unique tokens {self.unique_tokens:,}: data.max_unique_tokens={self.cap:,} >= the "
                f"{split:,}-token training split, so the whole split"
            )
        return f"unique tokens {self.unique_tokens:,} (the first of the {split:,}-token training split)"


# ---- helpers --------------------------------------------------------------------------------


def _cache_root(cfg: DataConfig) -> Path:
    return Path(os.environ.get("SCALELAB_CACHE", cfg.cache_dir)).expanduser()


def _is_val(relpath: str, val_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big")
    return h / 2**64 < val_fraction


def stdlib_files() -> tuple[Path, list[str]]:
    """(stdlib root, sorted relative paths of its .py files, tests and site-packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    rels: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _EXCLUDED_DIRS]
        for f in filenames:
            if f.endswith(".py"):
                rels.append(Path(dirpath, f).relative_to(root).as_posix())
    return root, sorted(rels)


CPP_SUFFIXES = (".h", ".hpp")


def cpp_files() -> tuple[Path, list[str], str]:
    """(pyarrow's include directory, sorted relative paths of its C++ headers, pyarrow's version):
    the `cpp` corpus. Found without importing pyarrow (a scalelab dependency)."""
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "data.source=cpp reads the C++ headers shipped with pyarrow, which is not installed"
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "include"
    rels = sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.suffix in CPP_SUFFIXES
    )
    if not rels:
        raise ConfigError(f"data.source=cpp: no C++ headers under {root} (a pyarrow build without them)")
    return root, rels, importlib.metadata.version("pyarrow")


def _expand_paths(path: Any) -> list[Path]:
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    out: list[Path] = []
    for item in items:
        s = os.path.expanduser(str(item))
        if any(ch in s for ch in "*?["):
            hits = sorted(globlib.glob(s, recursive=True))
            if not hits:
                raise ConfigError(f"data.path: no files match {s!r}")
            out += [Path(h) for h in hits if Path(h).is_file()]
        else:
            p = Path(s)
            if not p.is_file():
                raise ConfigError(f"data.path: file not found: {s}")
            out.append(p)
    if not out:
        raise ConfigError(f"data.path: no files in {path!r}")
    return out


def _atomic_dir_write(final: Path, files: dict[str, bytes | np.ndarray]) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    for name, content in files.items():
        if isinstance(content, np.ndarray):
            content.tofile(tmp / name)
        else:
            (tmp / name).write_bytes(content)
    try:
        os.replace(tmp, final)
    except OSError:  # another process won the race; its copy is identical
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


def _byte_corpus(name: str, root: Path, rels: list[str], cfg: DataConfig) -> Corpus:
    """Bytes of `rels` (relative to root), split by file hash, cached as uint8 arrays."""
    stats = [(r, *(lambda s: (s.st_size, s.st_mtime_ns))((root / r).stat())) for r in rels]
    key_src = json.dumps([name, str(root), sys.version, cfg.val_fraction, stats])
    key = hashlib.sha256(key_src.encode()).hexdigest()[:20]
    cdir = _cache_root(cfg) / "corpus" / key
    if not (cdir / "identity.json").is_file():
        content_hash = hashlib.sha256()
        train_parts: list[bytes] = []
        val_parts: list[bytes] = []
        n_train = n_val = 0
        for r in rels:
            b = (root / r).read_bytes()
            content_hash.update(r.encode() + b"\0" + len(b).to_bytes(8, "big") + b)
            if _is_val(r, cfg.val_fraction):
                val_parts.append(b)
                n_val += 1
            else:
                train_parts.append(b)
                n_train += 1
        split = "file_hash"
        train_b, val_b = b"".join(train_parts), b"".join(val_parts)
        if not train_b or not val_b:  # too few files for a hash split: hold out the tail
            allb = train_b + val_b
            cut = int(len(allb) * (1 - cfg.val_fraction))
            train_b, val_b, split = allb[:cut], allb[cut:], "tail"
        identity = {
            "name": name,
            "source_root": str(root),
            "files": len(rels),
            "bytes": len(train_b) + len(val_b),
            "sha256": content_hash.hexdigest(),
            "split": split,
            "val_fraction": cfg.val_fraction,
            "train_files": n_train,
            "val_files": n_val,
            "train_tokens": len(train_b),
            "val_tokens": len(val_b),
            "vocab_size": 256,
        }
        _atomic_dir_write(
            cdir,
            {"train.u8": train_b, "val.u8": val_b, "identity.json": json.dumps(identity, indent=1).encode()},
        )
    identity = json.loads((cdir / "identity.json").read_text())
    train = (
        np.memmap(cdir / "train.u8", dtype=np.uint8, mode="r")
        if identity["train_tokens"]
        else np.zeros(0, np.uint8)
    )
    val = (
        np.memmap(cdir / "val.u8", dtype=np.uint8, mode="r")
        if identity["val_tokens"]
        else np.zeros(0, np.uint8)
    )
    return Corpus(train=train, val=val, vocab_size=256, identity=identity)


def _load_token_file(p: Path, dtype: str) -> np.ndarray:
    if p.suffix == ".npy":
        arr = np.load(p, mmap_mode="r")
        if arr.ndim != 1 or arr.dtype.kind != "u":
            raise ConfigError(
                f"data.path: {p} must hold a 1-D unsigned integer array (got {arr.dtype}{list(arr.shape)})"
            )
        return arr
    if dtype not in ("uint16", "uint32"):
        raise ConfigError(f"data.dtype must be uint16 or uint32 (got {dtype!r})")
    size = p.stat().st_size
    item = np.dtype(dtype).itemsize
    if size == 0 or size % item:
        raise ConfigError(f"data.path: {p} has {size} bytes, not a whole number of {dtype} tokens")
    return np.memmap(p, dtype=dtype, mode="r")


def _file_identity(p: Path, arr: np.ndarray, cfg: DataConfig) -> dict[str, Any]:
    st = p.stat()
    key = hashlib.sha256(json.dumps([str(p.resolve()), st.st_size, st.st_mtime_ns]).encode()).hexdigest()[:20]
    cfile = _cache_root(cfg) / "tokfiles" / f"{key}.json"
    if cfile.is_file():
        return json.loads(cfile.read_text())
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    ident = {
        "path": str(p.resolve()),
        "bytes": st.st_size,
        "tokens": int(arr.size),
        "sha256": h.hexdigest(),
        "max_token": int(arr.max()) if arr.size else -1,
    }
    cfile.parent.mkdir(parents=True, exist_ok=True)
    tmp = cfile.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(ident))
    os.replace(tmp, cfile)
    return ident


def _token_corpus(cfg: DataConfig) -> Corpus:
    if cfg.vocab_size is None:
        raise ConfigError("data.vocab_size is required for pre-tokenized .bin/.npy files")
    files = _expand_paths(cfg.path)
    if len(files) != 1:
        raise ConfigError(f"data.path: give one token file (got {len(files)}); concatenate shards first")
    train = _load_token_file(files[0], cfg.dtype)
    tid = _file_identity(files[0], train, cfg)
    if cfg.val_path:
        vfile = _expand_paths(cfg.val_path)[0]
        val = _load_token_file(vfile, cfg.dtype)
        vid = _file_identity(vfile, val, cfg)
        split = "val_path"
    else:
        cut = int(train.size * (1 - cfg.val_fraction))
        train, val, vid, split = train[:cut], train[cut:], None, "tail"
    for ident, what in ((tid, "data.path"), (vid, "data.val_path")):
        if ident and ident["max_token"] >= cfg.vocab_size:
            raise ConfigError(f"{what}: token id {ident['max_token']} >= data.vocab_size={cfg.vocab_size}")
    identity = {
        "name": "tokens",
        "files": 1 + (vid is not None),
        "bytes": tid["bytes"] + (vid["bytes"] if vid else 0),
        "sha256": hashlib.sha256((tid["sha256"] + (vid["sha256"] if vid else "")).encode()).hexdigest(),
        "split": split,
        "train_tokens": int(train.size),
        "val_tokens": int(val.size),
        "vocab_size": cfg.vocab_size,
        "path": tid["path"],
        "val": vid and vid["path"],
    }
    return Corpus(train=train, val=val, vocab_size=int(cfg.vocab_size), identity=identity)


class ShardedTokens:
    """Shards (1-D arrays, memory-mapped) read as one stream: `size`, `dtype` and contiguous
    slicing like a 1-D array, where a slice across a shard boundary joins the two pieces."""

    def __init__(self, shards: Sequence[np.ndarray]):
        self.shards = list(shards)
        self.bounds = np.cumsum([0] + [int(a.size) for a in self.shards])
        self.size = int(self.bounds[-1])
        self.dtype = self.shards[0].dtype
        self.shape, self.ndim = (self.size,), 1

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice | int) -> np.ndarray:
        if not isinstance(key, slice):
            i = int(key) + (self.size if int(key) < 0 else 0)
            if not 0 <= i < self.size:
                raise IndexError(f"index {key} out of range for {self.size} tokens")
            k = int(np.searchsorted(self.bounds, i, side="right")) - 1
            return self.shards[k][i - self.bounds[k]]
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise IndexError("ShardedTokens supports contiguous slices only")
        if stop <= start:
            return np.zeros(0, self.dtype)
        k = int(np.searchsorted(self.bounds, start, side="right")) - 1
        pieces = []
        while start < stop:
            end = min(stop, int(self.bounds[k + 1]))
            pieces.append(self.shards[k][start - self.bounds[k] : end - self.bounds[k]])
            start, k = end, k + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.concatenate(self.shards)
        return out if dtype is None else out.astype(dtype)

    def prefix(self, n: int) -> "ShardedTokens | np.ndarray":
        """The first `n` tokens, still memory-mapped (views of the shards, nothing read)."""
        parts = [a[: n - int(lo)] for a, lo in zip(self.shards, self.bounds[:-1]) if lo < n]
        return parts[0] if len(parts) == 1 else ShardedTokens(parts)


def _prepared_dir(cfg: DataConfig) -> Path:
    if cfg.dir in (None, ""):
        raise ConfigError("data.dir is required for data.source=prepared")
    return Path(os.path.expanduser(str(cfg.dir)))


def _prepared_meta(cfg: DataConfig) -> dict[str, Any]:
    """meta.json of `data.dir`, after the checks that need no shard reading."""
    meta = fmt.read_meta(_prepared_dir(cfg))
    if cfg.vocab_size is not None and cfg.vocab_size != meta["vocab_size"]:
        raise ConfigError(
            f"data.vocab_size={cfg.vocab_size} disagrees with {cfg.dir}/meta.json "
            f"(vocab_size {meta['vocab_size']}); leave data.vocab_size unset"
        )
    return meta


def _prepared_corpus(cfg: DataConfig) -> Corpus:
    """Memory-map every shard of a prepared directory, after checking them against meta.json."""
    d = _prepared_dir(cfg)
    meta = _prepared_meta(cfg)
    fmt.check_tokenizer(d, meta)
    dtype = meta["dtype"]
    shards = [fmt.open_shard(d, e, dtype) for e in meta["shards"]]
    val = fmt.open_shard(d, meta["val"], dtype)
    n_train = sum(int(a.size) for a in shards)
    if n_train != meta["train_tokens"] or val.size != meta["val_tokens"]:
        raise ConfigError(
            f"data.dir: {d / fmt.META} states {meta['train_tokens']} train / {meta['val_tokens']} "
            f"validation tokens but its shards hold {n_train} / {val.size}; re-run prepare_data"
        )
    train = shards[0] if len(shards) == 1 else ShardedTokens(shards)
    item = np.dtype(dtype).itemsize
    identity = {
        "name": f"prepared:{d.resolve().name}",
        "dir": str(d.resolve()),
        "files": len(shards) + 1,
        "bytes": (n_train + int(val.size)) * item,
        "sha256": meta["corpus_sha256"],
        "tokenizer_sha256": meta["tokenizer_sha256"],
        "split": meta.get("split"),
        "val_fraction": meta.get("val_fraction"),
        "train_tokens": n_train,
        "val_tokens": int(val.size),
        "vocab_size": meta["vocab_size"],
        "dtype": dtype,
        "shards": len(shards),
        "documents": meta["documents"],
        "text_bytes": meta.get("text_bytes"),
    }
    return Corpus(train=train, val=val, vocab_size=int(meta["vocab_size"]), identity=identity)


def check_paths(cfg: DataConfig) -> None:
    """Cheap existence checks for the config validator (no reading of token data)."""
    src = cfg.resolved_source()
    if src == "prepared":
        if cfg.path not in (None, "", []):
            raise ConfigError("give data.dir (a prepared directory) or data.path (files), not both")
        _prepared_meta(cfg)
    elif cfg.dir not in (None, ""):
        raise ConfigError(
            f"data.dir is read only with data.source=prepared or auto (got data.source={cfg.source})"
        )
    if src in ("text", "tokens"):
        if cfg.path in (None, "", []):
            raise ConfigError(f"data.path is required for data.source={src}")
        _expand_paths(cfg.path)
        if cfg.val_path:
            _expand_paths(cfg.val_path)
    if src == "tokens" and cfg.vocab_size is None:
        raise ConfigError("data.vocab_size is required for pre-tokenized .bin/.npy files")
    if src not in ("tokens", "prepared") and cfg.vocab_size not in (None, 256):
        raise ConfigError(f"data.vocab_size={cfg.vocab_size} but byte corpora have vocab 256")
    if not 0.0 < float(cfg.val_fraction) < 1.0:
        raise ConfigError(f"data.val_fraction must be in (0, 1) (got {cfg.val_fraction})")
    _check_cap(cfg.max_unique_tokens)


def _check_cap(cap: Any) -> None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ConfigError(
            f"data.max_unique_tokens must be a positive integer (got {cap!r}); "
            "null = the whole training split"
        )


def check_unique_tokens(cfg: DataConfig, batch_size: int, seq_len: int) -> None:
    """A cap must hold one batch of windows (`train.batch_size` x (`model.seq_len` + 1) tokens):
    a smaller one would repeat the same few windows inside every batch."""
    _check_cap(cfg.max_unique_tokens)
    need = int(batch_size) * (int(seq_len) + 1)
    if cfg.max_unique_tokens is not None and cfg.max_unique_tokens < need:
        raise ConfigError(
            f"data.max_unique_tokens={cfg.max_unique_tokens:,} is smaller than one batch of tokens "
            f"(train.batch_size x (model.seq_len+1) = {need:,}); use at least {need}"
        )


def data_vocab_size(cfg: DataConfig) -> int:
    src = cfg.resolved_source()
    if src == "prepared":
        return int(_prepared_meta(cfg)["vocab_size"])
    return 256 if src != "tokens" else int(cfg.vocab_size)


def load_corpus(cfg: DataConfig) -> Corpus:
    """Build (or load from cache) the corpus described by `cfg`; with `data.max_unique_tokens`
    its `train` is the first that many tokens of the training split (module docstring)."""
    check_paths(cfg)
    return with_unique_cap(_load_split(cfg), cfg.max_unique_tokens)


def with_unique_cap(corpus: Corpus, cap: int | None) -> Corpus:
    """`corpus` training on the first `cap` tokens of its split (a view: nothing is copied); a
    cap of at least the split is the split, None no cap."""
    if cap is None:
        return corpus
    _check_cap(cap)
    split = int(corpus.train.size)
    train = corpus.train
    if cap < split:
        train = train.prefix(cap) if isinstance(train, ShardedTokens) else train[:cap]
    return dataclasses.replace(corpus, train=train, split_tokens=split, cap=int(cap))


def _load_split(cfg: DataConfig) -> Corpus:
    src = cfg.resolved_source()
    if src == "stdlib":
        root, rels = stdlib_files()
        v = sys.version_info
        return _byte_corpus(f"python-stdlib-{v.major}.{v.minor}.{v.micro}", root, rels, cfg)
    if src == "cpp":
        root, rels, version = cpp_files()
        return _byte_corpus(f"arrow-cpp-headers-{version}", root, rels, cfg)
    if src == "text":
        files = [p.resolve() for p in _expand_paths(cfg.path)]
        root = Path(os.path.commonpath([str(p.parent) for p in files]))
        return _byte_corpus("text", root, [p.relative_to(root).as_posix() for p in files], cfg)
    if src == "prepared":
        return _prepared_corpus(cfg)
    return _token_corpus(cfg)


# ---- sampling -------------------------------------------------------------------------------


class BatchSampler:
    """Batch i = `batch_size` windows of `seq_len + 1` tokens at offsets drawn from rng(seed, i).

    `tokens` is a 1-D array or a `ShardedTokens` (offsets are uniform over all shards together).

    `rows(i, rows)` returns the int32 windows for the given global row indices only, so each
    process can read just its own part of the global batch.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int, what: str = "train"):
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.n_starts = int(tokens.size) - seq_len
        if self.n_starts < 1:
            raise ConfigError(
                f"the {what} split has {tokens.size} tokens, fewer than model.seq_len+1="
                f"{seq_len + 1}; use a larger corpus or a shorter model.seq_len"
            )

    def offsets(self, i: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, i])
        return rng.integers(0, self.n_starts, size=self.batch_size)

    def rows(self, i: int, rows: Sequence[int] | np.ndarray | slice | None = None) -> np.ndarray:
        offs = self.offsets(i)
        sel = offs if rows is None else offs[rows]
        L1 = self.seq_len + 1
        out = np.empty((len(sel), L1), dtype=np.int32)
        for j, o in enumerate(sel):
            out[j] = self.tokens[o : o + L1]
        return out

    def batch(self, i: int) -> np.ndarray:
        """The whole global batch i, shape (batch_size, seq_len + 1), int32."""
        return self.rows(i)


def eval_sampler(val: np.ndarray, seq_len: int, batch_size: int) -> BatchSampler:
    """Fixed validation batches: identical for every run seed, so eval losses compare."""
    return BatchSampler(val, seq_len, batch_size, _EVAL_STREAM, what="validation")
