"""A sweep and its disk: the checkpoint footprint told before launch, the runs a full disk stopped.

A run's checkpoint holds its parameters and the AdamW state (two moments), all float32 whatever
the compute dtype (models/config.py): STATE_BYTES_PER_PARAM = 12 bytes per parameter, plus
CHECKPOINT_OVERHEAD_BYTES of metadata (Orbax's, the OCDBT manifest, the JSON record). Measured on
disk: 5,413,581 bytes for the 492,160-parameter run of shared/checks/disk-full.sh and 188,163
bytes for a 12,336-parameter one, i.e. 10.9 bytes a parameter (OCDBT compresses a little) plus
~54 KB; the estimate is ~10% above both. A run keeps its newest `train.keep_checkpoints` (WSD
trunks also every branch point), and Orbax writes a new checkpoint before it deletes the oldest,
so a run holds `keep + 1` of them while it saves.

Two figures, both in `sweep_plan.json` (`checkpoint_footprint`):

* `in_flight_bytes`: params x optimizer state x (keep_checkpoints + 1) x runs in flight (the
  launcher's concurrent jobs times `sweep.pack`; every launched run when the launcher does not
  say: SLURM, Ray), the largest runs first: what the runs training at once hold at their peak;
* `sweep_bytes`: what the sweep leaves on disk when every launched run is done (a finished run
  keeps its last `keep_checkpoints`), plus the in-flight peak's extra checkpoint per run.

At launch the sweeper warns, in one line, when the output filesystem has less free space than
either: the disk would fill before the sweep ends (models/base/diskspace.py says what happens then).

A run a full disk stopped ends `failed` with a `DiskFull: ...` error (or without a summary when
even that did not fit): `full_disk_error` finds it, the sweep's summary line counts it, and a
relaunch resumes it (experiments/sweeps/runs.py read_status), repeating no finished run.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Iterable, Mapping

from models.base.diskspace import disk_full_summary, free_bytes, human_bytes
from models.base.rundir import RunDir

STATE_BYTES_PER_PARAM = 12  # float32 params + AdamW's two float32 moments
CHECKPOINT_OVERHEAD_BYTES = 56 * 1024  # a checkpoint's metadata, whatever the model's size
DEFAULT_KEEP = 2  # experiments/train/config.py TrainConfig.keep_checkpoints


@dataclasses.dataclass(frozen=True)
class RunCheckpoints:
    """One launched run's checkpoints: the bytes of one, and how many it keeps when done."""

    run_dir: str
    checkpoint_bytes: int
    keep: int  # train.keep_checkpoints
    branch_points: int = 0  # a WSD trunk's branch points, kept for good

    @property
    def kept(self) -> int:
        return self.keep + self.branch_points

    @property
    def peak_bytes(self) -> int:
        """While it saves: one more than it keeps (the new one is written before the oldest goes)."""
        return self.checkpoint_bytes * (self.kept + 1)

    @property
    def final_bytes(self) -> int:
        return self.checkpoint_bytes * self.kept


@dataclasses.dataclass(frozen=True)
class CheckpointFootprint:
    """The sweep's checkpoint footprint against the free space of its output filesystem."""

    directory: str
    runs: int  # launched runs
    runs_in_flight: int
    state_bytes_per_param: int
    keep_checkpoints: list[int]  # the distinct train.keep_checkpoints of the launched runs
    in_flight_bytes: int
    sweep_bytes: int
    free_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def warning(self) -> str | None:
        """One line when the free space is short of the footprint, else None."""
        if self.free_bytes is None or self.runs == 0:
            return None
        keep = "/".join(map(str, self.keep_checkpoints))
        if self.free_bytes < self.in_flight_bytes:
            short = (
                f"the {self.runs_in_flight} run(s) in flight hold ~{human_bytes(self.in_flight_bytes)} "
                f"of checkpoints at once"
            )
        elif self.free_bytes < self.sweep_bytes:
            short = (
                f"its {self.runs} run(s) leave ~{human_bytes(self.sweep_bytes)} of checkpoints "
                f"(train.keep_checkpoints={keep} each) when done"
            )
        else:
            return None
        return (
            f"warning: {self.directory} has {human_bytes(self.free_bytes)} free, but {short}: the disk "
            "will fill before the sweep ends; free space, lower train.keep_checkpoints or choose "
            "another hydra.sweep.dir (a run stopped by a full disk resumes when the sweep is relaunched)"
        )


def run_checkpoints(run_dir: str, n_params: int, train: Mapping[str, Any] | None) -> RunCheckpoints:
    """A run of `n_params` parameters with the `train` config node."""
    train = train or {}
    keep = train.get("keep_checkpoints")
    keep = DEFAULT_KEEP if keep is None else int(keep)
    return RunCheckpoints(
        run_dir,
        int(n_params) * STATE_BYTES_PER_PARAM + CHECKPOINT_OVERHEAD_BYTES,
        keep,
        len(train.get("branch_points") or []),
    )


def checkpoint_footprint(
    runs: Iterable[RunCheckpoints], in_flight: int | None, directory: str | pathlib.Path
) -> CheckpointFootprint:
    """The footprint of the launched `runs`, `in_flight` of them at once (None: all), written
    under `directory`."""
    runs = list(runs)
    k = len(runs) if in_flight is None else max(1, min(int(in_flight), len(runs)))
    biggest = sorted(runs, key=lambda r: r.peak_bytes, reverse=True)[:k]
    in_flight_bytes = sum(r.peak_bytes for r in biggest)
    extra = sum(r.checkpoint_bytes for r in biggest)  # the peak's one more checkpoint per run in flight
    return CheckpointFootprint(
        directory=str(directory),
        runs=len(runs),
        runs_in_flight=k if runs else 0,
        state_bytes_per_param=STATE_BYTES_PER_PARAM,
        keep_checkpoints=sorted({r.keep for r in runs}),
        in_flight_bytes=in_flight_bytes,
        sweep_bytes=sum(r.final_bytes for r in runs) + extra,
        free_bytes=free_bytes(directory),
    )


def runs_in_flight(launcher: Any, pack: int) -> int | None:
    """How many runs a launcher trains at once: its concurrent jobs (`n_jobs`; Hydra's basic
    launcher one, the packing launcher one pack of `pack`) times `pack` members per job; None
    for a launcher that does not say (SLURM, Ray: assume every run)."""
    name = type(launcher).__name__
    if getattr(launcher, "n_jobs", None):
        return int(launcher.n_jobs) * max(1, pack)
    if name == "PackedLauncher":
        return int(getattr(launcher, "pack", 1) or 1)
    if name == "BasicLauncher":
        return max(1, pack)
    return None


def sweep_footprint(
    jobs: list[dict], launcher: Any, pack: int, sweep_dir: pathlib.Path
) -> CheckpointFootprint:
    """The footprint of the sweeper's planned launches (`{"config", "rec"}` each: the resolved run
    config and its plan record, with `run_dir` and `n_params`)."""
    runs = [
        run_checkpoints(j["rec"]["run_dir"], j["rec"]["n_params"], (j.get("config") or {}).get("train"))
        for j in jobs
    ]
    return checkpoint_footprint(runs, runs_in_flight(launcher, pack), sweep_dir)


def full_disk_error(run_dir: pathlib.Path, error: str | None = None) -> str | None:
    """The error of a run a full disk stopped (`error` as the launcher returned it, else the
    run's summary.json), or None."""
    if disk_full_summary(error):
        return error
    summary = RunDir(run_dir).read_summary()
    if summary is not None and disk_full_summary(summary.error):
        return summary.error
    return None
