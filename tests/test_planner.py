"""Planner: law loading, compute-optimal allocation, shape rounding, layout search, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import optimize

from models.base.errors import AnalysisError
from analysis.planning.planner import (ScalingLaw, candidate_shapes, chinchilla_law, load_law, plan)

# Epoch AI's refit of Chinchilla approach 3 (Besiroglu et al. 2024), as given in the brief.
EPOCH = {"E": 1.8172, "A": 477.8, "B": 2143.0, "alpha": 0.3473, "beta": 0.3672}


def _law_file(tmp_path, samples=None, **extra):
    d = {"law": "chinchilla", "params": EPOCH, "param_names": list(EPOCH), **extra}
    if samples is not None:
        d["bootstrap_samples"] = samples
    p = tmp_path / "law.json"
    p.write_text(json.dumps(d))
    return p


def test_optimal_allocation_matches_numeric_minimum():
    law = chinchilla_law()
    c = 1e23
    n, d = law.optimal_allocation(c)
    assert 6 * n * d == pytest.approx(c)
    res = optimize.minimize_scalar(lambda ln: law.loss(math.exp(ln), c / (6 * math.exp(ln))),
                                   bounds=(15, 30), method="bounded")
    assert n == pytest.approx(math.exp(res.x), rel=1e-3)


def test_shapes_are_real():
    for s in candidate_shapes(70e9, 2048, 32000):
        assert s.d_model % 128 == 0 and s.head_dim == 128
        assert 64 <= s.d_model / s.n_layers <= 192
        assert abs(math.log(s.n_params / 70e9)) < 0.35


def test_chinchilla_budget_acceptance(tmp_path):
    """Epoch-refit law, 5.76e23 FLOPs, 1024 A100-80GB -> ~60-80B on ~1.2-1.6T, MFU 30-60%."""
    p = plan(5.76e23, 1024, "a100-80gb", law=load_law(_law_file(tmp_path)))
    b = p.best
    assert 60e9 <= b.shape.n_params <= 80e9
    assert 1.2e12 <= b.tokens <= 1.6e12
    assert 0.30 <= b.mfu <= 0.60
    assert b.mem_gb_per_device <= 85.9
    assert b.days == pytest.approx(b.tokens / b.tokens_per_s / 86400)
    assert b.gpu_hours == pytest.approx(b.days * 24 * 1024)
    assert b.loss_ci is None  # no bootstrap samples in this law file
    steps = [c.step_time_s for c in p.candidates if c.shape == b.shape]
    assert steps == [b.step_time_s]


def test_loss_ci_from_bootstrap_samples(tmp_path):
    rng = np.random.default_rng(0)
    base = np.array(list(EPOCH.values()))
    samples = (base * (1 + 0.02 * rng.standard_normal((200, 5)))).tolist()
    law = load_law(_law_file(tmp_path, samples=samples))
    lo, hi = law.loss_ci(7e10, 1.4e12)
    assert lo < law.loss(7e10, 1.4e12) < hi


def test_time_limit_shrinks_model():
    unlimited = plan(1e24, 256, "h100", law=chinchilla_law())
    limited = plan(1e24, 256, "h100", law=chinchilla_law(), max_days=10)
    assert limited.best.days <= 10 * 1.0001
    assert limited.best.shape.n_params < unlimited.best.shape.n_params


@pytest.mark.parametrize("kw,msg", [
    (dict(budget_flops=1e26, n_devices=8, hardware="a100-40gb"), "no layout of the .* fits"),
    (dict(budget_flops=1e23, n_devices=8, hardware="a900"), "unknown hardware"),
    (dict(budget_flops=None, n_devices=8, hardware="h100"), "give --budget"),
    (dict(budget_flops=-1.0, n_devices=8, hardware="h100"), "positive"),
])
def test_bad_requests(kw, msg):
    with pytest.raises(AnalysisError, match=msg):
        plan(**kw)


def test_bad_law_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(AnalysisError, match="not valid JSON"):
        load_law(p)
    p.write_text(json.dumps({"law": "kaplan", "params": {"alpha": 0.1}}))
    with pytest.raises(AnalysisError, match="lacks parameter"):
        load_law(p)
    with pytest.raises(AnalysisError, match="not found"):
        load_law(tmp_path / "missing.json")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "analysis", *map(str, args)], capture_output=True,
                          text=True, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})


def test_plan_cli_json(tmp_path):
    out = tmp_path / "plan.json"
    r = _cli("plan", "--budget", "5.76e23", "--law", _law_file(tmp_path), "--hardware",
             "a100-80gb", "--gpus", "1024", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "days" in r.stdout and "CI unavailable" in r.stdout
    data = json.loads(out.read_text())
    need = {"n_params", "tokens", "n_layers", "d_model", "layout", "mem_gb_per_device",
            "step_time_s", "mfu", "days", "gpu_hours", "loss", "loss_ci"}
    assert need <= set(data["best"]) and data["candidates"]
    assert {"dp", "tp", "pp", "micro_batch", "zero_stage", "act_ckpt"} <= set(data["best"]["layout"])
    lay = data["best"]["layout"]
    assert lay["dp"] * lay["tp"] * lay["pp"] == 1024


def test_plan_cli_bad_input_is_one_line():
    r = _cli("plan", "--budget", "1e23", "--hardware", "h900", "--gpus", "8")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error: unknown hardware")


def test_layout_eval_cli(tmp_path):
    csv = tmp_path / "l.csv"
    csv.write_text("n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,micro_batch,dp,tp,pp,"
                   "sp,zero_stage,act_ckpt,flash_attn,hardware,n_devices\n"
                   "40,5120,40,2048,128000,2048,1,32,2,1,0,1,none,1,a100-80gb,64\n"
                   "40,5120,40,2048,128000,2048,8,64,1,1,0,1,none,1,a100-80gb,64\n"
                   "40,5120,40,2048,128000,2048,1,16,2,2,1,1,full,0,a100-80gb,64\n")
    out = tmp_path / "o.json"
    r = _cli("layout-eval", csv, "--json", out)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r_["micro_batch"] for r_ in rows] == [1, 8, 1]
    assert rows[0]["pred_fits"] and not rows[1]["pred_fits"]
    for r_ in rows:
        assert r_["pred_tokens_per_s"] == pytest.approx(2048 * 2048 / r_["pred_step_time_s"])
        assert 0 < r_["pred_mfu"] < 1
    csv.write_text("n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,dp,tp,pp,n_devices,"
                   "hardware\n40,5120,40,2048,128000,2048,64,2,1,64,a100-80gb\n")
    r = _cli("layout-eval", csv)
    assert r.returncode == 2 and "row 1:" in r.stderr and "nearest valid mesh" in r.stderr


def test_layout_eval_calibrates_on_user_sweep(tmp_path):
    """Synthetic sweep timed by a known model: calibration recovers a better fit than priors."""
    from sharding.costmodel import PRIOR_EFFICIENCY, Layout, ModelShape, estimate_step, load_hardware
    truth = PRIOR_EFFICIENCY.replace(gemm_eff_max=0.6, layer_overhead_s=5e-4)
    hw = load_hardware("h100")
    lines = ["n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,micro_batch,dp,tp,pp,"
             "hardware,measured_step_time_s"]
    for L, d, tp, mb in ((24, 2048, 1, 1), (24, 2048, 2, 2), (32, 4096, 4, 1), (32, 4096, 8, 2),
                         (40, 5120, 8, 1), (16, 1024, 1, 4)):
        s = ModelShape(n_layers=L, d_model=d, n_heads=d // 128, seq_len=2048, vocab_size=32000)
        lo = Layout(dp=64 // tp, tp=tp, micro_batch=mb, global_batch=512)
        t = estimate_step(s, lo, hw, eff=truth).step_time_s
        lines.append(f"{L},{d},{d // 128},2048,32000,512,{mb},{64 // tp},{tp},1,h100,{t}")
    csv = tmp_path / "sweep.csv"
    csv.write_text("\n".join(lines) + "\n")
    r = _cli("layout-eval", csv, "--calibrate", tmp_path / "eff.json", "--json", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    fitted = json.loads((tmp_path / "eff.json").read_text())
    assert fitted["scores"]["median_abs_mfu_error"] < 0.01
