"""The modes of `python -m analysis plan` other than the plain plan, and what they share with it:
a mixed cluster (`--hardware a:n,b:m`), the data-limited allocation alone (`--unique-tokens`
without --hardware) and a mixture of experts (`--moe`); the plan's JSON payload and its `--json`
output. The planning itself is analysis/planning's; these parse, check and print."""

from __future__ import annotations

import argparse
import pathlib

from analysis.commands._flags import positive_int
from analysis.commands._options import emit_json
from analysis.laws.allocation import ScalingLaw
from analysis.laws.moe import MoeLaw
from analysis.planning.data_limit import plan_data_limit
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
        help="plan a routed model: the loss, layout and recipe of each expert count",
    )
    g.add_argument(
        "--moe-law",
        type=pathlib.Path,
        metavar="FIT.json",
        help="the MoE law: `scalelab fit RUNS --law moe --json FIT.json` (or as --law)",
    )
    g.add_argument(
        "--experts",
        type=expert_list,
        default=DEFAULT_EXPERTS,
        metavar="E,E,...",
        help=f"expert counts to compare (default {','.join(map(str, DEFAULT_EXPERTS))}; 1 = dense)",
    )
    g.add_argument("--top-k", type=positive_int, default=2, help="experts per token (default 2)")
    g.add_argument(
        "--capacity-factor",
        type=float,
        default=1.25,
        metavar="F",
        help="expert capacity / even share (default 1.25; 0: dropless)",
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


def plan_kwargs(opts, eff, hparams, calibration) -> dict:
    """The `planner.plan` arguments every single-device-type plan takes from the flags."""
    return dict(
        seq_len=opts.seq_len,
        vocab=opts.vocab,
        batch_tokens=opts.batch_tokens,
        top=opts.top,
        eff=eff,
        offload=opts.offload,
        hparams=hparams,
        framework=opts.framework,
        calibration=calibration,
    )


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


def run_moe(opts, law: ScalingLaw, moe_law: MoeLaw | None, eff, hparams, calibration) -> int:
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
            **plan_kwargs(opts, eff, hparams, calibration),
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


def run_data_limit(opts, data_law) -> int:
    """`plan --budget C --unique-tokens U` without --hardware: the data-limited allocation alone."""
    if not opts.budget:
        raise AnalysisError("--unique-tokens plans a FLOP budget: give --budget FLOPS as well")
    results = [plan_data_limit(b, opts.unique_tokens, data_law, opts.batch_or_default) for b in opts.budget]
    for r in results:
        print(f"budget {r.budget_flops:.3g} FLOPs")
        for line in r.text_lines():
            print(line)
    emit_plans(opts, [{"budget_flops": r.budget_flops, "data_limit": r.as_dict()} for r in results])
    if opts.markdown:
        sections = [f"## Planning: {r.budget_flops:.3g} FLOPs\n\n" + "\n".join(r.markdown()) for r in results]
        opts.markdown.write_text("\n\n".join(sections) + "\n")
    return 0


def plan_payload(result) -> dict:
    """The plan's JSON: `Plan.as_dict()` plus `N_opt`/`D_opt`, the casing of the fit's allocation
    (`n_opt`/`d_opt` stay as deprecated aliases)."""
    out = result.as_dict()
    out["N_opt"], out["D_opt"] = out.get("n_opt"), out.get("d_opt")
    return out


def emit_plans(opts, payloads: list[dict]) -> None:
    """`--json`: one plan as it is, several as {"plans": [...]}."""
    emit_json(opts.json, payloads[0] if len(payloads) == 1 else {"plans": payloads})
