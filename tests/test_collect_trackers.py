"""`scalelab collect --from tensorboard|mlflow|wandb SOURCE --out DIR` (analysis/core/trackers.py).

Real sources only: a tiny run of the trainer with `tracker=tensorboard` (and one with
`tracker=mlflow` against the server below) read back against its own summary.json; foreign
TensorBoard runs written with TensorBoard's own TF-free writer (`tensorboard.summary.Writer`, the
HParams through `tensorboard.plugins.hparams.summary_v2.hparams_pb` and its EventFileWriter) and
with tensorboardX's `add_hparams` layout; a real `mlflow server` on SQLite (started and stopped
here) holding runs logged through MlflowClient; W&B exports in the UI's and the API's layouts.
Bad input is one `error:` line and exit 2. Under CI=true a missing tracking package fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.cli import main
from analysis.core import trackers
from analysis.core.runs import flatten

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.seq_len=32",
    "train.batch_size=4",
    "train.steps=40",
    "train.eval_every=20",
]


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def need(module: str):
    """Import `module`, or skip (fail under CI=true: the tracking tests must not turn into skips)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        msg = f"{module} is not installed ({e}): pip install -e '.[test]'"
        if _ci():
            pytest.fail(msg + " (CI=true: a missing package fails)", pytrace=False)
        pytest.skip(msg)


def train(run_dir: Path, *overrides: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    p = subprocess.run(
        [sys.executable, "-m", "experiments.train", *TINY, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


def collect(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    """`scalelab collect ...` in this process: (exit code, stdout lines, stderr lines)."""
    rc = main(["collect", *argv])
    cap = capsys.readouterr()
    return rc, cap.out.splitlines(), cap.err.splitlines()


def one_error(rc: int, err: list[str]) -> str:
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# ---- TensorBoard: the trainer's own run --------------------------------------------------------


@pytest.fixture(scope="module")
def tb_run(tmp_path_factory):
    need("tensorboard")
    need("tensorboardX")
    run_dir = tmp_path_factory.mktemp("tb") / "run"
    summary = train(run_dir, "tracker=tensorboard")
    return run_dir, summary


def test_the_trainers_tensorboard_run_reads_back_as_its_summary(tb_run, tmp_path, capsys):
    run_dir, summary = tb_run
    out = tmp_path / "col" / "nested"
    rc, lines, err = collect(
        capsys, "--from", "tensorboard", str(run_dir), "--out", str(out), "--curves", str(tmp_path / "c.csv")
    )
    assert rc == 0 and err == [], err
    assert lines[0].startswith(f"wrote {out / 'runs.csv'}: 1 run(s)")
    t = pd.read_csv(out / "runs.csv")
    assert len(t) == 1 and list(t.columns[:4]) == ["N", "D", "C", "loss"]
    row = t.iloc[0]
    assert rel(row["final_eval_loss"], summary["final_eval_loss"]) < 1e-4
    assert row["loss"] == row["final_eval_loss"]
    assert rel(row["final_train_loss"], summary["final_train_loss"]) < 1e-4
    assert (row["N"], row["D"], row["C"]) == (summary["n_params"], summary["tokens"], summary["flops"])
    assert row["run"] == "run" and row["status"] == "completed"
    config = flatten(yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text()))
    for key in ("model.d_model", "model.n_layers", "model.n_heads", "train.steps", "optim.lr"):
        assert row[key] == config[key], key
    # the same columns as `collect` of the run directory, plus the last lr / grad_norm / step time
    rc, _, _ = collect(capsys, str(run_dir), "--out", str(tmp_path / "sweep"), "--no-cache")
    swept = pd.read_csv(tmp_path / "sweep" / "runs.csv")
    assert [c for c in t.columns if c in swept.columns] == list(swept.columns)
    assert set(t.columns) - set(swept.columns) == {"lr", "grad_norm", "step_time_s"}
    # the curves: every eval of metrics.jsonl, under its metrics.jsonl names
    curves = pd.read_csv(tmp_path / "c.csv")
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval_loss"] for r in logged if "eval_loss" in r}
    got = curves.dropna(subset=["eval_loss"]).set_index("step")["eval_loss"]
    assert list(got.index) == [20, 40] and sorted(evals) == [20, 40]
    assert all(rel(got[s], evals[s]) < 1e-6 for s in evals)
    assert {"loss", "lr", "tokens", "flops"} <= set(curves.columns) and len(curves) == len(logged)


def test_the_console_command_reads_the_trainers_run(tb_run, tmp_path):
    """What the workbench check runs: the `scalelab` console script, --out a new directory."""
    run_dir, summary = tb_run
    exe = shutil.which("scalelab") or pytest.fail("no `scalelab` command on PATH ([project.scripts])")
    p = subprocess.run(
        [exe, "collect", "--from", "tensorboard", str(run_dir), "--out", str(tmp_path / "col")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    t = pd.read_csv(tmp_path / "col" / "runs.csv")
    assert len(t) == 1 and rel(t["final_eval_loss"].iloc[0], summary["final_eval_loss"]) < 1e-4


def test_event_files_alone_keep_config_and_status_from_the_trackers_text(tb_run, tmp_path, capsys):
    """Only <run>/tensorboard copied elsewhere: the config is the `config` text the tracker logs,
    the status its `status` text, D and C the last progress/tokens and progress/flops."""
    run_dir, summary = tb_run
    shutil.copytree(run_dir / "tensorboard", tmp_path / "copied" / "r1")
    rc, _, err = collect(capsys, "--from", "tensorboard", str(tmp_path / "copied"), "--out", str(tmp_path))
    assert rc == 0 and err == []
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert row["run"] == "copied/r1" and row["status"] == "completed"
    assert row["model.d_model"] == 32 and row["train.steps"] == 40 and row["optim.lr"] == pytest.approx(3e-3)
    assert (row["D"], row["C"]) == (summary["tokens"], summary["flops"]) and "N" not in row
    assert rel(row["loss"], summary["final_eval_loss"]) < 1e-6


# ---- TensorBoard: foreign runs -------------------------------------------------------------------


def write_foreign(root: Path, name: str, lr: float, d_model: int, final: float) -> None:
    """A run written with TensorBoard's own writer (no TensorFlow): scalars and HParams."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary import Writer
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = Writer(str(root / name))
    for step in range(0, 101, 25):
        w.add_scalar("val/loss", final + (100 - step) / 100, step)
        w.add_scalar("train_loss", final + 0.5 + (100 - step) / 100, step)
    w.close()
    ev = EventFileWriter(str(root / name))
    pb = hp.hparams_pb({"optim.lr": lr, "model.d_model": d_model, "act": "gelu", "tied": True})
    ev.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=pb))
    ev.close()


def test_foreign_tensorboard_runs_with_hparams(tmp_path, capsys):
    need("tensorboard")
    write_foreign(tmp_path / "logs", "a", 1e-3, 64, 2.5)
    write_foreign(tmp_path / "logs", "b", 3e-3, 128, 2.25)
    rc, _, err = collect(
        capsys,
        *("--from", "tensorboard", str(tmp_path / "logs"), "--out", str(tmp_path / "o")),
        *("--curves", str(tmp_path / "c.csv")),
    )
    assert rc == 0 and err == [], err
    t = pd.read_csv(tmp_path / "o" / "runs.csv").set_index("run")
    assert list(t.index) == ["logs/a", "logs/b"]
    assert list(t["final_eval_loss"]) == [2.5, 2.25] and list(t["loss"]) == [2.5, 2.25]
    assert list(t["final_train_loss"]) == [3.0, 2.75]
    assert list(t["optim.lr"]) == pytest.approx([1e-3, 3e-3]) and list(t["model.d_model"]) == [64, 128]
    assert list(t["act"]) == ["gelu", "gelu"] and list(t["status"]) == ["unknown", "unknown"]
    curves = pd.read_csv(tmp_path / "c.csv")
    a = curves[curves["run"] == "logs/a"]
    assert list(a["step"]) == [0, 25, 50, 75, 100] and list(a["eval_loss"]) == pytest.approx(
        [3.5, 3.25, 3.0, 2.75, 2.5]
    )


def test_tensorboardx_add_hparams_layout_is_one_run(tmp_path, capsys):
    """tensorboardX / PyTorch `add_hparams` put the HParams in a child directory of the run."""
    need("tensorboard")
    SummaryWriter = need("tensorboardX").SummaryWriter
    w = SummaryWriter(str(tmp_path / "tbx" / "run0"))
    for step in range(5):
        w.add_scalar("eval/loss", 4.0 - step / 10, step)
    w.add_hparams({"optim.lr": 0.02, "model.n_layers": 4}, {"hparam/best": 3.55}, name="hp")
    w.close()
    rc, _, err = collect(capsys, "--from", "tensorboard", str(tmp_path / "tbx"), "--out", str(tmp_path))
    assert rc == 0 and err == [], err
    t = pd.read_csv(tmp_path / "runs.csv")
    assert list(t["run"]) == ["tbx/run0"] and t["optim.lr"].iloc[0] == pytest.approx(0.02)
    assert t["model.n_layers"].iloc[0] == 4 and t["final_eval_loss"].iloc[0] == pytest.approx(3.6)
    assert t["hparam/best"].iloc[0] == pytest.approx(3.55)


# ---- MLflow: a real tracking server ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on SQLite, started here and stopped after the module."""
    need("mlflow")
    exe = shutil.which("mlflow") or pytest.fail("no `mlflow` command (the full mlflow package)")
    d = tmp_path_factory.mktemp("mlflow")
    db, port = d / "mlflow.db", free_port()
    log = open(d / "server.log", "w")
    proc = subprocess.Popen(
        [exe, "server", "--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)]
        + ["--workers", "1", "--default-artifact-root", str(d / "artifacts")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its workers in one process group, stopped together
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(d / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url, db
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:  # uvicorn's graceful shutdown waits for the clients' keep-alive connections
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def mlflow_runs(mlflow_server):
    """Three runs of experiment `ladder` (one failed) and one of `other`, logged with MlflowClient."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    url, _ = mlflow_server
    client = MlflowClient(tracking_uri=url)
    ladder, other = client.create_experiment("ladder"), client.create_experiment("other")
    truth = {}
    for name, exp, lr, d_model, final, end in (
        ("small", ladder, 1e-3, 64, 3.25, "FINISHED"),
        ("big", ladder, 5e-4, 256, 2.75, "FINISHED"),
        ("broken", ladder, 1e-2, 64, 9.0, "FAILED"),
        ("elsewhere", other, 1e-3, 32, 4.0, "FINISHED"),
    ):
        run_id = client.create_run(exp, run_name=name).info.run_id
        params = {"optim.lr": lr, "model.d_model": d_model, "model.tie": True, "data.path": None}
        params["optim.name"] = "adamw"
        # steps logged out of order: the table's value is the one at the highest step
        steps = [0, 200, 100, 300]
        metrics = [Metric("eval/loss", final + (300 - s) / 100, 0, s) for s in steps]
        metrics += [Metric("train/loss", final + 0.25 + (300 - s) / 100, 0, s) for s in steps]
        metrics += [Metric("progress/tokens", 1000.0 * s, 0, s) for s in steps]
        client.log_batch(run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
        client.set_terminated(run_id, end)
        truth[name] = dict(run_id=run_id, lr=lr, d_model=d_model, final=final)
    return truth


def test_mlflow_server_runs_read_back(mlflow_server, mlflow_runs, tmp_path, capsys):
    url, _ = mlflow_server
    rc, _, err = collect(
        capsys,
        *("--from", "mlflow", url, "--experiment", "ladder", "--out", str(tmp_path)),
        *("--curves", str(tmp_path / "c.csv")),
    )
    assert rc == 0, err
    assert err == ["warning: skipped 1 run(s) that did not complete: broken (failed)"]
    t = pd.read_csv(tmp_path / "runs.csv").set_index("run").sort_index()
    assert list(t.index) == ["big", "small"] and set(t["experiment"]) == {"ladder"}
    for name in ("big", "small"):
        r, truth = t.loc[name], mlflow_runs[name]
        assert r["final_eval_loss"] == truth["final"] and r["loss"] == truth["final"]
        assert r["final_train_loss"] == truth["final"] + 0.25
        assert r["optim.lr"] == truth["lr"] and r["model.d_model"] == truth["d_model"]
        assert r["D"] == 300_000 and r["run_id"] == truth["run_id"] and r["status"] == "completed"
    assert t["model.d_model"].dtype.kind == "i" and t["model.tie"].dtype == bool
    assert t["data.path"].isna().all() and list(t["optim.name"]) == ["adamw", "adamw"]
    curves = pd.read_csv(tmp_path / "c.csv")
    big = curves[curves["run"] == "big"]
    assert list(big["step"]) == [0, 100, 200, 300] and list(big["eval_loss"]) == [5.75, 4.75, 3.75, 2.75]
    # every experiment, the failed run kept with its status
    rc, _, err = collect(
        capsys, "--from", "mlflow", url, "--out", str(tmp_path / "all"), "--include-unfinished"
    )
    t = pd.read_csv(tmp_path / "all" / "runs.csv").set_index("run")
    assert rc == 0 and sorted(t.index) == ["big", "broken", "elsewhere", "small"]
    assert t.loc["broken", "status"] == "failed" and t.loc["elsewhere", "experiment"] == "other"


def test_mlflow_sqlite_store_reads_the_same_runs(mlflow_server, mlflow_runs, tmp_path, capsys):
    _, db = mlflow_server
    for source in (f"sqlite:///{db}", str(db)):
        rc, _, err = collect(
            capsys, "--from", "mlflow", source, "--experiment", "other", "--out", str(tmp_path)
        )
        assert rc == 0, err
        t = pd.read_csv(tmp_path / "runs.csv")
        assert list(t["run"]) == ["elsewhere"] and t["final_eval_loss"].iloc[0] == 4.0


@pytest.mark.slow  # a training run (about 10 s on an idle 2-core machine)
def test_the_trainers_mlflow_run_reads_back(mlflow_server, tmp_path, capsys):
    """tracker=mlflow against the server: N, D, C from its final/* metrics, config from params."""
    url, _ = mlflow_server
    summary = train(
        tmp_path / "mlrun", "tracker=mlflow", f"tracker.tracking_uri={url}", "tracker.project=trainer"
    )
    rc, _, err = collect(capsys, "--from", "mlflow", url, "--experiment", "trainer", "--out", str(tmp_path))
    assert rc == 0 and err == [], err
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert row["run"] == "mlrun" and row["status"] == "completed"
    assert row["final_eval_loss"] == summary["final_eval_loss"] and row["loss"] == summary["final_eval_loss"]
    assert (row["N"], row["D"], row["C"]) == (summary["n_params"], summary["tokens"], summary["flops"])
    assert row["model.d_model"] == 32 and row["train.batch_size"] == 4


def test_mlflow_file_store(tmp_path, capsys, monkeypatch):
    """A local `mlruns` store (the trainer's default without a tracking URI), by its path."""
    need("mlflow")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run_id = client.create_run(client.create_experiment("fs"), run_name="local").info.run_id
    metrics = [Metric("val_loss", 3.0 - s / 8, 0, s) for s in range(4)]
    client.log_batch(run_id, metrics=metrics, params=[Param("optim.lr", "0.1"), Param("act", "relu")])
    client.set_terminated(run_id, "FINISHED")
    rc, _, err = collect(capsys, "--from", "mlflow", str(tmp_path / "mlruns"), "--out", str(tmp_path))
    assert rc == 0 and err == [], err
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert row["run"] == "local" and row["loss"] == 2.625 and row["optim.lr"] == 0.1 and row["act"] == "relu"


def test_an_unreachable_mlflow_server_is_one_error_line(tmp_path, capsys):
    need("mlflow")
    t0 = time.monotonic()
    rc, _, err = collect(
        capsys, "--from", "mlflow", f"http://127.0.0.1:{free_port()}", "--out", str(tmp_path)
    )
    assert "did not answer" in one_error(rc, err) and time.monotonic() - t0 < 60
    assert not (tmp_path / "runs.csv").exists()


# ---- W&B exports ---------------------------------------------------------------------------------

UI_ROWS = [  # the runs table's Export CSV: Name, State, the table's columns, config, summary
    {"Name": "w-small", "State": "finished", "Notes": "-", "User": "me", "Tags": "ladder", "Runtime": 61,
     "Sweep": "", "optim.lr": 0.001, "model.d_model": 64, "eval/loss": 3.5, "train/loss": 3.75,
     "n_params": 1.0e6, "tokens": 2.0e7, "flops": 1.2e14, "_step": 400, "_runtime": 61.2,
     "task/py/loss": 2.5, "task/py/accuracy": 0.25},
    {"Name": "w-big", "State": "finished", "Notes": "-", "User": "me", "Tags": "ladder", "Runtime": 120,
     "Sweep": "", "optim.lr": 0.0005, "model.d_model": 128, "eval/loss": 3.0, "train/loss": 3.25,
     "n_params": 4.0e6, "tokens": 8.0e7, "flops": 1.92e15, "_step": 800, "_runtime": 119.0,
     "task/py/loss": 2.0, "task/py/accuracy": 0.5},
    {"Name": "w-crash", "State": "crashed", "Notes": "-", "User": "me", "Tags": "", "Runtime": 5,
     "Sweep": "", "optim.lr": 0.01, "model.d_model": 64, "eval/loss": None, "train/loss": 7.0,
     "n_params": 1.0e6, "tokens": 1.0e6, "flops": 6e12, "_step": 20, "_runtime": 5.0},
]  # fmt: skip


def test_wandb_ui_csv_export(tmp_path, capsys):
    pd.DataFrame(UI_ROWS).to_csv(tmp_path / "export.csv", index=False)
    rc, _, err = collect(
        capsys,
        *("--from", "wandb", str(tmp_path / "export.csv"), "--out", str(tmp_path / "o")),
        *("--tasks", str(tmp_path / "ladder.csv")),
    )
    assert rc == 0 and err == ["warning: skipped 1 run(s) that did not complete: w-crash (failed)"], err
    t = pd.read_csv(tmp_path / "o" / "runs.csv").set_index("run")
    assert list(t.columns[:4]) == ["N", "D", "C", "loss"] and list(t.index) == ["w-small", "w-big"]
    assert list(t["loss"]) == [3.5, 3.0] and list(t["final_train_loss"]) == [3.75, 3.25]
    assert list(t["N"]) == [1e6, 4e6] and list(t["D"]) == [2e7, 8e7] and list(t["C"]) == [1.2e14, 1.92e15]
    assert list(t["optim.lr"]) == [1e-3, 5e-4] and list(t["model.d_model"]) == [64, 128]
    assert list(t["user"]) == ["me", "me"] and list(t["status"]) == ["completed", "completed"]
    assert not any(c.startswith("_") for c in t.columns)
    # the summary's task metrics: fit-task's ladder, one row per run and task
    ladder = pd.read_csv(tmp_path / "ladder.csv")
    assert list(ladder["run"]) == ["w-small", "w-big"] and list(ladder["task"]) == ["py", "py"]
    assert list(ladder["task_loss"]) == [2.5, 2.0] and list(ladder["accuracy"]) == [0.25, 0.5]
    assert list(ladder["N"]) == [1e6, 4e6] and list(ladder["D"]) == [2e7, 8e7]


def test_wandb_api_json_export_with_history(tmp_path, capsys):
    """The public API's listing as JSON (nested config, {"value": ...} entries, W&B's own keys)
    and a JSON Lines history (`run.history()` rows with the run's name)."""
    runs = [
        {
            "name": f"api-{i}",
            "id": f"id{i}",
            "state": "finished",
            "config": {
                "optim": {"lr": lr},
                "model": {"d_model": {"value": d, "desc": None}},
                "_wandb": {"x": 1},
            },
            "summary": {
                "eval/loss": final,
                "final_eval_loss": final,
                "n_params": 1e6 * d / 64,
                "status": "completed",
                "_step": 3,
                "_wandb": {"runtime": 9},
                "hist": {"_type": "histogram"},
            },
        }  # fmt: skip
        for i, (lr, d, final) in enumerate(((1e-3, 64, 3.5), (1e-3, 128, 3.125)))
    ]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    history = [
        {"name": f"api-{i}", "_step": k, "step": 10 * k, "eval/loss": final + (3 - k) / 4, "_runtime": k}
        for i, final in enumerate((3.5, 3.125))
        for k in range(4)
    ]
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(h) for h in history))
    rc, _, err = collect(
        capsys,
        *("--from", "wandb", str(tmp_path / "runs.json"), "--history", str(tmp_path / "history.jsonl")),
        *("--out", str(tmp_path / "o"), "--curves", str(tmp_path / "c.csv")),
    )
    assert rc == 0 and err == [], err
    t = pd.read_csv(tmp_path / "o" / "runs.csv").set_index("run")
    assert list(t["loss"]) == [3.5, 3.125] and list(t["model.d_model"]) == [64, 128]
    assert (
        list(t["optim.lr"]) == [1e-3, 1e-3]
        and list(t["N"]) == [1e6, 2e6]
        and list(t["run_id"]) == ["id0", "id1"]
    )
    assert not any("_wandb" in c or c == "hist" for c in t.columns)
    c = pd.read_csv(tmp_path / "c.csv")
    assert list(c[c["run"] == "api-1"]["step"]) == [0, 10, 20, 30]
    assert list(c[c["run"] == "api-1"]["eval_loss"]) == [3.875, 3.625, 3.375, 3.125]
    # the same listing as the API snippet's CSV (pandas writes the dicts as Python literals),
    # with a chart panel's wide history export
    listing = {k: [r[k] for r in runs] for k in ("name", "config", "summary")}
    pd.DataFrame(listing).to_csv(tmp_path / "api.csv", index=False)
    wide = pd.DataFrame(
        {"Step": [0, 10], "api-0 - eval/loss": [4.0, 3.5], "api-0 - eval/loss__MIN": [4.0, 3.5]}
    )
    wide.to_csv(tmp_path / "panel.csv", index=False)
    rc, _, err = collect(
        capsys,
        *("--from", "wandb", str(tmp_path / "api.csv"), "--history", str(tmp_path / "panel.csv")),
        *("--out", str(tmp_path / "p"), "--curves", str(tmp_path / "pc.csv")),
    )
    assert rc == 0 and err == [], err
    t = pd.read_csv(tmp_path / "p" / "runs.csv")
    assert list(t["loss"]) == [3.5, 3.125] and list(t["model.d_model"]) == [64, 128]
    pc = pd.read_csv(tmp_path / "pc.csv")
    assert list(pc["run"]) == ["api-0", "api-0"] and list(pc["eval_loss"]) == [4.0, 3.5]


def test_loss_metric_names_a_foreign_eval_loss(tmp_path, capsys):
    rows = [{"Name": "r", "State": "finished", "lr": 0.1, "heldout/ce": 2.5, "loss": 3.0}]
    pd.DataFrame(rows).to_csv(tmp_path / "e.csv", index=False)
    rc, _, err = collect(capsys, "--from", "wandb", str(tmp_path / "e.csv"), "--out", str(tmp_path))
    assert "looked for eval/loss" in one_error(rc, err) and "heldout/ce" in err[0]
    rc, _, err = collect(
        capsys,
        "--from",
        "wandb",
        str(tmp_path / "e.csv"),
        "--out",
        str(tmp_path),
        "--loss-metric",
        "heldout/ce",
    )
    t = pd.read_csv(tmp_path / "runs.csv")
    assert rc == 0 and t["loss"].iloc[0] == 2.5 and t["final_train_loss"].iloc[0] == 3.0


# ---- --out, bad input, the package boundary ------------------------------------------------------


def test_out_dir_and_the_deprecated_file_form(tb_run, tmp_path, capsys):
    run_dir, summary = tb_run
    rc, _, err = collect(capsys, str(run_dir), "--out", str(tmp_path / "a" / "b"), "--no-cache")
    assert rc == 0 and err == [] and len(pd.read_csv(tmp_path / "a" / "b" / "runs.csv")) == 1
    for name in ("t.csv", "t.parquet"):
        rc, lines, err = collect(capsys, str(run_dir), "--out", str(tmp_path / name), "--no-cache")
        assert rc == 0 and err == ["note: --out FILE is deprecated: --out DIR writes DIR/runs.csv"]
        assert lines[0].startswith(f"wrote {tmp_path / name}: 1 run(s)")
    assert pd.read_parquet(tmp_path / "t.parquet")["loss"].iloc[0] == summary["final_eval_loss"]
    (tmp_path / "file").write_text("x")
    assert "is a file" in one_error(*collect(capsys, str(run_dir), "--out", str(tmp_path / "file"))[::2])


def bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "empty").mkdir()
    (tmp / "noname.csv").write_text("State,optim.lr,eval/loss\nfinished,0.1,3.0\n")
    (tmp / "notjson.json").write_text("{not json")
    (tmp / "ok.csv").write_text("Name,State,eval/loss\nr,finished,3.0\n")
    (tmp / "nostep.csv").write_text("name,eval/loss\nr,3.0\n")
    (tmp / "mlruns").mkdir()
    return [
        (["--from", "tensorboard", str(tmp / "empty")], "no TensorBoard event files"),
        (["--from", "tensorboard", str(tmp / "missing")], "not found"),
        (["--from", "mlflow", f"sqlite:///{tmp / 'none.db'}"], "no MLflow database"),
        (["--from", "mlflow", str(tmp / "mlruns")], "not an MLflow file store"),
        (["--from", "wandb", str(tmp / "noname.csv")], "no run-name column"),
        (["--from", "wandb", str(tmp / "notjson.json")], "not JSON"),
        (["--from", "wandb", str(tmp / "ok.csv"), "--history", str(tmp / "nostep.csv")], "step column"),
        (["--from", "wandb", str(tmp / "ok.csv"), str(tmp / "ok.csv")], "reads one SOURCE"),
        (
            ["--from", "tensorboard", str(tmp / "empty"), "--experiment", "x"],
            "--experiment is for --from mlflow",
        ),
        ([str(tmp / "empty"), "--loss-metric", "x"], "--loss-metric is for"),
    ]


def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys):
    for argv, says in bad_inputs(tmp_path):
        rc, _, err = collect(capsys, *argv, "--out", str(tmp_path / "out"))
        assert says in one_error(rc, err), (argv, err)
    assert not (tmp_path / "out").exists()
    p = subprocess.run(  # and as a command: no traceback
        [sys.executable, "-m", "analysis", "collect", "--from", "wandb", str(tmp_path / "noname.csv")]
        + ["--out", str(tmp_path / "o")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith("error:")


def test_a_missing_tracking_package_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    (tmp_path / "x.db").write_bytes(b"")
    for mod in ("mlflow", "mlflow.entities", "mlflow.tracking"):
        monkeypatch.setitem(sys.modules, mod, None)  # import mlflow -> ImportError
    rc, _, err = collect(capsys, "--from", "mlflow", str(tmp_path / "x.db"), "--out", str(tmp_path))
    assert "pip install -e '.[tracking]'" in one_error(rc, err)


def test_collect_imports_no_tracking_package_until_it_reads_one():
    code = (
        "import sys, analysis.cli as c; c.build_parser('collect'); import analysis.core.trackers; "
        "print(sorted(m for m in ('mlflow', 'tensorboard', 'tensorboardX', 'wandb') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


def test_tracker_names_are_the_trainers():
    from experiments.train.tracking import TRAIN_NAMES

    assert trackers.TRACKER_NAMES == {v: k for k, v in TRAIN_NAMES.items()}


def test_collect_help_is_short_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 80 and text.count("scalelab collect ") >= 2
