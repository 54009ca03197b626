"""When the disk fills, on a real full filesystem: small tmpfs mounts (root only; anywhere else
the module skips with one line). A training run whose first checkpoint does not fit ends with
one line and no traceback, `failed` with the reason, metrics readable; after the space is
freed the relaunch resumes and ends exactly where an uninterrupted run ends. The report on a
full disk ends with one `error:` line and leaves no partial file. A sweep planned into a
filesystem smaller than its checkpoint footprint warns at launch and states the footprint in
sweep_plan.json. (The injected-ENOSPC tests of every write path: tests/test_disk_full.py.)"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_disk_full import _cfg

from analysis.cli import main as analysis_main
from experiments import rundir as exp_rundir
from experiments.train.loop import run
from models.base.diskspace import disk_full_summary
from models.base.rundir import RunDir, RunStatus, read_metrics

REPO = Path(__file__).resolve().parents[1]


def _mount(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if p.returncode != 0:
        pytest.skip(
            f"needs root to mount a small tmpfs (mount -t tmpfs): {(p.stderr or p.stdout).strip()[:120]}"
        )


@pytest.fixture
def small_fs(tmp_path):
    """`mount(name, size)` -> a fresh tmpfs of `size` under tmp_path; all unmounted after."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        _mount(path, size)
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_training_and_report_on_a_full_tmpfs(tmp_path, small_fs, capsys, caplog):
    cfg = _cfg()
    disk = small_fs("m", "128k")  # a checkpoint of this run takes ~188 KB
    out = small_fs("r", "64k") / "rep"
    ref = run(cfg, tmp_path / "ref")  # uninterrupted, on the ordinary disk
    run_dir = disk / "run"
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit) as e:
        exp_rundir.run_guarded(run, cfg, run_dir, multirun=False)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert e.value.code == 1
    assert len(err) == 1 and "Traceback" not in err[0], err  # one line: no Orbax thread tracebacks
    assert err[0].startswith(
        f"error: no space left on device writing the checkpoint of step 10 in {run_dir / 'checkpoints'} ("
    )
    assert err[0].endswith("free space and relaunch: the run resumes from step 0")
    assert not [r for r in caplog.records if r.name == "absl"]
    s = RunDir(run_dir).read_summary()
    assert s.status == RunStatus.FAILED and disk_full_summary(s.error)
    assert read_metrics(run_dir / "metrics.jsonl").skipped == 0
    assert not list((run_dir / "checkpoints").iterdir())  # nothing half-written left to take for one

    subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)  # space freed
    again = run(cfg, run_dir)
    assert again.status == RunStatus.COMPLETED
    assert again.final_eval_loss == ref.final_eval_loss  # the relaunch ends where the uninterrupted run ends

    rc = analysis_main(["report", str(tmp_path / "ref"), "--out", str(out), "--bootstrap", "0"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 1 and "Traceback" not in "\n".join(err)
    assert (
        err[-1].startswith(f"error: no space left on device writing {out}/")
        and "needed); free space" in err[-1]
    )
    left = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert not [n for n in left if n.endswith(".tmp")], left  # no temporary file
    html = out / "report.html"
    assert not html.exists() or html.read_text().rstrip().endswith("</html>"), left  # whole, or none


def test_sweep_warns_when_its_checkpoints_will_not_fit(small_fs):
    sweep_dir = small_fs("s", "256k") / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(PYTHONPATH=str(REPO))
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[2e10]",
            "sweep.dry_run=true",
            f"hydra.sweep.dir={sweep_dir}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    warnings = [
        line for line in (p.stdout + p.stderr).splitlines() if "warning: " in line and "free, but" in line
    ]
    assert len(warnings) == 1, p.stdout + p.stderr
    fp = json.loads((sweep_dir / "sweep_plan.json").read_text())["checkpoint_footprint"]
    assert fp["free_bytes"] < fp["in_flight_bytes"] <= fp["sweep_bytes"]
    assert fp["runs"] == 3 and fp["keep_checkpoints"] == [2] and fp["runs_in_flight"] == 1
    assert f"{sweep_dir} has " in warnings[0] and "lower train.keep_checkpoints" in warnings[0]
