"""Mixed clusters: one training step on several device types at once (heterogeneous data parallelism).

`--hardware a100-80gb:256,h100-sxm:128` names device groups. Every group runs whole model replicas
with the same tensor / pipeline split (so gradient shards line up across groups) and its own data
parallelism dp_g = n_g / (tp·pp); the global batch is split between the groups in proportion to
their throughput (each rank of a group gets whole micro-batches, so the split is rounded), every
group computes its share of the step at its own speed, and the step waits for the slowest group.
Gradients are then reduced across the groups as well: after each group's own DP collectives
(inside its `StepEstimate`), each rank all-reduces its gradient shard with its counterparts in
the other groups over the slowest inter-node link, exposed (it cannot start before the slowest
group's backward ends). Memory must fit on every group's devices.

The alternative, pipeline stages on different device types with layers sized to each group's
speed, is `hetero_pipeline.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from sharding.costmodel.comm import CollectiveKind, collective_time
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from sharding.costmodel.hardware import Hardware, load_hardware
from sharding.costmodel.memory import stage_params
from sharding.costmodel.spec import BF16_MIXED, Layout, LayoutError, ModelShape, Precision, ZeroStage
from sharding.costmodel.step import MFU_CONVENTION, StepEstimate, estimate_step


@dataclasses.dataclass(frozen=True)
class DeviceGroup:
    """`count` devices of one type."""

    hardware: Hardware
    count: int


def is_mixed(spec: str) -> bool:
    """Whether a --hardware value names device groups (`name:count,...`) rather than one type."""
    return ":" in str(spec)


def parse_cluster(spec: str) -> tuple[DeviceGroup, ...]:
    """`a100-80gb:256,h100-sxm:128` -> device groups (LayoutError, one line, on bad input)."""
    groups = []
    for part in str(spec).split(","):
        name, sep, count = part.strip().rpartition(":")
        if not sep or not name:
            raise LayoutError(
                f"mixed hardware entry {part.strip()!r} must be NAME:COUNT (e.g. a100-80gb:256,h100-sxm:128)"
            )
        try:
            n = int(count)
        except ValueError:
            n = 0
        if n <= 0:
            raise LayoutError(f"mixed hardware entry {part.strip()!r}: COUNT must be a positive integer")
        groups.append(DeviceGroup(load_hardware(name), n))
    names = [g.hardware.name for g in groups]
    if len(set(names)) != len(names):
        raise LayoutError(
            f"mixed hardware lists {sorted(n for n in names if names.count(n) > 1)[0]!r} "
            "twice; give each device type once with its total count"
        )
    return tuple(groups)


class ClusterRates:
    """Rates of one step on a mixed cluster, from its `model`, `groups`, `global_batch` and
    `step_time_s` (shared by both ways of spanning device types)."""

    @property
    def tokens_per_s(self) -> float:
        return self.global_batch * self.model.seq_len / self.step_time_s

    @property
    def n_devices(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def mfu(self) -> float:
        """Model FLOPs (PaLM convention) over the summed peak of every device of the cluster."""
        peak = sum(g.count * g.hardware.peak_flops for g in self.groups)
        return self.tokens_per_s * self.model.model_flops_per_token() / peak

    @property
    def mfu_convention(self) -> str:
        return MFU_CONVENTION


@dataclasses.dataclass(frozen=True)
class HeteroEstimate(ClusterRates):
    """One step on a mixed cluster: each group's own step estimate (with its share of the batch)
    and the exposed cross-group gradient reduction."""

    model: ModelShape
    groups: tuple[DeviceGroup, ...]
    per_group: tuple[StepEstimate, ...]
    sync_s: float

    @property
    def layout(self) -> Layout:
        """The layout of the first group (tp, pp, micro-batch, ZeRO, checkpointing are common)."""
        return self.per_group[0].layout

    @property
    def global_batch(self) -> int:
        return sum(e.layout.global_batch for e in self.per_group)

    @property
    def step_time_s(self) -> float:
        return max(e.step_time_s for e in self.per_group) + self.sync_s

    @property
    def fits(self) -> bool:
        return all(e.fits for e in self.per_group)

    @property
    def mem_bytes_per_device(self) -> float:
        return max(e.memory.total for e in self.per_group)

    def batch_split(self) -> tuple[int, ...]:
        return tuple(e.layout.global_batch for e in self.per_group)


def units_per_group(groups: Sequence[DeviceGroup], unit: int, what: str) -> list[int]:
    """How many units of `unit` devices (a replica, a pipeline stage) each group holds; a
    LayoutError naming `what` when a group's count is not a multiple of it."""
    out = []
    for g in groups:
        if g.count % unit:
            raise LayoutError(f"{g.count} {g.hardware.name} devices are not a multiple of {what}")
        out.append(g.count // unit)
    return out


def _split(total: int, weights: Sequence[float], units: Sequence[int]) -> list[int] | None:
    """`total` sequences split in proportion to `weights`, each part a positive multiple of its
    unit (largest remainder); None when the units do not allow it."""
    if total < sum(units):
        return None
    share = [total * w / sum(weights) for w in weights]
    parts = [max(u, u * int(s // u)) for s, u in zip(share, units)]
    order = sorted(range(len(parts)), key=lambda i: (share[i] - parts[i]) / units[i], reverse=True)
    while sum(parts) < total:
        grown = False
        for i in order:
            if sum(parts) + units[i] <= total:
                parts[i] += units[i]
                grown = True
                break
        if not grown:
            return None
    while sum(parts) > total:
        i = max(range(len(parts)), key=lambda j: parts[j] - share[j] if parts[j] > units[j] else -math.inf)
        if parts[i] <= units[i]:
            return None
        parts[i] -= units[i]
    return parts if sum(parts) == total else None


def estimate_hetero_step(
    model: ModelShape,
    layout: Layout,
    groups: Sequence[DeviceGroup],
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
) -> HeteroEstimate:
    """The step of `layout` (its tp, pp, micro-batch, ZeRO stage, checkpointing, kernels and
    global batch; its dp is ignored) on mixed `groups`. Raises LayoutError when a group's device
    count is not a multiple of tp·pp or the batch cannot be split into whole micro-batches."""
    dps = units_per_group(groups, layout.tp * layout.pp, f"tp×pp = {layout.tp}×{layout.pp}")
    units = [dp * layout.micro_batch for dp in dps]

    def steps(split: Sequence[int]) -> tuple[StepEstimate, ...]:
        return tuple(
            estimate_step(
                model, layout.replace(dp=dp, global_batch=b, zero_group=None), g.hardware, precision, eff
            )
            for g, dp, b in zip(groups, dps, split)
        )

    # split by peak FLOPs first, then by each group's throughput at its share (a pipeline's bubble
    # depends on how many micro-batches a group gets), then move whole micro-batches while that
    # shortens the slowest group
    split = _split(layout.global_batch, [g.count * g.hardware.peak_flops for g in groups], units)
    if split is None:
        raise LayoutError(
            f"global batch {layout.global_batch} cannot be split into whole micro-batches "
            f"of {'/'.join(map(str, units))} sequences per group step"
        )
    per = steps(split)
    for _ in range(3):
        again = _split(layout.global_batch, [e.tokens_per_s for e in per], units)
        if again is None or again == split:
            break
        split, per = again, steps(again)
    improved = True
    while improved:
        improved = False
        slow = max(range(len(per)), key=lambda i: per[i].step_time_s)
        for fast in range(len(per)):
            if fast == slow or split[slow] - units[slow] < units[slow]:
                continue
            moved = units[slow]  # one micro-batch round of the slow group, in the fast group's units
            if moved % units[fast]:
                continue
            trial = list(split)
            trial[slow] -= moved
            trial[fast] += moved
            cand = steps(trial)
            if max(e.step_time_s for e in cand) < max(e.step_time_s for e in per) - 1e-12:
                split, per, improved = trial, cand, True
                break
    # cross-group all-reduce of each rank's gradients over the slowest network link: the full
    # stage gradient (ZeRO 0/1), or its share on the coarser group's partition (ZeRO 2/3: the
    # finer group's shards are parts of it)
    n_stage = max(stage_params(model, per[0].layout))
    shard = n_stage / (min(dps) if layout.zero_stage >= ZeroStage.GRADIENTS else 1)
    slow = min(groups, key=lambda g: g.hardware.inter_node_bw).hardware
    sync, _, _ = collective_time(
        CollectiveKind.ALL_REDUCE, shard * precision.reduce_bytes, len(groups), 1, slow, eff.link_effs
    )
    return HeteroEstimate(model=model, groups=tuple(groups), per_group=per, sync_s=sync)
