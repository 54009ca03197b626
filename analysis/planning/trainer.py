"""Plan → train: the layout of a plan that `python -m experiments.train` can run, and its command line.

The planner searches every layout the cost model knows (pipeline stages, Megatron sequence
parallelism, ZeRO-1); the trainer runs only the mesh axes its `sharding.*` schema has. So that
the workbench never recommends a layout it cannot execute, `trainer_plan` takes the planned shape
and searches again, over the layouts the trainer can run, with the trainer's own program as the
cost model sees it:

* ZeRO: `sharding.data` replicates parameters and Adam state (ZeRO-0), `sharding.fsdp` shards both
  (ZeRO-3), both together are hybrid sharding (ZeRO-3 within groups of `fsdp` ranks, replicated
  across `data`: the cost model's `Layout.zero_group`); ZeRO-1/2 have no trainer counterpart;
* tensor parallelism without sequence parallelism, pipeline stages only when the schema has
  `sharding.sequence_parallel` / `sharding.pipeline` (read from the schema, so the planner emits
  them as soon as the trainer has them);
* float32 parameters, gradients and Adam moments, no master copy (`TRAINER_PRECISION`); q/k/v and
  gate/up are separate matmuls, XLA keeps FSDP-gathered weights and SP-gathered inputs for
  backward, and the pipeline is the GSPMD one of sharding/pipeline.py (`TRAINER_FLAGS`, which
  tests/test_costmodel_xla.py checks against the compiled program; both in sharding/costmodel/runs.py,
  whose `run_layout` reads a finished run back into its layout);
* only divisibility the trainer accepts (`sharding.validate.validate_mesh`, the trainer's check);
* a mixture of experts (`model.moe`, read from the schema like the mesh keys) with its experts split
  over `sharding.expert` (the cost model's `Layout.ep`, which the trainer's batch is split over too:
  sharding.data = dp / (fsdp x expert)).

The result's `overrides` are Hydra overrides for `python -m experiments.train`: the model shape
(`model.*`, d_ff explicit: the planner's Llama rounding differs from the trainer's default;
`model.moe={experts:..,top_k:..}` for a routed shape), the mesh (`sharding.*`, `sharding.expert`
with expert parallelism), the batch, micro-batch and run length (`train.*`) and activation
checkpointing (`model.remat`, named as the cost model's `act_ckpt`); with hyperparameter laws
(`plan --hparams`) also the recipe's `optim.lr` (`TrainerPlan.extra_overrides`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from models.base.errors import ConfigError
from models.config import ModelConfig
from sharding.costmodel import (
    Efficiency,
    Hardware,
    Layout,
    LayoutError,
    ModelShape,
    StepEstimate,
    estimate_step,
)
from sharding.costmodel.runs import TRAINER_FLAGS, TRAINER_PRECISION
from sharding.costmodel.spec import Schedule, moe_override
from sharding.layouts import ShardingConfig
from sharding.validate import validate_mesh

TRAINER_COMMAND = "python -m experiments.train"
TRAINER_ZERO_STAGES = (0, 3)  # sharding.data, sharding.fsdp


@functools.lru_cache(maxsize=1)
def trainer_features() -> frozenset[str]:
    """Optional keys of the trainer's schema that a plan may need, those it has today: any of
    `pipeline`, `pipeline_schedule`, `virtual_stages`, `sequence_parallel`, `context`, `expert`
    (sharding.*), `train.micro_batches` (pipeline micro-batches) and `model.moe` (a mixture of
    experts). `pipeline` counts only with `train.micro_batches` (stages without micro-batches are
    no usable pipeline)."""
    from experiments.train.config import TrainConfig  # lazy: Hydra, only when a plan is made

    keys = {f.name for f in dataclasses.fields(ShardingConfig)}
    keys |= {f"train.{f.name}" for f in dataclasses.fields(TrainConfig)}
    keys |= {f"model.{f.name}" for f in dataclasses.fields(ModelConfig)}
    out = keys & {
        "pipeline",
        "pipeline_schedule",
        "virtual_stages",
        "sequence_parallel",
        "context",
        "expert",
        "train.micro_batches",
        "model.moe",
    }
    if "train.micro_batches" not in out:
        out.discard("pipeline")
    return frozenset(out)


def missing_features(
    layout: Layout, features: frozenset[str] | None = None, shape: ModelShape | None = None
) -> list[str]:
    """What `layout` (of `shape`, when given) needs that the trainer lacks, as words for a
    message (empty: runnable)."""
    features = trainer_features() if features is None else features
    out = []
    if shape is not None and shape.moe is not None and "model.moe" not in features:
        out.append("a mixture of experts (model.moe)")
    if layout.ep > 1 and "expert" not in features:
        out.append(f"expert parallelism (ep={layout.ep})")
    if layout.pp > 1 and "pipeline" not in features:
        out.append(f"pipeline parallelism (pp={layout.pp})")
    if layout.interleave > 1 and not {"pipeline", "virtual_stages"} <= features:
        out.append(f"an interleaved pipeline schedule ({layout.interleave} virtual stages)")
    if layout.pp > 1 and layout.breadth_first and "pipeline_schedule" not in features:
        out.append("the breadth-first pipeline schedule")
    if layout.sp and layout.tp > 1 and "sequence_parallel" not in features:
        out.append("sequence parallelism")
    if layout.offload_optimizer:
        out.append("optimizer offload to the host")
    if layout.zero_stage not in TRAINER_ZERO_STAGES and layout.dp > 1:
        out.append(f"ZeRO-{layout.zero_stage}")  # the trainer has ZeRO-0 (data) and ZeRO-3 (fsdp)
    return out


def model_config(shape: ModelShape) -> ModelConfig:
    """The trainer's ModelConfig of a cost-model shape (SwiGLU, no dropout; its `model.moe`)."""
    if shape.mlp != "swiglu" or shape.dropout:
        raise LayoutError(
            f"the trainer builds SwiGLU models without dropout (got mlp={shape.mlp!r}, "
            f"dropout={shape.dropout})"
        )
    routed = {}
    if shape.moe is not None:
        if "model.moe" not in trainer_features():
            raise LayoutError("the trainer builds no mixture of experts (model.moe)")
        routed = {"moe": shape.moe}
    return ModelConfig(
        **routed,
        vocab_size=shape.vocab_size,
        d_model=shape.d_model,
        n_layers=shape.n_layers,
        n_heads=shape.n_heads,
        n_kv_heads=shape.n_kv_heads,
        d_ff=shape.ffn,
        seq_len=shape.seq_len,
        tie_embeddings=shape.tied_embeddings,
    )


def mesh_axes(layout: Layout) -> dict[str, int]:
    """`sharding.*` sizes of a trainer-runnable layout (the expert axis splits the batch too:
    data = dp / (fsdp x expert))."""
    fsdp = layout.zero_shards if layout.zero_stage >= 3 else 1
    axes = {"data": layout.dp // (fsdp * layout.ep), "fsdp": fsdp, "tensor": layout.tp}
    if layout.ep > 1:
        axes["expert"] = layout.ep
    if layout.pp > 1:
        axes["pipeline"] = layout.pp
    return axes


def trainer_refusal(shape: ModelShape, layout: Layout, features: frozenset[str] | None = None) -> str | None:
    """Why the trainer would not run this layout (a missing feature, or its own divisibility
    check's one-line error), or None when it would."""
    missing = missing_features(layout, features, shape)
    if missing:
        return f"needs {', '.join(missing)}"
    fsdp = layout.zero_shards if layout.zero_stage >= 3 else 1
    if layout.dp % (fsdp * layout.ep):
        return (
            f"sharding.fsdp={fsdp} x sharding.expert={layout.ep} does not divide the {layout.dp} "
            "data-parallel ranks"
        )
    axes = mesh_axes(layout)
    expert = {"expert": layout.ep} if layout.ep > 1 else {}  # the trainer's keyword since it has the axis
    try:
        validate_mesh(
            model_config(shape).validate(),
            axes["data"],
            axes["fsdp"],
            axes["tensor"],
            micro_batch_size=layout.micro_batch * layout.dp,
            **expert,
        )
    except (ConfigError, LayoutError) as e:
        return str(e).split("; ")[0]
    return None


def as_trainer_layouts(layout: Layout, features: frozenset[str] | None = None) -> list[Layout]:
    """`layout` as the trainer would run it (its program flags, sequence parallelism only if it
    has it); a ZeRO-3 layout also as every hybrid split sharding.data x sharding.fsdp of its dp."""
    features = trainer_features() if features is None else features
    lo = layout.replace(
        sp=layout.sp and "sequence_parallel" in features, offload_optimizer=False, **TRAINER_FLAGS
    )
    if lo.zero_stage < 3:
        return [lo]
    return [lo] + [lo.replace(zero_group=f) for f in range(2, lo.dp) if lo.dp % f == 0]


def overrides(shape: ModelShape, layout: Layout, tokens: float) -> list[str]:
    """Hydra overrides of `python -m experiments.train` for `shape` trained on `tokens` with `layout`."""
    cfg = model_config(shape)
    out = [
        f"model.vocab_size={cfg.vocab_size}",
        f"model.d_model={cfg.d_model}",
        f"model.n_layers={cfg.n_layers}",
        f"model.n_heads={cfg.n_heads}",
    ]
    if cfg.n_kv_heads is not None and cfg.n_kv_heads != cfg.n_heads:
        out.append(f"model.n_kv_heads={cfg.n_kv_heads}")
    out += [f"model.d_ff={cfg.ff}", f"model.seq_len={cfg.seq_len}"]
    if cfg.tie_embeddings:
        out.append("model.tie_embeddings=true")
    if shape.moe is not None:
        out.append(f"model.moe={moe_override(shape.moe)}")
    out.append(f"model.remat={layout.act_ckpt}")
    out += [f"sharding.{k}={v}" for k, v in mesh_axes(layout).items()]
    if layout.sp and layout.tp > 1:
        out.append("sharding.sequence_parallel=true")
    if layout.pp > 1 and layout.breadth_first:
        out += [
            f"sharding.pipeline_schedule={Schedule.BREADTH_FIRST.value}",
            f"sharding.virtual_stages={layout.interleave}",
        ]
    elif layout.pp > 1 and layout.interleave > 1:
        out += [
            f"sharding.pipeline_schedule={Schedule.INTERLEAVED.value}",
            f"sharding.virtual_stages={layout.interleave}",
        ]
    elif layout.pp > 1 and "pipeline_schedule" in trainer_features():
        out.append("sharding.pipeline_schedule=1f1b")  # the cost model's schedule
    out.append(f"train.batch_size={layout.global_batch}")
    if layout.pp > 1:
        out.append(f"train.micro_batches={layout.grad_accum}")
    elif layout.grad_accum > 1:
        out.append(f"train.micro_batch_size={layout.micro_batch * layout.dp}")
    out.append(f"train.tokens={int(math.ceil(tokens))}")
    return out


@dataclasses.dataclass(frozen=True)
class TrainerPlan:
    """The fastest fitting layout the trainer can run for a planned shape, and its command line.

    `missing`: what the planner's own best layout needs that the trainer lacks (empty when the
    trainer runs that very layout). `estimate` is None when no runnable layout fits (`reason`).
    `rank`: which of the planner's ranked candidates this is (1 = the best plan's own shape;
    higher when no layout of the better-ranked shapes is runnable).
    """

    shape: ModelShape
    tokens: float
    estimate: StepEstimate | None
    missing: tuple[str, ...]
    reason: str = ""
    rank: int = 1
    # the recipe's overrides (optim.lr=... from hyperparameter laws, analysis.planning.recipe);
    # the batch is the layout's own train.batch_size
    extra_overrides: tuple[str, ...] = ()

    @property
    def layout(self) -> Layout | None:
        return None if self.estimate is None else self.estimate.layout

    @property
    def overrides(self) -> list[str]:
        if self.estimate is None:
            return []
        return overrides(self.shape, self.layout, self.tokens) + list(self.extra_overrides)

    def command(self) -> str:
        return " ".join([TRAINER_COMMAND, *self.overrides])

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "overrides": self.overrides,
            "missing": list(self.missing),
            "rank": self.rank,
            "n_params": self.shape.n_params,
            "n_layers": self.shape.n_layers,
            "d_model": self.shape.d_model,
            "tokens": self.tokens,
            "reason": self.reason or None,
        }
        est = self.estimate
        if est is not None:
            mem = est.memory
            lo = est.layout
            out.update(
                layout={
                    "dp": lo.dp,
                    "tp": lo.tp,
                    "pp": lo.pp,
                    "micro_batch": lo.micro_batch,
                    "zero_stage": lo.zero_stage,
                    "act_ckpt": lo.act_ckpt,
                    "sp": lo.sp,
                    "global_batch": lo.global_batch,
                    "grad_accum": lo.grad_accum,
                    "interleave": lo.interleave,
                    "pipeline_schedule": lo.pipeline_schedule,
                    "zero_group": lo.zero_group,
                    "mesh": mesh_axes(lo),
                },
                mem_gb_per_device=mem.total / 1e9,
                state_gb_per_device=(mem.params + mem.grads + mem.optimizer) / 1e9,
                memory_gb=mem.as_gb(),
                step_time_s=est.step_time_s,
                tokens_per_s=est.tokens_per_s,
                mfu=est.mfu,
                mfu_convention=est.mfu_convention,
            )
        return out


def trainer_plan(
    shape: ModelShape,
    tokens: float,
    best: Layout,
    n_devices: int,
    hw: Hardware,
    eff: Efficiency,
    layouts: list[Layout],
    max_days: float | None = None,
    rank: int = 1,
) -> TrainerPlan:
    """The fastest fitting layout among `layouts` (the planner's candidates for `shape`) that the
    trainer can run, estimated as the trainer's program; `best` is the planner's own choice.
    Under a time limit, tokens are capped by what the trainer's layout processes in `max_days`."""
    features = trainer_features()
    missing = tuple(missing_features(best, features, shape))
    chosen, lean, seen, refusals = None, None, set(), {}
    for lo in (t for planned in layouts for t in as_trainer_layouts(planned, features)):
        if lo in seen or lo.zero_stage not in TRAINER_ZERO_STAGES:
            continue
        seen.add(lo)
        refusal = trainer_refusal(shape, lo, features)
        if refusal is not None:
            if lo.zero_group is None:
                refusals.setdefault(lo.zero_stage, refusal)
            continue
        try:
            est = estimate_step(shape, lo, hw, TRAINER_PRECISION, eff)
        except LayoutError:
            continue
        if lean is None or est.memory.total < lean.memory.total:
            lean = est
        if est.fits and (chosen is None or est.tokens_per_s > chosen.tokens_per_s):
            chosen = est
    if chosen is None:
        need = (
            f"; its leanest runnable layout needs {lean.memory.total / 1e9:.0f} GB per device"
            if lean is not None
            else ""
        )
        why = f" (the planner's layout needs {', '.join(missing)})" if missing else ""
        fsdp = f"; the trainer refuses its ZeRO-3 layouts ({refusals[3]})" if 3 in refusals else ""
        return TrainerPlan(
            shape,
            tokens,
            None,
            missing,
            rank=rank,
            reason=f"no layout the trainer can run fits {shape.n_params / 1e9:.3g}B params "
            f"(L={shape.n_layers}, d={shape.d_model}) on {n_devices} x "
            f"{hw.hbm_bytes / 1e9:.0f} GB {hw.name}{why}{need}{fsdp}",
        )
    if max_days is not None:
        tokens = min(tokens, chosen.tokens_per_s * max_days * 86400)
    return TrainerPlan(shape, tokens, chosen, missing, rank=rank)
