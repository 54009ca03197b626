"""Mixed clusters (sharding/costmodel/hetero.py, analysis/planning/mixed.py): heterogeneous data
parallelism with a throughput-proportional batch split, and `plan --hardware a:n,b:m`."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import yaml

from analysis.cli import main as analysis_main
from analysis.planning.mixed import plan_mixed
from sharding.costmodel import Layout, LayoutError, ModelShape, estimate_step, load_hardware
from sharding.costmodel.hardware import CATALOGUE_DIR
from sharding.costmodel.hetero import estimate_hetero_step, is_mixed, parse_cluster

MODEL = ModelShape(n_layers=32, d_model=4096, n_heads=32, seq_len=2048, vocab_size=32000)
LAYOUT = Layout(tp=2, pp=1, micro_batch=2, global_batch=1024, zero_stage=1, act_ckpt="selective", sp=True)


def test_parse_cluster_and_its_errors():
    groups = parse_cluster("a100-80gb:64, h100-sxm:32")
    assert [(g.hardware.name, g.count) for g in groups] == [("a100-80gb", 64), ("h100-sxm", 32)]
    assert is_mixed("a100-80gb:64,h100-sxm:32") and not is_mixed("h100-sxm")
    for spec, msg in [
        ("a100-80gb", "NAME:COUNT"),
        ("a100-80gb:0", "positive integer"),
        ("a100-80gb:x", "positive integer"),
        ("nope:8,h100:8", "unknown hardware"),
        ("a100-80gb:8,a100-80gb:8", "twice"),
    ]:
        with pytest.raises(LayoutError, match=msg):
            parse_cluster(spec)


def test_two_identical_groups_are_one_cluster_plus_the_cross_group_reduction(tmp_path):
    spec = yaml.safe_load((CATALOGUE_DIR / "a100-80gb.yaml").read_text())
    paths = []
    for name in ("twin-a", "twin-b"):
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump({**spec, "name": name}))
        paths.append(str(p))
    het = estimate_hetero_step(MODEL, LAYOUT, parse_cluster(f"{paths[0]}:32,{paths[1]}:32"))
    homo = estimate_step(MODEL, LAYOUT.replace(dp=32), load_hardware("a100-80gb"))
    assert het.batch_split() == (512, 512)
    # each half does half the batch on half the devices: the homogeneous step minus its DP
    # collectives' difference, plus the exposed cross-group all-reduce
    assert het.step_time_s - het.sync_s == pytest.approx(homo.step_time_s, rel=0.05)
    assert het.sync_s > 0


def test_the_faster_group_gets_more_of_the_batch():
    het = estimate_hetero_step(MODEL, LAYOUT, parse_cluster("a100-80gb:64,h100-sxm:64"))
    a100, h100 = het.per_group
    assert h100.layout.global_batch > a100.layout.global_batch
    assert sum(het.batch_split()) == LAYOUT.global_batch
    assert het.step_time_s == pytest.approx(max(a100.step_time_s, h100.step_time_s) + het.sync_s)
    # no group waits much for the other: the split balances them to within one micro-batch round
    assert abs(a100.step_time_s / h100.step_time_s - 1) < 0.25
    with pytest.raises(LayoutError, match="multiple of tp"):
        estimate_hetero_step(MODEL, LAYOUT.replace(tp=8, pp=2), parse_cluster("a100-80gb:24,h100-sxm:16"))


def test_mixed_plan_says_what_the_mix_buys():
    p = plan_mixed(5.76e23, "a100-80gb:256,h100-sxm:128")
    d = p.as_dict()
    assert len(d["mixed"]["subsets"]) == 2 and all(s is not None for s in d["mixed"]["subsets"])
    assert p.speedup is not None and p.speedup > 1.0  # the mix beats the best group alone
    assert p.days < min(s["days"] for s in d["mixed"]["subsets"])
    lo, hi = d["best"]["days_interval"]
    assert lo < p.days < hi
    assert "as fast as the best single group" in p.text()


def _cli(*argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = analysis_main(list(argv))
    return rc, buf.getvalue()


def test_plan_cli_on_a_mixed_cluster(tmp_path):
    out = tmp_path / "mixed.json"
    rc, text = _cli(
        "plan", "--budget", "5.76e23", "--hardware", "a100-80gb:256,h100-sxm:128", "--json", str(out)
    )
    assert rc == 0, text
    assert "mixed cluster 256 x a100-80gb + 128 x h100-sxm" in text
    data = json.loads(out.read_text())
    assert data["mixed"]["groups"] == [
        {"hardware": "a100-80gb", "count": 256},
        {"hardware": "h100-sxm", "count": 128},
    ]
    # one schema for one and for mixed device types: what a single-type plan has, a mixed one has
    rc, _ = _cli(
        "plan", "--budget", "5.76e23", "--hardware", "a100-80gb", "--gpus", "384", "--json", str(out)
    )
    single = json.loads(out.read_text())
    common = {"best", "candidates", "mfu_convention", "hardware", "n_devices", "budget_flops", "efficiency"}
    assert rc == 0 and common <= set(single) and common <= set(data)
    assert {"n_params", "tokens", "layout", "mfu", "days", "gpu_hours", "loss"} <= set(data["best"]) & set(
        single["best"]
    )
    assert data["n_devices"] == 384 and data["hardware"] == "a100-80gb:256,h100-sxm:128"
    rc, text = _cli(
        "plan", "--budget", "5.76e23", "--hardware", "a100-80gb:256,h100-sxm:128", "--gpus", "100"
    )
    assert rc == 2 and "--gpus 100" in text and len(text.strip().splitlines()) == 1
    rc, text = _cli("plan", "--budget", "1e21", "--hardware", "a100-80gb")
    assert rc == 2 and "--gpus" in text
