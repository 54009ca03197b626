"""The skeleton of a resumable run, shared by the trainer (experiments/train/loop.py) and the RL
loop (experiments/rl/loop.py): each supplies its step and its evaluations, this module the rest.

Order of work of every run:

    run_resumable(run_dir, cfg, session, ...)  # completed-run check -> quiet logs, compile cache
                                               # -> distributed init -> preemption guard on
        session(raw, guard, t_start)           # the loop's own: validate, build, restore or
                                               # init, then run_steps(...), then write_summary(...)
                                               # a `failed` summary.json if anything raises
    run_steps(body, hooks, steps, guard, log)  # for i in start .. steps-1:
        body.step(i)                           #     the loop's step i
        hooks.run(steps)                       #     periodic actions, in the order added
        steps.stop?                            #     preempted: checkpoint saved, stop
    body.drain(); body.close()                 # what is still in flight, then the files

Periodic actions are registered as in Levanter (`trainer.add_hook(fn, every=N)`):
`hooks.add_hook(fn, every=N, at_end=True, on_stop=False)` calls `fn(steps)` after every N-th step
(N = 0: never on a cadence), after the last step (`at_end`) and after the step at which a
preemption signal stopped the run (`on_stop`: the checkpoint). `preemption_check(guard)` is itself
an action (every step), so each loop decides where in its step the stop vote is read.

Statuses: completed | diverged (the step or an action raised `Diverged`) | stopped (an action
raised `Stopped`: `sweep.early_stop`, experiments/early_stop.py) | preempted (SIGTERM,
SIGUSR1 or SIGUSR2 reached the run: experiments/preemption.py; the previous handlers run after
the summary is written, e.g. submitit's requeue) | failed (anything else raised).
Imports no JAX at module level.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from experiments.preemption import PreemptionGuard
from experiments.rundir import write_failed_summary
from models.base.configs import to_plain
from models.base.diskspace import disk_full_of
from models.base.jaxcache import enable_compile_cache
from models.base.rundir import RunDir, RunStatus, RunSummary
from sharding import distributed

Log = Callable[[str], None]
# `run_resumable`'s summary of a run that was already completed has this key set (in `extra`).
ALREADY_COMPLETED = "already_completed"


class Diverged(RuntimeError):
    """The loss went non-finite (or above the trainer's `train.loss_ceiling`): the run stops as
    `diverged`; the message is the reason (`diverged: <message>` on the console)."""


class Stopped(RuntimeError):
    """An action decided the run stops here, its checkpoint saved (`sweep.early_stop`,
    experiments/early_stop.py): the run ends as `stopped`; the message is the reason."""


def quiet_library_logs() -> None:
    """Hydra's console logging is INFO; keep JAX/Orbax/absl chatter out of the run's output."""
    for name in ("absl", "jax", "orbax", "jax._src.xla_bridge"):
        logging.getLogger(name).setLevel(logging.WARNING)


# ---- the run preamble -----------------------------------------------------------------------


def run_resumable(
    run_dir: Path,
    cfg: Any,
    session: Callable[[dict[str, Any], PreemptionGuard, float], RunSummary],
    *,
    completed: Callable[[], RunSummary | None],
    done_line: Callable[[RunSummary], str],
    known_so_far: Callable[[], tuple[RunSummary, float] | None],
    vote_lag: int = 0,
) -> RunSummary:
    """Run (or resume, or skip if completed) one run in `run_dir`; its summary.

    `completed()`: the summary of a completed run of this config in `run_dir`, or None (it may
    raise for a completed run of another config: `experiments.rundir.completed_summary`);
    `done_line(summary)` is then printed and the summary returned with `already_completed`
    (ALREADY_COMPLETED, a key of its `extra`: returned, never written) set.
    `session(raw config, guard, t_start)` does the run and returns its summary. If it raises,
    `known_so_far()` gives the summary fields known so far and the wall time of earlier sessions
    (None on processes other than 0), written as a `failed` summary.json before the error
    propagates. `vote_lag`: see PreemptionGuard (1
    keeps the trainer's step pipeline; the synchronous RL step reads the vote at once)."""
    t_start = time.time()
    done = completed()
    if done is not None:
        print(done_line(done), flush=True)
        return done.replace(**{ALREADY_COMPLETED: True})
    quiet_library_logs()
    enable_compile_cache()  # a sweep's runs share shapes: later runs load, not compile, their steps
    raw = to_plain(cfg)
    guard = PreemptionGuard(lag=vote_lag)
    try:
        distributed.initialize((raw or {}).get("distributed"))
        with guard:  # after jax.distributed, whose own SIGTERM notifier would otherwise win
            summary = session(raw, guard, t_start)
    except Exception as e:  # write a failed summary, then let the caller report
        full = disk_full_of(e)  # a full disk, however the writer said it: one DiskFull
        known = known_so_far()
        written = None
        if known is not None:
            base, wall_prev = known
            written = write_failed_summary(run_dir, base, full or e, wall_prev + time.time() - t_start)
        if full is None:
            raise
        full.summary_written = written
        if full is e:
            raise
        raise full from e
    if summary.run_status is RunStatus.PREEMPTED:
        guard.hand_over()  # e.g. submitit's requeue under hydra/launcher=slurm
    return summary


# ---- the steps loop and its periodic actions -------------------------------------------------


@dataclasses.dataclass
class StepState:
    """Where the steps loop is, as the periodic actions see it."""

    start: int  # the first step of this session (the checkpoint's step, 0 for a new run)
    total: int  # the run's length in steps
    done: int = 0  # steps done so far, the one just taken included
    stop: bool = False  # a preemption signal: stop after this step (with a checkpoint)

    @property
    def last(self) -> bool:
        return self.done == self.total


@dataclasses.dataclass(frozen=True)
class Hook:
    """One periodic action: `fn(state)` after every `every`-th step (0: none), after the last
    step when `at_end`, and after a preempted step when `on_stop`."""

    fn: Callable[[StepState], None]
    every: int
    at_end: bool = True
    on_stop: bool = False

    def due(self, s: StepState) -> bool:
        on_cadence = bool(self.every) and s.done % self.every == 0
        return on_cadence or (self.at_end and s.last) or (self.on_stop and s.stop)


class Hooks:
    """The periodic actions of a loop, run in the order they were added (an earlier action may
    decide a later one: the preemption check sets `state.stop`, which the checkpoint obeys)."""

    def __init__(self) -> None:
        self.hooks: list[Hook] = []

    def add_hook(
        self, fn: Callable[[StepState], None], every: int = 1, at_end: bool = True, on_stop: bool = False
    ) -> None:
        self.hooks.append(Hook(fn, every, at_end, on_stop))

    def run(self, s: StepState) -> None:
        for hook in self.hooks:
            if hook.due(s):
                hook.fn(s)


def preemption_check(guard: PreemptionGuard | None) -> Callable[[StepState], None]:
    """The action that reads the stop vote (every process, once per step, in the same order):
    sets `state.stop` unless this was the last step anyway."""

    def check(s: StepState) -> None:
        s.stop = guard is not None and guard.should_stop() and not s.last

    return check


class StepBody(Protocol):
    """What a loop supplies to `run_steps`: its step, and what to do after the last one."""

    def step(self, i: int) -> None:
        """Take step i (0-based); raise Diverged to stop the run as diverged."""

    def drain(self) -> None:
        """After the last step: finish what is still in flight."""

    def close(self) -> None:
        """However the steps ended: release threads and files."""


def run_steps(
    body: StepBody, hooks: Hooks, s: StepState, guard: PreemptionGuard | None, log: Log
) -> RunStatus:
    """The steps `s.start` .. `s.total - 1` with their periodic actions: COMPLETED, DIVERGED when
    the step or an action raised Diverged, STOPPED when an action raised Stopped (after saving a
    checkpoint), PREEMPTED after the step at which the preemption check said stop (its `on_stop`
    actions, the checkpoint, done)."""
    try:
        for i in range(s.start, s.total):
            body.step(i)
            s.done = i + 1
            hooks.run(s)
            if s.stop:
                by = ", ".join(guard.signal_names() if guard is not None else []) or "another process"
                log(f"preempted by {by}: checkpoint at step {s.done} saved, stopping")
                return RunStatus.PREEMPTED
        body.drain()
    except Diverged as e:
        log(f"diverged: {e}")
        return RunStatus.DIVERGED
    except Stopped as e:
        log(f"stopped early at step {s.done}, checkpoint saved: {e}")
        return RunStatus.STOPPED
    finally:
        body.close()
    return RunStatus.COMPLETED


# ---- the summary ------------------------------------------------------------------------------


def write_summary(
    run_dir: Path,
    summary: RunSummary,
    resumed_from: int | None,
    guard: PreemptionGuard | None,
    line: Callable[[RunSummary], str],
    metrics: Any,
    is_main: bool = True,
) -> RunSummary:
    """Complete `summary` (with its `status`) with `resumed_from_step` and, for a preempted run,
    `preempted_by`; write summary.json (one atomic write, process 0 only) and print `line(summary)`;
    then end the metrics log's tracker run with the run's status (`metrics.finish`)."""
    status = summary.status
    summary = summary.replace(resumed_from_step=resumed_from)
    if status == RunStatus.PREEMPTED and guard is not None:
        summary = summary.replace(preempted_by=guard.signal_names() or ["another process"])
    if is_main:
        RunDir(run_dir).write_summary(summary)  # the one strict JSON writer
        print(line(summary), flush=True)
    metrics.finish(status, summary)  # the tracker's run ends with the run's status
    return summary
