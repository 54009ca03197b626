"""Orbax checkpoints of (params, optimizer state) plus a JSON record (step, tokens, fingerprint).

Layout: `<run_dir>/checkpoints/<step>/{state,meta}`; Orbax writes each step to a temporary
directory and renames it when complete, so a kill mid-save leaves the previous checkpoint intact.
Restoring takes abstract targets with shardings, so a checkpoint can be restored onto another mesh.

A checkpoint can still be unreadable (a truncated file after a full disk or a kill while the
filesystem flushed, a copy interrupted): `restore_newest` then resumes from the newest one that
reads, moves the unreadable newer ones to `<run_dir>/checkpoints.corrupt/` (a later save of the
same step would otherwise collide with them) and says so in one line; with none readable it
raises CheckpointError instead of silently starting over from step 0.

A full disk (models/base/diskspace.py): a save that runs out of space raises one DiskFull naming
the step and the directory, however many arrays failed (Orbax's own per-array tracebacks from
its writer threads are kept off the console), and the failed step's temporary directory is
removed, so the space it held is free again and nothing half-written stays behind. With
asynchronous saves, `poll()` (the trainer calls it every step) raises it as soon as the write
has failed, instead of at the next save.

For analysis code: `load_params(run_dir)` returns (ModelConfig, graphdef, params) on one device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import logging
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import SingleDeviceSharding

from models.base.diskspace import DiskFull, is_disk_full
from models.base.rundir import CHECKPOINTS_DIR, CORRUPT_CHECKPOINTS_DIR
from models.config import ModelConfig
from models.transformer import Transformer, split_params


class CheckpointError(RuntimeError):
    """No checkpoint of the run can be read: resuming would silently start over from step 0."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """A checkpoint read back: its step, (params, opt_state) and JSON record, and the newer
    checkpoints that could not be read (step, reason), now under `checkpoints.corrupt/`."""

    step: int
    params: Any
    opt_state: Any
    meta: dict[str, Any]
    skipped: tuple[tuple[int, str], ...] = ()


@contextlib.contextmanager
def _orbax_quiet():
    """Silence Orbax's own log lines about unreadable checkpoint files (`Failed to json parse
    Metadata file ...`, one per file and process) while checkpoints are listed and tried: what
    could not be read is reported once, by `restore_newest`."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        absl.setLevel(level)


@contextlib.contextmanager
def _read_attempt():
    """Keep a failed read's aftermath off the console: a truncated array file makes Orbax's
    TensorStore reads fail many times over, each printing a traceback from its own thread (some
    after the read returned) and leaving coroutines that warn when collected. What failed is
    reported once, by `restore_newest`; the stragglers are given a moment to land here."""
    err, hook = sys.stderr, sys.unraisablehook
    sys.stderr, sys.unraisablehook = io.StringIO(), lambda *_: None
    failed = False
    try:
        with _orbax_quiet():
            yield
    except Exception:
        failed = True
        raise
    finally:
        if failed:
            with warnings.catch_warnings():  # "coroutine ... was never awaited" from the failed reads
                warnings.simplefilter("ignore", RuntimeWarning)
                gc.collect()
            time.sleep(0.2)
        sys.stderr, sys.unraisablehook = err, hook


class _DiskFullRecords(logging.Filter):
    """Drops Orbax's log records of a full disk (each writer thread logs its own traceback, one
    per array and stage: 4 to 50 of them for one failed save); the save's DiskFull says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (is_disk_full(exc) or is_disk_full(Exception(record.getMessage())))


_DISK_FULL_FILTER = _DiskFullRecords()


def _quiet_disk_full_logs() -> None:
    """Install the filter on the logger Orbax writes through, and `_unraisable` (once each)."""
    absl = logging.getLogger("absl")
    if _DISK_FULL_FILTER not in absl.filters:
        absl.addFilter(_DISK_FULL_FILTER)
    if getattr(sys.unraisablehook, "__name__", "") != _unraisable.__name__:
        _unraisable.previous = sys.unraisablehook  # type: ignore[attr-defined]
        sys.unraisablehook = _unraisable


def _unraisable(u: Any) -> None:
    """Drop what a failed TensorStore write leaves behind: its remaining writes complete after
    Orbax's event loop closed, and each completion's `call_soon_threadsafe` raises `RuntimeError:
    Event loop is closed` from C++, printed as a traceback (8 to 14 per failed save on a full
    disk). Anything else goes to the hook that was there before."""
    exc, tb = u.exc_value, u.exc_traceback
    if (
        isinstance(exc, RuntimeError)
        and str(exc) == "Event loop is closed"
        and u.object is None
        and tb is not None
        and tb.tb_frame.f_code.co_name == "call_soon_threadsafe"
    ):
        return
    _unraisable.previous(u)  # type: ignore[attr-defined]


_unraisable.previous = sys.unraisablehook  # type: ignore[attr-defined]


def _state_bytes(*trees: Any) -> int:
    """Bytes of the arrays in `trees` (what one checkpoint of them holds, roughly)."""
    return int(sum(getattr(x, "nbytes", 0) for t in trees for x in jax.tree.leaves(t)))


def _warn(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _reason(err: BaseException) -> str:
    """`Type: first line` of an error, short enough for a one-line warning."""
    text = str(err).strip().splitlines()
    first = text[0].split(" See full TensorStore details")[0] if text else ""
    return f"{type(err).__name__}: {first[:120]}" if first else type(err).__name__


def _min_over_processes(step: int) -> int:
    """The smallest `step` of all processes (each process may read different files)."""
    if jax.process_count() == 1:
        return step
    return int(np.min(multihost_utils.process_allgather(np.int64(step))))


class Checkpointer:
    """Orbax CheckpointManager of one run directory: save / restore / read the JSON record."""

    def __init__(
        self, run_dir: Path, keep: int | None = 2, async_save: bool = False, subdir: str = CHECKPOINTS_DIR
    ):
        """Checkpoints under `<run_dir>/<subdir>`, the newest `keep` kept (None: all). With
        `async_save`, `save` returns once the arrays are copied to host memory and Orbax writes
        the files on a background thread (measured: a save then costs the step ~the copy, not
        the write); `wait()` / `close()` / the next save wait for the write to finish."""
        self.directory = (Path(run_dir) / subdir).resolve()
        self.async_save = async_save
        self._pending: tuple[int, int] | None = None  # (step, bytes) of a save not known to be on disk
        self._failed = False  # a save failed: close() releases the manager without waiting again
        _quiet_disk_full_logs()
        with _orbax_quiet():  # it reads every checkpoint's metadata file: corrupt ones are ours to report
            self._mngr = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=keep, create=True, enable_async_checkpointing=async_save
                ),
                item_names=("state", "meta"),
            )

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def save(self, step: int, params: Any, opt_state: Any, meta: dict[str, Any]) -> None:
        """Save `step` (asynchronously with `async_save`: see `poll`); DiskFull when it (or the
        asynchronous save before it) ran out of space."""
        self.wait()  # the previous save's failure is that save's, reported as such
        self._pending = (step, _state_bytes(params, opt_state))
        try:
            self._mngr.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                    meta=ocp.args.JsonSave(meta),
                ),
                force=True,
            )
        except Exception as e:
            self._raise_failed(e)
        if not self.async_save:
            self.wait()

    @property
    def pending(self) -> bool:
        """A save was started and is not known to be on disk yet."""
        return self._pending is not None

    def poll(self) -> None:
        """Raise the asynchronous save's error (DiskFull for a full disk) once its write has
        ended; nothing while it is still writing or when none is in flight. Cheap: every step."""
        if self._pending is not None and not self._mngr.is_saving_in_progress():
            self.wait()

    def wait(self) -> None:
        """Block until an asynchronous save in flight is on disk (DiskFull if it did not fit)."""
        try:
            self._mngr.wait_until_finished()
        except Exception as e:
            self._raise_failed(e)
        self._pending = None

    def _raise_failed(self, err: Exception) -> None:
        """The pending save failed with `err`: its temporary directory goes; a full disk is
        raised as one DiskFull naming the step, anything else as it is."""
        step, nbytes = self._pending if self._pending is not None else (None, None)
        self._pending, self._failed = None, True
        if step is not None:
            self._remove_partial(step)
        if not is_disk_full(err):
            raise err
        what = f"the checkpoint of step {step}" if step is not None else "a checkpoint"
        raise DiskFull.writing(what, self.directory, needed=nbytes) from err

    def _remove_partial(self, step: int) -> None:
        """Remove `step`'s unfinished temporary directories (process 0): Orbax never reads them,
        and on a full disk the space they hold is what the failed summary needs."""
        if jax.process_index() != 0 or not self.directory.is_dir():
            return
        for tmp in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
            shutil.rmtree(tmp, ignore_errors=True)

    def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any) -> tuple[Any, Any, dict]:
        out = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore({"params": abstract_params, "opt_state": abstract_opt_state}),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return out.state["params"], out.state["opt_state"], dict(out.meta)

    def restore_params(self, step: int, abstract_params: Any) -> Any:
        """The parameters alone of checkpoint `step`, onto `abstract_params`' shardings (a
        continued run takes its parent's weights without its optimizer state)."""
        out = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.PyTreeRestore(
                    {"params": abstract_params},
                    partial_restore=True,
                    restore_args=ocp.checkpoint_utils.construct_restore_args({"params": abstract_params}),
                )
            ),
        )
        return out.state["params"]

    def all_steps(self) -> list[int]:
        """The steps of the checkpoints on disk, oldest first."""
        return sorted(self._mngr.all_steps())

    def read_meta(self, step: int) -> dict[str, Any]:
        out = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out.meta)

    def restore_newest(
        self,
        abstract_params: Any,
        abstract_opt_state: Any,
        check: Callable[[dict[str, Any]], None] | None = None,
        warn: Callable[[str], None] = _warn,
    ) -> Restored | None:
        """The newest checkpoint that reads back, or None when there is none at all.

        `check(meta)` vets the record of the candidate (e.g. refuses another config's run) and
        may raise; read errors of a checkpoint (truncated or missing files, bad JSON) skip it for
        the previous one. All processes restore the same step (the oldest any of them chose).
        Unreadable newer checkpoints are moved to `checkpoints.corrupt/` with one warning line.
        Raises CheckpointError when checkpoints exist but none reads."""
        steps = sorted(self._mngr.all_steps(), reverse=True)
        if not steps:
            return None
        bad: list[tuple[int, str]] = []
        got = None
        for step in steps:
            got = self._try_restore(step, abstract_params, abstract_opt_state, check, bad)
            if got is not None:
                break
        agreed = _min_over_processes(got[0] if got is not None else -1)  # every process calls it
        if agreed < 0:
            listed = "; ".join(f"step {s}: {r}" for s, r in bad[:3]) or "unreadable on another process"
            raise CheckpointError(
                f"no checkpoint under {self.directory} can be read ({listed}); "
                "move the directory away to start the run over"
            )
        step, (params, opt_state, meta) = got
        if agreed != step:  # another process could not read this one: all take the older
            params, opt_state, meta = self.restore(agreed, abstract_params, abstract_opt_state)
            step = agreed
        newer = [s for s in steps if s > step]
        reasons = dict(bad)
        skipped = tuple((s, reasons.get(s, "unreadable on another process")) for s in newer)
        if newer:
            where = self._set_aside(newer)
            warn(
                f"warning: checkpoint{'s' if len(newer) > 1 else ''} at step "
                f"{', '.join(map(str, newer))} unreadable ({skipped[0][1]}); moved to {where}; "
                f"resuming from step {step}"
            )
        return Restored(step, params, opt_state, meta, skipped)

    def _try_restore(
        self,
        step: int,
        abstract_params: Any,
        abstract_opt_state: Any,
        check: Callable[[dict[str, Any]], None] | None,
        bad: list[tuple[int, str]],
    ) -> tuple[int, tuple[Any, Any, dict]] | None:
        """(step, restored) or None (the reason appended to `bad`); `check` errors propagate."""
        try:
            with _read_attempt():
                meta = self.read_meta(step)
        except Exception as e:  # noqa: BLE001 - any read error means: try the previous one
            bad.append((step, _reason(e)))
            return None
        if check is not None:
            check(meta)
        try:
            with _read_attempt():
                return step, self.restore(step, abstract_params, abstract_opt_state)
        except Exception as e:  # noqa: BLE001
            bad.append((step, _reason(e)))
            return None

    def _set_aside(self, steps: list[int]) -> Path:
        """Move checkpoints `steps` to `checkpoints.corrupt/` (process 0; kept, not deleted: a
        read error may be the filesystem's, and the files are evidence) and forget them."""
        where = self.directory.parent / CORRUPT_CHECKPOINTS_DIR
        if jax.process_index() == 0:
            where.mkdir(parents=True, exist_ok=True)
            for s in steps:
                src, dst = self.directory / str(s), where / str(s)
                k = 1
                while dst.exists():
                    dst, k = where / f"{s}.{k}", k + 1
                if src.exists():
                    shutil.move(str(src), str(dst))
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices("scalelab-checkpoints-set-aside")
        with _orbax_quiet():
            self._mngr.reload()
        return where

    def close(self) -> None:
        """Wait for a save in flight (DiskFull if it did not fit), then release the manager."""
        if not self._failed:
            self.wait()
        self._release()

    def abandon(self) -> None:
        """Release the manager on the way out of a failed run: a save in flight is waited for and
        its error dropped (the run reports its own), its partial directory removed."""
        try:
            self.wait()
        except Exception:  # noqa: BLE001 - the run is failing already; that error is the one told
            pass
        self._release()

    def _release(self) -> None:
        self._failed = True  # once released, never waited for again
        try:
            self._mngr.close()
        except Exception as e:  # noqa: BLE001 - closing after a failed save: nothing left to lose
            if not is_disk_full(e):
                raise


def load_params(run_dir: Path, step: int | None = None):
    """(ModelConfig, graphdef, params) of a run's checkpoint, on the default device: `step`, or
    the newest one that reads (an unreadable newer one is skipped with a warning line).

    Use with `models.transformer.apply(graphdef, params, tokens_BxL)`.
    """
    run_dir = Path(run_dir)
    ck = Checkpointer(run_dir)
    try:
        steps = [step] if step is not None else sorted(ck._mngr.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint under {ck.directory}")
        for k, s in enumerate(steps):
            try:
                with _read_attempt():
                    return _load_params_at(ck, s)
            except Exception as e:  # noqa: BLE001 - an unreadable checkpoint: the previous one
                if step is not None or k == len(steps) - 1:
                    raise
                _warn(
                    f"warning: checkpoint at step {s} of {run_dir} unreadable ({_reason(e)}); "
                    f"using step {steps[k + 1]}"
                )
    finally:
        ck.close()


def _load_params_at(ck: Checkpointer, step: int):
    meta = ck.read_meta(step)
    cfg = ModelConfig(**meta["model"])
    sh = SingleDeviceSharding(jax.devices()[0])
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param)
    p_shapes = jax.eval_shape(lambda: split_params(Transformer(cfg, rngs=nnx.Rngs(0)))[1])
    target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), p_shapes)
    out = ck._mngr.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                {"params": target},
                partial_restore=True,
                restore_args=ocp.checkpoint_utils.construct_restore_args({"params": target}),
            )
        ),
    )
    return cfg, graphdef, out.state["params"]
