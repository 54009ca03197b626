"""Preemption: SIGTERM / SIGUSR1 / SIGUSR2 stop a run at the next step boundary, with a checkpoint.

Why: a scheduler that takes the machine back (SLURM preemption, a time limit, `scancel`) sends
SIGTERM, or the `--signal` of the job (SIGUSR1 in hand-written sbatch scripts, SIGUSR2 under
submitit) some time before it kills the job. Dying there loses everything since the last
periodic checkpoint; stopping at the next step boundary with a checkpoint loses nothing.

How the trainer and the RL loop use it:

    with PreemptionGuard() as guard:          # handlers installed; the previous ones restored after
        for i in range(start, steps):
            ... step i ...
            if guard.should_stop():           # every process calls it once per step, same order
                save checkpoint; return "preempted"
    if preempted:
        guard.hand_over()                     # run the handlers that were there before (submitit)

* The signal handler only records the signal (no I/O, no JAX: it runs between two bytecodes of
  whatever the main thread was doing).
* All processes of a multi-process run stop after the same step: `should_stop` combines every
  process's flag with a one-integer max across all devices (`StopVote`). Calls are made in the
  same order on every process (once per step), so every process reads the same combined value.
  With `lag=1` (the trainer) the combination dispatched at step i is read at step i+1, so the
  host never waits on the device for it: the stop comes one step later, the step pipeline is kept.
* `hand_over` calls, for each signal received, the Python handler that was installed before the
  guard (e.g. submitit's `checkpoint_and_try_requeue` for its SIGUSR2, which requeues the SLURM
  job and exits); default / ignore dispositions are left alone. The command line then exits with
  `experiments.rundir.EXIT_PREEMPTED`.

Handlers are only installed from the main thread (Python allows no other); a run started in
another thread is preemptible only through a guard `share`d by the main thread (a pack's runs),
else not at all.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

# SIGTERM: preemption, scancel, `kill`. SIGUSR1: `#SBATCH --signal=USR1@120` (time limit ahead).
# SIGUSR2: submitit's time-limit / preemption signal (hydra/launcher=slurm).
PREEMPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class StopVote:
    """Any-of-all-processes of a local flag, the same answer on every process.

    A single process answers its own flag at once. With several processes each call dispatches a
    max over one int per device (every device of every process) and returns the result of the
    call `lag` calls earlier (False until there is one): with lag >= 1 the host never blocks on
    the device for it, at the price of stopping `lag` steps later.
    """

    def __init__(self, lag: int = 1):
        self.lag = lag
        self._multi: bool | None = None
        self._pending: list[Any] = []
        self._reduce: Callable[[bool], Any] | None = None

    def __call__(self, flag: bool) -> bool:
        if self._multi is None:
            import jax  # deferred: the trainer imports this module; a completed run exits without JAX

            self._multi = jax.process_count() > 1
        if not self._multi:
            return flag
        if self._reduce is None:
            self._reduce = _any_across_processes()
        self._pending.append(self._reduce(flag))
        if len(self._pending) <= self.lag:
            return False
        return bool(int(self._pending.pop(0).addressable_data(0)))


def _any_across_processes() -> Callable[[bool], Any]:
    """flag -> a replicated int32 scalar, max of every process's flag (async, not fetched)."""
    # deferred: JAX only for a multi-process vote (a completed run exits without importing it)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("p",))
    per_device = NamedSharding(mesh, P("p"))
    reduce = jax.jit(jnp.max, out_shardings=NamedSharding(mesh, P()))
    n_local, n_all = jax.local_device_count(), jax.device_count()

    def vote(flag: bool) -> Any:
        local = np.full((n_local,), int(flag), dtype=np.int32)
        return reduce(jax.make_array_from_process_local_data(per_device, local, (n_all,)))

    return vote


_SHARED: "PreemptionGuard | None" = None  # a pack's main-thread guard (experiments/train/pack.py)


def share(guard: "PreemptionGuard | None") -> None:
    """Make `guard` (installed in the main thread) the signal source of guards entered in other
    threads, which cannot install handlers: the runs of a pack stop together. None: stop sharing."""
    global _SHARED
    _SHARED = guard


class PreemptionGuard:
    """Context manager: preemption signals set a flag while it is active (see module docstring)."""

    def __init__(self, signals: tuple[signal.Signals, ...] = PREEMPT_SIGNALS, lag: int = 0):
        self.signals = signals
        self.received: list[signal.Signals] = []  # in arrival order, each once
        self._previous: dict[signal.Signals, Any] = {}
        self._vote = StopVote(lag)
        self.active = False  # handlers installed (main thread only)

    def __enter__(self) -> "PreemptionGuard":
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._previous[s] = signal.signal(s, self._on_signal)
            self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, prev in self._previous.items():
            signal.signal(s, prev if prev is not None else signal.SIG_DFL)
        self.active = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Only records the signal: the run stops at its next step boundary."""
        sig = signal.Signals(signum)
        if sig not in self.received:
            self.received.append(sig)

    @property
    def requested(self) -> bool:
        """A preemption signal reached this process (this guard's, or a pack's shared one)."""
        shared = _SHARED
        return bool(self.received) or (shared is not None and shared is not self and shared.requested)

    def should_stop(self) -> bool:
        """Whether to stop after the current step. Every process must call it once per step."""
        return self._vote(self.requested)

    def signal_names(self) -> list[str]:
        shared = _SHARED
        got = self.received or (shared.received if shared is not None and shared is not self else [])
        return [s.name for s in got]

    def hand_over(self) -> None:
        """After the checkpoint: run the previous Python handler of each signal received (a
        scheduler integration such as submitit's requeue; it may exit the process)."""
        for s in self.received:
            prev = self._previous.get(s)
            if callable(prev):
                prev(int(s), None)
