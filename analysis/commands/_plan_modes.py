"""The modes of `python -m analysis plan` other than the plain plan, and what they share with it:
the data-limited allocation alone (`--unique-tokens` without --hardware), a fixed model or several
hardware types compared (`--params/--tokens`, `--hardware a,b,c`, `--objective`, `--max-cost`) and
the inference-aware size (`--inference-tokens`, `--target-loss`); the plan's JSON payload and its
`--json` output. A mixed cluster and `--moe`: `_plan_moe.py`; the cost flags: `_plan_costs.py`.
The planning itself is analysis/planning's; these parse, check and print."""

from __future__ import annotations

import argparse

from analysis.commands._flags import fraction, positive_float
from analysis.commands._options import emit_json
from analysis.commands._plan_costs import nonnegative_float
from analysis.laws.allocation import ScalingLaw
from analysis.planning.choice import HardwareOption, check_objective, choose, limits_broken
from analysis.planning.costs import CostOptions, assumptions_for
from analysis.planning.data_limit import plan_data_limit
from analysis.planning.inference import InferencePlan, plan_inference
from analysis.planning.planner import law_dict, plan
from analysis.planning.text import plan_lines, trainer_lines
from models.base.errors import AnalysisError
from models.config import MoEConfig
from sharding.costmodel import Hardware


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
