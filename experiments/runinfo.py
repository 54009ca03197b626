"""Light helpers (no JAX import) used before any heavy work: config fingerprint, summary I/O.

`python -m experiments.train` checks `summary.json` with these before importing JAX, so that a
completed run started again exits in about a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

# Keys whose change makes a run a different run (resuming it would mix two experiments).
# Sharding, eval/ckpt/log cadence are excluded: a run may resume on another mesh.
FINGERPRINT_TRAIN_KEYS = ("batch_size", "micro_batch_size", "tokens", "steps", "seed")


def to_plain(cfg: Any) -> Any:
    """DictConfig / mapping -> plain resolved Python containers."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return cfg


def fingerprint_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    cfg = to_plain(cfg)
    train = cfg.get("train", {}) or {}
    return {
        "model": cfg.get("model"),
        "optim": cfg.get("optim"),
        "data": cfg.get("data"),
        "train": {k: train.get(k) for k in FINGERPRINT_TRAIN_KEYS},
    }


def config_fingerprint(cfg: Mapping[str, Any]) -> str:
    blob = json.dumps(fingerprint_fields(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def diff_fields(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two fingerprint field dicts."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        name = f"{prefix}{k}"
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_fields(va, vb, name + ".")
        elif va != vb:
            out.append(f"{name}: {va!r} -> {vb!r}")
    return out


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to a temp file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True, default=_json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _json_default(o: Any) -> Any:
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def write_failed_summary(run_dir: Path, base: Mapping[str, Any], err: BaseException, wall_time_s: float) -> None:
    """Best-effort `status: failed` summary.json: the error, and its traceback unless it is a
    ConfigError (whose message already says what to fix). Call from an `except` block."""
    from models.config import ConfigError

    summary = dict(base, status="failed", error=f"{type(err).__name__}: {err}", wall_time_s=wall_time_s)
    if not isinstance(err, ConfigError):
        summary["traceback"] = traceback.format_exc()
    try:
        write_json_atomic(run_dir / "summary.json", summary)
    except OSError:
        pass


def completed_summary(run_dir: Path, cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary of a completed run in `run_dir` with the same fingerprint, else None.

    Raises ValueError if the directory holds a completed run of a *different* config.
    """
    s = read_json(Path(run_dir) / "summary.json")
    if not s or s.get("status") != "completed":
        return None
    fp = config_fingerprint(cfg)
    if s.get("config_fingerprint") not in (None, fp):
        diffs = diff_fields(s.get("config_fields") or {}, fingerprint_fields(cfg))
        raise ValueError(f"{run_dir} already holds a completed run of another config "
                         f"({'; '.join(diffs[:3]) or 'fingerprint differs'}); choose another hydra.run.dir")
    return s


# ---- the command-line contract shared by `experiments.train` and `experiments.rl` ---------------
EXIT_CONFIG, EXIT_FAILED, EXIT_DIVERGED = 2, 1, 3


def fail(msg: str, code: int, multirun: bool) -> dict[str, Any]:
    """One `error: ...` line; exit with `code`, or in a multirun job return a failed status so
    the other jobs of the sweep go on."""
    print(f"error: {msg}", file=sys.stderr, flush=True)
    if not multirun:
        sys.exit(code)
    return {"status": "failed", "error": msg}


def run_guarded(run_fn: Callable[[Any, Path], dict[str, Any]], cfg: Any, run_dir: Path, multirun: bool,
                label: str = "training") -> dict[str, Any]:
    """`run_fn(cfg, run_dir)` under the contract: bad config -> exit 2, diverged -> exit 3, any
    other failure -> exit 1 with one line (the traceback is in summary.json), never a traceback."""
    from models.config import ConfigError

    try:
        summary = run_fn(cfg, run_dir)
    except ConfigError as e:
        return fail(str(e), EXIT_CONFIG, multirun)
    except KeyboardInterrupt:
        return fail(f"interrupted; start the same command again to resume from the last checkpoint "
                    f"in {run_dir}", 130, multirun)
    except Exception as e:  # noqa: BLE001 - one line here, the traceback is in summary.json
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return fail(f"{label} failed: {type(e).__name__}: {msg[:300]} (traceback in "
                    f"{run_dir / 'summary.json'})", EXIT_FAILED, multirun)
    if summary.get("status") == "diverged" and not multirun:
        print(f"error: {label} diverged at step {summary.get('steps_done')}; metrics kept in "
              f"{run_dir / 'metrics.jsonl'}", file=sys.stderr, flush=True)
        sys.exit(EXIT_DIVERGED)
    return summary
