"""The planner's answer states its uncertainty: MFU, days and GPU-hours carry the 90% interval of
the efficiency constants' error model (measured / predicted MFU on runs they were not fitted to:
leave-one-source-out predictions for the shipped constants, leave-one-out for a user's sweep),
never past MFU 1; days and GPU-hours also carry the goodput's interval (time lost to failures),
the two combined in log space."""

from __future__ import annotations

import math

import pytest

from analysis.planning.costs import CostOptions
from analysis.planning.planner import efficiency_note, plan
from sharding.costmodel import DEFAULT_EFFICIENCY


def test_shipped_constants_have_a_held_out_error_model():
    lo, hi = DEFAULT_EFFICIENCY.mfu_ratio_interval
    assert 0.5 < lo < 1.0 < hi < 2.0  # leave-one-source-out measured / predicted MFU, 5%-95%


def test_plan_brackets_mfu_days_and_gpu_hours():
    p = plan(1e21, 64, "a100-80gb")
    b = p.best
    lo, hi = DEFAULT_EFFICIENCY.mfu_ratio_interval
    hi = min(hi, 1 / b.mfu)  # the fast end stops at MFU 1
    assert b.mfu_interval == pytest.approx((b.mfu * lo, b.mfu * hi)) and b.mfu_interval[1] <= 1.0
    assert b.days_interval[0] < b.days < b.days_interval[1]
    g = p.assumptions.goodput
    up = math.exp(math.hypot(math.log(1 / lo), math.log(g.value / g.interval[0])))
    down = math.exp(math.hypot(math.log(hi), math.log(g.interval[1] / g.value)))
    assert b.days_interval == pytest.approx((b.days / down, b.days * up))
    assert b.gpu_hours_interval == pytest.approx((b.gpu_hours / down, b.gpu_hours * up))
    # a stated goodput carries no interval: the MFU's alone remains
    b1 = plan(1e21, 64, "a100-80gb", costs=CostOptions(goodput=g.value)).best
    assert b1.days == pytest.approx(b.days)
    assert b1.days_interval == pytest.approx((b.days / hi, b.days / lo))
    d = p.as_dict()
    assert d["best"]["days_interval"] == pytest.approx(list(b.days_interval))
    assert d["efficiency"]["mfu_ratio_interval"] == pytest.approx(list(DEFAULT_EFFICIENCY.mfu_ratio_interval))
    assert "days" in p.to_markdown() and "MFU, days and GPU-hours intervals" in p.to_markdown()


def test_constants_without_an_error_model_say_so():
    eff = DEFAULT_EFFICIENCY.replace(mfu_ratio_lo=None, mfu_ratio_hi=None)
    b = plan(1e21, 64, "a100-80gb", eff=eff).best
    assert b.mfu_interval is None
    g = b.costs.assumptions.goodput
    (glo, ghi) = g.interval
    assert b.days_interval == pytest.approx((b.days * g.value / ghi, b.days * g.value / glo))
    assert efficiency_note(eff).startswith("no MFU interval")
    b1 = plan(1e21, 64, "a100-80gb", eff=eff, costs=CostOptions(goodput=0.95)).best
    assert b1.gpu_hours_interval == pytest.approx((b1.gpu_hours, b1.gpu_hours))  # nothing uncertain left


def test_offload_lets_a_model_fit_one_gpu_and_costs_host_time():
    """`plan(..., offload=True)` (`plan --offload`): the 5.6B Chinchilla-optimal model of 1.2e22
    FLOPs needs 97 GB on one A100-80GB with the optimizer on the device, and fits with it on the
    host; the optimizer step then costs CPU Adam and PCIe time."""
    from models.base.errors import AnalysisError
    from sharding.costmodel import estimate_step

    with pytest.raises(AnalysisError, match="first fits on 2 devices"):
        plan(1.2e22, 1, "a100-80gb")
    p = plan(1.2e22, 1, "a100-80gb", offload=True)
    lo = p.best.layout
    assert lo.offload_optimizer and p.best.mem_gb_per_device < 86
    est = estimate_step(p.best.shape, lo, p.hardware)
    on_device = estimate_step(p.best.shape, lo.replace(offload_optimizer=False), p.hardware)
    assert est.time.optimizer > on_device.time.optimizer and est.memory.optimizer == 0
    assert "offload" in p.table() and p.as_dict()["best"]["layout"]["offload_optimizer"]
    assert "optimizer offload to the host" in p.trainer.missing or p.trainer.estimate is None
