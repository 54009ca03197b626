"""The `+sweep=moe` preset's plan (every budget x shape x expert count, D = C / active FLOPs per
token, E = 1 the dense shape) and the report's "Mixture of experts" section on a routed runs table
(issue "Mixture-of-experts"): the MoE law fitted on every expert count, the other sections on the
dense runs only, bad sweep settings as one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_sweep_plan import BASE  # the dense sweep tests' base config

from analysis.core.runs import with_moe_columns
from analysis.report import moe as report_moe
from experiments.sweeps.grid import PlanError, plan_sweep
from models.config import ModelConfig
from models.flops import active_param_count, flops_per_token, param_count

SWEEP = {
    "kind": "moe",
    "budgets": [1e11, 3e11],
    "experts": [1, 2, 4],
    "moe": {"top_k": 1, "capacity_factor": 2.0},
    "ladder": {"depths": [1, 2], "head_dim": 16, "aspect_ratio": 32},
    "min_steps": 20,
    "max_epochs": None,
    "warmup_fraction": 0.05,
}


def test_moe_plan_is_budget_x_shape_x_experts_at_the_active_flops():
    runs = plan_sweep(BASE, SWEEP)
    assert len(runs) == 2 * 2 * 3
    assert runs[0].label == "C1e11_L1-d32_E1" and runs[2].label == "C1e11_L1-d32_E4"
    dense, routed = runs[0], runs[2]
    assert "model.moe=null" in dense.overrides
    (moe,) = [o for o in routed.overrides if o.startswith("model.moe=")]
    # the cost model's spelling (sharding.costmodel.spec.moe_override): the keys off their defaults
    assert moe == "model.moe={experts:4,top_k:1,capacity_factor:2}"
    cfg = ModelConfig.from_mapping(
        {
            **BASE["model"],
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "moe": {"experts": 4, "top_k": 1, "capacity_factor": 2.0},
        }
    )
    # D = C / F with F the active FLOPs per token (router included); N counts every expert
    assert routed.flops_per_token == flops_per_token(cfg) and routed.n_params == param_count(cfg)
    assert active_param_count(cfg) < param_count(cfg)
    for r in runs:
        assert abs(r.tokens * r.flops_per_token / r.budget - 1) < 0.02


@pytest.mark.parametrize(
    "change, msg",
    [
        ({"experts": []}, "sweep.experts is empty"),
        ({"experts": [1, 0]}, "distinct whole numbers >= 1"),
        ({"experts": [2, 2]}, "distinct whole numbers >= 1"),
        ({"moe": {"top_k": 1, "experts": 4}}, "sweep.moe has unknown keys ['experts']"),
        ({"budgets": []}, "sweep.budgets is empty"),
        ({"moe": {"top_k": 4}}, "sweep.moe at experts=2: model.moe.top_k=4 is larger than"),
    ],
)
def test_moe_plan_errors_are_one_line(change, msg):
    with pytest.raises(PlanError) as e:
        plan_sweep(BASE, {**SWEEP, **change})
    assert msg in str(e.value) and "\n" not in str(e.value)


def _routed_table(seed: int = 0) -> pd.DataFrame:
    """Runs of an (N, D, E) ladder in the columns `collect` writes: model.moe.experts NaN on the
    dense runs and n_params_active only on the routed ones; loss from a known joint law."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in (1e11, 3e11, 1e12):
        for layers, n in ((1, 2e4), (2, 5e4), (3, 1.1e5), (4, 2.5e5)):
            for e in (1, 2, 4, 8):
                d = c / (6 * n)
                loss = 1.2 + 400 / n**0.6 * e**-0.15 + 900 / d**0.55
                rows.append(
                    {
                        "run": f"C{c:.0e}_L{layers}_E{e}",
                        "n_params": n * (1 + 0.6 * (e - 1)),
                        "n_params_active": n if e > 1 else np.nan,
                        "tokens": d,
                        "flops": c,
                        "budget": c,
                        "final_eval_loss": loss * np.exp(rng.normal(0, 0.002)),
                        "model.n_layers": layers,
                        "model.d_model": 16 * layers,
                        "model.moe.experts": e if e > 1 else np.nan,
                    }
                )
    df = pd.DataFrame(rows)
    return df.assign(N=df.n_params, D=df.tokens, C=df.flops, loss=df.final_eval_loss)


def test_collect_columns_and_the_report_section(tmp_path):
    df = _routed_table()
    t = with_moe_columns(df)
    assert t["experts"].tolist()[:4] == [1.0, 2.0, 4.0, 8.0]
    dense = t[t.experts == 1]
    assert (dense.n_params_active == dense.n_params).all()  # a dense run's active count is its total
    assert report_moe.is_routed(df) and not report_moe.is_routed(report_moe.dense_only(df))
    assert len(report_moe.dense_only(df)) == 12
    assert report_moe.moe_section(report_moe.dense_only(df), tmp_path, 0, 0, []) is None
    warn: list[str] = []
    sec = report_moe.moe_section(df, tmp_path, 20, 0, warn)
    assert not warn, warn
    assert (tmp_path / sec["figure"]).stat().st_size > 5000
    law = sec["moe"]["law"]
    assert law["law"].startswith("moe_") and law["selection"]["family"] == "moe"
    json.dumps(sec["moe"])  # report.json carries it
    md = sec["markdown"]
    assert md.startswith("## Mixture of experts") and "| 1e+12 | 4x64 | 250,000 |" in md
    # E = 8 bought 400 / n^0.6 (1 - 8^-0.15) of loss on the largest shape at the largest budget
    cell = next(
        c for c in report_moe._cells(df) if c.budget == 1e12 and c.n_active == 2.5e5 and c.experts == 8
    )
    assert cell.vs_dense < 0.99
