"""Run records: `metrics.jsonl` (one JSON object per logged step) and the console progress line.

The progress line (`Progress`) starts with the run's short name (`[C1e10_L2-d64_15e3] step ...`,
experiments/console.py short_label) when several runs share the terminal: a job of a
multirun (a sweep), or a member of a pack (experiments/train/pack.py sets `RUN_LABEL`). With
`SCALELAB_QUIET=1` there is no progress line.

metrics.jsonl keys: step, tokens, flops, loss, lr, grad_norm, step_time_s, tokens_per_s, mfu, and
eval_loss on eval steps (with `eval.tasks`, also `task/<name>/loss` and `task/<name>/accuracy`).
On resume the file is cut back to the checkpointed step so it never holds a step twice. Lines
are strict JSON (`models.base.jsonio.jsonl_line`): a NaN or infinite value is written as `null`,
and `models.base.rundir.read_metrics` (the one reader) reads a null metric back as NaN and skips
a line torn by a kill.

A `Tracker` (experiments/train/tracking.py, `tracker=tensorboard|wandb|mlflow`) gets every
record `MetricsLog.write` writes, so the dashboards show what the file holds; the file is written
first and stays the source of truth whatever the tracker does.
"""

from __future__ import annotations

import contextvars
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from experiments.console import quiet, short_label
from models.base.rundir import MetricsWriter, RunSummary, read_metrics
from models.flops import MFU_CAUSAL

# `read_metrics` is models.base.rundir's, the one metrics.jsonl reader (imported here by callers
# that predate it).
__all__ = ["RUN_LABEL", "MetricsLog", "Progress", "read_metrics", "run_label"]

# the short name of the run this thread trains, where it shares a process with others (a pack member)
RUN_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("scalelab_run_label", default=None)

if TYPE_CHECKING:
    from experiments.train.tracking import Tracker


class MetricsLog:
    """metrics.jsonl of a run (written by `models.base.rundir.MetricsWriter`, the one writer),
    mirrored to `tracker` when given (which then starts at `reset` / `truncate_after`: before the
    steps). With `enabled=False` (processes other than 0) it writes and mirrors nothing."""

    def __init__(self, path: Path, enabled: bool = True, tracker: "Tracker | None" = None):
        self.path = Path(path)
        self.enabled = enabled
        self.tracker = tracker
        self._writer = MetricsWriter(self.path)

    def truncate_after(self, step: int) -> None:
        """Keep only records with record['step'] <= step (called on resume)."""
        if self.tracker is not None:
            self.tracker.start(resume_step=step)
        if self.enabled:
            self._writer.truncate_after(step)

    def reset(self) -> None:
        if self.tracker is not None:
            self.tracker.start(resume_step=0)
        if self.enabled:
            self._writer.remove()

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._writer.append(record)
        if self.tracker is not None:
            self.tracker.log(record)

    def flush(self) -> None:
        self._writer.flush()
        if self.tracker is not None:
            self.tracker.flush()

    def close(self) -> None:
        self._writer.close()

    def finish(self, status: str, summary: RunSummary | None = None) -> None:
        """Close the file and end the tracker's run with the run's status and final numbers."""
        self.close()
        if self.tracker is not None:
            self.tracker.finish(status, summary)


def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def _dur(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(round(s))
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")
    )


def run_label() -> str | None:
    """The prefix of this run's console lines: a pack member's `RUN_LABEL`, else, in a Hydra
    multirun job, its directory's short name; None for a run alone on its terminal."""
    label = RUN_LABEL.get()
    if label:
        return label
    try:
        # deferred: Hydra's runtime config, read only for a run's console prefix
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return short_label(Path(str(HydraConfig.get().runtime.output_dir)).name)
    except Exception:  # noqa: BLE001 - no Hydra, or a config without its runtime node: no prefix
        pass
    return None


class Progress:
    """Prints `step a/b | tokens x/y (p%) | loss | tok/s | mfu | ETA` at most every `every_s`,
    after `[<run>] ` when `label` is given (default: `run_label()`); nothing with SCALELAB_QUIET=1."""

    def __init__(
        self,
        total_steps: int,
        tokens_per_step: int,
        every_s: float = 2.0,
        enabled: bool = True,
        stream: TextIO | None = None,
        mfu_label: str = MFU_CAUSAL,
        label: str | None = None,
    ):
        self.total, self.tps, self.every = total_steps, tokens_per_step, every_s
        self.mfu_label = mfu_label  # the MFU's convention as printed (models.flops.mfu_label)
        self.enabled, self.stream = enabled and not quiet(), stream or sys.stdout
        label = run_label() if label is None else label
        self.prefix = f"[{label}] " if label else ""
        self._last = -math.inf

    def update(
        self,
        step: int,
        loss: float,
        tokens_per_s: float,
        mfu: float,
        eval_loss: float | None = None,
        force: bool = False,
    ) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < self.every):
            return
        self._last = now
        done, total = step * self.tps, self.total * self.tps
        eta = (total - done) / tokens_per_s if tokens_per_s > 0 else float("inf")
        ev = f" eval {eval_loss:.4f}" if eval_loss is not None else ""
        print(
            f"{self.prefix}step {step}/{self.total} | "
            f"tokens {_si(done)}/{_si(total)} ({100 * done / total:.0f}%) | "
            f"loss {loss:.4f}{ev} | {_si(tokens_per_s)} tok/s | mfu {mfu:.3f} ({self.mfu_label}) | "
            f"ETA {_dur(eta)}",
            file=self.stream,
            flush=True,
        )
