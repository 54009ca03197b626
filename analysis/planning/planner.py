"""Compute-budget planner: scaling law → model shape and tokens → fastest layout that fits.

A scaling law says how big a model and how many tokens a budget buys; the cost model says
whether that model fits the cluster, how fast it trains and so how many days and GPU-hours the
budget really means. `plan()` joins them:

1. the law L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, "Chinchilla", approach 3), an
   `analysis.laws.allocation.ScalingLaw` from a fit (`ScalingLaw.from_fit`), a fit JSON written
   by `python -m analysis fit` (`ScalingLaw.from_json`) or Chinchilla's published constants;
2. compute-optimal N*, D* for C FLOPs with C = k·N·D, k the law's FLOPs per parameter-token (6
   unless the fit measured another), closed form; tokens and FLOPs of every candidate use the
   same k, so the plan agrees with the fit's own allocation;
3. real shapes near N*: head dim 128, d_model a multiple of 128, aspect ratio
   d_model / n_layers in [64, 192] (GPT-3 and Llama use 100–128), SwiGLU MLP;
4. for each shape, every TP × PP × DP × micro-batch × ZeRO × checkpointing layout the cost model
   accepts; the fastest one that fits memory wins;
5. with a wall-clock (`max_days`) or GPU-hour limit, tokens are capped by what the layout can
   process in time, and the shape with the lowest predicted loss wins (usually smaller than N*);
6. for the winner, the fastest layout the trainer can run (`analysis.planning.trainer`): the
   same layout when the trainer has every axis it needs, else the best one without them; its
   `python -m experiments.train` overrides are `Plan.trainer.overrides` (JSON: best.overrides);
7. the winner's training recipe (`analysis.planning.recipe`, `Plan.recipe`): with hyperparameter
   laws (`hparams`, an HP.json from `python -m analysis fit-hparams`) the learning rate and batch
   at its (N, D) with 90% intervals, the search repeated with the batch law's optimum (global
   batches inside its 90% interval) when the laws have one; warm-up and schedule are the
   trainer's defaults. Without laws the recipe says it is untuned;
8. with a corpus of `unique_tokens` (`analysis.planning.data_limit`), the size target is the
   optimum under that data limit (repeated epochs decay in value, Muennighoff et al. 2023), every
   candidate's loss is the data-constrained law's, and `Plan.data_limit` holds the penalty against
   unlimited data, the < 1%-epoch point and the bigger-model-at-fewer-epochs alternative;
9. a fixed model instead of a budget (`params`, `tokens`): shapes near N, trained on D tokens;
10. what each candidate costs (`analysis.planning.costs`, `Candidate.costs`): device-hours, days,
   energy, carbon and dollars with 90% intervals, the cost model's time divided by a goodput
   (time lost to failures and restarts), priced with the hardware file's power and price, a PUE
   and a grid intensity, each with its source; a time limit caps tokens at the goodput's pace.
Loss confidence intervals come from the fit's bootstrap samples when it has them. MFU follows
the cost model's convention, PaLM's 6N + 12LHQT (`MFU_CONVENTION`; models/flops.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Sequence

from analysis.core.validation import PREDICTION_LEVEL
from analysis.laws.allocation import ScalingLaw
from analysis.laws.moe import MoeLaw
from analysis.planning.costs import Assumptions, CostOptions, Costs, assumptions_for, price_run
from analysis.planning.data_limit import DataLimitPlan, RepeatedDataLaw, paper_prior, plan_data_limit
from analysis.planning.recipe import BatchSource, HparamSet, Recipe, tuned, untuned
from analysis.planning.trainer import TRAINER_ZERO_STAGES, TrainerPlan, trainer_plan
from models.base.errors import AnalysisError
from models.config import MoEConfig
from sharding.costmodel import (
    BF16_MIXED,
    DEFAULT_EFFICIENCY,
    MFU_CONVENTION,
    Efficiency,
    Hardware,
    Layout,
    LayoutError,
    ModelShape,
    Precision,
    estimate_step,
    load_hardware,
)
from sharding.costmodel.frameworks import (
    DEFAULT_FRAMEWORK,
    FRAMEWORK_SEARCH,
    Framework,
    apply_framework,
    framework_efficiency,
    parse_framework,
)
from sharding.costmodel.spec import Schedule

HEAD_DIM = 128
DEFAULT_BATCH_TOKENS = 4 * 1024 * 1024  # tokens per optimizer step without a batch law or --batch-tokens
ASPECT_RANGE = (64.0, 192.0)
ASPECT_TARGET = 128.0


# ---- shapes -------------------------------------------------------------------------------------
def shape_for(
    n_layers: int, d_model: int, seq_len: int, vocab: int, moe: MoEConfig | None = None
) -> ModelShape:
    return ModelShape(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=d_model // HEAD_DIM,
        seq_len=seq_len,
        vocab_size=vocab,
        moe=moe,
    )


def candidate_shapes(
    n_target: float,
    seq_len: int,
    vocab: int,
    k: int = 4,
    moe: MoEConfig | None = None,
    fine: bool = False,
) -> list[ModelShape]:
    """The k real shapes whose parameter count is closest to n_target (aspect ratio near 128);
    with `moe` (a mixture of experts' routed MLP), whose active parameter count is. `fine`: every
    even depth and every width (multiples of 128) in the aspect range, so that a fixed model's N is
    matched to within about 2%.

    Score = |log(N/N*)| + 0.05·|log(aspect/128)|: parameter count first, shape second.
    """
    scored = []
    depths = range(2, 257, 2) if fine else [*range(2, 16, 2), *range(16, 257, 4)]
    for L in depths:  # real stacks: even, multiples of 4 when deep
        d_ideal = ASPECT_TARGET * L
        widths = (
            range(128, int(ASPECT_RANGE[1] * L) + 1, 128)  # every width a head dim of 128 allows
            if fine
            else {
                128 * max(1, round(d_ideal * f / 128))
                for f in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5)
            }
        )
        for d in widths:
            aspect = d / L
            if not ASPECT_RANGE[0] <= aspect <= ASPECT_RANGE[1]:
                continue
            if moe is not None and L < moe.every:
                continue
            s = shape_for(L, d, seq_len, vocab, moe)
            err = abs(math.log(s.n_params_active / n_target))
            if err > 0.35:
                continue
            scored.append((err + 0.05 * abs(math.log(aspect / ASPECT_TARGET)), L, d, s))
    if not scored:
        raise AnalysisError(
            f"no transformer shape with head dim {HEAD_DIM} comes within 40% of "
            f"{n_target:.3g} parameters; the budget is too small or too large"
        )
    scored.sort(key=lambda x: x[:3])
    return [s for *_, s in scored[:k]]


# ---- layouts ------------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def expert_parallel_sizes(shape: ModelShape, dp: int) -> list[int]:
    """The ep sizes a layout of `shape` with `dp` data-parallel ranks can take: 1 for a dense
    shape; for a mixture of experts every divisor of dp that divides its routed experts."""
    if shape.moe is None:
        return [1]
    return [e for e in _divisors(dp) if shape.moe.routed_experts % e == 0]


# Looped pipeline schedules (interleaved, breadth-first) are searched with each of these numbers of
# layer chunks per device (that divide the stage's layers). Narayanan et al. 2021 (sec. 2.2.2) and
# Lamy-Poirier 2022 (sec. 5) gain most of the bubble reduction at 2 loops when a pipeline has many
# micro-batches; a large run with a fixed global batch has few per pipeline (a 16M-token batch on
# 16K GPUs: 16 for 16 stages), and there more loops pay for their extra p2p sends, which the cost
# model weighs (4 and 8 loops: 405B on 16K H100s, MFU 0.24 -> 0.30; 70B on 2K A100s 0.43 -> 0.46).
PLAN_LOOPS = (2, 4, 8)


def _schedules_for(pp: int, layers: int, schedules: Sequence[str]) -> list[tuple[str, int]]:
    """(pipeline_schedule, interleave) pairs to try for `pp` stages of `layers` layers."""
    if pp == 1:
        return [(Schedule.ONE_F_ONE_B.value, 1)]
    out = []
    for sched in schedules:
        if sched == Schedule.ONE_F_ONE_B:
            out.append((sched, 1))
        else:
            out += [(sched, v) for v in PLAN_LOOPS if layers % (pp * v) == 0]
    return out


def layouts_for(
    shape: ModelShape,
    n_devices: int,
    hw: Hardware,
    batch_tokens: int,
    micro_batches: Sequence[int] = (1, 2, 4, 8),
    zero_stages: Sequence[int] = (1, 3),
    act_ckpts: Sequence[str] = ("none", "selective", "full"),
    offload: Sequence[bool] = (False,),
    batch_band: tuple[float, float] | None = None,
    framework: Framework | str | None = None,
) -> list[Layout]:
    """Every valid layout: TP within a node (divides the heads), PP dividing the layers; with
    `offload=(False, True)` also each with ZeRO-Offload (optimizer state and step on the host).
    `batch_band` (sequences): keep only global batches inside it (a batch law's 90% interval).
    `framework`: only what that stack runs (`FRAMEWORK_SEARCH`: its ZeRO stages and pipeline
    schedules, intersected with `zero_stages`), with its implementation flags; None: Megatron's
    program with 1F1B only (the layouts before framework profiles). A mixture of experts' shape
    also gets every expert-parallel size (`expert_parallel_sizes`); a dense shape ep = 1 only."""
    fw = None if framework is None else parse_framework(framework)
    search = FRAMEWORK_SEARCH[fw] if fw is not None else None
    if search is not None:
        zero_stages = [z for z in zero_stages if z in search.zero_stages] or list(search.zero_stages)
    schedules = search.schedules if search is not None else (Schedule.ONE_F_ONE_B.value,)
    out = []
    for tp in (
        t
        for t in (1, 2, 4, 8, 16)
        if t <= hw.devices_per_node and n_devices % t == 0 and shape.n_heads % t == 0
    ):
        for pp in (p for p in _divisors(n_devices // tp) if p <= 64 and shape.n_layers % p == 0):
            dp = n_devices // (tp * pp)
            for mb in micro_batches:
                unit = dp * mb
                gb = max(unit, unit * round(batch_tokens / shape.seq_len / unit))
                if gb * shape.seq_len > 2 * batch_tokens:
                    continue  # the DP × micro-batch product alone exceeds the batch
                if batch_band is not None and not batch_band[0] <= gb <= batch_band[1]:
                    continue  # rounded outside the batch law's interval
                for z in zero_stages:
                    if pp > 1 and z >= 2 and search is not None and not search.zero3_with_pipeline:
                        continue  # e.g. DeepSpeed's pipeline engine refuses ZeRO-2/3
                    for sched, v in _schedules_for(pp, shape.n_layers, schedules):
                        for ck, off, ep in itertools.product(
                            act_ckpts, offload, expert_parallel_sizes(shape, dp)
                        ):
                            lo = Layout(
                                dp=dp,
                                tp=tp,
                                pp=pp,
                                micro_batch=mb,
                                global_batch=gb,
                                sp=tp > 1,
                                zero_stage=z,
                                act_ckpt=ck,
                                offload_optimizer=off,
                                pipeline_schedule=sched,
                                interleave=v,
                                ep=ep,
                            )
                            out.append(lo if fw is None else apply_framework(lo, fw))
    return out


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One planned run: shape, tokens, best layout and what it costs."""

    shape: ModelShape
    tokens: float
    layout: Layout
    mem_gb_per_device: float
    step_time_s: float
    mfu: float
    tokens_per_s: float
    days: float
    gpu_hours: float
    flops: float
    loss: float
    loss_ci: tuple[float, float] | None  # parameter-noise CI (the law's ci_level) of the mean loss
    # 90% prediction interval of this run's loss: parameter noise + run scatter + extrapolation
    # drift beyond the fitted data (analysis.core.intervals); None when the law has no error model
    loss_interval: tuple[float, float] | None = None
    # 90% intervals from the efficiency constants' error model (measured / predicted MFU on runs
    # they were not fitted to, `Efficiency.mfu_ratio_interval`); None without one
    mfu_interval: tuple[float, float] | None = None
    days_interval: tuple[float, float] | None = None
    gpu_hours_interval: tuple[float, float] | None = None
    # device-hours, days, energy, carbon and dollars with their intervals and assumptions
    # (analysis.planning.costs); `days`, `gpu_hours` and their intervals above are its figures
    costs: Costs | None = None

    def as_dict(self) -> dict[str, Any]:
        lo = self.layout
        moe = self.shape.moe
        routed = (
            {}
            if moe is None
            else {
                "n_params_active": self.shape.n_params_active,
                "moe": dataclasses.asdict(moe),
            }
        )
        return {
            "n_params": self.shape.n_params,
            **routed,
            "tokens": self.tokens,
            "n_layers": self.shape.n_layers,
            "d_model": self.shape.d_model,
            "n_heads": self.shape.n_heads,
            "d_ff": self.shape.ffn,
            "seq_len": self.shape.seq_len,
            "vocab_size": self.shape.vocab_size,
            "layout": {
                "dp": lo.dp,
                "tp": lo.tp,
                "pp": lo.pp,
                "micro_batch": lo.micro_batch,
                "zero_stage": lo.zero_stage,
                "act_ckpt": lo.act_ckpt,
                "sp": lo.sp,
                "global_batch": lo.global_batch,
                "grad_accum": lo.grad_accum,
                "attention": lo.attention,
                "offload_optimizer": lo.offload_optimizer,
                "pipeline_schedule": lo.pipeline_schedule,
                "interleave": lo.interleave,
                **({} if moe is None else {"ep": lo.ep}),
            },
            "mem_gb_per_device": self.mem_gb_per_device,
            "step_time_s": self.step_time_s,
            "mfu": self.mfu,
            "mfu_convention": MFU_CONVENTION,
            "tokens_per_s": self.tokens_per_s,
            "days": self.days,
            "gpu_hours": self.gpu_hours,
            "flops": self.flops,
            "loss": self.loss,
            "loss_ci": list(self.loss_ci) if self.loss_ci else None,
            "loss_interval": list(self.loss_interval) if self.loss_interval else None,
            "mfu_interval": list(self.mfu_interval) if self.mfu_interval else None,
            "days_interval": list(self.days_interval) if self.days_interval else None,
            "gpu_hours_interval": list(self.gpu_hours_interval) if self.gpu_hours_interval else None,
            **(self.costs.as_dict() if self.costs is not None else {}),
        }


def band_text(iv: tuple[float, float] | None, scale: float, fmt: str) -> str:
    """' [lo, hi]' of a planning interval for text, or '' without one."""
    return "" if iv is None else f" [{format(iv[0] * scale, fmt)}, {format(iv[1] * scale, fmt)}]"


def _layout_text(lo: Layout) -> str:
    """Compact layout label of the plan table, e.g. `dp64 tp2+sp pp1 mb4 z1 none`."""
    sched = ""
    if lo.pp > 1 and lo.breadth_first:
        sched = f" bf{lo.interleave}"
    elif lo.pp > 1 and lo.interleave > 1:
        sched = f" i{lo.interleave}"
    return (
        f"dp{lo.dp}{f'(ep{lo.ep})' if lo.ep > 1 else ''} tp{lo.tp}{'+sp' if lo.sp else ''} pp{lo.pp}{sched} "
        f"mb{lo.micro_batch} z{lo.zero_stage}{'+offload' if lo.offload_optimizer else ''} {lo.act_ckpt}"
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's answer: the best candidate, the ranked list, and what it was planned from."""

    best: Candidate
    candidates: tuple[Candidate, ...]
    law: ScalingLaw
    hardware: Hardware
    n_devices: int
    budget_flops: float | None
    max_days: float | None
    n_opt: float | None
    d_opt: float | None
    notes: tuple[str, ...]
    trainer: TrainerPlan | None = None  # what `python -m experiments.train` runs of `best`
    efficiency: Efficiency = DEFAULT_EFFICIENCY  # the constants the times were predicted with
    recipe: Recipe | None = None  # lr, batch, warm-up and schedule of `best` (tuned or not)
    data_limit: DataLimitPlan | None = None  # the plan under a fixed corpus (`unique_tokens`), or None
    framework: str = DEFAULT_FRAMEWORK.value  # the stack the layouts were searched and timed for
    calibration: dict[str, Any] | None = None  # `--calibrate`: the rows the profile was refitted on
    moe_law: MoeLaw | None = None  # plan --moe: the fitted MoE law the candidates' losses are from
    # a fixed model (`params`, `tokens`) rather than a budget: N* and D* are then the requested ones
    fixed_model: bool = False

    @property
    def unit(self) -> str:
        """How a device-hour of this hardware is named (GPU-hours, chip-hours on a TPU)."""
        return self.hardware.hour_unit

    @property
    def assumptions(self) -> Assumptions | None:
        """What the cost figures assume (every candidate shares them)."""
        return None if self.best.costs is None else self.best.costs.assumptions

    def target_text(self) -> str | None:
        """The size target as one line: the budget's compute-optimal N*, D*, or the fixed model."""
        if self.n_opt is None:
            return None
        if self.fixed_model:
            k = self.law.flops_per_param_token
            return (
                f"fixed model: N = {self.n_opt / 1e9:.2f}B params on D = {self.d_opt / 1e12:.3g}T tokens "
                f"({k:g}ND = {k * self.n_opt * self.d_opt:.3g} FLOPs); shapes rounded to real ones"
            )
        limit = "" if self.data_limit is None else f" on {self.data_limit.unique_tokens:.3g} unique tokens"
        return (
            f"compute-optimal for {self.budget_flops:.3g} FLOPs{limit}: N* = {self.n_opt / 1e9:.1f}B "
            f"params, D* = {self.d_opt / 1e12:.2f}T tokens"
        )

    @property
    def ci_percent(self) -> str:
        """The law's CI level as table text ("95")."""
        return f"{100 * self.law.ci_level:g}"

    @property
    def interval_label(self) -> str:
        """What the loss interval is: the 90% prediction interval when the law has an error model,
        else the parameter CI."""
        if self._law_error_model:
            return f"{100 * PREDICTION_LEVEL:g}% prediction interval"
        return f"{self.ci_percent}% CI"

    @property
    def _law_error_model(self) -> bool:
        """Whether the candidates' loss bands are prediction intervals (the law has an error model)."""
        law = self.law if self.moe_law is None else self.moe_law
        return law.prediction_error is not None

    def best_loss(self) -> dict[str, Any] | None:
        """The best loss expected at the budget (`allocation.budgets[i]` of the fit: the law's IsoFLOP
        minimum or the direct frontier, `loss_method`), or None without a budget or under a data
        limit (the data-constrained law's loss is then the plan's)."""
        if self.budget_flops is None or self.data_limit is not None or self.moe_law is not None:
            return None
        loss, band, method = self.law.best_loss(self.budget_flops)
        return {
            "C": self.budget_flops,
            "loss": loss,
            "loss_interval": list(band) if band else None,
            "loss_method": method,
        }

    def best_loss_text(self) -> str | None:
        """One line stating `best_loss`, or None."""
        b = self.best_loss()
        if b is None:
            return None
        band = b["loss_interval"]
        iv = f" [{band[0]:.3f}, {band[1]:.3f}] (90% prediction interval)" if band else ""
        return (
            f"expected best loss at {b['C']:.3g} FLOPs: {b['loss']:.3f}{iv}, from {b['loss_method']} "
            "(the candidates' losses below are the law's surface at their N, D)"
        )

    def loss_band(self, c: "Candidate") -> tuple[float, float] | None:
        """The interval `interval_label` names, for candidate `c`."""
        return c.loss_interval if self._law_error_model else c.loss_ci

    def as_dict(self) -> dict[str, Any]:
        best = self.best.as_dict()
        if self.trainer is not None:
            best["overrides"] = self.trainer.overrides
            best["trainer"] = self.trainer.as_dict()
        return {
            "best": best,
            "candidates": [c.as_dict() for c in self.candidates],
            "best_loss": self.best_loss(),
            "mfu_convention": MFU_CONVENTION,
            "law": law_dict(self.law),
            "hardware": self.hardware.name,
            "unit": self.unit,
            "fixed_model": self.fixed_model,
            "assumptions": None if self.assumptions is None else self.assumptions.as_dict(),
            "framework": self.framework,
            "calibration": self.calibration,
            "n_devices": self.n_devices,
            "budget_flops": self.budget_flops,
            "max_days": self.max_days,
            "n_opt": self.n_opt,
            "d_opt": self.d_opt,
            "notes": list(self.notes),
            "recipe": self.recipe.as_dict() if self.recipe is not None else None,
            "data_limit": self.data_limit.as_dict() if self.data_limit is not None else None,
            "efficiency": {
                "provenance": self.efficiency.provenance,
                "mfu_ratio_interval": (
                    list(self.efficiency.mfu_ratio_interval) if self.efficiency.mfu_ratio_interval else None
                ),
                "note": efficiency_note(self.efficiency, self.unit),
            },
        }

    def table(self) -> str:
        head = (
            f"{'#':>2} {'params':>8} {'tokens':>8} {'L':>4} {'d':>6} {'layout':34s} "
            f"{'mem GB':>7} {'step s':>7} {'MFU*':>5} {'days':>7} {self.unit.replace('hours', 'h'):>10} "
            f"loss ({self.interval_label})"
        )
        lines = [head]
        for i, c in enumerate(self.candidates):
            band = self.loss_band(c)
            ci = f"[{band[0]:.3f}, {band[1]:.3f}]" if band else "(CI unavailable)"
            lines.append(
                f"{i + 1:>2} {c.shape.n_params / 1e9:7.1f}B {c.tokens / 1e12:7.2f}T "
                f"{c.shape.n_layers:>4} {c.shape.d_model:>6} {_layout_text(c.layout):34s} "
                f"{c.mem_gb_per_device:7.1f} {c.step_time_s:7.2f} {c.mfu:5.3f} "
                f"{c.days:7.1f} {c.gpu_hours:10.3g} {c.loss:.3f} {ci}"
            )
        n = "active parameters" if any(c.shape.moe for c in self.candidates) else "all parameters"
        lines.append(f"MFU*: {MFU_CONVENTION} (model FLOPs 6N + 12·L·H·Q·T per token, N = {n})")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """A planning section for reports."""
        b = self.best
        lo = b.layout
        band = self.loss_band(b)
        ci = f"{band[0]:.3f}–{band[1]:.3f}" if band else "unavailable (the law has no bootstrap samples)"
        budget = (
            f"{self.budget_flops:.3g} FLOPs"
            if self.budget_flops
            else (
                f"a fixed {self.n_opt / 1e9:.3g}B-parameter model on {self.d_opt / 1e12:.3g}T tokens"
                if self.fixed_model
                else "no FLOP budget"
            )
        )
        lines = [
            "## Planning",
            "",
            f"Budget: {budget} on {self.n_devices} × {self.hardware.name}"
            + (f", at most {self.max_days:g} days" if self.max_days else "")
            + f". Law: {self.law.source}.",
            "",
            f"Proposed: **{b.shape.n_params / 1e9:.1f}B parameters** (L={b.shape.n_layers}, "
            f"d_model={b.shape.d_model}, {b.shape.n_heads} heads) on **{b.tokens / 1e12:.2f}T "
            f"tokens**, layout dp={lo.dp} tp={lo.tp} pp={lo.pp} micro-batch={lo.micro_batch} "
            f"ZeRO-{lo.zero_stage}{' + optimizer offload' if lo.offload_optimizer else ''} "
            f"checkpointing={lo.act_ckpt}: {b.mem_gb_per_device:.1f} GB/device, "
            f"{b.step_time_s:.2f} s/step, MFU {100 * b.mfu:.1f}%{band_text(b.mfu_interval, 100, '.1f')} "
            f"({MFU_CONVENTION}), **{b.days:.1f} days**{band_text(b.days_interval, 1, '.1f')} "
            f"({b.gpu_hours:.3g}{band_text(b.gpu_hours_interval, 1, '.3g')} {self.unit}); predicted loss "
            f"{b.loss:.3f} ({self.interval_label} {ci}).",
            "",
            *([costs_markdown(b.costs), ""] if b.costs is not None else []),
            *(
                [self.best_loss_text()[0].upper() + self.best_loss_text()[1:] + ".", ""]
                if self.best_loss()
                else []
            ),
            *(self.recipe.markdown() + [""] if self.recipe is not None else []),
            *(self.data_limit.markdown() + [""] if self.data_limit is not None else []),
            "```",
            self.table(),
            "```",
        ]
        lines += [f"- {n}" for n in self.notes]
        lines.append(f"- {efficiency_note(self.efficiency, self.unit)}")
        t = self.trainer
        if t is not None and t.estimate is not None:
            lacks = (
                f" (the proposed layout needs {', '.join(t.missing)}, which it lacks)" if t.missing else ""
            )
            lacks += f" (of candidate #{t.rank})" if t.rank > 1 else ""
            lines.append(
                f"- trainer command, the best layout `python -m experiments.train` can run{lacks}: "
                f"`{t.command()}`"
            )
        elif t is not None:
            lines.append(f"- trainer: {t.reason}")
        return "\n".join(lines)


def efficiency_note(eff: Efficiency, unit: str = "GPU-hours") -> str:
    """Where the MFU / days / device-hours intervals come from, and what they do not cover
    (`unit`: the hardware's name for a device-hour)."""
    iv = eff.mfu_ratio_interval
    if iv is None:
        return (
            f"no MFU interval: the efficiency constants ({eff.provenance}) carry no error model; "
            f"days and {unit} intervals are the goodput's alone"
        )
    return (
        f"MFU, days and {unit} intervals: 5%-95% of measured / predicted MFU "
        f"[{iv[0]:.2f}, {iv[1]:.2f}] on runs the constants were not fitted to ({eff.provenance}), "
        f"days and {unit} combined with the goodput's interval; a system unlike those runs can "
        "be off by more"
    )


def law_dict(law: ScalingLaw) -> dict[str, Any]:
    """The law a plan used, for its JSON: `params` {E, A, B, alpha, beta} (also at the top level,
    the older keys), its source and FLOPs per parameter-token."""
    params = {k: float(getattr(law, k)) for k in ("E", "A", "B", "alpha", "beta")}
    return {
        **params,
        "params": params,
        "source": law.source,
        "flops_per_param_token": law.flops_per_param_token,
    }


def costs_markdown(c: Costs) -> str:
    """The cost figures of a plan as a Markdown paragraph, with the assumptions and their sources."""
    a = c.assumptions
    src = "; ".join(
        f"{k}: {getattr(a, k).source}" + (f" ({getattr(a, k).as_of})" if getattr(a, k).as_of else "")
        for k in ("goodput", "watts", "pue", "grid_intensity", "price_per_hour")
    )
    return f"{c.text()[0].upper()}{c.text()[1:]}. Sources: {src}."


def fastest_layout(
    shape: ModelShape,
    n_devices: int,
    hw: Hardware,
    batch_tokens: int,
    precision: Precision,
    eff: Efficiency,
    offload: bool = False,
    batch_band: tuple[float, float] | None = None,
    framework: Framework | str | None = None,
):
    """(estimate, n_evaluated, leanest estimate) of the fastest fitting layout, or None first;
    `offload` also tries every layout with the optimizer offloaded to the host; `batch_band`
    limits the global batch; `framework` the layouts that stack runs (`layouts_for`)."""
    best, lean, n = None, None, 0
    offloads = (False, True) if offload else (False,)
    for lo in layouts_for(
        shape, n_devices, hw, batch_tokens, offload=offloads, batch_band=batch_band, framework=framework
    ):
        try:
            est = estimate_step(shape, lo, hw, precision, eff)
        except LayoutError:
            continue
        n += 1
        if lean is None or est.memory.total < lean.memory.total:
            lean = est
        if est.fits and (best is None or est.tokens_per_s > best.tokens_per_s):
            best = est
    return best, n, lean


def _no_fit_message(shape: ModelShape, n_devices: int, hw: Hardware, lean) -> str:
    need = ""
    if lean is not None:
        need = (
            f"; the leanest layout (tp{lean.layout.tp} pp{lean.layout.pp} "
            f"ZeRO-{lean.layout.zero_stage} {lean.layout.act_ckpt}) needs "
            f"{lean.memory.total / 1e9:.0f} GB per device"
        )
    return (
        f"no layout of the {shape.n_params / 1e9:.1f}B model (L={shape.n_layers}, "
        f"d={shape.d_model}) fits {hw.hbm_bytes / 1e9:.0f} GB {hw.name} devices on "
        f"{n_devices} devices{need}"
    )


@dataclasses.dataclass(frozen=True)
class _Request:
    """A checked planning request: what the search loops over (internal to `plan`)."""

    law: ScalingLaw
    hw: Hardware
    n_devices: int
    budget_flops: float | None
    max_days: float | None  # the tighter of --max-days and --gpu-hours / (24 · devices)
    seq_len: int
    vocab: int
    batch_tokens: int
    precision: Precision
    eff: Efficiency
    offload: bool = False  # also consider optimizer offload to the host
    top: int = 8  # candidates kept in the plan
    # global batches allowed (sequences): a batch law's 90% interval; None: any
    batch_band: tuple[float, float] | None = None
    data_limit: DataLimitPlan | None = None  # the budget under a fixed corpus: sizes and losses follow it
    framework: Framework = DEFAULT_FRAMEWORK  # the stack: its layouts, flags and (default) profile
    # a mixture of experts (`plan --moe`, analysis/planning/moe.py): the routed MLP of every shape,
    # the size the shapes' active parameters aim at (None: the law's N*), the law of its loss
    moe: MoEConfig | None = None
    size_target: float | None = None
    moe_law: MoeLaw | None = None
    # a fixed model: shapes near `params`, each trained on `tokens` (no FLOP budget)
    params: float | None = None
    tokens: float | None = None
    # what a device-hour costs on `hw` (analysis.planning.costs): goodput, power, PUE, grid, price
    costs: Assumptions | None = None

    @property
    def goodput(self) -> float:
        return 1.0 if self.costs is None else self.costs.goodput.value


def with_recipe(first: Plan, req: _Request, hp: HparamSet | None, explicit_batch: bool) -> Plan:
    """`first` with its training recipe. With a batch law (and no explicit --batch-tokens) the
    search runs again at the law's optimum for `first`'s winner, global batches inside the law's
    90% interval; if nothing fits there, `first` stands and a note says why. The trainer's
    overrides gain the laws' optim.* values at the trainer's own shape and tokens."""
    b = first.best
    if hp is None:
        return dataclasses.replace(
            first, recipe=untuned(b.shape.n_params, b.tokens, req.seq_len, b.layout.global_batch)
        )
    result, notes = first, []
    source = (BatchSource.FLAG if explicit_batch else BatchSource.LAW) if hp.has_batch else BatchSource.PLAN
    if source == BatchSource.LAW:
        law = hp.batch(b.shape.n_params, b.tokens)
        again = dataclasses.replace(
            req, batch_tokens=max(1, round(law.value * req.seq_len)), batch_band=(law.lo, law.hi)
        )
        try:
            result = search(again)
        except AnalysisError as e:
            source = BatchSource.FALLBACK
            notes.append(
                f"the batch law's {law.value:.4g} [{law.lo:.4g}, {law.hi:.4g}] sequences: {e}; "
                f"planned with --batch-tokens {req.batch_tokens} instead"
            )
    b = result.best
    recipe = tuned(hp, b.shape.n_params, b.tokens, req.seq_len, b.layout.global_batch, source, tuple(notes))
    t = result.trainer
    if t is not None and t.estimate is not None:
        same = t.shape == b.shape and math.isclose(t.tokens, b.tokens, rel_tol=1e-9)
        own = (
            recipe
            if same
            else tuned(hp, t.shape.n_params, t.tokens, req.seq_len, t.layout.global_batch, source)
        )
        t = dataclasses.replace(t, extra_overrides=tuple(own.overrides()))
    return dataclasses.replace(result, recipe=recipe, trainer=t)


def plan(
    budget_flops: float | None,
    n_devices: int,
    hardware: str | Hardware,
    law: ScalingLaw | None = None,
    max_days: float | None = None,
    max_gpu_hours: float | None = None,
    seq_len: int = 2048,
    vocab: int = 32000,
    batch_tokens: int | None = None,
    precision: Precision = BF16_MIXED,
    eff: Efficiency | None = None,
    top: int = 8,
    offload: bool = False,
    hparams: HparamSet | None = None,
    unique_tokens: float | None = None,
    data_law: RepeatedDataLaw | None = None,
    framework: Framework | str = DEFAULT_FRAMEWORK,
    calibration: dict[str, Any] | None = None,
    moe: MoEConfig | None = None,
    moe_law: MoeLaw | None = None,
    size_target: float | None = None,
    params: float | None = None,
    tokens: float | None = None,
    costs: CostOptions | None = None,
) -> Plan:
    """Plan a training run; see the module docstring. Raises AnalysisError for bad input.
    `offload` lets layouts keep the optimizer state (fp32 master weights, Adam moments) and its
    step on the host (ZeRO-Offload, Ren et al. 2021): PCIe transfers and CPU Adam time for
    device memory. `batch_tokens`: tokens per step (default DEFAULT_BATCH_TOKENS, or the batch
    law's optimum when `hparams` has one; given explicitly, it wins over the law). `hparams`:
    hyperparameter laws (`analysis.planning.recipe.load_hparam_set`) for `Plan.recipe`.
    `unique_tokens`: the corpus size U; the plan then follows the data-constrained `data_law`
    (default: Muennighoff et al.'s R_D*, R_N* on top of `law`, `data_limit.paper_prior`).
    `framework` (megatron | deepspeed | fsdp | jax): the stack whose layouts are searched, with its
    implementation flags and, unless `eff` is given, its efficiency profile
    (sharding/costmodel/frameworks.py). `calibration`: what `eff` was refitted on (for the JSON).
    `moe` (a mixture of experts' routed MLP): every shape is routed, sized by its active parameters
    (`size_target`, else the law's N*), its layouts searched with expert parallelism, its loss the
    fitted `moe_law`'s when given (`plan --moe`, analysis/planning/moe.py).
    `params`, `tokens` (together, instead of `budget_flops`): a fixed model, shapes near `params`
    parameters each trained on `tokens` tokens, the one closest to `params` first. `costs`: the
    user's overrides of the cost assumptions (analysis/planning/costs.py; None: the defaults)."""
    fw = parse_framework(framework, "--framework")
    eff = framework_efficiency(fw) if eff is None else eff
    req = check_request(
        budget_flops,
        n_devices,
        hardware,
        law,
        max_days,
        max_gpu_hours,
        seq_len,
        vocab,
        DEFAULT_BATCH_TOKENS if batch_tokens is None else batch_tokens,
        precision,
        eff,
        params=params,
        tokens=tokens,
        costs=costs,
    )
    req = dataclasses.replace(
        req, offload=bool(offload), top=top, framework=fw, moe=moe, moe_law=moe_law, size_target=size_target
    )
    if unique_tokens is not None:
        if budget_flops is None:
            raise AnalysisError("--unique-tokens plans a FLOP budget: give --budget FLOPS as well")
        dl = plan_data_limit(budget_flops, unique_tokens, data_law or paper_prior(req.law), req.batch_tokens)
        req = dataclasses.replace(req, data_limit=dl)
    result = with_recipe(search(req), req, hparams, explicit_batch=batch_tokens is not None)
    return dataclasses.replace(result, calibration=calibration)


def search(req: _Request) -> Plan:
    """Shapes near the size targets, each with its fastest fitting layout, ranked; the trainer's
    plan of the winner. The recipe is left to `with_recipe`."""
    n_opt, d_opt, targets = size_targets(req)
    shapes = shapes_near(targets, req)
    cands, failures = [], []
    for s in shapes:
        est, _, lean = fastest_layout(
            s,
            req.n_devices,
            req.hw,
            req.batch_tokens,
            req.precision,
            req.eff,
            offload=req.offload,
            batch_band=req.batch_band,
            framework=req.framework,
        )
        if est is None:
            failures.append(_no_fit_message(s, req.n_devices, req.hw, lean))
        else:
            cands.append(_candidate(s, est, req))
    if not cands:
        smallest = min(shapes, key=lambda s: s.n_params)
        raise AnalysisError(
            failures[0]
            + "; "
            + _more_devices_hint(
                smallest, req.n_devices, req.hw, req.batch_tokens, req.precision, req.eff, req.framework
            )
        )
    _rank(cands, req, n_opt)
    return Plan(
        best=cands[0],
        candidates=tuple(cands[: req.top]),
        law=req.law,
        hardware=req.hw,
        n_devices=req.n_devices,
        budget_flops=req.budget_flops,
        max_days=req.max_days,
        n_opt=n_opt,
        d_opt=d_opt,
        notes=_notes(req),
        trainer=_trainer_plan(cands, req),
        efficiency=req.eff,
        data_limit=req.data_limit,
        framework=req.framework.value,
        moe_law=req.moe_law,
        fixed_model=req.params is not None,
    )


def check_request(
    budget_flops,
    n_devices,
    hardware,
    law,
    max_days,
    max_gpu_hours,
    seq_len,
    vocab,
    batch_tokens,
    precision,
    eff,
    params: float | None = None,
    tokens: float | None = None,
    costs: CostOptions | None = None,
) -> _Request:
    """Validate `plan`'s arguments (one-line AnalysisError each) and fold the GPU-hour limit
    into a day limit, so the search only knows one kind of time limit."""
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    if (params is None) != (tokens is None):
        raise AnalysisError("a fixed model needs both --params N and --tokens D")
    for name, v in (("--params", params), ("--tokens", tokens)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise AnalysisError(f"{name} must be a positive number (got {v!r})")
    if params is not None and budget_flops is not None:
        raise AnalysisError("give --budget FLOPS or a fixed model (--params N --tokens D), not both")
    if params is not None and (max_days is not None or max_gpu_hours is not None):
        raise AnalysisError(
            "a fixed model's days are a result, not a limit: drop --max-days / --gpu-hours "
            "(plan checks --max-days and --max-cost against the result)"
        )
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or n_devices <= 0:
        raise AnalysisError(f"--gpus must be a positive integer (got {n_devices!r})")
    if budget_flops is not None and not (math.isfinite(budget_flops) and budget_flops > 0):
        raise AnalysisError(f"--budget must be a positive number of FLOPs (got {budget_flops!r})")
    for name, v in (("--max-days", max_days), ("--gpu-hours", max_gpu_hours)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise AnalysisError(f"{name} must be a positive number (got {v!r})")
    if max_gpu_hours is not None:
        d = max_gpu_hours / (24 * n_devices)
        max_days = d if max_days is None else min(max_days, d)
    if budget_flops is None and max_days is None and params is None:
        raise AnalysisError(
            "give --budget FLOPS, a fixed model (--params N --tokens D) or a time limit "
            "(--max-days / --gpu-hours)"
        )
    return _Request(
        law=law or ScalingLaw.chinchilla_2022(),
        hw=hw,
        n_devices=n_devices,
        budget_flops=budget_flops,
        max_days=max_days,
        seq_len=seq_len,
        vocab=vocab,
        batch_tokens=batch_tokens,
        precision=precision,
        eff=eff,
        params=params,
        tokens=tokens,
        costs=assumptions_for(hw, costs),
    )


# A time limit may make a smaller model better: sizes scanned, as fractions of N*, down to N*/30.
TIME_LIMITED_FRACTIONS = (1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08, 0.05, 0.033)


def size_targets(req: _Request) -> tuple[float | None, float | None, list[float]]:
    """(N*, D*, parameter counts to find shapes near): N* alone for a FLOP budget, a ladder of
    smaller sizes under a time limit (from N*, or from what the cluster delivers in the time)."""
    n_opt = d_opt = None
    targets: list[float] = []
    if req.params is not None:  # a fixed model: its N and D
        n_opt, d_opt = req.params, req.tokens
        targets = [n_opt]
    elif req.data_limit is not None:  # the optimum under the corpus limit, not Chinchilla's
        n_opt, d_opt = req.data_limit.optimum.n_params, req.data_limit.optimum.tokens
        targets = [n_opt]
    elif req.size_target is not None and req.budget_flops is not None:  # plan --moe's active size
        n_opt = req.size_target
        d_opt = req.budget_flops / (req.law.flops_per_param_token * n_opt)
        targets = [n_opt]
    elif req.budget_flops is not None:
        n_opt, d_opt = req.law.optimal(req.budget_flops)
        targets = [n_opt]
    if req.max_days is not None:
        ref = (
            n_opt
            if n_opt is not None
            else _size_for_time(req.law, req.n_devices, req.hw, req.max_days * req.goodput)
        )
        targets = [ref * f for f in TIME_LIMITED_FRACTIONS]
    return n_opt, d_opt, targets


def shapes_near(targets: Sequence[float], req: _Request) -> list[ModelShape]:
    """The real shapes closest to each target size, without duplicates, in first-seen order."""
    shapes: dict[tuple[int, int], ModelShape] = {}
    for n_t in targets:
        for s in candidate_shapes(
            n_t,
            req.seq_len,
            req.vocab,
            k=3 if req.max_days is None else 2,
            moe=req.moe,
            fine=req.params is not None,
        ):
            shapes[(s.n_layers, s.d_model)] = s
    return list(shapes.values())


def _candidate(s: ModelShape, est, req: _Request) -> Candidate:
    """Shape `s` trained with its fastest layout `est`: tokens from the budget (C = k·N·D with
    the law's k, N the active parameters of a mixture of experts), capped by the time limit, and
    what that costs and predicts."""
    k = req.law.flops_per_param_token
    if req.tokens is not None:
        tokens = req.tokens
    else:
        tokens = req.budget_flops / (k * s.n_params_active) if req.budget_flops is not None else math.inf
    if req.max_days is not None:  # the run trains for the goodput's share of the wall-clock
        tokens = min(tokens, est.tokens_per_s * req.max_days * 86400 * req.goodput)
    seconds = tokens / est.tokens_per_s
    mfu_ratio = req.eff.rate_interval(1.0, est.mfu)
    costs = price_run(seconds, req.n_devices, req.costs, mfu_ratio)
    return Candidate(
        shape=s,
        tokens=tokens,
        layout=est.layout,
        mem_gb_per_device=est.memory.total / 1e9,
        step_time_s=est.step_time_s,
        mfu=est.mfu,
        tokens_per_s=est.tokens_per_s,
        days=costs.days,
        gpu_hours=costs.device_hours,
        flops=k * s.n_params_active * tokens,
        **_losses(req, s.n_params_active, tokens),
        mfu_interval=req.eff.rate_interval(est.mfu, est.mfu),
        days_interval=costs.days_interval,
        gpu_hours_interval=costs.device_hours_interval,
        costs=costs,
    )


def _trainer_plan(cands: list[Candidate], req: _Request) -> TrainerPlan:
    """The fastest layout `python -m experiments.train` can run (ZeRO-0 = sharding.data, ZeRO-3 =
    sharding.fsdp) of the best-ranked candidate that has one, for that candidate's tokens (capped
    again under a time limit); the best candidate's failure when none has."""
    first = None
    for rank, c in enumerate(cands, start=1):
        layouts = layouts_for(
            c.shape,
            req.n_devices,
            req.hw,
            req.batch_tokens,
            zero_stages=TRAINER_ZERO_STAGES,
            batch_band=req.batch_band,
            framework=Framework.JAX,
        )
        tp = trainer_plan(
            c.shape,
            c.tokens,
            cands[0].layout,
            req.n_devices,
            req.hw,
            req.eff,
            layouts,
            max_days=req.max_days,
            rank=rank,
        )
        if tp.estimate is not None:
            return tp
        first = first or tp
    return first


def _losses(req: _Request, n: float, d: float) -> dict[str, Any]:
    """A candidate's loss, CI and prediction interval. Under a data limit the loss is the
    data-constrained law's and both bands are the Chinchilla law's, scaled by the ratio of the
    two losses: the fit's error model around the data-limited prediction (the uncertainty of
    R_D*, R_N* is not in them; `_notes` says so)."""
    if req.moe_law is not None:  # plan --moe: the fitted MoE law at the active N and the experts
        experts = 1 if req.moe is None else req.moe.experts
        band = req.moe_law.loss_interval(n, experts, d)
        return {
            "loss": float(req.moe_law.loss(n, experts, d)[0]),
            "loss_ci": None,
            "loss_interval": None if band is None else (float(band[0][0]), float(band[1][0])),
        }
    law = req.law
    loss, ci, band = law.loss(n, d), law.loss_ci(n, d), _interval(law, n, d)
    if req.data_limit is None:
        return {"loss": loss, "loss_ci": ci, "loss_interval": band}
    limited = float(req.data_limit.law.loss(n, d, req.data_limit.unique_tokens))
    r = limited / loss
    scaled = [None if b is None else (b[0] * r, b[1] * r) for b in (ci, band)]
    return {"loss": limited, "loss_ci": scaled[0], "loss_interval": scaled[1]}


def _interval(law: ScalingLaw, n: float, d: float) -> tuple[float, float] | None:
    band = law.loss_interval(n, d)
    return None if band is None else (float(band[0][0]), float(band[1][0]))


def _rank(cands: list[Candidate], req: _Request, n_opt: float | None) -> None:
    """Sort in place: lowest loss first under a time limit; else shapes within 10% of N* first,
    fastest first among them."""
    if req.params is not None:  # a fixed model: shapes within 2% of N, the most usual aspect first
        cands.sort(
            key=lambda c: (
                abs(math.log(c.shape.n_params_active / req.params)) > 0.02,
                round(abs(math.log(c.shape.d_model / c.shape.n_layers / ASPECT_TARGET)), 2),
                c.days,
            )
        )
    elif req.max_days is not None:
        cands.sort(key=lambda c: c.loss)
    else:
        cands.sort(key=lambda c: (abs(math.log(c.shape.n_params / n_opt)) > 0.1, c.days))


def _notes(req: _Request) -> tuple[str, ...]:
    """What the user should know about how the plan was made."""
    notes = []
    if req.moe_law is not None:
        notes.append(
            f"losses: the MoE law {req.moe_law.source} at each shape's active parameters and "
            f"{req.moe.experts if req.moe else 1} expert(s); sizes from the active-size target"
        )
    elif req.law.samples is None and req.law.prediction_error is None:
        notes.append("loss CI unavailable: the law has no bootstrap samples (point estimate only)")
    pe = req.law.prediction_error if req.moe_law is None else req.moe_law.prediction_error
    if pe is not None:
        notes.append(
            f"loss interval: {100 * PREDICTION_LEVEL:g}% prediction interval from the fit's measured "
            f"run scatter ({100 * pe.noise_sd:.2g}%), unseen-budget offset ({100 * pe.budget_sd:.2g}%) "
            f"and extrapolation drift ({100 * pe.drift_per_decade:.2g}% "
            f"per decade beyond the largest fitted run, {pe.scale_max:.3g} {pe.scale_role}) "
            f"plus parameter noise"
        )
    if req.max_days is not None:
        notes.append(
            f"tokens capped by what each layout processes in {req.max_days:g} days at goodput {req.goodput:g}"
        )
    a = req.costs
    if a is not None:
        g = a.goodput
        band = "given" if g.interval is None else f"90% {g.interval[0]:g}-{g.interval[1]:g}"
        notes.append(
            f"days and {req.hw.hour_unit}: the cost model's step time / goodput {g.value:g} "
            f"({band}: time lost to failures, restarts and checkpoints)"
        )
        if a.estimated_power or a.watts.value is None:
            notes.append(f"power of {req.hw.name}: {a.watts.source}")
    dl = req.data_limit
    if dl is not None:
        kind = "fitted" if dl.law.fitted else "the paper's prior, not a fit"
        notes.append(
            f"data limit: {dl.unique_tokens:.3g} unique tokens; sizes and losses follow the "
            f"{dl.law.name} law ({kind}); loss bands are the law's error model around the "
            "data-limited loss, without the uncertainty of the decay constants"
        )
    notes.append(
        f"framework: {req.framework.value} (its layouts: ZeRO "
        f"{'/'.join(map(str, FRAMEWORK_SEARCH[req.framework].zero_stages))}, pipeline schedules "
        f"{'/'.join(FRAMEWORK_SEARCH[req.framework].schedules)}; its program's flags and profile, "
        "sharding/costmodel/frameworks.py)"
    )
    notes.append(
        f"layouts: flash-attention 2, fused norms, bf16 mixed precision, "
        f"~{req.batch_tokens / 2**20:.3g}M tokens per step; efficiency constants: "
        f"{req.eff.provenance}"
    )
    return tuple(notes)


def _size_for_time(law: ScalingLaw, n_devices: int, hw: Hardware, days: float) -> float:
    """N* for the FLOPs the cluster delivers in `days` at 40% MFU (a starting point only)."""
    return law.optimal(0.4 * hw.peak_flops * n_devices * days * 86400)[0]


def _more_devices_hint(
    shape: ModelShape,
    n_devices: int,
    hw: Hardware,
    batch_tokens: int,
    precision: Precision,
    eff: Efficiency,
    framework: Framework | None = None,
) -> str:
    """Where the smallest candidate first fits (doubling the devices up to 8 times)."""
    n = n_devices
    for _ in range(8):
        n *= 2
        if fastest_layout(shape, n, hw, batch_tokens, precision, eff, framework=framework)[0] is not None:
            return f"the {shape.n_params / 1e9:.1f}B model first fits on {n} devices"
    return "use devices with more memory"
