"""Device mesh from `sharding.{data,fsdp,tensor}` and the named layouts.

-1 on (at most) one axis means "all remaining devices". On one process the mesh may use a prefix
of the devices (a 1-device run on a host with 8 simulated devices); with several processes it
must use all of them.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from models.base.errors import ConfigError
from sharding.rules import MESH_AXES

# Auto axes: shardings are propagated by XLA from our constraints (explicit-sharding mode would
# require every op to be annotated).
_AUTO = (AxisType.Auto,) * len(MESH_AXES)

# Named layouts (data, fsdp, tensor); -1 = fill with the remaining devices.
LAYOUTS: dict[str, tuple[int, int, int]] = {
    "single": (1, 1, 1),
    "dp": (-1, 1, 1),
    "fsdp": (1, -1, 1),
    "tp": (1, 1, -1),
    "dp_tp": (-1, 1, 2),
    "fsdp_tp": (1, -1, 2),
}


def resolve_axis_sizes(sizes: Sequence[int], n_devices: int) -> tuple[int, int, int]:
    """Replace a single -1 by the remaining device count; check the product fits."""
    sizes = [int(s) if not isinstance(s, bool) else s for s in sizes]
    for name, s in zip(MESH_AXES, sizes):
        if isinstance(s, bool) or not isinstance(s, int) or (s < 1 and s != -1):
            raise ConfigError(f"sharding.{name} must be a positive integer or -1 (got {s!r})")
    fill = [i for i, s in enumerate(sizes) if s == -1]
    if len(fill) > 1:
        raise ConfigError("only one of sharding.data/fsdp/tensor may be -1")
    fixed = math.prod(s for s in sizes if s != -1)
    if fill:
        if n_devices % fixed:
            raise ConfigError(f"sharding: fixed axes multiply to {fixed}, which does not divide the "
                              f"{n_devices} available devices, so -1 cannot fill them")
        sizes[fill[0]] = n_devices // fixed
    total = math.prod(sizes)
    if total > n_devices:
        desc = " x ".join(f"{n}={s}" for n, s in zip(MESH_AXES, sizes))
        raise ConfigError(f"sharding mesh {desc} needs {total} devices but only {n_devices} are available")
    return tuple(sizes)  # type: ignore[return-value]


def make_mesh(sizes: Sequence[int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh with axes (data, fsdp, tensor) of the given resolved sizes."""
    devices = list(jax.devices() if devices is None else devices)
    n = math.prod(sizes)
    if jax.process_count() > 1 and n != len(devices):
        raise ConfigError(f"multi-process runs must use all {len(devices)} devices "
                          f"(sharding axes multiply to {n})")
    if n == len(devices):
        try:
            return jax.make_mesh(tuple(sizes), MESH_AXES, devices=devices, axis_types=_AUTO)
        except Exception:  # noqa: BLE001 - fall back to a plain row-major layout
            pass
    return Mesh(np.array(devices[:n]).reshape(tuple(sizes)), MESH_AXES, axis_types=_AUTO)
