"""`plan --moe` and a mixed cluster (`--hardware a:n,b:m`): their flags, checks and printing."""

from __future__ import annotations

import argparse
import pathlib

from analysis.commands._flags import positive_int
from analysis.commands._plan_modes import emit_plans, plan_kwargs, plan_payload
from analysis.laws.allocation import ScalingLaw
from analysis.laws.moe import MoeLaw
from analysis.planning.mixed import plan_mixed
from analysis.planning.moe import DEFAULT_EXPERTS, plan_moe
from analysis.planning.text import plan_lines, trainer_lines
from models.base.errors import AnalysisError
from sharding.costmodel.hetero import parse_cluster


def add_moe_arguments(p: argparse.ArgumentParser) -> None:
    """The `mixture of experts` group: --moe, --moe-law, --experts, --top-k, --capacity-factor."""
    g = p.add_argument_group("mixture of experts")
    g.add_argument(
        "--moe",
        action="store_true",
        help="a routed model: loss, layout of each expert count",
    )
    g.add_argument(
        "--moe-law",
        type=pathlib.Path,
        metavar="FIT.json",
        help="the MoE law (`fit --law moe --json`, or as --law)",
    )
    g.add_argument(
        "--experts",
        type=expert_list,
        default=DEFAULT_EXPERTS,
        metavar="E,E,...",
        help=f"expert counts (default {DEFAULT_EXPERTS[0]},{DEFAULT_EXPERTS[1]},..,{DEFAULT_EXPERTS[-1]}; "
        "1 = dense)",
    )
    g.add_argument("--top-k", type=positive_int, default=2, help="experts per token (default 2)")
    g.add_argument(
        "--capacity-factor",
        type=float,
        default=1.25,
        metavar="F",
        help="expert capacity / even share (1.25; 0: dropless)",
    )


def run_mixed(opts, law: ScalingLaw, eff) -> int:
    """`plan --hardware a:n,b:m`: heterogeneous data parallelism over the device groups, and the
    same budget on each group alone (analysis/planning/mixed.py)."""
    groups = parse_cluster(opts.hardware)
    total = sum(g.count for g in groups)
    if opts.gpus is not None and opts.gpus != total:
        raise AnalysisError(
            f"--gpus {opts.gpus} does not match the mixed --hardware's {total} devices; drop --gpus"
        )
    for flag, v in (
        ("--max-days", opts.max_days),
        ("--gpu-hours", opts.gpu_hours),
        ("--emit", opts.emit),
        ("--markdown", opts.markdown),
        ("--offload", opts.offload),
        ("--hparams", opts.hparams),
        ("--unique-tokens", opts.unique_tokens),
        ("--params", opts.params),
        ("--inference-tokens", opts.inference_tokens),
        ("--target-loss", opts.target_loss),
        ("--max-cost", opts.max_cost),
        ("--objective", opts.objective != "time"),
    ):
        if v:
            raise AnalysisError(f"{flag} is not supported for a mixed cluster yet; plan with --budget")
    if not opts.budget:
        raise AnalysisError("a mixed-cluster plan needs --budget FLOPS")
    results = [
        plan_mixed(
            b,
            opts.hardware,
            law=law,
            seq_len=opts.seq_len,
            vocab=opts.vocab,
            batch_tokens=opts.batch_or_default,
            eff=eff,
        )
        for b in opts.budget
    ]
    for r in results:
        print(r.text())
    emit_plans(opts, [r.as_dict() for r in results])
    return 0


def expert_list(text: str) -> tuple[int, ...]:
    """`--experts 1,2,4,8`: whole expert counts >= 1 (an argparse type)."""
    try:
        out = tuple(int(v) for v in text.replace(" ", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expert counts are whole numbers, e.g. 1,2,4,8 (got {text!r})"
        ) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expert counts must be >= 1 (got {text!r})")
    return out


def moe_law_of(opts) -> MoeLaw | None:
    """The MoE law: --moe-law, or --law when it holds one (then only with --moe); None without."""
    if opts.moe_law is not None:
        if not opts.moe:
            raise AnalysisError("--moe-law is the law of a routed plan: add --moe")
        return MoeLaw.from_json(opts.moe_law)
    if opts.law is not None and MoeLaw.in_json(opts.law):
        if not opts.moe:
            raise AnalysisError(
                f"--law {opts.law} holds a mixture-of-experts law (fit --law moe): plan with it by "
                "adding --moe"
            )
        return MoeLaw.from_json(opts.law)
    return None


def run_moe(opts, law: ScalingLaw, moe_law: MoeLaw | None, eff, hparams, calibration, costs=None) -> int:
    """`plan --moe`: each expert count at the budget, the chosen one's plan (analysis/planning/moe.py)."""
    if not opts.budget:
        raise AnalysisError("plan --moe compares expert counts at a FLOP budget: give --budget FLOPS")
    for flag, v in (
        ("--unique-tokens", opts.unique_tokens),
        ("--max-days", opts.max_days),
        ("--gpu-hours", opts.gpu_hours),
    ):
        if v:
            raise AnalysisError(f"{flag} is not supported with --moe yet; plan with --budget")
    if opts.capacity_factor < 0:
        raise AnalysisError(f"--capacity-factor must be >= 0 (0: dropless), got {opts.capacity_factor:g}")
    results = [
        plan_moe(
            budget,
            opts.gpus,
            opts.hardware,
            law=law,
            moe_law=moe_law,
            experts=opts.experts,
            top_k=opts.top_k,
            capacity_factor=opts.capacity_factor or None,
            **plan_kwargs(opts, eff, hparams, calibration, costs),
        )
        for budget in opts.budget
    ]
    for r in results:
        for line in (
            r.text_lines() + plan_lines(r.plan) + (trainer_lines(r.plan) if opts.emit == "overrides" else [])
        ):
            print(line)
    emit_plans(opts, [{**plan_payload(r.plan), "moe": r.as_dict()} for r in results])
    if opts.markdown:
        opts.markdown.write_text("\n\n".join(r.plan.to_markdown() for r in results) + "\n")
    unrunnable = [r.plan.trainer.reason for r in results if opts.emit and not r.plan.trainer.overrides]
    if unrunnable:
        raise AnalysisError(f"--emit overrides: {unrunnable[0]}")
    return 0
