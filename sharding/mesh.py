"""The JAX device mesh of resolved `sharding.{data,fsdp,tensor}` sizes (and `stage`, `context`,
`expert`).

Axis sizes, the -1 rule and the named layouts (conf/sharding/*.yaml) are sharding/layouts.py,
which needs no JAX. On one process the mesh may use a prefix of the devices (a 1-device run on a
host with 8 simulated devices); with several processes it must use all of them.
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


def make_mesh(
    sizes: Sequence[int],
    devices: Sequence[jax.Device] | None = None,
    stage: int = 1,
    context: int = 1,
    expert: int = 1,
) -> Mesh:
    """Mesh with axes MESH_AXES of the given resolved sizes (missing trailing axes are 1);
    `stage` = the number of pipeline stages (`sharding.pipeline`), `context` = the number of
    sequence shards (`sharding.context`), `expert` = the expert-parallel ranks (`sharding.expert`)."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = list(sizes) + [1] * (len(MESH_AXES) - len(sizes))
    sizes[MESH_AXES.index("stage")] *= stage
    sizes[MESH_AXES.index("context")] *= context
    sizes[MESH_AXES.index("expert")] *= expert
    n = math.prod(sizes)
    if jax.process_count() > 1 and n != len(devices):
        raise ConfigError(
            f"multi-process runs must use all {len(devices)} devices (sharding axes multiply to {n})"
        )
    if n == len(devices):
        try:
            return jax.make_mesh(tuple(sizes), MESH_AXES, devices=devices, axis_types=_AUTO)
        except Exception:  # noqa: BLE001 - fall back to a plain row-major layout
            pass
    return Mesh(np.array(devices[:n]).reshape(tuple(sizes)), MESH_AXES, axis_types=_AUTO)
