"""Multi-host start-up: `jax.distributed.initialize` from explicit config or the environment.

Sources, first match wins:
1. explicit `distributed.{coordinator_address, num_processes, process_id}` in the config;
2. `SCALELAB_COORDINATOR` / `SCALELAB_NUM_PROCESSES` / `SCALELAB_PROCESS_ID` env variables;
3. SLURM (`SLURM_NTASKS` > 1 in a job step): coordinator = first host of `SLURM_STEP_NODELIST`
   (or `SLURM_JOB_NODELIST`), process id = `SLURM_PROCID`, count = `SLURM_NTASKS`.
With one process (or none of the above) it does nothing. Must run before any JAX computation.
"""

from __future__ import annotations

import enum
import os
import re
from typing import Any, Mapping

from models.base.errors import ConfigError

DEFAULT_PORT = 12355


class InitSource(enum.StrEnum):
    """Where `resolve` found the multi-process arguments (its result's "source")."""

    CONFIG = "config"  # distributed.* in the config
    ENV = "env"  # SCALELAB_* environment variables
    SLURM = "slurm"  # a SLURM job step


def _first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list like 'gpu[003-005,7],cpu1' -> 'gpu003'."""
    m = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ConfigError(f"cannot parse SLURM node list {nodelist!r}")
    prefix, _, ranges = m.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def resolve(cfg: Mapping[str, Any] | None, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Arguments for jax.distributed.initialize, or None for a single-process run."""
    env = os.environ if env is None else env
    cfg = dict(cfg or {})
    addr, n, pid = cfg.get("coordinator_address"), cfg.get("num_processes"), cfg.get("process_id")
    source = InitSource.CONFIG
    if addr is None and n is None and env.get("SCALELAB_COORDINATOR"):
        addr = env["SCALELAB_COORDINATOR"]
        n, pid = env.get("SCALELAB_NUM_PROCESSES"), env.get("SCALELAB_PROCESS_ID")
        source = InitSource.ENV
    elif addr is None and n is None and int(env.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in env:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        port = int(cfg.get("port") or env.get("SCALELAB_PORT", DEFAULT_PORT))
        addr = f"{_first_slurm_host(nodes)}:{port}"
        n, pid, source = env["SLURM_NTASKS"], env["SLURM_PROCID"], InitSource.SLURM
    if addr is None and n is None:
        return None
    try:
        n, pid = int(n), int(pid)
    except (TypeError, ValueError):
        raise ConfigError(
            f"distributed ({source}): coordinator_address, num_processes and process_id "
            f"must all be given (got {addr!r}, {n!r}, {pid!r})"
        ) from None
    if not addr or ":" not in str(addr):
        raise ConfigError(f"distributed.coordinator_address must be host:port (got {addr!r})")
    if n < 1 or not 0 <= pid < n:
        raise ConfigError(f"distributed: need 0 <= process_id < num_processes (got {pid}, {n})")
    if n == 1:
        return None
    out = {"coordinator_address": str(addr), "num_processes": n, "process_id": pid, "source": source}
    if cfg.get("local_device_ids") is not None:
        out["local_device_ids"] = list(cfg["local_device_ids"])
    return out


_initialized = False


def initialize(
    cfg: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """Initialize jax.distributed if the config/environment describe a multi-process job."""
    global _initialized
    args = resolve(cfg, env)
    if args is None or _initialized:
        return args
    import jax  # lazy: `resolve` (env/SLURM parsing) is used by tests and tools without JAX

    kwargs = {k: v for k, v in args.items() if k != "source"}
    collectives = (cfg or {}).get("cpu_collectives") or "gloo"
    try:  # collectives between CPU processes (no effect on GPU/TPU)
        jax.config.update("jax_cpu_collectives_implementation", collectives)
    except Exception:  # noqa: BLE001 - option absent in some JAX builds
        pass
    jax.distributed.initialize(**kwargs)
    _initialized = True
    return args
