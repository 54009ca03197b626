"""Planner: law loading, compute-optimal allocation, shape rounding, layout search, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from analysis import allocation, fit_law
from analysis.core.table import FLOPS_PER_PARAM_TOKEN
from analysis.laws.allocation import ScalingLaw
from analysis.planning.planner import candidate_shapes, plan
from models.base.errors import AnalysisError
from sharding.costmodel import PRIOR_EFFICIENCY, Layout, ModelShape, estimate_step, load_hardware

# Epoch AI's refit of Chinchilla approach 3 (Besiroglu et al. 2024), as given in the brief.
EPOCH = {"E": 1.8172, "A": 477.8, "B": 2143.0, "alpha": 0.3473, "beta": 0.3672}


def _law_file(tmp_path, samples=None, **extra):
    d = {"law": "chinchilla", "params": EPOCH, "param_names": list(EPOCH), **extra}
    if samples is not None:
        d["bootstrap_samples"] = samples
    p = tmp_path / "law.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("k", [6.0, 8.0])
def test_optimal_allocation_matches_numeric_minimum(k):
    law = dataclasses.replace(ScalingLaw.chinchilla_2022(), flops_per_param_token=k)
    c = 1e23
    n, d = law.optimal(c)
    assert k * n * d == pytest.approx(c)
    res = optimize.minimize_scalar(
        lambda ln: law.loss(math.exp(ln), c / (k * math.exp(ln))), bounds=(15, 30), method="bounded"
    )
    assert n == pytest.approx(math.exp(res.x), rel=1e-3)


@pytest.fixture(scope="module")
def fit_8nd():
    """A Chinchilla fit on synthetic runs whose recorded FLOPs are C = 8ND (k = 8, not 6)."""
    rng = np.random.default_rng(0)
    N = np.repeat(np.geomspace(2e7, 3e9, 6), 6)
    D = np.tile(np.geomspace(4e8, 2e11, 6), 6)
    L = EPOCH["E"] + EPOCH["A"] / N ** EPOCH["alpha"] + EPOCH["B"] / D ** EPOCH["beta"]
    df = pd.DataFrame({"N": N, "D": D, "C": 8 * N * D, "loss": L * np.exp(rng.normal(0, 1e-3, N.size))})
    starts = np.array([[1.8, 400.0, 2000.0, 0.3, 0.3], [1.5, 100.0, 500.0, 0.5, 0.5]])  # small grid: fast
    return fit_law(df, "chinchilla", bootstrap=20, seed=0, grid=starts)


def test_plan_uses_the_fits_flops_factor(fit_8nd, tmp_path):
    """A law fitted on C = 8ND data plans with k = 8: N* equals the fit's own allocation, and
    every candidate's FLOPs are k·N·D = the budget (with C = 6ND N* would be ~16% off)."""
    assert fit_8nd.flops_per_param_token == pytest.approx(8.0)
    want = fit_8nd.allocation([1e22])["budgets"][0]
    path = tmp_path / "fit8.json"
    fit_8nd.to_json(str(path))
    for law in (ScalingLaw.from_fit(fit_8nd), ScalingLaw.from_json(path)):
        assert law.flops_per_param_token == pytest.approx(8.0)
        p = plan(1e22, 64, "h100-sxm", law=law)
        assert p.n_opt == pytest.approx(want["N_opt"], rel=1e-9)
        assert p.d_opt == pytest.approx(want["D_opt"], rel=1e-9)
        assert p.as_dict()["law"]["flops_per_param_token"] == pytest.approx(8.0)
        for c in p.candidates:
            assert c.flops == pytest.approx(1e22, rel=1e-9)
            assert c.tokens == pytest.approx(1e22 / (8 * c.shape.n_params), rel=1e-9)
    six = dataclasses.replace(ScalingLaw.from_fit(fit_8nd), flops_per_param_token=6.0)
    assert abs(six.optimal(1e22)[0] / want["N_opt"] - 1) > 0.05


def test_allocation_is_the_laws(fit_8nd):
    """`allocation(fit)` is `ScalingLaw.from_fit(fit).allocation`: same keys and CIs, k override."""
    law = ScalingLaw.from_fit(fit_8nd)
    assert law.samples.shape == (20, 5) and law.ci_level == fit_8nd.ci_level
    al = allocation(fit_8nd, [1e21, 1e23])
    assert al == law.allocation([1e21, 1e23])
    assert list(al) == ["a", "b", "G", "flops_per_param_token", "a_ci", "b_ci", "budgets"]
    assert set(al["budgets"][0]) == {
        "C",
        "N_opt",
        "D_opt",
        "tokens_per_param",
        "loss",
        "N_opt_ci",
        "D_opt_ci",
        "tokens_per_param_ci",
        "loss_ci",
        "loss_interval",
        "loss_method",
        "loss_law_minimum",
    }
    row = al["budgets"][1]
    assert row["N_opt"] * row["D_opt"] * 8 == pytest.approx(1e23, rel=1e-9)
    assert (row["N_opt"], row["D_opt"]) == pytest.approx(law.optimal(1e23), rel=1e-12)
    six = allocation(fit_8nd, [1e23], flops_per_param_token=6.0)["budgets"][0]
    assert six["N_opt"] * six["D_opt"] * 6 == pytest.approx(1e23, rel=1e-9)
    with pytest.raises(AnalysisError, match="budgets must be positive"):
        law.allocation([0.0])


def test_law_file_flops_factor(tmp_path):
    assert ScalingLaw.from_json(_law_file(tmp_path)).flops_per_param_token == 6.0
    assert ScalingLaw.from_json(_law_file(tmp_path, flops_per_param_token=7.5)).flops_per_param_token == 7.5
    with pytest.raises(AnalysisError, match="flops_per_param_token must be a positive number"):
        ScalingLaw.from_json(_law_file(tmp_path, flops_per_param_token=-1))


def test_one_default_flops_factor():
    assert ScalingLaw.chinchilla_2022().flops_per_param_token == FLOPS_PER_PARAM_TOKEN == 6.0


def test_loss_ci_needs_enough_samples():
    base = np.array(list(EPOCH.values()))
    law = ScalingLaw(**EPOCH, samples=np.tile(base, (5, 1)))
    assert law.loss_ci(7e10, 1.4e12) is None


def test_shapes_are_real():
    for s in candidate_shapes(70e9, 2048, 32000):
        assert s.d_model % 128 == 0 and s.head_dim == 128
        assert 64 <= s.d_model / s.n_layers <= 192
        assert abs(math.log(s.n_params / 70e9)) < 0.35


def test_chinchilla_budget_acceptance(tmp_path):
    """Epoch-refit law, 5.76e23 FLOPs, 1024 A100-80GB -> ~60-80B on ~1.2-1.6T, MFU 30-60%."""
    p = plan(5.76e23, 1024, "a100-80gb", law=ScalingLaw.from_json(_law_file(tmp_path)))
    b = p.best
    assert 60e9 <= b.shape.n_params <= 80e9
    assert 1.2e12 <= b.tokens <= 1.6e12
    assert 0.30 <= b.mfu <= 0.60
    assert b.mem_gb_per_device <= 85.9
    goodput = p.assumptions.goodput.value  # the share of the wall-clock that trains (conf/plan_costs.yaml)
    assert 0.5 < goodput < 1
    assert b.days == pytest.approx(b.tokens / b.tokens_per_s / 86400 / goodput)
    assert b.gpu_hours == pytest.approx(b.days * 24 * 1024) == pytest.approx(b.costs.device_hours)
    assert b.loss_ci is None  # no bootstrap samples in this law file
    steps = [c.step_time_s for c in p.candidates if c.shape == b.shape]
    assert steps == [b.step_time_s]


def test_loss_ci_from_bootstrap_samples(tmp_path):
    rng = np.random.default_rng(0)
    base = np.array(list(EPOCH.values()))
    samples = (base * (1 + 0.02 * rng.standard_normal((200, 5)))).tolist()
    law = ScalingLaw.from_json(_law_file(tmp_path, samples=samples))
    lo, hi = law.loss_ci(7e10, 1.4e12)
    e, a, b, al, be = np.asarray(samples).T  # the 2.5/97.5 percentiles of the samples' losses
    assert [lo, hi] == pytest.approx(np.percentile(e + a / 7e10**al + b / 1.4e12**be, [2.5, 97.5]))


def test_time_limit_shrinks_model():
    unlimited = plan(1e24, 256, "h100", law=ScalingLaw.chinchilla_2022())
    limited = plan(1e24, 256, "h100", law=ScalingLaw.chinchilla_2022(), max_days=10)
    assert limited.best.days <= 10 * 1.0001
    assert limited.best.shape.n_params < unlimited.best.shape.n_params


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(budget_flops=1e26, n_devices=8, hardware="a100-40gb"), "no layout of the .* fits"),
        (dict(budget_flops=1e23, n_devices=8, hardware="a900"), "unknown hardware"),
        (dict(budget_flops=None, n_devices=8, hardware="h100"), "give --budget"),
        (dict(budget_flops=-1.0, n_devices=8, hardware="h100"), "positive"),
    ],
)
def test_bad_requests(kw, msg):
    with pytest.raises(AnalysisError, match=msg):
        plan(**kw)


def test_bad_law_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(AnalysisError, match="not valid JSON"):
        ScalingLaw.from_json(p)
    p.write_text(json.dumps({"law": "kaplan", "params": {"alpha": 0.1}}))
    with pytest.raises(AnalysisError, match="lacks parameter"):
        ScalingLaw.from_json(p)
    with pytest.raises(AnalysisError, match="not found"):
        ScalingLaw.from_json(tmp_path / "missing.json")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "analysis", *map(str, args)],
        capture_output=True,
        text=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )


def test_plan_cli_json(tmp_path):
    out = tmp_path / "plan.json"
    r = _cli(
        "plan",
        "--budget",
        "5.76e23",
        "--law",
        _law_file(tmp_path),
        "--hardware",
        "a100-80gb",
        "--gpus",
        "1024",
        "--json",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert "days" in r.stdout and "CI unavailable" in r.stdout
    data = json.loads(out.read_text())
    need = {
        "n_params",
        "tokens",
        "n_layers",
        "d_model",
        "layout",
        "mem_gb_per_device",
        "step_time_s",
        "mfu",
        "days",
        "gpu_hours",
        "loss",
        "loss_ci",
    }
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
    csv.write_text(
        "n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,micro_batch,dp,tp,pp,"
        "sp,zero_stage,act_ckpt,flash_attn,hardware,n_devices\n"
        "40,5120,40,2048,128000,2048,1,32,2,1,0,1,none,1,a100-80gb,64\n"
        "40,5120,40,2048,128000,2048,8,64,1,1,0,1,none,1,a100-80gb,64\n"
        "40,5120,40,2048,128000,2048,1,16,2,2,1,1,full,0,a100-80gb,64\n"
    )
    out = tmp_path / "o.json"
    r = _cli("layout-eval", csv, "--json", out)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r_["micro_batch"] for r_ in rows] == [1, 8, 1]
    assert rows[0]["pred_fits"] and not rows[1]["pred_fits"]
    for r_ in rows:
        assert r_["pred_tokens_per_s"] == pytest.approx(2048 * 2048 / r_["pred_step_time_s"])
        assert 0 < r_["pred_mfu"] < 1
    csv.write_text(
        "n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,dp,tp,pp,n_devices,"
        "hardware\n40,5120,40,2048,128000,2048,64,2,1,64,a100-80gb\n"
    )
    r = _cli("layout-eval", csv)
    assert r.returncode == 2 and "row 1:" in r.stderr and "nearest valid mesh" in r.stderr


def test_layout_eval_calibrates_on_user_sweep(tmp_path):
    """Synthetic sweep timed by a known model: calibration recovers a better fit than priors."""
    truth = PRIOR_EFFICIENCY.replace(gemm_eff_max=0.6, layer_overhead_s=5e-4)
    hw = load_hardware("h100")
    lines = [
        "n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,micro_batch,dp,tp,pp,"
        "hardware,measured_step_time_s"
    ]
    for L, d, tp, mb in (
        (24, 2048, 1, 1),
        (24, 2048, 2, 2),
        (32, 4096, 4, 1),
        (32, 4096, 8, 2),
        (40, 5120, 8, 1),
        (16, 1024, 1, 4),
    ):
        s = ModelShape(n_layers=L, d_model=d, n_heads=d // 128, seq_len=2048, vocab_size=32000)
        lo = Layout(dp=64 // tp, tp=tp, micro_batch=mb, global_batch=512)
        t = estimate_step(s, lo, hw, eff=truth).step_time_s
        lines.append(f"{L},{d},{d // 128},2048,32000,512,{mb},{64 // tp},{tp},1,h100,{t}")
    csv = tmp_path / "sweep.csv"
    csv.write_text("\n".join(lines) + "\n")
    r = _cli("layout-eval", csv, "--fit-all", "--out", tmp_path, "--json", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    fitted = json.loads((tmp_path / "efficiency.json").read_text())
    assert fitted["scores"]["median_abs_mfu_error"] < 0.01
