"""Analytic cost model of one training step of a dense decoder transformer on a cluster.

Public API:
    ModelShape, Layout, Precision (BF16_MIXED, FP32_PARAMS)   frozen inputs      (spec.py)
    LayoutAttention, ActCkpt, ZeroStage, Mlp                   their fixed sets   (spec.py)
    CollectiveKind, Link                                       collectives        (comm.py)
    Hardware, load_hardware, catalogue_names                   accelerator specs  (hardware.py)
    hardware_for_device_kind(jax device_kind) -> Hardware | None   peak-FLOPs lookup (hardware.py)
    Efficiency, DEFAULT_EFFICIENCY                             fitted constants   (efficiency.py)
    estimate_step(model, layout, hardware, precision, eff) -> StepEstimate         (step.py)
    MFU_CONVENTION: the FLOPs its MFU counts (PaLM's 6N + 12LHQT; models/flops.py)  (step.py)
    memory_breakdown, activation_bytes_per_layer                                 (memory.py)
    LayoutError (an models.base.errors.AnalysisError)

Not imported here (SciPy / pandas load only when asked for): `calibrate` (fit `Efficiency` to
`Measurement`s), `rows` (a layout CSV's rows -> inputs and `pred_*` columns, `layout-eval`),
`measured` (a profile refitted to MEASURED.csv rows or a trainer sweep, with its leave-one-out
MFU interval: `layout-eval --calibrate`, `plan --calibrate`), `runs` (a trainer run's layout,
`run_layout`, and a sweep's runs as measurements).

See docs/costmodel.md for the equations and their sources.
"""

from sharding.costmodel.comm import CollectiveKind, Link
from sharding.costmodel.efficiency import DEFAULT_EFFICIENCY, PRIOR_EFFICIENCY, Efficiency
from sharding.costmodel.hardware import Hardware, catalogue_names, hardware_for_device_kind, load_hardware
from sharding.costmodel.memory import MemoryBreakdown, activation_bytes_per_layer, memory_breakdown
from sharding.costmodel.spec import (
    ACT_CKPT,
    ATTENTION_KERNELS,
    BF16_MIXED,
    FP32_PARAMS,
    ActCkpt,
    Layout,
    LayoutAttention,
    LayoutError,
    Mlp,
    ModelShape,
    Precision,
    ZeroStage,
    validate_layout,
)
from sharding.costmodel.step import MFU_CONVENTION, StepEstimate, TimeBreakdown, estimate_step

__all__ = [
    "ACT_CKPT",
    "ATTENTION_KERNELS",
    "ActCkpt",
    "BF16_MIXED",
    "CollectiveKind",
    "DEFAULT_EFFICIENCY",
    "Efficiency",
    "FP32_PARAMS",
    "Hardware",
    "Layout",
    "LayoutAttention",
    "LayoutError",
    "Link",
    "MFU_CONVENTION",
    "MemoryBreakdown",
    "Mlp",
    "ModelShape",
    "PRIOR_EFFICIENCY",
    "Precision",
    "StepEstimate",
    "TimeBreakdown",
    "ZeroStage",
    "activation_bytes_per_layer",
    "catalogue_names",
    "estimate_step",
    "hardware_for_device_kind",
    "load_hardware",
    "memory_breakdown",
    "validate_layout",
]
