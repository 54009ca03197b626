"""When the disk fills (issue "When the disk fills: one line, nothing lost, from checkpoints to
reports"): every write path with ENOSPC injected at the write layer — the checkpoint manager
(a save that raises, an asynchronous one that fails in the background), the metrics writer (a
line half written), summary.json, the console log, a packed member, the report's HTML and
figures, `collect`'s tables and `--json` — ends in one line that names what did not fit, leaves
no partial file or checkpoint behind, keeps what was written readable, and resumes to the same
result; the sweep's checkpoint footprint and its relaunch decision. The same on a real full
filesystem (a small tmpfs) is tests/test_disk_full_tmpfs.py.

ENOSPC is injected where the kernel would raise it: Orbax's `CheckpointManager.save` /
`wait_until_finished` raise TensorStore's `RESOURCE_EXHAUSTED ... No space left on device`, the
metrics file's write writes half the line then raises OSError(ENOSPC), and whole-file writes get
a temporary file on /dev/full (every write to it fails with ENOSPC).
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import io
import json
import logging
import os
import pickle
import sys
import tempfile
import types
from pathlib import Path

import orbax.checkpoint as ocp
import pytest
from hydra import compose, initialize_config_dir

import models.base.rundir as rundir_mod
from analysis.cli import main as analysis_main
from experiments import rundir as exp_rundir
from experiments.sweeps.disk import (
    CHECKPOINT_OVERHEAD_BYTES,
    STATE_BYTES_PER_PARAM,
    RunCheckpoints,
    checkpoint_footprint,
    full_disk_error,
    run_checkpoints,
    runs_in_flight,
)
from experiments.sweeps.runs import decide, read_status
from experiments.train import checkpoint as ckpt_mod
from experiments.train import tracking
from experiments.train.config import TrainConfig, resolve_config
from experiments.train.loop import run
from experiments.train.metrics import MetricsLog
from experiments.train.pack import run_pack
from models.base import jsonio
from models.base.configs import to_plain
from models.base.diskspace import (
    DiskFull,
    disk_full_of,
    disk_full_summary,
    human_bytes,
    is_disk_full,
    last_complete_step,
)
from models.base.errors import ConfigError
from models.base.packs import Member
from models.base.rundir import MetricsWriter, ReadStatus, RunDir, RunStatus, RunSummary, read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.steps=30",
    "train.ckpt_every=10",
    "train.eval_every=30",
    "train.eval_tokens=512",
    "train.progress_every_s=60",
]
ORBAX_ENOSPC = (
    'RESOURCE_EXHAUSTED: Error writing "opt_state.1.0.mu.block_0.attn.wv_DxKxE/0.0.0" in OCDBT database '
    'at local file "{d}/ocdbt.process_0/": Failed writing: "{d}/ocdbt.process_0/d/e1b6": Failed to write '
    "4165632 bytes to file 19: No space left on device [os_error_code='28']"
)
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")


def _cfg(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        c = compose(config_name="config", overrides=TINY + list(overrides))
    d = to_plain(c)
    d.pop("hydra", None)
    return d


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> types.SimpleNamespace:
    """The uninterrupted run every relaunch must end equal to (and the report's input)."""
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    s = run(_cfg(), run_dir)
    assert s.status == RunStatus.COMPLETED
    return types.SimpleNamespace(run_dir=str(run_dir), final_eval_loss=s.final_eval_loss, n_params=s.n_params)


def _guarded(cfg: dict, run_dir: Path, capsys) -> tuple[int, list[str]]:
    """The command line's contract in process: (exit code, stderr lines)."""
    with pytest.raises(SystemExit) as e:
        exp_rundir.run_guarded(run, cfg, run_dir, multirun=False)
    err = capsys.readouterr().err
    return e.value.code, [line for line in err.splitlines() if line.strip()]


def _one_line(lines: list[str]) -> str:
    assert len(lines) == 1 and "Traceback" not in "\n".join(lines), lines
    return lines[0]


def _relaunch_equals(reference: types.SimpleNamespace, cfg: dict, run_dir: Path) -> RunSummary:
    s = run(cfg, run_dir)
    assert s.status == RunStatus.COMPLETED
    assert s.final_eval_loss == reference.final_eval_loss  # bit for bit: resumed, nothing lost
    m = read_metrics(run_dir / "metrics.jsonl")
    assert m.skipped == 0 and [r["step"] for r in m] == list(range(1, 31))
    return s


# ---- the write layer --------------------------------------------------------------------------


def test_is_disk_full_knows_the_forms_libraries_give_it():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(ValueError(ORBAX_ENOSPC.format(d="/x")))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("commit failed") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("RESOURCE_EXHAUSTED: out of memory"))
    assert disk_full_of(KeyError("x")) is None


def test_disk_full_lines():
    e = DiskFull("the checkpoint of step 50", "/r/checkpoints", free=0, needed=5 * 2**20)
    assert str(e) == (
        "no space left on device writing the checkpoint of step 50 in /r/checkpoints "
        "(0 B free, 5.0 MiB needed)"
    )
    assert e.run_line(0) == (
        "no space left on device writing the checkpoint of step 50 in /r/checkpoints (0 B free, 5.0 MiB "
        "needed); free space and relaunch: the run resumes from step 0"
    )
    e.summary_written = False
    assert e.run_line(40).endswith(
        "resumes from step 40 (summary.json could not be written either: the run has no status on disk)"
    )
    f = DiskFull("/out/report.html", None, free=1024, needed=2048)
    assert f.command_line() == (
        "no space left on device writing /out/report.html (1.0 KiB free, 2.0 KiB needed); free space and run "
        "the command again"
    )
    assert isinstance(f, OSError) and f.errno == errno.ENOSPC
    back = pickle.loads(pickle.dumps(f))
    assert str(back) == str(f)
    assert [human_bytes(n) for n in (None, 0, 1023, 1536, 3 * 2**30)] == [
        "? B",
        "0 B",
        "1023 B",
        "1.5 KiB",
        "3.0 GiB",
    ]


def test_last_complete_step_counts_only_finished_checkpoints(tmp_path):
    assert last_complete_step(tmp_path / "none") == 0
    for name in ("10", "20", "30.orbax-checkpoint-tmp-1712", "notes"):
        (tmp_path / name).mkdir()
    assert last_complete_step(tmp_path) == 20


def _full_disk_for(monkeypatch, *patterns: str) -> None:
    """Whole-file writes (models.base.jsonio.atomic_output) of file names matching `patterns`
    get their temporary file on /dev/full: the kernel's ENOSPC at the first flush."""
    real = tempfile.mkstemp

    def mkstemp(*args, **kw):
        fd, path = real(*args, **kw)
        name = (kw.get("prefix") or "")[1:-1]  # ".report.html." -> report.html
        if any(fnmatch.fnmatch(name, p) for p in patterns):
            os.close(fd)
            fd = os.open("/dev/full", os.O_WRONLY)
        return fd, path

    monkeypatch.setattr(jsonio.tempfile, "mkstemp", mkstemp)


@needs_dev_full
def test_atomic_write_keeps_the_previous_file_and_names_the_path(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    target.write_text("the previous complete report\n")
    _full_disk_for(monkeypatch, "report.html")
    text = "<html>" + "x" * 50_000 + "</html>\n"
    with pytest.raises(DiskFull) as e:
        jsonio.write_text_atomic(target, text)
    assert e.value.what == str(target) and e.value.needed == len(text)
    assert target.read_text() == "the previous complete report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temporary left
    jsonio.write_text_atomic(tmp_path / "report.html.new", text)  # another name: written
    assert (tmp_path / "report.html.new").read_text() == text
    (tmp_path / "report.html.new").unlink()
    _full_disk_for(monkeypatch, "*.png")
    with pytest.raises(DiskFull):
        jsonio.write_bytes_atomic(tmp_path / "fig.png", b"\x89PNG" * 1000)
    assert not (tmp_path / "fig.png").exists()


def test_metrics_writer_takes_back_a_half_written_line(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    _half_line_at(monkeypatch, step=2)
    w = MetricsWriter(path)
    w.append({"step": 1, "loss": 2.0})
    with pytest.raises(DiskFull) as e:
        w.append({"step": 2, "loss": float("nan")})
    assert e.value.what == "metrics.jsonl" and e.value.directory == tmp_path
    w.close()
    m = read_metrics(path)
    assert m.skipped == 0 and [r["step"] for r in m] == [1]
    assert path.read_bytes().endswith(b"\n")


def _half_line_at(monkeypatch, step: int) -> None:
    """metrics.jsonl's file writes half of step `step`'s line, then the disk is full."""
    real_open = open

    class FillsUp:
        def __init__(self, f):
            self._f = f

        def write(self, b):
            data = bytes(b)
            if json.loads(data).get("step") == step:
                self._f.write(data[: len(data) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

    def fake_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return FillsUp(f) if str(path).endswith("metrics.jsonl") and "a" in mode else f

    monkeypatch.setattr(rundir_mod, "open", fake_open, raising=False)


# ---- checkpoints ------------------------------------------------------------------------------


def _save_fails_at(monkeypatch, step: int, where: str = "", logged: list | None = None) -> None:
    """Orbax's save of `step` (in a directory containing `where`) leaves its temporary folder and
    raises TensorStore's ENOSPC, as on a full disk; its writer threads' log records go to absl."""
    real = ocp.CheckpointManager.save

    def save(self, s, *a, **kw):
        if s == step and where in str(self.directory):
            tmp = Path(str(self.directory)) / f"{s}.orbax-checkpoint-tmp"
            (tmp / "state").mkdir(parents=True, exist_ok=True)
            (tmp / "state" / "part").write_bytes(b"x" * 4096)
            err = ValueError(ORBAX_ENOSPC.format(d=tmp / "state"))
            for _ in range(3):  # one per array and stage, as Orbax logs them
                logging.getLogger("absl").error(
                    f"_SignalingThread.run() raised an exception: {err}", exc_info=err
                )
            raise err
        return real(self, s, *a, **kw)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)


def test_checkpoint_save_on_a_full_disk(reference, tmp_path, capsys, monkeypatch, caplog):
    """One line naming the step and the folder, the resume step, no traceback, no Orbax log;
    the partial folder removed; status failed with the reason; the relaunch ends equal."""
    cfg, run_dir = _cfg(), tmp_path / "run"
    _save_fails_at(monkeypatch, 20)
    with caplog.at_level(logging.ERROR):
        code, lines = _guarded(cfg, run_dir, capsys)
    line = _one_line(lines)
    assert code == 1
    assert line.startswith(
        f"error: no space left on device writing the checkpoint of step 20 in {run_dir / 'checkpoints'} ("
    )
    assert line.endswith("; free space and relaunch: the run resumes from step 10")
    assert not [r for r in caplog.records if r.name == "absl"]  # Orbax's per-array records dropped
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["10"]  # no partial 20
    s = RunDir(run_dir).read_summary()
    assert s.status == RunStatus.FAILED and disk_full_summary(s.error) and s.traceback is None
    assert read_metrics(run_dir / "metrics.jsonl").skipped == 0
    monkeypatch.undo()
    assert _relaunch_equals(reference, cfg, run_dir).resumed_from_step == 10


def test_async_checkpoint_failure_stops_the_run_at_once(reference, tmp_path, capsys, monkeypatch):
    """A background save that fails is found within a few steps (not at the next save), said
    once, and the run resumes from the save before it."""
    cfg, run_dir = _cfg("train.async_checkpoints=true"), tmp_path / "run"
    state = {"pending": False, "polls": 0}
    real_save, real_wait = ocp.CheckpointManager.save, ocp.CheckpointManager.wait_until_finished

    def save(self, s, *a, **kw):
        if s == 20:  # "in flight": the files are being written in the background
            (Path(str(self.directory)) / "20.orbax-checkpoint-tmp").mkdir()
            state["pending"] = True
            return True
        return real_save(self, s, *a, **kw)

    def in_progress(self):
        state["polls"] += state["pending"]
        return state["pending"] and state["polls"] < 3  # the write takes two steps, then fails

    def wait(self):
        if state["pending"]:
            state["pending"] = False
            raise ValueError(ORBAX_ENOSPC.format(d=Path(str(self.directory)) / "20.orbax-checkpoint-tmp"))
        return real_wait(self)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    monkeypatch.setattr(ocp.CheckpointManager, "is_saving_in_progress", in_progress)
    monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", wait)
    code, lines = _guarded(cfg, run_dir, capsys)
    assert code == 1
    assert "writing the checkpoint of step 20 in" in _one_line(lines)
    assert _one_line(lines).endswith("the run resumes from step 10")
    assert RunDir(run_dir).read_summary().steps_done <= 23  # 3 polls after step 20, not at the end
    assert not list((run_dir / "checkpoints").glob("20*"))
    monkeypatch.undo()
    _relaunch_equals(reference, cfg, run_dir)


def test_orbax_aftermath_is_kept_off_the_console(monkeypatch):
    """TensorStore's remaining writes after a failed save: `Event loop is closed` unraisables
    from `call_soon_threadsafe` are dropped; any other unraisable still reaches the hook."""
    ckpt_mod._quiet_disk_full_logs()
    seen = []
    monkeypatch.setattr(ckpt_mod._unraisable, "previous", seen.append)

    def call_soon_threadsafe():
        raise RuntimeError("Event loop is closed")

    try:
        call_soon_threadsafe()
    except RuntimeError as e:
        err = e
    args = types.SimpleNamespace(
        exc_type=RuntimeError,
        exc_value=err,
        exc_traceback=err.__traceback__.tb_next,
        err_msg=None,
        object=None,
    )
    sys.unraisablehook(args)
    assert seen == []
    other = types.SimpleNamespace(
        exc_type=ValueError, exc_value=ValueError("x"), exc_traceback=None, err_msg=None, object=None
    )
    sys.unraisablehook(other)
    assert seen == [other]


# ---- metrics, summary, console log ------------------------------------------------------------


def test_metrics_writer_on_a_full_disk(reference, tmp_path, capsys, monkeypatch):
    cfg, run_dir = _cfg(), tmp_path / "run"
    _half_line_at(monkeypatch, step=15)
    code, lines = _guarded(cfg, run_dir, capsys)
    line = _one_line(lines)
    assert code == 1 and line.startswith(
        f"error: no space left on device writing metrics.jsonl in {run_dir} ("
    )
    assert line.endswith("the run resumes from step 10")
    m = read_metrics(run_dir / "metrics.jsonl")
    assert m.skipped == 0 and [r["step"] for r in m] == list(range(1, 15))  # whole lines only
    monkeypatch.undo()
    _relaunch_equals(reference, cfg, run_dir)


@needs_dev_full
def test_summary_that_cannot_be_written_is_said_in_the_line(tmp_path, capsys, monkeypatch):
    cfg, run_dir = _cfg(), tmp_path / "run"
    _full_disk_for(monkeypatch, "summary.json")
    code, lines = _guarded(cfg, run_dir, capsys)
    line = _one_line(lines)
    assert code == 1 and f"writing {run_dir / 'summary.json'} (" in line
    assert line.endswith(
        "the run resumes from step 30 "
        "(summary.json could not be written either: the run has no status on disk)"
    )
    assert not (run_dir / "summary.json").exists() and not list(run_dir.glob(".summary.json.*"))


@needs_dev_full
def test_console_log_on_a_full_disk(tmp_path, capsys):
    """The console copy (`<run dir>/train.log`) does not fit: the console keeps everything, no
    `--- Logging error ---`, and the run stops at its next step with the one line."""
    cfg, run_dir = _cfg(), tmp_path / "run"
    with exp_rundir.console_log(Path("/dev/full")):
        logging.getLogger("scalelab.test").warning("a logged line the log cannot take")
        code, lines = _guarded(cfg, run_dir, capsys)
    line = _one_line(lines)
    assert code == 1 and line.startswith("error: no space left on device writing full in /dev (")
    assert line.endswith("the run resumes from step 0")
    assert RunDir(run_dir).read_summary().steps_done <= 1  # stopped at the first step
    assert exp_rundir.console_log_error() is None  # the streams are restored


def test_tracker_files_on_a_full_disk_stop_the_run(tmp_path, monkeypatch):
    """A tracker's failures only warn (a dashboard must not cost the run), but a full disk under
    its files stops the run there, with DiskFull and no warning; metrics.jsonl is written first."""

    class FullDisk:
        def log(self, step, scalars):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def finish(self, status, final):
            pass

    monkeypatch.setattr(tracking, "_open_backend", lambda *a: FullDisk())
    err = io.StringIO()
    tracker = tracking.Tracker(tracking.TrackerConfig(backend="tensorboard"), tmp_path, {}, stream=err)
    log = MetricsLog(tmp_path / "metrics.jsonl", tracker=tracker)
    with pytest.raises(DiskFull) as e:
        log.write({"step": 1, "loss": 2.0})
    assert str(e.value).startswith(
        f"no space left on device writing the tensorboard tracker's files in {tmp_path} ("
    )
    assert err.getvalue() == "" and [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]


# ---- packs and sweeps -------------------------------------------------------------------------


def test_a_packed_members_full_disk_stops_the_pack_in_one_line(reference, tmp_path, capsys, monkeypatch):
    cfgs = [_cfg(), _cfg("optim.lr=3e-2")]
    members = [Member(tmp_path / f"m{i}", f"m{i}", c) for i, c in enumerate(cfgs)]
    _save_fails_at(monkeypatch, 10, where=f"{tmp_path}/m1/")
    out = run_pack(members, 2)
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "Traceback"))
    ]
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        f"error: no space left on device writing the checkpoint of step 10 in {tmp_path / 'm1'}"
    )
    assert "free space and relaunch: the pack's" in errors[0] and "m1 from step 0" in errors[0]
    assert out[1].status == RunStatus.FAILED and disk_full_summary(out[1].error)
    for m, s in zip(members, out):
        if s.status != RunStatus.COMPLETED:  # stopped with the pack, resumable
            assert read_status(m.run_dir) == ReadStatus.INTERRUPTED
            assert full_disk_error(m.run_dir) is not None
    monkeypatch.undo()
    again = run_pack(members, 2)
    assert [s.status for s in again] == [RunStatus.COMPLETED] * 2
    assert again[0].final_eval_loss == reference.final_eval_loss


def test_a_sweep_relaunch_resumes_full_disk_runs_and_keeps_other_failures(tmp_path):
    full, bad = tmp_path / "full", tmp_path / "bad"
    RunDir(full).write_summary(
        RunSummary.of(status=RunStatus.FAILED, error="DiskFull: no space left on device writing x")
    )
    RunDir(bad).write_summary(RunSummary.of(status=RunStatus.FAILED, error="ValueError: boom"))
    assert read_status(full) == ReadStatus.INTERRUPTED and decide(read_status(full), False)[0]
    assert read_status(bad) == RunStatus.FAILED and not decide(read_status(bad), False)[0]
    assert full_disk_error(bad, "run exited with status 1") is None
    assert full_disk_error(bad, "OSError: [Errno 28] No space left on device") is not None


def test_checkpoint_footprint(reference, tmp_path):
    """12 bytes a parameter (float32 params + AdamW's two moments), measured against the
    reference run's checkpoint on disk; keep + 1 per run in flight; the warning line."""
    on_disk = sum(
        p.stat().st_size for p in (Path(reference.run_dir) / "checkpoints" / "30").rglob("*") if p.is_file()
    )
    estimate = run_checkpoints("ref", reference.n_params, {}).checkpoint_bytes
    assert estimate == reference.n_params * STATE_BYTES_PER_PARAM + CHECKPOINT_OVERHEAD_BYTES
    assert 0.75 * estimate < on_disk <= estimate, (on_disk, estimate)  # never short, ~10% above
    runs = [RunCheckpoints(f"r{i}", n * 12, 2) for i, n in enumerate((10_000, 20_000, 40_000))] + [
        run_checkpoints("trunk", 10_000, {"keep_checkpoints": 1, "branch_points": [5, 9]})
    ]
    assert runs[-1].kept == 3 and runs[-1].checkpoint_bytes == 120_000 + CHECKPOINT_OVERHEAD_BYTES
    runs[-1] = RunCheckpoints("trunk", 120_000, 1, 2)
    fp = checkpoint_footprint(runs, in_flight=2, directory=tmp_path)
    assert fp.runs_in_flight == 2 and fp.keep_checkpoints == [1, 2]
    assert fp.in_flight_bytes == 12 * (40_000 * 3 + 20_000 * 3)  # the two largest, keep + 1 each
    assert fp.sweep_bytes == 12 * (10_000 * 2 + 20_000 * 2 + 40_000 * 2 + 10_000 * 3) + 12 * (40_000 + 20_000)
    assert fp.warning() is None  # a real disk has more free than ~2 MB
    short = checkpoint_footprint(runs, None, tmp_path)
    assert short.runs_in_flight == 4
    tight = dataclasses.replace(fp, free_bytes=fp.in_flight_bytes - 1)
    assert tight.warning().startswith(f"warning: {tmp_path} has ")
    assert "the 2 run(s) in flight hold ~" in tight.warning()
    later = dataclasses.replace(fp, free_bytes=fp.sweep_bytes - 1)
    assert "leave ~" in later.warning() and "train.keep_checkpoints=1/2" in later.warning()
    assert json.loads(json.dumps(fp.as_dict()))["in_flight_bytes"] == fp.in_flight_bytes


def test_runs_in_flight_by_launcher():
    def launcher(name, **attrs):
        return type(name, (), attrs)()

    assert runs_in_flight(launcher("LocalParallelLauncher", n_jobs=3), pack=2) == 6
    assert runs_in_flight(launcher("BasicLauncher"), pack=1) == 1
    assert runs_in_flight(launcher("BasicLauncher"), pack=4) == 4
    assert runs_in_flight(launcher("PackedLauncher", pack=3), pack=1) == 3
    assert runs_in_flight(launcher("SlurmLauncher"), pack=1) is None


def test_keep_checkpoints_is_bounded_by_default():
    assert TrainConfig().keep_checkpoints == 2
    with pytest.raises(ConfigError, match="train.keep_checkpoints"):
        resolve_config(_cfg("train.keep_checkpoints=0"))


# ---- analysis writes --------------------------------------------------------------------------


@needs_dev_full
@pytest.mark.parametrize(
    "pattern, previous",
    [("report.html", "report.html"), ("*.png", None)],
    ids=["report-html", "figure"],
)
def test_report_on_a_full_disk(reference, tmp_path, capsys, monkeypatch, pattern, previous):
    out = tmp_path / "rep"
    out.mkdir()
    if previous:
        (out / previous).write_text("the previous complete report\n")
    _full_disk_for(monkeypatch, pattern)
    rc = analysis_main(["report", reference.run_dir, "--out", str(out), "--bootstrap", "0"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"error: no space left on device writing {out}/")
    assert err[-1].endswith("needed); free space and run the command again")
    assert fnmatch.fnmatch(Path(err[-1].split(" writing ")[1].split(" (")[0]).name, pattern)
    if previous:
        assert (out / previous).read_text() == "the previous complete report\n"
    assert not list(out.rglob(".*.tmp"))  # nothing half-written


@needs_dev_full
@pytest.mark.parametrize(
    "flag, name", [("--out", "runs.csv"), ("--out", "runs.parquet"), ("--json", "runs.json")]
)
def test_collect_tables_and_json_on_a_full_disk(reference, tmp_path, capsys, monkeypatch, flag, name):
    target = tmp_path / name
    target.write_bytes(b"previous")
    _full_disk_for(monkeypatch, name)
    args = ["collect", str(Path(reference.run_dir).parent), "--no-cache"]
    args += [flag, str(target)] + (["--out", str(tmp_path / "other.csv")] if flag == "--json" else [])
    rc = analysis_main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "Traceback"))]
    assert (
        rc == 1
        and err == [err[0]]
        and err[0].startswith(f"error: no space left on device writing {target} (")
    )
    assert target.read_bytes() == b"previous"
