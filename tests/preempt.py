"""A preemption signal at a chosen step of an in-process training run (tests of resume)."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Iterator

from experiments.train import loop as train_loop


@contextlib.contextmanager
def preempted_at(monkeypatch, step_i: int, sig: signal.Signals = signal.SIGUSR2) -> Iterator[None]:
    """Within the block, `train_loop.run` sends `sig` to this process while it finishes step
    `step_i` (0-based). The loop is pipelined (step i + 1 is dispatched before step i is
    finished), so the run stops after step i + 2 (1-based), with a checkpoint there. A no-op
    handler stands in as the "previous" one the guard hands the signal over to (the default
    SIGUSR2 action would end the test process)."""
    orig = train_loop._finish_step

    def finish(loop, i, m, eval_params=None):
        if i == step_i:
            os.kill(os.getpid(), sig)
        return orig(loop, i, m, eval_params)

    old = signal.signal(sig, lambda signum, frame: None)
    try:
        with monkeypatch.context() as mp:
            mp.setattr(train_loop, "_finish_step", finish)
            yield
    finally:
        signal.signal(sig, old)
