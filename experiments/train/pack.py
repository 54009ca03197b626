"""Packed runs: several runs of one compiled program trained by one process, K at a time.

The sweeper (`sweep.pack: K`, hydra_plugins/scalelab_sweeps/sweeper.py) or the packing launcher
(`hydra/launcher=packed`) groups runs whose configs differ only in what the train step takes as
inputs — the `optim` scalars of `experiments.train.config.PACKABLE_OPTIM_KEYS`, `train.seed` and
the run length — and launches each group as one job: `+pack.manifest=<file>` names the members
(run directory, run id, resolved config, overrides). This module trains them:

    members = read_manifest(path)
    run_pack(members)        # each member: its own run directory, summary.json (+ packed_with),
                             # metrics.jsonl, checkpoints, console log, exactly as if alone

How the members step (measured, benchmarks/pack_speed.py): on XLA:CPU the members run
concurrently, one thread each, K at a time, sharing the process's compiled Program
(experiments/train/loop.py) — the GIL is released while XLA runs a step, so K small programs fill
cores that one of them cannot (2 cores, 12k-parameter members: 1.4x the throughput of the same
members one after another in one process). Each member is the solo run's own code path with the
same inputs, so its numbers equal the solo run's to the last bit. A member that diverges or fails
ends with that status; the others go on. Members still running when a preemption signal reaches
the process checkpoint and stop (`preempted`); relaunching resumes each from its own checkpoint.

Concurrency is capped by memory: a member holds its parameters, optimizer state and step
temporaries (`memory_analysis` of the compiled step) while it runs, and K of them must fit in
MEMORY_FRACTION of the host's available memory (the device's on an accelerator); a pack that
would not fit runs fewer members at a time instead of running out of memory.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence, TextIO

from omegaconf import OmegaConf

from experiments import preemption
from experiments.console import quiet, short_label
from experiments.rundir import RunDirBusy, exclusive_run_dir, log_path
from experiments.train.config import resolve_config
from experiments.train.metrics import RUN_LABEL
from models.base.diskspace import DISK_FULL_ERROR_PREFIX, DiskFull, disk_full_of, last_complete_step
from models.base.errors import ConfigError
from models.base.packs import Member, read_manifest
from models.base.portable import available_cpus
from models.base.rundir import CHECKPOINTS_DIR, HYDRA_CONFIG, HYDRA_OVERRIDES, RunStatus, RunSummary

TRAIN_JOB = "train"  # the trainer's Hydra job name (conf/config.yaml): members log to <run dir>/train.log
MEMORY_FRACTION = 0.5  # of available memory that concurrent members may hold together


# ---- console output per member ----------------------------------------------------------------


class _ThreadRouted:
    """sys.stdout / sys.stderr while a pack runs: what a member's thread prints goes to the
    console and to that member's own log file (`<run dir>/train.log`), like a solo run's."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._logs: dict[int, TextIO] = {}
        self._errors: dict[int, OSError] = {}
        self._lock = threading.Lock()

    def _log_failed(self, log: TextIO, err: OSError, ident: int | None = None) -> None:
        """Stop writing to `log` (thread `ident`'s, default this one's) and keep why."""
        ident = threading.get_ident() if ident is None else ident
        path = Path(getattr(log, "name", "train.log"))
        with self._lock:
            self._logs.pop(ident, None)
            self._errors.setdefault(ident, disk_full_of(err, path.name, path.parent) or err)

    def route(self, log: TextIO | None) -> None:
        with self._lock:
            self._errors.pop(threading.get_ident(), None)
            if log is None:
                self._logs.pop(threading.get_ident(), None)
            else:
                self._logs[threading.get_ident()] = log

    @property
    def log_error(self) -> OSError | None:
        """The error that stopped this thread's member log (a full disk: DiskFull), or None; the
        member stops on it (experiments.rundir.console_log_error)."""
        return self._errors.get(threading.get_ident())

    def write(self, s: str) -> int:
        log = self._logs.get(threading.get_ident())
        if log is not None:
            try:
                log.write(s)
            except OSError as e:  # the console keeps it; the member stops at its next step
                self._log_failed(log, e)
        with self._lock:
            try:
                self._stream.write(s)
            except OSError:  # the console went away: the member logs still get everything
                pass
        return len(s)

    def flush(self) -> None:
        for ident, log in list(self._logs.items()):
            try:
                log.flush()
            except OSError as e:
                self._log_failed(log, e, ident)
        try:
            self._stream.flush()
        except OSError:
            pass

    def close(self) -> None:
        """Closes nothing: the console is not the pack's. (A logging handler created while the
        pack ran holds this object; closing it, as absl's handler does when Hydra reconfigures
        logging for the next job, closed the real stderr, and the sweep's error line was lost.)"""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Routing:
    """Installs the routed streams for the pack's duration (main thread), and a member's log."""

    def __init__(self) -> None:
        self.out, self.err = _ThreadRouted(sys.stdout), _ThreadRouted(sys.stderr)

    def __enter__(self) -> "_Routing":
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.out, self.err
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stdout, sys.stderr = self._saved

    def member(self, log_file: Path) -> "_MemberLog":
        return _MemberLog(self, log_file)


class _MemberLog:
    def __init__(self, routing: _Routing, path: Path):
        self.routing, self.path = routing, path

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a", buffering=1)
        self.routing.out.route(self.fh)
        self.routing.err.route(self.fh)

    def __exit__(self, *exc: Any) -> None:
        self.routing.out.route(None)
        self.routing.err.route(None)
        with contextlib.suppress(OSError):  # a full disk: what the log could not take was on the console
            self.fh.close()


# ---- training the members ----------------------------------------------------------------------


def _write_hydra_files(m: Member) -> None:
    """`.hydra/config.yaml` and `.hydra/overrides.yaml` of the member, as Hydra writes them for
    a job of its own (analysis reads the config from there)."""
    (m.run_dir / HYDRA_CONFIG).parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(m.config), m.run_dir / HYDRA_CONFIG)
    OmegaConf.save(OmegaConf.create(list(m.overrides)), m.run_dir / HYDRA_OVERRIDES)


class _DiskFullHalt:
    """A full disk stops the whole pack: the first member whose write did not fit keeps its
    DiskFull here, and every other member, asked after each step (`run(..., halt=)`), stops with
    the same error, resumable from its own last checkpoint (no more checkpoints are tried on a
    disk that is full). The pack then says so in one line (`_report`)."""

    def __init__(self) -> None:
        self.error: DiskFull | None = None
        self._lock = threading.Lock()

    def found(self, err: DiskFull) -> None:
        with self._lock:
            if self.error is None:
                self.error = err

    def __call__(self) -> DiskFull | None:
        err = self.error
        return None if err is None else DiskFull(err.what, err.directory, err.free, err.needed)

    def line(self, members: Sequence[Member], results: Sequence[RunSummary | None]) -> str | None:
        """The pack's one line, or None when no member found the disk full."""
        if self.error is None:
            return None
        stopped = [
            f"{m.run_id} from step {last_complete_step(m.run_dir / CHECKPOINTS_DIR)}"
            for m, r in zip(members, results)
            if r is None or r.run_status is not RunStatus.COMPLETED
        ]
        return (
            f"error: {self.error.describe()}; free space and relaunch: the pack's "
            f"{len(stopped)} unfinished run{'s' if len(stopped) != 1 else ''} resume: {', '.join(stopped)}"
        )


def _train_member(m: Member, ids: list[str], routing: _Routing, halt: _DiskFullHalt) -> RunSummary:
    """One member, like `python -m experiments.train` in a multirun job: its status, never an
    exception (a failure is written to its summary.json and returned). A full disk stops the
    pack (`halt`), said once by the pack."""
    from experiments.train.loop import run  # deferred: JAX only once there is a pack to train

    if halt.error is not None:  # the disk filled before this member's turn: not started, nothing written
        return RunSummary.of(status=RunStatus.FAILED, error=f"{DISK_FULL_ERROR_PREFIX}{halt.error}")
    try:
        _write_hydra_files(m)
        with routing.member(log_path(m.run_dir, TRAIN_JOB, m.config)):
            try:
                with exclusive_run_dir(m.run_dir, m.config):
                    return run(m.config, m.run_dir, packed_with=ids, halt=halt)
            except RunDirBusy as e:
                print(f"error: {e}", file=sys.stderr, flush=True)
                return RunSummary.of(status=RunStatus.FAILED, error=str(e))
    except Exception as e:  # noqa: BLE001 - written to its summary.json by the loop; the others go on
        full = disk_full_of(e)
        if full is not None:  # the pack stops and says so once
            halt.found(full)
            return RunSummary.of(status=RunStatus.FAILED, error=f"{DISK_FULL_ERROR_PREFIX}{full}")
        print(f"error: training failed: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)
        return RunSummary.of(status=RunStatus.FAILED, error=f"{type(e).__name__}: {e}")


def _named_member(m: Member, ids: list[str], routing: _Routing, halt: _DiskFullHalt) -> RunSummary:
    """`_train_member` with its console lines named after it (experiments/train/metrics.py RUN_LABEL):
    a pack's members share one terminal."""
    token = RUN_LABEL.set(short_label(m.run_id))
    try:
        return _train_member(m, ids, routing, halt)
    finally:
        RUN_LABEL.reset(token)


def _cpu_cap() -> int:
    """On XLA:CPU, at most one member per CPU this process may use: in the demo's launcher (one
    pinned core per job) 4 members at once made each member's eval take 16 s against 0.25 s
    alone, for no gain in throughput; on an accelerator no cap (memory caps it)."""
    import jax  # deferred: JAX only once there is a pack to train (a bad manifest fails without it)

    if jax.devices()[0].platform != "cpu":
        return 1 << 30
    return max(1, len(available_cpus()))


def available_memory_bytes() -> int | None:
    """Memory the members may share: the first device's limit on an accelerator, else the
    host's MemAvailable (Linux); None when unknown."""
    import jax  # deferred: JAX only once there is a pack to train

    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        if stats.get("bytes_limit"):
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def concurrency_for(per_member_bytes: int | None, wanted: int, available: int | None) -> int:
    """How many members may run at once: `wanted`, fewer when they would not fit in
    MEMORY_FRACTION of `available` bytes (at least one)."""
    if not per_member_bytes or available is None:
        return max(1, wanted)
    return max(1, min(wanted, int(MEMORY_FRACTION * available // per_member_bytes)))


def run_pack(members: Sequence[Member], concurrency: int | None = None) -> list[RunSummary]:
    """Train `members` (their summaries, in order), at most `concurrency` at a time (default
    all), capped by memory once the first member has compiled the pack's program."""
    ids = [m.run_id for m in members]
    wanted = min(len(members) if concurrency is None else max(1, int(concurrency)), _cpu_cap())
    results: list[RunSummary | None] = [None] * len(members)
    halt = _DiskFullHalt()
    if not quiet():
        print(f"pack of {len(members)} runs, up to {wanted} at a time: {', '.join(ids)}", flush=True)
    with preemption.PreemptionGuard() as guard, _Routing() as routing:
        preemption.share(guard)  # members' guards (their own threads) read this one's signals
        try:
            with cf.ThreadPoolExecutor(wanted, thread_name_prefix="member") as pool:
                first = pool.submit(_named_member, members[0], ids, routing, halt)
                k = concurrency_for(_wait_for_program(first, members[0]), wanted, available_memory_bytes())
                if k < wanted:
                    print(f"pack: {k} members at a time fit in memory (asked for {wanted})", flush=True)
                gate = threading.Semaphore(k - 1)  # member 0 holds the k-th place
                first.add_done_callback(lambda _: gate.release())

                def gated(m: Member) -> RunSummary:
                    with gate:
                        return _named_member(m, ids, routing, halt)

                futs = {first: 0} | {pool.submit(gated, m): i for i, m in enumerate(members[1:], 1)}
                for f in cf.as_completed(futs):
                    results[futs[f]] = f.result()
        finally:
            preemption.share(None)
    line = halt.line(members, results)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    if guard.requested:
        guard.hand_over()
    return [r if r is not None else RunSummary() for r in results]


PROGRAM_POLL_S = 0.05  # how often the pack looks whether its first member has compiled


def _wait_for_program(first: cf.Future, member: Member) -> int | None:
    """Once the first member has compiled the pack's program (or ended): the bytes one member
    holds while it runs — its compiled step's arguments, outputs and temporaries (XLA's
    memory_analysis) — or None when unavailable."""
    from experiments.train.loop import compiled_program, program_key  # deferred: JAX, as in _train_member

    try:
        key = program_key(resolve_config(member.config))
    except ConfigError:  # the member fails with that error itself
        return None
    while not first.done() and compiled_program(key) is None:
        cf.wait([first], timeout=PROGRAM_POLL_S)
    prog = compiled_program(key)
    if prog is None:
        return None
    try:
        mem = prog.step_fn.memory_analysis()
        return int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes) or None
    except Exception:  # noqa: BLE001 - a backend without memory analysis: no cap
        return None


def pack_job(manifest: str | os.PathLike) -> dict[str, Any]:
    """The task of a pack job (experiments/train/__main__.py): train the manifest's members;
    returns `{"pack": [{run_id, status, error}, ...]}` (each member's details are in its
    directory; `error` null unless it failed)."""
    members, concurrency = read_manifest(Path(manifest))
    out = run_pack(members, concurrency)
    return {
        "pack": [
            {"run_id": m.run_id, "status": str(r.status), "error": r.error} for m, r in zip(members, out)
        ]
    }
