"""`python -m analysis plan --budget 1e23 [--law FIT.json] --hardware h100 --gpus 1024` — plan a run.

Finds the compute-optimal model size and tokens for the budget under the law (a `python -m
analysis fit` JSON, default Chinchilla's published constants), rounds to real shapes, searches
TP × PP × DP × micro-batch × ZeRO × checkpointing for the fastest layout that fits, and prints a
ranked table. With --max-days or --gpu-hours, tokens are capped by what fits in the time and the
lowest predicted loss wins. --json writes {"best": {...}, "candidates": [...], "N_opt", "D_opt",
...}; with several --budget values, one plan per budget: {"plans": [{...}, ...]}. MFU is the cost
model's, PaLM's 6N + 12LHQT (`mfu_convention`: "palm_6N+12LHQT"; models/flops.py).

Plan → train: best.overrides (JSON) are the `python -m experiments.train` overrides of the best
layout the trainer can run (best.trainer: that layout and its predictions; best.trainer.missing:
what the planner's own best layout needs that the trainer lacks, e.g. pipeline parallelism).
`--emit overrides` also prints that command line, as the last line of each plan.

Recipe: `--hparams HP.json` (from `python -m analysis fit-hparams`) states the learning rate and
batch (sequences and tokens) of the recommended run with 90% intervals, plus its warm-up and
schedule (the trainer's defaults); a batch law sets the batch the layouts are searched for, and
the emitted overrides carry `optim.lr=` and `train.batch_size=`. JSON: `recipe` per plan
(analysis/planning/recipe.py). Without --hparams the plan says the recipe is untuned.

A fixed corpus: `--unique-tokens U` plans under the data limit (analysis/planning/data_limit.py):
the optimum N, D and epochs, the loss penalty against unlimited data, the epoch count past which
one more buys < 1% of the first's value, and a bigger model at fewer epochs; JSON `data_limit`
per plan. The law is a `data_constrained` / `data_constrained_d` fit (--law), else Muennighoff et
al. 2023's R_D*, R_N* on top of the Chinchilla law (the paper's law, not a fit). Without
--hardware only that part is planned (no layouts).

Frameworks: `--framework megatron|deepspeed|fsdp|jax` (default jax = this repository's trainer)
searches the layouts that stack runs (ZeRO stages, pipeline schedules incl. breadth-first where
it has one) with its program's flags and efficiency profile (sharding/costmodel/frameworks.py).
`--calibrate MEASURED.csv|SWEEP_DIR` first refits that profile to measured rows (layout-eval's
columns plus measured_step_time_s or measured_tokens_per_s) or a trainer sweep, says how many
rows it was refitted on, and widens the MFU / days intervals by the leave-one-out error over
those rows (wider with fewer rows); then plans with it.
"""

from __future__ import annotations

import argparse
import pathlib

from analysis.commands._options import add_budget_argument, add_json_argument, emit_json
from analysis.laws.allocation import ScalingLaw
from analysis.planning.planner import DEFAULT_BATCH_TOKENS, band_text, efficiency_note, plan
from analysis.planning.recipe import load_hparam_set
from models.base.errors import AnalysisError
from sharding.costmodel import MFU_CONVENTION
from sharding.costmodel.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, Framework, parse_framework
from sharding.costmodel.hetero import is_mixed


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return v


def _add_costmodel_arguments(p: argparse.ArgumentParser) -> None:
    """The options that choose the cost model's constants: a fitted file, a stack, measured rows."""
    p.add_argument(
        "--efficiency",
        type=pathlib.Path,
        metavar="EFF.json",
        help="efficiency constants fitted to your own runs (`python -m analysis "
        "layout-eval --calibrate SWEEP_DIR`); default: Hagemann et al.'s A100 fit",
    )
    p.add_argument(
        "--framework",
        default=DEFAULT_FRAMEWORK.value,
        help=f"the training stack: {' | '.join(FRAMEWORKS)} (default {DEFAULT_FRAMEWORK.value}: this "
        "repository's trainer); its layouts, program and efficiency profile",
    )
    p.add_argument(
        "--calibrate",
        type=pathlib.Path,
        metavar="MEASURED.csv|SWEEP_DIR",
        help="refit the framework's profile to measured rows (layout-eval columns + "
        "measured_step_time_s or measured_tokens_per_s) or a trainer sweep, then plan with it",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan", help="scaling law + cost model -> model size, tokens, layout", description=__doc__
    )
    add_budget_argument(
        p, "to plan for (C = k·N·D with the law's k, 6 unless the fit says otherwise; one plan per budget)"
    )
    p.add_argument(
        "--law",
        type=pathlib.Path,
        help="fit JSON from `python -m analysis fit` (default: Hoffmann et al. 2022 constants)",
    )
    p.add_argument(
        "--hardware",
        help="catalogue name (h100, a100-80gb, ...) or YAML; a mixed cluster as "
        "NAME:COUNT,NAME:COUNT (e.g. a100-80gb:256,h100-sxm:128); required unless the plan is "
        "only --budget with --unique-tokens",
    )
    p.add_argument(
        "--gpus",
        type=_positive_int,
        help="number of devices (required for one device type; a mixed --hardware gives the counts)",
    )
    p.add_argument("--max-days", type=_positive_float, help="wall-clock limit in days")
    p.add_argument("--gpu-hours", type=_positive_float, help="device-hour limit")
    p.add_argument("--seq-len", type=_positive_int, default=2048, help="sequence length (default 2048)")
    p.add_argument("--vocab", type=_positive_int, default=32000, help="vocabulary size (default 32000)")
    p.add_argument(
        "--batch-tokens",
        type=_positive_int,
        default=None,
        help=f"target tokens per optimizer step (default {DEFAULT_BATCH_TOKENS // 2**20}M, or the "
        "--hparams batch law's optimum; given explicitly it wins over the law)",
    )
    p.add_argument(
        "--hparams",
        type=pathlib.Path,
        metavar="HP.json",
        help="hyperparameter laws from `python -m analysis fit-hparams --json`: state the run's "
        "learning rate and batch with 90%% intervals and emit optim.lr / train.batch_size",
    )
    p.add_argument(
        "--unique-tokens",
        type=float,
        metavar="U",
        help="unique tokens in the corpus (e.g. 2e12): plan under this data limit (repeated epochs "
        "decay in value, Muennighoff et al. 2023): optimum N, D, epochs, penalty against unlimited "
        "data, the < 1%%-epoch point, a bigger model at fewer epochs; with a data_constrained(_d) "
        "--law fit, else the paper's R_D*=15.4, R_N*=5.3 on the Chinchilla law",
    )
    p.add_argument("--top", type=_positive_int, default=8, help="candidates to list")
    add_json_argument(p, "the plan ({'best': ..., 'candidates': [...], 'N_opt', 'D_opt', ...})")
    p.add_argument("--markdown", type=pathlib.Path, help="write a planning section for a report")
    _add_costmodel_arguments(p)
    p.add_argument(
        "--offload",
        action="store_true",
        help="also consider ZeRO-Offload layouts: optimizer state and its step on the "
        "host (PCIe transfers, CPU Adam), for models that do not fit otherwise",
    )
    p.add_argument(
        "--emit",
        choices=("overrides",),
        help="overrides: print the `python -m "
        "experiments.train ...` command line of the best layout the trainer can run",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analysis.commands.layout_eval import load_efficiency

    law = ScalingLaw.from_json(args.law) if args.law is not None else ScalingLaw.chinchilla_2022()
    data_law = _data_law(args, law)
    if args.hardware is None:
        if data_law is None:
            raise AnalysisError(
                "--hardware is required (e.g. --hardware h100-sxm --gpus 64), unless the plan is only "
                "--budget C with --unique-tokens U"
            )
        return _run_data_limit(args, data_law)
    fw = parse_framework(args.framework, "--framework")  # a LayoutError: one line, exit 2
    eff = load_efficiency(args.efficiency) if args.efficiency is not None else None
    calibration = None
    if args.calibrate is not None:
        cal = _calibration(args, fw)
        eff, calibration = cal.efficiency, cal.as_dict()
        print(cal.text())
    if is_mixed(args.hardware):
        if eff is None:
            eff = load_efficiency(None)
        return _run_mixed(args, law, eff)
    hparams = load_hparam_set(args.hparams) if args.hparams is not None else None
    if args.gpus is None:
        raise AnalysisError(
            "--gpus is required: the number of devices (or give a mixed cluster as "
            "--hardware NAME:COUNT,NAME:COUNT)"
        )
    results = [
        plan(
            budget,
            args.gpus,
            args.hardware,
            law=law,
            max_days=args.max_days,
            max_gpu_hours=args.gpu_hours,
            seq_len=args.seq_len,
            vocab=args.vocab,
            batch_tokens=args.batch_tokens,
            top=args.top,
            eff=eff,
            offload=args.offload,
            hparams=hparams,
            unique_tokens=args.unique_tokens,
            data_law=data_law,
            framework=fw,
            calibration=calibration,
        )
        for budget in (args.budget or [None])
    ]
    for result in results:
        _print_plan(result)
        if args.emit == "overrides":
            _print_trainer(result)
    payloads = [plan_payload(r) for r in results]
    emit_json(args, payloads[0] if len(payloads) == 1 else {"plans": payloads})
    if args.markdown:
        args.markdown.write_text("\n\n".join(r.to_markdown() for r in results) + "\n")
    unrunnable = [r.trainer.reason for r in results if args.emit and not r.trainer.overrides]
    if unrunnable:
        raise AnalysisError(f"--emit overrides: {unrunnable[0]}")
    return 0


def _calibration(args: argparse.Namespace, fw):
    """`--calibrate MEASURED.csv|SWEEP_DIR`: the framework's profile refitted to measurements
    (analysis/commands/layout_eval.py does the refit; rows without a `framework` column are
    --framework's)."""
    from analysis.commands.layout_eval import PRECISIONS, measured_calibration, sweep_calibration

    path = args.calibrate
    if path.is_dir():
        if fw != Framework.JAX:
            raise AnalysisError(
                f"--calibrate {path} is a trainer sweep (the jax framework); drop --framework "
                f"{fw.value}, or give measured rows of {fw.value} as MEASURED.csv"
            )
        return sweep_calibration(
            path, None if args.hardware is None or is_mixed(args.hardware) else args.hardware, args.efficiency
        )[0]
    cal = measured_calibration(path, fw, args.hardware, PRECISIONS["bf16-mixed"], args.efficiency)
    if cal.framework != fw:
        raise AnalysisError(
            f"--calibrate {path} holds {cal.framework.value} rows but --framework is {fw.value}; "
            f"pass --framework {cal.framework.value} (or fix the file's `framework` column)"
        )
    return cal


def _run_mixed(args: argparse.Namespace, law: ScalingLaw, eff) -> int:
    """`plan --hardware a:n,b:m`: heterogeneous data parallelism over the device groups, and the
    same budget on each group alone (analysis/planning/mixed.py)."""
    from analysis.planning.mixed import plan_mixed
    from sharding.costmodel.hetero import parse_cluster

    groups = parse_cluster(args.hardware)
    total = sum(g.count for g in groups)
    if args.gpus is not None and args.gpus != total:
        raise AnalysisError(
            f"--gpus {args.gpus} does not match the mixed --hardware's {total} devices; drop --gpus"
        )
    for flag, v in (
        ("--max-days", args.max_days),
        ("--gpu-hours", args.gpu_hours),
        ("--emit", args.emit),
        ("--markdown", args.markdown),
        ("--offload", args.offload),
        ("--hparams", args.hparams),
        ("--unique-tokens", args.unique_tokens),
    ):
        if v:
            raise AnalysisError(f"{flag} is not supported for a mixed cluster yet; plan with --budget")
    if not args.budget:
        raise AnalysisError("a mixed-cluster plan needs --budget FLOPS")
    results = [
        plan_mixed(
            b,
            args.hardware,
            law=law,
            seq_len=args.seq_len,
            vocab=args.vocab,
            batch_tokens=DEFAULT_BATCH_TOKENS if args.batch_tokens is None else args.batch_tokens,
            eff=eff,
        )
        for b in args.budget
    ]
    for r in results:
        print(r.text())
    payloads = [r.as_dict() for r in results]
    emit_json(args, payloads[0] if len(payloads) == 1 else {"plans": payloads})
    return 0


def _data_law(args: argparse.Namespace, law: ScalingLaw):
    """The data-constrained law of `--unique-tokens` (None without it), its U checked first."""
    if args.unique_tokens is None:
        return None
    from analysis.planning.data_limit import check_unique_tokens, from_json

    batch = DEFAULT_BATCH_TOKENS if args.batch_tokens is None else args.batch_tokens
    check_unique_tokens(args.unique_tokens, batch)
    return from_json(args.law, law)


def _run_data_limit(args: argparse.Namespace, data_law) -> int:
    """`plan --budget C --unique-tokens U` without --hardware: the data-limited allocation alone."""
    from analysis.planning.data_limit import plan_data_limit

    if not args.budget:
        raise AnalysisError("--unique-tokens plans a FLOP budget: give --budget FLOPS as well")
    batch = DEFAULT_BATCH_TOKENS if args.batch_tokens is None else args.batch_tokens
    results = [plan_data_limit(b, args.unique_tokens, data_law, batch) for b in args.budget]
    for r in results:
        print(f"budget {r.budget_flops:.3g} FLOPs")
        for line in r.text_lines():
            print(line)
    payloads = [{"budget_flops": r.budget_flops, "data_limit": r.as_dict()} for r in results]
    emit_json(args, payloads[0] if len(payloads) == 1 else {"plans": payloads})
    if args.markdown:
        sections = [f"## Planning: {r.budget_flops:.3g} FLOPs\n\n" + "\n".join(r.markdown()) for r in results]
        args.markdown.write_text("\n\n".join(sections) + "\n")
    return 0


def plan_payload(result) -> dict:
    """The plan's JSON: `Plan.as_dict()` plus `N_opt`/`D_opt`, the casing of the fit's allocation
    (`n_opt`/`d_opt` stay as deprecated aliases)."""
    out = result.as_dict()
    out["N_opt"], out["D_opt"] = out.get("n_opt"), out.get("d_opt")
    return out


def _print_plan(result) -> None:
    b = result.best
    if result.n_opt is not None:
        print(f"law: {result.law.source}")
        limit = (
            "" if result.data_limit is None else f" on {result.data_limit.unique_tokens:.3g} unique tokens"
        )
        print(
            f"compute-optimal for {result.budget_flops:.3g} FLOPs{limit}: N* = {result.n_opt / 1e9:.1f}B "
            f"params, D* = {result.d_opt / 1e12:.2f}T tokens"
        )
        if result.best_loss_text():
            print(result.best_loss_text())
    print(result.table())
    lo = b.layout
    band = result.loss_band(b)
    ci = (
        f"{result.interval_label} [{band[0]:.3f}, {band[1]:.3f}]"
        if band
        else "CI unavailable: law has no bootstrap samples"
    )
    print(
        f"best: {b.shape.n_params / 1e9:.1f}B params (L={b.shape.n_layers}, d={b.shape.d_model}) "
        f"on {b.tokens / 1e12:.2f}T tokens, dp={lo.dp} tp={lo.tp} pp={lo.pp} mb={lo.micro_batch} "
        f"ZeRO-{lo.zero_stage}{' +optimizer offload' if lo.offload_optimizer else ''} ckpt={lo.act_ckpt}: "
        f"MFU {100 * b.mfu:.1f}%{band_text(b.mfu_interval, 100, '.1f')} "
        f"({MFU_CONVENTION}), {b.days:.1f}{band_text(b.days_interval, 1, '.1f')} days on "
        f"{result.n_devices} x {result.hardware.name} "
        f"({b.gpu_hours:.3g}{band_text(b.gpu_hours_interval, 1, '.3g')} "
        f"GPU-hours), loss {b.loss:.3f} ({ci})"
    )
    if result.recipe is not None:
        for line in result.recipe.text_lines():
            print(line)
    if result.data_limit is not None:
        for line in result.data_limit.text_lines():
            print(line)
    for n in result.notes:
        print(f"note: {n}")
    print(f"note: {efficiency_note(result.efficiency)}")


def _print_trainer(result) -> None:
    """The trainer's plan for the best plan: one line on what the best layout needs that the
    trainer lacks (if anything), its layout and predictions, and the command line last
    (`... --emit overrides | tail -1` is the command)."""
    tp = result.trainer
    if tp.estimate is None:
        return  # run() ends with the reason as its error line
    lo, est, best = tp.layout, tp.estimate, result.best
    mesh = " ".join(f"{k}={v}" for k, v in tp.as_dict()["layout"]["mesh"].items())
    if tp.missing or tp.rank > 1:
        zero = (
            " (its ZeRO: sharding.data = 0, sharding.fsdp = 3, both = hybrid 3)"
            if any(m.startswith("ZeRO") for m in tp.missing)
            else ""
        )
        lacks = (
            f"the best layout needs {', '.join(tp.missing)}, which python -m experiments.train lacks{zero}"
            if tp.missing
            else "the trainer cannot run the best shape"
        )
        shape = (
            ""
            if tp.rank == 1
            else (
                f" of candidate #{tp.rank} ({tp.shape.n_params / 1e9:.3g}B, "
                f"L={tp.shape.n_layers}, d={tp.shape.d_model})"
            )
        )
        print(
            f"trainer: {lacks}; emitting the best layout it can run{shape}, at "
            f"{100 * est.tokens_per_s / best.tokens_per_s:.0f}% of the best plan's tokens/s"
        )
    print(
        f"trainer layout: {mesh}, micro-batch {lo.micro_batch}/device x {lo.grad_accum} accumulated, "
        f"remat={lo.act_ckpt}: "
        f"{est.memory.total / 1e9:.1f} GB/device, {est.step_time_s:.3g} s/step, MFU {100 * est.mfu:.1f}% "
        f"({est.mfu_convention}), {tp.tokens / est.tokens_per_s / 86400:.1f} days for {tp.tokens:.3g} tokens"
    )
    print(tp.command())
