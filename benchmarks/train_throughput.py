"""Training throughput on this machine: the full framework vs a bare hand-written JAX step.

For each model size it runs
  * `framework`: `experiments.train.loop.run` end to end (Hydra config, data sampling + host->device
    copies on a prefetch thread, sharded jitted step, per-step metrics.jsonl, progress line,
    final eval and checkpoint); its tokens/s is the summary's steady-state figure (first step
    and eval/checkpoint pauses excluded);
  * `bare`: the identical model and optimizer written directly in jax.numpy (no Flax, no optax,
    no logging), one jitted step on a fixed device-resident batch, timed over the same number of
    steps, half just before and half just after the framework run;
and prints tokens/s, achieved model FLOP/s (models.flops, causal convention), MFU against the
measured CPU matmul peak (experiments.train.peak_flops), and framework/bare. Targets (issue 2):
framework >= 0.9x bare; MFU >= 0.5 for d_model >= 256. Both sides are timed by their median
step (framework: metrics.jsonl's step_time_s; bare: chunks of 5 steps).

    python benchmarks/train_throughput.py [--sizes tiny,small,wide,base] [--steps 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from experiments.train.peak_flops import measure_cpu_matmul_peak, peak_flops_per_device  # noqa: E402

SIZES = {  # name: (d_model, n_layers, n_heads, seq_len, batch)
    "tiny": (128, 2, 4, 128, 16),
    "small": (256, 4, 8, 256, 8),
    "wide": (512, 2, 8, 256, 8),
    "base": (768, 2, 12, 256, 8),
}


# ---- the bare step: same math as models/transformer.py + experiments/train/optimizer.py, by hand -------

ABLATIONS = ("attention", "rope", "swiglu", "norms")


def bare_loss(p, tokens_BxL1, n_layers, n_heads, n_kv, theta=10000.0, eps=1e-6, ablate=frozenset()):
    """The model's loss by hand. `ablate` (for benchmarks/step_breakdown.py only) replaces parts
    with the cheapest op of the same shapes: attention -> o = q + k + v, rope -> none,
    swiglu -> gate * up, norms -> x * scale; every matmul and the loss are kept."""
    x_in, y = tokens_BxL1[:, :-1], tokens_BxL1[:, 1:]
    B, L = x_in.shape
    x = p["embed_VxD"][x_in]

    def norm(h, s):
        if "norms" in ablate:
            return h * s
        return h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + eps) * s

    def rot(t):
        if "rope" in ablate:
            return t
        E = t.shape[-1]
        inv = 1.0 / theta ** (jnp.arange(0, E, 2, dtype=jnp.float32) / E)
        a = jnp.arange(L, dtype=jnp.float32)[:, None] * inv[None]
        c, s = jnp.cos(a)[None, :, None], jnp.sin(a)[None, :, None]
        t1, t2 = t[..., : E // 2], t[..., E // 2 :]
        return jnp.concatenate([t1 * c - t2 * s, t2 * c + t1 * s], -1)

    nb = max(1, min(8, L // 64))  # query blocks, as models.transformer.attention_blocks
    size = -(-L // nb)
    x = x.reshape(B * L, -1)  # tokens x d_model: every projection is a 2-D matmul
    for i in range(n_layers):
        b = p[f"block_{i}"]
        a = b["attn"]
        D, _, E = a["wq_DxHxE"].shape
        h = norm(x, b["attn_norm"]["scale"])
        q = rot((h @ a["wq_DxHxE"].reshape(D, -1)).reshape(B, L, n_heads, E))
        k = rot((h @ a["wk_DxKxE"].reshape(D, -1)).reshape(B, L, n_kv, E))
        v = (h @ a["wv_DxKxE"].reshape(D, -1)).reshape(B, L, n_kv, E)
        q = q.reshape(B, L, n_kv, n_heads // n_kv, E) / math.sqrt(E)
        outs = []
        for lo in range(0, L, size) if "attention" not in ablate else ():  # block i: keys [0, hi)
            hi = min(lo + size, L)
            s = jnp.einsum("blkge,bske->bkgls", q[:, lo:hi], k[:, :hi])
            s = jnp.where(jnp.arange(lo, hi)[:, None] >= jnp.arange(hi)[None, :], s, -jnp.inf)
            e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, -1, keepdims=True)))
            z = jnp.moveaxis(jnp.sum(e, -1), 3, 1)[..., None]
            outs.append(jnp.einsum("bkgls,bske->blkge", e, v[:, :hi]) / z)
        if not outs:  # ablated: keep q, k, v (and their matmuls) alive
            outs = [q + (k + v)[:, :, :, None]]
        o = jnp.concatenate(outs, 1).reshape(B * L, -1)
        x = x + o @ a["wo_HxExD"].reshape(-1, D)
        m = b["mlp"]
        h = norm(x, b["mlp_norm"]["scale"])
        g = h @ m["w_gate_DxF"]
        act = g if "swiglu" in ablate else g * jax.nn.sigmoid(g)
        x = x + (act * (h @ m["w_up_DxF"])) @ m["w_down_FxD"]
    logits = norm(x, p["final_norm"]["scale"]) @ p["head_DxV"]
    logz = jax.nn.logsumexp(logits, -1)
    return jnp.mean(logz - jnp.take_along_axis(logits, y.reshape(-1, 1), -1)[..., 0])


def make_bare_step(
    n_layers, n_heads, n_kv, lr=3e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.1, clip=1.0, ablate=frozenset()
):
    def decays(path, leaf):
        names = [str(getattr(k, "key", k)) for k in path]
        return leaf.ndim >= 2 and not any(n.startswith(("embed_", "head_")) for n in names)

    def step(p, mu, nu, t, tokens):
        loss, g = jax.value_and_grad(bare_loss)(p, tokens, n_layers, n_heads, n_kv, ablate=ablate)
        gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(g)))
        scale = jnp.minimum(1.0, clip / (gn + 1e-6))
        g = jax.tree.map(lambda x: x * scale, g)
        mu = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, mu, g)
        nu = jax.tree.map(lambda v, x: b2 * v + (1 - b2) * x * x, nu, g)
        t = t + 1
        c1, c2 = 1 - b1**t, 1 - b2**t

        def upd(path, w, m, v):
            u = (m / c1) / (jnp.sqrt(v / c2) + eps)
            if decays(path, w):
                u = u + wd * w
            return w - lr * u

        p = jax.tree_util.tree_map_with_path(upd, p, mu, nu)
        return p, mu, nu, t, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


# ---- one size --------------------------------------------------------------------------------


def bench(name, steps, peak_dev):
    from hydra import compose, initialize_config_dir

    from experiments.train.loop import run
    from models.config import ModelConfig
    from models.flops import flops_per_token
    from models.transformer import init_params

    d, nl, nh, L, B = SIZES[name]
    mc = ModelConfig(vocab_size=256, d_model=d, n_layers=nl, n_heads=nh, seq_len=L)
    fpt = flops_per_token(mc)
    tok_step = B * L
    overrides = [
        f"model.d_model={d}",
        f"model.n_layers={nl}",
        f"model.n_heads={nh}",
        f"model.seq_len={L}",
        f"train.batch_size={B}",
        f"train.steps={steps}",
        "train.eval_every=0",
        "train.ckpt_every=0",
        "train.eval_tokens=4096",
        "train.progress_every_s=1000",
        "train.log_every=1",
        "optim.warmup_tokens=0",
    ]
    with initialize_config_dir(
        config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base=None
    ):
        cfg = compose(config_name="config", overrides=overrides)

    _, params = init_params(mc, 0)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (B, L + 1)), jnp.int32)
    step = make_bare_step(nl, nh, mc.kv_heads)
    mu = jax.tree.map(jnp.zeros_like, params)
    nu = jax.tree.map(jnp.zeros_like, params)
    t = jnp.zeros((), jnp.float32)
    params, mu, nu, t, loss = step(params, mu, nu, t, tokens)  # compile + warm-up
    loss.block_until_ready()
    chunk, per_step = 5, []  # median over chunks of 5 pipelined steps

    def time_bare(n_chunks):
        nonlocal params, mu, nu, t, loss
        for _ in range(n_chunks):
            t0 = time.perf_counter()
            for _ in range(chunk):
                params, mu, nu, t, loss = step(params, mu, nu, t, tokens)
            loss.block_until_ready()
            per_step.append((time.perf_counter() - t0) / chunk)

    # Half the bare chunks before the framework run and half after: the VM's speed drifts over
    # minutes, and bracketing keeps the ratio from reading that drift as framework overhead.
    n_chunks = max(2, (steps - 1) // chunk)
    time_bare(n_chunks // 2)
    with tempfile.TemporaryDirectory() as td:
        t0 = time.perf_counter()
        s = run(cfg, Path(td) / "run")
        fw_wall = time.perf_counter() - t0
        recs = [json.loads(line) for line in (Path(td) / "run" / "metrics.jsonl").read_text().splitlines()]
    # Median step time over steps 2.. (step 1 pays compilation; the last one the final eval):
    # the machine's speed drifts by +-10% over a minute, and a median is robust to that.
    fw_step = statistics.median(r["step_time_s"] for r in recs if 1 < r["step"] < steps)
    fw_tps = tok_step / fw_step
    time_bare(n_chunks - n_chunks // 2)
    bare_tps = tok_step / statistics.median(per_step)
    return {
        "size": name,
        "d_model": d,
        "n_layers": nl,
        "seq_len": L,
        "batch": B,
        "n_params": s.n_params,
        "flops_per_token": fpt,
        "steps": steps,
        "framework_tokens_per_s": fw_tps,
        "framework_flops_per_s": fw_tps * fpt,
        "framework_mfu": fw_tps * fpt / peak_dev,
        "framework_wall_s": fw_wall,
        "bare_tokens_per_s": bare_tps,
        "bare_flops_per_s": bare_tps * fpt,
        "bare_mfu": bare_tps * fpt / peak_dev,
        "ratio_framework_over_bare": fw_tps / bare_tps,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,small,wide,base")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    peak, src = peak_flops_per_device(jax.devices()[0], "float32", devices_on_host=1)
    print(f"peak: {peak / 1e9:.1f} GFLOP/s ({src})")
    print(
        f"the same 2048^3 matmul right now: {measure_cpu_matmul_peak() / 1e9:.1f} GFLOP/s "
        "(this machine's speed drifts; MFU below is against the cached peak, as runs record it)"
    )
    rows = []
    for name in args.sizes.split(","):
        r = bench(name, args.steps, peak)
        rows.append(r)
        print(
            f"{name:>6} d={r['d_model']:<4} L={r['n_layers']} T={r['seq_len']} B={r['batch']} "
            f"({r['n_params'] / 1e6:.2f}M params) | framework {r['framework_tokens_per_s']:8.0f} tok/s "
            f"{r['framework_flops_per_s'] / 1e9:6.1f} GFLOP/s MFU {r['framework_mfu']:.2f} | bare "
            f"{r['bare_tokens_per_s']:8.0f} tok/s {r['bare_flops_per_s'] / 1e9:6.1f} GFLOP/s MFU "
            f"{r['bare_mfu']:.2f} | framework/bare {r['ratio_framework_over_bare']:.2f}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"peak_flops": peak, "peak_source": src, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
