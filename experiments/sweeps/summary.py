"""A sweep's counts, in the same five words at its start and at its end.

Every planned run (a record of the sweeper's plan, sweep_plan.json's `runs`) is exactly one of:

* reused  -- completed earlier: found on disk, not trained again;
* trained -- trained by this launch to completion;
* skipped -- not trained to its end by choice: left out by the plan's limits (too few steps, too
  many epochs, ...), or stopped early by `sweep.early_stop` (now, or kept from an earlier launch);
* failed  -- diverged or failed: by this launch, or kept as it ended earlier (`sweep.rerun_failed`
  re-runs those); a run stopped by a full disk is failed until a relaunch resumes it;
* to train -- at the start only: the runs this launch trains.

So at the start `planned = reused + trained + skipped + failed + to train` (trained is 0, or a
sweep.hparams=probe sweep's first stage), and at the end `planned = reused + trained + skipped +
failed`:

    sweep plan: 8 planned, 1 reused, 0 trained, 3 skipped, 0 failed; 4 to train
    sweep done: 8 planned, 1 reused, 2 trained, 3 skipped, 2 failed (1 diverged) -> outputs/sweep
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping

from models.base.rundir import RunStatus

WORDS = ("planned", "reused", "trained", "skipped", "failed")
TO_TRAIN = "to train"


def outcome(rec: Mapping) -> str:
    """The count a plan record falls in: one of `WORDS[1:]`, or `TO_TRAIN` (launched, no result yet)."""
    action = rec.get("action")
    if action == "skip":
        return "skipped"
    if action == "reuse":
        before = rec.get("status_before")
        if before == RunStatus.COMPLETED:
            return "reused"
        return "skipped" if before == RunStatus.STOPPED else "failed"
    if "status_after" not in rec:
        return TO_TRAIN
    after = rec.get("status_after")
    if after == RunStatus.COMPLETED:
        return "trained"
    return "skipped" if after == RunStatus.STOPPED else "failed"


@dataclasses.dataclass(frozen=True)
class Counts:
    planned: int
    reused: int
    trained: int
    skipped: int
    failed: int
    to_train: int
    early: int  # of skipped: stopped early by sweep.early_stop
    # failed = diverged + disk_full + the other errors of this launch + kept
    diverged: int  # of failed: diverged in this launch
    disk_full: int  # of failed: stopped by a full disk in this launch (a relaunch resumes them)
    kept: int  # of failed: ended so earlier and not re-run

    @classmethod
    def of(cls, records: Iterable[Mapping], disk_full: Callable[[Mapping], bool] | None = None) -> "Counts":
        """The counts of `records`; `disk_full(rec)` tells a failed run that a full disk stopped."""
        recs = list(records)
        kind = [outcome(r) for r in recs]
        n = {w: kind.count(w) for w in (*WORDS[1:], TO_TRAIN)}
        status = [r.get("status_after", r.get("status_before")) for r in recs]
        now = [k == "failed" and r.get("action") == "launch" for k, r in zip(kind, recs)]
        return cls(
            planned=len(recs),
            reused=n["reused"],
            trained=n["trained"],
            skipped=n["skipped"],
            failed=n["failed"],
            to_train=n[TO_TRAIN],
            early=sum(k == "skipped" and s == RunStatus.STOPPED for k, s in zip(kind, status)),
            diverged=sum(f and s == RunStatus.DIVERGED for f, s in zip(now, status)),
            disk_full=sum(f and bool(disk_full and disk_full(r)) for f, r in zip(now, recs)),
            kept=sum(k == "failed" and r.get("action") == "reuse" for k, r in zip(kind, recs)),
        )

    def add_up(self) -> bool:
        return self.planned == self.reused + self.trained + self.skipped + self.failed + self.to_train

    def line(self, head: str, to_train: bool = False) -> str:
        """`<head>: P planned, R reused, T trained, S skipped (detail), F failed (detail)`, then
        `; K to train` with `to_train` (the plan's line) or while runs are still to train. The
        failed detail adds up: diverged, with an error, stopped by a full disk, kept from earlier."""
        skipped = f"{self.skipped} skipped"
        if self.early:
            skipped += f" ({self.early} stopped early by sweep.early_stop)"
        errors = self.failed - self.diverged - self.disk_full - self.kept
        parts = (
            (self.diverged, "diverged"),
            (errors if errors < self.failed else 0, "with an error"),
            (self.disk_full, "stopped by a full disk: free space, relaunch to resume"),
            (self.kept, "kept as they ended earlier: sweep.rerun_failed=true re-runs them"),
        )
        detail = [f"{k} {what}" for k, what in parts if k]
        failed = f"{self.failed} failed" + (f" ({'; '.join(detail)})" if detail else "")
        text = f"{head}: {self.planned} planned, {self.reused} reused, {self.trained} trained, {skipped}, "
        text += failed
        return text + (f"; {self.to_train} {TO_TRAIN}" if self.to_train or to_train else "")
