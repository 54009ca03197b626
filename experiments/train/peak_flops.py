"""Peak FLOP/s per device, the denominator of MFU.

Accelerators: vendor-stated dense peak throughput (no sparsity) by compute dtype, from the one
hardware catalogue, `conf/hardware/*.yaml` (read by `sharding.costmodel.hardware`; each file cites
its sources). A device is found by its JAX `device_kind` through each entry's `device_kinds`; the
bfloat16 peak is `peak_flops`, the float32 one `peak_flops_float32`: the TF32 tensor-core peak on
NVIDIA (XLA's default matmul precision on those GPUs); TPUs run f32 matmuls through bf16 passes,
so their bf16 peak. To add an accelerator, add (or extend) its YAML file.

CPU: no meaningful table exists, so the peak is *measured* (jitted matmuls, ~8 s) per machine
(CPU model, core count, dtype, JAX version) and cached in `~/.cache/scalelab/peak_flops.json`.
Simulated CPU devices (`--xla_force_host_platform_device_count`) share one host's cores, so the
host peak is split evenly over the mesh devices on that host.

RULE, so that a peak measured under contention cannot stick (it once did: a figure taken while
the test suite ran read 2-4x low, and every later run reported MFU 1.2-2):
- the cache keeps the *highest* figure ever measured for its key, and a new measurement replaces
  it only when higher. Contention (other processes, a noisy VM neighbour, throttling) can only make
  a matmul slower, never faster, so the maximum over measurements is the best estimate of the
  true peak and a low reading is harmless;
- it is measured again at the next run start (or `peak_flops --refresh`) when it is older than
  REFRESH_AFTER_S (6 h: a VM moved to another host under the same CPU name, or steal time that the
  load average does not show), when it was taken on a busy machine (`contended`), or when a run
  saw MFU > 1 against it (`stale`, set by `mark_cpu_peak_stale`);
- automatic re-measurements happen only when the 1-minute load average is below QUIET_LOAD (one
  busy core): on a busy machine they would read low and be ignored, and only cost the run ~8 s.
  The first measurement on a machine is taken whatever the load (there is nothing else to use)
  and is flagged `contended` when the machine was busy.
An MFU above 1 is impossible: `checked_mfu` records it as null with the raw figure apart
(`mfu_raw`) and the trainer prints one `stale_peak_warning` line.

    python -m experiments.train.peak_flops             # the cached peak (measured if RULE says so)
    python -m experiments.train.peak_flops --refresh   # measure now; the highest figure stays
"""

from __future__ import annotations

import dataclasses
import json
import math
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
# RULE (module docstring): the cached peak is the highest measured; re-measured when it is older than
# REFRESH_AFTER_S, was taken on a busy machine, or a run saw MFU > 1 against it, and only when the
# 1-minute load average is below QUIET_LOAD (a busy machine can only read low).
REFRESH_AFTER_S = 6 * 3600.0
QUIET_LOAD = 1.0  # runnable processes: less than one core kept busy by anything else
MFU_MAX = 1.0  # an MFU above it is impossible: the peak is too low (checked_mfu)


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


def _load_average() -> float:
    """The 1-minute load average (runnable processes), or 0 where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _read_cache(path: Path) -> dict[str, Any]:
    if path.is_file():
        try:
            cache = json.loads(path.read_text())
            return cache if isinstance(cache, dict) else {}
        except (OSError, ValueError):
            return {}
    return {}


def _checked_at(entry: dict[str, Any]) -> float:
    """When `entry` was last measured (epoch seconds); entries of older versions only have
    `measured_at`, local time."""
    if isinstance(entry.get("checked_at_unix"), (int, float)):
        return float(entry["checked_at_unix"])
    try:
        return time.mktime(time.strptime(entry["measured_at"], "%Y-%m-%dT%H:%M:%S"))
    except (KeyError, TypeError, ValueError):
        return 0.0


def _cpu_key(dtype: str) -> str:
    return f"{_cpu_model()}|{os.cpu_count()}|{dtype}|jax-{jax.__version__}|{_METHOD_VERSION}"


def _needs_measuring(entry: dict[str, Any] | None, load: float, now: float) -> str | None:
    """Why the cached `entry` must be measured again now (None: use it as it is); RULE above."""
    if entry is None or not isinstance(entry.get("flops"), (int, float)) or not entry["flops"] > 0:
        return "no peak cached"
    if load >= QUIET_LOAD:
        return None  # busy: a measurement now would read low, and the max rule would ignore it
    if entry.get("stale"):
        return "a run saw MFU > 1 against it"
    if entry.get("contended"):
        return "it was measured on a busy machine"
    if now - _checked_at(entry) > REFRESH_AFTER_S:
        return f"last measured over {REFRESH_AFTER_S / 3600:.0f} h ago"
    return None


@dataclasses.dataclass(frozen=True)
class Peak:
    """A device's peak FLOP/s, where it came from and (measured CPU peaks) when it was measured."""

    flops: float
    source: str
    measured_at: str | None = None  # local time, %Y-%m-%dT%H:%M:%S; None for a catalogued peak
    measured: bool = False  # measured on this machine (else the hardware catalogue's figure)


def cpu_host_peak_info(dtype: str = "float32", refresh: bool = False) -> Peak:
    """The host's peak (`Peak.flops` in FLOP/s), cached in `~/.cache/scalelab/peak_flops.json`
    and kept current by RULE (see the module's docstring); `refresh` measures now, busy or not."""
    key, path = _cpu_key(dtype), _cache_file()
    cache = _read_cache(path)
    entry = cache.get(key) if isinstance(cache.get(key), dict) else None
    load, now = _load_average(), time.time()
    if refresh or _needs_measuring(entry, load, now):
        flops = measure_cpu_host_peak(dtype)
        cache = _read_cache(path)  # another process may have measured meanwhile
        old = cache.get(key) if isinstance(cache.get(key), dict) else None
        cache[key] = entry = _merged_entry(old, flops, load, now, dtype)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, cache)
    assert entry is not None
    busy = " (measured on a busy machine: re-measured when quiet)" if entry.get("contended") else ""
    src = (
        f"measured on CPU ({key}; {entry['method']}, highest of {entry.get('measurements', 1)} "
        f"measurement(s), {entry['measured_at']}{busy}; cached in {path})"
    )
    return Peak(float(entry["flops"]), src, entry["measured_at"], measured=True)


def _merged_entry(old: dict[str, Any] | None, flops: float, load: float, now: float, dtype: str) -> dict:
    """The cache entry after a measurement of `flops` at load `load`: RULE's highest-seen peak."""
    quiet = load < QUIET_LOAD
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    if old is None or not isinstance(old.get("flops"), (int, float)) or flops > old["flops"]:
        best = {"flops": flops, "measured_at": stamp, "load_at_measurement": round(load, 2)}
    else:
        best = {k: old[k] for k in ("flops", "measured_at", "load_at_measurement") if k in old}
    return {
        **best,
        "method": f"{_METHOD} ({dtype})",
        "checked_at_unix": now,
        "last_measurement": flops,
        "measurements": int((old or {}).get("measurements", 1 if old else 0)) + 1,
        # busy until one quiet measurement has been taken: then the peak is re-measured at once
        "contended": bool((old or {}).get("contended", old is None)) and not quiet,
        "stale": False,
    }


def cpu_host_peak(dtype: str = "float32", refresh: bool = False) -> tuple[float, str]:
    """(host FLOP/s, description): `cpu_host_peak_info` as a pair."""
    p = cpu_host_peak_info(dtype, refresh)
    return p.flops, p.source


def mark_cpu_peak_stale(dtype: str = "float32") -> None:
    """A run saw MFU > 1 against the cached CPU peak: the next start on a quiet machine measures
    it again (RULE). Best effort: an unwritable cache only loses the mark. `dtype` may be "auto"."""
    path, key = _cache_file(), _cpu_key(resolve_dtype(dtype, "cpu"))
    cache = _read_cache(path)
    if isinstance(cache.get(key), dict) and not cache[key].get("stale"):
        cache[key]["stale"] = True
        try:
            write_json_atomic(path, cache)
        except OSError:
            pass


def peak_info(device: Any, dtype: str, devices_on_host: int = 1) -> Peak:
    """The peak FLOP/s of one mesh device, where the figure came from and when it was measured.
    `dtype` may be model.dtype's "auto", read as the model reads it on this device's platform
    (bfloat16 on accelerators)."""
    dtype = resolve_dtype(dtype, getattr(device, "platform", "cpu"))
    kind = getattr(device, "device_kind", str(device))
    if getattr(device, "platform", "") == "cpu":
        host = cpu_host_peak_info(dtype)
        src = host.source
        if devices_on_host > 1:
            src += f"; host peak split over {devices_on_host} simulated devices"
        return Peak(host.flops / max(devices_on_host, 1), src, host.measured_at, measured=True)
    hw = hardware_for_device_kind(kind)
    peak = None if hw is None else hw.peak_flops_for(dtype)
    if peak is None:
        return Peak(
            float("nan"),
            f"unknown device kind {kind!r}: no {dtype} peak in conf/hardware/*.yaml "
            f"(add the chip's `device_kinds` and peaks there)",
        )
    return Peak(peak, f"conf/hardware/{hw.name}.yaml: {kind} {dtype} dense peak")


def peak_flops_per_device(device: Any, dtype: str, devices_on_host: int = 1) -> tuple[float, str]:
    """(peak FLOP/s of one mesh device, where the figure came from): `peak_info` as a pair."""
    p = peak_info(device, dtype, devices_on_host)
    return p.flops, p.source


def checked_mfu(mfu: float | None) -> tuple[float | None, float | None]:
    """(the MFU to record, the raw figure when it is impossible). An MFU above 1 cannot be true:
    the peak it divides by is too low (measured on a busy machine, or a wrong catalogue entry), so
    it is recorded as None (null) and the raw figure is kept apart (`mfu_raw`)."""
    if mfu is None or not math.isfinite(mfu):
        return None, None
    return (mfu, None) if mfu <= MFU_MAX else (None, mfu)


def stale_peak_warning(mfu: float, peak: Peak) -> str:
    """The one `warning:` line a run prints the first time its MFU comes out above 1."""
    per = f"{peak.flops / 1e9:.1f} GFLOP/s per device"
    if peak.measured:
        why = (
            f"the CPU peak it divides by ({per}, measured {peak.measured_at}) is stale or was measured "
            "on a busy machine; re-measure it with `python -m experiments.train.peak_flops --refresh` "
            "on a quiet machine (the next quiet start re-measures it anyway)"
        )
    else:
        why = f"the peak it divides by ({per}; {peak.source}) is too low for this device"
    return f"warning: MFU {mfu:.2f} > 1 is impossible: {why}; mfu is recorded as null, the figure as mfu_raw"


def main(argv: list[str] | None = None) -> int:
    """`python -m experiments.train.peak_flops [--refresh] [--dtype float32]`: show the cached CPU
    peak (measuring it if RULE says so), or re-measure it now."""
    import argparse  # deferred: start-up time (the trainer imports this module; only the CLI parses)

    ap = argparse.ArgumentParser(description="This machine's CPU peak FLOP/s, the denominator of MFU.")
    ap.add_argument("--refresh", action="store_true", help="measure now (the highest figure seen is kept)")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    load = _load_average()
    if args.refresh and load >= QUIET_LOAD:
        print(
            f"note: load average {load:.2f} >= {QUIET_LOAD:g}: this measurement may read low; the cache "
            "keeps the highest figure seen, so a low one changes nothing",
            file=sys.stderr,
        )
    p = cpu_host_peak_info(args.dtype, refresh=args.refresh)
    print(f"{p.flops / 1e9:.1f} GFLOP/s {args.dtype} host peak: {p.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
