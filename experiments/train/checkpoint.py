"""Orbax checkpoints of (params, optimizer state) plus a JSON record (step, tokens, fingerprint).

Layout: `<run_dir>/checkpoints/<step>/{state,meta}`; Orbax writes each step to a temporary
directory and renames it when complete, so a kill mid-save leaves the previous checkpoint intact.
Restoring takes abstract targets with shardings, so a checkpoint can be restored onto another mesh.

A checkpoint can still be unreadable (a truncated file after a full disk or a kill while the
filesystem flushed, a copy interrupted): `restore_newest` then resumes from the newest one that
reads, moves the unreadable newer ones to `<run_dir>/checkpoints.corrupt/` (a later save of the
same step would otherwise collide with them) and says so in one line; with none readable it
raises CheckpointError instead of silently starting over from step 0.

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
        self._mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )
        if not self.async_save:
            self._mngr.wait_until_finished()

    def wait(self) -> None:
        """Block until an asynchronous save in flight is on disk."""
        self._mngr.wait_until_finished()

    def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any) -> tuple[Any, Any, dict]:
        out = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore({"params": abstract_params, "opt_state": abstract_opt_state}),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return out.state["params"], out.state["opt_state"], dict(out.meta)

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
        self._mngr.wait_until_finished()
        self._mngr.close()


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
