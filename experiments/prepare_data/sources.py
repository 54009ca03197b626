"""Input documents: which files, what a document is in each, and a cheap count of them.

* plain text (any other suffix, `.gz` allowed): the whole file is one document (UTF-8, invalid
  bytes replaced);
* JSON Lines (`.jsonl`, `.ndjson`, `.json`, `.gz` allowed): one document per line, the string in
  field `--text-column` (default `text`);
* Parquet (`.parquet`) and Arrow IPC (`.arrow`, `.feather`, `.ipc`; file or stream format, as
  Hugging Face `datasets` writes its cache): one document per row of the text column.

Read with the standard library and pyarrow (already a scalelab dependency) rather than
`datasets`: these are the only formats it would read locally, and it would add a large
dependency tree for no more than a column scan. Whitespace-only documents and nulls are skipped.
Documents come in a fixed order (inputs as given, directories and globs sorted, rows in file
order), which is what makes an interrupted preparation resumable.
"""

from __future__ import annotations

import dataclasses
import glob as globlib
import gzip
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Iterator

from models.base.errors import ScalelabError

JSONL = (".jsonl", ".ndjson", ".json")
PARQUET = (".parquet",)
ARROW = (".arrow", ".feather", ".ipc")


class PrepareError(ScalelabError):
    """Bad input to prepare_data; the command prints the message as one line."""


@dataclasses.dataclass(frozen=True)
class Source:
    path: Path
    kind: str  # text | jsonl | parquet | arrow
    gz: bool = False


def _kind(p: Path) -> Source:
    name = p.name.lower()
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    suffix = os.path.splitext(name)[1]
    if suffix in PARQUET + ARROW and gz:
        raise PrepareError(f"{p}: compressed {suffix} files are not supported; decompress it first")
    kind = (
        "jsonl"
        if suffix in JSONL
        else "parquet"
        if suffix in PARQUET
        else "arrow"
        if suffix in ARROW
        else "text"
    )
    return Source(p, kind, gz)


def expand_inputs(inputs: list[str]) -> list[Source]:
    """Files named by `inputs` (files, directories walked recursively, or globs), in order."""
    files: list[Path] = []
    for item in inputs:
        s = os.path.expanduser(item)
        if any(ch in s for ch in "*?["):
            hits = sorted(Path(h) for h in globlib.glob(s, recursive=True))
            if not hits:
                raise PrepareError(f"no files match {item!r}")
            files += [h for h in hits if h.is_file()]
        elif Path(s).is_dir():
            found = sorted(
                p
                for p in Path(s).rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(s).parts)
            )
            if not found:
                raise PrepareError(f"directory {item} holds no files")
            files += found
        elif Path(s).is_file():
            files.append(Path(s))
        else:
            raise PrepareError(f"input not found: {item}")
    if not files:
        raise PrepareError("no input files (give text, JSONL, Parquet or Arrow files, directories or globs)")
    return [_kind(p) for p in files]


def inputs_identity(sources: list[Source]) -> list[list]:
    """Path, size and mtime of every input: what a resumed preparation must find unchanged."""
    out = []
    for s in sources:
        st = s.path.stat()
        out.append([str(s.path.resolve()), st.st_size, st.st_mtime_ns])
    return out


def _open_text(s: Source) -> io.TextIOBase:
    raw = gzip.open(s.path, "rb") if s.gz else open(s.path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def _jsonl_docs(s: Source, column: str) -> Iterator[str | None]:
    with _open_text(s) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise PrepareError(f"{s.path} line {lineno}: not JSON ({e})") from None
            if isinstance(row, str):
                yield row
                continue
            if not isinstance(row, dict) or column not in row:
                fields = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise PrepareError(
                    f"{s.path} line {lineno} has no field {column!r} (has {fields}); pass --text-column"
                )
            v = row[column]
            if v is not None and not isinstance(v, str):
                raise PrepareError(
                    f"{s.path} line {lineno}: field {column!r} is {type(v).__name__}, not text"
                )
            yield v


def _arrow_batches(s: Source, column: str):
    # deferred: pyarrow only for Parquet / Arrow sources (a text or JSONL corpus never loads it)
    import pyarrow as pa
    import pyarrow.parquet as pq

    if s.kind == "parquet":
        try:
            pf = pq.ParquetFile(s.path)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise PrepareError(f"{s.path}: not a readable Parquet file ({e})") from None
        schema = pf.schema_arrow
        _check_column(s, schema, column)
        yield from pf.iter_batches(batch_size=1024, columns=[column])
        return
    source = pa.memory_map(str(s.path))
    try:
        reader = pa.ipc.open_file(source)
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_stream(pa.memory_map(str(s.path)))
        except pa.ArrowInvalid as e:
            raise PrepareError(f"{s.path}: not an Arrow IPC file or stream ({e})") from None
        batches = iter(reader)
    _check_column(s, reader.schema, column)
    for b in batches:
        yield b.select([column])


def _check_column(s: Source, schema, column: str) -> None:
    import pyarrow as pa  # deferred: pyarrow only for Parquet / Arrow sources

    if column not in schema.names:
        raise PrepareError(
            f"{s.path} has no column {column!r} (columns: {', '.join(schema.names)}); pass --text-column"
        )
    t = schema.field(column).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise PrepareError(f"{s.path}: column {column!r} is {t}, not text")


def iter_documents(sources: list[Source], column: str = "text") -> Iterator[str]:
    """Every non-blank document of `sources`, in order."""
    for s in sources:
        if s.kind == "text":
            with _open_text(s) as f:
                docs: Iterator[str | None] = iter([f.read()])
        elif s.kind == "jsonl":
            docs = _jsonl_docs(s, column)
        else:
            docs = (v for b in _arrow_batches(s, column) for v in b.column(0).to_pylist())
        for d in docs:
            if d is not None and d.strip():
                yield d


def count_documents(sources: list[Source], column: str = "text") -> int:
    """An upper bound on the document count (blank ones are counted), cheap: for the progress bar."""
    n = 0
    for s in sources:
        if s.kind == "text":
            n += 1
        elif s.kind == "jsonl":
            with gzip.open(s.path, "rb") if s.gz else open(s.path, "rb") as f:
                n += sum(1 for line in f if line.strip())
        elif s.kind == "parquet":
            import pyarrow.parquet as pq  # deferred: pyarrow only for Parquet / Arrow sources

            try:
                n += pq.ParquetFile(s.path).metadata.num_rows
            except Exception:  # noqa: BLE001 - reported properly when the file is read
                pass
        else:
            n += sum(b.num_rows for b in _arrow_batches(s, column))
    return n


def doc_is_val(text: str, val_fraction: float) -> bool:
    """Held-out by a hash of the document's text: stable across runs and worker counts, and
    duplicate documents land on the same side (no train/val leak through duplicates)."""
    h = int.from_bytes(hashlib.sha256(text.encode("utf-8", "replace")).digest()[:8], "big")
    return h / 2**64 < val_fraction
