"""Progress you can see, counts that reconcile.

analysis/core/progress.py: a bar appears on a terminal-like stderr only after its delay, never when
quiet (set_quiet or SCALELAB_QUIET=1) or on a pipe, and `fit --json -` keeps stdout pure JSON while
its bars run. The sweep (experiments/sweeps/{summary,monitor,console}.py, the sweeper): one count
line at the start and one at the end in the same five words that add up, on a fake sweep with a
reused, trained, skipped and failed run; the live monitor's counts, names and ETA; the trainer's
step lines named after their run.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from analysis.core import progress
from experiments import console
from experiments.sweeps import monitor
from experiments.sweeps.summary import Counts, outcome
from experiments.train.metrics import RUN_LABEL, Progress

REPO = pathlib.Path(__file__).resolve().parents[1]
APP = REPO / "tests" / "sweep_fake_app.py"


class TTY(io.StringIO):
    """A terminal-like stream: what a bar writes, kept."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _not_quiet(monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    progress.set_quiet(None)
    yield
    progress.set_quiet(None)


# ---- analysis/core/progress.py ------------------------------------------------------------------


def test_bar_appears_only_after_its_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.3)
    out = TTY()
    seen_early = []
    for i in progress.track(range(6), desc="demo loop", unit="step", stream=out):
        if i == 1:
            seen_early.append(out.getvalue())
        time.sleep(0.1)
    assert seen_early == [""]  # nothing in the first 0.3 s
    text = out.getvalue()
    assert "demo loop:" in text and "/6" in text  # drawn once the delay had passed
    assert text.endswith("\r")  # and its line cleared when the loop ended (leave=False)


def test_quiet_or_a_pipe_draws_nothing_and_costs_nothing(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    items = [1, 2, 3]
    progress.set_quiet(True)
    out = TTY()
    assert progress.track(items, desc="x", stream=out) is items  # the iterable itself: no wrapper
    with progress.bar(10, "x", stream=out) as b:
        b.update(5)
        assert not b.shown
    assert out.getvalue() == ""
    progress.set_quiet(None)  # back to the environment's choice
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    assert not progress.enabled(out) and progress.track(items, stream=out) is items
    monkeypatch.setenv(progress.QUIET_ENV, "0")
    assert progress.enabled(out)
    assert not progress.enabled(io.StringIO())  # not a terminal: no bar
    progress.set_quiet(False)  # --quiet not given wins over nothing; the environment still counts
    assert progress.enabled(out)


def test_bar_counts_updates_from_many_threads(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    out = TTY()
    with progress.bar(4000, "threads", unit="fit", stream=out) as b:
        threads = [threading.Thread(target=lambda: [b.update(1) for _ in range(1000)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        b.add_total(10)
        b.update(10)
        assert b._tq.n == 4010 and b._tq.total == 4010
    assert "threads:" in out.getvalue()


def _synth(path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(0)
    N = np.repeat(np.geomspace(2e7, 3e9, 5), 5)
    D = np.tile(np.geomspace(4e8, 2e11, 5), 5)
    L = (1.9 + 600 / N**0.33 + 1800 / D**0.35) * np.exp(rng.normal(0, 0.002, N.size))
    pd.DataFrame({"N": N, "D": D, "loss": L}).to_csv(path, index=False)
    return path


def test_fit_json_to_stdout_stays_pure_while_bars_draw(tmp_path, capsys, monkeypatch):
    """Bars forced on (no delay, a terminal-like stderr): stdout is still one JSON document, the
    bars went to stderr."""
    from analysis.cli import main

    csv = _synth(tmp_path / "runs.csv")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    err = TTY()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["fit", str(csv), "--law", "chinchilla", "--bootstrap", "40", "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["law"] == "chinchilla"
    assert "fit chinchilla: 40 bootstrap resamples" in err.getvalue()


def test_fit_json_dash_in_a_subprocess_is_pure_json(tmp_path):
    csv = _synth(tmp_path / "runs.csv")
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "fit",
            str(csv),
            "--law",
            "chinchilla",
            "--bootstrap",
            "20",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["law"] == "chinchilla"  # the whole of stdout parses
    assert "\r" not in p.stderr  # stderr is a pipe here: no bar drawn into it


# ---- the sweep's counts -------------------------------------------------------------------------


def test_counts_of_every_kind_of_run_add_up():
    recs = [
        {"action": "skip"},
        {"action": "reuse", "status_before": "completed"},
        {"action": "reuse", "status_before": "diverged"},  # kept as it ended earlier
        {"action": "reuse", "status_before": "stopped"},  # stopped early earlier, kept
        {"action": "launch", "status_before": "new"},  # still to train
        {"action": "launch", "status_before": "new", "status_after": "completed"},
        {"action": "launch", "status_before": "interrupted", "status_after": "failed"},  # a full disk
        {"action": "launch", "status_before": "new", "status_after": "failed"},  # an error
        {"action": "launch", "status_before": "new", "status_after": "diverged"},
        {"action": "launch", "status_before": "new", "status_after": "stopped"},
    ]
    kinds = ["skipped", "reused", "failed", "skipped", "to train", "trained", "failed", "failed", "failed"]
    assert [outcome(r) for r in recs] == [*kinds, "skipped"]
    c = Counts.of(recs, disk_full=lambda r: r.get("status_before") == "interrupted")
    got = (c.planned, c.reused, c.trained, c.skipped, c.failed, c.to_train)
    assert c.add_up() and got == (10, 1, 1, 3, 4, 1)
    assert c.line("sweep done") == (
        "sweep done: 10 planned, 1 reused, 1 trained, 3 skipped (2 stopped early by sweep.early_stop), "
        "4 failed (1 diverged; 1 with an error; 1 stopped by a full disk: free space, relaunch to resume; "
        "1 kept as they ended earlier: sweep.rerun_failed=true re-runs them); 1 to train"
    )
    only_errors = Counts.of([{"action": "launch", "status_after": "failed"}])
    assert only_errors.line("sweep done") == "sweep done: 1 planned, 0 reused, 0 trained, 0 skipped, 1 failed"
    assert Counts.of([{"action": "skip"}]).line("sweep plan", to_train=True).endswith("; 0 to train")


LINE = re.compile(
    r"sweep (plan|done): (\d+) planned, (\d+) reused, (\d+) trained, (\d+) skipped, (\d+) failed"
    r"(?: \([^)]*\))?(?:; (\d+) to train)?"
)
FAKE = [
    "-m",
    "+sweep=isoflop",
    "sweep.ladder.head_dim=16",
    "sweep.ladder.aspect_ratio=32",
    "train.batch_size=8",
    "sweep.id_ignore=[fake.crash_d_model]",  # the crash switch is not part of a run's identity
    f"hydra.searchpath=[file://{REPO}/conf]",
]


def _fake_sweep(sweep_dir, *extra, quiet=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    env.pop(progress.QUIET_ENV, None)
    if quiet:
        env[progress.QUIET_ENV] = "1"
    return subprocess.run(
        [sys.executable, str(APP), *FAKE, f"hydra.sweep.dir={sweep_dir}", *extra],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _counts(text: str, which: str) -> tuple[int, ...]:
    found = [m for m in LINE.finditer(text) if m.group(1) == which]
    assert len(found) == 1, text[-3000:]  # exactly one such line
    return tuple(int(g or 0) for g in found[0].groups()[1:])


def test_sweep_count_lines_reconcile_with_a_reused_trained_skipped_and_failed_run(tmp_path):
    sw = tmp_path / "sw"
    # one run first, quietly: no per-run lines, no progress lines, the two count lines all the same
    first = _fake_sweep(sw, "sweep.budgets=[1e10]", "sweep.ladder.depths=[1]", quiet=True)
    assert first.returncode == 0, first.stderr[-2000:]
    out1 = first.stdout + first.stderr
    assert "[launch]" not in out1 and "sweep progress" not in out1 and "Launching" not in out1
    assert _counts(out1, "plan") == (1, 0, 0, 0, 0, 1) and _counts(out1, "done") == (1, 0, 1, 0, 0, 0)
    # the full ladder: that run reused, d=96 at 3e10 crashes, 3 shapes too short to train
    second = _fake_sweep(
        sw, "sweep.budgets=[1e10,3e10]", "sweep.ladder.depths=[1,2,3,4]", "fake.crash_d_model=96"
    )
    assert second.returncode != 0  # a run failed with an error: the sweep's one error line
    out = second.stdout + second.stderr
    plan = _counts(out, "plan")
    done = _counts(out, "done")
    assert plan == (8, 1, 0, 3, 0, 4)  # planned, reused, trained, skipped, failed, to train
    assert done == (8, 1, 3, 3, 1, 0)
    assert done[0] == sum(done[1:5]) and plan[0] == sum(plan[1:])
    runs = json.loads((sw / "sweep_plan.json").read_text())["runs"]
    assert len(runs) == done[0] and sum(outcome(r) == "reused" for r in runs) == 1
    assert "1 of the 4 runs to train failed" in second.stderr and "Traceback" not in second.stderr
    # not a terminal: one progress line per finished run, the last one all done
    progress_lines = [line for line in out.splitlines() if line.startswith("sweep progress:")]
    assert len(progress_lines) == 4 and progress_lines[-1].startswith("sweep progress: 4/4 done, running 0")


# ---- the live monitor and the console ---------------------------------------------------------


def _rec(name: str, steps: int = 100, flops: float = 1e12) -> dict:
    return {"run_dir": name, "steps": steps, "flops": flops, "action": "launch"}


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_monitor_sees_runs_start_progress_and_end(tmp_path, monkeypatch):
    names = ["C1e10_L1-d32_0123456789", "C1e10_L2-d64_abcdef0123", "C3e10_L1-d32_fedcba9876"]
    # the third was interrupted earlier at step 40: its old files must not read as this launch's
    _write(tmp_path / names[2] / ".hydra" / "config.yaml", "old")
    _write(tmp_path / names[2] / "summary.json", json.dumps({"status": "preempted"}))
    _write(tmp_path / names[2] / "metrics.jsonl", "".join(json.dumps({"step": s}) + "\n" for s in (20, 40)))
    now = [100.0]
    monkeypatch.setattr(monitor, "DELAY_S", 0.0)
    out = TTY()
    mon = monitor.SweepMonitor(tmp_path, [_rec(n) for n in names], stream=out, clock=lambda: now[0])
    assert mon.mode == "bar" and mon.runs[names[2]].base == 40
    mon.poll()
    assert mon.counts() == (0, 0, 3, 0) and "ETA ?" in mon.text()
    _write(tmp_path / names[0] / ".hydra" / "config.yaml", "x")  # its job started
    _write(tmp_path / names[0] / "metrics.jsonl", json.dumps({"step": 50}) + "\n" + '{"step": 6')  # torn tail
    now[0] += 10.0
    mon.poll()
    assert mon.counts() == (0, 1, 2, 0)
    # 0.5 of 2.6 units of work (the resumed run has 60 of its 100 steps left) in 10 s: 42 s left
    assert mon.text() == "running 1: C1e10_L1-d32_0123 · 2 left · ETA 42s"
    _write(tmp_path / names[0] / "summary.json", json.dumps({"status": "completed"}))
    assert [r.label for r in mon.poll()] == ["C1e10_L1-d32_0123"]
    mon.ended({"run_dir": names[1], "status_after": "failed"})  # its job returned without a summary
    assert mon.counts() == (2, 0, 1, 1)
    mon._draw()
    assert "sweep: 2/3 done" in out.getvalue() and "1 failed" in out.getvalue()
    mon._bar.close()


def test_monitor_is_off_when_quiet_and_writes_lines_off_a_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(console.QUIET_ENV, "1")
    assert monitor.SweepMonitor(tmp_path, [_rec("a_0123456789")], stream=TTY()).mode == "off"
    monkeypatch.delenv(console.QUIET_ENV)
    recs = [_rec("a_0123456789"), _rec("b_0123456789")]
    mon = monitor.SweepMonitor(tmp_path, recs, stream=io.StringIO(), clock=lambda: 5.0)
    assert mon.mode == "lines"
    mon.ended({"run_dir": "a_0123456789", "status_after": "completed"})
    mon.ended({"run_dir": "a_0123456789", "status_after": "completed"})  # told twice: said once
    assert capsys.readouterr().out == "sweep progress: 1/2 done, running 0, 1 left, ETA ?\n"


def test_lines_clear_the_bar_line_on_a_terminal_only():
    tty = TTY()
    w = console.LineClearing(tty)
    w.write("step 1")
    assert not w.at_line_start
    w.write(" done\n")
    w.write("a\nb\n")
    assert (
        tty.getvalue() == f"{console.CLEAR_LINE}step 1 done\n{console.CLEAR_LINE}a\n{console.CLEAR_LINE}b\n"
    )
    pipe = io.StringIO()
    console.LineClearing(pipe).write("a\nb\n")
    assert pipe.getvalue() == "a\nb\n"


def test_step_lines_name_their_run_and_go_quiet(monkeypatch):
    assert console.short_label("C1e10_L2-d64_15e35856b5") == "C1e10_L2-d64_15e3"
    assert console.short_label("3") == "3"
    out = io.StringIO()
    token = RUN_LABEL.set("C1e10_L2-d64_15e3")  # as a pack member's thread has it
    try:
        Progress(10, 512, stream=out).update(10, 2.5, 1e4, 0.1, force=True)
    finally:
        RUN_LABEL.reset(token)
    assert out.getvalue().startswith("[C1e10_L2-d64_15e3] step 10/10 | ")
    alone = io.StringIO()
    Progress(10, 512, stream=alone).update(10, 2.5, 1e4, 0.1, force=True)
    assert alone.getvalue().startswith("step 10/10 | ")  # a run alone on its terminal: no prefix
    monkeypatch.setenv(console.QUIET_ENV, "1")
    quiet = io.StringIO()
    Progress(10, 512, stream=quiet).update(10, 2.5, 1e4, 0.1, force=True)
    assert quiet.getvalue() == ""
