"""The one JSON writer: strict JSON (NaN and ±inf become `null`), numpy scalars and arrays as
plain numbers and lists, written atomically (temp file in the same directory, fsync, rename).

The atomic write is the write layer of every whole file scalelab writes (`atomic_output`, and
`write_text_atomic` / `write_bytes_atomic` on it): the report's HTML, Markdown, JSON and figures,
`collect`'s tables, `--json`, `summary.json`. A reader sees the previous complete file or the
new complete one, never half of one; a full disk leaves the previous file (or none) and raises
`models.base.diskspace.DiskFull`, which names the path, the free space and the bytes needed.

Every JSON output of scalelab goes through here — `summary.json`, `metrics.jsonl`, `report.json`,
the analysis commands' `--json` — so any strict reader (`json.loads(s, parse_constant=...)` that
rejects NaN, JavaScript's `JSON.parse`, jq) reads all of them.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from models.base.diskspace import DiskFull, is_disk_full


def to_strict(obj: Any) -> Any:
    """A copy of `obj` that strict JSON can hold: non-finite floats -> None, numpy -> Python,
    tuples -> lists, dataclass-like objects with `as_dict`/`to_dict` -> dicts, the rest -> str."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_strict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    try:
        import numpy as np  # lazy: the base imports nothing heavy

        if isinstance(obj, np.generic):
            return to_strict(obj.item())
        if isinstance(obj, np.ndarray):
            return to_strict(obj.tolist())
    except ImportError:  # pragma: no cover
        pass
    for name in ("as_dict", "to_dict"):
        if callable(getattr(obj, name, None)):
            return to_strict(getattr(obj, name)())
    return str(obj)


def dumps(obj: Any, indent: int | None = 1, sort_keys: bool = False) -> str:
    """Strict JSON text of `obj` (see `to_strict`); never contains NaN or Infinity."""
    return json.dumps(to_strict(obj), indent=indent, sort_keys=sort_keys, allow_nan=False)


def write_json_atomic(
    path: str | os.PathLike, obj: Any, indent: int | None = 1, sort_keys: bool = True
) -> None:
    """Write strict JSON to a temp file in the same directory, fsync, then rename over `path`,
    so a reader (or a crash) never sees half a file."""
    write_text_atomic(path, dumps(obj, indent=indent, sort_keys=sort_keys) + "\n")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False, needed: int | None = None) -> Iterator[IO]:
    """A file object whose contents appear at `path` whole, or not at all: written to a temporary
    name in the same directory, fsynced, then renamed over `path`. If the block (or the write)
    fails, the temporary file goes and `path` keeps its previous contents (or stays absent); a
    full disk is raised as DiskFull naming `path` (`needed`: the bytes it needed, when known)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "wb" if binary else "w") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise DiskFull.writing_file(path, needed) from e
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """`text` into `path` atomically (see `atomic_output`)."""
    with atomic_output(path, needed=len(text.encode())) as f:
        f.write(text)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """`data` into `path` atomically (see `atomic_output`)."""
    with atomic_output(path, binary=True, needed=len(data)) as f:
        f.write(data)


def write_figure_atomic(path: str | os.PathLike, fig: Any, **savefig: Any) -> None:
    """A matplotlib figure as the file `path` (format from its suffix), atomically: rendered in
    memory, then written as `write_bytes_atomic` writes (a full disk: DiskFull with the bytes
    needed, the previous figure kept)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    write_bytes_atomic(path, buf.getvalue())


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2, sort_keys: bool = False) -> None:
    """A command's `--json PATH` output: `-` writes to stdout, anything else atomically to the file."""
    if str(path) == "-":
        sys.stdout.write(dumps(obj, indent=indent, sort_keys=sort_keys) + "\n")
        sys.stdout.flush()
    else:
        write_json_atomic(path, obj, indent=indent, sort_keys=sort_keys)


def jsonl_line(record: Any) -> str:
    """One strict-JSON line (no trailing newline) for an append-only `.jsonl` log."""
    return dumps(record, indent=None)


def read_json(path: str | os.PathLike) -> Any | None:
    """The parsed file, or None when it is missing or not valid JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
