"""`train.profile_steps=[a, b]`: a JAX profiler trace of steps a..b in `<run dir>/profile/`.

Steps count from 1, as metrics.jsonl and the console line count them. Each step's dispatch is
wrapped in `jax.profiler.StepTraceAnnotation("train", step_num=n)`, so XProf (TensorBoard's
profile plugin) shows a per-step breakdown; the trace is written as XProf's `<host>.xplane.pb`
under `profile/plugins/profile/<time>/`, with `perfetto_trace.json.gz` (open in ui.perfetto.dev)
and `<host>.trace.json.gz` (Chrome trace format) beside it.

Why start and stop sit where they do: the loop dispatches step i before it fetches step i-1's
metrics (the device never idles), so the trace starts right before step a is dispatched and
stops only once step b has finished on the device. Starting and writing the trace is taken off
the step clock (`pause`), so the profiled steps' tokens/s stay comparable; the steps themselves
run a little slower while traced.

Only the main process profiles; a profiler that fails to start or stop (another trace already
running, a full disk) prints one warning line and the run goes on. `check_profile_steps` is the
config check (one ConfigError line).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from models.base.configs import is_int
from models.base.errors import ConfigError


def check_profile_steps(steps: Any, n_steps: int) -> tuple[int, int] | None:
    """`train.profile_steps` as (first, last), or None; ConfigError unless 1 <= first <= last <= n_steps."""
    if steps is None:
        return None
    ok = (
        isinstance(steps, Sequence)
        and not isinstance(steps, str)
        and len(steps) == 2
        and all(is_int(s) for s in steps)
    )
    if ok and 1 <= steps[0] <= steps[1] <= n_steps:
        return int(steps[0]), int(steps[1])
    raise ConfigError(
        f"train.profile_steps must be [first, last] with 1 <= first <= last <= {n_steps} "
        f"(the run's steps) (got {list(steps) if ok else steps!r})"
    )


class StepProfiler:
    """Starts / stops the trace around the steps of `train.profile_steps` left in this session."""

    def __init__(
        self,
        steps: tuple[int, int] | None,
        out_dir: Path,
        start: int,
        enabled: bool = True,
        pause: Callable[[float], None] | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.out_dir = Path(out_dir)
        self.pause = pause or (lambda t0: None)
        self.log = log or (lambda msg: print(msg, flush=True))
        self.first = self.last = None
        self.active = False
        if steps is None or not enabled:
            return
        first, last = max(steps[0], start + 1), steps[1]
        if first > last:
            self.log(f"profile: steps {steps[0]}-{steps[1]} were done before this session; no profile")
            return
        self.first, self.last = first, last

    def annotate(self, n: int) -> ContextManager[Any]:
        """Step n's trace annotation while tracing, else nothing."""
        if not self.active:
            return contextlib.nullcontext()
        import jax  # deferred: the config imports this module, and a completed run exits without JAX

        return jax.profiler.StepTraceAnnotation("train", step_num=n)

    def before(self, n: int) -> None:
        """Call before dispatching step n: starts the trace at the first profiled step."""
        if n != self.first:
            return
        import jax  # deferred: no JAX at config time (see annotate)

        t0 = time.perf_counter()
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.out_dir), create_perfetto_trace=True)
            self.active = True
        except Exception as e:  # noqa: BLE001 - a profile is never worth the run
            self._warn("start", e)
        self.pause(t0)

    def after(self, n: int, state: Any) -> None:
        """Call after dispatching step n with what it returns: at the last profiled step, waits
        for it on the device and writes the trace."""
        if not self.active or n != self.last:
            return
        import jax  # deferred: no JAX at config time (see annotate)

        jax.block_until_ready(state)
        t0 = time.perf_counter()
        ok = self._stop()
        self.pause(t0)
        if ok:
            self.log(
                f"profile of steps {self.first}-{self.last} written to {self.out_dir} "
                f"(view: xprof --logdir {self.out_dir}, or its perfetto_trace.json.gz in ui.perfetto.dev)"
            )

    def close(self) -> None:
        """Stop a trace still running (the run ended inside the profiled steps)."""
        if self.active:
            self._stop()

    def _stop(self) -> bool:
        import jax  # deferred: no JAX at config time (see annotate)

        self.active = False
        try:
            jax.profiler.stop_trace()
            return True
        except Exception as e:  # noqa: BLE001
            self._warn("stop", e)
            return False

    def _warn(self, what: str, err: BaseException) -> None:
        msg = " ".join(str(err).split())[:200]
        print(
            f"warning: profiler failed to {what} ({type(err).__name__}: {msg}); the run goes on "
            "without a profile",
            file=sys.stderr,
            flush=True,
        )
