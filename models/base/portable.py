"""The few OS services the parallel launcher and the caches need, with fallbacks off Linux.

Linux has everything: `os.sched_getaffinity` / `sched_setaffinity` (the CPUs a process may use,
and pinning to a subset), `/proc/self/task` (every thread of the process) and `fcntl.flock`
(advisory file locks that the kernel drops when the holder dies). Elsewhere:

* CPUs (macOS, Windows): no affinity API, so every CPU of `os.cpu_count()` counts as usable and
  pinning is skipped (`pin_to_cpus` returns False). Runs of a parallel sweep still cap their
  thread pools (OMP/MKL/... variables, single-threaded Eigen), they just are not kept off each
  other's cores by the OS.
* File locks (Windows): `msvcrt.locking` on the lock file's first byte; like flock it is
  released when the process exits. macOS has `fcntl` and takes the Linux path.

Everything here is a function of the module-level `fcntl` / `msvcrt` / `os` attributes, so the
tests exercise the fallbacks on Linux by monkeypatching them.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import IO

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt  # type: ignore[import-not-found]
except ImportError:  # everything but Windows
    msvcrt = None  # type: ignore[assignment]

POLL_S = 0.05  # how often a blocking lock retries where the OS lock cannot wait (msvcrt)


def available_cpus() -> list[int]:
    """The CPU ids this process may run on: its affinity mask on Linux, all CPUs elsewhere."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pin_to_cpus(cpus: list[int]) -> bool:
    """Pin every thread of this process (and its future threads) to `cpus`. False where the OS
    has no affinity API (nothing is changed then)."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    mask = set(cpus)
    if os.path.isdir("/proc/self/task"):  # threads started before us (XLA, BLAS pools)
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), mask)
    os.sched_setaffinity(0, mask)
    return True


def lock_file(f: IO, blocking: bool = True) -> bool:
    """Take an exclusive lock on the open file `f`. Blocking: wait for it and return True;
    non-blocking: return whether it was free (and is now ours)."""
    if fcntl is not None:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError:
            if blocking:
                raise
            return False
        return True
    if msvcrt is not None:
        while True:
            f.seek(0)
            try:
                msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not blocking:
                    return False
            time.sleep(POLL_S)
    raise OSError("no file locking on this platform (neither fcntl nor msvcrt)")


def unlock_file(f: IO) -> None:
    """Release a lock taken by `lock_file` (closing the file releases it too)."""
    if fcntl is not None:
        fcntl.flock(f, fcntl.LOCK_UN)
    elif msvcrt is not None:
        f.seek(0)
        with contextlib.suppress(OSError):
            msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)


_IMPORTED_AT = time.time()


def process_started_at() -> float:
    """The time.time() at which this process started: from /proc on Linux (start-up, imports
    included), else when this module was imported (imports before it not counted)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start_ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
        return time.time() - (uptime - start_ticks / ticks)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_AT
