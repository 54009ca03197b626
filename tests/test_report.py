"""`python -m analysis report` on a fixture sweep whose losses follow a known Chinchilla law
(tests/sweep_fake_app.py), plus its one-line errors for bad input."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    e.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    return e


@pytest.fixture(scope="module")
def fake_sweep(tmp_path_factory):
    """3 budgets x 5 rungs; the 80-wide rung diverges, and is too short (< 10 steps) at 2e10."""
    sw = tmp_path_factory.mktemp("rep") / "sweep"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[2e10,6e10,1.8e11]",
            "sweep.min_steps=10",
            "train.eval_every=1000",
            "train.ckpt_every=100000",
            "fake.diverge_d_model=80",
            "sweep.ladder.depths=[1,2,3,4,5]",
            f"hydra.sweep.dir={sw}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return sw


@pytest.mark.slow
def test_report_on_a_known_law(fake_sweep, tmp_path):
    out = tmp_path / "rep"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis",
            "report",
            str(fake_sweep),
            "--out",
            str(out),
            "--budget",
            "1e12",
            "--bootstrap",
            "100",
        ],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    rep = json.loads((out / "report.json").read_text())
    # the fake trainer's eval loss is exactly 1.01 x (1.7 + 400/N^0.34 + 900/D^0.30)
    law = rep["law"]["params"]
    assert abs(law["alpha"] - 0.34) < 0.02 and abs(law["beta"] - 0.30) < 0.02 and abs(law["E"] - 1.717) < 0.05
    h = rep["holdout"]
    assert h["held_out_budget"] == 1.8e11 and h["mean_rel_error"] < 0.005 and h["n_points"] >= 3
    assert rep["law"]["allocation"]["budgets"][0]["C"] == 1e12
    # every run is in the table, including the diverged ones, and they are named in a warning
    statuses = [r["status"] for r in rep["runs"]]
    assert statuses.count("diverged") >= 1 and statuses.count("completed") == rep["n_completed"]
    assert any("did not complete" in w and "diverged" in w for w in rep["warnings"])
    assert rep["skipped_shapes"] and all("sweep.min_steps" in s["reason"] for s in rep["skipped_shapes"])
    html = (out / "report.html").read_text()
    assert html.count("<img") == len(rep["figures"]) >= 7
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html), "HTML must be self-contained"
    md = (out / "report.md").read_text()
    for name, rel in rep["figures"].items():
        assert f"]({rel})" in md and (out / rel).stat().st_size > 10_000
    assert md.count("| completed |") == rep["n_completed"]
    assert "held-out check: fitted on C <= 6e+10" in p.stdout


def test_report_flags_edge_minima_and_missing_holdout(fake_sweep, tmp_path):
    """Only the two smallest budgets: no held-out check (needs 3), and the law of the fake
    trainer puts the optimum at the ladder's smallest rung -> an edge warning."""
    import shutil

    sw = tmp_path / "two"
    sw.mkdir()
    for d in fake_sweep.iterdir():
        if d.name.startswith(("C2e10", "C6e10")):
            shutil.copytree(d, sw / d.name)
    from analysis.report.build import build_report

    rep = build_report(sw, tmp_path / "out", bootstrap=0)
    assert rep["holdout"] is None
    # report.json is strict JSON: without bootstrap the CIs are NaN, written as null
    from test_analysis_cli import strict_loads

    on_disk = strict_loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk["law"]["ci"]["alpha"] == [None, None] and on_disk["warnings"] == rep["warnings"]
    assert any("at least three compute budgets" in w for w in rep["warnings"])
    assert any("lowest loss is at the" in w for w in rep["warnings"])
    assert len(rep["figures"]) >= 5


@pytest.mark.parametrize(
    "args, msg",
    [
        (["/nonexistent/sweep"], "sweep directory not found"),
        (["{empty}"], "no run directories"),
        (["{empty}", "--bootstrap", "-1"], "--bootstrap must be >= 0"),
        (["{empty}", "--budget", "-3"], "budget must be a positive FLOP count"),
    ],
)
def test_report_bad_input_one_line(args, msg, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(empty=empty) for a in args]
    p = subprocess.run(
        [sys.executable, "-m", "analysis", "report", *args],
        env=env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_report_adds_planning_and_rl_sections(fake_sweep, tmp_path):
    """With --budget and --hardware the report gains a planning section; RL runs under the sweep
    get the RL section and stay out of the pretraining fit; a folder of RL runs alone is an RL report."""
    import shutil

    import numpy as np
    from test_rl_report import _write_run

    from analysis.report.build import build_report

    sw = tmp_path / "sweep"
    shutil.copytree(fake_sweep, sw)
    rng = np.random.default_rng(0)
    for s in range(2):
        _write_run(sw / "rl" / f"grpo_s{s}", "grpo", s, 0.7, 2.0, 1e11, 2e12, rng)
    rep = build_report(sw, tmp_path / "rep", budgets=[1e21], bootstrap=50, hardware="a100-80gb", gpus=64)
    assert all("rl/" not in r["run"] and not r["run"].startswith("grpo") for r in rep["runs"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Planning" in md and "on 64 × a100-80gb" in md and "## RL scaling" in md
    html = (tmp_path / "rep" / "report.html").read_text()
    assert html.count("<img") == len(rep["figures"]) + 3  # + RL curves, card, reward-vs-KL
    assert not re.search(r"<img[^>]+src=['\"](?!data:image/png;base64,)", html)
    assert "<h2>Planning</h2>" in html and "<h2>RL scaling</h2>" in html

    rl_rep = build_report(sw / "rl", tmp_path / "rl_rep")
    assert rl_rep["rl_only"] and (tmp_path / "rl_rep" / "report.html").read_text().count("<img") == 3
