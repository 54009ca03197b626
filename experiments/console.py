"""One terminal, many runs: how a sweep's runs share the console with the sweep's progress bar.

Kept light (stdlib only): the sweeper plugin, its launchers' workers and the trainer's progress
line (experiments/train/metrics.py) import it.

* `quiet()`: `SCALELAB_QUIET=1` (what `scalelab sweep --quiet` / `train --quiet` set) turns off
  the progress bar, the trainer's `step k/N` lines and the sweep's per-run chatter; errors, warnings
  and the sweep's two count lines still print.
* `short_label(run_dir_name)`: the prefix a run's console lines carry when several runs share a
  terminal: the run directory's name with its id cut to 4 characters (`C1e10_L2-d64_15e3` for
  `C1e10_L2-d64_15e35856b5`), still the start of the directory's name.
* `LineClearing`: while the sweep's bar is drawn on a terminal (`BAR_ENV` is set), every line a run
  writes to that terminal first clears the bar's line, so the run's lines scroll above the bar
  instead of being glued to it; the bar is redrawn below them within a second.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Any, Iterator, TextIO

QUIET_ENV = "SCALELAB_QUIET"
BAR_ENV = "SCALELAB_SWEEP_BAR"  # "1" while a sweep's progress bar is drawn on the terminal
CLEAR_LINE = "\r\x1b[2K"  # carriage return + erase the whole line (the bar's)
_ID = re.compile(r"^(?P<label>.+)_(?P<id>[0-9a-f]{10})$")  # experiments/sweeps/runs.py run_dirname, ID_LEN


def quiet(environ: Any = None) -> bool:
    """Whether `SCALELAB_QUIET` asks for quiet: 1, true, yes or on (any case)."""
    value = (os.environ if environ is None else environ).get(QUIET_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def short_label(name: str) -> str:
    """`<label>_<10-hex id>` -> `<label>_<first 4 of the id>`; any other name as it is."""
    m = _ID.match(name)
    return f"{m['label']}_{m['id'][:4]}" if m else name


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class LineClearing:
    """A text stream that writes through to `stream`, erasing the current terminal line before
    each line it starts (only when `stream` is a terminal; otherwise it writes exactly what it is
    given). `at_line_start` tells the bar's redraw whether a line is half written."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._tty = isatty(stream)
        self._lock = threading.Lock()
        self.at_line_start = True

    def write(self, s: str) -> int:
        if not s:
            return 0
        with self._lock:
            out = s
            if self._tty:
                head, *rest = s.split("\n")
                out = "\n".join(
                    [(CLEAR_LINE + head) if head and self.at_line_start else head]
                    + [(CLEAR_LINE + part) if part else part for part in rest]
                )
            self._stream.write(out)
            self.at_line_start = s.endswith("\n")
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install_if_bar() -> None:
    """Worker side (a launcher's job process): when the sweep's bar is on the terminal, wrap this
    process's stdout and stderr in `LineClearing` (for the rest of the process: a worker only runs
    jobs of that sweep)."""
    if os.environ.get(BAR_ENV) == "1":
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, LineClearing) and isatty(stream):
                setattr(sys, name, LineClearing(stream))


@contextlib.contextmanager
def clearing_streams() -> Iterator[tuple[LineClearing, LineClearing]]:
    """This process's stdout and stderr wrapped in `LineClearing` for the block (the sweeper's own
    process, where local launchers run their jobs), and `BAR_ENV` set for the processes it starts."""
    saved = sys.stdout, sys.stderr, os.environ.get(BAR_ENV)
    out, err = LineClearing(sys.stdout), LineClearing(sys.stderr)
    sys.stdout, sys.stderr = out, err
    os.environ[BAR_ENV] = "1"
    try:
        yield out, err
    finally:
        if sys.stdout is out:
            sys.stdout = saved[0]
        if sys.stderr is err:
            sys.stderr = saved[1]
        if saved[2] is None:
            os.environ.pop(BAR_ENV, None)
        else:
            os.environ[BAR_ENV] = saved[2]
