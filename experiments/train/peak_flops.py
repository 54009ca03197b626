"""Peak FLOP/s per device, the denominator of MFU.

Accelerators: a small table of vendor-stated dense peak throughput by device kind and compute
dtype (no sparsity). Sources:
  * NVIDIA A100 datasheet (2021): 312 TFLOP/s BF16 tensor core, 19.5 FP32 (156 TF32).
  * NVIDIA H100 SXM datasheet (2023): 989 TFLOP/s BF16 dense, 67 FP32 (495 TF32 dense).
  * NVIDIA H200 datasheet (2024): same tensor cores as H100 SXM, 989 BF16 dense, 67 FP32.
  * Google Cloud TPU docs, "System architecture": v4 275, v5e 197, v5p 459, v6e (Trillium) 918
    TFLOP/s BF16 per chip.
For float32 compute on NVIDIA the TF32 tensor-core peak is used (XLA's default matmul precision
on those GPUs); TPUs run f32 matmuls through bf16 passes, so their bf16 peak is used.

CPU: no meaningful table exists, so the peak is *measured* once per machine (CPU model, core
count, dtype, JAX version) with a large jitted matmul and cached in
`~/.cache/scalelab/peak_flops.json`. Simulated CPU devices (`--xla_force_host_platform_device_count`)
share one host's cores, so the host peak is split evenly over the mesh devices on that host.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

# (substring of jax device_kind, lower-cased) -> {dtype: FLOP/s}
PEAK_TABLE: list[tuple[str, dict[str, float]]] = [
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

_MATMUL_N = 2048


def table_peak(device_kind: str, dtype: str) -> float | None:
    kind = device_kind.lower()
    for key, peaks in PEAK_TABLE:
        if key in kind:
            return peaks.get(dtype)
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_file() -> Path:
    return Path(os.environ.get("SCALELAB_CACHE", "~/.cache/scalelab")).expanduser() / "peak_flops.json"


def measure_cpu_matmul_peak(dtype: str = "float32", n: int = _MATMUL_N, reps: int = 5) -> float:
    """Best-of-`reps` FLOP/s of an n x n x n jitted matmul on the first CPU device."""
    import jax
    import jax.numpy as jnp

    dev = jax.devices("cpu")[0]
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.device_put(jax.random.normal(k1, (n, n), jnp.float32).astype(dtype), dev)
    b = jax.device_put(jax.random.normal(k2, (n, n), jnp.float32).astype(dtype), dev)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / best


def cpu_host_peak(dtype: str = "float32", refresh: bool = False) -> tuple[float, str]:
    """(host FLOP/s, description); measured once per machine and cached."""
    import jax

    key = f"{_cpu_model()}|{os.cpu_count()}|{dtype}|jax-{jax.__version__}"
    path = _cache_file()
    cache: dict[str, Any] = {}
    if path.is_file():
        try:
            cache = json.loads(path.read_text())
        except ValueError:
            cache = {}
    if refresh or key not in cache:
        flops = measure_cpu_matmul_peak(dtype)
        cache[key] = {"flops": flops, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                      "method": f"best of 5 jitted {_MATMUL_N}^3 {dtype} matmuls"}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache, indent=1))
        os.replace(tmp, path)
    e = cache[key]
    return float(e["flops"]), f"measured on CPU ({key}; {e['method']}, {e['measured_at']}; cached in {path})"


def peak_flops_per_device(device: Any, dtype: str, devices_on_host: int = 1) -> tuple[float, str]:
    """(peak FLOP/s of one mesh device, where the figure came from)."""
    kind = getattr(device, "device_kind", str(device))
    if getattr(device, "platform", "") == "cpu":
        host, src = cpu_host_peak(dtype)
        if devices_on_host > 1:
            src += f"; host peak split over {devices_on_host} simulated devices"
        return host / max(devices_on_host, 1), src
    peak = table_peak(kind, dtype)
    if peak is None:
        return float("nan"), f"unknown device kind {kind!r}: no peak in experiments/train/peak_flops.py table"
    return peak, f"table: {kind} {dtype} dense peak"


if __name__ == "__main__":  # `python -m experiments.train.peak_flops [--refresh]`: show / re-measure
    import sys

    flops, src = cpu_host_peak("float32", refresh="--refresh" in sys.argv)
    print(f"{flops / 1e9:.1f} GFLOP/s float32 host peak: {src}")
