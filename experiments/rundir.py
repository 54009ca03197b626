"""Run-directory bookkeeping and the command-line contract shared by `python -m
experiments.train` and `python -m experiments.rl` (no JAX import).

`python -m experiments.train` checks `summary.json` with these before importing JAX, so that a
completed run started again exits in about a second.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from models.base.configs import to_plain
from models.base.errors import ConfigError
from models.base.fingerprint import diff_fields, fingerprint
from models.base.jsonio import read_json, write_json_atomic

# Keys whose change makes a run a different run (resuming it would mix two experiments).
# Sharding, eval/ckpt/log cadence are excluded: a run may resume on another mesh.
FINGERPRINT_TRAIN_KEYS = ("batch_size", "micro_batch_size", "tokens", "steps", "seed")


def fingerprint_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a training config that make a run that run (see FINGERPRINT_TRAIN_KEYS)."""
    cfg = to_plain(cfg)
    train = cfg.get("train", {}) or {}
    return {
        "model": cfg.get("model"),
        "optim": cfg.get("optim"),
        "data": cfg.get("data"),
        "train": {k: train.get(k) for k in FINGERPRINT_TRAIN_KEYS},
    }


def config_fingerprint(cfg: Mapping[str, Any]) -> str:
    return fingerprint(fingerprint_fields(cfg))


def same_run(stored: Mapping[str, Any], cfg: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether `summary.json` fields `stored` describe the run `cfg` asks for, and the differences.

    Compares the stored `config_fields` (robust to how the fingerprint is spelled); falls back
    to the fingerprint for summaries without fields."""
    fields = fingerprint_fields(cfg)
    if stored.get("config_fields") is not None:
        diffs = diff_fields(to_plain_json(stored["config_fields"]), to_plain_json(fields))
        return not diffs, diffs
    fp = stored.get("config_fingerprint")
    return fp in (None, fingerprint(fields)), []


def to_plain_json(obj: Any) -> Any:
    """`obj` as it reads back from JSON (tuples -> lists), so stored and live fields compare."""
    return json.loads(json.dumps(obj, default=str))


def write_failed_summary(run_dir: Path, base: Mapping[str, Any], err: BaseException, wall_time_s: float) -> None:
    """Best-effort `status: failed` summary.json: the error, and its traceback unless it is a
    ConfigError (whose message already says what to fix). Call from an `except` block."""
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
    same, diffs = same_run(s, cfg)
    if not same:
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
