"""The cost model, calibrated on Hagemann et al. only, against other published training runs.

    python benchmarks/external_layouts.py

Each entry is one published run: its model, layout, hardware and the throughput (and memory)
its authors reported, with the source of every number. None of them is used to fit anything:
they measure how the model transfers to systems it was not calibrated on (issue "A layout model
that predicts systems it was not calibrated on"). Sources reserved for held-out evaluation
(Narayanan et al. 2021, Korthikanti et al. 2022, Dash et al. 2023, MaxText's and LuWu's tables)
are deliberately absent.
"""

from __future__ import annotations

import dataclasses
import sys

from sharding.costmodel import Layout, ModelShape, StepEstimate, estimate_step, load_hardware

BLOOM_SLURM = ("github.com/bigscience-workshop/bigscience, train/tr11-176B-ml/tr11-176B-ml.slurm "
               "(commit 003b250)")
BLOOM_CARD = "bigscience.notion.site/BigScience-176B-Model-ad073ca07cdf479398d5f95d88e218c4"
BLOOM_PAPER = "BigScience Workshop 2022, arXiv:2211.05100 (training hardware)"


@dataclasses.dataclass(frozen=True)
class PublishedRun:
    """One published training run and what its authors measured."""

    name: str
    model: ModelShape
    layout: Layout
    hardware: str
    hardware_overrides: dict
    measured_tflops_per_gpu: float  # as the authors count it (see `convention`)
    convention: str                 # "hfu": FLOPs incl. recomputation, "mfu": model FLOPs only
    measured_mem_gb: float | None
    sources: str

    def estimate(self) -> StepEstimate:
        hw = dataclasses.replace(load_hardware(self.hardware), **self.hardware_overrides)
        return estimate_step(self.model, self.layout, hw)

    def predicted_tflops_per_gpu(self) -> float:
        est = self.estimate()
        frac = est.hfu if self.convention == "hfu" else est.mfu
        return frac * est.hardware.peak_flops / 1e12


RUNS = (
    PublishedRun(
        name="BLOOM-176B (Jean Zay, 384 x A100-80GB)",
        # 70 layers, hidden 14336, 112 heads, sequence 2048, vocabulary padded to 250880
        # (slurm script); GeLU MLP of 4h and tied input/output embeddings (Megatron GPT)
        model=ModelShape(n_layers=70, d_model=14336, n_heads=112, seq_len=2048, vocab_size=250880,
                         d_ff=4 * 14336, mlp="gelu", tied_embeddings=True),
        # TP 4, PP 12 (so DP 8 on 384 GPUs), micro-batch 2, global batch 2048, bf16 with
        # DeepSpeed's ZeRO-1-equivalent bf16 optimizer, full activation checkpointing, Megatron's
        # fused softmax kernel (slurm script)
        layout=Layout(dp=8, tp=4, pp=12, micro_batch=2, global_batch=2048, sp=False, zero_stage=1,
                      act_ckpt="full", attention="fused_softmax", fused_norm=True),
        hardware="a100-80gb",
        # 4 x 100 Gb/s Omni-Path per 8-GPU node = 6.25 GB/s per GPU (paper)
        hardware_overrides={"name": "a100-80gb (Jean Zay, Omni-Path)", "inter_node_bw": 6.25e9},
        # "training throughput: about 150 TFLOPs" (model card), counted by Megatron-DeepSpeed's
        # throughput formula, which counts 4 passes (not 3) with --checkpoint-activations: HFU
        measured_tflops_per_gpu=150.0, convention="hfu",
        # "one copy of the model takes 48 GPUs (using 60 GB of memory on each GPU)" (model card)
        measured_mem_gb=60.0,
        sources=f"{BLOOM_SLURM}; {BLOOM_CARD}; {BLOOM_PAPER}"),
)


def main() -> int:
    for run in RUNS:
        est = run.estimate()
        pred = run.predicted_tflops_per_gpu()
        err = pred / run.measured_tflops_per_gpu - 1
        mem = est.memory.total / 1e9
        print(f"{run.name}: predicted {pred:.0f} TFLOP/s per GPU ({run.convention}) vs published "
              f"{run.measured_tflops_per_gpu:.0f} ({100 * err:+.1f}%); memory {mem:.1f} GB vs "
              f"{run.measured_mem_gb:.0f} GB; MFU {est.mfu:.3f} ({est.mfu_convention})")
        print(f"  sources: {run.sources}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
