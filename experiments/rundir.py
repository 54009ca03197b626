"""Run-directory bookkeeping and the command-line contract shared by `python -m
experiments.train` and `python -m experiments.rl` (no JAX import).

`python -m experiments.train` checks `summary.json` with these before importing JAX, so that a
completed run started again exits in about a second.

A single run's directory is a function of its config: `hydra.run.dir` defaults (conf/config.yaml,
conf/rl.yaml) to `outputs/runs/${scalelab.train_run:}` / `outputs/rl/${scalelab.rl_run:}`, the
resolvers registered by `register_run_name`, so the same command started again finds its run and
resumes it. `console_log` copies what the run prints into `<run dir>/<job name>.log`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TextIO

from omegaconf import DictConfig, OmegaConf

from models.base.configs import to_plain
from models.base.diskspace import DiskFull, disk_full_of, last_complete_step
from models.base.errors import ConfigError
from models.base.fingerprint import diff_fields, fingerprint
from models.base.portable import lock_file, unlock_file
from models.base.rundir import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    SUMMARY_FILE,
    RunDir,
    RunStatus,
    RunSummary,
    console_log_name,
)
from sharding import distributed

# Keys whose change makes a run a different run (resuming it would mix two experiments).
# Sharding, eval/ckpt/log cadence are excluded: a run may resume on another mesh.
FINGERPRINT_TRAIN_KEYS = ("batch_size", "micro_batch_size", "tokens", "steps", "seed")
# ... and, only when set, where a continued run starts from (its parent's run directory, whose
# name carries the parent's own id; docs/train.md, "Continual pre-training")
FINGERPRINT_INIT_KEYS = ("init_from", "init_step", "init_optimizer")

# Keys added for continual pre-training, with the default at which a run's fingerprint and sweep
# run id leave them out (`without_moe_keys`): a run that does not use them keeps the id it had.
UNSET_DEFAULTS = (
    ("train", "init_from", None),
    ("train", "init_step", None),
    ("train", "init_optimizer", False),
    ("data", "mixture", None),
    ("data", "eval_corpora", None),
    ("data", "corpora", None),
    ("optim", "warmup_init", 0.0),
)


# Keys that only mean something for a mixture of experts (`model.moe` set): a dense run's
# fingerprint and sweep run id leave them out (`without_moe_keys`), so they are the ones it had
# before mixtures of experts existed.
MOE_ONLY_KEYS = (("model", "moe"), ("optim", "moe_aux_weight"), ("optim", "moe_z_weight"))


def without_moe_keys(tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` (a plain config, or fingerprint fields) without MOE_ONLY_KEYS when its model is
    dense, without `sharding.expert` at 1 and without the UNSET_DEFAULTS keys at their defaults
    (a copy of the nodes it changes)."""
    out = dict(tree)
    if not isinstance(out.get("model"), Mapping) or out["model"].get("moe") is None:
        for group, key in MOE_ONLY_KEYS:
            if isinstance(out.get(group), Mapping) and key in out[group]:
                out[group] = {k: v for k, v in out[group].items() if k != key}
    sharding = out.get("sharding")
    if isinstance(sharding, Mapping) and sharding.get("expert", 1) == 1 and "expert" in sharding:
        out["sharding"] = {k: v for k, v in sharding.items() if k != "expert"}
    for group, key, default in UNSET_DEFAULTS:
        node = out.get(group)
        if (
            isinstance(node, Mapping)
            and key in node
            and node[key] == default
            and type(node[key]) is type(default)
        ):
            out[group] = {k: v for k, v in node.items() if k != key}
    return out


def fingerprint_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a training config that make a run that run (see FINGERPRINT_TRAIN_KEYS;
    a dense run's without the mixture-of-experts keys, `without_moe_keys`)."""
    cfg = to_plain(cfg)
    train = cfg.get("train", {}) or {}
    return without_moe_keys(
        {
            "model": cfg.get("model"),
            "optim": cfg.get("optim"),
            "data": cfg.get("data"),
            "train": {
                **{k: train.get(k) for k in FINGERPRINT_TRAIN_KEYS},
                **{k: train[k] for k in FINGERPRINT_INIT_KEYS if train.get(k) not in (None, False)},
            },
        }
    )


def config_fingerprint(cfg: Mapping[str, Any]) -> str:
    """The fingerprint of `fingerprint_fields(cfg)`: `config_fingerprint` in summary.json."""
    return fingerprint(fingerprint_fields(cfg))


def same_run(stored: RunSummary, fields: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether the summary `stored` describes the run whose fingerprint fields are `fields` (the
    trainer's `fingerprint_fields(cfg)`, the RL loop's `experiments.rl.config.fingerprint_fields`),
    and the differences.

    Compares the stored `config_fields` (robust to how the fingerprint is spelled); falls back
    to the fingerprint for summaries without fields."""
    if stored.config_fields is not None:
        diffs = diff_fields(to_plain_json(stored.config_fields), to_plain_json(fields))
        return not diffs, diffs
    return stored.config_fingerprint in (None, fingerprint(fields)), []


def to_plain_json(obj: Any) -> Any:
    """`obj` as it reads back from JSON (tuples -> lists), so stored and live fields compare."""
    return json.loads(json.dumps(obj, default=str))


def write_failed_summary(run_dir: Path, base: RunSummary, err: BaseException, wall_time_s: float) -> bool:
    """Best-effort `status: failed` summary.json: `base` (the fields known so far), the error,
    and its traceback unless it is a ConfigError or a full disk (whose message already says what
    to fix). Call from an `except` block. Whether it could be written."""
    error = f"{type(err).__name__}: {err}"
    summary = base.replace(status=RunStatus.FAILED, error=error, wall_time_s=wall_time_s)
    if not isinstance(err, (ConfigError, DiskFull)):
        summary = summary.replace(traceback=traceback.format_exc())
    try:
        RunDir(run_dir).write_summary(summary)
    except OSError:
        return False
    return True


def completed_summary(run_dir: Path, fields: Callable[[], Mapping[str, Any]]) -> RunSummary | None:
    """The summary of a completed run in `run_dir` of the config whose fingerprint fields are
    `fields()` (called only when there is a completed run), else None: the one completed-run
    check of the trainer (`fingerprint_fields(cfg)`) and the RL loop.

    Raises ConfigError (a ValueError: exit 2) if the directory holds a completed run of a
    *different* config.
    """
    s = RunDir(run_dir).read_summary()
    if s is None or not s.completed:
        return None
    same, diffs = same_run(s, fields())
    if not same:
        raise ConfigError(
            f"{run_dir} already holds a completed run of another config "
            f"({'; '.join(diffs[:3]) or 'fingerprint differs'}); choose another hydra.run.dir"
        )
    return s


# ---- the command-line contract shared by `experiments.train` and `experiments.rl` ---------------
EXIT_CONFIG, EXIT_FAILED, EXIT_DIVERGED = 2, 1, 3
# A preemption signal (SIGTERM/SIGUSR1/SIGUSR2, experiments/preemption.py) stopped the run after
# a checkpoint: 128 + SIGTERM, what a shell reports for a process SIGTERM ended, so wrappers that
# read 143 as "terminated, start again" keep working; summary.json says status "preempted".
EXIT_PREEMPTED = 143


class RunDirBusy(RuntimeError):
    """Another live process is training the same run directory."""


@contextlib.contextmanager
def exclusive_run_dir(run_dir: Path, cfg: Mapping[str, Any]) -> Iterator[None]:
    """Hold `<run dir>/.run.lock` (`.run.lock.<k>` for process k of a multi-process run) for the
    whole run: two processes must never train one directory at once (e.g. a relaunched sweep and
    a worker the killed sweep left running), or their checkpoints collide. The lock is the
    operating system's and goes with the process, however it ends, so a crashed or killed run
    never leaves a stale one. RunDirBusy, before anything is written, when it is taken."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    k = process_index(cfg)
    path = RunDir(run_dir).lock_path(k)
    f = open(path, "w")
    if not lock_file(f, blocking=False):
        f.close()
        raise RunDirBusy(
            f"another process is training {run_dir} right now (it holds {path.name}); "
            "wait for it to finish or stop it, then start this run again"
        )
    try:
        yield
    finally:
        unlock_file(f)
        f.close()


def fail(msg: str, code: int, multirun: bool) -> RunSummary:
    """One `error: ...` line; exit with `code`, or in a multirun job return a failed summary (not
    written) so the other jobs of the sweep go on."""
    print(f"error: {msg}", file=sys.stderr, flush=True)
    if not multirun:
        sys.exit(code)
    return RunSummary.of(status=RunStatus.FAILED, error=msg)


def first_line(err: BaseException) -> str:
    """The first line of an error's message (OmegaConf adds `full_key: ...` lines below it)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def run_guarded(
    run_fn: Callable[[Any, Path], RunSummary],
    cfg: Any,
    run_dir: Path,
    multirun: bool,
    label: str = "training",
) -> RunSummary:
    """`run_fn(cfg, run_dir)` under the contract: bad config -> exit 2, diverged -> exit 3,
    preempted -> exit EXIT_PREEMPTED (also in a multirun job), the directory busy with another
    live run -> exit 1 (nothing written), any other failure -> exit 1 with one line (the
    traceback is in summary.json), never a traceback."""
    try:
        with exclusive_run_dir(run_dir, cfg):
            summary = run_fn(cfg, run_dir)
    except RunDirBusy as e:  # the other process owns the directory: write nothing into it
        return fail(str(e), EXIT_FAILED, multirun)
    except ConfigError as e:
        return fail(str(e), EXIT_CONFIG, multirun)
    except KeyboardInterrupt:
        return fail(
            f"interrupted; start the same command again to resume from the last checkpoint in {run_dir}",
            130,
            multirun,
        )
    except Exception as e:  # noqa: BLE001 - one line here, the traceback is in summary.json
        full = disk_full_of(e)  # one line: what did not fit, where, and the step a relaunch resumes from
        if full is not None:
            return fail(full.run_line(last_complete_step(run_dir / CHECKPOINTS_DIR)), EXIT_FAILED, multirun)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return fail(
            f"{label} failed: {type(e).__name__}: {msg[:300]} (traceback in {run_dir / SUMMARY_FILE})",
            EXIT_FAILED,
            multirun,
        )
    if summary.run_status is RunStatus.DIVERGED and not multirun:
        print(
            f"error: {label} diverged at step {summary.steps_done}; metrics kept in {run_dir / METRICS_FILE}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_DIVERGED)
    if summary.run_status is RunStatus.PREEMPTED:  # the signal was for the process: a sweep stops too
        print(
            f"{label} preempted ({', '.join(summary.preempted_by or []) or 'signal'}) at step "
            f"{summary.steps_done}, checkpoint saved; start the same command again to resume "
            f"in {run_dir}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_PREEMPTED)
    return summary


# ---- the directory of a single run, and its console log --------------------------------------------
UNRESOLVED_RUN_NAME = "invalid-config"  # the run then stops with `error: bad config: ...`


def model_label(model: Mapping[str, Any] | None) -> str:
    """`d<d_model>l<n_layers>`: the readable part of a run directory's name (a mixture of
    experts adds `e<experts>k<top_k>`)."""
    model = model or {}
    moe = model.get("moe")
    routed = f"e{moe.get('experts')}k{moe.get('top_k')}" if isinstance(moe, Mapping) else ""
    return f"d{model.get('d_model')}l{model.get('n_layers')}{routed}"


def train_run_name(cfg: Mapping[str, Any]) -> str:
    """`<model>-<config fingerprint>` of a training config: the same fields that decide whether
    a run directory holds this run (sharding and cadence may change, the directory does not)."""
    fields = fingerprint_fields({k: to_plain(cfg.get(k)) for k in ("model", "optim", "data", "train")})
    return f"{model_label(fields['model'])}-{fingerprint(fields)}"


def register_run_name(name: str, run_name: Callable[[DictConfig], str]) -> None:
    """Register the OmegaConf resolver `${<name>:}`: `run_name(composed config)`.

    Hydra resolves `hydra.run.dir` after composing the config, so a default of
    `outputs/runs/${<name>:}` names a single run after its config; an explicit
    `hydra.run.dir=...` replaces it, and multirun jobs use `hydra.sweep.dir` instead. A config
    the name cannot be computed from gets UNRESOLVED_RUN_NAME: the entry point then reports the
    bad config in one line."""

    def resolve(*, _root_: DictConfig) -> str:
        try:
            return run_name(_root_)
        except Exception:  # noqa: BLE001 - reported by the entry point's config check
            return UNRESOLVED_RUN_NAME

    OmegaConf.register_new_resolver(name, resolve, replace=True)


def process_index(cfg: Mapping[str, Any]) -> int:
    """This process's index in a multi-process run, from the config / environment as
    `sharding.distributed` reads them (0 for a single process or an unreadable setting)."""
    try:
        args = distributed.resolve(to_plain(cfg.get("distributed")))
    except Exception:  # noqa: BLE001 - the run itself reports a bad distributed config
        return 0
    return int(args["process_id"]) if args else 0


def log_path(run_dir: Path, job_name: str, cfg: Mapping[str, Any]) -> Path:
    """`<run dir>/<job>.log` for process 0, `<job>.<k>.log` for process k of a multi-process run."""
    k = process_index(cfg)
    return Path(run_dir) / console_log_name(job_name, k)


class _Tee:
    """A text stream that writes to `stream` and to `log`; everything else is `stream`'s.

    A console that goes away (the launching process killed, its pipe closed) only stops the
    console copy: the run keeps training and logging to `log` instead of ending `failed` with a
    BrokenPipeError and losing the work a relaunch would otherwise reuse."""

    def __init__(self, stream: TextIO, log: TextIO):
        self._stream, self._log = stream, log
        self._console = True
        # The error that stopped the log copy (a full disk: DiskFull), for the run to stop on
        # (`console_log_error`); the console keeps everything, the line saying so included.
        self.log_error: OSError | None = None

    def _to_log(self, write: Callable[[], Any]) -> None:
        if self.log_error is None:
            try:
                write()
            except OSError as e:
                path = Path(getattr(self._log, "name", "console log"))
                self.log_error = disk_full_of(e, path.name, path.parent) or e

    def write(self, s: str) -> int:
        self._to_log(lambda: self._log.write(s))
        if self._console:
            try:
                self._stream.write(s)
            except OSError:  # BrokenPipeError, EIO: nobody is reading any more
                self._console = False
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._to_log(self._log.flush)
        if self._console:
            try:
                self._stream.flush()
            except OSError:
                self._console = False

    def close(self) -> None:
        """Closes nothing: the console is not the run's, the log is `console_log`'s (a logging
        handler holding this stream must not close the real stderr)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def console_log(path: Path) -> Iterator[None]:
    """Copy what the run prints (stdout, stderr) and logs (the root logger) into `path`, appended,
    until the block ends (also by `sys.exit` or an exception); then the streams are restored, so
    each job of a multirun process logs to its own directory. Output that bypasses Python's
    streams (C++ libraries writing to the file descriptors) reaches the console only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "a", buffering=1)
    try:
        out, err = sys.stdout, sys.stderr
        handler = _LogHandler(log)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root = logging.getLogger()
        sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
        root.addHandler(handler)
        try:
            yield
        finally:
            root.removeHandler(handler)
            sys.stdout, sys.stderr = out, err
    finally:
        with contextlib.suppress(OSError):  # a full disk: what the log could not take stays on the console
            log.close()


class _LogHandler(logging.StreamHandler):
    """The console log's logging handler: a record the file cannot take (a full disk) is not a
    `--- Logging error ---` traceback; the run learns of it from `console_log_error`."""

    def handleError(self, record: logging.LogRecord) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handleError(record)


def console_log_error() -> OSError | None:
    """The error that stopped the copy of the console into the run's log (`console_log`; for a
    pack member, its own log), or None: the trainer stops on it as on any failed write."""
    for stream in (sys.stdout, sys.stderr):
        error = getattr(stream, "log_error", None)
        if error is not None:
            return error
    return None
