"""Experiment tracking: the records of metrics.jsonl mirrored to TensorBoard, W&B or MLflow.

`tracker=none | tensorboard | wandb | mlflow` (conf/tracker/; every key is `TrackerConfig`).
metrics.jsonl is always written and stays the source of truth: a tracker is a best-effort copy
for dashboards. `MetricsLog.write(record)` hands each record it writes to the `Tracker`, which
renames its keys with a name map (`TRAIN_NAMES`: loss -> train/loss, eval_loss -> eval/loss, ...;
a key that already holds a `/`, such as `task/<name>/accuracy`, and a key the map lacks keep
their name), drops values that are not finite numbers, and logs the rest at the record's `step`.

Why failures only warn: a dashboard that cannot be reached (W&B online without network, an MLflow
server down, a package not installed) must not cost a run that may have days of compute behind
it. The first exception a backend raises prints one `warning:` line on stderr and turns tracking
off for the rest of the run. A full disk is the exception: the run stops there with DiskFull, as
at any other write (models/base/diskspace.py), instead of failing at its next one.

Grouping: a run whose parent directory holds Hydra's `multirun.yaml` belongs to a sweep; the sweep
directory's name is its W&B group and its MLflow experiment (`tracker.group` overrides both). A
resumed run continues the same W&B / MLflow run (their ids are kept in `<run dir>/tracker.json`),
and TensorBoard drops the events after the checkpointed step, as metrics.jsonl does.

Only the main process of a multi-host run tracks (`enabled`). Importing this module imports no
tracking library (each is imported when its backend opens) and no JAX.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import os
import secrets
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TextIO
from urllib.parse import unquote, urlparse

from models.base.configs import config_from_mapping
from models.base.diskspace import disk_full_of, is_disk_full
from models.base.errors import ConfigError
from models.base.jsonio import read_json, write_json_atomic
from models.base.portable import lock_file, unlock_file
from models.base.rundir import FINAL_NUMBERS, TENSORBOARD_DIR, TRACKER_IDS_FILE, RunStatus, RunSummary

BACKENDS = ("none", "tensorboard", "wandb", "mlflow")
WANDB_MODES = ("online", "offline", "disabled")
IDS_FILE = TRACKER_IDS_FILE  # <run dir>/tracker.json: the W&B / MLflow run a resume continues

# metrics.jsonl key -> tracker name, for training runs (experiments/train/loop.py records).
TRAIN_NAMES: dict[str, str] = {
    "loss": "train/loss",
    "eval_loss": "eval/loss",
    "lr": "optim/lr",
    "grad_norm": "optim/grad_norm",
    "tokens_per_s": "perf/tokens_per_s",
    "mfu": "perf/mfu",
    "step_time_s": "perf/step_time_s",
    "tokens": "progress/tokens",
    "flops": "progress/flops",
}

# ... and for RL runs (experiments/rl/loop.py: one record per evaluation, step 0 included).
RL_NAMES: dict[str, str] = {
    "pass_rate": "eval/pass_rate",
    "pass_rate_stderr": "eval/pass_rate_stderr",
    "pass_rate_by_difficulty": "eval/pass_rate_by_difficulty",
    "kl": "eval/kl",
    "eval_zero_var_frac": "eval/zero_var_frac",
    "train_reward": "train/reward",
    "loss": "train/loss",
    "entropy": "train/entropy",
    "clip_frac": "train/clip_frac",
    "zero_var_frac": "train/zero_var_frac",
    "kl_train": "train/kl",
    "grad_norm": "optim/grad_norm",
    "prompts_seen": "progress/prompts_seen",
    "flops_rl": "progress/flops",
    "flops_sample": "compute/sample",
    "flops_train": "compute/train",
    "flops_reference": "compute/reference",
    "flops_old_policy": "compute/old_policy",
    "flops_eval": "compute/eval",
    "wall_s": "perf/wall_s",
}


@dataclasses.dataclass(frozen=True)
class TrackerConfig:
    """`tracker.*`: where the run's metrics are mirrored besides metrics.jsonl (conf/tracker/)."""

    backend: str = "none"  # none | tensorboard | wandb | mlflow
    project: str = "scalelab"  # W&B project; MLflow experiment of a run outside a sweep
    group: str | None = None  # W&B group / MLflow experiment; None = the sweep dir's name
    run_name: str | None = None  # None = the run directory's name
    tags: list[str] = dataclasses.field(default_factory=list)
    entity: str | None = None  # W&B team or user; None = the account's default
    mode: str | None = None  # W&B online | offline | disabled; None = $WANDB_MODE, else online
    tracking_uri: str | None = None  # MLflow; None = $MLFLOW_TRACKING_URI, else a file store in
    # <sweep dir>/mlruns (a sweep's run) or <run dir>/mlruns
    flush_every_s: float = 10.0  # TensorBoard flush / MLflow batch period
    init_timeout_s: float = 30.0  # W&B / MLflow server: give up connecting after this long

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "TrackerConfig":
        return config_from_mapping(cls, m, "tracker")

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"tracker.backend must be one of {', '.join(BACKENDS)} (got {self.backend!r})")
        if self.mode is not None and self.mode not in WANDB_MODES:
            raise ConfigError(
                f"tracker.mode must be one of {', '.join(WANDB_MODES)} or null (got {self.mode!r})"
            )
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise ConfigError(f"tracker.tags must be a list of strings (got {self.tags!r})")
        for key in ("flush_every_s", "init_timeout_s"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"tracker.{key} must be a positive number of seconds (got {v!r})")


def sweep_dir(run_dir: Path) -> Path | None:
    """The sweep directory `run_dir` belongs to (its parent holds Hydra's multirun.yaml), else None."""
    parent = Path(run_dir).resolve().parent
    return parent if (parent / "multirun.yaml").is_file() else None


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64} (MLflow params are flat)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """Who a run is to a tracker."""

    run_dir: Path
    name: str
    group: str | None
    store_dir: Path  # where a local store goes: the sweep dir, else the run dir
    config: dict[str, Any]
    tags: tuple[str, ...]


# ---- backends: open in __init__, then log / flush / finish; any of them may raise ------------------


class _TensorBoard:
    """Event files in <run dir>/tensorboard (tensorboardX: the protobufs alone, no TensorFlow)."""

    def __init__(self, cfg: TrackerConfig, info: RunInfo, resume_step: int, ids: dict[str, Any]):
        # optional dependency: the tracking extra (tensorboardX), loaded only for tracker=tensorboard
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary

        self.summary = Summary
        # purge_step: TensorBoard drops events at steps >= this one that an earlier session of
        # the run wrote after its last checkpoint (metrics.jsonl is cut back the same way).
        # The suffix keeps two sessions started within the same second apart (tensorboardX names
        # files by the second and host only), in the order TensorBoard reads them (by name).
        self.writer = SummaryWriter(
            logdir=str(info.run_dir / TENSORBOARD_DIR),
            purge_step=resume_step + 1,
            flush_secs=max(1, int(cfg.flush_every_s)),
            filename_suffix=f".{time.time_ns():020d}",
        )
        self.where = f"TensorBoard event files in {info.run_dir / TENSORBOARD_DIR}"
        if resume_step == 0:
            self.writer.add_text(
                "config", "```\n" + json.dumps(info.config, indent=2, default=str) + "\n```", 0
            )
        self.step = resume_step

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.step = step
        file_writer = getattr(self.writer, "_get_file_writer", None)
        if file_writer is None:  # another tensorboardX: its public, slower path
            for k, v in scalars.items():
                self.writer.add_scalar(k, v, step)
            return
        # One event holding the step's scalars (as TensorFlow's merged summaries do): about 6x
        # less host time per step than one add_scalar event per value.
        values = [self.summary.Value(tag=k, simple_value=v) for k, v in scalars.items()]
        file_writer().add_summary(self.summary(value=values), step)

    def flush(self) -> None:
        self.writer.flush()

    def finish(self, status: str, final: Mapping[str, float]) -> None:
        self.writer.add_text("status", status, self.step)
        self.writer.close()


class _WandB:
    """A W&B run in <run dir>/wandb: online, or offline (`WANDB_MODE=offline`, `wandb sync` later)."""

    def __init__(self, cfg: TrackerConfig, info: RunInfo, resume_step: int, ids: dict[str, Any]):
        os.environ.setdefault("WANDB_SILENT", "true")  # W&B's banners; the tracker prints one line
        import wandb  # optional dependency: the tracking extra, loaded only for tracker=wandb

        run_id = ids.get("wandb") or secrets.token_hex(4)  # W&B ids: [a-z0-9]
        info.run_dir.mkdir(parents=True, exist_ok=True)  # else W&B warns about its git root
        settings = wandb.Settings(init_timeout=cfg.init_timeout_s, console="off", quiet=True, silent=True)
        self.run = wandb.init(
            project=cfg.project,
            entity=cfg.entity,
            group=info.group,
            name=info.name,
            id=run_id,
            resume="allow",
            dir=str(info.run_dir),
            config=info.config,
            tags=list(info.tags) or None,
            mode=cfg.mode,
            settings=settings,
            reinit="create_new",
        )
        ids["wandb"] = run_id
        self.where = (
            f"W&B run {self.run.url}" if self.run.url else f"W&B offline run in {Path(self.run.dir).parent}"
        )
        # Plot against the run's own step, not W&B's call counter: a resumed run logs steps
        # again that an earlier session logged after its last checkpoint, which W&B's
        # monotonic step would drop.
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log({"step": step, **scalars})

    def flush(self) -> None:
        pass  # W&B's service process writes asynchronously

    def finish(self, status: str, final: Mapping[str, float]) -> None:
        self.run.summary.update({"status": status, **final})
        self.run.finish(exit_code=0 if status == RunStatus.COMPLETED else 1)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (models.base.portable: fcntl, msvcrt on Windows): the runs of a
    sweep running side by side create the sweep's MLflow experiment once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        lock_file(f)
        try:
            yield
        finally:
            unlock_file(f)


class _MLflow:
    """An MLflow run (MlflowClient, no global active run): in a local file store by default."""

    MAX_METRICS = 1000  # MLflow's limit per log_batch
    MAX_PARAMS = 100

    def __init__(self, cfg: TrackerConfig, info: RunInfo, resume_step: int, ids: dict[str, Any]):
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (info.store_dir / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 refuses the file store unless asked for it; it is the local store this
            # tracker promises (no database package needed). A tracking URI changes the store.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        else:  # a server: bounded retries, so an unreachable one costs seconds, not minutes
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(math.ceil(cfg.init_timeout_s))))
        # optional dependency: the tracking extra (mlflow-skinny), loaded only for tracker=mlflow
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric, self._param = Metric, Param
        self.client = MlflowClient(tracking_uri=uri)
        self.project = cfg.project
        self.flush_every_s = cfg.flush_every_s
        stored = ids.get("mlflow") or {}
        self.run_id = None
        if stored.get("tracking_uri") == uri and stored.get("run_id"):
            with contextlib.suppress(Exception):  # deleted meanwhile: start a new run
                self.client.update_run(stored["run_id"], status="RUNNING")
                self.run_id = stored["run_id"]
        if self.run_id is None:
            self.run_id = self._create_run(info, uri)
        ids["mlflow"] = {"run_id": self.run_id, "tracking_uri": uri}
        self.where = f"MLflow run {self.run_id} in {uri}"
        self.buf: list[Any] = []
        self.t_flush = time.monotonic()
        self.step = resume_step

    def _experiment(self, name: str, uri: str) -> str:
        lock = (
            _file_lock(Path(unquote(urlparse(uri).path)) / ".scalelab.lock")
            if uri.startswith("file:")
            else contextlib.nullcontext()
        )
        with lock:
            exp = self.client.get_experiment_by_name(name)
            if exp is not None:
                return exp.experiment_id
            try:
                return self.client.create_experiment(name)
            except Exception:  # created meanwhile by another run of the sweep (server store)
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
                return exp.experiment_id

    def _create_run(self, info: RunInfo, uri: str) -> str:
        exp_id = self._experiment(info.group or self.project, uri)
        tags = {"scalelab.run_dir": str(info.run_dir.resolve()), **{t: "" for t in info.tags}}
        if info.group:
            tags["scalelab.sweep"] = info.group
        run_id = self.client.create_run(exp_id, run_name=info.name, tags=tags).info.run_id
        params = [
            self._param(k[:250], (v if isinstance(v, str) else json.dumps(v, default=str))[:500])
            for k, v in flatten(info.config).items()
        ]  # 500: the oldest MLflow's value limit
        for i in range(0, len(params), self.MAX_PARAMS):
            self.client.log_batch(run_id, params=params[i : i + self.MAX_PARAMS])
        return run_id

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.step = step
        ms = int(time.time() * 1000)
        self.buf.extend(self._metric(k, v, ms, step) for k, v in scalars.items())
        if len(self.buf) >= self.MAX_METRICS or time.monotonic() - self.t_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        buf, self.buf, self.t_flush = self.buf, [], time.monotonic()
        for i in range(0, len(buf), self.MAX_METRICS):
            self.client.log_batch(self.run_id, metrics=buf[i : i + self.MAX_METRICS])

    def finish(self, status: str, final: Mapping[str, float]) -> None:
        ms = int(time.time() * 1000)
        self.buf.extend(
            self._metric(f"final/{k.removeprefix('final_')}", v, ms, self.step) for k, v in final.items()
        )
        self.flush()
        self.client.set_tag(self.run_id, "scalelab.status", status)
        end = {RunStatus.COMPLETED: "FINISHED", RunStatus.PREEMPTED: "KILLED"}.get(status, "FAILED")
        self.client.set_terminated(self.run_id, end)  # a resumed run sets RUNNING again


def _open_backend(cfg: TrackerConfig, info: RunInfo, resume_step: int, ids: dict[str, Any]) -> Any:
    if cfg.backend == "tensorboard":
        return _TensorBoard(cfg, info, resume_step, ids)
    if cfg.backend == "wandb":
        return _WandB(cfg, info, resume_step, ids)
    if cfg.backend == "mlflow":
        return _MLflow(cfg, info, resume_step, ids)
    raise ConfigError(f"tracker.backend={cfg.backend!r} has no backend")


# ---- the tracker the loops hold ---------------------------------------------------------------

_OPEN: "set[Tracker]" = set()  # strong references: an unfinished tracker is still ended at exit


def _finish_open(status: str = RunStatus.FAILED) -> None:
    """End every tracker of this process still open: at exit, and before a new one opens (a run
    that raised never reached its own `finish`, and its tracker run must not stay `running`)."""
    for t in list(_OPEN):
        t.finish(status)


atexit.register(_finish_open)


@contextlib.contextmanager
def _library_quiet() -> Iterator[None]:
    """Keep the tracking libraries' deprecation and info warnings out of the run's output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Tracker:
    """Mirror of the metrics.jsonl records to one backend. Never raises: the first failure of the
    backend prints one warning line and turns tracking off (see the module docstring).

    Opens at `start(resume_step)` (MetricsLog calls it on reset / resume, before the first step,
    so opening is not timed as a step) or at the first `log`; `finish(status, summary)` ends the
    tracker's run with the run's status and final numbers."""

    def __init__(
        self,
        cfg: TrackerConfig,
        run_dir: Path,
        names: Mapping[str, str],
        config: Mapping[str, Any] | None = None,
        enabled: bool = True,
        stream: TextIO | None = None,
    ):
        self.cfg, self.names = cfg, dict(names)
        self.run_dir = Path(run_dir)
        self.config = dict(config or {})
        self.enabled = enabled and cfg.backend != "none"
        self.stream = stream
        self.backend: Any = None
        self.warned = False
        self._started = self._finished = False

    @property
    def active(self) -> bool:
        return self.backend is not None

    def info(self) -> RunInfo:
        sweep = sweep_dir(self.run_dir)
        group = self.cfg.group or (sweep.name if sweep is not None else None)
        return RunInfo(
            run_dir=self.run_dir,
            name=self.cfg.run_name or self.run_dir.resolve().name,
            group=group,
            store_dir=sweep or self.run_dir,
            config=self.config,
            tags=tuple(self.cfg.tags),
        )

    def start(self, resume_step: int = 0) -> None:
        """Open the backend for a run that continues after `resume_step` (0 = a fresh run)."""
        if not self.enabled or self._started:
            return
        self._started = True
        _finish_open()
        ids_path = self.run_dir / IDS_FILE
        stored = read_json(ids_path)
        ids = dict(stored) if isinstance(stored, dict) else {}

        def open_() -> Any:
            before = dict(ids)
            backend = _open_backend(self.cfg, self.info(), int(resume_step), ids)
            if ids != before:
                write_json_atomic(ids_path, ids)
            return backend

        self.backend = self._guard("starting", open_)
        if self.backend is not None:
            _OPEN.add(self)
            print(f"tracker: {getattr(self.backend, 'where', self.cfg.backend)}", flush=True)

    def scalars(self, record: Mapping[str, Any]) -> dict[str, float]:
        """The tracker names and finite values of a record (`step` is the x axis, not a scalar)."""
        out: dict[str, float] = {}
        for key, value in record.items():
            if key == "step":
                continue
            name = self.names.get(key, key)
            if isinstance(value, Mapping):  # e.g. RL pass rate by difficulty
                for sub, v in value.items():
                    if (x := _number(v)) is not None:
                        out[f"{name}/{sub}"] = x
            elif (x := _number(value)) is not None:
                out[name] = x
        return out

    def log(self, record: Mapping[str, Any]) -> None:
        if not self.enabled or self._finished:
            return
        if not self._started:
            self.start(0)
        if self.backend is None:
            return
        step, scalars = int(record.get("step", 0)), self.scalars(record)
        self._guard("logging", lambda: self.backend.log(step, scalars))

    def flush(self) -> None:
        if self.backend is not None:
            self._guard("flushing", self.backend.flush)

    def finish(self, status: str, summary: RunSummary | None = None) -> None:
        """End the tracker's run: `status` (completed | diverged | failed | ...) and the final
        numbers of `summary` (models.base.rundir.FINAL_NUMBERS)."""
        if self._finished:
            return
        self._finished = True
        _OPEN.discard(self)
        if self.backend is None:
            return
        final = {k: x for k in FINAL_NUMBERS if (x := _number(getattr(summary, k, None))) is not None}
        backend, self.backend = self.backend, None
        self._guard("finishing", lambda: backend.finish(status, final))

    def _guard(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            with _library_quiet():
                return fn()
        except Exception as e:  # noqa: BLE001 - tracking must never end a run ...
            full = is_disk_full(e) and what != "finishing"  # (the run's own files are all written by then)
            self._off(what, e, quiet=full)
            if full:  # ... but a full disk ends it anyway: stop at this first failed write
                raise disk_full_of(e, f"the {self.cfg.backend} tracker's files", self.run_dir) from e
            return None

    def _off(self, what: str, err: BaseException, quiet: bool = False) -> None:
        """One warning line (none when `quiet`), then no more tracking in this run (the backend is
        closed quietly)."""
        backend, self.backend = self.backend, None
        _OPEN.discard(self)
        if backend is not None:
            with contextlib.suppress(Exception), _library_quiet():
                backend.finish(RunStatus.FAILED, {})
        if not self.warned and not quiet:
            self.warned = True
            if isinstance(err, ImportError):
                why = f"{err.name or 'its package'} is not installed (pip install 'scalelab[tracking]')"
            else:
                why = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
            print(
                f"warning: tracker {self.cfg.backend} failed while {what}: {why}; tracking is off "
                "for this run, metrics.jsonl has every record",
                file=self.stream or sys.stderr,
                flush=True,
            )


def make_tracker(
    cfg: TrackerConfig,
    run_dir: Path,
    names: Mapping[str, str],
    config: Mapping[str, Any] | None = None,
    enabled: bool = True,
) -> Tracker | None:
    """The run's tracker, or None for `tracker=none` (then MetricsLog does no tracking work)."""
    if cfg.backend == "none" or not enabled:
        return None
    return Tracker(cfg, run_dir, names, config, enabled)
