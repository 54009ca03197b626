"""Where a training step's time goes on this machine, and what MFU is reachable without each part.

Compiles the bare training step of benchmarks/train_throughput.py (the same model as
models.transformer, checked by tests/test_models.py) several times, each with parts replaced by
the cheapest op of the same shapes (`bare_loss(ablate=...)`: every matmul, the loss and AdamW are
kept), and times all variants in one process, alternately, round after round. This VM's speed
drifts by +-30% over minutes; alternation makes the *differences* between variants trustworthy
even when absolute times are not.

For each variant it prints ms/step, the time the removed parts cost (full - variant), and
"MFU if free": the full model's FLOPs over the variant's step time, against the cached CPU peak
(experiments.train.peak_flops), i.e. the MFU the real step would reach if the removed parts cost
nothing. The `matmuls-only` row is the ceiling for this shape on this machine with XLA:CPU.

    python benchmarks/step_breakdown.py [--size small] [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from train_throughput import ABLATIONS, SIZES, make_bare_step  # noqa: E402

VARIANTS = {
    "full": (),
    "no attention": ("attention",),
    "no rope": ("rope",),
    "no swiglu act": ("swiglu",),
    "no norms": ("norms",),
    "matmuls only": ABLATIONS,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps-per-round", type=int, default=3)
    args = ap.parse_args(argv)
    from experiments.train.peak_flops import measure_cpu_matmul_peak, peak_flops_per_device
    from models.config import ModelConfig
    from models.flops import flops_per_token
    from models.transformer import init_params

    d, nl, nh, L, B = SIZES[args.size]
    mc = ModelConfig(vocab_size=256, d_model=d, n_layers=nl, n_heads=nh, seq_len=L)
    flops_step = flops_per_token(mc) * B * L
    peak, src = peak_flops_per_device(jax.devices()[0], "float32", devices_on_host=1)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (B, L + 1)), jnp.int32)

    state, times = {}, {}
    for name, ablate in VARIANTS.items():
        _, params = init_params(mc, 0)
        step = make_bare_step(nl, nh, mc.kv_heads, ablate=frozenset(ablate))
        zeros = jax.tree.map(jnp.zeros_like, params)
        s = [params, zeros, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.float32)]
        out = step(*s, tokens)  # compile + warm-up
        jax.block_until_ready(out)
        state[name], times[name] = (step, list(out[:4])), []
    order = list(state)
    for r in range(args.rounds):  # a fresh order each round: no variant always runs first
        np.random.default_rng(r).shuffle(order)
        for name in order:
            step, s = state[name]
            t0 = time.perf_counter()
            for _ in range(args.steps_per_round):
                out = step(*s, tokens)
                s[:] = out[:4]
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t0) / args.steps_per_round)

    print(
        f"{args.size}: d={d} L={nl} heads={nh} T={L} B={B}, {flops_step / 1e9:.1f} GFLOP/step (model FLOPs); "
        f"peak {peak / 1e9:.1f} GFLOP/s ({src}); the same matmul now: {measure_cpu_matmul_peak() / 1e9:.1f}"
    )
    full = statistics.median(times["full"])
    for name in VARIANTS:
        t = statistics.median(times[name])
        print(
            f"  {name:14s} {t * 1e3:7.1f} ms/step  removed parts cost {(full - t) * 1e3:6.1f} ms "
            f"({(full - t) / full:5.1%})  MFU if free {flops_step / t / peak:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
