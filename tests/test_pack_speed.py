"""benchmarks/pack_speed.py's pure parts: the sweep overrides it launches, the alternate order
of its pairs, its median table and its CI check (the benchmark itself trains: not run here)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import pack_speed as ps  # noqa: E402


def test_pack_overrides_give_k_lr_variants() -> None:
    one = ps.pack_overrides(ps.PACK_SHAPES["12k"], 1, 1)
    assert "sweep.lr_probe=null" in one and "sweep.pack=1" in one
    four = ps.pack_overrides(ps.PACK_SHAPES["108k"], 4, 4)
    probe = next(o for o in four if o.startswith("sweep.lr_probe="))
    assert probe == "sweep.lr_probe={lrs:[0.003,0.03,0.005],budgets:null}"  # K - 1 probe lrs
    assert "sweep.pack=4" in four and "sweep.budgets=[100000000000.0]" in four
    assert len(ps.PROBE_LRS) >= max(ps.KS) - 1 and ps.BASE_LR not in ps.PROBE_LRS


def test_branch_overrides() -> None:
    wsd = ps.branch_overrides(ps.BRANCH_SHAPES, True)
    cos = ps.branch_overrides(ps.BRANCH_SHAPES, False)
    assert "optim.schedule=wsd" in wsd and "sweep.branches=true" in wsd
    assert "optim.schedule=cosine" in cos and "sweep.branches=false" in cos
    assert ps.BRANCH_BUDGETS[-2] < ps.HOLDOUT_ABOVE < ps.BRANCH_BUDGETS[-1]


def test_pairs_alternate_and_flip_each_repeat(monkeypatch, tmp_path) -> None:
    calls = []

    def fake_pair(name, k, rep, packed_first, work, env, budget=ps.PACK_BUDGET):
        calls.append((name, k, rep, packed_first))
        return ps.PackMeasurement(name, k, rep, packed_first, 2.0 + rep, 1.0, 0.0)

    monkeypatch.setattr(ps, "measure_pair", fake_pair)
    monkeypatch.setattr(ps, "sweep", lambda *a, **k: 0.0)  # the warm-up
    ms = ps.measure_packs(["12k", "108k"], (1, 4), 2, tmp_path, {})
    firsts = {(n, k, r): f for n, k, r, f in calls}
    assert [f for *_, f in calls[:4]] == [False, True, False, True]
    assert all(firsts[n, k, 0] != firsts[n, k, 1] for n in ("12k", "108k") for k in (1, 4))
    table = ps.pack_table(ms)
    assert table["12k"]["4"]["median_ratio"] == 2.5 and table["12k"]["4"]["n"] == 2


def test_inside() -> None:
    assert ps._inside(0.5, [0.4, 0.6]) is True
    assert ps._inside(0.7, [0.4, 0.6]) is False
    assert ps._inside(math.nan, [0.4, 0.6]) is None
