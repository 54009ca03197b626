"""Training throughput on this machine: the full framework vs a bare hand-written JAX step.

For each model size it runs, in `--repeats` rounds,
  * `bare`: the identical model and optimizer written directly in jax.numpy (no Flax, no optax,
    no logging), one jitted step on a fixed device-resident batch, timed in chunks of 5 steps;
  * `framework`: `experiments.train.loop.run` end to end (Hydra config, data sampling + host->device
    copies on a prefetch thread, sharded jitted step, per-step metrics.jsonl, progress line,
    final eval and checkpoint), timed by its median step (metrics.jsonl's step_time_s, step 1 and
    the last step excluded);
  * `bare` again: half the bare chunks come just before the framework run and half just after,
    so the VM's drift over minutes is not read as framework overhead;
and prints tokens/s, achieved model FLOP/s (models.flops, causal convention), MFU against the
CPU peak the trainer uses (experiments.train.peak_flops: an MFU above 1 is printed as null with
one `warning:` line, as the trainer does) and framework/bare (the median over rounds of each
round's bare / framework step time), and `ratio_best_chunks`: the fastest 5-step chunk of each
side over all rounds (contention only adds time, so on a busy machine this is the better estimate
of the quiet machine's ratio). Targets: framework/bare >= 0.95 on every size on a quiet machine;
MFU <= 1 always.

    python benchmarks/train_throughput.py [--sizes tiny,small,wide,base] [--steps 30] [--repeats 3]
        [--json out.json]
    python benchmarks/train_throughput.py --quick --json /tmp/tt.json   # smoke run (the test's)
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

from experiments.train.peak_flops import (  # noqa: E402
    checked_mfu,
    measure_cpu_matmul_peak,
    peak_info,
    stale_peak_warning,
)

REPO = Path(__file__).resolve().parents[1]

SIZES = {  # name: (d_model, n_layers, n_heads, seq_len, batch)
    "tiny": (128, 2, 4, 128, 16),
    "small": (256, 4, 8, 256, 8),
    "wide": (512, 2, 8, 256, 8),
    "base": (768, 2, 12, 256, 8),
}


# ---- the bare step: same math as models/transformer.py + experiments/train/optimizer.py, by hand -------


def bare_loss(p, tokens_BxL1, n_layers, n_heads, n_kv, theta=10000.0, eps=1e-6):
    """The model's loss by hand (tests/test_models.py checks it equals the Flax model's)."""
    x_in, y = tokens_BxL1[:, :-1], tokens_BxL1[:, 1:]
    B, L = x_in.shape
    x = p["embed_VxD"][x_in]

    def norm(h, s):
        return h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + eps) * s

    def rot(t):
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
        for lo in range(0, L, size):  # block i: keys [0, hi)
            hi = min(lo + size, L)
            s = jnp.einsum("blkge,bske->bkgls", q[:, lo:hi], k[:, :hi])
            s = jnp.where(jnp.arange(lo, hi)[:, None] >= jnp.arange(hi)[None, :], s, -jnp.inf)
            e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, -1, keepdims=True)))
            z = jnp.moveaxis(jnp.sum(e, -1), 3, 1)[..., None]
            outs.append(jnp.einsum("bkgls,bske->blkge", e, v[:, :hi]) / z)
        o = jnp.concatenate(outs, 1).reshape(B * L, -1)
        x = x + o @ a["wo_HxExD"].reshape(-1, D)
        m = b["mlp"]
        h = norm(x, b["mlp_norm"]["scale"])
        g = h @ m["w_gate_DxF"]
        act = g * jax.nn.sigmoid(g)
        x = x + (act * (h @ m["w_up_DxF"])) @ m["w_down_FxD"]
    logits = norm(x, p["final_norm"]["scale"]) @ p["head_DxV"]
    logz = jax.nn.logsumexp(logits, -1)
    return jnp.mean(logz - jnp.take_along_axis(logits, y.reshape(-1, 1), -1)[..., 0])


def make_bare_step(n_layers, n_heads, n_kv, lr=3e-3, b1=0.9, b2=0.95, eps=1e-8, wd=0.1, clip=1.0):
    def decays(path, leaf):
        names = [str(getattr(k, "key", k)) for k in path]
        return leaf.ndim >= 2 and not any(n.startswith(("embed_", "head_")) for n in names)

    def step(p, mu, nu, t, tokens):
        loss, g = jax.value_and_grad(bare_loss)(p, tokens, n_layers, n_heads, n_kv)
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


def _framework_config(name, steps):
    from hydra import compose, initialize_config_dir

    d, nl, nh, L, B = SIZES[name]
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
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=overrides)


class BareStep:
    """The bare step on a fixed device-resident batch, timed in chunks of 5 pipelined steps."""

    CHUNK = 5

    def __init__(self, mc, batch):
        from models.transformer import init_params

        _, self.params = init_params(mc, 0)
        rows = np.random.default_rng(0).integers(0, 256, (batch, mc.seq_len + 1))
        self.tokens = jnp.asarray(rows, jnp.int32)
        self.step = make_bare_step(mc.n_layers, mc.n_heads, mc.kv_heads)
        self.mu = jax.tree.map(jnp.zeros_like, self.params)
        self.nu = jax.tree.map(jnp.zeros_like, self.params)
        self.t = jnp.zeros((), jnp.float32)
        self.run(1)  # compile + warm-up

    def run(self, n):
        st = (self.params, self.mu, self.nu, self.t)
        for _ in range(n):
            *st, loss = self.step(*st, self.tokens)
        loss.block_until_ready()
        self.params, self.mu, self.nu, self.t = st

    def time_chunks(self, n_chunks):
        """Seconds per step of each of `n_chunks` chunks."""
        out = []
        for _ in range(n_chunks):
            t0 = time.perf_counter()
            self.run(self.CHUNK)
            out.append((time.perf_counter() - t0) / self.CHUNK)
        return out


def bench(name, steps, peak_dev, repeats=1):
    """One size: `repeats` rounds of (bare chunks, a framework run, bare chunks). The VM's speed
    drifts over minutes, so each framework run is compared with the bare steps just around it:
    the ratio is the median over rounds of bare step time / framework step time. A round after
    the first reuses the compiled program (as a pack or an in-process sweep does)."""
    from experiments.train.loop import run
    from models.config import ModelConfig
    from models.flops import flops_per_token

    d, nl, nh, L, B = SIZES[name]
    mc = ModelConfig(vocab_size=256, d_model=d, n_layers=nl, n_heads=nh, seq_len=L)
    fpt = flops_per_token(mc)
    tok_step = B * L
    cfg = _framework_config(name, steps)
    bare = BareStep(mc, B)
    n_chunks = max(2, (steps - 1) // BareStep.CHUNK)
    rounds, s, fw_chunks, bare_chunks = [], None, [], []
    for _ in range(repeats):
        before = bare.time_chunks(n_chunks // 2 or 1)
        with tempfile.TemporaryDirectory() as td:
            t0 = time.perf_counter()
            s = run(cfg, Path(td) / "run")
            fw_wall = time.perf_counter() - t0
            recs = [json.loads(x) for x in (Path(td) / "run" / "metrics.jsonl").read_text().splitlines()]
        after = bare.time_chunks(n_chunks - n_chunks // 2 or 1)
        # Median step time over steps 2.. (step 1 pays compilation; the last one the final eval):
        # the machine's speed drifts by +-10% over a minute, and a median is robust to that.
        timed = [r["step_time_s"] for r in recs if 1 < r["step"] < steps]
        fw_step = statistics.median(timed)
        bare_step = statistics.median(before + after)
        c = BareStep.CHUNK  # the framework's steps in chunks of consecutive steps, as the bare ones
        fw_chunks += [sum(timed[i : i + c]) / c for i in range(0, len(timed) - c + 1, c)]
        bare_chunks += before + after
        rounds.append({"framework_step_s": fw_step, "bare_step_s": bare_step, "framework_wall_s": fw_wall})
    ratios = [r["bare_step_s"] / r["framework_step_s"] for r in rounds]
    fw_tps = tok_step / statistics.median(r["framework_step_s"] for r in rounds)
    bare_tps = tok_step / statistics.median(r["bare_step_s"] for r in rounds)
    fw_mfu, fw_mfu_raw = checked_mfu(fw_tps * fpt / peak_dev)
    bare_mfu, bare_mfu_raw = checked_mfu(bare_tps * fpt / peak_dev)
    return {
        "size": name,
        "d_model": d,
        "n_layers": nl,
        "n_heads": nh,
        "seq_len": L,
        "batch": B,
        "n_params": s.n_params,
        "flops_per_token": fpt,
        "steps": steps,
        "repeats": repeats,
        "framework_tokens_per_s": fw_tps,
        "framework_flops_per_s": fw_tps * fpt,
        "framework_mfu": fw_mfu,  # null when above 1 (a stale peak): the figure is then *_mfu_raw
        "framework_mfu_raw": fw_mfu_raw,
        "framework_wall_s": statistics.median(r["framework_wall_s"] for r in rounds),
        "run_summary_mfu": s.mfu,  # what the run itself wrote (its own steady-state average)
        "bare_tokens_per_s": bare_tps,
        "bare_flops_per_s": bare_tps * fpt,
        "bare_mfu": bare_mfu,
        "bare_mfu_raw": bare_mfu_raw,
        "ratio_framework_over_bare": statistics.median(ratios),
        "ratio_per_round": ratios,
        # Contention only adds time: the fastest 5-step chunk of each side over all rounds
        # estimates its uncontended step, so this ratio reads a busy machine as a quiet one would.
        "framework_best_chunk_s": min(fw_chunks or [fw_step]),
        "bare_best_chunk_s": min(bare_chunks),
        "ratio_best_chunks": min(bare_chunks) / min(fw_chunks or [fw_step]),
    }


def _machine():
    from experiments.train.peak_flops import _cpu_model

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "jax": jax.__version__,
        "load_average_at_start": load,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help=f"comma-separated, of {', '.join(SIZES)} (default: all)")
    ap.add_argument("--steps", type=int, default=None, help="framework steps per run (default 30)")
    ap.add_argument("--repeats", type=int, default=None, help="rounds of bare / framework / bare (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny only, 4 steps, one round")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    sizes = args.sizes or ("tiny" if args.quick else ",".join(SIZES))
    steps = args.steps or (4 if args.quick else 30)
    repeats = args.repeats or (1 if args.quick else 3)
    unknown = [n for n in sizes.split(",") if n not in SIZES]
    if unknown or steps < 3 or repeats < 1:
        ap.error(f"unknown size(s) {unknown}" if unknown else "--steps must be >= 3 and --repeats >= 1")
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    machine = _machine()
    peak_info_ = peak_info(jax.devices()[0], "float32", devices_on_host=1)
    peak = peak_info_.flops
    print(f"peak: {peak / 1e9:.1f} GFLOP/s ({peak_info_.source})")
    now = None
    if not args.quick:
        now = measure_cpu_matmul_peak()
        print(
            f"the same 2048^3 matmul right now: {now / 1e9:.1f} GFLOP/s (this machine's speed drifts; "
            "MFU below is against the cached peak, as runs record it)"
        )
    rows, warned = [], False
    for name in sizes.split(","):
        r = bench(name, steps, peak, repeats)
        rows.append(r)
        raw = r["framework_mfu_raw"] or r["bare_mfu_raw"]
        if raw is not None and not warned:
            warned = True
            print(stale_peak_warning(raw, peak_info_), flush=True)
        mfu = lambda x: "null" if x is None else f"{x:.2f}"  # noqa: E731
        print(
            f"{name:>6} d={r['d_model']:<4} L={r['n_layers']} T={r['seq_len']} B={r['batch']} "
            f"({r['n_params'] / 1e6:.2f}M params) | framework {r['framework_tokens_per_s']:8.0f} tok/s "
            f"{r['framework_flops_per_s'] / 1e9:6.1f} GFLOP/s MFU {mfu(r['framework_mfu'])} | bare "
            f"{r['bare_tokens_per_s']:8.0f} tok/s {r['bare_flops_per_s'] / 1e9:6.1f} GFLOP/s MFU "
            f"{mfu(r['bare_mfu'])} | framework/bare {r['ratio_framework_over_bare']:.2f} "
            f"(rounds: {', '.join(f'{x:.2f}' for x in r['ratio_per_round'])}; best chunks "
            f"{r['ratio_best_chunks']:.2f})",
            flush=True,
        )
    if args.json:
        out = {
            "benchmark": "train_throughput",
            "quick": args.quick,
            "machine": machine,
            "peak_flops": peak,
            "peak_source": peak_info_.source,
            "peak_measured_at": peak_info_.measured_at,
            "matmul_flops_now": now,
            "rows": rows,
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
