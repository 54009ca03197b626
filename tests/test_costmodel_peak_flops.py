"""One peak-FLOPs table: the trainer's MFU denominator comes from conf/hardware/*.yaml and gives
exactly what the table it replaced (experiments/train/peak_flops.py PEAK_TABLE) gave."""

from __future__ import annotations

import math
import types

import pytest

from experiments.train.peak_flops import peak_flops_per_device, table_peak
from sharding.costmodel import LayoutError, load_hardware
from sharding.costmodel.hardware import Hardware, hardware_for_device_kind

# The removed table, verbatim: (substring of the lower-cased jax device_kind, {dtype: FLOP/s}),
# first match wins.
OLD_TABLE = [
    ("h200", {"bfloat16": 989e12, "float32": 495e12}),
    ("h100", {"bfloat16": 989e12, "float32": 495e12}),
    ("a100", {"bfloat16": 312e12, "float32": 156e12}),
    ("tpu v6", {"bfloat16": 918e12, "float32": 918e12}),
    ("tpu v5p", {"bfloat16": 459e12, "float32": 459e12}),
    ("tpu v5 lite", {"bfloat16": 197e12, "float32": 197e12}),
    ("tpu v5e", {"bfloat16": 197e12, "float32": 197e12}),
    ("tpu v5", {"bfloat16": 459e12, "float32": 459e12}),
    ("tpu v4", {"bfloat16": 275e12, "float32": 275e12}),
]
# What JAX reports as device.device_kind on these chips (and spellings seen across versions).
VENDOR_KINDS = [
    "NVIDIA H200",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-PCIE-40GB",
    "TPU v4",
    "TPU v5 lite",
    "TPU v5e",
    "TPU v5p",
    "TPU v5",
    "TPU v6 lite",
    "TPU v6e",
    "NVIDIA B200",
    "AMD Instinct MI250X",
    "Tesla V100-SXM2-16GB",
    "cpu",
]
DTYPES = ("bfloat16", "float32", "float16")


def old_table_peak(device_kind: str, dtype: str) -> float | None:
    kind = device_kind.lower()
    for key, peaks in OLD_TABLE:
        if key in kind:
            return peaks.get(dtype)
    return None


@pytest.mark.parametrize("key,peaks", OLD_TABLE)
def test_every_old_entry_has_the_same_peaks(key, peaks):
    for kind in (key, key.upper(), f"Google {key.upper()} chip"):
        for dtype, flops in peaks.items():
            assert table_peak(kind, dtype) == flops, (kind, dtype)
        assert table_peak(kind, "float16") is None  # the old table had no other dtypes


@pytest.mark.parametrize("kind", VENDOR_KINDS)
def test_vendor_device_kinds_match_the_old_table(kind):
    for dtype in DTYPES:
        assert table_peak(kind, dtype) == old_table_peak(kind, dtype), (kind, dtype)


def test_lookup_prefers_the_longest_device_kind():
    assert hardware_for_device_kind("TPU v5 lite").name == "tpu-v5e"
    assert hardware_for_device_kind("TPU v5").name == "tpu-v5p"
    assert hardware_for_device_kind("NVIDIA A100-SXM4-40GB").name == "a100-40gb"
    assert hardware_for_device_kind("NVIDIA A100-SXM4-80GB").name == "a100-80gb"
    assert hardware_for_device_kind("NVIDIA B200") is None


def test_cost_model_and_trainer_read_one_number():
    for name in ("h100-sxm", "h200", "a100-80gb", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"):
        hw = load_hardware(name)
        assert hw.device_kinds and hw.peak_flops_for("bfloat16") == hw.peak_flops
        assert "peak_flops_float32" in hw.sources


def test_peak_flops_per_device_names_its_source():
    tpu = types.SimpleNamespace(device_kind="TPU v5 lite", platform="tpu")
    peak, src = peak_flops_per_device(tpu, "bfloat16")
    assert peak == 197e12 and "conf/hardware/tpu-v5e.yaml" in src
    peak, src = peak_flops_per_device(
        types.SimpleNamespace(device_kind="Tesla V100", platform="gpu"), "float32"
    )
    assert math.isnan(peak) and "unknown device kind" in src


def test_bad_device_kinds_are_one_line_errors():
    base = {
        "peak_flops": 1e15,
        "hbm_bytes": 1e11,
        "hbm_bw": 4e12,
        "devices_per_node": 4,
        "intra_node_bw": 4e11,
        "inter_node_bw": 5e10,
    }
    assert Hardware.from_mapping({**base, "device_kinds": "My Chip"}).device_kinds == ("my chip",)
    with pytest.raises(LayoutError, match="device_kinds must be a list of non-empty strings"):
        Hardware.from_mapping({**base, "device_kinds": [3]})


def test_cpu_peak_is_the_best_of_shapes_and_of_one_and_all_devices(monkeypatch, tmp_path):
    """The CPU peak is the highest of the timed matmuls (every shape, one device and all devices),
    and a figure cached by the older one-matmul method is not reused (the key names the method)."""
    from experiments.train import peak_flops as pf

    calls = []

    def fake(dtype, n, parallel=False):
        calls.append((n, parallel))
        return 1e9 * n / 1024 * (1.5 if parallel else 1.0)

    monkeypatch.setattr(pf, "measure_cpu_matmul_peak", fake)
    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path))
    flops, src = pf.cpu_host_peak("float32")
    assert sorted(calls) == sorted((n, p) for n in pf._MATMUL_SHAPES for p in (False, True))
    assert flops == 1.5e9 * max(pf._MATMUL_SHAPES) / 1024
    assert pf._METHOD_VERSION in src and "every CPU device" in src


def test_cpu_matmul_peak_runs_on_one_and_on_all_devices():
    from experiments.train.peak_flops import measure_cpu_matmul_peak

    one = measure_cpu_matmul_peak("float32", 128, reps=2)
    every = measure_cpu_matmul_peak("float32", 128, reps=2, parallel=True)
    assert one > 0 and every > 0


# ---- the CPU peak cannot go stale (experiments/train/peak_flops.py, RULE) -------------------------


@pytest.fixture
def cpu_peak(monkeypatch, tmp_path):
    """peak_flops with a private cache, a settable load average and a scripted measurement:
    `st.load`, `st.next` (the FLOP/s the next measurement reads), `st.calls`, `st.entry()`."""
    from experiments.train import peak_flops as pf

    st = types.SimpleNamespace(load=0.1, next=None, calls=0, pf=pf)

    def measure(dtype="float32"):
        st.calls += 1
        return st.next

    monkeypatch.setenv("SCALELAB_CACHE", str(tmp_path))
    monkeypatch.setattr(pf, "_load_average", lambda: st.load)
    monkeypatch.setattr(pf, "measure_cpu_host_peak", measure)
    st.entry = lambda: __import__("json").loads(pf._cache_file().read_text())[pf._cpu_key("float32")]
    return st


def test_a_low_contended_peak_does_not_stick(cpu_peak):
    """The first measurement on a busy machine reads low (the suite beside it): it is used, but
    flagged, and the next start on a quiet machine measures again and replaces it; after that a
    low reading (busy, or --refresh) never lowers the cached peak, and a busy start re-measures
    nothing."""
    pf = cpu_peak.pf
    cpu_peak.load, cpu_peak.next = 3.0, 50e9  # contended: a third of the true peak
    assert pf.cpu_host_peak_info().flops == 50e9 and cpu_peak.entry()["contended"]
    cpu_peak.next = 60e9
    assert pf.cpu_host_peak_info().flops == 50e9 and cpu_peak.calls == 1  # still busy: no measuring
    cpu_peak.load, cpu_peak.next = 0.2, 150e9
    p = pf.cpu_host_peak_info()
    assert (p.flops, cpu_peak.calls) == (150e9, 2) and not cpu_peak.entry()["contended"]
    assert pf.cpu_host_peak_info().flops == 150e9 and cpu_peak.calls == 2  # fresh and quiet: cached
    cpu_peak.next = 70e9
    assert pf.cpu_host_peak_info(refresh=True).flops == 150e9  # measured, lower: the highest stays
    e = cpu_peak.entry()
    assert (e["flops"], e["last_measurement"], e["measurements"], cpu_peak.calls) == (150e9, 70e9, 3, 3)
    assert p.measured_at == e["measured_at"] and p.measured_at in p.source


def test_an_old_or_suspect_peak_is_measured_again_when_quiet(cpu_peak, monkeypatch):
    """Older than REFRESH_AFTER_S, or marked by a run that saw MFU > 1: re-measured at the next
    quiet start (never on a busy one), and a higher figure replaces the cached one."""
    pf = cpu_peak.pf
    cpu_peak.next = 100e9
    pf.cpu_host_peak_info()
    now = __import__("time").time()
    monkeypatch.setattr(pf.time, "time", lambda: now + pf.REFRESH_AFTER_S + 60)
    cpu_peak.load, cpu_peak.next = 2.5, 300e9
    assert pf.cpu_host_peak_info().flops == 100e9 and cpu_peak.calls == 1
    cpu_peak.load = 0.3
    assert pf.cpu_host_peak_info().flops == 300e9 and cpu_peak.calls == 2
    pf.mark_cpu_peak_stale("auto")  # model.dtype "auto" is float32 on CPU
    assert cpu_peak.entry()["stale"]
    cpu_peak.next = 320e9
    assert pf.cpu_host_peak_info().flops == 320e9 and not cpu_peak.entry()["stale"]


def test_an_mfu_above_one_warns_once_and_is_not_recorded(cpu_peak, tmp_path, capsys):
    """A cached CPU peak far too low (1 MFLOP/s): the run prints one `warning:` line naming the
    peak's age and `--refresh`, summary.json and metrics.jsonl hold no mfu > 1 (null, the figure
    as mfu_raw), the summary says which peak and when, and the cache entry is marked for
    re-measuring."""
    import json
    import time
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from experiments.train.loop import run
    from models.base.jsonio import write_json_atomic
    from models.base.rundir import read_metrics

    pf = cpu_peak.pf
    pf._cache_file().parent.mkdir(parents=True, exist_ok=True)
    stamp = "2026-01-02T03:04:05"
    entry = {"flops": 1e6, "measured_at": stamp, "method": "m", "checked_at_unix": time.time()}
    write_json_atomic(pf._cache_file(), {pf._cpu_key("float32"): entry})
    overrides = [
        "model.d_model=32",
        "model.n_layers=2",
        "model.n_heads=4",
        "model.seq_len=32",
        "train.batch_size=8",
        "train.eval_tokens=512",
        "train.progress_every_s=0",
        "train.steps=4",
    ]
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    s = run(cfg, tmp_path / "run")
    out = capsys.readouterr().out
    warnings = [ln for ln in out.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, out
    assert "MFU" in warnings[0] and stamp in warnings[0] and "peak_flops --refresh" in warnings[0]
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["mfu"] is None and on_disk["mfu_raw"] > 1 and s.mfu is None
    assert on_disk["peak_flops_per_device"] == 1e6 and on_disk["peak_flops_measured_at"] == stamp
    assert stamp in on_disk["peak_flops_source"]
    recs = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert recs and all(not r["mfu"] <= 1 for r in recs)  # null, read back as NaN: never a figure
    assert all(r["mfu_raw"] > 1 for r in recs)
    assert cpu_peak.entry()["stale"] and cpu_peak.calls == 0


def test_checked_mfu_keeps_possible_figures():
    from experiments.train.peak_flops import checked_mfu

    assert checked_mfu(0.42) == (0.42, None) and checked_mfu(1.0) == (1.0, None)
    assert checked_mfu(1.7) == (None, 1.7)
    assert checked_mfu(float("nan")) == (None, None) and checked_mfu(None) == (None, None)
