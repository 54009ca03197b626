"""Framework profiles: the efficiency constants and implementation flags of one training stack.

One set of efficiency constants cannot describe Megatron-LM's fused kernels and DeepSpeed's ZeRO-3
parameter fetching at once (issue "Layouts across frameworks"). A profile is what differs between
stacks for the same layout:

* `Efficiency` constants (kernel efficiency, how well each collective kind overlaps compute,
  per-op overheads), fitted on the development sources of that family with the shared joint fit
  (`DEFAULT_EFFICIENCY`) as a prior, so that a family with few runs stays near the shared values
  (`benchmarks/external_layouts.py --families` re-fits them; docs/costmodel.md has their
  provenance and leave-one-source-out scores);
* implementation flags of `Layout` (what the stack's program does: fused QKV, ZeRO-3 collectives
  per weight matrix or per layer, regathering for backward, the GSPMD pipeline);
* the layouts the stack can run (`FrameworkSearch`: ZeRO stages, pipeline schedules), which
  `plan --framework` searches.

Families and their development sources: `megatron` (Megatron-LM layers, fused kernels, ZeRO-1
distributed optimizer): Hagemann et al.'s GPT-NeoX runs and BLOOM / MT-NLG (Megatron-DeepSpeed);
`deepspeed` (DeepSpeed's engine and ZeRO-3): the same 3-D runs, whose engine is DeepSpeed's, plus
BloombergGPT's ZeRO-3; `fsdp` (PyTorch FSDP / FSDP2, torchtitan): MosaicML's MPT table,
torchtitan, IBM's fms-fsdp; `jax` (this repository's trainer, MaxText-style GSPMD): no
development source measures a JAX stack, so its constants are the shared fit and its flags are
the trainer's program as tests/test_costmodel_xla.py checks it against XLA.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping

from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from sharding.costmodel.spec import Layout, LayoutError, Schedule


class Framework(enum.StrEnum):
    """`plan --framework`, the `framework` column of layout-eval CSVs."""

    MEGATRON = "megatron"  # Megatron-LM (and Megatron-based 3-D stacks: GPT-NeoX, Megatron-DeepSpeed)
    DEEPSPEED = "deepspeed"  # DeepSpeed ZeRO (1-3) and its pipeline engine
    FSDP = "fsdp"  # PyTorch FSDP / FSDP2 (torchtitan, LLM Foundry / Composer)
    JAX = "jax"  # XLA GSPMD: this repository's trainer (MaxText-style sharding)


FRAMEWORKS = tuple(f.value for f in Framework)
DEFAULT_FRAMEWORK = Framework.JAX

# What each stack's program does, as `Layout` flags (see `Layout`'s docstring). Megatron-LM is
# `Layout`'s default. DeepSpeed ZeRO-3 fetches parameter by parameter (a collective per weight
# matrix) and re-gathers for backward; PyTorch FSDP gathers one flat parameter per wrapped layer
# and reshards after forward (reshard_after_forward=True), and the Llama models of torchtitan /
# Hugging Face keep q/k/v and gate/up as separate matmuls. JAX: the trainer's program (the flags
# tests/test_costmodel_xla.py checks against the compiled HLO).
FRAMEWORK_FLAGS: dict[Framework, dict[str, bool]] = {
    Framework.MEGATRON: {},
    Framework.DEEPSPEED: {"zero3_per_matrix": True, "zero3_regather": True},
    Framework.FSDP: {"zero3_per_matrix": False, "zero3_regather": True, "fused_projections": False},
    Framework.JAX: {
        "fused_projections": False,
        "zero3_regather": False,
        "sp_bwd_regather": False,
        "cp_joint_grad_reduce": False,
        "gspmd_pipeline": True,
    },
}


@dataclasses.dataclass(frozen=True)
class FrameworkSearch:
    """The layouts a stack runs: ZeRO stages, pipeline schedules (with `interleave` > 1 where
    looped), and whether ZeRO-2/3 may be combined with pipeline stages."""

    zero_stages: tuple[int, ...]
    schedules: tuple[str, ...]
    zero3_with_pipeline: bool


_1F1B, _INTER, _BF = (
    Schedule.ONE_F_ONE_B.value,
    Schedule.INTERLEAVED.value,
    Schedule.BREADTH_FIRST.value,
)
# Megatron-LM: distributed optimizer (ZeRO-1), 1F1B and interleaved 1F1B (Narayanan et al. 2021's
# schedules; no breadth-first). DeepSpeed: ZeRO 1 or 3, its PipelineEngine runs 1F1B and refuses
# ZeRO-2/3 with pipeline stages. PyTorch: FSDP(2) with torch.distributed.pipelining's
# Schedule1F1B, ScheduleInterleaved1F1B and ScheduleLoopedBFS (breadth-first). JAX trainer:
# sharding.data (ZeRO-0) / sharding.fsdp (ZeRO-3), sharding.pipeline_schedule 1f1b | interleaved |
# breadth_first.
FRAMEWORK_SEARCH: dict[Framework, FrameworkSearch] = {
    Framework.MEGATRON: FrameworkSearch((1,), (_1F1B, _INTER), False),
    Framework.DEEPSPEED: FrameworkSearch((1, 3), (_1F1B,), False),
    Framework.FSDP: FrameworkSearch((3,), (_1F1B, _INTER, _BF), True),
    Framework.JAX: FrameworkSearch((0, 3), (_1F1B, _INTER, _BF), True),
}


def parse_framework(value: Any, key: str = "framework") -> Framework:
    """A framework name as a `Framework`; one-line LayoutError naming the key and the choices."""
    text = str(value).strip().lower()
    try:
        return Framework(text)
    except ValueError:
        raise LayoutError(
            f"{key}={value!r} is not a framework; use one of {', '.join(FRAMEWORKS)} "
            f"(default {DEFAULT_FRAMEWORK.value})"
        ) from None


def apply_framework(layout: Layout, framework: Framework | str) -> Layout:
    """`layout` as `framework`'s program runs it (its implementation flags)."""
    return layout.replace(**FRAMEWORK_FLAGS[parse_framework(framework)])


# Fitted by `python benchmarks/external_layouts.py --families`: each family's development runs,
# with the shared joint fit (DEFAULT_EFFICIENCY) as a Gaussian prior on every constant
# (calibrate.PROFILE_PRIOR_STRENGTH), so a family with few runs moves little from it.
_PROFILE_FITS: dict[Framework, Mapping[str, float | str]] = {
    Framework.MEGATRON: {
        "gemm_eff_max": 0.80268,
        "gemm_half_dim": 405.58,
        "flash1_eff": 0.26983,
        "flash2_eff": 0.39455,
        "score_traffic_naive": 53.185,
        "score_traffic_fused": 20.236,
        "elem_bytes_h": 114.79,
        "elem_bytes_h_unfused_norm": 436.11,
        "layer_overhead_s": 0.0010811,
        "link_eff": 0.50255,
        "intra_link_eff": 0.4,
        "dp_overlap": 3.2265e-19,
        "zero3_overlap": 0.56111,
        "tp_overlap": 0.24573,
        "stage_jitter": 0.02895,
        "coll_op_overhead_s": 0.0,
        "mem_overhead_bytes": 5500000000.0,
        "act_frag": 1.36,
        "provenance": "megatron profile: hagemann, megatron with the shared joint fit as prior",
    },
    Framework.DEEPSPEED: {
        "gemm_eff_max": 0.80276,
        "gemm_half_dim": 405.46,
        "flash1_eff": 0.26981,
        "flash2_eff": 0.39451,
        "score_traffic_naive": 53.197,
        "score_traffic_fused": 20.224,
        "elem_bytes_h": 114.81,
        "elem_bytes_h_unfused_norm": 436.24,
        "layer_overhead_s": 0.0010816,
        "link_eff": 0.50704,
        "intra_link_eff": 0.4,
        "dp_overlap": 8.3483e-19,
        "zero3_overlap": 0.56278,
        "tp_overlap": 0.24569,
        "stage_jitter": 0.029071,
        "coll_op_overhead_s": 3.0534e-09,
        "mem_overhead_bytes": 5500000000.0,
        "act_frag": 1.36,
        "provenance": "deepspeed profile: fsdp_scale, hagemann, megatron with the shared joint fit as prior",
    },
    Framework.FSDP: {
        "gemm_eff_max": 0.81427,
        "gemm_half_dim": 371.2,
        "flash1_eff": 0.28675,
        "flash2_eff": 0.34396,
        "score_traffic_naive": 54.532,
        "score_traffic_fused": 20.618,
        "elem_bytes_h": 101.28,
        "elem_bytes_h_unfused_norm": 632.16,
        "layer_overhead_s": 0.0011592,
        "link_eff": 0.54121,
        "intra_link_eff": 0.4,
        "dp_overlap": 2.1486e-10,
        "zero3_overlap": 0.56045,
        "tp_overlap": 0.24847,
        "stage_jitter": 0.031288,
        "coll_op_overhead_s": 8.3776e-06,
        "mem_overhead_bytes": 8200000000.0,
        "act_frag": 1.13,
        "provenance": "fsdp profile: fsdp_scale, mpt, torchtitan with the shared joint fit as prior",
    },
}


def framework_efficiency(framework: Framework | str) -> Efficiency:
    """The efficiency profile of `framework` (the shared fit where no family fit exists: jax)."""
    fw = parse_framework(framework)
    fit = _PROFILE_FITS.get(fw)
    if fit is None:
        return DEFAULT_EFFICIENCY.replace(
            provenance=f"{fw.value}: the shared joint fit (no development source runs this stack); "
            + DEFAULT_EFFICIENCY.provenance
        )
    return DEFAULT_EFFICIENCY.replace(**dict(fit))
