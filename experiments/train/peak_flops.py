"""Peak FLOP/s per device, the denominator of MFU.

Accelerators: vendor-stated dense peak throughput (no sparsity) by compute dtype, from the one
hardware catalogue, `conf/hardware/*.yaml` (read by `sharding.costmodel.hardware`; each file cites
its sources). A device is found by its JAX `device_kind` through each entry's `device_kinds`; the
bfloat16 peak is `peak_flops`, the float32 one `peak_flops_float32`: the TF32 tensor-core peak on
NVIDIA (XLA's default matmul precision on those GPUs); TPUs run f32 matmuls through bf16 passes,
so their bf16 peak. To add an accelerator, add (or extend) its YAML file.

CPU: no meaningful table exists, so the peak is *measured* once per machine (CPU model, core
count, dtype, JAX version) with a large jitted matmul and cached in
`~/.cache/scalelab/peak_flops.json`. Simulated CPU devices (`--xla_force_host_platform_device_count`)
share one host's cores, so the host peak is split evenly over the mesh devices on that host.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from models.base.jsonio import write_json_atomic
from models.config import resolve_dtype
from sharding.costmodel.hardware import hardware_for_device_kind

_MATMUL_SHAPES = (1024, 2048)  # n of the n x n x n matmuls timed (the best of them counts)
_REPS = 5
_METHOD = (
    f"best of {_REPS} jitted matmuls of n = {', '.join(map(str, _MATMUL_SHAPES))}, on one device "
    "and on every CPU device at once"
)
_METHOD_VERSION = "v2"  # in the cache key: figures measured the older way (one 2048 matmul) are redone


def table_peak(device_kind: str, dtype: str) -> float | None:
    """Catalogued dense peak FLOP/s of `device_kind` in compute dtype `dtype`, or None."""
    hw = hardware_for_device_kind(device_kind)
    return None if hw is None else hw.peak_flops_for(dtype)


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


def measure_cpu_matmul_peak(
    dtype: str = "float32", n: int = 2048, reps: int = _REPS, parallel: bool = False
) -> float:
    """Best-of-`reps` FLOP/s of a jitted n x n x n matmul: on the first CPU device, or with
    `parallel` one per CPU device at once (simulated devices share the host's cores, and XLA's CPU
    matmul may not fill them all from one device)."""
    devs = jax.devices("cpu") if parallel else jax.devices("cpu")[:1]
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (len(devs), n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(k2, (len(devs), n, n), jnp.float32).astype(dtype)
    sharding = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devs), ("d",)), jax.sharding.PartitionSpec("d")
    )
    a, b = jax.device_put(a, sharding), jax.device_put(b, sharding)
    f = jax.jit(lambda x, y: jnp.einsum("bij,bjk->bik", x, y))
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2.0 * len(devs) * n**3 / best


def measure_cpu_host_peak(dtype: str = "float32") -> float:
    """The host's matmul peak the way XLA reaches it: the best over several shapes, on one device
    and on all devices at once, each the best of several runs."""
    return max(
        measure_cpu_matmul_peak(dtype, n, parallel=parallel)
        for n in _MATMUL_SHAPES
        for parallel in (False, True)
    )


def cpu_host_peak(dtype: str = "float32", refresh: bool = False) -> tuple[float, str]:
    """(host FLOP/s, description); measured once per machine and cached."""
    key = f"{_cpu_model()}|{os.cpu_count()}|{dtype}|jax-{jax.__version__}|{_METHOD_VERSION}"
    path = _cache_file()
    cache: dict[str, Any] = {}
    if path.is_file():
        try:
            cache = json.loads(path.read_text())
        except ValueError:
            cache = {}
    if refresh or key not in cache:
        flops = measure_cpu_host_peak(dtype)
        cache[key] = {
            "flops": flops,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "method": f"{_METHOD} ({dtype})",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, cache)
    e = cache[key]
    return float(e["flops"]), f"measured on CPU ({key}; {e['method']}, {e['measured_at']}; cached in {path})"


def peak_flops_per_device(device: Any, dtype: str, devices_on_host: int = 1) -> tuple[float, str]:
    """(peak FLOP/s of one mesh device, where the figure came from). `dtype` may be model.dtype's
    "auto", read as the model reads it on this device's platform (bfloat16 on accelerators)."""
    dtype = resolve_dtype(dtype, getattr(device, "platform", "cpu"))
    kind = getattr(device, "device_kind", str(device))
    if getattr(device, "platform", "") == "cpu":
        host, src = cpu_host_peak(dtype)
        if devices_on_host > 1:
            src += f"; host peak split over {devices_on_host} simulated devices"
        return host / max(devices_on_host, 1), src
    hw = hardware_for_device_kind(kind)
    peak = None if hw is None else hw.peak_flops_for(dtype)
    if peak is None:
        return float("nan"), (
            f"unknown device kind {kind!r}: no {dtype} peak in conf/hardware/*.yaml "
            f"(add the chip's `device_kinds` and peaks there)"
        )
    return peak, f"conf/hardware/{hw.name}.yaml: {kind} {dtype} dense peak"


if __name__ == "__main__":  # `python -m experiments.train.peak_flops [--refresh]`: show / re-measure
    flops, src = cpu_host_peak("float32", refresh="--refresh" in sys.argv)
    print(f"{flops / 1e9:.1f} GFLOP/s float32 host peak: {src}")
