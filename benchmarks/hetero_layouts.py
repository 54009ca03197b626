"""The mixed-device pipeline model against a published heterogeneous-cluster measurement.

    python benchmarks/hetero_layouts.py [--json OUT.json]   (--quick: the same, it takes ~1 s)

Source: AMP (Li et al., "AMP: Automatically Finding Model Parallel Strategies with Heterogeneity
Awareness", NeurIPS 2022, arXiv:2210.07297), artifact github.com/DachengLi1/AMP,
`src/results/het_cluster_results.txt` (commit 62fc27d): GPT-2 medium trained with
DeepSpeed + Megatron-LM v1.1.5 (fp16, no ZeRO, fp32 gradient all-reduce, no activation
checkpointing) on 16 AWS GPUs, 4 per node, global batch 32, measured seconds per iteration for
each layout it tried, with the exact DeepSpeed stage boundaries. What the artifact implies but
does not state (ASSUMED): the cluster is three p3.8xlarge nodes (4 x V100-SXM2-16GB) followed by
one g4dn.12xlarge node (4 x T4) in rank order (its cost model mixes "P3" and "G4" profiles 3:1
and gives node 4 different bandwidths), and the GPT-2 vocabulary is padded to 50304.

Rows kept: the pipelines whose stages each sit on one device type (a stage of tp·dp GPUs within a
node group); layouts without a pipeline or with a stage spanning both types are not a
mixed-device pipeline. Nothing here is fitted: the shipped constants (fitted to A100 runs)
predict each row, and the scores say how well they rank and time the layouts on these GPUs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
from scipy import stats

from sharding.costmodel import Hardware, Layout, ModelShape, Precision
from sharding.costmodel.hetero import DeviceGroup
from sharding.costmodel.hetero_pipeline import estimate_hetero_pipeline

AMP_SOURCE = (
    "AMP, Li et al. NeurIPS 2022 (arXiv:2210.07297); github.com/DachengLi1/AMP "
    "src/results/het_cluster_results.txt (commit 62fc27d), layouts and measured s/iter"
)

# AWS p3.8xlarge: 4 x V100-SXM2-16GB with NVLink, "10 Gigabit" network; g4dn.12xlarge: 4 x T4
# (PCIe Gen3, no NVLink), "50 Gigabit" network (AWS EC2 instance-type pages)
V100_NODE = Hardware.from_mapping(
    {
        "name": "v100-16gb-p3.8xlarge",
        "peak_flops": 125e12,
        "hbm_bytes": 17.2e9,
        "hbm_bw": 0.9e12,
        "devices_per_node": 4,
        "intra_node_bw": 50e9,
        "inter_node_bw": 10e9 / 8 / 4,
        "nics_per_node": 1,
        "host_bw": 15.75e9,
        "sources": {
            "peak_flops": "NVIDIA V100 datasheet: 125 TFLOPS tensor (SXM2)",
            "hbm": "NVIDIA V100 datasheet: 16 GB HBM2, 900 GB/s",
            "intra_node_bw": "V100 SXM2: two 25 GB/s NVLink 2 links to each peer in a 4-GPU mesh",
            "inter_node_bw": "AWS p3.8xlarge: 10 Gigabit network, shared by 4 GPUs",
            "nics_per_node": "one elastic network adapter per instance",
        },
    },
    origin="benchmarks/hetero_layouts.py",
)
T4_NODE = Hardware.from_mapping(
    {
        "name": "t4-g4dn.12xlarge",
        "peak_flops": 65e12,
        "hbm_bytes": 16.1e9,
        "hbm_bw": 0.32e12,
        "devices_per_node": 4,
        "intra_node_bw": 50e9 / 8,
        "inter_node_bw": 50e9 / 8 / 4,
        "nics_per_node": 1,
        "host_bw": 15.75e9,
        "sources": {
            "peak_flops": "NVIDIA T4 datasheet: 65 TFLOPS mixed precision (FP16/FP32)",
            "hbm": "NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s",
            "intra_node_bw": "AMP's cluster description: 50 Gbps PCIe intra-node on g4dn",
            "inter_node_bw": "AWS g4dn.12xlarge: 50 Gigabit network, shared by 4 GPUs",
            "nics_per_node": "one elastic network adapter per instance",
        },
    },
    origin="benchmarks/hetero_layouts.py",
)
GROUPS = (DeviceGroup(V100_NODE, 12), DeviceGroup(T4_NODE, 4))
# GPT-2 medium (AMP's results file header and launch script): 24 layers, hidden 1024, 16 heads,
# sequence 1024; GeLU MLP of 4h, tied embeddings (Megatron GPT-2)
MODEL = ModelShape(
    n_layers=24,
    d_model=1024,
    n_heads=16,
    seq_len=1024,
    vocab_size=50304,
    d_ff=4096,
    mlp="gelu",
    tied_embeddings=True,
)
# fp16 weights and gradients, fp32 master and Adam, gradients all-reduced in fp32 ("fp32_allreduce")
FP16_FP32_REDUCE = Precision(grad_reduce_bytes=4)
# (micro-batch, tp, dp, pp, DeepSpeed stage boundaries over its 30 layer slots, measured s/iter)
ROWS = (
    (1, 1, 2, 8, (0, 5, 9, 12, 15, 18, 21, 24, 30), 1.28),
    (1, 1, 4, 4, (0, 7, 14, 20, 30), 1.47),
    (1, 1, 1, 16, (0, 3, 5, 7, 9, 11, 13, 15, 16, 17, 19, 20, 21, 22, 23, 25, 30), 1.52),
    (2, 1, 4, 4, (0, 7, 14, 20, 30), 1.53),
    (4, 2, 2, 4, (0, 8, 14, 20, 30), 1.65),
    (4, 1, 4, 4, (0, 6, 13, 20, 30), 1.71),
    (1, 2, 2, 4, (0, 8, 14, 20, 30), 2.80),
    (1, 2, 1, 8, (0, 5, 8, 11, 14, 17, 20, 23, 30), 3.81),
)
# DeepSpeed's slots: embedding, a no-op, the 24 layers (slots 2..25), then no-ops, the head, a no-op
LAYER_SLOTS = range(2, 26)


def layers_per_stage(bounds: tuple[int, ...]) -> list[int]:
    return [sum(1 for s in LAYER_SLOTS if a <= s < b) for a, b in zip(bounds, bounds[1:])]


def predictions() -> list[dict]:
    out = []
    for mb, tp, dp, pp, bounds, measured in ROWS:
        lo = Layout(
            dp=dp,
            tp=tp,
            pp=pp,
            micro_batch=mb,
            global_batch=32,
            zero_stage=0,
            act_ckpt="none",
            attention="fused_softmax",
            fused_norm=True,
        )
        split = layers_per_stage(bounds)
        est = estimate_hetero_pipeline(MODEL, lo, GROUPS, layers=split, precision=FP16_FP32_REDUCE)
        best = estimate_hetero_pipeline(MODEL, lo, GROUPS, precision=FP16_FP32_REDUCE)
        out.append(
            {
                "layout": f"mb{mb} tp{tp} dp{dp} pp{pp}",
                "layers": split,
                "measured_s": measured,
                "predicted_s": est.step_time_s,
                "balanced_layers": list(best.layers_per_stage()),
                "balanced_s": best.step_time_s,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="accepted for the test suite: the full run is quick")
    ap.add_argument("--json", type=pathlib.Path, help="write the rows and scores here")
    args = ap.parse_args(argv)
    rows = predictions()
    print(f"AMP heterogeneous cluster (12 x V100 + 4 x T4, GPT-2 medium, batch 32): {AMP_SOURCE}")
    print(
        f"{'layout':22s} {'layers per stage':44s} {'measured':>8s} {'predicted':>9s} {'ratio':>6s}"
        f"  {'balanced split (model)':30s} {'pred.':>6s}"
    )
    for r in rows:
        print(
            f"{r['layout']:22s} {str(r['layers']):44s} {r['measured_s']:8.2f} "
            f"{r['predicted_s']:9.2f} {r['predicted_s'] / r['measured_s']:6.2f}  "
            f"{str(r['balanced_layers']):30s} {r['balanced_s']:6.2f}"
        )
    meas = np.array([r["measured_s"] for r in rows])
    pred = np.array([r["predicted_s"] for r in rows])
    rho = stats.spearmanr(meas, pred)[0]
    err = np.abs(pred / meas - 1)
    fastest = int(np.argmin(meas))
    print(
        f"Spearman rho(step time) {rho:.3f}; median |step-time error| {100 * np.median(err):.1f}%; "
        f"fastest measured layout predicted within {100 * err[fastest]:.1f}% "
        f"({rows[fastest]['layout']}); the model ranks {rows[int(np.argmin(pred))]['layout']} fastest"
    )
    if args.json:
        out = {
            "benchmark": "hetero_layouts",
            "source": AMP_SOURCE,
            "rows": rows,
            "spearman_rho": float(rho),
            "median_abs_error": float(np.median(err)),
            "fastest_measured": rows[fastest]["layout"],
            "fastest_predicted": rows[int(np.argmin(pred))]["layout"],
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
