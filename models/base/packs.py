"""A pack job's manifest: the runs one process trains together (experiments/train/pack.py).

Written by the sweeper (`sweep.pack`) and the packing launcher, read by the pack job
(`+pack.manifest=<file>`); a file of its own so both sides share it without importing each other.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from models.base.errors import ConfigError
from models.base.fingerprint import fingerprint
from models.base.jsonio import write_json_atomic

MANIFEST_KEY = "pack.manifest"  # the config key of a pack job
PACKS_DIR = ".scalelab_packs"  # under a sweep dir: pack jobs' manifests and logs (analysis skips .scalelab*)
SUBDIR_OVERRIDE = "hydra.sweep.subdir="  # the override that names a job's directory


@dataclasses.dataclass(frozen=True)
class Member:
    """One run of a pack."""

    run_dir: Path  # its own run directory (as if trained alone)
    run_id: str  # its directory name, `<label>_<id>` (summary.json `packed_with` lists these)
    config: dict[str, Any]  # its resolved run config (no `hydra` node)
    overrides: tuple[str, ...] = ()  # the Hydra overrides that compose it (.hydra/overrides.yaml)


def write_manifest(path: Path, members: Sequence[Member], concurrency: int) -> None:
    """The pack job's member list (strict JSON, atomic)."""
    write_json_atomic(
        Path(path),
        {
            "concurrency": int(concurrency),
            "members": [
                {
                    "run_dir": str(m.run_dir),
                    "run_id": m.run_id,
                    "config": m.config,
                    "overrides": list(m.overrides),
                }
                for m in members
            ],
        },
    )


def read_manifest(path: Path) -> tuple[list[Member], int]:
    """(members, concurrency) of a manifest written by `write_manifest`; ConfigError if unreadable."""
    try:
        data = json.loads(Path(path).read_text())
        members = [
            Member(Path(m["run_dir"]), str(m["run_id"]), dict(m["config"]), tuple(m.get("overrides", ())))
            for m in data["members"]
        ]
        return members, int(data.get("concurrency", len(members)))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"pack.manifest={path} is not a pack manifest ({type(e).__name__}: {e})") from None


def write_pack(sweep_dir: Path, members: Sequence[Member], concurrency: int) -> tuple[str, list[str]]:
    """Write the manifest of a pack of `members` under `<sweep_dir>/.scalelab_packs/`; returns
    (pack id, the overrides that make a job of it: its own directory and `+pack.manifest`), to be
    added to the first member's overrides (the sweeper's `sweep.pack`, `hydra/launcher=packed`)."""
    pid = "pack_" + fingerprint([m.run_id for m in members], 10)
    manifest = (Path(sweep_dir) / PACKS_DIR / f"{pid}.json").resolve()
    write_manifest(manifest, members, concurrency)
    return pid, [f"{SUBDIR_OVERRIDE}{PACKS_DIR}/{pid}", f"+{MANIFEST_KEY}={manifest}"]


def own_overrides(overrides: Sequence[str]) -> list[str]:
    """`overrides` less the job-directory one (a member's own, or a pack job's)."""
    return [o for o in overrides if not o.startswith(SUBDIR_OVERRIDE)]
