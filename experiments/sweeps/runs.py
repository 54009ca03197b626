"""Deterministic run identity and on-disk status, the two halves of idempotent sweeps.

A run's id is a hash of its resolved configuration (everything the training code sees, minus
Hydra's own settings and the `sweep` bookkeeping node), so the same run always lands in the same
directory: `<sweep dir>/<label>_<id>`. Relaunching a sweep therefore finds every earlier run by
path and decides from its `summary.json` alone what to do:

* `completed`               -> skip (not even launched, so Hydra rewrites nothing in it);
* `diverged` / `failed`     -> skip, unless the sweep asks for `sweep.rerun_failed=true`;
* `stopped` (sweep.early_stop: its forecast lost its rung) -> skip while the sweep stops runs early,
  else launch: it resumes from its checkpoint and trains to its end;
* anything else (no summary, or a summary from an unfinished run, or a `failed` one whose error
  is a full disk: models/base/diskspace.py) -> launch; the training code resumes from the run's
  latest checkpoint.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Iterable, Mapping

from experiments.rundir import without_moe_keys
from models.base.diskspace import disk_full_summary
from models.base.fingerprint import fingerprint
from models.base.rundir import FINISHED_BAD, ReadStatus, RunDir, RunStatus

FINISHED_OK = RunStatus.COMPLETED
# Config keys that change how a run is run, not what it learns: left out of every run id. A WSD
# branch (`train.branch_from`, `train.branch_step`) equals the same run trained alone.
_HOW_IT_RUNS = ("train.ckpt_every_s", "train.async_checkpoints", "train.branch_from", "train.branch_step")
ID_LEN = 10


def _drop(tree: dict[str, Any], dotted: str) -> None:
    node: Any = tree
    parts = dotted.split(".")
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            return
        node = node[p]
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def identity(run_cfg: Mapping[str, Any], ignore: Iterable[str] = ()) -> dict[str, Any]:
    """The part of a resolved run config that defines the run (no `hydra`, no `sweep`)."""
    tree = without_moe_keys(json.loads(json.dumps(dict(run_cfg), default=str)))  # dense: as before MoE
    tree.pop("hydra", None)
    tree.pop("sweep", None)
    tree.pop("tracker", None)  # where metrics are mirrored, not what is trained
    _drop(tree, "train.profile_steps")  # a trace of some steps does not change them
    for key in _HOW_IT_RUNS:
        _drop(tree, key)
    if (tree.get("train") or {}).get("branch_points") is None:
        _drop(tree, "train.branch_points")  # not a trunk: the id it had before trunks existed
    if (tree.get("data") or {}).get("max_unique_tokens") is None:
        _drop(tree, "data.max_unique_tokens")  # the whole split: the id it had before the cap existed
    if not (tree.get("eval") or {}).get("tasks"):
        tree.pop("eval", None)  # no downstream tasks: the id it had before `eval.*` existed
    model = tree.get("model")
    if (
        isinstance(model, dict)
        and model.get("parametrization", "sp") == "sp"
        and model.get("mup_base_d_model") is None
    ):
        # standard parametrisation: the id it had before µP existed
        model.pop("parametrization", None)
        model.pop("mup_base_d_model", None)
    for key in ignore:
        _drop(tree, key)
    return tree


def run_id(run_cfg: Mapping[str, Any], ignore: Iterable[str] = ()) -> str:
    """Stable short hash of `identity(run_cfg)` (canonical JSON, sorted keys)."""
    return fingerprint(identity(run_cfg, ignore), ID_LEN)


def run_dirname(label: str, rid: str) -> str:
    return f"{label}_{rid}"


def read_status(run_dir: pathlib.Path) -> RunStatus | ReadStatus:
    """`completed` | `diverged` | `failed` | `stopped` (early) | `interrupted` (dir exists,
    unfinished) | `new`."""
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        return ReadStatus.NEW
    status = rd.status
    if status == RunStatus.FAILED and disk_full_summary(rd.read_summary().error):
        return ReadStatus.INTERRUPTED  # stopped on a full disk: resumable, not failed for good
    if status == FINISHED_OK or status in FINISHED_BAD or status == RunStatus.STOPPED:
        return status
    return ReadStatus.INTERRUPTED


def decide(status: str, rerun_failed: bool, early_stop: bool = False) -> tuple[bool, str]:
    """(launch?, why) for a run found in `status`; a run stopped early is kept while the sweep
    stops runs early (`early_stop`), else resumed from its checkpoint to its end."""
    if status == FINISHED_OK:
        return False, "completed earlier; reused"
    if status == RunStatus.STOPPED:
        if early_stop:
            return (
                False,
                "stopped early (its forecast lost its rung); kept (sweep.early_stop=null resumes it)",
            )
        return True, "stopped early; resuming from its checkpoint to its end (sweep.early_stop is off)"
    if status in FINISHED_BAD:
        if rerun_failed:
            return True, f"{status} earlier; re-running (sweep.rerun_failed=true)"
        return False, f"{status} earlier; kept (set sweep.rerun_failed=true to re-run)"
    if status == ReadStatus.INTERRUPTED:
        return True, "interrupted earlier; resuming from its checkpoint"
    return True, ReadStatus.NEW.value
