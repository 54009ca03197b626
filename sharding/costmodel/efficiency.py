"""The cost model's empirical constants: what fraction of the datasheet a real step achieves.

Everything else in the cost model is arithmetic on shapes and datasheet numbers; these constants
carry what the arithmetic cannot know (kernel quality, launch overheads, how well collectives use
a link, allocator overheads). They are fitted by `sharding.costmodel.calibrate` to measured step
times and OOMs; `DEFAULT_EFFICIENCY` holds the values fitted jointly to five published sources
(see `benchmarks/external_layouts.py --calibrate`, which re-fits them reproducibly).
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
    link_eff: fraction of link bandwidth a ring collective reaches (NCCL bus bandwidth / link)
        over the network; intra_link_eff: the same inside a node (NVLink/NVSwitch, xGMI, ICI),
        None: link_eff (the two interconnects reach different fractions of their datasheet).
    dp_overlap: fraction of the last micro-batch's backward that hides the DP gradient collective.
    zero3_overlap: fraction of each micro-batch's compute that hides ZeRO-3/FSDP's per-layer
        weight gathers and gradient scatters (prefetch of the next layer).
    tp_overlap: fraction of tensor-parallel collective time hidden behind GEMMs.
    coll_op_overhead_s: host time per ZeRO-3 parameter gather / gradient reduce-scatter call that
        no prefetch hides (launch, hooks and bookkeeping of the framework that issues it:
        DeepSpeed's per-parameter fetch hooks, FSDP's per-unit pre/post hooks); 0 in the shared
        fit, fitted per framework profile (sharding/costmodel/frameworks.py).
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
    intra_link_eff: float | None = None
    dp_overlap: float = 0.5
    # FSDP prefetches the next layer's gather behind this layer's compute; "in practice, the
    # overlap percentage possible is 90%" (pytorch.org/blog/maximizing-training, appendix)
    zero3_overlap: float = 0.9
    tp_overlap: float = 0.0
    coll_op_overhead_s: float = 0.0
    stage_jitter: float = 0.05
    mem_overhead_bytes: float = 3e9
    act_frag: float = 1.0
    # DeepSpeed's CPU-Adam: 8.2 s for the optimizer step of an 11.6B-parameter GPT-2
    # (github.com/microsoft/DeepSpeed/pull/735), 7.1e-10 s per parameter
    cpu_adam_s_per_param: float = 7.1e-10
    mfu_ratio_lo: float | None = None
    mfu_ratio_hi: float | None = None
    provenance: str = "hand-set priors (not fitted)"

    @property
    def mfu_ratio_interval(self) -> tuple[float, float] | None:
        """(5%, 95%) quantiles of measured / predicted MFU, or None."""
        if self.mfu_ratio_lo is None or self.mfu_ratio_hi is None:
            return None
        return float(self.mfu_ratio_lo), float(self.mfu_ratio_hi)

    def _ratios(self, mfu: float | None) -> tuple[float, float] | None:
        """(lo, hi) ratios, hi capped so that MFU stays at or below 1 when `mfu` is given."""
        iv = self.mfu_ratio_interval
        if iv is None:
            return None
        lo, hi = iv
        if mfu is not None and mfu > 0:
            hi = max(1.0, min(hi, 1.0 / mfu))
        return lo, hi

    def rate_interval(self, value: float, mfu: float | None = None) -> tuple[float, float] | None:
        """The error model's interval of a rate that scales with MFU (MFU, tokens/s), or None.
        `mfu`: the point estimate's MFU (the interval never passes MFU 1)."""
        iv = self._ratios(mfu)
        return None if iv is None else (value * iv[0], value * iv[1])

    def time_interval(self, value: float, mfu: float | None = None) -> tuple[float, float] | None:
        """The error model's interval of a duration, inversely proportional to MFU (days,
        GPU-hours), or None; `mfu` as for `rate_interval`."""
        iv = self._ratios(mfu)
        return None if iv is None else (value / iv[1], value / iv[0])

    @property
    def link_effs(self) -> tuple[float, float]:
        """(intra-node, network) fraction of link bandwidth collectives reach."""
        intra = self.link_eff if self.intra_link_eff is None else self.intra_link_eff
        return float(intra), float(self.link_eff)

    def replace(self, **kw: float) -> "Efficiency":
        return dataclasses.replace(self, **kw)

    def as_dict(self) -> dict[str, float | str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_mapping(cls, m: Mapping[str, float | str]) -> "Efficiency":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in m.items() if k in names})


PRIOR_EFFICIENCY = Efficiency()

# Fitted by `python benchmarks/external_layouts.py --calibrate` jointly to five groups of published
# runs (docs/costmodel.md, "Calibration sources"): the calibration half of Hagemann et al. 2023
# (CC BY-NC-SA 4.0 data, not shipped), MosaicML's MPT table (FSDP), BLOOM-176B and MT-NLG 530B
# (Megatron-DeepSpeed 3-D), torchtitan (FSDP2), and FSDP / ZeRO-3 at 128-512 GPUs (IBM's
# fms-fsdp, BloombergGPT); each source weighted alike over its runs, Hagemann's twice. Hagemann
# held-out: Spearman ρ(MFU) 0.911, median |MFU error| 1.9 points; leave-one-source-out median
# |MFU error| 4.4-10.3 points. The error model is the 5%-95% range of measured / predicted MFU of
# the leave-one-source-out predictions. Re-fit to your own runs (`python -m analysis layout-eval
# --calibrate SWEEP_DIR`, or a CSV of measurements) before trusting absolute numbers elsewhere.
DEFAULT_EFFICIENCY = Efficiency(
    gemm_eff_max=0.79552,
    gemm_half_dim=363.65,
    flash1_eff=0.2899,
    flash2_eff=0.3577,
    score_traffic_naive=54.532,
    score_traffic_fused=20.618,
    elem_bytes_h=102.0,
    elem_bytes_h_unfused_norm=475.29,
    elem_bytes_f=16.0,
    layer_overhead_s=1.0917e-3,
    link_eff=0.50854,
    intra_link_eff=0.4,
    dp_overlap=0.0,
    zero3_overlap=0.56111,
    tp_overlap=0.24847,
    stage_jitter=0.031288,
    mem_overhead_bytes=8.2e9,
    act_frag=1.13,
    cpu_adam_s_per_param=7.1e-10,
    mfu_ratio_lo=0.8334,
    mfu_ratio_hi=1.565,
    provenance="joint fit to Hagemann et al. 2023 (arXiv:2311.05610, calibration half), MosaicML "
    "MPT (llm-foundry), BLOOM-176B, MT-NLG 530B, torchtitan, IBM fms-fsdp and "
    "BloombergGPT; reproduce with `python benchmarks/external_layouts.py --calibrate`",
)
