"""Pipeline stages on mixed device types (sharding/costmodel/hetero_pipeline.py)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

from sharding.costmodel import (
    DEFAULT_EFFICIENCY,
    Layout,
    LayoutError,
    ModelShape,
    estimate_step,
    load_hardware,
)
from sharding.costmodel.hetero import DeviceGroup
from sharding.costmodel.hetero_pipeline import balance_layers, estimate_hetero_pipeline

A100, H100 = load_hardware("a100-80gb"), load_hardware("h100-sxm")
MODEL = ModelShape(n_layers=48, d_model=6144, n_heads=48, seq_len=2048, vocab_size=32000)
LAYOUT = Layout(
    dp=4,
    tp=8,
    pp=4,
    micro_batch=1,
    global_batch=256,
    zero_stage=1,
    sp=True,
    act_ckpt="selective",
    attention="flash2",
    fused_norm=True,
)


def test_one_device_type_is_the_homogeneous_pipeline():
    homog = estimate_step(MODEL, LAYOUT, A100)
    mixed = estimate_hetero_pipeline(MODEL, LAYOUT, [DeviceGroup(A100, 128)])
    assert mixed.layers_per_stage() == (12, 12, 12, 12)
    assert mixed.step_time_s == pytest.approx(homog.step_time_s, rel=1e-9)
    assert mixed.slot_s == pytest.approx(homog.time.slot, rel=1e-9)


def test_faster_devices_get_more_layers_and_the_mix_beats_either_half():
    groups = [DeviceGroup(A100, 64), DeviceGroup(H100, 64)]
    est = estimate_hetero_pipeline(MODEL, LAYOUT, groups)
    a, b, c, d = est.layers_per_stage()
    assert sum((a, b, c, d)) == 48 and min(c, d) > max(a, b)  # the H100 stages hold more
    times = [s.microbatch_s for s in est.stages]
    assert max(times) / min(times) < 1.2  # balanced to within a layer's granularity
    for g in groups:  # the same batch on one group's 64 devices (2 stages) is slower
        alone = estimate_step(MODEL, LAYOUT.replace(pp=2), g.hardware)
        assert est.step_time_s < alone.step_time_s
    naive = estimate_hetero_pipeline(MODEL, LAYOUT, groups, layers=[12, 12, 12, 12])
    assert est.step_time_s < naive.step_time_s  # sizing stages to speed pays
    assert est.fits and 0 < est.mfu < 1


def test_balance_layers_respects_memory_caps_and_the_head():
    assert balance_layers(10, [1.0, 1.0], 0.0, [10, 10]) == [5, 5]
    assert balance_layers(12, [1.0, 0.5], 0.0, [12, 12]) == [4, 8]
    assert balance_layers(10, [1.0, 1.0], 2.0, [10, 10]) == [6, 4]  # the last stage has the head
    assert balance_layers(10, [1.0, 0.1], 0.0, [10, 3]) == [7, 3]  # capped by memory
    assert balance_layers(10, [1.0, 1.0], 0.0, [4, 4]) is None
    assert balance_layers(1, [1.0, 1.0], 0.0, [4, 4]) is None


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(LayoutError, match="not a multiple of tp×dp"):
        estimate_hetero_pipeline(MODEL, LAYOUT, [DeviceGroup(A100, 60), DeviceGroup(H100, 64)])
    with pytest.raises(LayoutError, match="positive counts summing to 48"):
        estimate_hetero_pipeline(
            MODEL, LAYOUT, [DeviceGroup(A100, 64), DeviceGroup(H100, 64)], layers=[10, 10, 10, 10]
        )
    with pytest.raises(LayoutError, match="plain 1F1B"):
        estimate_hetero_pipeline(MODEL, LAYOUT.replace(interleave=2), [DeviceGroup(A100, 128)])


def test_amp_heterogeneous_rows_are_transcribed():
    spec = importlib.util.spec_from_file_location(
        "hetero_layouts", pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "hetero_layouts.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    rows = mod.predictions()
    assert len(rows) == 8 and all(sum(r["layers"]) == 24 for r in rows)
    assert rows[0]["layers"] == [3, 4, 3, 3, 3, 3, 3, 2]  # DeepSpeed bounds 0,5,9,...,30
    assert all(r["predicted_s"] > 0 for r in rows)


def test_mixed_plan_reports_a_pipeline_across_device_types():
    """A MixedPlan whose best layout is a mixed-device pipeline says so in text and JSON."""
    from analysis.planning.mixed import MixedPlan

    groups = (DeviceGroup(A100, 64), DeviceGroup(H100, 64))
    est = estimate_hetero_pipeline(MODEL, LAYOUT, groups)
    mp = MixedPlan(
        groups=groups,
        shape=MODEL,
        tokens=1e11,
        estimate=est,
        loss=2.0,
        budget_flops=6 * MODEL.n_params * 1e11,
        subsets=(None, None),
        eff=DEFAULT_EFFICIENCY,
    )
    d = mp.as_dict()
    assert mp.mode == "pipeline" and d["best"]["layout"]["mode"] == "pipeline" == d["mixed"]["mode"]
    assert d["best"]["layout"]["layers_per_stage"] == list(est.layers_per_stage())
    assert d["best"]["layout"]["stage_hardware"] == ["a100-80gb", "a100-80gb", "h100-sxm", "h100-sxm"]
    assert "pipeline stages across device types" in mp.text()
    assert d["best"]["mfu_interval"][1] <= 1.0


def _layout_eval(tmp_path, rows: str, *extra):
    import contextlib
    import io
    import json

    from analysis.cli import main as analysis_main

    csv = tmp_path / "rows.csv"
    csv.write_text(
        "n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,tp,pp,dp,micro_batch,"
        "hardware,mixed_mode,stage_layers,act_ckpt,sp\n" + rows
    )
    out = tmp_path / "out.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = analysis_main(["layout-eval", str(csv), "--json", str(out), *extra])
    return rc, buf.getvalue(), (json.loads(out.read_text()) if rc == 0 else None)


def test_layout_eval_rows_on_mixed_hardware(tmp_path):
    rows = (
        '48,6144,48,2048,32000,256,8,2,,1,"a100-80gb:64,h100-sxm:64",data,,selective,1\n'
        '48,6144,48,2048,32000,256,8,,4,1,"a100-80gb:64,h100-sxm:64",pipeline,,selective,1\n'
        '48,6144,48,2048,32000,256,8,,4,1,"a100-80gb:64,h100-sxm:64",pipeline,12;12;12;12,selective,1\n'
    )
    rc, text, data = _layout_eval(tmp_path, rows)
    assert rc == 0, text
    data_row, balanced, fixed = data["rows"]
    assert (
        data_row["pred_dp_per_group"] == "4;4"
        and sum(map(int, data_row["pred_batch_per_group"].split(";"))) == 256
    )
    assert balanced["pred_layers_per_stage"] == "8;8;16;16"
    assert balanced["pred_stage_hardware"] == "a100-80gb;a100-80gb;h100-sxm;h100-sxm"
    assert fixed["pred_layers_per_stage"] == "12;12;12;12"
    assert balanced["pred_step_time_s"] < fixed["pred_step_time_s"]
    assert balanced["pred_hfu"] is None and 0 < balanced["pred_mfu"] < 1


@pytest.mark.parametrize(
    "row, message",
    [
        (
            '48,6144,48,2048,32000,256,8,,4,1,"a100-80gb:64,h100-sxm:64",stages,,none,0\n',
            "mixed_mode must be one of",
        ),
        (
            '48,6144,48,2048,32000,256,8,2,,1,"a100-80gb:64,h100-sxm:64",data,12;12,none,0\n',
            "stage_layers goes with",
        ),
        (
            '48,6144,48,2048,32000,256,8,,4,1,"a100-80gb:64,h100-sxm:64",pipeline,12;x,none,0\n',
            "separated by ';'",
        ),
        ("48,6144,48,2048,32000,256,8,1,4,1,a100-80gb,pipeline,,none,0\n", "goes with a mixed `hardware`"),
        (
            '48,6144,48,2048,32000,256,8,,3,1,"a100-80gb:64,h100-sxm:64",pipeline,,none,0\n',
            "not a multiple of tp×dp",
        ),
    ],
)
def test_layout_eval_mixed_rows_bad_input(tmp_path, row, message):
    rc, text, _ = _layout_eval(tmp_path, row)
    assert rc == 2 and message in text and len(text.strip().splitlines()) == 1, text
