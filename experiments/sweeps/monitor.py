"""A sweep's live progress: runs done, running and left, the running runs' names, an ETA.

The sweeper (hydra_plugins/scalelab_sweeps/sweeper.py) opens a `SweepMonitor` over the runs a
stage launches, whatever the launcher (local, parallel, packed, SLURM or Ray on a shared disk): it
watches their run directories -- a run is running once its job (re)writes `.hydra/config.yaml`
(a pack member's too, experiments/train/pack.py), done once its `summary.json` is (re)written, and
its `metrics.jsonl` tells how far it has trained -- and the sweeper tells it each job's result as
the job's batch returns, so the counts end right even for a job that died without a summary.

* On a terminal (stderr): one tqdm bar, appearing after `DELAY_S`, redrawn every `POLL_S`:

      sweep: 3/8 done |████   | 01:12, running 2: C1e10_L2-d64_15e3, C3e10_L1-d32_9f3e · 3 left · ETA 2m05s

  The runs' own console lines scroll above it (experiments/console.py clears the bar's
  line before each of them).
* Elsewhere (a log file, a pipe, CI): one `sweep progress:` line on stdout each time a run
  finishes.
* With `SCALELAB_QUIET=1`: nothing.

ETA: the FLOPs this launch still has to train over the rate it has trained FLOPs so far (finished
runs whole, running ones up to their last logged step), so it weighs a big run as the big run it
is; `?` until some of them has progressed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import sys
import threading
import time
from typing import Any, Callable, Mapping, Sequence, TextIO

from experiments import console
from experiments.sweeps.runs import read_status
from models.base.rundir import HYDRA_CONFIG, METRICS_FILE, SUMMARY_FILE, RunStatus

POLL_S = 0.5  # how often the run directories are looked at (and the bar redrawn)
DELAY_S = 2.0  # the bar appears once the launch has run this long
MAX_NAMES = 3  # running runs named on the bar; the others are counted
TAIL_BYTES = 4096  # read from the end of metrics.jsonl for its last step
FALLBACK_SIZE = (100, 24)  # columns, rows of a terminal that reports no size

OK_ENDS = (RunStatus.COMPLETED, RunStatus.STOPPED)  # a launched run that ended as asked (or stopped early)


def duration(seconds: float | None) -> str:
    """`1h02m`, `4m10s`, `12s`; `?` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _mtime(path: pathlib.Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def last_step(metrics: pathlib.Path) -> int:
    """The step of the last complete line of a metrics.jsonl (0 when none)."""
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return 0
    for line in reversed(tail.split("\n")[1 if size > TAIL_BYTES else 0 : -1]):  # complete lines only
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


@dataclasses.dataclass
class _Run:
    """One launched run as the monitor sees it."""

    rec: Mapping[str, Any]
    path: pathlib.Path
    label: str
    steps: int  # its planned last step
    base: int  # the step it starts from (a resumed run's, a branch's)
    work: float  # FLOPs this launch trains of it
    config0: int | None  # mtime of .hydra/config.yaml before the launch
    summary0: int | None  # mtime of summary.json before the launch
    state: str = "waiting"  # waiting | running | done
    failed: bool = False
    step: int = 0

    @classmethod
    def of(cls, sweep_dir: pathlib.Path, rec: Mapping[str, Any]) -> "_Run":
        path = sweep_dir / str(rec["run_dir"])
        steps = max(1, int(rec.get("steps") or 1))
        base = min(steps - 1, max(int(rec.get("branch_step") or 0), last_step(path / METRICS_FILE)))
        flops = float(rec.get("flops") or 0.0) or float(steps)  # no FLOPs: weigh by steps
        return cls(
            rec=rec,
            path=path,
            label=console.short_label(path.name),
            steps=steps,
            base=base,
            work=flops * (steps - base) / steps,
            config0=_mtime(path / HYDRA_CONFIG),
            summary0=_mtime(path / SUMMARY_FILE),
        )

    def done_fraction(self) -> float:
        if self.state == "done":
            return 1.0
        if self.state != "running":
            return 0.0
        return min(1.0, max(0.0, (self.step - self.base) / max(1, self.steps - self.base)))


class SweepMonitor:
    """Progress over `recs` (the plan records of the runs a stage launches, each with `run_dir`),
    as a context manager; `ended(rec)` marks a run whose job returned (its `status_after` set)."""

    def __init__(
        self,
        sweep_dir: pathlib.Path,
        recs: Sequence[Mapping[str, Any]],
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runs = {str(r["run_dir"]): _Run.of(pathlib.Path(sweep_dir), r) for r in recs}
        self.stream = sys.stderr if stream is None else stream  # the bar's
        self.out = sys.stdout  # the progress lines' (as it is before any job wraps it in its run's log)
        self.clock = clock
        self.t0 = clock()
        self.mode = (
            "off" if console.quiet() or not self.runs else ("bar" if console.isatty(self.stream) else "lines")
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._streams: Any = None
        self._clearing: Any = None

    # ---- counts ------------------------------------------------------------------------------
    def counts(self) -> tuple[int, int, int, int]:
        """(done, running, left, failed) among the launched runs."""
        states = [r.state for r in self.runs.values()]
        done, running = states.count("done"), states.count("running")
        return done, running, len(states) - done - running, sum(r.failed for r in self.runs.values())

    def eta(self) -> float | None:
        """Seconds left at the launch's FLOP rate so far; None before any progress."""
        total = sum(r.work for r in self.runs.values())
        done = sum(r.work * r.done_fraction() for r in self.runs.values())
        elapsed = self.clock() - self.t0
        if done <= 0 or elapsed <= 0 or total <= 0:
            return None
        return elapsed * max(0.0, total - done) / done

    def text(self) -> str:
        """`running 2: a, b · 3 left · ETA 2m05s` (and `· 1 failed` when some did)."""
        _, running, left, failed = self.counts()
        names = [r.label for r in self.runs.values() if r.state == "running"]
        shown = ", ".join(names[:MAX_NAMES])
        if len(names) > MAX_NAMES:
            shown += f" +{len(names) - MAX_NAMES}"
        parts = [f"running {running}" + (f": {shown}" if shown else ""), f"{left} left"]
        if running or left:
            parts.append(f"ETA {duration(self.eta())}")
        if failed:
            parts.append(f"{failed} failed")
        return " · ".join(parts)

    def line(self) -> str:
        done = self.counts()[0]
        return f"sweep progress: {done}/{len(self.runs)} done, {self.text().replace(' · ', ', ')}"

    # ---- watching ----------------------------------------------------------------------------
    def poll(self) -> list[_Run]:
        """Look at the run directories; the runs found finished by this look."""
        finished = []
        with self._lock:
            for r in self.runs.values():
                if r.state == "done":
                    continue
                summary = _mtime(r.path / SUMMARY_FILE)
                if summary is not None and summary != r.summary0:
                    self._done(r, read_status(r.path))
                    finished.append(r)
                    continue
                config = _mtime(r.path / HYDRA_CONFIG)
                if r.state == "waiting" and config is not None and config != r.config0:
                    r.state = "running"
                if r.state == "running":
                    r.step = last_step(r.path / METRICS_FILE)
        return finished

    def _done(self, r: _Run, status: Any) -> None:
        r.state, r.failed = "done", status not in OK_ENDS

    def ended(self, rec: Mapping[str, Any]) -> None:
        """The sweeper's word that `rec`'s job returned (its `status_after` is set)."""
        r = self.runs.get(str(rec.get("run_dir")))
        if r is None:
            return
        with self._lock:
            newly = r.state != "done"
            self._done(r, rec.get("status_after"))
        if newly and self.mode == "lines":
            self._say()

    def _say(self) -> None:
        try:
            print(self.line(), file=self.out, flush=True)
        except (OSError, ValueError):  # the console went away: the sweep goes on
            pass

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                finished = self.poll()
                if self.mode == "lines":
                    for _ in finished:
                        self._say()
                elif self.mode == "bar":
                    self._draw()
            except Exception:  # noqa: BLE001 - a display never stops a sweep; the next look tries again
                continue

    def _draw(self) -> None:
        if self.clock() - self.t0 < DELAY_S:
            return
        if self._clearing is not None and not all(s.at_line_start for s in self._clearing):
            return  # a line is half written: the next look redraws
        if self._bar is None:
            self._bar = _open_bar(self.stream, len(self.runs))
            self._bar.start_t -= self.clock() - self.t0  # its elapsed time is the launch's
        with self._lock:
            self._bar.n = self.counts()[0]
            self._bar.set_postfix_str(self.text(), refresh=False)
        self._bar.refresh()

    def __enter__(self) -> "SweepMonitor":
        if self.mode == "off":
            return self
        if self.mode == "bar":
            self._streams = console.clearing_streams()
            self._clearing = self._streams.__enter__()
        self._thread = threading.Thread(target=self._loop, name="sweep-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()  # leave=False: its line is cleared for the sweep's last lines
        if self._streams is not None:
            self._streams.__exit__(*exc)


def _open_bar(stream: TextIO, total: int) -> Any:
    from tqdm import tqdm  # deferred: only a sweep drawn on a terminal loads it

    try:
        unsized = os.get_terminal_size(stream.fileno()).columns <= 0
    except (AttributeError, ValueError, OSError):
        unsized = False
    return tqdm(
        total=total,
        desc="sweep",
        bar_format="{desc}: {n_fmt}/{total_fmt} done |{bar}| {elapsed}{postfix}",
        file=stream,
        leave=False,
        dynamic_ncols=not unsized,
        ncols=FALLBACK_SIZE[0] if unsized else None,
        nrows=FALLBACK_SIZE[1] if unsized else None,
        mininterval=POLL_S,
    )
