"""Progress of the long analysis loops: tqdm bars on stderr that appear only when a loop is slow.

Every loop that can take seconds (bootstrap resamples, backtest methods and folds, compare's pairs
and folds, forecast and fit-hparams candidates) reports through this module, so they all behave
alike:

    from analysis.core import progress

    for m in progress.track(methods, desc="backtest budget", unit="method"):
        ...                                   # a bar over an iterable (len() gives its total)

    with progress.bar(total=n, desc="fit chinchilla: bootstrap", unit="fit") as b:
        ...
        b.update(k)                           # thread-safe; b.add_total(j) when more work appears

    progress.set_quiet(True)                  # the command line's --quiet: no bar anywhere

What every bar does, whoever opens it:

* It writes to stderr only, the stream as it is when the bar opens (a redirection made before is
  followed), never to stdout: `--json -` output stays pure JSON.
* It appears only after `DELAY_S` (2 s): a loop that ends sooner prints nothing at all.
* It is drawn only on a terminal: when stderr is a file or a pipe (a log, CI, a test's capture) no
  bar is drawn, so no carriage-return line ever lands in a log.
* It is silenced by `set_quiet(True)` (for `--quiet`) or by the environment variable
  `SCALELAB_QUIET=1` (what `scalelab sweep --quiet` hands its children); `set_quiet(None)` goes
  back to the environment's choice.
* It is cheap: a silenced bar is a do-nothing object (tqdm is not even imported), and a drawn one
  redraws at most every `MIN_INTERVAL_S` (tqdm's `mininterval`) however often it is updated.
* It is transient: the bar clears its line when it closes (tqdm `leave=False`), so a command's own
  output follows on a clean terminal. Bars opened inside another bar's loop stack below it.

Wrapping a whole command's stages (`report`, say) is a bar over the stage names:

    for stage in progress.track(["collect", "fit", "figures"], desc="report", unit="stage"):
        ...
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import IO, Any, Iterable, Iterator, TypeVar

QUIET_ENV = "SCALELAB_QUIET"  # "1" (or true / yes / on): no progress bars, in this process and its children
DELAY_S = 2.0  # a bar appears once its loop has run this long
MIN_INTERVAL_S = 0.1  # at most this often a bar is redrawn (tqdm's mininterval)
FALLBACK_SIZE = (80, 24)  # columns and rows of a terminal that reports no size

T = TypeVar("T")

_quiet: bool | None = None  # set_quiet's choice; None: the environment decides


def set_quiet(flag: bool | None) -> None:
    """Silence every progress bar of this process (True), show them (False), or let
    `SCALELAB_QUIET` decide (None, the default). The command line's global `--quiet` calls
    `set_quiet(True)` before it runs a command; errors and results are printed as ever."""
    global _quiet
    _quiet = None if flag is None else bool(flag)


def env_quiet(environ: Any = None) -> bool:
    """Whether `SCALELAB_QUIET` asks for quiet: 1, true, yes or on (any case)."""
    value = (os.environ if environ is None else environ).get(QUIET_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def is_quiet() -> bool:
    """`set_quiet`'s choice, else the environment's."""
    return env_quiet() if _quiet is None else _quiet


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _zero_width(stream: Any) -> bool:
    """A terminal that reports no columns (a pseudo-terminal nobody sized, as `script` or some CI
    runners make): tqdm would trim every bar to nothing on it."""
    try:
        return os.get_terminal_size(stream.fileno()).columns <= 0
    except (AttributeError, ValueError, OSError):  # not a file descriptor: tqdm finds no width either
        return False


def enabled(stream: IO[str] | None = None) -> bool:
    """Whether a bar opened now on `stream` (default: the current stderr) would be drawn: not
    quiet, and the stream is a terminal."""
    return not is_quiet() and _isatty(sys.stderr if stream is None else stream)


class Bar:
    """What `bar()` yields: `update(n)` counts work done (from any thread), `add_total(n)` adds
    work found on the way, `note(text)` sets the text after the counts. A silenced bar has the
    same methods, doing nothing."""

    def __init__(self, tq: Any = None) -> None:
        self._tq = tq
        self._lock = threading.Lock()

    @property
    def shown(self) -> bool:
        """Whether this bar draws (not silenced); it still waits `DELAY_S` before it appears."""
        return self._tq is not None

    def update(self, n: int = 1) -> None:
        if self._tq is not None and n:
            with self._lock:
                self._tq.update(n)

    def add_total(self, n: int) -> None:
        if self._tq is not None and n:
            with self._lock:
                self._tq.total = (self._tq.total or 0) + n

    def note(self, text: str) -> None:
        if self._tq is not None:
            with self._lock:
                self._tq.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._tq is not None:
            with self._lock:
                self._tq.close()
            self._tq = None


def _open(
    total: int | None, desc: str, unit: str, stream: IO[str] | None, iterable: Iterable[Any] | None = None
) -> Bar:
    out = sys.stderr if stream is None else stream
    if not enabled(out):
        return Bar()
    from tqdm import tqdm  # deferred: a quiet or piped command never loads it

    unsized = _zero_width(out)
    return Bar(
        tqdm(
            iterable,
            total=total,
            desc=desc,
            unit=unit,
            file=out,
            delay=DELAY_S,
            mininterval=MIN_INTERVAL_S,
            leave=False,
            dynamic_ncols=not unsized,
            ncols=FALLBACK_SIZE[0] if unsized else None,
            nrows=FALLBACK_SIZE[1] if unsized else None,
            disable=False,
        )
    )


@contextlib.contextmanager
def bar(
    total: int | None = None, desc: str = "", unit: str = "it", stream: IO[str] | None = None
) -> Iterator[Bar]:
    """A bar of `total` units (None: a counter without a total) for work counted by hand, closed
    (its line cleared) when the block ends, also on an exception."""
    b = _open(total, desc, unit, stream)
    try:
        yield b
    finally:
        b.close()


def track(
    iterable: Iterable[T],
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    stream: IO[str] | None = None,
) -> Iterable[T]:
    """The items of `iterable`, counted on a bar (total: `total`, else `len(iterable)` when it has
    one). Silenced, the iterable itself comes back: a loop pays nothing for a bar it does not show."""
    out = sys.stderr if stream is None else stream
    if not enabled(out):
        return iterable
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    # tqdm's own iterator (no generator of ours around it): it closes the bar when the loop ends
    return _open(total, desc, unit, out, iterable)._tq
