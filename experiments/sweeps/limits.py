"""Per-run CPU limits for parallel local sweeps, and a record of what each launch really got.

Two runs sharing two cores must not each start a thread pool as wide as the machine, or both
slow down (and their tokens/s and MFU become meaningless). A parallel launcher therefore gives
every run a *slot*: an exclusive file lock `slot<k>.lock` under the sweep dir, which maps to a
fixed, disjoint set of `threads_per_job` CPUs. The job process pins all its threads to those
CPUs (`sched_setaffinity`, which XLA's CPU client also reads to size its pools), sets the
usual thread-count variables (OMP/MKL/OpenBLAS) and, for single-thread slots, turns off XLA's
multi-threaded Eigen. A slot is held for the run's lifetime, so a reused worker process or a
late-starting run can never land on a busy core.

Off Linux (models/base/portable.py): without an affinity API (macOS, Windows) the slots are
numbered over all `os.cpu_count()` CPUs and only the thread caps apply (no pinning: runs are
not kept off each other's cores; `launches.jsonl` records `"affinity_api": false`); Windows locks
the slot files with msvcrt instead of flock.

`record_launch` appends one line per launch to `<run dir>/launches.jsonl` (pid, CPUs, thread
settings, wall and CPU seconds), so oversubscription can be measured after the fact.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import time
from typing import Any, Iterator

from models.base.diskspace import DiskFull
from models.base.portable import available_cpus, lock_file, pin_to_cpus, unlock_file
from models.base.rundir import MetricsWriter, RunDir

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)
SLOT_ENV = "SCALELAB_CPU_SLOT"
EIGEN_OFF = "--xla_cpu_multi_thread_eigen=false"


def cpu_sets(n_slots: int, threads_per_job: int) -> list[list[int]]:
    """Disjoint CPU lists for each slot, taken from this process's affinity mask.

    If the machine has fewer CPUs than `n_slots * threads_per_job`, slots wrap around (the
    caller asked for oversubscription; the launcher logs it).
    """
    avail = available_cpus()
    sets = []
    for k in range(n_slots):
        sets.append([avail[(k * threads_per_job + i) % len(avail)] for i in range(threads_per_job)])
    return sets


@contextlib.contextmanager
def hold_slot(lock_dir: pathlib.Path, n_slots: int, poll_s: float = 0.05) -> Iterator[int]:
    """Block until one of `n_slots` slot locks is free; yield its index while holding it."""
    lock_dir = pathlib.Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for k in range(n_slots):
            f = open(lock_dir / f"slot{k}.lock", "w")
            if not lock_file(f, blocking=False):
                f.close()
                continue
            try:
                yield k
            finally:
                unlock_file(f)
                f.close()
            return
        time.sleep(poll_s)


def apply_limits(cpus: list[int], threads: int, slot: int | None = None) -> bool:
    """Pin every thread of this process to `cpus` and cap library thread pools at `threads`.
    Returns whether the pinning happened (False where the OS has no affinity API)."""
    pinned = pin_to_cpus(cpus)
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1 and EIGEN_OFF not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + EIGEN_OFF).strip()
    if slot is not None:
        os.environ[SLOT_ENV] = str(slot)
    return pinned


@contextlib.contextmanager
def record_launch(run_dir: pathlib.Path) -> Iterator[None]:
    """Append this launch's resources and timings to `<run_dir>/launches.jsonl`."""
    t0, c0 = time.time(), os.times()
    rec: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "start": t0,
        "cpus": available_cpus(),
        "affinity_api": hasattr(os, "sched_setaffinity"),
        "slot": os.environ.get(SLOT_ENV),
        "threads": {v: os.environ.get(v) for v in THREAD_VARS},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    try:
        yield
    finally:
        c1 = os.times()
        rec.update(
            end=time.time(), wall_s=time.time() - t0, cpu_s=(c1.user - c0.user) + (c1.system - c0.system)
        )
        run_dir = pathlib.Path(run_dir)
        if run_dir.is_dir():
            log = MetricsWriter(RunDir(run_dir).launches_path)  # whole lines, or none on a full disk
            try:
                log.append(rec)
            except DiskFull:  # bookkeeping: the run has said the disk is full itself
                pass
            finally:
                log.close()
