"""`prepare(opts)`: documents -> tokenizer -> token shards + meta.json (the format in format.py).

Work is cut into chunks of consecutive documents (about CHUNK_CHARS characters each); worker
processes tokenize chunks while the main process reads the next ones and writes shards in chunk
order, so the output does not depend on the number of workers. A shard is flushed at a chunk
boundary once it holds `shard_tokens` training tokens, together with the held-out tokens of the
same chunks (`val_part_N.bin`, joined into val.bin at the end), each file written atomically and
then recorded in progress.json. Re-running the same command after an interruption reads
progress.json and skips the chunks of every recorded shard (they are read, not tokenized).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from experiments.prepare_data import format as fmt
from experiments.prepare_data.sources import (
    PrepareError,
    Source,
    count_documents,
    doc_is_val,
    expand_inputs,
    inputs_identity,
    iter_documents,
)
from experiments.prepare_data.tokenizer import find_eot, load_tokenizer, train_bpe
from models.base.portable import available_cpus

CHUNK_CHARS = 1 << 19  # characters of text per work item (a few hundred ms of tokenizing)
DEFAULT_VOCAB = 8192


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """The command line of `python -m experiments.prepare_data` (see __main__.py for each flag)."""

    inputs: tuple[str, ...]
    out: Path
    tokenizer: Path | None = None
    vocab_size: int | None = None
    text_column: str = "text"
    val_fraction: float = 0.05
    shard_tokens: int = 100_000_000
    workers: int = 0  # 0 = every CPU this process may use
    chunk_chars: int = CHUNK_CHARS  # characters per work item (tests make it small)
    tokenizer_train_chars: int | None = 1_000_000_000
    eot_token: str | None = None
    pad_vocab_multiple: int = 1
    overwrite: bool = False
    progress: bool = True

    def check(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise PrepareError(f"--val-fraction must be in (0, 1) (got {self.val_fraction})")
        for name in ("shard_tokens", "pad_vocab_multiple", "chunk_chars"):
            if getattr(self, name) < 1:
                raise PrepareError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.workers < 0:
            raise PrepareError(f"--workers must be >= 0 (got {self.workers})")


@dataclasses.dataclass
class _Chunk:
    """What one work item gave: tokens of its train and held-out documents, and counts."""

    train: np.ndarray
    val: np.ndarray
    train_docs: int
    val_docs: int
    text_bytes: int


def n_cpus() -> int:
    return len(available_cpus())


# ---- the worker side -----------------------------------------------------------------------

_W: dict[str, Any] = {}


def _init_worker(tokenizer_path: str, eot_id: int, dtype: str, val_fraction: float, threads: bool) -> None:
    """Load the tokenizer once per worker. Worker processes tokenize single-threaded (the
    parallelism is the processes); in-process (`--workers 1`) the library's own threads are off too."""
    if not threads:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tok = load_tokenizer(Path(tokenizer_path))
    tok.encode_special_tokens = True  # a literal "<|endoftext|>" in a document is text, not a separator
    _W.update(tok=tok, eot=eot_id, dtype=np.dtype(dtype), val_fraction=val_fraction)


def _tokenize(docs: list[str]) -> _Chunk:
    tok, eot, dtype = _W["tok"], _W["eot"], _W["dtype"]
    parts: dict[bool, list[np.ndarray]] = {False: [], True: []}
    nbytes = 0
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # _fast: no offsets (~25% faster)
    for doc, enc in zip(docs, encode(docs, add_special_tokens=False)):
        ids = enc.ids
        arr = np.empty(len(ids) + 1, dtype=dtype)
        arr[0] = eot
        arr[1:] = ids
        parts[doc_is_val(doc, _W["val_fraction"])].append(arr)
        nbytes += len(doc.encode("utf-8", "replace"))
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype)  # noqa: E731
    return _Chunk(cat(parts[False]), cat(parts[True]), len(parts[False]), len(parts[True]), nbytes)


# ---- the main process ----------------------------------------------------------------------


def _chunks(docs: Iterable[str], chunk_chars: int) -> Iterator[list[str]]:
    buf: list[str] = []
    size = 0
    for d in docs:
        buf.append(d)
        size += len(d)
        if size >= chunk_chars:
            yield buf
            buf, size = [], 0
    if buf:
        yield buf


def _ordered_map(
    fn: Callable[[Any], Any], items: Iterator[Any], pool: cf.Executor | None, depth: int
) -> Iterator[tuple[Any, bool]]:
    """(fn(item), more results follow) in item order, with at most `depth` items read ahead (a
    pool's own map would read the whole input into its queue)."""
    q: collections.deque = collections.deque()
    exhausted = False

    def fill() -> None:
        nonlocal exhausted
        while not exhausted and len(q) < depth:
            try:
                x = next(items)
            except StopIteration:
                exhausted = True
                return
            q.append(pool.submit(fn, x) if pool else x)

    fill()
    while q:
        head = q.popleft()
        r = head.result() if pool else fn(head)
        fill()
        yield r, bool(q)


class _Progress:
    """tqdm over documents on a terminal; a line every 30 s otherwise (logs of batch jobs)."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.enabled, self.total, self.docs, self.nbytes = enabled, total, 0, 0
        self.t0 = self.t_line = time.time()
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm  # deferred: a progress bar only on a terminal
            except ImportError:
                return
            self.bar = tqdm(total=total, unit="doc", dynamic_ncols=True, file=sys.stderr, mininterval=0.5)

    def update(self, docs: int, nbytes: int) -> None:
        self.docs += docs
        self.nbytes += nbytes
        if self.bar is not None:
            self.bar.update(docs)
            self.bar.set_postfix_str(f"{self.nbytes / 1e6:,.0f} MB", refresh=False)
        elif self.enabled and time.time() - self.t_line > 30:
            self.t_line = time.time()
            print(
                f"tokenized {self.docs:,}/{self.total:,} documents, {self.nbytes / 1e6:,.1f} MB "
                f"({self.nbytes / 1e6 / (self.t_line - self.t0):.2f} MB/s)",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _say(msg: str) -> None:
    print(msg, flush=True)


def _fingerprint(opts: PrepareOptions, sources: list[Source]) -> str:
    """A hash of everything the output depends on (not the worker count): a re-run resumes, or
    finds its work done, only if it is equal."""
    tok = (
        {"file_sha256": fmt.sha256_file(opts.tokenizer)}
        if opts.tokenizer
        else {"train_bpe": opts.vocab_size or DEFAULT_VOCAB, "train_chars": opts.tokenizer_train_chars}
    )
    fields = {
        "format_version": fmt.FORMAT_VERSION,
        "inputs": inputs_identity(sources),
        "text_column": opts.text_column,
        "val_fraction": opts.val_fraction,
        "shard_tokens": opts.shard_tokens,
        "tokenizer": tok,
        "eot_token": opts.eot_token,
        "vocab_size": opts.vocab_size,
        "pad_vocab_multiple": opts.pad_vocab_multiple,
        "chunk_chars": opts.chunk_chars,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


_SHARD_FILE = re.compile(r"(train|val_part)_\d{6}\.bin")


def _clear(out: Path, keep: tuple[str, ...] = ()) -> None:
    """Remove what a preparation writes in `out` (and nothing else), except the names in `keep`."""
    for p in out.iterdir():
        ours = (
            p.name in (fmt.META, fmt.PROGRESS, fmt.VAL, fmt.TOKENIZER)
            or _SHARD_FILE.fullmatch(p.name)
            or (p.name.startswith(".") and p.name.endswith(".tmp"))
        )
        if ours and p.is_file() and p.name not in keep:
            p.unlink()


def _existing_state(out: Path, fp: str, overwrite: bool) -> tuple[dict | None, dict | None]:
    """(finished meta.json, unfinished progress.json) of this same preparation in `out`, if any."""
    if overwrite and out.exists():
        _clear(out)
    for name, what in ((fmt.META, "a corpus prepared"), (fmt.PROGRESS, "an unfinished preparation")):
        p = out / name
        if not p.is_file():
            continue
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            rec = {}
        if rec.get("preparation_id") != fp:
            raise PrepareError(
                f"{out} already holds {what} from other inputs or options; pass --overwrite "
                "to replace it, or choose another --out"
            )
        if name == fmt.META:  # finished: tidy what an interruption after meta.json may have left
            _clear(out, keep=(fmt.META, fmt.TOKENIZER, fmt.VAL, *(s["name"] for s in rec.get("shards", []))))
            return rec, None
        return None, rec
    return None, None


def _make_tokenizer(
    opts: PrepareOptions, sources: list[Source], progress: dict | None, n_docs: int
) -> tuple[Any, str]:
    """(tokenizer, sha256 of out/tokenizer.json): the user's file copied verbatim, the one an
    interrupted run already trained, or a byte-level BPE trained now."""
    dest = opts.out / fmt.TOKENIZER
    if opts.tokenizer is not None:
        tok = load_tokenizer(opts.tokenizer)
        if not (dest.is_file() and fmt.sha256_file(dest) == fmt.sha256_file(opts.tokenizer)):
            fmt.write_atomic(dest, opts.tokenizer.read_bytes())
        return tok, fmt.sha256_file(dest)
    if progress and dest.is_file() and fmt.sha256_file(dest) == progress.get("tokenizer_sha256"):
        return load_tokenizer(dest), progress["tokenizer_sha256"]
    vocab = opts.vocab_size or DEFAULT_VOCAB
    t0 = time.time()
    docs = iter_documents(sources, opts.text_column)
    first = next(docs, None)
    if first is None:
        raise PrepareError("the inputs hold no text (every document is empty or blank)")
    tok = train_bpe(_prepend(first, docs), vocab, n_docs, opts.tokenizer_train_chars)
    fmt.write_atomic(dest, tok.to_str())
    _say(
        f"trained a byte-level BPE tokenizer: {tok.get_vocab_size():,} tokens (asked {vocab:,}) in "
        f"{time.time() - t0:.1f}s"
    )
    return load_tokenizer(dest), fmt.sha256_file(dest)


def _prepend(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def _vocab(opts: PrepareOptions, tok: Any) -> tuple[int, int]:
    """(vocab_size for the model: ids padded up to --pad-vocab-multiple, the tokenizer's own)."""
    own = max(tok.get_vocab(with_added_tokens=True).values()) + 1
    m = opts.pad_vocab_multiple
    padded = -(-own // m) * m
    if opts.tokenizer is not None and opts.vocab_size is not None and opts.vocab_size != padded:
        raise PrepareError(
            f"tokenizer/vocab mismatch: --vocab-size {opts.vocab_size} but {opts.tokenizer} "
            f"has {own:,} tokens{f' ({padded:,} padded)' if padded != own else ''}; "
            "drop --vocab-size"
        )
    return padded, own


@dataclasses.dataclass
class _Pending:
    """Tokens of the chunks since the last flushed shard."""

    train: list[np.ndarray] = dataclasses.field(default_factory=list)
    val: list[np.ndarray] = dataclasses.field(default_factory=list)
    train_docs: int = 0
    val_docs: int = 0
    text_bytes: int = 0
    chunks: int = 0

    def add(self, c: _Chunk) -> None:
        self.train.append(c.train)
        self.val.append(c.val)
        self.train_docs += c.train_docs
        self.val_docs += c.val_docs
        self.text_bytes += c.text_bytes
        self.chunks += 1

    @property
    def train_tokens(self) -> int:
        return sum(a.size for a in self.train)


def _flush(out: Path, progress: dict, pend: _Pending, dtype: str) -> None:
    """Write the pending tokens as the next shard (and its held-out part), then record it."""
    i = len(progress["shards"])
    train = np.concatenate(pend.train).astype(dtype, copy=False)
    fmt.write_atomic(out / fmt.shard_name(i), train)
    entry = {
        "name": fmt.shard_name(i),
        "tokens": int(train.size),
        "documents": pend.train_docs,
        "sha256": hashlib.sha256(memoryview(train).cast("B")).hexdigest(),
        "text_bytes": pend.text_bytes,
        "chunks_end": progress["chunks_done"] + pend.chunks,
        "val_part": None,
    }
    val = np.concatenate(pend.val).astype(dtype, copy=False) if pend.val else np.zeros(0, dtype)
    if val.size:
        fmt.write_atomic(out / fmt.val_part_name(i), val)
        entry["val_part"] = {
            "name": fmt.val_part_name(i),
            "tokens": int(val.size),
            "documents": pend.val_docs,
        }
    progress["shards"].append(entry)
    progress["chunks_done"] = entry["chunks_end"]
    fmt.write_json(out / fmt.PROGRESS, progress)


def _tail_split(buf: np.ndarray, eot: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(train, val, val documents, cut between documents) when no document fell into the
    held-out split (a tiny input): the last documents become validation, or the tail of the
    last one if it is alone."""
    if buf.size < 2:
        raise PrepareError(
            f"the inputs tokenize to {buf.size} token(s): too little text for a train and a validation split"
        )
    target = max(1, int(round(val_fraction * buf.size)))
    starts = np.flatnonzero(buf == eot)
    ok = starts[(starts > 0) & (buf.size - starts >= target)]
    cut = int(ok.max()) if ok.size else buf.size - min(target, buf.size - 1)
    return buf[:cut], buf[cut:], max(1, int(np.sum(starts >= cut))), bool(ok.size)


def _write_val(out: Path, parts: list[Path | np.ndarray], dtype: str) -> dict[str, Any]:
    """Join the held-out parts into val.bin (streamed: parts may be large)."""
    h, n = hashlib.sha256(), 0
    tmp = out / f".{fmt.VAL}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        for part in parts:
            arr = np.fromfile(part, dtype=dtype) if isinstance(part, Path) else part.astype(dtype, copy=False)
            b = memoryview(np.ascontiguousarray(arr)).cast("B")
            f.write(b)
            h.update(b)
            n += arr.size
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out / fmt.VAL)
    return {"name": fmt.VAL, "tokens": n, "sha256": h.hexdigest()}


def prepare(opts: PrepareOptions, on_shard: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Prepare (or finish preparing) `opts.out`; returns its meta.json. `on_shard(i)` is called
    after shard i is durably recorded (tests use it to interrupt a preparation)."""
    opts.check()
    sources = expand_inputs(list(opts.inputs))
    opts.out.mkdir(parents=True, exist_ok=True)
    fp = _fingerprint(opts, sources)
    done, progress = _existing_state(opts.out, fp, opts.overwrite)
    if done is not None:
        _say(
            f"{opts.out} is already prepared ({done['train_tokens']:,} train + {done['val_tokens']:,} "
            "validation tokens); nothing to do"
        )
        return done
    t0 = time.time()
    n_docs = count_documents(sources, opts.text_column)
    tok, tok_sha = _make_tokenizer(opts, sources, progress, n_docs)
    eot_id, eot_token = find_eot(tok, opts.eot_token)
    vocab, own_vocab = _vocab(opts, tok)
    dtype = fmt.dtype_for_vocab(vocab)
    if progress is None or progress.get("tokenizer_sha256") != tok_sha:
        _clear(opts.out, keep=(fmt.TOKENIZER,))  # shards of an earlier attempt, if any
        progress = {"preparation_id": fp, "tokenizer_sha256": tok_sha, "chunks_done": 0, "shards": []}
        fmt.write_json(opts.out / fmt.PROGRESS, progress)
    elif progress["shards"]:
        _say(f"resuming: {len(progress['shards'])} shard(s) already written, skipping their documents")
    meta = _tokenize_all(opts, sources, n_docs, progress, on_shard, tok_sha, eot_id, dtype)
    meta.update(
        vocab_size=vocab,
        tokenizer_vocab_size=own_vocab,
        eot_token=eot_token,
        tokenizer_source=str(opts.tokenizer.resolve()) if opts.tokenizer else "trained byte-level BPE",
        preparation_id=fp,
        inputs={"files": len(sources), "bytes": sum(s.path.stat().st_size for s in sources)},
    )
    fmt.write_json(opts.out / fmt.META, meta)
    for p in list(opts.out.glob("val_part_*.bin")) + [opts.out / fmt.PROGRESS]:
        p.unlink(missing_ok=True)
    dt = time.time() - t0
    _say(
        f"prepared {opts.out}: {meta['documents']:,} documents, "
        f"{meta['text_bytes'] / 1e6:,.1f} MB of text -> "
        f"{meta['train_tokens']:,} train tokens in {len(meta['shards'])} shard(s) + {meta['val_tokens']:,} "
        f"validation tokens ({meta['text_bytes'] / max(1, meta['train_tokens'] + meta['val_tokens']):.2f} "
        f"bytes/token), vocab {vocab:,} {dtype}, {dt:.1f}s"
    )
    return meta


def _tokenize_all(
    opts: PrepareOptions,
    sources: list[Source],
    n_docs: int,
    progress: dict,
    on_shard: Callable[[int], None] | None,
    tok_sha: str,
    eot_id: int,
    dtype: str,
) -> dict[str, Any]:
    """The tokenizing pass (skipping recorded shards' chunks) and the closing files; the
    corpus part of meta.json."""
    workers = opts.workers or n_cpus()
    skip = progress["chunks_done"]
    bar = _Progress(n_docs, opts.progress)

    def todo() -> Iterator[list[str]]:
        for k, chunk in enumerate(_chunks(iter_documents(sources, opts.text_column), opts.chunk_chars)):
            if k < skip:
                bar.update(len(chunk), 0)
            else:
                yield chunk

    init = (str(opts.out / fmt.TOKENIZER), eot_id, dtype, opts.val_fraction, False)
    pool = None
    if workers > 1:
        pool = cf.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker, initargs=init
        )
    else:
        _init_worker(*init)
    pend = _Pending()
    try:
        for chunk, more in _ordered_map(_tokenize, todo(), pool, depth=2 * workers):
            pend.add(chunk)
            bar.update(chunk.train_docs + chunk.val_docs, chunk.text_bytes)
            if more and pend.train_tokens >= opts.shard_tokens:
                _flush(opts.out, progress, pend, dtype)
                pend = _Pending()
                if on_shard is not None:
                    on_shard(len(progress["shards"]) - 1)
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return _finish(opts, progress, pend, tok_sha, eot_id, dtype)


def _finish(
    opts: PrepareOptions, progress: dict, pend: _Pending, tok_sha: str, eot_id: int, dtype: str
) -> dict[str, Any]:
    """Last shard, val.bin, and the corpus part of meta.json."""
    shards = progress["shards"]
    documents = sum(s["documents"] + (s["val_part"] or {}).get("documents", 0) for s in shards)
    documents += pend.train_docs + pend.val_docs
    if documents == 0:
        raise PrepareError("the inputs hold no text (every document is empty or blank)")
    last = np.concatenate(pend.train) if pend.train else np.zeros(0, dtype)
    val_parts: list[Path | np.ndarray] = [opts.out / s["val_part"]["name"] for s in shards if s["val_part"]]
    tail_val = np.concatenate(pend.val) if pend.val else np.zeros(0, dtype)
    val_docs = sum(s["val_part"]["documents"] for s in shards if s["val_part"]) + pend.val_docs
    text_bytes = sum(s["text_bytes"] for s in shards) + pend.text_bytes
    split = "doc_hash"
    if (not val_parts and tail_val.size == 0) or (not shards and last.size == 0):
        # Too few documents for the hash split: hold out the tail of the token stream instead.
        buf = np.concatenate([last, tail_val])
        last, tail_val, val_docs, whole = _tail_split(buf, eot_id, opts.val_fraction)
        pend.train_docs = pend.train_docs + pend.val_docs - val_docs + (0 if whole else 1)
        split = "tail"
    if last.size:
        pend.train, pend.val, pend.val_docs = [last], [], 0
        _flush(opts.out, progress, pend, dtype)  # its held-out tokens are tail_val, below
    val = _write_val(opts.out, val_parts + [tail_val], dtype)
    val["documents"] = val_docs
    shard_list = [{k: s[k] for k in ("name", "tokens", "documents", "sha256")} for s in shards]
    train_docs = sum(s["documents"] for s in shards)
    return {
        "format_version": fmt.FORMAT_VERSION,
        "dtype": dtype,
        "eot_id": eot_id,
        "tokenizer_sha256": tok_sha,
        "train_tokens": sum(s["tokens"] for s in shards),
        "val_tokens": val["tokens"],
        "shards": shard_list,
        "val": val,
        "documents": documents,
        "train_documents": train_docs,
        "val_documents": val_docs,
        "text_bytes": text_bytes,
        "split": split,
        "val_fraction": opts.val_fraction,
        "corpus_sha256": fmt.corpus_sha256(tok_sha, shard_list, val),
    }
