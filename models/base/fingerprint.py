"""The one fingerprint: a short stable hash of a JSON-able value.

Run ids of sweeps, the config fingerprint stored in `summary.json` (resume vs new run), RL warm
start cache keys and report run ids are all `fingerprint(...)` of the fields that make a run that
run, so one definition decides what "the same run" means.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FINGERPRINT_LEN = 16


def fingerprint(obj: Any, length: int = FINGERPRINT_LEN) -> str:
    """First `length` hex digits of sha256 over canonical JSON of `obj` (sorted keys, compact
    separators, non-JSON values as their str)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def diff_fields(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested field dicts (`key.sub: old -> new`)."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        name = f"{prefix}{k}"
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_fields(va, vb, name + ".")
        elif va != vb:
            out.append(f"{name}: {va!r} -> {vb!r}")
    return out
