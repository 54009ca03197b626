"""The modes of `python -m analysis plan` other than the plain plan, and what they share with it:
a mixed cluster (`--hardware a:n,b:m`), the data-limited allocation alone (`--unique-tokens`
without --hardware), a mixture of experts (`--moe`), a fixed model or several hardware types
compared (`--params/--tokens`, `--hardware a,b,c`, `--objective`, `--max-cost`) and the
inference-aware size (`--inference-tokens`, `--target-loss`); the cost flags; the plan's JSON
payload and its `--json` output. The planning itself is analysis/planning's; these parse, check
and print."""

from __future__ import annotations

import argparse
import math
import pathlib

from analysis.commands._flags import fraction, positive_float, positive_int
from analysis.commands._options import emit_json
from analysis.laws.allocation import ScalingLaw
from analysis.laws.moe import MoeLaw
from analysis.planning.choice import HardwareOption, check_objective, choose, limits_broken
from analysis.planning.costs import OBJECTIVES, CostOptions, assumptions_for, parse_per_hardware
from analysis.planning.data_limit import plan_data_limit
from analysis.planning.inference import InferencePlan, plan_inference
from analysis.planning.mixed import plan_mixed
from analysis.planning.moe import DEFAULT_EXPERTS, plan_moe
from analysis.planning.planner import law_dict, plan
from analysis.planning.text import plan_lines, trainer_lines
from models.base.errors import AnalysisError
from models.config import MoEConfig
from sharding.costmodel import Hardware, load_hardware
from sharding.costmodel.hetero import parse_cluster


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """The `cost, energy, carbon` group: what picks the hardware, its limits and the assumptions."""
    g = p.add_argument_group("cost, energy, carbon (docs/plan.md)")
    g.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="time",
        metavar="OBJ",
        help="time|cost|energy|carbon: the winner (time)",
    )
    g.add_argument("--max-cost", type=positive_float, metavar="USD", help="dollar limit")
    g.add_argument("--goodput", type=float, metavar="F", help="share of wall-clock that trains (0.9)")
    g.add_argument("--pue", type=float, metavar="X", help="power usage effectiveness (1.1)")
    g.add_argument("--watts", metavar="[HW=]W,..", help="device power (default: the hardware file)")
    g.add_argument("--price", metavar="[HW=]USD,..", help="USD per device-hour (default: the hardware file)")
    g.add_argument("--region", metavar="NAME", help="grid of conf/regions.yaml (world)")
    g.add_argument("--grid-intensity", type=nonnegative_float, metavar="KG", help="kg CO2e per kWh")


def add_inference_arguments(p: argparse.ArgumentParser) -> None:
    """The `sized for inference` group (Sardana et al. 2024)."""
    g = p.add_argument_group("sized for inference (Sardana et al. 2024)")
    g.add_argument(
        "--inference-tokens", type=nonnegative_float, metavar="T", help="tokens served in the model's life"
    )
    g.add_argument("--target-loss", type=positive_float, metavar="L", help="quality to reach (--budget's)")
    g.add_argument(
        "--inference-context", type=nonnegative_float, default=0.0, metavar="C", help="attended tokens (0)"
    )
    g.add_argument("--inference-mfu", type=fraction, metavar="F", help="serving MFU (--objective cost)")


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return v


def cost_options(opts) -> CostOptions:
    """The cost flags as `CostOptions` (one error line for a bad region, price or power)."""
    own = [hw.name for hw in hardware_names(opts.hardware)] if opts.hardware else []
    return CostOptions(
        goodput=opts.goodput,
        pue=opts.pue,
        grid_intensity=opts.grid_intensity,
        region=opts.region,
        watts={} if opts.watts is None else parse_per_hardware(opts.watts, "--watts", own),
        prices={} if opts.price is None else parse_per_hardware(opts.price, "--price", own),
    )


def hardware_names(spec: str) -> list[Hardware]:
    """`--hardware a100-80gb,h100,...`: each type once (aliases resolved; one error line for an
    unknown name)."""
    out: dict[str, Hardware] = {}
    for part in (x.strip() for x in str(spec).split(",")):
        if part:
            hw = load_hardware(part)
            out.setdefault(hw.name, hw)
    if not out:
        raise AnalysisError("--hardware names no hardware type")
    return list(out.values())


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


def plan_kwargs(opts, eff, hparams, calibration, costs: CostOptions | None = None) -> dict:
    """The `planner.plan` arguments every single-device-type plan takes from the flags."""
    return dict(
        costs=costs,
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


# ---- the inference-aware size --------------------------------------------------------------------
def sizing_of(
    opts, law: ScalingLaw, weights=(1.0, 1.0), objective: str = "compute", notes=()
) -> InferencePlan:
    """The inference-aware (N, D) of the flags: --inference-tokens (0 without), the target loss of
    --target-loss, --params/--tokens or --budget (one budget)."""
    if opts.budget and len(opts.budget) > 1:
        raise AnalysisError("--inference-tokens sizes one model: give one --budget")
    return plan_inference(
        law,
        0.0 if opts.inference_tokens is None else opts.inference_tokens,
        budget_flops=opts.budget[0] if opts.budget else None,
        target_loss=opts.target_loss,
        reference=None if opts.params is None else (opts.params, opts.tokens),
        context=opts.inference_context,
        weights=weights,
        objective=objective,
        notes=tuple(notes),
    )


def run_inference(opts, law: ScalingLaw) -> int:
    """`plan --inference-tokens T` without --hardware: the law's inference-aware size alone."""
    if opts.objective == "cost":
        raise AnalysisError(
            "--objective cost with --inference-tokens prices FLOPs on a device: give --hardware and --gpus"
        )
    for flag, v in (("--max-cost", opts.max_cost), ("--max-days", opts.max_days), ("--moe", opts.moe)):
        if v:
            raise AnalysisError(f"{flag} needs --hardware: the law-only inference plan has no device")
    inf = sizing_of(opts, law)
    print(f"law: {law.source}")
    for line in inf.text_lines():
        print(line)
    emit_plans(
        opts,
        [
            {
                "budget_flops": opts.budget[0] if opts.budget else None,
                "law": law_dict(law),
                "inference": inf.as_dict(),
            }
        ],
    )
    if opts.markdown:
        opts.markdown.write_text("\n".join(["## Planning", "", *inf.markdown()]) + "\n")
    return 0


# ---- a fixed model, several hardware types, limits and objectives --------------------------------
def run_choice(
    opts, law: ScalingLaw, names: list[Hardware], eff, hparams, calibration, costs, data_law
) -> int:
    """`plan --params N --tokens D`, `--hardware a,b,c`, `--objective`, `--max-cost` and the
    inference-aware size on hardware: one plan per hardware type, the winner's plan printed in
    full (analysis/planning/choice.py)."""
    check_objective(opts.objective)
    if opts.objective == "cost":  # a missing price is one error line before any planning
        missing = [hw.name for hw in names if assumptions_for(hw, costs).price_per_hour.value is None]
        if missing:
            raise AnalysisError(
                f"--objective cost: no price for {', '.join(missing)}; give --price "
                + ",".join(f"{m}=USD_PER_HOUR" for m in missing)
            )
    moe = None
    if opts.moe:
        if len(opts.experts) != 1:
            raise AnalysisError("--moe with a fixed model plans one expert count: give --experts E")
        e = opts.experts[0]
        moe = (
            None
            if e == 1
            else MoEConfig(experts=e, top_k=opts.top_k, capacity_factor=opts.capacity_factor or None)
        )
    inference = (
        _sizing_on_hardware(opts, law, names, eff, hparams, calibration, costs) if opts.sizing else None
    )
    fixed = (opts.params, opts.tokens) if inference is None else (inference.optimum.n, inference.optimum.d)
    if (
        inference is not None
        and inference.inference_tokens == 0
        and opts.params is None
        and opts.target_loss is None
    ):
        fixed = (None, None)  # no inference: the budget's own plan (its N*, D* are the optimum)
    budgets = [None] if fixed[0] is not None else (opts.budget or [None])
    payloads, winners = [], []
    for budget in budgets:
        options = []
        for hw in names:
            try:
                p = _plan_on(opts, law, hw, budget, fixed, eff, hparams, calibration, costs, data_law, moe)
            except AnalysisError as e:
                if len(names) == 1:
                    raise
                options.append(HardwareOption(hw.name, None, str(e)))
                continue
            broken = limits_broken(p, opts.max_days, opts.max_cost) if fixed[0] is not None else ()
            options.append(HardwareOption(hw.name, p, violates=broken))
        choice = choose(options, opts.objective, opts.max_days, opts.max_cost)
        w = choice.winner.plan
        if inference is not None:
            for line in inference.text_lines():
                print(line)
        if len(names) > 1:
            for line in choice.text_lines():
                print(line)
            print(f"the winner's plan ({choice.winner.hardware}):")
        for line in plan_lines(w) + (trainer_lines(w) if opts.emit == "overrides" else []):
            print(line)
        payload = plan_payload(w)
        payload["objective"] = opts.objective
        if len(names) > 1:
            payload.update(choice.as_dict())
        if inference is not None:
            payload["inference"] = inference.as_dict()
        payloads.append(payload)
        winners.append(w)
    emit_plans(opts, payloads)
    if opts.markdown:
        md = [
            w.to_markdown() + ("" if inference is None else "\n\n" + "\n".join(inference.markdown()))
            for w in winners
        ]
        opts.markdown.write_text("\n\n".join(md) + "\n")
    unrunnable = [w.trainer.reason for w in winners if opts.emit and not w.trainer.overrides]
    if unrunnable:
        raise AnalysisError(f"--emit overrides: {unrunnable[0]}")
    return 0


def _plan_on(opts, law, hw, budget, fixed, eff, hparams, calibration, costs, data_law, moe):
    """One hardware type's plan: the fixed model, or the budget with its limits (a --max-cost
    becomes a device-hour limit at that hardware's price)."""
    kw = plan_kwargs(opts, eff, hparams, calibration, costs)
    if fixed[0] is not None:
        if opts.unique_tokens is not None:
            raise AnalysisError(
                "--unique-tokens plans a FLOP budget: drop --params/--tokens or --inference-tokens"
            )
        return plan(None, opts.gpus, hw, law=law, params=fixed[0], tokens=fixed[1], moe=moe, **kw)
    limit = opts.gpu_hours
    if opts.max_cost is not None:
        price = assumptions_for(hw, costs).price_per_hour.value
        if price is None:
            raise AnalysisError(
                f"--max-cost needs a price for {hw.name}: give --price {hw.name}=USD_PER_HOUR"
            )
        limit = opts.max_cost / price if limit is None else min(limit, opts.max_cost / price)
    return plan(
        budget,
        opts.gpus,
        hw,
        law=law,
        max_days=opts.max_days,
        max_gpu_hours=limit,
        unique_tokens=opts.unique_tokens,
        data_law=data_law,
        moe=moe,
        **kw,
    )


def _sizing_on_hardware(opts, law, names, eff, hparams, calibration, costs) -> InferencePlan:
    """The inference-aware size for a plan on hardware: by compute, or with --objective cost by
    dollars (one hardware type: training FLOPs at its planned MFU and goodput, inference FLOPs at
    --inference-mfu, else at the training MFU; the price is the same and cancels)."""
    if opts.objective != "cost":
        notes = (
            []
            if opts.objective == "time"
            else [f"sized by compute; --objective {opts.objective} picks the hardware"]
        )
        return sizing_of(opts, law, notes=notes)
    if len(names) != 1:
        raise AnalysisError(
            "--objective cost with --inference-tokens sizes the model for one hardware type: "
            "give one --hardware"
        )
    first = sizing_of(opts, law)  # the Chinchilla model's plan gives the training MFU
    c = first.chinchilla
    p = plan(
        None,
        opts.gpus,
        names[0],
        law=law,
        params=c.n,
        tokens=c.d,
        **plan_kwargs(opts, eff, hparams, calibration, costs),
    )
    mfu_train, goodput = p.best.mfu, p.assumptions.goodput.value
    mfu_inf = opts.inference_mfu if opts.inference_mfu is not None else mfu_train
    note = (
        f"cost weights: training FLOPs at MFU {mfu_train:.3f} (the plan's) x goodput {goodput:g}, "
        "inference FLOPs at "
        + (
            f"--inference-mfu {mfu_inf:g}"
            if opts.inference_mfu is not None
            else f"the training MFU {mfu_inf:.3f} (no --inference-mfu)"
        )
        + f", both at {names[0].name}'s price"
    )
    return sizing_of(
        opts, law, weights=(1 / (mfu_train * goodput), 1 / mfu_inf), objective="cost", notes=[note]
    )
