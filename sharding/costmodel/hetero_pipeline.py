"""Mixed clusters, second way: pipeline stages on different device types, sized to their speed.

Where `hetero.py` gives every device group whole model replicas (heterogeneous data parallelism),
here the groups hold consecutive pipeline stages of one model (HetPipe, AMP, HARP): group g holds
p_g of the p = Σ p_g stages, every stage has the same tensor and data parallelism (tp·dp devices),
so a group of n_g devices holds p_g = n_g / (tp·dp) stages. Layers are split so that the stages'
micro-batch times are as even as the device speeds allow (a stage of l layers on device type g
takes l·t_g, the last also the LM head), subject to each stage's memory; one micro-batch slot of
1F1B is the slowest stage plus the slowest stage-to-stage send (a send between groups crosses the
network at the slower group's bandwidth), and the step is (m + p − 1) slots plus each stage's
exposed DP gradient collectives and optimizer step (the slowest stage's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from sharding.costmodel.comm import p2p_time
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from sharding.costmodel.hetero import ClusterRates, DeviceGroup, units_per_group
from sharding.costmodel.memory import MemoryBreakdown, memory_breakdown
from sharding.costmodel.spec import BF16_MIXED, Layout, LayoutError, ModelShape, Precision
from sharding.costmodel.step import estimate_step, expected_max_normal, layer_and_head_time


@dataclasses.dataclass(frozen=True)
class PipelineStageEstimate:
    """One pipeline stage: its device type, layers, time per micro-batch and memory."""

    hardware: str
    layers: int
    microbatch_s: float
    dp_exposed_s: float
    optimizer_s: float
    memory: MemoryBreakdown


@dataclasses.dataclass(frozen=True)
class HeteroPipelineEstimate(ClusterRates):
    """One step of a pipeline whose stages sit on different device types."""

    model: ModelShape
    layout: Layout  # common tp, dp, micro-batch, global batch; pp = number of stages
    groups: tuple[DeviceGroup, ...]
    stages: tuple[PipelineStageEstimate, ...]
    p2p_s: float  # the slowest stage-to-stage send + receive per micro-batch
    slot_s: float
    pipeline_s: float
    bubble_s: float

    @property
    def step_time_s(self) -> float:
        return (
            self.pipeline_s
            + max(s.dp_exposed_s for s in self.stages)
            + max(s.optimizer_s for s in self.stages)
        )

    @property
    def global_batch(self) -> int:
        return self.layout.global_batch

    @property
    def fits(self) -> bool:
        return all(s.memory.fits for s in self.stages)

    @property
    def mem_bytes_per_device(self) -> float:
        return max(s.memory.total for s in self.stages)

    def layers_per_stage(self) -> tuple[int, ...]:
        return tuple(s.layers for s in self.stages)


def _stage_memory(
    model: ModelShape, layout: Layout, layers: int, hw, precision: Precision, eff: Efficiency
) -> MemoryBreakdown:
    """Memory of a stage of `layers` layers: as a stage of a homogeneous pipeline of the same
    depth with that many layers per stage (first stage's in-flight micro-batches, embedding, and
    the last stage's logits: the worse of the two)."""
    stand_in = dataclasses.replace(model, n_layers=layers * layout.pp)
    return memory_breakdown(stand_in, layout, precision, eff, hw.hbm_bytes)


def balance_layers(
    n_layers: int, layer_s: Sequence[float], head_s: float, max_layers: Sequence[int]
) -> list[int] | None:
    """Layers per stage minimising the slowest stage (stage i: l_i·layer_s[i], the last also
    head_s), each within [1, max_layers[i]] and summing to n_layers; None if impossible.

    The smallest feasible slowest-stage time T is where Σ_i min(max_layers[i],
    ⌊(T − head_i)/layer_s[i]⌋) first reaches n_layers: it is one of the finitely many stage
    times l·layer_s[i] (+ head), so a sort of those candidates finds it exactly."""
    p = len(layer_s)
    if p > n_layers or sum(max_layers) < n_layers or min(max_layers) < 1:
        return None
    heads = [0.0] * (p - 1) + [head_s]
    cands = sorted({l * layer_s[i] + heads[i] for i in range(p) for l in range(1, max_layers[i] + 1)})

    def fill(t: float) -> list[int]:
        return [min(max_layers[i], int(math.floor((t - heads[i]) / layer_s[i] + 1e-9))) for i in range(p)]

    for t in cands:
        ls = fill(t)
        if min(ls) >= 1 and sum(ls) >= n_layers:
            # trim the surplus from the stages with the most time to spare
            while sum(ls) > n_layers:
                i = max(
                    (j for j in range(p) if ls[j] > 1),
                    key=lambda j: (t - heads[j]) / layer_s[j] - ls[j] + 1e-12 * j,
                )
                ls[i] -= 1
            return ls
    return None


def _max_stage_layers(
    model: ModelShape, layout: Layout, hw, n_stages: int, precision: Precision, eff: Efficiency
) -> int:
    """The most layers a stage on `hw` holds within its memory (bisection)."""
    lo_k, hi_k = 0, model.n_layers - n_stages + 1
    while lo_k < hi_k:
        mid = (lo_k + hi_k + 1) // 2
        if _stage_memory(model, layout, mid, hw, precision, eff).fits:
            lo_k = mid
        else:
            hi_k = mid - 1
    return lo_k


def _layer_split(
    model: ModelShape,
    layout: Layout,
    stage_hw: list,
    times: dict,
    layers: Sequence[int] | None,
    precision: Precision,
    eff: Efficiency,
) -> list[int]:
    """Layers per stage: `layers` checked, or balanced to the stages' speeds within their memory."""
    p = len(stage_hw)
    if layers is not None:
        split = list(layers)
        if len(split) != p or sum(split) != model.n_layers or min(split) < 1:
            raise LayoutError(
                f"layers per stage {split} must be {p} positive counts summing to {model.n_layers}"
            )
        return split
    kinds = {hw.name: hw for hw in stage_hw}
    cap_of = {name: _max_stage_layers(model, layout, hw, p, precision, eff) for name, hw in kinds.items()}
    caps = [cap_of[hw.name] for hw in stage_hw]
    split = balance_layers(
        model.n_layers, [times[hw.name][0] for hw in stage_hw], times[stage_hw[-1].name][1], caps
    )
    if split is None:
        raise LayoutError(f"no split of {model.n_layers} layers over {p} stages fits every stage's memory")
    return split


def _stage_estimates(
    model: ModelShape,
    layout: Layout,
    stage_hw: list,
    split: list[int],
    times: dict,
    precision: Precision,
    eff: Efficiency,
) -> list[PipelineStageEstimate]:
    """Every stage's micro-batch time, and its DP, optimizer and memory from a homogeneous stand-in."""
    p = len(stage_hw)
    stages, stage_est = [], {}
    for i, (hw, k) in enumerate(zip(stage_hw, split)):
        layer_s, head_s = times[hw.name]
        if (hw.name, k) not in stage_est:  # this stage's DP, optimizer and memory (stand-in)
            stand_in = dataclasses.replace(model, n_layers=k * p)
            stage_est[hw.name, k] = estimate_step(stand_in, layout, hw, precision, eff)
        est = stage_est[hw.name, k]
        stages.append(
            PipelineStageEstimate(
                hardware=hw.name,
                layers=k,
                microbatch_s=k * layer_s + (head_s if i == p - 1 else 0.0),
                dp_exposed_s=est.time.dp_comm_exposed,
                optimizer_s=est.time.optimizer,
                memory=est.memory,
            )
        )
    return stages


def _slowest_send(
    model: ModelShape, layout: Layout, stage_hw: list, per_stage: int, precision: Precision, eff: Efficiency
) -> float:
    """The slowest stage-to-stage activation send of one micro-batch."""
    act = model.seq_len * layout.micro_batch // layout.cp * model.d_model * precision.act_bytes / layout.tp
    sends = []
    for a, b in zip(stage_hw, stage_hw[1:]):  # a stage's tp·dp devices send at once
        if a.name == b.name:
            same_node = 2 * per_stage <= a.devices_per_node
            sends.append(p2p_time(act, same_node, a, eff.link_effs, per_stage))
        else:  # across groups: over the network, at the slower group's bandwidth
            slow = min((a, b), key=lambda h: h.inter_node_bw)
            sends.append(p2p_time(act, False, slow, eff.link_effs, per_stage))
    return max(sends)


def estimate_hetero_pipeline(
    model: ModelShape,
    layout: Layout,
    groups: Sequence[DeviceGroup],
    layers: Sequence[int] | None = None,
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
) -> HeteroPipelineEstimate:
    """The step of `layout` (tp, dp, micro-batch, global batch, ZeRO, checkpointing, kernels;
    its pp is replaced by the number of stages the groups hold) with the groups' stages in the
    order given. `layers`: layers per stage (default: balanced to the device speeds within each
    stage's memory). Raises LayoutError when a group's device count is not a multiple of tp·dp,
    or no split of the layers fits."""
    per_stage = layout.tp * layout.dp
    n_stages = units_per_group(groups, per_stage, f"tp×dp = {layout.tp}×{layout.dp} (one pipeline stage)")
    stage_hw = [g.hardware for g, n in zip(groups, n_stages) for _ in range(n)]
    kinds = {hw.name: hw for hw in stage_hw}
    p = len(stage_hw)
    if layout.interleave != 1 or layout.gspmd_pipeline:
        raise LayoutError(
            "a mixed-device pipeline is modelled for plain 1F1B (interleave 1, not the GSPMD pipeline)"
        )
    lo = layout.replace(pp=p)
    if p < 2 or p > model.n_layers:
        raise LayoutError(f"a mixed-device pipeline needs 2..{model.n_layers} stages (got {p})")
    times = {name: layer_and_head_time(model, lo, hw, precision, eff) for name, hw in kinds.items()}
    split = _layer_split(model, lo, stage_hw, times, layers, precision, eff)
    stages = _stage_estimates(model, lo, stage_hw, split, times, precision, eff)
    p2p = 2 * _slowest_send(model, lo, stage_hw, per_stage, precision, eff)
    slot = (max(s.microbatch_s for s in stages) + p2p) * (1 + eff.stage_jitter * expected_max_normal(p))
    n_mb = lo.grad_accum
    return HeteroPipelineEstimate(
        model=model,
        layout=lo,
        groups=tuple(groups),
        stages=tuple(stages),
        p2p_s=p2p,
        slot_s=slot,
        pipeline_s=(n_mb + p - 1) * slot,
        bubble_s=(p - 1) * slot,
    )
