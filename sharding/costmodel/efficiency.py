"""The cost model's empirical constants: what fraction of the datasheet a real step achieves.

Everything else in the cost model is arithmetic on shapes and datasheet numbers; these constants
carry what the arithmetic cannot know (kernel quality, launch overheads, how well collectives use
a link, allocator overheads). They are fitted by `sharding.costmodel.calibrate` to measured step
times and OOMs; `DEFAULT_EFFICIENCY` holds the values fitted to the calibration half of
Hagemann et al. 2023 (see `benchmarks/hagemann_layouts.py`, which re-fits them reproducibly).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Fitted efficiency constants (units in the names; see docs/costmodel.md for the equations).

    gemm_eff_max: fraction of peak reached by large bf16 GEMMs.
    gemm_half_dim: GEMM efficiency is gemm_eff_max·x/(x + gemm_half_dim), x = smallest GEMM dim
        on the device (shards shrink it as TP grows).
    flash1_eff, flash2_eff: fraction of peak for the (causal, half-work) FlashAttention kernels.
    score_traffic_naive, score_traffic_fused: HBM bytes moved per attention score element
        (fwd+bwd) by the unfused / Megatron-fused softmax path.
    elem_bytes_h: HBM bytes per token per layer per d_model element for element-wise ops
        (fused norms, residual adds, rotary), fwd+bwd; elem_bytes_h_unfused_norm: extra bytes of
        two un-fused RMSNorms; elem_bytes_f: bytes per d_ff element (SwiGLU/GeLU activation).
    layer_overhead_s: fixed cost (kernel launches, framework) per layer per micro-batch, fwd+bwd.
    link_eff: fraction of link bandwidth a ring collective reaches (NCCL bus bandwidth / link).
    dp_overlap: fraction of the last micro-batch's backward that hides the DP gradient collective.
    zero3_overlap: fraction of each micro-batch's compute that hides ZeRO-3/FSDP's per-layer
        weight gathers and gradient scatters (prefetch of the next layer).
    tp_overlap: fraction of tensor-parallel collective time hidden behind GEMMs.
    stage_jitter: coefficient of variation of one pipeline stage's slot time; a 1F1B slot waits
        for the slowest of p stages, E[max of p normals]·stage_jitter longer than the mean.
    mem_overhead_bytes: per-device memory not in the model (CUDA context, NCCL buffers, cache).
    act_frag: multiplier on activation memory for allocator fragmentation.
    cpu_adam_s_per_param: host time per parameter of an offloaded Adam step (DeepSpeed CPU-Adam).
    mfu_ratio_lo, mfu_ratio_hi: the 5% and 95% quantiles of measured / predicted MFU over runs
        the constants were not fitted to (held-out or leave-one-out); the planner turns them into
        intervals on MFU, days and GPU-hours. None: no error model (no interval is shown).
    """

    gemm_eff_max: float = 0.80
    gemm_half_dim: float = 64.0
    flash1_eff: float = 0.40
    flash2_eff: float = 0.55
    score_traffic_naive: float = 24.0
    score_traffic_fused: float = 12.0
    elem_bytes_h: float = 60.0
    elem_bytes_h_unfused_norm: float = 180.0
    elem_bytes_f: float = 16.0
    layer_overhead_s: float = 2e-4
    link_eff: float = 0.7
    dp_overlap: float = 0.5
    zero3_overlap: float = 0.0
    tp_overlap: float = 0.0
    stage_jitter: float = 0.05
    mem_overhead_bytes: float = 3e9
    act_frag: float = 1.0
    cpu_adam_s_per_param: float = 1e-9
    mfu_ratio_lo: float | None = None
    mfu_ratio_hi: float | None = None
    provenance: str = "hand-set priors (not fitted)"

    @property
    def mfu_ratio_interval(self) -> tuple[float, float] | None:
        """(5%, 95%) quantiles of measured / predicted MFU, or None."""
        if self.mfu_ratio_lo is None or self.mfu_ratio_hi is None:
            return None
        return float(self.mfu_ratio_lo), float(self.mfu_ratio_hi)

    def rate_interval(self, value: float) -> tuple[float, float] | None:
        """The error model's interval of a rate that scales with MFU (MFU, tokens/s), or None."""
        iv = self.mfu_ratio_interval
        return None if iv is None else (value * iv[0], value * iv[1])

    def time_interval(self, value: float) -> tuple[float, float] | None:
        """The error model's interval of a duration, inversely proportional to MFU (days,
        GPU-hours), or None."""
        iv = self.mfu_ratio_interval
        return None if iv is None else (value / iv[1], value / iv[0])

    def replace(self, **kw: float) -> "Efficiency":
        return dataclasses.replace(self, **kw)

    def as_dict(self) -> dict[str, float | str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_mapping(cls, m: Mapping[str, float | str]) -> "Efficiency":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in m.items() if k in names})


PRIOR_EFFICIENCY = Efficiency()

# Fitted by `python benchmarks/hagemann_layouts.py --calibrate` on the calibration split of
# Hagemann et al. 2023 (CC BY-NC-SA 4.0 data, not shipped here; see docs/costmodel.md).
# Held-out scores of these constants: Spearman ρ(MFU) 0.927, median |MFU error| 1.35 points,
# OOM accuracy 91.5% (469 held-out runs, 194 timed). They are specific to A100 + PyTorch/NCCL
# as used by Hagemann et al.; re-fit them to your own runs (`python -m analysis layout-eval
# --calibrate SWEEP_DIR`, or a CSV of measurements) before trusting absolute numbers elsewhere.
DEFAULT_EFFICIENCY = Efficiency(
    gemm_eff_max=0.7547,
    gemm_half_dim=154.1,
    flash1_eff=0.2529,
    flash2_eff=0.5490,
    score_traffic_naive=75.19,
    score_traffic_fused=26.79,
    elem_bytes_h=171.0,
    elem_bytes_h_unfused_norm=425.3,
    elem_bytes_f=16.0,
    layer_overhead_s=1.689e-3,
    link_eff=0.40,
    dp_overlap=0.0,
    # zero3_overlap stays at its prior 0 (the ZeRO-3 behaviour before the term existed): these
    # runs are all ZeRO-1 and do not identify it; a fit to FSDP / ZeRO-3 runs sets it
    tp_overlap=0.3710,
    stage_jitter=0.0,
    mem_overhead_bytes=5.5e9,
    act_frag=1.36,
    cpu_adam_s_per_param=1e-9,
    # 5%-95% of measured / predicted MFU on the 194 timed held-out runs
    mfu_ratio_lo=0.851,
    mfu_ratio_hi=1.0914,
    provenance="Hagemann et al. 2023 (arXiv:2311.05610), calibration half (hash split of "
               "trial_id); reproduce with `python benchmarks/hagemann_layouts.py --calibrate`",
)
