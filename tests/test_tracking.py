"""Experiment tracking (`tracker=tensorboard|wandb|mlflow`) and step profiles (`train.profile_steps`).

The dashboards must show what metrics.jsonl holds (same steps, same values, resumed runs without
the steps an interrupted session logged twice), sweeps group their runs, and a tracker that fails
costs one warning line, never the run. TensorBoard files are read back with a small TFRecord
reader over tensorboardX's own protobufs (no tensorboard package needed), and cross-checked with
tensorboard's EventAccumulator where it is installed.
"""

import io
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.train import tracking
from experiments.train.metrics import MetricsLog
from experiments.train.tracking import RL_NAMES, TRAIN_NAMES, Tracker, TrackerConfig, make_tracker, sweep_dir
from models.base.errors import ConfigError
from models.base.rundir import RunSummary, read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.seq_len=32",
    "train.batch_size=8",
    "train.eval_tokens=512",
    "train.progress_every_s=0",
]


def cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def read_tb_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from every event file under `logdir`, in write order. A
    SessionLog START at step s (a resumed run's purge_step) drops the steps >= s before it, as
    TensorBoard does."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    files = sorted(Path(logdir).rglob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns)
    for f in files:
        data, pos = f.read_bytes(), 0
        while pos + 12 <= len(data):  # record: u64 length, u32 crc, data, u32 crc
            (n,) = struct.unpack("<Q", data[pos : pos + 8])
            ev = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + n])
            pos += 12 + n + 4
            if ev.HasField("session_log") and ev.session_log.status == event_pb2.SessionLog.START:
                out = {tag: [(s, v) for s, v in pts if s < ev.step] for tag, pts in out.items()}
            for v in ev.summary.value:
                if v.HasField("simple_value"):
                    out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def same_points(a, b) -> bool:
    """Same steps, and values equal to float32 precision (event files hold float32)."""
    return [s for s, _ in a] == [s for s, _ in b] and [v for _, v in a] == pytest.approx(
        [v for _, v in b], rel=1e-6
    )


def records(steps, scale=1.0, eval_at=()):
    return [
        {
            "step": n,
            "tokens": 256 * n,
            "loss": scale * (5.0 - 0.1 * n),
            "lr": 1e-3 * n,
            "grad_norm": 0.5,
            "tokens_per_s": 1000.0 + n,
            "mfu": float("nan"),
            "step_time_s": 0.01,
            **({"eval_loss": scale * 4.0, "task/py_identifier/accuracy": 0.25} if n in eval_at else {}),
        }
        for n in steps
    ]


# ---- the name map ---------------------------------------------------------------------------------


def test_scalars_are_renamed_and_only_finite_numbers_kept():
    t = Tracker(TrackerConfig(backend="tensorboard"), Path("unused"), TRAIN_NAMES)
    got = t.scalars(
        {
            "step": 7,
            "loss": 2.5,
            "eval_loss": 2.0,
            "lr": 1e-3,
            "grad_norm": 0.1,
            "tokens_per_s": 1e4,
            "mfu": 0.3,
            "task/py_continuation/loss": 1.2,
            "task/py_continuation/accuracy": math.nan,
            "diverged": True,
            "note": "x",
            "new_metric": None,
        }
    )
    assert got == {
        "train/loss": 2.5,
        "eval/loss": 2.0,
        "optim/lr": 1e-3,
        "optim/grad_norm": 0.1,
        "perf/tokens_per_s": 1e4,
        "perf/mfu": 0.3,
        "task/py_continuation/loss": 1.2,
    }
    rl = Tracker(TrackerConfig(backend="tensorboard"), Path("unused"), RL_NAMES)
    assert rl.scalars(
        {
            "step": 0,
            "pass_rate": 0.5,
            "pass_rate_by_difficulty": {"easy": 0.9, "hard": None},
            "kl": 0.01,
            "train_reward": None,
        }
    ) == {"eval/pass_rate": 0.5, "eval/pass_rate_by_difficulty/easy": 0.9, "eval/kl": 0.01}
    assert make_tracker(TrackerConfig(), Path("x"), TRAIN_NAMES) is None  # tracker=none
    assert make_tracker(TrackerConfig(backend="mlflow"), Path("x"), TRAIN_NAMES, enabled=False) is None


@pytest.mark.parametrize(
    "override,msg",
    [
        (
            {"backend": "neptune"},
            "tracker.backend must be one of none, tensorboard, wandb, mlflow (got 'neptune')",
        ),
        ({"mode": "sometimes"}, "tracker.mode must be one of online, offline, disabled or null"),
        ({"flush_every_s": 0}, "tracker.flush_every_s must be a positive number"),
        ({"tags": "a,b"}, "tracker.tags must be a list of strings"),
        ({"projekt": "x"}, "unknown tracker key(s) ['projekt']"),
    ],
)
def test_bad_tracker_config_is_one_line(override, msg):
    with pytest.raises(ConfigError) as e:
        TrackerConfig.from_mapping(override)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "steps,ok",
    [([2, 2], True), ([1, 6], True), ([4, 2], False), ([0, 2], False), ([5, 7], False), ([3], False)],
)
def test_profile_steps_must_lie_within_the_run(steps, ok):
    from experiments.train.config import resolve_config

    c = cfg(*TINY, "train.steps=6", f"train.profile_steps=[{','.join(map(str, steps))}]")
    if ok:
        assert resolve_config(c, n_devices=1).train.profile_steps == steps
        return
    with pytest.raises(ConfigError) as e:
        resolve_config(c, n_devices=1)
    assert str(e.value) == (
        "train.profile_steps must be [first, last] with 1 <= first <= last <= 6 "
        f"(the run's steps) (got {steps})"
    )


# ---- TensorBoard -------------------------------------------------------------------------------------


def test_tensorboard_mirrors_metrics_jsonl_and_a_resume_drops_the_replayed_steps(tmp_path):
    pytest.importorskip("tensorboardX")
    rd = tmp_path / "run"
    tb = TrackerConfig(backend="tensorboard")
    log = MetricsLog(rd / "metrics.jsonl", tracker=Tracker(tb, rd, TRAIN_NAMES, {"model": {"d_model": 32}}))
    log.reset()
    for r in records(range(1, 6), eval_at=(4,)):
        log.write(r)
    log.close()  # killed after step 5; its last checkpoint was step 3
    log.tracker.finish("failed")
    log = MetricsLog(rd / "metrics.jsonl", tracker=Tracker(tb, rd, TRAIN_NAMES))
    log.truncate_after(3)
    for r in records(range(4, 7), scale=2.0, eval_at=(6,)):
        log.write(r)
    log.finish("completed", RunSummary(final_eval_loss=8.0))
    want = read_metrics(rd / "metrics.jsonl")
    assert [r["step"] for r in want] == [1, 2, 3, 4, 5, 6]
    got = read_tb_scalars(rd / "tensorboard")
    for key, tag in TRAIN_NAMES.items():
        pts = [(r["step"], r[key]) for r in want if key in r and math.isfinite(r[key])]
        assert same_points(got.get(tag, []), pts), tag
    assert "perf/mfu" not in got  # NaN: not logged
    assert got["eval/loss"] == [(6, 8.0)]  # step 4's eval was replayed
    assert got["task/py_identifier/accuracy"] == [(6, 0.25)]
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return
    acc = EventAccumulator(str(rd / "tensorboard"))
    acc.Reload()
    assert same_points([(e.step, e.value) for e in acc.Scalars("train/loss")], got["train/loss"])


# ---- MLflow -------------------------------------------------------------------------------------------


def test_mlflow_groups_a_sweeps_runs_in_one_experiment_and_resumes_the_same_run(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    sweep = tmp_path / "isoflop_demo"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    ml = TrackerConfig(backend="mlflow", flush_every_s=3600)  # batched until flush / finish
    config = {"model": {"d_model": 32, "n_layers": 2}, "train": {"steps": 6}}
    for name, status in (("r1_abc", "completed"), ("r2_def", "diverged")):
        rd = sweep / name
        assert sweep_dir(rd) == sweep.resolve()
        t = Tracker(ml, rd, TRAIN_NAMES, config)
        t.start(0)
        for r in records(range(1, 4)):
            t.log(r)
        t.finish(status, RunSummary(final_eval_loss=3.5, tokens=768))
    t = Tracker(ml, sweep / "r1_abc", TRAIN_NAMES, config)  # the first run, resumed
    t.start(3)
    t.log(records([4])[0])
    t.finish("completed")
    t = Tracker(ml, sweep / "r3_ghi", TRAIN_NAMES, config)  # raised before its finish()
    t.log(records([1])[0])
    tracking._finish_open()  # what exit (atexit) does

    client = MlflowClient(tracking_uri=(sweep / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("isoflop_demo")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(runs) == ["r1_abc", "r2_def", "r3_ghi"]
    r1, r2 = runs["r1_abc"], runs["r2_def"]
    assert (r1.info.status, r2.info.status, runs["r3_ghi"].info.status) == ("FINISHED", "FAILED", "FAILED")
    assert r1.data.params["model.d_model"] == "32" and r1.data.tags["scalelab.sweep"] == "isoflop_demo"
    hist = client.get_metric_history(r1.info.run_id, "train/loss")
    assert same_points(sorted((m.step, m.value) for m in hist), [(1, 4.9), (2, 4.8), (3, 4.7), (4, 4.6)])
    assert r2.data.metrics["final/eval_loss"] == 3.5 and r2.data.tags["scalelab.status"] == "diverged"


# ---- W&B --------------------------------------------------------------------------------------------


def test_wandb_offline_run_is_grouped_by_sweep_and_resumed_by_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sweep = tmp_path / "my_sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    rd = sweep / "r1_abc"
    err = io.StringIO()
    t = Tracker(TrackerConfig(backend="wandb"), rd, TRAIN_NAMES, {"model": {"d_model": 32}}, stream=err)
    t.start(0)
    assert t.active, err.getvalue()
    for r in records(range(1, 4)):
        t.log(r)
    t.finish("completed", RunSummary(final_eval_loss=3.5))
    assert err.getvalue() == ""
    run_id = (rd / "tracker.json").read_text()
    files = list((rd / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and files[0].name.split("-")[-1].removesuffix(".wandb") in run_id
    for _ in range(100):  # W&B's service process ends writing the file just after finish()
        data = files[0].read_bytes()
        if b"my_sweep" in data and b"train/loss" in data:  # the group and the scalars
            break
        time.sleep(0.1)
    assert b"my_sweep" in data and b"train/loss" in data
    t2 = Tracker(TrackerConfig(backend="wandb"), rd, TRAIN_NAMES, stream=err)
    t2.start(3)
    t2.finish("completed")
    assert (rd / "tracker.json").read_text() == run_id and err.getvalue() == ""


# ---- failures only warn -------------------------------------------------------------------------------


def test_an_unreachable_wandb_server_warns_once_and_tracking_goes_off(tmp_path):
    """In a fresh process: W&B keeps its settings (mode, server) per process once set up."""
    pytest.importorskip("wandb")
    script = f"""
import time
from pathlib import Path
from experiments.train.metrics import MetricsLog
from experiments.train.tracking import TRAIN_NAMES, Tracker, TrackerConfig
log = MetricsLog(Path({str(tmp_path)!r}) / "metrics.jsonl", tracker=Tracker(
    TrackerConfig(backend="wandb", init_timeout_s=2), Path({str(tmp_path)!r}), TRAIN_NAMES))
t0 = time.monotonic()
log.reset()
for n in range(1, 4):
    log.write({{"step": n, "loss": 1.0}})
log.finish("completed")
print(f"took {{time.monotonic() - t0:.1f}}s")
"""
    env = dict(
        os.environ, WANDB_MODE="online", WANDB_API_KEY="x" * 40, WANDB_BASE_URL="http://127.0.0.1:9"
    )  # nothing listens on port 9
    env.pop("WANDB_SILENT", None)
    p = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: tracker wandb failed while starting"), p.stderr
    assert "metrics.jsonl has every record" in lines[0]
    assert float(p.stdout.split("took ")[1].rstrip("s\n")) < 20
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_a_backend_that_raises_or_is_missing_costs_one_warning_line(tmp_path, monkeypatch):
    class Flaky:
        calls = 0

        def log(self, step, scalars):
            Flaky.calls += 1
            raise OSError("disk full\nsecond line")

        def flush(self):
            raise OSError("still full")

        def finish(self, status, final):
            pass

    monkeypatch.setattr(tracking, "_open_backend", lambda *a: Flaky())
    err = io.StringIO()
    log = MetricsLog(
        tmp_path / "metrics.jsonl",
        tracker=Tracker(TrackerConfig(backend="tensorboard"), tmp_path, TRAIN_NAMES, stream=err),
    )
    for r in records(range(1, 5)):
        log.write(r)
    log.flush()
    log.finish("completed")
    assert Flaky.calls == 1 and [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert err.getvalue() == (
        "warning: tracker tensorboard failed while logging: OSError: disk full second "
        "line; tracking is off for this run, metrics.jsonl has every record\n"
    )
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # not installed
    err = io.StringIO()
    t = Tracker(TrackerConfig(backend="tensorboard"), tmp_path, TRAIN_NAMES, stream=err)
    t.log(records([1])[0])
    assert err.getvalue() == (
        "warning: tracker tensorboard failed while starting: tensorboardX is not installed "
        "(pip install 'scalelab[tracking]'); tracking is off for this run, metrics.jsonl "
        "has every record\n"
    )


# ---- end to end: a training run with TensorBoard and a profile -----------------------------------------


def test_training_run_writes_tensorboard_scalars_and_a_step_profile(tmp_path, capsys):
    pytest.importorskip("tensorboardX")
    from experiments.train.loop import run

    rd = tmp_path / "run"
    s = run(
        cfg(
            *TINY,
            "train.steps=6",
            "train.eval_every=3",
            "tracker=tensorboard",
            "train.profile_steps=[2,3]",
            "eval.tasks=[py_continuation]",
            "eval.examples=4",
        ),
        rd,
    )
    assert s.status == "completed"
    recs = read_metrics(rd / "metrics.jsonl")
    got = read_tb_scalars(rd / "tensorboard")
    assert {
        "train/loss",
        "eval/loss",
        "perf/tokens_per_s",
        "perf/mfu",
        "optim/lr",
        "optim/grad_norm",
        "task/py_continuation/loss",
        "task/py_continuation/accuracy",
    } <= set(got)
    assert same_points(got["train/loss"], [(r["step"], r["loss"]) for r in recs])
    assert same_points(got["eval/loss"], [(3, recs[2]["eval_loss"]), (6, s.final_eval_loss)])
    xplanes = list((rd / "profile").rglob("*.xplane.pb"))
    assert len(xplanes) == 1 and list((rd / "profile").rglob("*trace.json.gz"))
    assert "profile of steps 2-3 written to" in capsys.readouterr().out
    import jax

    names = {
        e.name
        for plane in jax.profiler.ProfileData.from_file(str(xplanes[0])).planes
        for line in plane.lines
        for e in line.events
    }
    assert "train" in names  # the step annotations
