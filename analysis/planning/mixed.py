"""Planning on a mixed cluster: `plan --budget C --hardware a100-80gb:256,h100-sxm:128`.

The law's compute-optimal shapes (as for one device type) are laid out on every device group at
once, two ways: heterogeneous data parallelism (sharding/costmodel/hetero.py: a common tensor /
pipeline split, each group its own data parallelism and a throughput-proportional share of the
batch, one exposed cross-group gradient all-reduce over the slowest link), or a pipeline whose
stages sit on different device types (sharding/costmodel/hetero_pipeline.py: a common tensor /
data split, each group whole stages, layers sized to each group's speed and memory); the
fastest layout that fits every group wins. The same budget is planned on each device group alone (`plan()`),
so the answer says what the mix buys: days on the mix against days on the best single group.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from analysis.laws.allocation import ScalingLaw
from analysis.planning.planner import (
    Plan,
    band_text,
    check_request,
    efficiency_note,
    layouts_for,
    plan,
    shapes_near,
    size_targets,
)
from models.base.errors import AnalysisError
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    MFU_CONVENTION,
    Efficiency,
    LayoutError,
    ModelShape,
    Precision,
)
from sharding.costmodel.hetero import DeviceGroup, HeteroEstimate, estimate_hetero_step, parse_cluster
from sharding.costmodel.hetero_pipeline import HeteroPipelineEstimate, estimate_hetero_pipeline


@dataclasses.dataclass(frozen=True)
class MixedPlan:
    """The best shape and layout on the whole mixed cluster, and each group's own plan."""

    groups: tuple[DeviceGroup, ...]
    shape: ModelShape
    tokens: float
    estimate: HeteroEstimate | HeteroPipelineEstimate
    loss: float
    budget_flops: float
    subsets: tuple[Plan | None, ...]  # the same budget on each group alone (None: does not fit)
    eff: Efficiency
    # share of the wall-clock that trains (conf/plan_costs.yaml), as in the single-group plans
    goodput: float = 1.0

    @property
    def days(self) -> float:
        return self.tokens / self.estimate.tokens_per_s / 86400 / self.goodput

    @property
    def gpu_hours(self) -> float:
        return self.days * 24 * self.estimate.n_devices

    @property
    def best_subset(self) -> Plan | None:
        fits = [p for p in self.subsets if p is not None]
        return min(fits, key=lambda p: p.best.days) if fits else None

    @property
    def speedup(self) -> float | None:
        """Days on the best single group / days on the mix (> 1: the mix is faster)."""
        b = self.best_subset
        return None if b is None else b.best.days / self.days

    @property
    def mode(self) -> str:
        """data: every group whole replicas; pipeline: every group whole pipeline stages."""
        return "pipeline" if isinstance(self.estimate, HeteroPipelineEstimate) else "data"

    def _layout_dict(self) -> dict[str, Any]:
        e, lo = self.estimate, self.estimate.layout
        out = {
            "mode": self.mode,
            "tp": lo.tp,
            "pp": lo.pp,
            "micro_batch": lo.micro_batch,
            "zero_stage": lo.zero_stage,
            "act_ckpt": lo.act_ckpt,
            "sp": lo.sp,
            "global_batch": e.global_batch,
        }
        if self.mode == "pipeline":
            out.update(
                dp=lo.dp,
                layers_per_stage=list(e.layers_per_stage()),
                stage_hardware=[st.hardware for st in e.stages],
            )
        else:
            out.update(dp_per_group=[p.layout.dp for p in e.per_group], batch_per_group=list(e.batch_split()))
        return out

    def as_dict(self) -> dict[str, Any]:
        e = self.estimate
        if self.mode == "pipeline":
            timing = {
                "stage_microbatch_s": [st.microbatch_s for st in e.stages],
                "bubble_s": e.bubble_s,
                "mem_gb_per_device": [st.memory.total / 1e9 for st in e.stages],
            }
        else:
            timing = {
                "cross_group_sync_s": e.sync_s,
                "group_step_time_s": [p.step_time_s for p in e.per_group],
                "mem_gb_per_device": [p.memory.total / 1e9 for p in e.per_group],
            }
        best = {
            "n_params": self.shape.n_params,
            "tokens": self.tokens,
            "n_layers": self.shape.n_layers,
            "d_model": self.shape.d_model,
            "layout": self._layout_dict(),
            "step_time_s": e.step_time_s,
            **timing,
            "tokens_per_s": e.tokens_per_s,
            "mfu": e.mfu,
            "mfu_convention": MFU_CONVENTION,
            "mfu_interval": self.eff.rate_interval(e.mfu, e.mfu),
            "days": self.days,
            "days_interval": self.eff.time_interval(self.days, e.mfu),
            "gpu_hours": self.gpu_hours,
            "gpu_hours_interval": self.eff.time_interval(self.gpu_hours, e.mfu),
            "loss": self.loss,
        }
        # The one plan schema (Plan.as_dict): `best` and the run's context at the top level; what
        # only a mixed cluster has (its groups, each group alone, the speed-up) under `mixed`.
        return {
            "best": best,
            "candidates": [best],
            "mfu_convention": MFU_CONVENTION,
            "hardware": ",".join(f"{g.hardware.name}:{g.count}" for g in self.groups),
            "n_devices": e.n_devices,
            "budget_flops": self.budget_flops,
            "efficiency": {
                "provenance": self.eff.provenance,
                "mfu_ratio_interval": (
                    list(self.eff.mfu_ratio_interval) if self.eff.mfu_ratio_interval else None
                ),
                "note": efficiency_note(self.eff),
            },
            "mixed": {
                "groups": [{"hardware": g.hardware.name, "count": g.count} for g in self.groups],
                "mode": self.mode,
                "subsets": [
                    None
                    if p is None
                    else {
                        "hardware": p.hardware.name,
                        "n_devices": p.n_devices,
                        "days": p.best.days,
                        "n_params": p.best.shape.n_params,
                        "mfu": p.best.mfu,
                    }
                    for p in self.subsets
                ],
                "speedup_over_best_subset": self.speedup,
            },
        }

    def text(self) -> str:
        e, lo = self.estimate, self.estimate.layout
        mix = " + ".join(f"{g.count} x {g.hardware.name}" for g in self.groups)
        if self.mode == "pipeline":
            stages = ", ".join(
                f"{st.hardware}: {st.layers} layers, {st.microbatch_s * 1e3:.0f} ms" for st in e.stages
            )
            how = (
                f"tp={lo.tp} dp={lo.dp} pp={lo.pp} mb={lo.micro_batch} ZeRO-{lo.zero_stage} "
                f"ckpt={lo.act_ckpt}, batch {e.global_batch}; pipeline stages across device "
                f"types, layers sized to speed ({stages}); bubble {e.bubble_s:.2f} s"
            )
        else:
            split = ", ".join(
                f"{g.hardware.name}: dp {p.layout.dp}, {p.layout.global_batch} seqs, "
                f"{p.step_time_s:.2f} s, {p.memory.total / 1e9:.0f} GB/device"
                for g, p in zip(self.groups, e.per_group)
            )
            how = (
                f"tp={lo.tp} pp={lo.pp} mb={lo.micro_batch} ZeRO-{lo.zero_stage} "
                f"ckpt={lo.act_ckpt}, batch {e.global_batch} split by throughput ({split}); "
                f"cross-group gradient all-reduce {e.sync_s:.2f} s"
            )
        lines = [
            f"mixed cluster {mix}: {self.shape.n_params / 1e9:.1f}B params (L={self.shape.n_layers}, "
            f"d={self.shape.d_model}) on {self.tokens / 1e12:.2f}T tokens, {how}; "
            f"step {e.step_time_s:.2f} s, "
            f"MFU {100 * e.mfu:.1f}%{band_text(self.eff.rate_interval(e.mfu, e.mfu), 100, '.1f')} "
            f"({MFU_CONVENTION}, of the summed peak), {self.days:.1f}"
            f"{band_text(self.eff.time_interval(self.days, e.mfu), 1, '.1f')} days "
            f"({self.gpu_hours:.3g} GPU-hours), loss {self.loss:.3f}"
        ]
        for g, p in zip(self.groups, self.subsets):
            lines.append(
                f"  {g.hardware.name} alone ({g.count}): "
                + (
                    "no layout fits"
                    if p is None
                    else f"{p.best.shape.n_params / 1e9:.1f}B params, {p.best.days:.1f} days, "
                    f"MFU {100 * p.best.mfu:.1f}%"
                )
            )
        s = self.speedup
        if s is not None:
            lines.append(
                f"  the mix is {s:.2f}x as fast as the best single group "
                f"({self.best_subset.hardware.name}) for the same budget"
            )
        lines.append(f"note: {efficiency_note(self.eff)}")
        return "\n".join(lines)


def fastest_mixed_layout(
    shape: ModelShape,
    groups: tuple[DeviceGroup, ...],
    batch_tokens: int,
    precision: Precision,
    eff: Efficiency,
) -> HeteroEstimate | HeteroPipelineEstimate | None:
    """The fastest layout that fits every group: heterogeneous data parallelism with the smallest
    group's candidate tp × pp, or a mixed-device pipeline with its candidate tp × dp."""
    small = min(groups, key=lambda g: g.count)
    best = None
    tried_stages = set()
    for lo in layouts_for(shape, small.count, small.hardware, batch_tokens):
        if lo.tp > min(g.hardware.devices_per_node for g in groups):
            continue
        cands = []
        try:
            cands.append(estimate_hetero_step(shape, lo, groups, precision, eff))
        except LayoutError:
            pass
        stage = (lo.tp, lo.dp, lo.micro_batch, lo.zero_stage, lo.act_ckpt, lo.sp, lo.global_batch)
        if lo.interleave == 1 and stage not in tried_stages:
            tried_stages.add(stage)
            try:
                cands.append(estimate_hetero_pipeline(shape, lo, groups, None, precision, eff))
            except LayoutError:
                pass
        for est in cands:
            if est.fits and (best is None or est.tokens_per_s > best.tokens_per_s):
                best = est
    return best


def _best_mixed_shape(
    req: Any,
    groups: tuple[DeviceGroup, ...],
    hardware: str,
    batch_tokens: int,
    precision: Precision,
    eff: Efficiency,
) -> tuple[float, ModelShape, HeteroEstimate | HeteroPipelineEstimate]:
    """(loss, shape, estimate) of the planned shape with the lowest predicted loss that has a layout
    fitting every group (ties: the faster one)."""
    _, _, targets = size_targets(req)
    best: tuple[float, ModelShape, HeteroEstimate | HeteroPipelineEstimate] | None = None
    for s in shapes_near(targets, req):
        est = fastest_mixed_layout(s, groups, batch_tokens, precision, eff)
        if est is None:
            continue
        tokens = req.budget_flops / (req.law.flops_per_param_token * s.n_params)
        loss = req.law.loss(s.n_params, tokens)
        if (
            best is None
            or loss < best[0] - 1e-9
            or (abs(loss - best[0]) <= 1e-9 and est.tokens_per_s > best[2].tokens_per_s)
        ):
            best = (loss, s, est)
    if best is None:
        raise AnalysisError(f"no layout of the planned shapes fits every group of {hardware}")
    return best


def _plan_alone(
    budget_flops: float,
    g: DeviceGroup,
    law: ScalingLaw,
    seq_len: int,
    vocab: int,
    batch_tokens: int,
    precision: Precision,
    eff: Efficiency,
) -> Plan | None:
    """The same budget planned on group `g` alone; None when it does not fit."""
    try:
        return plan(
            budget_flops,
            g.count,
            g.hardware,
            law=law,
            seq_len=seq_len,
            vocab=vocab,
            batch_tokens=batch_tokens,
            precision=precision,
            eff=eff,
        )
    except AnalysisError:
        return None


def plan_mixed(
    budget_flops: float,
    hardware: str,
    law: ScalingLaw | None = None,
    seq_len: int = 2048,
    vocab: int = 32000,
    batch_tokens: int = 4 * 1024 * 1024,
    precision: Precision = BF16_MIXED,
    eff: Efficiency = DEFAULT_EFFICIENCY,
) -> MixedPlan:
    """Plan `budget_flops` on the mixed cluster `hardware` (`name:count,...`); see module doc."""
    try:
        groups = parse_cluster(hardware)
    except LayoutError as e:
        raise AnalysisError(str(e)) from None
    if len(groups) < 2:
        raise AnalysisError(
            f"--hardware {hardware!r} names one device type; give it without :COUNT and pass --gpus"
        )
    n_total = sum(g.count for g in groups)
    req = check_request(
        budget_flops,
        n_total,
        groups[0].hardware,
        law,
        None,
        None,
        seq_len,
        vocab,
        batch_tokens,
        precision,
        eff,
    )
    if req.budget_flops is None:
        raise AnalysisError("a mixed-cluster plan needs --budget FLOPS")
    loss, shape, est = _best_mixed_shape(req, groups, hardware, batch_tokens, precision, eff)
    subsets = [
        _plan_alone(budget_flops, g, req.law, seq_len, vocab, batch_tokens, precision, eff) for g in groups
    ]
    tokens = req.budget_flops / (req.law.flops_per_param_token * shape.n_params)
    return MixedPlan(
        groups=groups,
        shape=shape,
        tokens=tokens,
        estimate=est,
        loss=loss,
        budget_flops=req.budget_flops,
        subsets=tuple(subsets),
        eff=eff,
        goodput=req.goodput,
    )
