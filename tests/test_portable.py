"""The non-Linux fallbacks of the parallel launcher's OS services (models/base/portable.py),
exercised on Linux by monkeypatching: no affinity API (macOS, Windows) and no fcntl (Windows,
with a stand-in for msvcrt built on flock, so lock semantics stay real)."""

import fcntl as real_fcntl
import os
import threading
import time

import pytest

from experiments.sweeps import limits
from models.base import portable


class FakeMsvcrt:
    """msvcrt.locking's contract (LK_NBLCK raises OSError when another holder has the byte;
    LK_UNLCK releases), implemented with flock so two open files really exclude each other."""

    LK_NBLCK, LK_UNLCK = 2, 0

    def __init__(self):
        self.calls = []

    def locking(self, fd, mode, nbytes):
        self.calls.append((mode, nbytes))
        real_fcntl.flock(
            fd, real_fcntl.LOCK_EX | real_fcntl.LOCK_NB if mode == self.LK_NBLCK else real_fcntl.LOCK_UN
        )


@pytest.fixture
def no_affinity(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.delattr(os, "sched_setaffinity")
    for var in (*limits.THREAD_VARS, "XLA_FLAGS", limits.SLOT_ENV):  # apply_limits writes them
        monkeypatch.setenv(var, "")


@pytest.fixture
def windows_locks(monkeypatch):
    fake = FakeMsvcrt()
    monkeypatch.setattr(portable, "fcntl", None)
    monkeypatch.setattr(portable, "msvcrt", fake)
    monkeypatch.setattr(portable, "POLL_S", 0.01)
    return fake


def test_without_affinity_api_all_cpus_count_and_pinning_is_skipped(no_affinity):
    n = os.cpu_count() or 1
    assert portable.available_cpus() == list(range(n))
    assert portable.pin_to_cpus([0]) is False
    assert limits.cpu_sets(2, 1) == [[0], [1 % n]]
    assert limits.apply_limits([0], 1, slot=0) is False  # thread caps still applied
    assert os.environ["OMP_NUM_THREADS"] == "1" and limits.EIGEN_OFF in os.environ["XLA_FLAGS"]


def test_parallel_launcher_sizes_its_jobs_without_affinity_api(no_affinity):
    from hydra_plugins.scalelab_sweeps.launcher import LocalParallelLauncher

    assert LocalParallelLauncher(n_jobs=None, threads_per_job=1).n_jobs == (os.cpu_count() or 1)


def test_slot_locks_exclude_each_other_without_fcntl(tmp_path, windows_locks):
    with limits.hold_slot(tmp_path, 2) as a:
        with limits.hold_slot(tmp_path, 2) as b:
            assert {a, b} == {0, 1}
            with open(tmp_path / f"slot{a}.lock", "w") as f:
                assert portable.lock_file(f, blocking=False) is False  # busy
    with open(tmp_path / "slot0.lock", "w") as f:  # released on exit
        assert portable.lock_file(f, blocking=False) is True
        portable.unlock_file(f)
    assert (FakeMsvcrt.LK_UNLCK, 1) in windows_locks.calls


def test_blocking_lock_waits_for_the_holder_without_fcntl(tmp_path, windows_locks):
    path = tmp_path / "warm.lock"
    holder = open(path, "w")
    assert portable.lock_file(holder)
    threading.Timer(0.2, lambda: (portable.unlock_file(holder), holder.close())).start()
    t0 = time.monotonic()
    with open(path, "w") as f:
        assert portable.lock_file(f) is True
        assert time.monotonic() - t0 >= 0.15  # it waited for the release
        portable.unlock_file(f)


def test_no_locking_at_all_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(portable, "fcntl", None)
    monkeypatch.setattr(portable, "msvcrt", None)
    with open(tmp_path / "x.lock", "w") as f, pytest.raises(OSError, match="no file locking"):
        portable.lock_file(f)


def test_linux_path_pins_and_locks(tmp_path):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("Linux only")
    cpus = portable.available_cpus()
    assert cpus == sorted(os.sched_getaffinity(0))
    with open(tmp_path / "a.lock", "w") as f, open(tmp_path / "a.lock", "w") as g:
        assert portable.lock_file(f, blocking=False) and not portable.lock_file(g, blocking=False)
