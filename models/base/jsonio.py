"""The one JSON writer: strict JSON (NaN and ±inf become `null`), numpy scalars and arrays as
plain numbers and lists, written atomically (temp file in the same directory, fsync, rename).

Every JSON output of scalelab goes through here — `summary.json`, `metrics.jsonl`, `report.json`,
the analysis commands' `--json` — so any strict reader (`json.loads(s, parse_constant=...)` that
rejects NaN, JavaScript's `JSON.parse`, jq) reads all of them.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


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


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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
