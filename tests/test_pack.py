"""Packed runs and WSD branches equal the same runs trained alone (issue "Small runs at a
fraction of the cost"): final eval losses compared to 1e-5 relative (they are bitwise equal:
the same compiled program with the same inputs), a diverging member does not disturb the others,
a branch started from its trunk equals the WSD run trained from step 0, and the planning keys
agree with the trainer's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import experiments.train.config as train_config
from experiments.sweeps.packing import PACKABLE_KEYS, decay_steps, pack_groups, plan_branches
from experiments.train.pack import concurrency_for, run_pack
from models.base.configs import to_plain
from models.base.packs import Member

REPO = Path(__file__).resolve().parents[1]
SHAPE = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.seq_len=32"]
SMALL = ["train.batch_size=8", "train.eval_every=20", "train.eval_tokens=512"]


def _cfg(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        c = compose(
            config_name="config",
            overrides=SHAPE + SMALL + list(overrides),
        )
    d = to_plain(c)
    d.pop("hydra", None)
    return d


def test_packable_keys_agree_with_the_trainer():
    optim = {k.split(".", 1)[1] for k in PACKABLE_KEYS if k.startswith("optim.")}
    assert optim == set(train_config.PACKABLE_OPTIM_KEYS)


def test_pack_groups_split_by_program_and_size():
    a = _cfg("optim.lr=1e-3", "train.steps=10")
    b = _cfg("optim.lr=3e-3", "train.seed=1", "train.steps=20")  # same program: lr, seed, length
    c = _cfg("model.d_model=32", "model.n_heads=4", "train.steps=10")  # another shape
    assert pack_groups([a, b, c, a], 2) == [[0, 1], [3], [2]]


def test_plan_branches_flops_bound():
    steps = [1000, 2000, 4000]
    plan = plan_branches(steps, 1024, 0.2, 0.05)
    assert plan.branch_steps == tuple(s - decay_steps(s, 0.2) for s in steps)
    spent = plan.trunk_steps + sum(s - b for s, b in zip(steps, plan.branch_steps))
    assert spent / sum(steps) == pytest.approx(0.657, abs=0.002)
    assert plan_branches([1000], 1024, 0.2, 0.05) is None


def test_concurrency_is_capped_by_memory():
    assert concurrency_for(10**9, 8, 4 * 10**9) == 2  # half of 4 GB holds two 1 GB members
    assert concurrency_for(10**9, 8, 10**8) == 1  # never below one
    assert concurrency_for(None, 8, None) == 8


@pytest.mark.slow
def test_packed_members_equal_solo_runs_and_a_diverged_one_is_frozen(tmp_path):
    """lr and seed variants packed (K = 4, one thread each) equal their solo runs; a member at an
    absurd lr with a low loss ceiling diverges and the others still equal their solo runs."""
    variants = [("optim.lr=3e-3",), ("optim.lr=3e-2",), ("optim.lr=3e-2", "train.seed=1"), ("optim.lr=50",)]
    cfgs = [_cfg("train.steps=60", "train.loss_ceiling=6.0", *v) for v in variants]
    members = [Member(tmp_path / f"m{i}", f"m{i}", c) for i, c in enumerate(cfgs)]
    out = run_pack(members, 4)
    from experiments.train.loop import run

    for i, (c, got) in enumerate(zip(cfgs, out)):
        assert got.packed_with == ["m0", "m1", "m2", "m3"]
        on_disk = json.loads((tmp_path / f"m{i}" / "summary.json").read_text())
        assert on_disk == got.as_dict()
        assert (tmp_path / f"m{i}" / "train.log").read_text().count("completed") <= 1
        if i == 3:
            assert got.status == "diverged"
            continue
        solo = run(c, tmp_path / f"solo{i}")
        assert got.status == solo.status == "completed"
        rel = abs(got.final_eval_loss - solo.final_eval_loss) / solo.final_eval_loss
        assert rel <= 1e-5, (i, got.final_eval_loss, solo.final_eval_loss)
        assert set(got.time_s) == {"compile", "train_steps", "eval", "checkpoint", "startup", "other"}


@pytest.mark.slow
def test_branch_from_trunk_equals_the_wsd_run_alone(tmp_path):
    from experiments.train.loop import run

    steps, bp = 50, 50 - decay_steps(50, 0.2)
    common = ("optim.warmup_tokens=512", "train.ckpt_every=0")
    trunk = run(
        _cfg(f"train.steps={bp}", "optim.schedule=constant", f"train.branch_points=[{bp}]", *common),
        tmp_path / "trunk",
    )
    assert trunk.role == "trunk"
    wsd = ("optim.schedule=wsd", f"train.steps={steps}", *common)
    branch = run(
        _cfg(*wsd, f"train.branch_from={tmp_path / 'trunk'}", f"train.branch_step={bp}"), tmp_path / "branch"
    )
    alone = run(_cfg(*wsd), tmp_path / "alone")
    assert branch.trunk == "trunk" and branch.branch_step == bp
    assert branch.marginal_flops == pytest.approx(alone.flops * (steps - bp) / steps)
    rel = abs(branch.final_eval_loss - alone.final_eval_loss) / alone.final_eval_loss
    assert rel <= 1e-5, (branch.final_eval_loss, alone.final_eval_loss)
    lines = (tmp_path / "branch" / "metrics.jsonl").read_text().splitlines()
    curve = [json.loads(line)["step"] for line in lines]
    assert curve[0] == 1 and curve[-1] == steps  # the trunk's records up to the branch point, then its own
