"""A trainer run as the cost model sees it (`layout-eval --calibrate SWEEP_DIR`, `plan --calibrate`).

- `TRAINER_PRECISION`, `TRAINER_FLAGS`: the trainer's precision and how its program differs from
  the Megatron defaults of `Layout` (the jax framework profile's flags; each checked against the
  compiled program by tests/test_costmodel_xla.py); the planner's trainer plan uses them too;
- `run_layout`: a finished run's (model shape, layout, activation bytes), the inverse of the
  planner's trainer overrides;
- `read_sweep`: every run under a sweep directory as a `Measurement` (runs that failed out of
  memory are OOM labels) and a record of its layout and throughput.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import yaml

from models.base.errors import AnalysisError
from models.base.rundir import SUMMARY_FILE, RunDir, RunStatus, RunSummary, iter_run_dirs
from models.config import ModelConfig
from sharding.costmodel.calibrate import Measurement
from sharding.costmodel.frameworks import FRAMEWORK_FLAGS, Framework
from sharding.costmodel.hardware import hardware_for_device_kind, load_hardware
from sharding.costmodel.spec import FP32_PARAMS, Layout, LayoutError, ModelShape, moe_from_config

# f32 params, grads and Adam moments (16 bytes/param, as bf16 mixed precision); bf16 activations
# on GPU/TPU (model.dtype=auto)
TRAINER_PRECISION = FP32_PARAMS
TRAINER_FLAGS = FRAMEWORK_FLAGS[Framework.JAX]
# the trainer's model.attention -> the cost model's attention kernel
_KERNELS = {"cudnn": "flash2", "xla": "naive", "blocked": "naive", "auto": "naive"}


def _shape(model: dict) -> ModelShape:
    shape = ModelShape(
        n_layers=int(model["n_layers"]),
        d_model=int(model["d_model"]),
        n_heads=int(model["n_heads"]),
        seq_len=int(model["seq_len"]),
        vocab_size=int(model["vocab_size"]),
        d_ff=None if model.get("d_ff") is None else int(model["d_ff"]),
        n_kv_heads=None if model.get("n_kv_heads") is None else int(model["n_kv_heads"]),
        tied_embeddings=bool(model.get("tie_embeddings", False)),
        moe=moe_from_config(model.get("moe")),
    )
    if model.get("d_ff") is None:  # the trainer's default width, not the Llama rule
        keys = ("vocab_size", "d_model", "n_layers", "n_heads", "seq_len")
        shape = dataclasses.replace(shape, d_ff=ModelConfig(**{k: model[k] for k in keys}).ff)
    return shape


def run_layout(summary: RunSummary, config: dict[str, Any]) -> tuple[ModelShape, Layout, int]:
    """(model shape, layout, activation bytes) of a finished trainer run, from its summary.json
    (`model`: the resolved model config, `mesh`: the axes it ran on) and its flattened
    `.hydra/config.yaml` (`train.batch_size`, `train.micro_batch_size`, `train.micro_batches`,
    `sharding.virtual_stages`). Raises LayoutError naming what is missing."""
    model, mesh = summary.model, summary.mesh
    if not isinstance(model, dict) or not isinstance(mesh, dict):
        raise LayoutError("summary.json lacks `model` or `mesh` (written by older trainers); re-run it")
    try:
        shape = _shape(model)
        data, fsdp, tensor = int(mesh["data"]), int(mesh["fsdp"]), int(mesh["tensor"])
        expert = int(mesh.get("expert", 1))
        stages, context = int(mesh.get("stage", 1)), int(mesh.get("context", 1))
    except (KeyError, TypeError, ValueError) as e:
        raise LayoutError(f"summary.json's model/mesh is incomplete ({e})") from None
    batch = int(config.get("train.batch_size") or 0)
    if batch <= 0:
        raise LayoutError("the run's config lacks train.batch_size")
    micro_bs = int(config.get("train.micro_batch_size") or batch)
    pipe_micro = int(config.get("train.micro_batches") or 1) if stages > 1 else 1
    dp = data * fsdp * expert
    per_rank = micro_bs // (dp * pipe_micro)
    if per_rank < 1 or micro_bs % (dp * pipe_micro):
        raise LayoutError(
            f"train.micro_batch_size={micro_bs} is not divisible by data x fsdp x "
            f"micro_batches = {dp * pipe_micro}"
        )
    virtual = int(config.get("sharding.virtual_stages") or 1) if stages > 1 else 1
    # "auto" resolves by platform (models.config): bf16 and cuDNN flash attention on GPU
    accel = str(mesh.get("platform", "cpu")) in ("gpu", "cuda", "rocm", "tpu")
    attention, dtype = str(model.get("attention", "auto")), str(model.get("dtype", "auto"))
    if attention == "auto":
        attention = "cudnn" if str(mesh.get("platform")) in ("gpu", "cuda") else "xla"
    if dtype == "auto":
        dtype = "bfloat16" if accel else "float32"
    layout = Layout(
        dp=dp,
        tp=tensor,
        pp=stages,
        cp=context,
        micro_batch=per_rank,
        global_batch=batch,
        sp=bool(mesh.get("sequence_parallel", False)),
        zero_stage=3 if fsdp > 1 else 0,
        zero_group=fsdp if (fsdp > 1 and data * expert > 1) else None,
        ep=expert,
        act_ckpt=str(model.get("remat", "none")),
        attention=_KERNELS.get(attention, "naive"),
        fused_norm=False,
        interleave=virtual,
        **TRAINER_FLAGS,
    )
    act_bytes = 2 if dtype in ("bfloat16", "bf16", "float16") else 4
    return shape, layout, act_bytes


def read_run(run_dir: pathlib.Path) -> tuple[RunSummary | None, dict[str, Any]]:
    """(summary.json, None when missing or corrupt; the `section.key` entries of its Hydra config,
    empty when unreadable) of one run: what `run_layout` reads."""
    rd = RunDir(run_dir)
    try:
        cfg = yaml.safe_load(rd.hydra_config_path.read_text()) if rd.hydra_config_path.is_file() else {}
    except (OSError, yaml.YAMLError):
        cfg = {}
    sections = cfg.items() if isinstance(cfg, dict) else ()
    flat = {f"{s}.{k}": v for s, sub in sections if isinstance(sub, dict) for k, v in sub.items()}
    return rd.read_summary(), flat


def _record(run_dir: pathlib.Path, status, oom: bool, step, tps, hw, shape, layout) -> dict:
    """One run's layout and measurement (`add_predictions` adds the cost model's pred_*)."""
    return {
        "run": str(run_dir),
        "status": status,
        "oom": oom,
        "measured_step_time_s": step,
        "measured_tokens_per_s": None if oom else float(tps),
        "hardware": hw.name,
        **{k: getattr(layout, k) for k in ("dp", "tp", "pp", "cp", "sp", "zero_stage")},
        **{k: getattr(layout, k) for k in ("micro_batch", "global_batch", "act_ckpt")},
        **{k: getattr(shape, k) for k in ("n_layers", "d_model", "seq_len")},
    }


def read_sweep(sweep: pathlib.Path, hardware: str | None) -> tuple[list, list[dict], list[str]]:
    """(one Measurement per run, one record per run, the runs skipped with why) under `sweep`."""
    hw_fixed = load_hardware(hardware) if hardware else None
    ms, recs, skipped = [], [], []
    for run_dir in sorted({rd.path.resolve() for rd in iter_run_dirs(sweep)}):
        summary, config = read_run(run_dir)
        if summary is None:
            skipped.append(f"{run_dir.name} (no {SUMMARY_FILE})")
            continue
        status, error = summary.status, str(summary.error or "").lower()
        oom = status == RunStatus.FAILED and ("resource_exhausted" in error or "out of memory" in error)
        tps, per_step = summary.tokens_per_s, summary.tokens_per_step
        if not oom and (status != RunStatus.COMPLETED or not tps or not per_step):
            skipped.append(f"{run_dir.name} ({status}, no throughput)")
            continue
        try:
            shape, layout, act_bytes = run_layout(summary, config)
        except LayoutError as e:
            raise AnalysisError(f"{run_dir}: {e}") from None
        kind = str((summary.mesh or {}).get("device_kind", "?"))
        hw = hw_fixed or hardware_for_device_kind(kind)
        if hw is None:
            raise AnalysisError(
                f"{run_dir.name} ran on {kind!r}, which is not in the hardware "
                f"catalogue; pass --hardware NAME or a YAML describing it"
            )
        prec = dataclasses.replace(TRAINER_PRECISION, act_bytes=act_bytes)
        if act_bytes == 4 and hw.peak_flops_float32:  # float32 matmuls run at their own peak
            hw = dataclasses.replace(hw, peak_flops=hw.peak_flops_float32)
        step = None if oom else float(per_step) / float(tps)
        ms.append(Measurement(shape, layout, hw, step, oom, prec, label=run_dir.name))
        recs.append(_record(run_dir, status, oom, step, tps, hw, shape, layout))
    return ms, recs, skipped
