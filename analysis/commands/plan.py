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

A mixture of experts: `--moe` plans a routed model (analysis/planning/moe.py): for each expert
count of `--experts` (default 1,2,4,...,64) the loss at the budget from a fitted MoE law
(`--moe-law FIT.json` from `python -m analysis fit --law moe`, or `--law` holding one), the active
size, the fastest layout with expert parallelism (the cost model's all-to-all and expert memory)
and its days; the recommended expert count's plan follows, and `--emit overrides` ends in its
trainer command (`model.moe={experts:8,top_k:2} sharding.expert=4 ...`). JSON: the chosen plan's
payload plus `moe` ({experts, top_k, options: [{experts, loss, loss_interval, layout, ...}]}).

Frameworks: `--framework megatron|deepspeed|fsdp|jax` (default jax = this repository's trainer)
searches the layouts that stack runs (ZeRO stages, pipeline schedules incl. breadth-first where
it has one) with its program's flags and efficiency profile (sharding/costmodel/frameworks.py).
`--calibrate MEASURED.csv|SWEEP_DIR` first refits that profile to measured rows (layout-eval's
columns plus measured_step_time_s or measured_tokens_per_s) or a trainer sweep, says how many
rows it was refitted on, and widens the MFU / days intervals by the leave-one-out error over
those rows (wider with fewer rows); then plans with it.

Cost, energy, carbon (analysis/planning/costs.py): every candidate carries device_hours, days,
energy_mwh, tco2eq and cost_usd, each with its 90% `<key>_interval`, and its `assumptions`
(goodput, watts, pue, grid_intensity, price_per_hour, unit, sources): the cost model's time over a
goodput (conf/plan_costs.yaml), the hardware file's power and price, a PUE and the grid intensity
of --region (conf/regions.yaml) or --grid-intensity; --goodput, --pue, --watts, --price override.

A fixed model: `--params N --tokens D` plans that model (shapes rounded to real ones) instead of a
budget. Hardware shopping: `--hardware a100-80gb,h100,tpu-v5p` plans the same model or budget on
each type (JSON `by_hardware: [{hardware, best}]`) and `--objective time|cost|energy|carbon` picks
the one with the fewest days, dollars, MWh or t CO2e among those within --max-days and --max-cost
(analysis/planning/choice.py); a mixed cluster is NAME:COUNT,NAME:COUNT (with counts).

Sized for inference (analysis/planning/inference.py, Sardana et al. 2024): `--inference-tokens T`
picks N and D that reach the target loss (--target-loss, else the Chinchilla-optimal loss at
--budget, else the loss of --params/--tokens) with the least training + inference compute (2N
FLOPs per token, plus attention over --inference-context tokens), or cost with --objective cost;
JSON `inference` {N, D, train_flops, inference_flops, total_flops, saving, chinchilla}. Without
--hardware it is the law's answer alone; with it, that model is planned like --params/--tokens.

Continual pre-training: `--continue-from FIT.json` (a `fit --law cpt` JSON) weighs continuing a
trained model on a new corpus (replay r*, new tokens, FLOPs, new-domain loss and forgetting with
90% intervals) against retraining it from scratch on the mixture, for --target-loss-new and
--max-forgetting, and prints the verdict and the trainer's command (analysis/planning/continual.py;
JSON `continual: {verdict, continue, retrain, ...}`).
"""

from __future__ import annotations

import argparse
import pathlib

from analysis.commands._flags import (
    add_budget_argument,
    add_costmodel_arguments,
    add_json_argument,
    add_unique_tokens_argument,
    positive_float,
    positive_int,
)
from analysis.commands._options import emit_json
from analysis.commands._plan_costs import add_cost_arguments, cost_options, hardware_names
from analysis.commands._plan_modes import (
    add_inference_arguments,
    emit_plans,
    plan_kwargs,
    plan_payload,
    run_choice,
    run_data_limit,
    run_inference,
)
from analysis.commands._plan_moe import add_moe_arguments, moe_law_of, run_mixed, run_moe
from analysis.commands._plan_options import PlanOptions, plan_law
from analysis.laws.allocation import ScalingLaw
from analysis.planning.continual import add_continual_arguments, lines, price, run_continual
from analysis.planning.data_limit import check_unique_tokens, from_json
from analysis.planning.planner import DEFAULT_BATCH_TOKENS, plan
from analysis.planning.recipe import load_hparam_set
from analysis.planning.text import plan_lines, trainer_lines
from models.base.errors import AnalysisError
from sharding.costmodel.frameworks import parse_framework
from sharding.costmodel.hetero import is_mixed
from sharding.costmodel.rows import load_efficiency

EXAMPLES = """\
examples:
  scalelab plan --budget 1e22 --hardware h100 --gpus 256               # Hoffmann et al.'s law
  scalelab plan --budget 1e22 --law fit.json --hardware h100 --gpus 256 --max-days 30
  scalelab plan --budget 1e21 --hardware h100 --gpus 64 --emit overrides  # the trainer's command
  scalelab plan --budget 1e22 --unique-tokens 2e11                     # a fixed corpus
  scalelab plan --params 3e9 --tokens 1e12 --hardware a100-80gb,h100,tpu-v5p --gpus 256 \\
      --objective cost --region us                                     # hardware shopping
  scalelab plan --budget 1e22 --inference-tokens 1e13                  # sized for inference
  scalelab plan --continue-from cpt_fit.json --max-forgetting 2%       # continue or retrain
docs/plan.md: the search, recipe, MoE, frameworks, costs, inference, the JSON."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="scaling law + cost model -> model size, tokens, layout, cost",
        usage="%(prog)s [--budget C | --params N --tokens D] [--hardware HW[,HW...] --gpus N] [options]",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_budget_argument(p, "to plan for (one plan each)")
    p.add_argument(
        "--params", type=positive_float, metavar="N", help="a fixed model: N parameters (with --tokens)"
    )
    p.add_argument("--tokens", type=positive_float, metavar="D", help="a fixed model: D training tokens")
    p.add_argument(
        "--law",
        type=plan_law,
        metavar="NAME|FIT.json",
        help="a fit's JSON, or chinchilla (the default)",
    )
    p.add_argument(
        "--hardware",
        metavar="HW",
        help="h100, a100-80gb.. or YAML; a,b: compare; a:N,b:M: mix",
    )
    p.add_argument("--gpus", type=positive_int, metavar="N", help="number of devices (one device type)")
    p.add_argument("--max-days", type=positive_float, metavar="DAYS", help="wall-clock limit in days")
    p.add_argument("--gpu-hours", type=positive_float, metavar="H", help="device-hour limit")
    p.add_argument("--seq-len", type=positive_int, default=2048, metavar="T", help="sequence length (2048)")
    p.add_argument("--vocab", type=positive_int, default=32000, metavar="V", help="vocabulary size (32000)")
    p.add_argument(
        "--batch-tokens",
        type=positive_int,
        default=None,
        metavar="B",
        help=f"tokens per step (default {DEFAULT_BATCH_TOKENS // 2**20}M or the --hparams law's)",
    )
    p.add_argument(
        "--hparams", type=pathlib.Path, metavar="HP.json", help="`fit-hparams --json` laws: lr, batch"
    )
    add_unique_tokens_argument(p, "the run")
    p.add_argument("--top", type=positive_int, default=8, metavar="K", help="candidates to list (8)")
    add_json_argument(p, "the plan")
    p.add_argument("--markdown", type=pathlib.Path, metavar="PATH", help="write the plan as Markdown")
    add_costmodel_arguments(p)
    p.add_argument("--offload", action="store_true", help="also try ZeRO-Offload (optimizer on the host)")
    p.add_argument(
        "--emit", choices=("overrides",), help="print the trainer's command line of the best layout"
    )
    add_cost_arguments(p)
    add_inference_arguments(p)
    add_moe_arguments(p)
    add_continual_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # a bad --framework is a LayoutError: one line, exit 2
    opts = PlanOptions.from_args(args, framework=parse_framework(args.framework, "--framework"))
    if opts.continue_from is not None:  # continual pre-training (analysis/planning/continual.py)
        return _continual(opts)
    costs = cost_options(opts)  # a bad --region / --price / --watts: one line before any planning
    if (opts.params is None) != (opts.tokens is None):
        raise AnalysisError("a fixed model needs both --params N and --tokens D")
    if opts.params is not None and opts.budget:
        raise AnalysisError("give --budget FLOPS or a fixed model (--params N --tokens D), not both")
    moe_law = moe_law_of(opts)
    law_is_moe = moe_law is not None and opts.moe_law is None  # --law holds the MoE law
    dense = opts.law is not None and not law_is_moe
    law = ScalingLaw.from_json(opts.law) if dense else ScalingLaw.chinchilla_2022()
    data_law = _data_law(opts, law)
    if opts.hardware is None:
        if opts.sizing:
            return run_inference(opts, law)
        if data_law is None:
            raise AnalysisError(
                "--hardware is required (e.g. --hardware h100-sxm --gpus 64), unless the plan is only "
                "--budget C with --unique-tokens U, or --inference-tokens T"
            )
        return run_data_limit(opts, data_law)
    eff = load_efficiency(opts.efficiency) if opts.efficiency is not None else None
    calibration = None
    if opts.calibrate is not None:
        # SciPy-based calibration loads only when asked for, keeping `python -m analysis --help` fast.
        from sharding.costmodel.measured import plan_calibration

        cal = plan_calibration(opts.calibrate, opts.framework, opts.hardware, opts.efficiency)
        eff, calibration = cal.efficiency, cal.as_dict()
        if cal.skipped:
            print(cal.skipped_text())
        print(cal.text())
    if is_mixed(opts.hardware):
        if opts.moe:
            raise AnalysisError("--moe is not supported for a mixed cluster yet; plan one device type")
        if eff is None:
            eff = load_efficiency(None)
        return run_mixed(opts, law, eff)
    names = hardware_names(opts.hardware)
    hparams = load_hparam_set(opts.hparams) if opts.hparams is not None else None
    if opts.gpus is None:
        raise AnalysisError(
            "--gpus is required: the number of devices (or give a mixed cluster as "
            "--hardware NAME:COUNT,NAME:COUNT)"
        )
    if opts.moe and opts.params is None and not opts.sizing:
        if len(names) > 1:
            raise AnalysisError("--moe plans one hardware type: give one --hardware")
        return run_moe(opts, law, moe_law, eff, hparams, calibration, costs)
    shopping = len(names) > 1 or opts.max_cost is not None or opts.objective != "time"
    if shopping or opts.params is not None or opts.sizing:
        return run_choice(opts, law, names, eff, hparams, calibration, costs, data_law)
    results = [
        plan(
            budget,
            opts.gpus,
            opts.hardware,
            law=law,
            max_days=opts.max_days,
            max_gpu_hours=opts.gpu_hours,
            unique_tokens=opts.unique_tokens,
            data_law=data_law,
            **plan_kwargs(opts, eff, hparams, calibration, costs),
        )
        for budget in (opts.budget or [None])
    ]
    for result in results:
        lines = plan_lines(result) + (trainer_lines(result) if opts.emit == "overrides" else [])
        for line in lines:
            print(line)
    emit_plans(opts, [plan_payload(r) for r in results])
    if opts.markdown:
        opts.markdown.write_text("\n\n".join(r.to_markdown() for r in results) + "\n")
    unrunnable = [r.trainer.reason for r in results if opts.emit and not r.trainer.overrides]
    if unrunnable:
        raise AnalysisError(f"--emit overrides: {unrunnable[0]}")
    return 0


def _continual(opts: PlanOptions) -> int:
    """`--continue-from FIT.json`: continue or retrain, printed and as JSON `continual`."""
    result, _ = run_continual(opts.continue_from, opts.base_model, opts.target_loss_new, opts.max_forgetting)
    if opts.hardware is not None:  # each option priced on the user's hardware
        if opts.gpus is None:
            raise AnalysisError("--continue-from with --hardware needs --gpus N (the devices to price on)")
        price(result, opts.hardware, opts.gpus, cost_options(opts), seq_len=opts.seq_len, vocab=opts.vocab)
    print("\n".join(lines(result)))
    emit_json(opts.json, {"continual": result})
    return 0


def _data_law(opts: PlanOptions, law: ScalingLaw):
    """The data-constrained law of `--unique-tokens` (None without it), its U checked first."""
    if opts.unique_tokens is None:
        return None
    check_unique_tokens(opts.unique_tokens, opts.batch_or_default)
    return from_json(opts.law, law)
