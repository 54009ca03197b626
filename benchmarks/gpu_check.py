"""GPU check: train a ~1B-parameter model for a few dozen steps (bf16, cuDNN flash attention, FSDP
over every local GPU) through the real trainer, and print tokens/s and MFU.

Called by benchmarks/gpu_check.sh (which also checks for `nvidia-smi` first). The run is
`experiments.train.loop.run` on the composed Hydra config, exactly what
`python -m experiments.train` does; MFU is the trainer's own (model FLOPs per token, causal
convention, over the device's dense bf16 peak from conf/hardware/*.yaml, found through the GPU's
`device_kind`). Target (issue 15): >= 45% MFU on an H100/H200-class GPU.

Model: d_model 2048, 20 layers, 16 heads of 128 (cuDNN's widest head on every GPU generation),
SwiGLU 5504, seq 2048, byte vocabulary (the default corpus): 1.01e9 parameters. Batch: sequences
per GPU from the GPU's memory (16 from ~110 GB such as an H200, 8 from ~60 GB such as an
H100 80GB, else 4 with rematerialisation), no gradient accumulation; the global batch scales with
the GPU count, so FSDP's all-gathers and reduce-scatters are measured too.

    python benchmarks/gpu_check.py [--steps 30] [--layers 20] [--per-gpu-batch B] [--keep] [key=value ...]
    python benchmarks/gpu_check.py --dry-run [--gpus 8] [--json OUT.json]   # CPU only, no training

The dry run (also `--quick`, the test suite's run) resolves the exact configs the GPU run would
use (1 and `--gpus` GPUs, H100 and H200 memory), checks the catalogue's bf16 peaks, and runs the
report on a synthetic summary, so the figures file (`gpu_check.json`) is written as on a GPU;
`--json` writes all of it to one file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

D_MODEL, N_HEADS, SEQ_LEN = 2048, 16, 2048
MEM_FRACTION = "0.92"  # of GPU memory JAX may take (its default, 0.75, wastes 20 GB of an H100)
TARGET_MFU = 0.45
INSTALL = "pip install -e '.[gpu]' 'jax[cuda12]'"


def model_overrides(layers: int, remat: bool) -> list[str]:
    return [
        f"model.d_model={D_MODEL}",
        f"model.n_layers={layers}",
        f"model.n_heads={N_HEADS}",
        f"model.seq_len={SEQ_LEN}",
        "model.dtype=bfloat16",
        "model.attention=cudnn",
        f"model.remat={str(remat).lower()}",
    ]


def run_overrides(n_gpus: int, per_gpu: int, steps: int) -> list[str]:
    batch = per_gpu * n_gpus
    return [
        "sharding=fsdp",
        f"train.batch_size={batch}",
        f"train.micro_batch_size={batch}",
        f"train.steps={steps}",
        "train.eval_every=0",
        "train.ckpt_every=0",
        f"train.eval_tokens={batch * SEQ_LEN}",
        "train.progress_every_s=10",
        "optim.lr=3e-4",
        "optim.schedule=constant",
    ]


def per_gpu_batch(bytes_limit: float) -> tuple[int, bool]:
    """(sequences per GPU, remat) for a GPU whose JAX memory limit is `bytes_limit`: ~2.2 MB of
    activations per token (20 layers, no remat) plus ~16 GB of f32 params, grads and Adam
    state on one GPU (less with more GPUs)."""
    if bytes_limit >= 110e9:
        return 16, False
    if bytes_limit >= 60e9:
        return 8, False
    return 4, True


def compose(overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return hydra_compose(config_name="config", overrides=overrides)


def describe(spec: Any, n_gpus: int) -> str:
    return (
        f"model {spec.n_params / 1e9:.2f}B params ({spec.model.n_layers} layers, d_model "
        f"{spec.model.d_model}, {spec.model.n_heads} heads, seq {spec.model.seq_len}), "
        f"{spec.flops_per_token / 1e9:.2f} GFLOP/token; batch {spec.tokens_per_step:,} tokens/step "
        f"over {n_gpus} GPU(s), mesh (data, fsdp, tensor) = {spec.mesh_shape}; {spec.steps} steps"
    )


def dry_run(args: argparse.Namespace) -> int:
    """Resolve the exact config the GPU run would use, on CPU, for `--gpus` devices, and write
    the report of a synthetic summary; train nothing."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    import tempfile

    from experiments.train.config import resolve_config
    from experiments.train.peak_flops import table_peak
    from models.base.errors import ConfigError

    failures, out = 0, {"benchmark": "gpu_check", "dry_run": True, "configs": [], "peaks": {}}
    for n_gpus in sorted({1, args.gpus}):
        for gpu, hbm in (("H100 80GB", 80e9 * float(MEM_FRACTION)), ("H200", 141e9 * float(MEM_FRACTION))):
            per_gpu, remat = per_gpu_batch(hbm) if args.per_gpu_batch is None else (args.per_gpu_batch, False)
            overrides = (
                model_overrides(args.layers, remat)
                + run_overrides(n_gpus, per_gpu, args.steps)
                + args.overrides
            )
            try:
                spec = resolve_config(compose(overrides), n_devices=n_gpus)
                gpu_model = spec.model.resolved("gpu")  # what the model builds on a CUDA GPU
            except ConfigError as e:
                print(f"error: {gpu}, {n_gpus} GPU(s): {e}")
                failures += 1
                continue
            print(
                f"{gpu} x{n_gpus}: {describe(spec, n_gpus)}; on GPU: dtype {gpu_model.dtype}, "
                f"attention {gpu_model.attention}, remat {gpu_model.remat}"
            )
            out["configs"].append(
                {
                    "gpu": gpu,
                    "n_gpus": n_gpus,
                    "n_params": spec.n_params,
                    "flops_per_token": spec.flops_per_token,
                    "tokens_per_step": spec.tokens_per_step,
                    "mesh_shape": list(spec.mesh_shape),
                    "dtype": str(gpu_model.dtype),
                    "attention": gpu_model.attention,
                    "remat": bool(gpu_model.remat),
                }
            )
    for kind in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        peak = table_peak(kind, "bfloat16")
        print(
            f"peak for {kind!r}: {peak / 1e12:.0f} TFLOP/s bf16 (conf/hardware)"
            if peak
            else f"error: no bf16 peak for {kind!r} in conf/hardware/*.yaml"
        )
        failures += peak is None
        out["peaks"][kind] = peak
    with tempfile.TemporaryDirectory() as td:  # the report's file, from a synthetic summary
        run_dir = Path(td)
        peak = out["peaks"]["NVIDIA H100 80GB HBM3"] or math.nan
        synthetic = _synthetic_summary(out["configs"][0] if out["configs"] else None, peak, run_dir)
        rc = report(synthetic, 1, run_dir)
        out["report"] = json.loads((run_dir / "gpu_check.json").read_text())
        failures += rc != 0
    print("dry run: config resolves" if not failures else f"dry run: {failures} problem(s)")
    out["ok"] = not failures
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 1 if failures else 0


def _synthetic_summary(cfg: dict[str, Any] | None, peak: float, run_dir: Path) -> Any:
    """A completed run's summary at 40% MFU (and its metrics.jsonl) for the dry run's report."""
    from models.base.rundir import RunSummary

    fpt = cfg["flops_per_token"] if cfg else 6e9
    tps_step = cfg["tokens_per_step"] if cfg else 16384
    tps = 0.4 * peak / fpt
    lines = [{"step": i, "step_time_s": tps_step / tps} for i in range(1, 7)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return RunSummary.of(
        status="completed",
        tokens_per_s=tps,
        mfu=0.4,
        peak_flops_per_device=peak,
        peak_flops_source="dry run: synthetic",
        n_params=cfg["n_params"] if cfg else None,
        flops_per_token=fpt,
        tokens_per_step=tps_step,
        steps_done=6,
        wall_time_s=6 * tps_step / tps,
        final_train_loss=2.0,
    )


def gpu_devices() -> list[Any]:
    """The local CUDA devices, or exit 2 with one line saying why there are none."""
    if os.environ.get("JAX_PLATFORMS", "") == "cpu":  # e.g. left over from a test shell
        del os.environ["JAX_PLATFORMS"]
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", MEM_FRACTION)
    try:
        import jax

        devices = jax.local_devices(backend="gpu")
    except Exception as e:  # noqa: BLE001 - no CUDA plugin, no driver, no device: all the same answer
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(
            f"error: gpu_check needs an NVIDIA GPU visible to JAX (JAX: {first[:200]}); "
            f"install the CUDA build with: {INSTALL}",
            file=sys.stderr,
        )
        sys.exit(2)
    return devices


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dry-run",
        action="store_true",
        default=bool(os.environ.get("GPU_CHECK_DRY_RUN")),
        help="resolve the config on CPU (no GPU needed, nothing trained)",
    )
    ap.add_argument("--gpus", type=int, default=8, help="dry run: GPU count to resolve the layout for")
    ap.add_argument("--steps", type=int, default=int(os.environ.get("GPU_CHECK_STEPS", 30)))
    ap.add_argument("--layers", type=int, default=int(os.environ.get("GPU_CHECK_LAYERS", 20)))
    ap.add_argument("--per-gpu-batch", type=int, default=None, help="sequences per GPU (default: by memory)")
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "gpu_check")
    ap.add_argument("--keep", action="store_true", help="keep the run's checkpoint (12 GB)")
    ap.add_argument("--quick", action="store_true", help="the dry run (the test suite's name for it)")
    ap.add_argument("--json", type=Path, help="also write the figures (or the dry run's) here")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. model.remat=true")
    args = ap.parse_args(argv)
    if args.dry_run or args.quick:
        return dry_run(args)

    devices = gpu_devices()
    from experiments.train.config import resolve_config
    from experiments.train.loop import run
    from models.base.errors import ConfigError

    limit = float((devices[0].memory_stats() or {}).get("bytes_limit", 0))
    per_gpu, remat = per_gpu_batch(limit)
    per_gpu = args.per_gpu_batch or per_gpu
    n = len(devices)
    overrides = model_overrides(args.layers, remat) + run_overrides(n, per_gpu, args.steps) + args.overrides
    run_dir = args.out / time.strftime("%Y%m%d-%H%M%S")
    print(f"gpu_check: {n} x {devices[0].device_kind} ({limit / 1e9:.0f} GB for JAX each)", flush=True)
    try:
        cfg = compose(overrides)
        print(f"gpu_check: {describe(resolve_config(cfg), n)}", flush=True)
        print(f"gpu_check: overrides: {' '.join(overrides)}\ngpu_check: run dir {run_dir}", flush=True)
        summary = run(cfg, run_dir)
    except ConfigError as e:
        print(f"error: gpu_check: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line; the trainer put the traceback in summary.json
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        hint = (
            " (out of memory: retry with --per-gpu-batch 4 or model.remat=true)"
            if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower()
            else " (if cuDNN attention is the cause, retry with model.attention=xla)"
        )
        print(
            f"error: gpu_check: training failed: {type(e).__name__}: {first}{hint}; traceback in "
            f"{run_dir / 'summary.json'}",
            file=sys.stderr,
        )
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    rc = report(summary, n, run_dir)
    if args.json:
        shutil.copyfile(run_dir / "gpu_check.json", args.json)
    return rc


def steady_step_time(run_dir: Path, skip: int = 3) -> float | None:
    """Median step time over metrics.jsonl's steps after the first `skip` (compile, warm-up)."""
    try:
        recs = [
            json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
        ]
    except (OSError, ValueError):
        return None
    times = sorted(r["step_time_s"] for r in recs if r.get("step", 0) > skip and r.get("step_time_s"))
    return times[len(times) // 2] if times else None


def _pct(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def report(summary: Any, n: int, run_dir: Path) -> int:
    """Print the trainer's tokens/s and MFU (whole run after step 1) and the median-step figures;
    write them to run_dir/gpu_check.json. `summary`: the run's RunSummary (or its dict)."""
    s = summary.as_dict() if hasattr(summary, "as_dict") else dict(summary)
    tps, mfu, peak = s.get("tokens_per_s"), s.get("mfu"), s.get("peak_flops_per_device") or math.nan
    ok = s.get("status") == "completed" and tps
    print(f"gpu_check: status {s.get('status')}, final train loss {s.get('final_train_loss')}")
    result = {
        k: s.get(k)
        for k in (
            "status",
            "tokens_per_s",
            "mfu",
            "peak_flops_per_device",
            "peak_flops_source",
            "peak_flops_measured_at",
            "mesh",
            "n_params",
            "flops_per_token",
            "tokens_per_step",
            "steps_done",
            "wall_time_s",
            "final_train_loss",
        )
    }
    if ok:
        print(
            f"gpu_check: {tps:,.0f} tokens/s ({tps / n:,.0f} per GPU), MFU {_pct(mfu)} "
            f"(target >= {100 * TARGET_MFU:.0f}%) against {peak / 1e12:.0f} TFLOP/s per GPU: "
            f"{s.get('peak_flops_source')}"
        )
        dt = steady_step_time(run_dir)
        if dt:
            tps_med = s["tokens_per_step"] / dt
            mfu_med = tps_med * s["flops_per_token"] / (n * peak)
            result.update(median_step_time_s=dt, median_tokens_per_s=tps_med, median_mfu=mfu_med)
            print(
                f"gpu_check: median step after step 3: {dt:.3f} s = {tps_med:,.0f} tokens/s, "
                f"MFU {_pct(mfu_med)}"
            )
    (run_dir / "gpu_check.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"gpu_check: figures in {run_dir / 'gpu_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
