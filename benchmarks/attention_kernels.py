"""Step time of each attention kernel JAX can run here (model.attention), timed alternately.

Builds the same model once per kernel (`blocked`, `xla`, and `cudnn` on an NVIDIA GPU), jits its
loss-and-gradient step, and times the kernels in turns, round after round, in one process: the
machine's drift then hits every kernel alike, so their ratio is trustworthy even when absolute
times wander. Prints the median ms/step per kernel and the ratio to `blocked`.

    python benchmarks/attention_kernels.py [--d-model 256] [--layers 4] [--seq 256] [--batch 8] [--rounds 8]
        [--json OUT.json]
    python benchmarks/attention_kernels.py --quick --json /tmp/k.json   # d 64, 1 layer, seq 128, 1 round
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402

from experiments.train.steps import cross_entropy_loss  # noqa: E402
from models.config import ModelConfig, current_platform  # noqa: E402
from models.transformer import init_params  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps-per-round", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smoke run: a small model, one round of one step")
    ap.add_argument("--json", type=Path, help="write the times here")
    args = ap.parse_args(argv)
    if args.quick:
        args.d_model, args.layers, args.heads, args.seq, args.batch = 64, 1, 4, 128, 2
        args.rounds, args.steps_per_round = 1, 1
    platform = current_platform()
    kernels = ["blocked", "xla"] + (["cudnn"] if platform == "gpu" else [])
    base = ModelConfig(
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        seq_len=args.seq,
        dtype=args.dtype,
    )
    tokens = jax.random.randint(jax.random.key(0), (args.batch, args.seq + 1), 0, base.vocab_size)
    steps, params = {}, None
    for k in kernels:
        cfg = ModelConfig(**{**base.to_dict(), "attention": k})
        graphdef, params = init_params(cfg, 0)
        step = jax.jit(jax.value_and_grad(lambda p, g=graphdef: cross_entropy_loss(g, p, tokens)))
        jax.block_until_ready(step(params))  # compile
        steps[k] = step
    times: dict[str, list[float]] = {k: [] for k in kernels}
    for _ in range(args.rounds):
        for k in kernels:
            t = time.perf_counter()
            for _ in range(args.steps_per_round):
                out = steps[k](params)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t) / args.steps_per_round)
    r = base.resolved(platform)
    print(
        f"{platform} ({jax.devices()[0].device_kind}), dtype {r.dtype}: d_model {args.d_model}, "
        f"{args.layers} layers, {args.heads} heads, seq {args.seq}, batch {args.batch}; "
        f"{args.rounds} alternating rounds of {args.steps_per_round} steps (loss + grads)"
    )
    ref = statistics.median(times["blocked"])
    rows = []
    for k in kernels:
        med = statistics.median(times[k])
        print(
            f"  {k:8s} {1e3 * med:8.1f} ms/step  (min {1e3 * min(times[k]):.1f})  x{med / ref:.2f} vs blocked"
        )
        rows.append(
            {"kernel": k, "median_step_s": med, "min_step_s": min(times[k]), "ratio_to_blocked": med / ref}
        )
    if args.json:
        out = {
            "benchmark": "attention_kernels",
            "quick": args.quick,
            "platform": platform,
            "device_kind": jax.devices()[0].device_kind,
            "dtype": str(r.dtype),
            "shape": {
                "d_model": args.d_model,
                "layers": args.layers,
                "heads": args.heads,
                "seq": args.seq,
                "batch": args.batch,
            },
            "rounds": args.rounds,
            "steps_per_round": args.steps_per_round,
            "kernels": rows,
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
