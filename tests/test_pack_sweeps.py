"""Packed runs and WSD branches through the real command line (issue "Small runs at a fraction
of the cost"): `python -m experiments.train -m +sweep=isoflop sweep.pack=K` relaunched trains
nothing; a pack SIGKILLed or SIGTERMed mid-run resumes every member from its own checkpoint and
ends equal to an uninterrupted pack; `sweep.branches=true` trains trunks and branches at <= 0.70x
the FLOPs of separate runs and `collect` leaves the trunk out; bad input gets one line;
`hydra/launcher=packed` packs a plain multirun, also on a data x fsdp mesh, equal to the same
runs trained alone. tests/test_pack.py holds the unit and in-process equality tests."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REL_TOL = 1e-5  # the bound on a packed / resumed member against its solo run
CLI_TIMEOUT_S = 300
# One tiny shape and its LR probe: 3 runs of one program (default lr, 1e-2, 3e-2), 150 steps each
# at 2e9 FLOPs (256 tokens x 52k FLOPs/token per step), checkpoints every 50 steps so a kill finds
# some.
TINY = [
    "train.batch_size=8",
    "model.seq_len=32",
    "train.eval_tokens=512",
    "train.eval_every=0",
    "train.progress_every_s=60",
]
SHAPE = "sweep.shapes=[{n_layers:1,d_model:16,n_heads:2}]"
PACKED = [
    "+sweep=isoflop",
    "sweep.budgets=[2e9]",
    SHAPE,
    "sweep.lr_probe={lrs:[1e-2,3e-2],budgets:null}",
    "sweep.pack=4",
    "sweep.min_steps=5",
    "train.ckpt_every=50",
    "train.ckpt_every_s=null",
    *TINY,
]
N_PACKED = 3
POLL_S = 0.02


def _env(devices: int = 1) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    flags = f"--xla_force_host_platform_device_count={devices}" if devices > 1 else ""
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XLA_FLAGS=flags)
    return env


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "experiments.train", "-m", *args]


def _cli(*args: str, ok: bool = True, devices: int = 1) -> subprocess.CompletedProcess:
    p = subprocess.run(
        _cmd(*args), env=_env(devices), cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )
    if ok:
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p


def _summaries(sweep_dir: Path) -> dict[str, dict]:
    """Run id -> summary.json of every run directory of a sweep (pack job dirs hold none)."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def _assert_equal_losses(got: dict[str, dict], ref: dict[str, dict]) -> float:
    """Every run of `ref` completed in `got` with its final eval loss; the largest difference."""
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    worst = 0.0
    for rid, s in got.items():
        assert s["status"] == "completed", (rid, s["status"])
        worst = max(worst, _rel(s["final_eval_loss"], ref[rid]["final_eval_loss"]))
    assert worst <= REL_TOL, worst
    return worst


@pytest.fixture(scope="module")
def packed_ref(tmp_path_factory) -> Path:
    """The uninterrupted packed sweep every other packed run is compared with."""
    sw = tmp_path_factory.mktemp("packed") / "ref"
    out = _cli(*PACKED, f"hydra.sweep.dir={sw}")
    runs = _summaries(sw)
    assert len(runs) == N_PACKED and all(s["status"] == "completed" for s in runs.values())
    assert all(sorted(s["packed_with"]) == sorted(runs) for s in runs.values())
    # the members share one terminal: each one's step lines are named after it (its last one always prints)
    for rid in runs:
        assert f"[{rid[:-6]}] step 150/150 |" in out.stdout, (rid, out.stdout[-3000:])
    assert len(list((sw / ".scalelab_packs").glob("*.json"))) == 1  # one pack job
    return sw


@pytest.mark.slow
def test_packed_sweep_relaunch_trains_nothing(packed_ref):
    files = {p: p.read_bytes() for p in packed_ref.glob("*/summary.json")}
    metrics = {p: p.stat().st_mtime_ns for p in packed_ref.glob("*/metrics.jsonl")}
    out = _cli(*PACKED, f"hydra.sweep.dir={packed_ref}")
    plan = json.loads((packed_ref / "sweep_plan.json").read_text())
    assert [r["action"] for r in plan["runs"]] == ["reuse"] * N_PACKED
    assert "3 reused, 0 trained" in out.stderr + out.stdout
    assert {p: p.read_bytes() for p in files} == files
    assert {p: p.stat().st_mtime_ns for p in metrics} == metrics


def _start(sw: Path) -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(*PACKED, f"hydra.sweep.dir={sw}"),
        env=_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, signalled as a scheduler would
    )


def _wait_for_checkpoint(p: subprocess.Popen, sw: Path) -> None:
    """Until some member has a committed checkpoint (the pack is mid-run)."""
    deadline = time.monotonic() + CLI_TIMEOUT_S
    # a finished checkpoint only: its folder is the step number (an Orbax "<step>.orbax-checkpoint-
    # tmp-*" folder may already hold the marker before it is renamed, and a kill then leaves nothing
    # to resume from)
    while not [c for c in sw.glob("*/checkpoints/*/commit_success.txt") if c.parent.name.isdigit()]:
        assert p.poll() is None, f"the sweep ended (rc {p.returncode}) before any checkpoint"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(POLL_S)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_interrupted_pack_resumes_equal_to_uninterrupted(tmp_path, packed_ref, sig):
    sw = tmp_path / "sw"
    p = _start(sw)
    try:
        _wait_for_checkpoint(p, sw)
        os.killpg(p.pid, sig)
        p.wait(timeout=CLI_TIMEOUT_S)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode != 0
    before = {rid: s["status"] for rid, s in _summaries(sw).items()}
    if sig == signal.SIGTERM:  # preempted: every member still running saved and said so
        assert set(before.values()) <= {"completed", "preempted"} and "preempted" in before.values()
        assert len(before) == N_PACKED, before
    else:
        assert list(before.values()).count("completed") < N_PACKED, before
    _cli(*PACKED, f"hydra.sweep.dir={sw}")
    ref = _summaries(packed_ref)
    worst = _assert_equal_losses(_summaries(sw), ref)
    resumed = {rid for rid in ref if "resuming from checkpoint" in (sw / rid / "train.log").read_text()}
    assert resumed and resumed >= {rid for rid, st in before.items() if st == "preempted"}, before
    for rid in ref:  # the whole curve, once per step, as the uninterrupted member's
        got, want = _curve(sw / rid), _curve(packed_ref / rid)
        assert [s for s, _ in got] == [s for s, _ in want]
        worst = max([worst] + [_rel(a, b) for (_, a), (_, b) in zip(got, want)])
    assert worst <= REL_TOL
    print(f"{sig.name}: {before} -> resumed {sorted(resumed)}, max rel diff {worst:.1e}")


def _curve(run_dir: Path) -> list[tuple[int, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.slow
def test_wsd_branches_through_the_sweeper(tmp_path):
    sw = tmp_path / "sw"
    args = [
        "+sweep=isoflop",
        "sweep.budgets=[1e9,2e9,4e9]",
        SHAPE,
        "sweep.min_steps=5",
        "optim.schedule=wsd",
        "sweep.branches=true",
        *TINY,
        f"hydra.sweep.dir={sw}",
    ]
    _cli(*args)
    runs = _summaries(sw)
    trunks = {rid: s for rid, s in runs.items() if s.get("role") == "trunk"}
    branches = {rid: s for rid, s in runs.items() if s.get("trunk")}
    assert len(trunks) == 1 and len(branches) == 3 and len(runs) == 4, sorted(runs)
    (trunk_id,) = trunks
    assert trunk_id.startswith("trunk_")
    points = sorted(int(p.name) for p in (sw / trunk_id / "branch_points").iterdir())
    assert points == sorted(s["branch_step"] for s in branches.values())
    for s in branches.values():
        assert s["status"] == "completed" and s["trunk"] == trunk_id
        assert 0 < s["marginal_flops"] < s["flops"]
    plan = json.loads((sw / "sweep_plan.json").read_text())
    ratio = plan["flops_to_train"] / plan["flops_if_separate"]
    assert ratio <= 0.70, ratio
    print(f"WSD branches: {len(branches)} branches of {trunk_id}, FLOPs {ratio:.3f}x separate")

    before = {p: p.read_bytes() for p in sw.glob("*/summary.json")}
    _cli(*args)
    plan = json.loads((sw / "sweep_plan.json").read_text())
    assert {r["action"] for r in plan["runs"]} == {"reuse"} and len(plan["runs"]) == 4
    assert {p: p.read_bytes() for p in before} == before

    table = tmp_path / "runs.csv"
    c = subprocess.run(
        [sys.executable, "-m", "analysis", "collect", str(sw), "--out", str(table)],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert c.returncode == 0, c.stderr[-2000:]
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(Path(r["run"]).name for r in rows) == sorted(branches)
    assert {r["trunk"] for r in rows} == {trunk_id}
    assert "trunk" in c.stderr  # said so


@pytest.mark.parametrize(
    "args,msg",
    [
        (["sweep.pack=0"], "sweep.pack must be an integer >= 1"),
        (["sweep.branches=true"], "sweep.branches=true needs optim.schedule=wsd"),
    ],
    ids=["pack0", "branches-cosine"],
)
def test_bad_input_is_one_line(tmp_path, args, msg):
    p = _cli(
        "+sweep=isoflop", "sweep.budgets=[1e9]", SHAPE, *TINY, *args, f"hydra.sweep.dir={tmp_path}", ok=False
    )
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode != 0 and last.startswith("error:") and msg in last, p.stderr[-2000:]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_runs_that_cannot_pack_are_not_packed(tmp_path):
    two = "sweep.shapes=[{n_layers:1,d_model:16,n_heads:2},{n_layers:1,d_model:24,n_heads:3}]"
    p = _cli(
        "+sweep=isoflop",
        "sweep.budgets=[1e9]",
        two,
        "sweep.pack=4",
        "sweep.min_steps=5",
        *TINY,
        f"hydra.sweep.dir={tmp_path}",
    )
    runs = _summaries(tmp_path)
    assert len(runs) == 2 and all(
        s["status"] == "completed" and not s.get("packed_with") for s in runs.values()
    )
    assert not list((tmp_path / ".scalelab_packs").glob("*.json"))
    assert (p.stdout + p.stderr).count("not packed") == 2


MULTIRUN = [
    "optim.lr=1e-3,3e-3",
    "train.steps=30",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "train.ckpt_every=0",
    *TINY,
]
MESH = ["sharding.data=2", "sharding.fsdp=2"]


@pytest.mark.parametrize(
    "mesh",
    [pytest.param(False, id="single"), pytest.param(True, id="data2-fsdp2", marks=pytest.mark.slow)],
)
def test_packed_launcher_equals_the_plain_multirun(tmp_path, mesh):
    extra, devices = (MESH, 8) if mesh else ([], 1)
    _cli(
        *MULTIRUN, *extra, "hydra/launcher=packed", f"hydra.sweep.dir={tmp_path / 'packed'}", devices=devices
    )
    _cli(*MULTIRUN, *extra, f"hydra.sweep.dir={tmp_path / 'solo'}", devices=devices)
    packed, solo = _summaries(tmp_path / "packed"), _summaries(tmp_path / "solo")
    assert len(solo) == 2 and all(s["packed_with"] == sorted(packed) for s in packed.values())
    assert not any(s.get("packed_with") for s in solo.values())
    if mesh:
        assert all("data=2 fsdp=2" in (tmp_path / "packed" / rid / "train.log").read_text() for rid in packed)
    worst = _assert_equal_losses(packed, solo)
    print(f"packed launcher, {'data2 x fsdp2' if mesh else 'one device'}: max rel diff {worst:.1e}")
