"""A full disk, said once: the write layer's one error and the helpers that recognise it.

Every writer of scalelab (checkpoints, `metrics.jsonl`, `summary.json`, the console log, the
tracker's files, the report, `collect`'s tables, `--json`) turns "no space left on device" into
`DiskFull`, which names what was being written, where, and the free space then (and the space
needed, when known). Commands print it as one `error:` line instead of a traceback:

    training:  error: no space left on device writing the checkpoint of step 50 in <run>/checkpoints
               (0 B free); free space and relaunch: the run resumes from step 0
    analysis:  error: no space left on device writing <out>/report.html (12.0 KiB free, 40.3 KiB
               needed); free space and run the command again

`DiskFull` is an `OSError` (errno ENOSPC), so code that already copes with failed writes keeps
doing so. `is_disk_full` also recognises the forms libraries give it: an `OSError` with errno
ENOSPC / EDQUOT, and TensorStore's `ValueError: RESOURCE_EXHAUSTED: ... No space left on device`
under Orbax, anywhere in an exception's cause / context chain. Standard library only.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# How TensorStore (under Orbax) and other C++ writers spell ENOSPC in their messages.
NO_SPACE_TEXTS = ("No space left on device", "os_error_code='28'", "Disk quota exceeded")
# `summary.json`'s `error` of a run that stopped on a full disk starts so (`<type>: <message>`):
# the sweeper resumes such a run on relaunch instead of keeping it as failed for good.
DISK_FULL_ERROR_PREFIX = "DiskFull: "


def human_bytes(n: float | None) -> str:
    """`0 B`, `980 B`, `12.0 KiB`, `1.5 GiB` (binary units, as `df -h`); `? B` when unknown."""
    if n is None:
        return "? B"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free space (for an unprivileged writer) on the filesystem holding `path` or, when it does
    not exist yet, its nearest existing parent; None when it cannot be told."""
    p = Path(path).absolute()
    for candidate in (p, *p.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


class DiskFull(OSError):
    """No space left on the device while writing `what` (in `directory`, when `what` is not a
    path itself). `free`: bytes free on that filesystem when the write failed (None: unknown);
    `needed`: bytes the write needed, when known. `summary_written` is set by the run that
    failed (True / False: whether its `failed` summary.json could still be written)."""

    def __init__(
        self,
        what: str,
        directory: str | os.PathLike | None = None,
        free: int | None = None,
        needed: int | None = None,
    ):
        self.what = str(what)
        self.directory = Path(directory) if directory is not None else None
        self.free = free
        self.needed = needed
        self.summary_written: bool | None = None
        super().__init__(errno.ENOSPC, self.describe())

    @classmethod
    def writing(cls, what: str, directory: str | os.PathLike, needed: int | None = None) -> "DiskFull":
        """`what` in `directory` did not fit; the free space is measured now."""
        return cls(what, directory, free_bytes(directory), needed)

    @classmethod
    def writing_file(cls, path: str | os.PathLike, needed: int | None = None) -> "DiskFull":
        """The file `path` did not fit (it is named whole in the message)."""
        return cls(str(path), None, free_bytes(Path(path).parent), needed)

    def describe(self) -> str:
        where = f" in {self.directory}" if self.directory is not None else ""
        space = f"{human_bytes(self.free)} free"
        if self.needed:
            space += f", {human_bytes(self.needed)} needed"
        return f"no space left on device writing {self.what}{where} ({space})"

    def __str__(self) -> str:
        return self.describe()

    def __reduce__(self):  # pickles (process pools, Hydra's job returns) with its fields
        return (type(self), (self.what, self.directory, self.free, self.needed))

    def run_line(self, resume_step: int) -> str:
        """The trainer's line (without `error: `): what failed and how to go on."""
        line = f"{self.describe()}; free space and relaunch: the run resumes from step {resume_step}"
        if self.summary_written is False:
            line += " (summary.json could not be written either: the run has no status on disk)"
        return line

    def command_line(self) -> str:
        """An analysis command's line (without `error: `)."""
        return f"{self.describe()}; free space and run the command again"


def is_disk_full(err: BaseException | None) -> bool:
    """Whether `err`, or an error in its cause / context chain, is a full disk (or quota)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, DiskFull):
            return True
        if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
            return True
        if any(t in str(err) for t in NO_SPACE_TEXTS):
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full_of(err: BaseException, what: str | None = None, directory: str | os.PathLike | None = None):
    """`err` as a DiskFull (itself when it is one; `what` in `directory` when given, else the file
    an OSError names), or None when it is not a full disk."""
    if isinstance(err, DiskFull):
        return err
    if not is_disk_full(err):
        return None
    if what is not None and directory is not None:
        return DiskFull.writing(what, directory)
    filename = _filename(err)
    if filename:
        return DiskFull.writing_file(filename)
    return DiskFull(what or "a file", directory, free_bytes(directory) if directory is not None else None)


def _filename(err: BaseException | None) -> str | None:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.filename:
            return os.fsdecode(err.filename)
        err = err.__cause__ or err.__context__
    return None


def disk_full_summary(error: str | None) -> bool:
    """Whether a run's `error` (summary.json's, or the line a job returned) says a full disk
    stopped it: it resumes on relaunch."""
    text = str(error or "")
    return text.startswith(DISK_FULL_ERROR_PREFIX) or "no space left on device" in text.lower()


def last_complete_step(checkpoints_dir: str | os.PathLike) -> int:
    """The newest complete checkpoint's step under `checkpoints_dir` (0 when there is none): the
    step a relaunch resumes from. Orbax writes a step to `<step>.orbax-checkpoint-tmp*` and
    renames it to `<step>` once complete, so only all-digit names count."""
    try:
        steps = [int(p.name) for p in Path(checkpoints_dir).iterdir() if p.name.isdigit() and p.is_dir()]
    except OSError:
        return 0
    return max(steps, default=0)
