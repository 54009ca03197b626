"""Runs logged to TensorBoard, MLflow or W&B, read back into the runs table `fit` reads
(`scalelab collect --from tensorboard|mlflow|wandb SOURCE --out DIR`).

`load(kind, sources, ...) -> (runs_df, curves_df)`: one row per run, with the columns of the
table `collect` builds from run directories (analysis.core.runs): N, D, C, loss first where they
can be derived (n_params, tokens, flops, final_eval_loss), then `run`, where the run is (`path`,
or `run_id` and `experiment`), its final numbers, `status` and the run's config flattened into
dotted columns (`model.d_model`, `optim.lr`). curves_df is the long per-step table (`run`, `step`,
one column per metric), loaded only when asked for (`history=True`: `collect --curves / --tasks`).

Metric names. The trainer's tracker names (experiments/train/tracking.py: train/loss, eval/loss,
optim/lr, perf/tokens_per_s, progress/tokens, ...) are read back under their metrics.jsonl names
(loss, eval_loss, lr, tokens_per_s, tokens, ...), and its final numbers (MLflow `final/<name>`, the
W&B summary's `final_eval_loss`, `n_params`, ...) under summary.json's names; any other metric keeps
the name it was logged under. In a run's row, a metric's value is its last logged one (the value at
the highest step), and
- `final_eval_loss` is the explicit final eval loss where the run has one, else the last value of
  the first of EVAL_LOSS_NAMES it logged (eval/loss, eval_loss, val/loss, val_loss, ...), or of
  `loss_metric` when it is given (`collect --loss-metric NAME`);
- `final_train_loss` the last value of the first of TRAIN_LOSS_NAMES (train/loss, loss, ...);
- `task/<task>/loss` and `task/<task>/accuracy` become `task_loss/<task>` and `accuracy/<task>`
  (the downstream-task columns `collect --tasks` reads).
No run with an eval loss at all is an error naming the metrics seen (pass `loss_metric`).

Statuses: the trainer's own word where the tracker kept it (summary.json, TensorBoard's `status`
text, MLflow's `scalelab.status` tag, the W&B summary's `status`), else the tracker's state mapped
onto the trainer's words (MLflow FINISHED / W&B finished -> completed, FAILED / crashed ->
failed, RUNNING -> running), else `unknown` (a foreign TensorBoard run: event files do not say;
the trainer's run directory without summary.json or a logged status: `unfinished`, as `collect`
of the directory says). Runs that are `completed` or `unknown` are kept; the others are left out
with one warning naming them, unless `include_unfinished`.

TensorBoard (SOURCE: a directory, searched recursively, or one event file): one run per directory
holding event files (`events.out.tfevents.*`), read with TensorBoard's own reader
(`plugin_event_accumulator.EventAccumulator`, every point kept, a resumed run's purged steps
dropped as TensorBoard drops them). Scalars become metrics. A run the trainer wrote
(`tracker=tensorboard`: `<run dir>/tensorboard`) is named after its run directory, and its
summary.json and .hydra/config.yaml give its summary columns (N, D, C, status, ...) and config, as
`collect` of the run directory would; where only the event files are left, the config is the
`config` text the tracker logs. A foreign run's config is its HParams (the hparams plugin's
session start info), else none; the layout of tensorboardX's / PyTorch's `add_hparams` (the HParams
in a child directory of the run) counts as one run.

MLflow (SOURCE: a tracking URI `http(s)://HOST:PORT`, `sqlite:///PATH.db`, `file:///PATH`, or the
path of an `mlruns` file store or of an SQLite database): every run of every active experiment,
or of the `experiments` named. Params become config columns (MLflow stores them as strings:
numbers, true/false and null/None are converted back), each metric's latest value a column,
`MlflowClient.get_metric_history` the curves. Duplicate run names get their run id's first 8
characters appended.

W&B (SOURCE: a runs export, no network): a CSV or JSON file of runs, one per row / object, in
either of the layouts W&B gives:
- the runs table's "Export CSV" (and the same as JSON records): columns `Name`, `State`, then
  config and summary columns side by side (`optim.lr`, `model.d_model`, `eval/loss`,
  `final_eval_loss`, ...); columns named `config.<key>` / `summary.<key>` are sorted by their
  prefix, the table's own columns (`ID`, `Notes`, `User`, `Tags`, `Created`, `Runtime`, `Sweep`,
  `Group`, ...) are kept as lower-case columns, W&B's internal `_`-prefixed keys are dropped;
- the public API's runs listing (`{"name", "id", "state", "config": {...}, "summary": {...}}` per
  run, as JSON, JSON Lines, or a CSV whose `config` / `summary` cells hold those dicts): nested
  config is flattened with dots, `{"value": v, "desc": ...}` config entries are unwrapped.
A config column is any column that is not a metric: a name the trainer's tracker writes, a loss
name, a summary.json final number, a name holding `/`, or one under `summary.`.
The optional history export (`history_file`, for the curves) is a CSV / JSON / JSON Lines file of
step rows: a run column (`name`, `Name`, `run`, or `id` / `run_id` matching the runs' ids), a step
column (`step`, `_step`, `Step`, `global_step`, `trainer/global_step`) and one column per metric
(`run.history()` of each run with its name added), or the wide CSV a chart panel exports (`Step`,
`<run name> - <metric>`, its `__MIN` / `__MAX` columns ignored). Its last values fill the metrics
a run's summary lacks.

The tracking packages are imported only when a reader runs (`pip install -e '.[tracking]'`
otherwise: one error line saying so).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import logging
import math
import os
import pathlib
import re
import warnings
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd

from analysis.core import runs
from models.base.errors import AnalysisError
from models.base.rundir import (
    FINAL_NUMBERS,
    MARKERS,
    ROLE_FIELDS,
    TENSORBOARD_DIR,
    ReadStatus,
    RunDir,
    RunStatus,
)

SOURCES = ("tensorboard", "mlflow", "wandb")
INSTALL_HINT = "pip install -e '.[tracking]'"

# The trainer's tracker names -> metrics.jsonl names: experiments/train/tracking.py's TRAIN_NAMES
# inverted (analysis may not import the trainer; tests/test_collect_trackers.py checks they agree).
TRACKER_NAMES: Mapping[str, str] = {
    "train/loss": "loss",
    "eval/loss": "eval_loss",
    "optim/lr": "lr",
    "optim/grad_norm": "grad_norm",
    "perf/tokens_per_s": "tokens_per_s",
    "perf/mfu": "mfu",
    "perf/step_time_s": "step_time_s",
    "progress/tokens": "tokens",
    "progress/flops": "flops",
}
# The trainer's final numbers as its MLflow tracker names them (`final/<name without final_>`).
FINAL_NAMES: Mapping[str, str] = {f"final/{k.removeprefix('final_')}": k for k in FINAL_NUMBERS}
# Metric names (after TRACKER_NAMES) that are a run's eval loss / training loss, first found wins.
EVAL_LOSS_NAMES = (
    "eval_loss",
    "val_loss",
    "val/loss",
    "valid_loss",
    "valid/loss",
    "validation_loss",
    "validation/loss",
    "loss/eval",
    "loss/val",
    "loss/validation",
)
TRAIN_LOSS_NAMES = ("loss", "train_loss", "loss/train", "training_loss", "train/loss")
EVAL_LOSS, TRAIN_LOSS = ROLE_FIELDS["loss"], "final_train_loss"  # the summary's field names
KEPT_STATUSES = (RunStatus.COMPLETED, ReadStatus.UNKNOWN)  # kept without include_unfinished

MLFLOW_STATUS = {"FINISHED": "completed", "FAILED": "failed", "KILLED": "killed", "RUNNING": "running"}
WANDB_STATUS = {"finished": "completed", "crashed": "failed", "failed": "failed"}


@dataclasses.dataclass
class TrackedRun:
    """One run as a tracker holds it, before it becomes a row."""

    name: str
    status: str
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # flattened, dotted keys
    last: dict[str, float] = dataclasses.field(default_factory=dict)  # metric as logged -> last value
    history: dict[str, list[tuple[int, float]]] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # where it is: path, run_id, ...
    summary: dict[str, Any] | None = None  # a trainer run's summary.json fields (TensorBoard)
    # the metrics its row took as eval / training loss -> eval_loss / loss in the curves table
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)


# ---- the table ---------------------------------------------------------------------------------


def load(
    kind: str,
    sources: Iterable[str | os.PathLike],
    *,
    experiments: Iterable[str] | None = None,
    history_file: str | os.PathLike | None = None,
    loss_metric: str | None = None,
    history: bool = False,
    include_unfinished: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs_df: one row per run, N, D, C, loss first; curves_df: the long per-step table, empty
    unless `history`) of the runs logged to `kind` (tensorboard | mlflow | wandb) at `sources`."""
    sources = [str(s) for s in sources]
    if kind not in SOURCES:
        raise AnalysisError(f"unknown tracker {kind!r}: one of {', '.join(SOURCES)}")
    if not sources:
        raise AnalysisError(f"--from {kind} needs a SOURCE")
    if kind != "tensorboard" and len(sources) != 1:
        raise AnalysisError(f"--from {kind} reads one SOURCE (got {len(sources)})")
    if kind == "tensorboard":
        tracked = read_tensorboard(*sources, history=history)
        where = ", ".join(sources)
    elif kind == "mlflow":
        tracked = read_mlflow(sources[0], experiments=experiments, history=history)
        where = sources[0]
    else:
        tracked = read_wandb(sources[0], history_file=history_file)
        where = sources[0]
    if not tracked:
        raise AnalysisError(f"no runs in {where}")
    return runs_table(tracked, where, loss_metric, include_unfinished), curves_table(tracked)


def metric_name(raw: str) -> str:
    """The metrics.jsonl / summary.json name of a tracker metric (other names unchanged)."""
    return FINAL_NAMES.get(raw) or TRACKER_NAMES.get(raw, raw)


def _is_metric(name: str) -> bool:
    """Whether a flat column of an export is a metric (else it is config)."""
    n = metric_name(name)
    return (
        name in FINAL_NAMES
        or n in TRACKER_NAMES.values()
        or n in FINAL_NUMBERS
        or n in EVAL_LOSS_NAMES
        or n in TRAIN_LOSS_NAMES
        or "/" in name
    )


def _first(names: Iterable[str], values: Mapping[str, float]) -> tuple[str | None, float]:
    for n in names:
        if n in values and _finite(values[n]):
            return n, values[n]
    return None, math.nan


def _finite(v: Any) -> bool:
    return (
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
    )


def _row(run: TrackedRun, loss_metric: str | None) -> dict[str, Any]:
    """The run's row: run, where, summary fields, final numbers, status, config (runs.py's order)."""
    row: dict[str, Any] = {"run": run.name, **run.info}
    if run.summary:
        row.update({k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in run.summary.items()})
    mapped: dict[str, float] = {}
    finals: dict[str, float] = {}
    for raw, v in run.last.items():
        if raw in FINAL_NAMES or metric_name(raw) in (EVAL_LOSS, TRAIN_LOSS):
            finals[metric_name(raw)] = v
        else:
            mapped[metric_name(raw)] = v
    if loss_metric is not None:
        key = metric_name(loss_metric)
        v = run.last.get(loss_metric)
        v = v if _finite(v) else mapped.get(key, finals.get(key))
        used_eval, eval_loss = (key, float(v)) if _finite(v) else (None, math.nan)
    else:
        used_eval, eval_loss = _first(EVAL_LOSS_NAMES, mapped)
        if _finite(finals.get(EVAL_LOSS)):
            eval_loss = finals[EVAL_LOSS]
    used_train, train_loss = _first(TRAIN_LOSS_NAMES, mapped)
    if _finite(finals.get(TRAIN_LOSS)):
        train_loss = finals[TRAIN_LOSS]
    if run.summary and _finite(run.summary.get(EVAL_LOSS)) and used_eval is not None:
        b = float(run.summary[EVAL_LOSS])
        if abs(eval_loss - b) > 1e-4 * abs(b):
            warnings.warn(
                f"{run.name}: the tracker's last {used_eval} ({eval_loss:.6g}) differs from summary.json's "
                f"final_eval_loss ({b:.6g}); the table has the tracker's",
                runs.RunWarning,
                stacklevel=3,
            )
    run.aliases = {k: v for k, v in ((used_eval, "eval_loss"), (used_train, "loss")) if k not in (None, v)}
    row[EVAL_LOSS] = eval_loss
    row[TRAIN_LOSS] = train_loss if _finite(train_loss) else row.get(TRAIN_LOSS, math.nan)
    for name, v in {**mapped, **finals}.items():
        if name in (used_eval, used_train, EVAL_LOSS, TRAIN_LOSS):
            continue
        m = re.fullmatch(r"task/(.+)/(loss|accuracy)", name)
        if m:
            name = f"{runs.TASK_PREFIXES[m.group(2)]}{m.group(1)}"
        if row.get(name) is None:  # summary.json's fields stay as the run wrote them
            row[name] = v
    row["status"] = run.status
    for k, v in run.config.items():
        row[k if k not in row else f"config.{k}"] = v
    return row


def runs_table(
    tracked: list[TrackedRun], where: str, loss_metric: str | None = None, include_unfinished: bool = False
) -> pd.DataFrame:
    """The runs table of `tracked` (N, D, C, loss first: runs.with_roles); runs that did not
    complete are left out with one warning unless `include_unfinished`."""
    names = _unique([r.name for r in tracked], [r.info.get("run_id") for r in tracked])
    for r, n in zip(tracked, names):
        r.name = n
    seen = sorted({metric_name(k) for r in tracked for k in r.last})
    if loss_metric is not None and not any(
        loss_metric in r.last or metric_name(loss_metric) in {metric_name(k) for k in r.last} for r in tracked
    ):
        raise AnalysisError(
            f"no run in {where} logged --loss-metric {loss_metric!r} (metrics: {_listing(seen)})"
        )
    skipped = [f"{r.name} ({r.status})" for r in tracked if r.status not in KEPT_STATUSES]
    kept = tracked if include_unfinished else [r for r in tracked if r.status in KEPT_STATUSES]
    if skipped:
        warnings.warn(
            f"{'kept' if include_unfinished else 'skipped'} {len(skipped)} run(s) that did not complete: "
            f"{', '.join(skipped)}",
            runs.RunWarning,
            stacklevel=2,
        )
    if not kept:
        raise AnalysisError(
            f"no completed run in {where} ({len(tracked)} run(s), none completed; --include-unfinished "
            "keeps them)"
        )
    rows = [_row(r, loss_metric) for r in kept]
    if not any(_finite(row[EVAL_LOSS]) for row in rows):
        looked = ", ".join(dict.fromkeys(["eval/loss", *EVAL_LOSS_NAMES]))
        raise AnalysisError(
            f"no eval loss in {where}: looked for {looked} (metrics: {_listing(seen)}); name the run's "
            "eval loss with --loss-metric NAME"
        )
    return runs.with_roles(runs.with_task_columns(pd.DataFrame(rows)))


def curves_table(tracked: list[TrackedRun]) -> pd.DataFrame:
    """The long per-step table: run, step, then one column per metric (metrics.jsonl names)."""
    frames = []
    for r in tracked:
        by_step: dict[int, dict[str, float]] = {}
        for raw, points in r.history.items():
            if raw in FINAL_NAMES:
                continue
            name = metric_name(raw)
            name = r.aliases.get(name, name)
            for step, v in points:
                by_step.setdefault(int(step), {})[name] = v
        if by_step:
            df = pd.DataFrame([{"run": r.name, "step": s, **by_step[s]} for s in sorted(by_step)])
            frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["run", "step"])
    return pd.concat(frames, ignore_index=True)


def _unique(names: list[str], ids: list[Any]) -> list[str]:
    """Run names made unique: a repeated name gets its id's first 8 characters (else a counter)."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out, used = [], set()
    for i, (n, rid) in enumerate(zip(names, ids)):
        if counts[n] > 1:
            n = f"{n}-{str(rid)[:8]}" if rid else f"{n}-{i}"
        while n in used:
            n = f"{n}-{i}"
        used.add(n)
        out.append(n)
    return out


def _listing(names: list[str], most: int = 12) -> str:
    if not names:
        return "none"
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _last(points: list[tuple[int, float]]) -> float:
    """The value at the highest step (the last one logged there)."""
    best = max(range(len(points)), key=lambda i: (points[i][0], i))
    return points[best][1]


def _number(value: Any) -> Any:
    """A number from an int-valued float (HParams store every number as a double), else as is."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _missing(package: str, what: str, err: ImportError) -> AnalysisError:
    return AnalysisError(
        f"reading {what} needs the {package} package ({err.name or package} is not installed): {INSTALL_HINT}"
    )


# ---- TensorBoard -------------------------------------------------------------------------------


def read_tensorboard(*paths: str | os.PathLike, history: bool = False) -> list[TrackedRun]:
    """The runs under `paths` (directories searched recursively, or event files)."""
    try:
        # optional dependency (the tracking extra), and a second of start-up: only for --from tensorboard
        from tensorboard.backend.event_processing import io_wrapper
    except ImportError as e:
        raise _missing("tensorboard", "TensorBoard event files", e) from None
    targets: list[tuple[pathlib.Path, pathlib.Path]] = []  # (what to read, the path given)
    for p in paths:
        root = pathlib.Path(p)
        if not root.exists():
            raise AnalysisError(f"TensorBoard path not found: {root}")
        if root.is_file():
            if not io_wrapper.IsTensorFlowEventsFile(str(root)):
                raise AnalysisError(f"{root} is not a TensorBoard event file (events.out.tfevents.*)")
            targets.append((root.resolve(), root.resolve().parent))
        else:
            with _quiet_logs("tensorboard", "absl"):
                found = sorted(
                    pathlib.Path(d).resolve() for d in io_wrapper.GetLogdirSubdirectories(str(root))
                )
            targets += [(d, root.resolve()) for d in found]
    if not targets:
        raise AnalysisError(
            f"no TensorBoard event files (events.out.tfevents.*) under {', '.join(map(str, paths))}"
        )
    tracked: list[TrackedRun] = []
    dirs: dict[pathlib.Path, TrackedRun] = {}
    hparams_of: dict[pathlib.Path, bool] = {}
    seen: set[pathlib.Path] = set()
    for target, root in targets:
        if target in seen:  # under two of the paths given
            continue
        seen.add(target)
        run, has_hparams = _read_event_target(target, root, history)
        if run is None:
            continue
        event_dir = target if target.is_dir() else target.parent
        dirs[event_dir], hparams_of[event_dir] = run, has_hparams
        tracked.append(run)
    # tensorboardX / PyTorch `add_hparams`: the HParams (and their metric values) in a child
    # directory of the run; TensorBoard shows them as the parent run's hyperparameters.
    for d, run in list(dirs.items()):
        parent = dirs.get(d.parent)
        if hparams_of[d] and parent is not None and not hparams_of[d.parent] and not parent.summary:
            parent.config = {**run.config, **parent.config}
            parent.last = {**run.last, **parent.last}
            for k, pts in run.history.items():
                parent.history.setdefault(k, pts)
            hparams_of[d.parent] = True
            tracked.remove(run)
    return tracked


def _trainer_dir(event_dir: pathlib.Path) -> pathlib.Path | None:
    """The trainer's run directory the event files belong to (`<run dir>/tensorboard`), else None."""
    for d in ((event_dir.parent,) if event_dir.name == TENSORBOARD_DIR else ()) + (event_dir,):
        if any((d / m).is_file() for m in MARKERS):
            return d
    return None


def _event_contents(acc: Any) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any], Any, Any]:
    """(scalar points per tag, HParams, the logged final status, the logged config) of a loaded
    EventAccumulator."""
    # optional dependency, imported by read_tensorboard's check first
    from tensorboard.plugins.hparams import metadata as hp_metadata
    from tensorboard.util import tensor_util

    plugins = acc.ActivePlugins()

    def tags(plugin: str) -> dict[str, bytes]:
        return acc.PluginTagToContent(plugin) if plugin in plugins else {}

    def texts(tag: str) -> list[str]:
        out = []
        for e in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            for v in np.asarray(arr).reshape(-1)[:1]:
                out.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
        return out

    points: dict[str, list[tuple[int, float]]] = {}
    for tag in tags("scalars"):
        pts = []
        for e in acc.Tensors(tag):
            v = np.asarray(tensor_util.make_ndarray(e.tensor_proto)).reshape(-1)
            if v.size == 1:
                pts.append((int(e.step), float(v[0])))
        if pts:
            points[tag] = pts
    hparams: dict[str, Any] = {}
    content = tags("hparams").get(hp_metadata.SESSION_START_INFO_TAG)
    if content is not None:
        info = hp_metadata.parse_session_start_info_plugin_data(content)
        for k, v in info.hparams.items():
            which = v.WhichOneof("kind")
            if which in ("number_value", "string_value", "bool_value"):
                hparams[k] = _number(getattr(v, which))
    status = text_config = None
    for tag in tags("text"):
        head = tag.split("/")[0]
        if head == "status" and (vals := texts(tag)):
            status = vals[-1].strip()
        elif head == "config" and (vals := texts(tag)):
            text_config = _fenced_json(vals[0])
    return points, hparams, status, text_config


def _read_event_target(
    target: pathlib.Path, root: pathlib.Path, history: bool
) -> tuple[TrackedRun | None, bool]:
    """One run from an event directory (or file): (the run, whether it holds HParams)."""
    # optional dependency, imported by read_tensorboard's check first
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea

    event_dir = target if target.is_dir() else target.parent
    # every point (the default keeps a 500-point sample of each tag)
    acc = pea.EventAccumulator(str(target), size_guidance={pea.TENSORS: 0})
    try:
        with _quiet_logs("tensorboard", "absl"):
            acc.Reload()
    except Exception as e:  # noqa: BLE001 - one unreadable run is a warning, not the end of collect
        warnings.warn(
            f"{target}: unreadable event files ({type(e).__name__}: {e})", runs.RunWarning, stacklevel=3
        )
        return None, False
    points, hparams, status, text_config = _event_contents(acc)
    run_dir = _trainer_dir(event_dir)
    summary = None
    config: dict[str, Any] = {}
    base = run_dir if run_dir is not None else event_dir
    try:
        name = str(base.relative_to(root.parent)) if base != root.parent else base.name
    except ValueError:  # the path given was the event directory inside the run's own
        name = base.name
    if run_dir is not None:
        s, config = runs.read_run(run_dir)
        if s is not None:
            summary = s.as_dict()
            status = str(summary.get("status", status or ReadStatus.UNKNOWN))
        elif status is None:  # no summary.json and no final status logged: as `collect` of the directory
            status = str(RunDir(run_dir).status)
    if not config:
        config = hparams or (runs.flatten(text_config) if isinstance(text_config, dict) else {})
    if not points and not hparams and summary is None:
        return None, False  # only graphs, images, ...: no run for the table
    run = TrackedRun(
        name=name,
        status=status or ReadStatus.UNKNOWN,
        config=config,
        last={tag: _last(pts) for tag, pts in points.items()},
        history=points if history else {},
        info={"path": str(base)},
        summary=summary,
    )
    return run, bool(hparams)


def _fenced_json(text: str) -> Any:
    """The JSON object in the trainer's `config` text (a ``` block), else None."""
    body = text.strip().removeprefix("```").removesuffix("```").strip()
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return None


@contextlib.contextmanager
def _quiet_logs(*names: str) -> Iterator[None]:
    """Keep the libraries' INFO / WARNING log lines and deprecation warnings off the console."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=FutureWarning)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# ---- MLflow ------------------------------------------------------------------------------------


def mlflow_uri(source: str) -> str:
    """The tracking URI of SOURCE: a URI as given (an SQLite database or file store must exist),
    a `.db` / `.sqlite` file -> sqlite:///, a directory -> its file store (file:///)."""
    parsed = urlparse(source)
    if parsed.scheme in ("http", "https", "databricks"):
        return source
    if parsed.scheme == "sqlite":
        path = pathlib.Path(unquote(source[len("sqlite:///") :])) if source.startswith("sqlite:///") else None
        if path is None or not path.is_file():
            raise AnalysisError(
                f"no MLflow database at {source} (sqlite:///relative.db or sqlite:////abs.db)"
            )
        return source
    if parsed.scheme == "file":
        path = pathlib.Path(unquote(parsed.path))
    elif len(parsed.scheme) > 1:
        raise AnalysisError(
            f"{source}: not an MLflow tracking URI this reads (http(s)://, sqlite:///, file:///)"
        )
    else:
        path = pathlib.Path(source)
    if not path.exists():
        raise AnalysisError(
            f"MLflow store not found: {path} (a tracking URI, an mlruns directory or a .db file)"
        )
    if path.is_file():
        if path.suffix.lower() not in (".db", ".sqlite", ".sqlite3"):
            raise AnalysisError(f"{path}: an MLflow SQLite database ends in .db or .sqlite")
        return f"sqlite:///{path.resolve()}"
    if not any(path.glob("*/meta.yaml")):
        raise AnalysisError(f"{path} is not an MLflow file store (no <experiment id>/meta.yaml in it)")
    return path.resolve().as_uri()


def read_mlflow(
    source: str, experiments: Iterable[str] | None = None, history: bool = False
) -> list[TrackedRun]:
    """The runs of every active experiment at `source` (or of the `experiments` named)."""
    uri = mlflow_uri(source)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses it otherwise
    else:  # a server that does not answer costs seconds, not MLflow's minutes of retries
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    try:
        # optional dependency (the tracking extra), and seconds of start-up: only for --from mlflow
        from mlflow.entities import ViewType
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise _missing("mlflow", "MLflow runs", e) from None
    with _quiet_logs("mlflow", "alembic", "urllib3"):
        try:
            client = MlflowClient(tracking_uri=uri)
            exps = _search_all(lambda tok: client.search_experiments(ViewType.ACTIVE_ONLY, page_token=tok))
            names = list(experiments or [])
            if names:
                by_name = {e.name: e for e in exps}
                unknown = [n for n in names if n not in by_name]
                if unknown:
                    raise AnalysisError(
                        f"no MLflow experiment {', '.join(map(repr, unknown))} at {uri} "
                        f"(experiments: {_listing(sorted(by_name))})"
                    )
                exps = [by_name[n] for n in names]
            tracked = []
            for exp in exps:
                found = _search_all(
                    lambda tok, e=exp: client.search_runs(
                        [e.experiment_id],
                        run_view_type=ViewType.ACTIVE_ONLY,
                        max_results=1000,
                        page_token=tok,
                    )
                )
                for r in found:
                    tracked.append(_mlflow_run(client, r, exp.name, history))
        except AnalysisError:
            raise
        except Exception as e:  # noqa: BLE001 - any client failure (unreachable, refused, schema) is one line
            raise AnalysisError(f"cannot read MLflow runs at {uri}: {_short(e)}") from None
    return tracked


def _search_all(search) -> list:
    out, token = [], None
    while True:
        page = search(token)
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def _mlflow_run(client, r, experiment: str, history: bool) -> TrackedRun:
    tags = r.data.tags
    status = tags.get("scalelab.status") or MLFLOW_STATUS.get(r.info.status, str(r.info.status).lower())
    hist = {}
    if history:
        for key in r.data.metrics:
            pts = client.get_metric_history(r.info.run_id, key)
            hist[key] = [
                (int(m.step), float(m.value)) for m in sorted(pts, key=lambda m: (m.step, m.timestamp))
            ]
    return TrackedRun(
        name=r.info.run_name or tags.get("mlflow.runName") or r.info.run_id,
        status=status,
        config={k: param_value(v) for k, v in sorted(r.data.params.items())},
        last={k: float(v) for k, v in r.data.metrics.items()},
        history=hist,
        info={"run_id": r.info.run_id, "experiment": experiment},
    )


def param_value(text: str) -> Any:
    """An MLflow param (always a string) as the value it was: int, float, bool, None, or the text."""
    s = text.strip()
    if s in ("None", "null", ""):
        return None
    if s in ("true", "True"):
        return True
    if s in ("false", "False"):
        return False
    if re.fullmatch(r"[+-]?\d+", s):
        return int(s)
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", s, re.IGNORECASE):
        return float(s)
    return text


def _short(err: BaseException) -> str:
    """An exception as one short line (MLflow's messages span lines and quote whole responses)."""
    text = " ".join(str(err).split())
    for pattern, why in (
        (r"Connection refused", "connection refused"),
        (r"Name or service not known|nodename nor servname|getaddrinfo failed", "unknown host"),
        (r"timed? ?out", "timed out"),
        (r"Max retries exceeded|Failed to establish", "no answer"),
    ):
        if re.search(pattern, text, re.IGNORECASE):
            return f"the server did not answer ({why}); is `mlflow server` running there?"
    text = text.split(" Response text:")[0]
    return f"{type(err).__name__}: {text[:300]}"


# ---- W&B ---------------------------------------------------------------------------------------

NAME_COLUMNS = ("Name", "name", "display_name", "run_name", "run")
ID_COLUMNS = ("ID", "id", "run_id", "Run ID")
STATE_COLUMNS = ("State", "state")
STEP_COLUMNS = ("step", "_step", "Step", "global_step", "trainer/global_step")
# The W&B runs table's own columns: kept under these names (lower case, no dots: not config).
WANDB_META = {
    "Notes": "notes",
    "User": "user",
    "Tags": "tags",
    "Created": "created",
    "Runtime": "runtime",
    "Sweep": "sweep",
    "Group": "group",
    "Job Type": "job_type",
    "Hostname": "hostname",
    "Commit": "commit",
    "GitHub": "github",
    "GPU Count": "gpu_count",
    "GPU Type": "gpu_type",
    "Updated": "updated",
    "Start Time": "start_time",
    "End Time": "end_time",
    "Project": "project",
    "Entity": "entity",
    "url": "url",
    "URL": "url",
    "group": "group",
    "tags": "tags",
    "notes": "notes",
    "sweep": "sweep",
    "created_at": "created",
    "project": "project",
    "entity": "entity",
    "job_type": "job_type",
}


def read_wandb(export: str | os.PathLike, history_file: str | os.PathLike | None = None) -> list[TrackedRun]:
    """The runs of a W&B runs export (CSV / JSON / JSON Lines, see the module docstring), with
    the step rows of `history_file` as their curves."""
    records = _records(pathlib.Path(export), "W&B runs export")
    if not records:
        raise AnalysisError(f"no runs in the W&B export {export}")
    columns = list(dict.fromkeys(k for r in records for k in r))
    name_col = next((c for c in NAME_COLUMNS if c in columns), None)
    if name_col is None:
        raise AnalysisError(
            f"the W&B export {export} has no run-name column ({' or '.join(NAME_COLUMNS[:2])}; columns: "
            f"{_listing(columns)}): export the runs table with its Name column"
        )
    id_col = next((c for c in ID_COLUMNS if c in columns), None)
    state_col = next((c for c in STATE_COLUMNS if c in columns), None)
    tracked = []
    for rec in records:
        name = rec.get(name_col)
        if _blank(name):
            continue
        config, last, info = {}, {}, {}
        for key, value in rec.items():
            if key in (name_col, id_col, state_col) or _blank(value):
                continue
            if key in ("config", "summary", "summary_metrics", "summaryMetrics"):
                d = _mapping(value, key, export)
                if key == "config":
                    config.update(runs.flatten(_unwrap_config(d)))
                else:
                    last.update(_summary_values(d))
                continue
            if key in WANDB_META:
                info[WANDB_META[key]] = value
            elif key == "status":  # the trainer's word (its W&B summary)
                info["_status"] = value
            elif key.startswith(("config.", "config/")):
                config[key[len("config.") :]] = value
            elif key.startswith(("summary.", "summary/")):
                if _finite(v := _as_number(value)):
                    last[key[len("summary.") :]] = v
            elif key.startswith("_"):
                continue  # W&B's own: _step, _runtime, _timestamp, _wandb
            elif _is_metric(key):
                if _finite(v := _as_number(value)):
                    last[key] = v
            else:
                config[key] = value
        status_word = info.pop("_status", None) or last.pop("status", None)
        state = rec.get(state_col) if state_col else None
        if not isinstance(status_word, str):
            status_word = (
                WANDB_STATUS.get(str(state).lower(), str(state).lower())
                if not _blank(state)
                else ReadStatus.UNKNOWN
            )
        rid = rec.get(id_col) if id_col else None
        tracked.append(
            TrackedRun(
                name=str(name),
                status=status_word,
                config=config,
                last=last,
                info={**({"run_id": str(rid)} if not _blank(rid) else {}), **info},
            )
        )
    if history_file is not None:
        _attach_history(tracked, pathlib.Path(history_file))
    return tracked


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _as_number(v: Any) -> Any:
    if isinstance(v, str):
        p = param_value(v)
        return p if isinstance(p, (int, float)) and not isinstance(p, bool) else v
    return v


def _mapping(value: Any, key: str, export: Any) -> dict:
    """A config / summary cell: a dict, or its JSON / Python-literal text (pandas writes dicts so)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                d = parse(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(d, dict):
                return d
    raise AnalysisError(f"the W&B export {export}: a `{key}` cell is not a JSON object: {str(value)[:80]!r}")


def _unwrap_config(d: Mapping[str, Any]) -> dict[str, Any]:
    """W&B config without its internal keys, `{"value": v, "desc": ...}` entries as v."""
    out = {}
    for k, v in d.items():
        if str(k).startswith("_"):
            continue
        if isinstance(v, dict) and "value" in v and set(v) <= {"value", "desc"}:
            v = v["value"]
        out[str(k)] = _unwrap_config(v) if isinstance(v, dict) else v
    return out


def _summary_values(d: Mapping[str, Any]) -> dict[str, Any]:
    """A W&B summary's scalar values (histograms, tables and W&B's `_` keys left out)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if str(k).startswith("_"):
            continue
        if isinstance(v, str) and k == "status":
            out[k] = v
        elif _finite(v := _as_number(v)):
            out[str(k)] = float(v)
    return out


def _records(path: pathlib.Path, what: str) -> list[dict[str, Any]]:
    """The rows of a CSV / JSON (a list, or {"runs": [...]}) / JSON Lines file as dicts."""
    if not path.is_file():
        raise AnalysisError(f"{what} not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            df = pd.read_csv(path)
            return [{k: v for k, v in r.items()} for r in df.to_dict(orient="records")]
        if suffix not in (".json", ".jsonl", ".ndjson"):
            raise AnalysisError(f"{what} {path}: a .csv, .json or .jsonl file")
        text = path.read_text()
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise AnalysisError(
            f"{what} {path} is unreadable: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise AnalysisError(f"{what} {path} is not JSON or JSON Lines: {e}") from None
    if isinstance(data, dict):
        data = next(
            (data[k] for k in ("runs", "rows", "data", "history") if isinstance(data.get(k), list)), [data]
        )
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise AnalysisError(f"{what} {path}: expected a list of objects (one per row)")
    return data


def _attach_history(tracked: list[TrackedRun], path: pathlib.Path) -> None:
    """The history export's step rows as each run's history (and last values it lacks)."""
    rows = _records(path, "W&B history export")
    if not rows:
        raise AnalysisError(f"no rows in the W&B history export {path}")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    run_col = next((c for c in (*NAME_COLUMNS, *ID_COLUMNS) if c in columns), None)
    step_col = next((c for c in STEP_COLUMNS if c in columns), None)
    if run_col is None and step_col is not None:
        rows, run_col = _melt_panel(rows, step_col), "run"
    if run_col is None or step_col is None or not rows:
        raise AnalysisError(
            f"the W&B history export {path} needs a run column ({', '.join(NAME_COLUMNS[:3])} or id) and a "
            f"step column ({', '.join(STEP_COLUMNS)}); columns: {_listing(columns)}"
        )
    by_key = {r.name: r for r in tracked}
    if run_col in ID_COLUMNS:
        by_key = {str(r.info.get("run_id")): r for r in tracked}
    unknown: set[str] = set()
    for row in rows:
        key, step = row.get(run_col), _as_number(row.get(step_col))
        if _blank(key) or not _finite(step):
            continue
        run = by_key.get(str(key))
        if run is None:
            unknown.add(str(key))
            continue
        for k, v in row.items():
            if k in (run_col, step_col) or k.startswith("_") or k in STEP_COLUMNS:
                continue
            if _finite(v := _as_number(v)):
                run.history.setdefault(k, []).append((int(step), float(v)))
    for run in tracked:
        for k, pts in run.history.items():
            run.last.setdefault(k, _last(pts))
    if unknown:
        warnings.warn(
            f"{path}: history rows of {len(unknown)} run(s) not in the runs export left out: "
            f"{_listing(sorted(unknown), 5)}",
            runs.RunWarning,
            stacklevel=3,
        )


def _melt_panel(rows: list[dict[str, Any]], step_col: str) -> list[dict[str, Any]]:
    """A chart panel's wide export (`Step`, `<run> - <metric>` columns) as long rows."""
    out: dict[tuple[str, Any], dict[str, Any]] = {}
    for row in rows:
        for col, v in row.items():
            if col == step_col or " - " not in col or col.endswith(("__MIN", "__MAX")) or _blank(v):
                continue
            run, metric = col.rsplit(" - ", 1)
            out.setdefault((run, row[step_col]), {"run": run, step_col: row[step_col]})[metric] = v
    return list(out.values())
