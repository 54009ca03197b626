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
