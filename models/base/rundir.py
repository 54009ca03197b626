"""The run directory as code: its file names, the run's status words, the typed `summary.json`
and the one `metrics.jsonl` reader and writer.

A run directory is the only thing training (`experiments.train`, `experiments.rl`, the sweeper)
and analysis (`collect`, the report, the planner's calibration) share, so its layout lives here,
in the base layer both halves may import (stdlib only; the strict JSON writer is
`models.base.jsonio`). A run directory holds:

  summary.json          RunSummary: status and final numbers, one atomic write at the end (or a
                        `failed` one from the except block); absent while the run is going
  metrics.jsonl         one strict-JSON object per logged step (RL: per evaluation); cut back to
                        the checkpointed step on resume, so no step appears twice
  .hydra/config.yaml    the composed config (Hydra), flattened by analysis into dotted columns;
  .hydra/hydra.yaml, .hydra/overrides.yaml   Hydra's own settings and the command-line overrides
  checkpoints/<step>/   Orbax checkpoints (params, optimizer state, counters);
                        checkpoints.corrupt/<step>/ unreadable ones set aside
  reference/            RL only: the initial policy (the KL reference) as a checkpoint
  <job>.log             the console copy (`<job>.<k>.log` for process k of a multi-process run)
  .run.lock             held by the live process training the directory (`.run.lock.<k>`)
  launches.jsonl        sweeps only: one line per launch (pid, CPUs, threads, timings)
  tracker.json          the W&B / MLflow run ids a resume continues (with `tracker=wandb|mlflow`)
  tensorboard/          TensorBoard event files (with `tracker=tensorboard`)
  profile/              a JAX profiler trace (with `train.profile_steps`)

The on-disk strings are part of the contract: old run directories keep reading
(tests/fixtures/rundir_v0 is one written before this module existed).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Iterator, Mapping

from models.base.diskspace import disk_full_of
from models.base.jsonio import dumps, jsonl_line, read_json, to_strict, write_text_atomic

# ---- file names --------------------------------------------------------------------------------
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
HYDRA_DIR = ".hydra"
HYDRA_CONFIG = os.path.join(HYDRA_DIR, "config.yaml")  # the composed config
HYDRA_SETTINGS = os.path.join(HYDRA_DIR, "hydra.yaml")  # Hydra's own node
HYDRA_OVERRIDES = os.path.join(HYDRA_DIR, "overrides.yaml")  # the command-line overrides
CHECKPOINTS_DIR = "checkpoints"
CORRUPT_CHECKPOINTS_DIR = CHECKPOINTS_DIR + ".corrupt"
SWEEP_PLAN_FILE = "sweep_plan.json"  # beside a sweep's runs: what was planned, launched, reused, skipped
SWEEP_RUNS_TABLE = "runs.csv"  # beside a sweep's runs: `collect`'s table (sweep.fit_hparams)
HPARAMS_FILE = "hparams.json"  # beside a sweep's runs: its fit-hparams laws (sweep.fit_hparams / probe)
HPARAMS_KIND = "hparams"  # the `kind` of a fit-hparams result (HP.json), checked by every reader
BRANCH_POINTS_DIR = "branch_points"  # WSD trunk: the checkpoints its branches start from (all kept)
REFERENCE_DIR = "reference"  # RL: the initial policy
LOCK_FILE = ".run.lock"
LAUNCHES_FILE = "launches.jsonl"
TRACKER_IDS_FILE = "tracker.json"
TENSORBOARD_DIR = "tensorboard"
PROFILE_DIR = "profile"
# Any of these makes a directory a run directory (analysis finds runs by them).
MARKERS = (SUMMARY_FILE, METRICS_FILE, HYDRA_CONFIG)
# The summary is written with these jsonio settings, so files diff and read the same as ever.
SUMMARY_INDENT, SUMMARY_SORT_KEYS = 1, True


def lock_name(process: int = 0) -> str:
    """`.run.lock` for process 0, `.run.lock.<k>` for process k of a multi-process run."""
    return LOCK_FILE if process == 0 else f"{LOCK_FILE}.{process}"


def console_log_name(job_name: str, process: int = 0) -> str:
    """`<job>.log` for process 0, `<job>.<k>.log` for process k of a multi-process run."""
    return f"{job_name}.log" if process == 0 else f"{job_name}.{process}.log"


# ---- statuses ----------------------------------------------------------------------------------
class RunStatus(enum.StrEnum):
    """summary.json's `status`: how a run ended (the strings are the ones on disk)."""

    COMPLETED = "completed"  # trained every step; final eval and checkpoint written
    DIVERGED = "diverged"  # stopped on a non-finite loss; metrics kept up to that step
    FAILED = "failed"  # an error (bad config included); `error` (and `traceback`) say which
    PREEMPTED = "preempted"  # a preemption signal: checkpoint saved, start again to resume
    # `sweep.early_stop`: its forecast said it would not end best in its rung; checkpoint saved,
    # `stop_reason`, `forecast`, `frac_done` say why and when; start again to resume
    STOPPED = "stopped"
    # Reserved for a summary written while the run goes; the loops write none today (a live
    # run has no summary.json, RunSummary.status is None in the fields they keep meanwhile).
    RUNNING = "running"

    @classmethod
    def parse(cls, value: Any) -> "RunStatus | None":
        """The member spelled `value`, or None (missing, or a word this version does not know)."""
        try:
            return cls(value)
        except ValueError:
            return None


FINISHED_BAD = (RunStatus.DIVERGED, RunStatus.FAILED)  # ended for good, not as asked


class ReadStatus(enum.StrEnum):
    """What a reader reports for a run directory without a readable final RunStatus. Never
    written into summary.json: `collect`'s runs table (`status` column, with
    include_unfinished) and the sweeper's plan (`status_before` / `status_after` in
    sweep_plan.json) show them, so their strings are on-disk strings too."""

    UNFINISHED = "unfinished"  # analysis: no summary.json (running, killed, or never started)
    CORRUPT_SUMMARY = "corrupt-summary"  # analysis: summary.json is not a JSON object
    UNKNOWN = "unknown"  # analysis: summary.json without a `status`
    NEW = "new"  # sweeper: no directory yet
    INTERRUPTED = "interrupted"  # sweeper: a directory, not completed / diverged / failed: resume it


# ---- summary.json ------------------------------------------------------------------------------
# summary.json `time_s` keys: where a run's wall time went (they add up to the run's wall time,
# process start-up included): compiling, train steps, evals (loss and tasks), checkpoint saves,
# process start-up before the run (the first run of a process), the rest.
TIME_KINDS = ("compile", "train_steps", "eval", "checkpoint", "startup", "other")


class RunRole(enum.StrEnum):
    """summary.json `role`: what a run is for, when it is not an ordinary run."""

    TRUNK = "trunk"  # a WSD trunk at constant LR: its branches are the runs (not fitted itself)
    BRANCH = "branch"  # sweep_plan.json only: a cooldown branch of a trunk (its summary names the trunk)


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """summary.json, typed. Fields of the two trainers; a field a run kind does not write is
    None. Keys this version does not know are kept in `extra`, and `present` remembers which
    keys the file had, so `from_json(...).to_json()` writes the same keys back (a null stays a
    null, an absent key stays absent). Non-finite floats are written as null (strict JSON).

    The trainers build theirs with `of(field=value, ...)` and update it with `replace(...)`;
    readers get one from `RunDir.read_summary()` (or `from_json(path or dict)`); `as_dict()` is
    the dict on disk."""

    # -- every run
    status: RunStatus | str | None = None  # RunStatus; a word it does not know is kept as is
    n_params: int | None = None  # parameters, embeddings included
    n_params_non_embedding: int | None = None  # parameters without the (untied) embeddings
    model: dict[str, Any] | None = None  # the resolved ModelConfig (`to_dict()`)
    steps: int | None = None  # optimizer steps the run was asked for
    steps_done: int | None = None  # steps finished when the summary was written
    flops: float | None = None  # training FLOPs so far (RL: the RL passes, `flops_rl`)
    mesh: dict[str, Any] | None = None  # device mesh: axis sizes, devices, platform, device_kind
    config_fingerprint: str | None = None  # hash of config_fields: which run this directory holds
    config_fields: dict[str, Any] | None = None  # the config parts that make the run that run
    wall_time_s: float | None = None  # seconds, all sessions of a resumed run together
    resumed_from_step: int | None = None  # the checkpoint this session started from, else None
    compile_time_s: float | None = None  # seconds spent compiling the step in this session
    preempted_by: list[str] | None = None  # preempted runs: the signals that stopped them
    error: str | None = None  # failed runs: `<ExceptionType>: <message>`
    traceback: str | None = None  # failed runs: the traceback (not for a ConfigError)
    # -- training runs (experiments.train)
    tokens: int | None = None  # tokens trained on
    total_tokens: int | None = None  # tokens the run was asked for (steps x tokens_per_step)
    tokens_per_step: int | None = None  # global batch x sequence length
    flops_per_token: float | None = None  # model FLOPs per token (causal_6N+6LTHd convention)
    final_train_loss: float | None = None  # the last step's training loss
    final_eval_loss: float | None = None  # held-out loss at the end: the scaling laws' loss
    tokens_per_s: float | None = None  # this session's throughput
    mfu: float | None = None  # model FLOPs utilisation of this session
    mfu_convention: str | None = None  # how mfu counts attention (models.flops.MFU_CAUSAL)
    peak_flops_per_device: float | None = None  # the peak mfu divides by
    peak_flops_source: str | None = None  # where that peak came from (table or measurement)
    peak_flops_measured_at: str | None = None  # when a measured (CPU) peak was measured; None: catalogued
    mfu_raw: float | None = None  # an impossible MFU (> 1: the peak is stale); mfu is then null
    corpus: dict[str, Any] | None = None  # the training corpus: name, sizes, split, sha256
    unique_tokens: int | None = None  # tokens the run sampled from: the split, or data.max_unique_tokens
    epochs: float | None = None  # tokens / unique_tokens (nominal passes over the unique tokens)
    task_metrics: dict[str, Any] | None = None  # eval.tasks at the end: {task: {loss, accuracy, chance}}
    time_s: dict[str, Any] | None = None  # wall seconds by kind (TIME_KINDS), all sessions together
    packed_with: list[str] | None = None  # run ids of the runs trained in the same process (a pack)
    trunk: str | None = None  # WSD branch: run id of the trunk it starts from, else None
    branch_step: int | None = None  # WSD branch: the trunk step it starts from
    marginal_flops: float | None = None  # WSD branch: FLOPs spent on it beyond the trunk
    role: str | None = None  # RunRole: None for an ordinary run, `trunk` for a WSD trunk
    stop_reason: str | None = None  # stopped runs: why (the forecast against the rung's best)
    forecast: dict[str, Any] | None = None  # stopped runs: {final_loss, interval, p_best, method, ...}
    frac_done: float | None = None  # stopped runs: steps done / steps asked for
    n_params_active: int | None = None  # mixture of experts: parameters one token uses
    moe_aux_loss: float | None = (
        None  # mixture of experts: last step's load-balancing loss (mean over routed layers)
    )
    moe_z_loss: float | None = None  # mixture of experts: last step's router z-loss (mean over routed layers)
    moe_dropped_fraction: float | None = (
        None  # mixture of experts: last step's dropped token choices (mean over layers)
    )
    moe_layers: dict[str, Any] | None = (
        None  # mixture of experts: {layer: {aux_loss, z_loss, dropped_fraction}}
    )
    # -- RL runs (experiments.rl)
    task: dict[str, Any] | None = None  # the RL task's settings
    algo: dict[str, Any] | None = None  # the RL algorithm's settings
    prompts_per_step: int | None = None
    group_size: int | None = None  # samples per prompt
    seed: int | None = None
    prompts_per_pass: int | None = None  # size of a finite training-prompt pool, else None
    flops_per_step: dict[str, Any] | None = None  # FLOPs of one step by pass, and `total`
    flops_per_eval: float | None = None  # FLOPs of one held-out evaluation
    init: dict[str, Any] | None = None  # where the initial policy came from
    start_check: dict[str, Any] | None = None  # the initial policy's strength check
    prompts_seen: int | None = None
    flops_split: dict[str, Any] | None = None  # RL FLOPs so far by pass (sample, train, ...)
    flops_eval: float | None = None  # evaluation FLOPs so far (not counted in `flops`)
    start_pass_rate: float | None = None  # held-out pass@1 of the initial policy
    final_pass_rate: float | None = None  # held-out pass@1 at the last evaluation
    final_pass_rate_stderr: float | None = None
    final_pass_rate_by_difficulty: dict[str, Any] | None = None
    final_kl: float | None = None  # KL to the reference at the last evaluation
    # -- bookkeeping (not keys of the file)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # keys this version does not know
    present: frozenset[str] = frozenset()  # keys the file had (written back even when null)

    _BOOKKEEPING: ClassVar[frozenset[str]] = frozenset({"extra", "present"})

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The summary.json keys this version knows (the fields less `extra` and `present`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in cls._BOOKKEEPING)

    @classmethod
    def of(cls, **fields: Any) -> "RunSummary":
        """A summary of `fields` (field names only: TypeError for another), each one written even
        when None (as null), as the trainers have always written the fields they know of."""
        return dataclasses.replace(cls(**fields), present=frozenset(fields))

    @classmethod
    def from_json(cls, source: str | os.PathLike | Mapping[str, Any]) -> "RunSummary":
        """A summary from a summary.json path or its parsed dict. Tolerant, so old files read:
        missing keys are None, unknown ones go to `extra`. ValueError when the file is not a
        JSON object (OSError when it cannot be read)."""
        if isinstance(source, Mapping):
            data = dict(source)
        else:
            data = json.loads(Path(source).read_text())
            if not isinstance(data, dict):
                raise ValueError(f"{source}: summary.json holds {type(data).__name__}, not an object")
        known = set(cls.field_names())
        kw = {k: v for k, v in data.items() if k in known}
        if "status" in kw:
            kw["status"] = RunStatus.parse(kw["status"]) or kw["status"]
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**kw, extra=extra, present=frozenset(data))

    @property
    def run_status(self) -> RunStatus | None:
        """`status` as a RunStatus (None when missing or not a word of this version)."""
        return RunStatus.parse(self.status)

    @property
    def completed(self) -> bool:
        return self.run_status is RunStatus.COMPLETED

    def as_dict(self) -> dict[str, Any]:
        """The summary.json object (strict JSON values): the fields the file had or that are
        set, then `extra`."""
        out = {
            k: getattr(self, k)
            for k in self.field_names()
            if k in self.present or getattr(self, k) is not None
        }
        out.update(self.extra)
        return to_strict(out)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """summary.json's text (strict JSON, sorted keys, as the trainers write it); with `path`,
        also written there atomically."""
        text = dumps(self.as_dict(), indent=SUMMARY_INDENT, sort_keys=SUMMARY_SORT_KEYS) + "\n"
        if path is not None:
            write_text_atomic(path, text)
        return text

    def replace(self, **changes: Any) -> "RunSummary":
        """A copy with `changes` (field names, or extra keys)."""
        known = set(self.field_names())
        extra = dict(self.extra, **{k: v for k, v in changes.items() if k not in known})
        fields = {k: v for k, v in changes.items() if k in known}
        return dataclasses.replace(self, **fields, extra=extra, present=self.present | set(changes))


# The summary fields the scaling laws read, by the role `analysis fit` gives each column: the
# parameters N, the tokens D, the compute C and the loss (`collect`'s N, D, C, loss are copies).
ROLE_FIELDS: Mapping[str, str] = MappingProxyType(
    {"N": "n_params", "D": "tokens", "C": "flops", "loss": "final_eval_loss"}
)
# The summary fields that are a run's final numbers (a tracker's W&B summary, MLflow `final/*`).
FINAL_NUMBERS = (
    "final_train_loss",
    "final_eval_loss",
    "tokens_per_s",
    "mfu",
    "tokens",
    "flops",
    "n_params",
    "n_params_non_embedding",
    "wall_time_s",
    "compile_time_s",
    "start_pass_rate",
    "final_pass_rate",
    "final_kl",
    "prompts_seen",
)


# ---- metrics.jsonl -----------------------------------------------------------------------------
class MetricRecords(list):
    """`read_metrics`'s records (a list of dicts), with how many lines it skipped and why."""

    def __init__(self, records: list[dict[str, Any]], path: Path, skipped: int = 0):
        super().__init__(records)
        self.path, self.skipped = path, skipped

    def skipped_message(self) -> str:
        """`<path>: skipped <n> corrupt line(s)` (the warning analysis prints)."""
        return f"{self.path}: skipped {self.skipped} corrupt line(s)"


def _nan_for_null(record: dict[str, Any]) -> dict[str, Any]:
    return {k: math.nan if v is None else v for k, v in record.items()}


def read_metrics(path: str | os.PathLike) -> MetricRecords:
    """The records of a metrics.jsonl file, in file order: the one reader of both halves.

    A `null` value (a NaN or infinite metric when written, or a metric with no value yet)
    reads back as NaN. A line that is not a JSON object (torn by a kill, or garbage) is skipped
    and counted in `.skipped`, never fatal: a killed run's file still reads. A missing file
    reads as no records."""
    path = Path(path)
    records: list[dict[str, Any]] = []
    skipped = 0
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return MetricRecords([], path)
    with fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                skipped += 1
                continue
            if isinstance(obj, dict):
                records.append(_nan_for_null(obj))
            else:
                skipped += 1
    return MetricRecords(records, path, skipped)


class MetricsWriter:
    """Append-only strict-JSON lines (`models.base.jsonio.jsonl_line`: NaN and ±inf -> null),
    each written whole with one unbuffered write, that can drop the records after a step (on
    resume). A line that does not fit on the disk is taken back (the file is cut to where it
    was) and DiskFull raised: the lines already written stay whole and readable."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._f: Any = None

    def append(self, record: Mapping[str, Any]) -> None:
        data = (jsonl_line(record) + "\n").encode()
        try:
            if self._f is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._f = open(self.path, "ab", buffering=0)
            start = self._f.seek(0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    view = view[self._f.write(view) :]
            except OSError:
                self._f.truncate(start)  # no torn line left behind
                raise
        except OSError as e:
            full = disk_full_of(e, self.path.name, self.path.parent)
            if full is None:
                raise
            raise full from e

    def truncate_after(self, step: int) -> None:
        """Keep only records with record['step'] <= step; torn or step-less lines go too. The
        file is replaced whole (temp file, rename), so a kill leaves the old or the new one."""
        self.close()
        if not self.path.exists():
            return
        keep = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    keep.append(line)
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a kill
        write_text_atomic(self.path, "".join(line + "\n" for line in keep))

    def remove(self) -> None:
        """Delete the file (a run starting from step 0)."""
        self.close()
        if self.path.exists():
            self.path.unlink()

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


# ---- the directory -----------------------------------------------------------------------------
class RunDir:
    """One run directory: the path of each file, and its summary, metrics and status."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # -- files
    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def hydra_config_path(self) -> Path:
        return self.path / HYDRA_CONFIG

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def reference_dir(self) -> Path:
        return self.path / REFERENCE_DIR

    @property
    def launches_path(self) -> Path:
        return self.path / LAUNCHES_FILE

    @property
    def tracker_ids_path(self) -> Path:
        return self.path / TRACKER_IDS_FILE

    def lock_path(self, process: int = 0) -> Path:
        return self.path / lock_name(process)

    def console_log_path(self, job_name: str, process: int = 0) -> Path:
        return self.path / console_log_name(job_name, process)

    def is_run(self) -> bool:
        """Whether the directory holds one of the MARKERS files."""
        return any((self.path / m).is_file() for m in MARKERS)

    # -- summary
    def read_summary(self) -> RunSummary | None:
        """summary.json as a RunSummary, or None when missing, unreadable or not a JSON object."""
        data = read_json(self.summary_path)
        return RunSummary.from_json(data) if isinstance(data, dict) else None

    def write_summary(self, summary: RunSummary | Mapping[str, Any]) -> None:
        """summary.json, written atomically through the strict JSON writer."""
        if not isinstance(summary, RunSummary):
            summary = RunSummary.from_json(summary)
        summary.to_json(self.summary_path)

    @property
    def status(self) -> RunStatus | ReadStatus:
        """How the run ended (RunStatus), or what a reader finds instead: UNFINISHED (no
        summary.json), CORRUPT_SUMMARY (not a JSON object), UNKNOWN (no status this version
        knows)."""
        summary = self.read_summary()
        if summary is None:
            return ReadStatus.UNFINISHED if not self.summary_path.exists() else ReadStatus.CORRUPT_SUMMARY
        return summary.run_status or ReadStatus.UNKNOWN

    # -- metrics
    def metrics(self) -> MetricRecords:
        """metrics.jsonl's records (`read_metrics`)."""
        return read_metrics(self.metrics_path)

    def first_metrics_record(self) -> dict[str, Any] | None:
        """metrics.jsonl's first line as a record (None when missing, empty or not an object):
        what kind of run this is, without reading a long file."""
        try:
            with open(self.metrics_path, "rb") as fh:
                obj = json.loads(fh.readline())
        except (OSError, ValueError):
            return None
        return _nan_for_null(obj) if isinstance(obj, dict) else None

    def metrics_writer(self) -> MetricsWriter:
        return MetricsWriter(self.metrics_path)


def iter_run_dirs(root: str | os.PathLike) -> Iterator[RunDir]:
    """Every run directory at or under `root` (MARKERS), in walk order; `.hydra` and
    `.scalelab*` directories are not descended into."""
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != HYDRA_DIR and not d.startswith(".scalelab")]
        rd = RunDir(dirpath)
        if rd.is_run():
            yield rd
