"""Mesh axis sizes (`sharding.{data,fsdp,tensor,context,expert,...}`) and the named layouts, without JAX.

The named layouts are conf/sharding/*.yaml, the one table of them: `sharding=dp_tp` on the
command line and `LAYOUTS["dp_tp"]` here read the same file. Each file sets only the axes that
differ from `ShardingConfig`'s defaults. -1 on (at most) one axis means "all remaining devices";
`resolve_axis_sizes` turns it into a number once the device count is known. The JAX mesh itself
is built by sharding/mesh.py.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from models.base.configs import config_from_mapping, is_int
from models.base.errors import ConfigError

LAYOUTS_DIR = Path(__file__).resolve().parents[1] / "conf" / "sharding"


class PipelineSchedule(enum.StrEnum):
    """`sharding.pipeline_schedule`, the strings of the YAML (sharding/pipeline.py runs them;
    sharding/validate.py: `check_pipeline` checks them)."""

    GPIPE = "gpipe"  # all forwards, then all backwards (one layer chunk per stage)
    ONE_F_ONE_B = "1f1b"  # accepted; runs GPipe's order here (XLA schedules the backward scan)
    INTERLEAVED = "interleaved"  # V layer chunks per stage, depth-first: P micro-batches per loop
    BREADTH_FIRST = "breadth_first"  # V layer chunks per stage, all M micro-batches per loop


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """`sharding.*`: the mesh axis sizes; -1 on one axis = fill it with the remaining devices."""

    data: int = 1  # data parallel: batch rows split, parameters replicated
    fsdp: int = 1  # fully sharded data parallel: batch rows and parameters split
    tensor: int = 1  # tensor parallel: heads / MLP width / vocabulary split
    context: int = 1  # context parallel: the sequence split (attention all-gathers K/V)
    expert: int = 1  # expert parallel: a mixture of experts' routed experts split (and the batch)
    sequence_parallel: bool = False  # Megatron SP: norms/residuals sequence-split over `tensor`
    pipeline: int = 1  # pipeline stages: the `stage` mesh axis (sharding/pipeline.py)
    pipeline_schedule: str = PipelineSchedule.GPIPE.value  # gpipe | 1f1b | interleaved | breadth_first
    virtual_stages: int = 1  # layer chunks per stage for pipeline_schedule=interleaved / breadth_first

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "ShardingConfig":
        return config_from_mapping(cls, m, "sharding")

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(data, fsdp, tensor), possibly with one -1 (the axes every layout has; the newer
        axes are separate fields, so existing 3-tuples keep their meaning)."""
        return (self.data, self.fsdp, self.tensor)


# The integer mesh-size fields (booleans / schedules are not axes). Sequences of sizes follow this
# order; shorter ones mean the missing trailing axes are 1.
AXES = ("data", "fsdp", "tensor", "context")


def load_layouts(directory: Path = LAYOUTS_DIR) -> dict[str, tuple[int, int, int]]:
    """{layout name: (data, fsdp, tensor)} from the YAML files of `directory` (their Hydra
    `defaults` list only names the schema, so it is skipped)."""
    layouts = {}
    for path in sorted(directory.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        raw.pop("defaults", None)
        layouts[path.stem] = ShardingConfig.from_mapping(raw).sizes
    return layouts


# Named layouts (data, fsdp, tensor), read from conf/sharding/*.yaml.
LAYOUTS: dict[str, tuple[int, int, int]] = load_layouts()


def resolve_axis_sizes(sizes: Sequence[int], n_devices: int) -> tuple[int, int, int]:
    """Replace a single -1 by the remaining device count; check the product fits."""
    sizes = [int(s) if not isinstance(s, bool) else s for s in sizes]
    for name, s in zip(AXES, sizes):
        if not is_int(s) or (s < 1 and s != -1):
            raise ConfigError(f"sharding.{name} must be a positive integer or -1 (got {s!r})")
    fill = [i for i, s in enumerate(sizes) if s == -1]
    if len(fill) > 1:
        raise ConfigError("only one of sharding.data/fsdp/tensor may be -1")
    fixed = math.prod(s for s in sizes if s != -1)
    if fill:
        if n_devices % fixed:
            raise ConfigError(
                f"sharding: fixed axes multiply to {fixed}, which does not divide the "
                f"{n_devices} available devices, so -1 cannot fill them"
            )
        sizes[fill[0]] = n_devices // fixed
    total = math.prod(sizes)
    if total > n_devices:
        desc = " x ".join(f"{n}={s}" for n, s in zip(AXES, sizes))
        raise ConfigError(f"sharding mesh {desc} needs {total} devices but only {n_devices} are available")
    return tuple(sizes)  # type: ignore[return-value]
