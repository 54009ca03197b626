"""Flags the `python -m analysis` subcommands share: one definition each, so they mean the same
everywhere (each command keeps its own default where the flag takes one).

- `--budget C`: a training-compute budget in FLOPs. Repeatable (`--budget 1e21 --budget 1e23`);
  one flag may also carry several values, space- or comma-separated (`--budget 1e21 1e23`,
  `--budget 1e21,1e23`). Every value must be a positive, finite FLOP count.
- `--json PATH`: write the command's result as strict JSON (NaN and inf become `null`) to PATH,
  atomically; `--json -` writes it to stdout, and the command's human-readable lines then go to
  stderr (`_options.emit_json`), so stdout is pure JSON.
- `--bootstrap N`, `--seed S`, `--fix NAME=VALUE`; a runs table's `--n-col` & co. and
  `--n-params`; the cost model's `--efficiency`, `--framework`, `--calibrate`; a data limit's
  `--unique-tokens`; an RL fit's `--fit-until-frac`.

Not a subcommand: `analysis.cli` skips modules whose name starts with `_`.
"""

from __future__ import annotations

import argparse
import math
import pathlib


def parse_budget(text: str) -> float:
    """One FLOP count; argparse turns the ValueError-free error below into a usage line."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a FLOP count: {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"budget must be a positive FLOP count (got {text})")
    return v


class BudgetAction(argparse.Action):
    """Collect `--budget` values across repeated flags, splitting comma-separated lists."""

    def __call__(self, parser, namespace, values, option_string=None):
        out = list(getattr(namespace, self.dest, None) or [])
        for value in values:
            for part in str(value).split(","):
                if part.strip():
                    try:
                        out.append(parse_budget(part.strip()))
                    except argparse.ArgumentTypeError as e:
                        parser.error(f"argument --budget: {e}")
        setattr(namespace, self.dest, out)


def add_budget_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--budget C [C ...]`, repeatable and comma-separable; `args.budget` is a list or None."""
    parser.add_argument(
        "--budget",
        action=BudgetAction,
        nargs="+",
        default=None,
        metavar="C",
        help=f"compute budget in FLOPs {what}; repeatable, or several values "
        "in one flag (--budget 1e21 1e23 or --budget 1e21,1e23)",
    )


def add_json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--json PATH` (`-` = stdout); `args.json` is the path string or None."""
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help=f"write {what} as strict JSON to PATH ('-': to stdout; the "
        "human-readable lines then go to stderr)",
    )


def add_column_arguments(
    parser: argparse.ArgumentParser, title: str | None = None, x: bool = False, experts: bool = False
) -> None:
    """--n-col, --d-col, --c-col, --loss-col, --u-col (and --x-col with `x`, --experts-col with
    `experts`): a runs table's columns when they have other names than the ones found by default;
    in a group `title`."""
    g = parser.add_argument_group(title) if title else parser
    g.add_argument(
        "--n-col",
        metavar="NAME",
        help="model-size column (default: N, n_params or 'Model Size'; with --n-params "
        "non_embedding: n_params_non_embedding or N_non_embedding)",
    )
    g.add_argument(
        "--d-col", metavar="NAME", help="tokens column (default: D or tokens; else derived as C/(6N))"
    )
    g.add_argument(
        "--c-col", metavar="NAME", help="compute column (default: C, flops or 'Training FLOP'; else 6ND)"
    )
    g.add_argument("--loss-col", metavar="NAME", help="target column (default: loss or final_eval_loss)")
    if x:
        g.add_argument("--x-col", metavar="NAME", help="input column of the generic 'power' law")
    g.add_argument(
        "--u-col",
        metavar="NAME",
        help="unique-tokens column (default: U or unique_tokens): the data-constrained laws' input, "
        "and how runs that repeated their data (D > U) are found",
    )
    if experts:
        g.add_argument(
            "--experts-col",
            metavar="NAME",
            help="routed-experts column of the MoE laws (default: experts, or model.moe.experts from "
            "`collect`); dense runs have experts = 1",
        )


def add_bootstrap_argument(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """`--bootstrap N`: resamples `what` (each command keeps its own default)."""
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=default,
        help=f"bootstrap resamples {what} (default {default}; 0 = none)",
    )


def add_seed_argument(parser: argparse.ArgumentParser) -> None:
    """`--seed S`: the seed of the bootstrap and of the intervals' random draws."""
    parser.add_argument("--seed", type=int, default=0, help="bootstrap and interval seed (default 0)")


def add_fix_argument(parser: argparse.ArgumentParser) -> None:
    """`--fix NAME=VALUE`, repeatable; `parse_fixed` reads the values."""
    parser.add_argument(
        "--fix", action="append", metavar="NAME=VALUE", help="hold a parameter fixed; repeatable"
    )


def positive_float(text: str) -> float:
    """An argparse type: a positive, finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
    return v


def positive_int(text: str) -> int:
    """An argparse type: a whole number > 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return v


def add_costmodel_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the cost model's constants (layout-eval, plan): a fitted file, a
    training stack, measured rows to refit its profile to."""
    # here, not at import: the cost model loads only for the commands that use it (a fast --help)
    from sharding.costmodel.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS

    parser.add_argument(
        "--efficiency",
        type=pathlib.Path,
        metavar="EFF.json",
        help="efficiency constants fitted to your own runs (`python -m analysis layout-eval "
        "--calibrate SWEEP_DIR`); they replace the framework profiles' constants",
    )
    parser.add_argument(
        "--framework",
        default=DEFAULT_FRAMEWORK.value,
        help=f"the training stack: {' | '.join(FRAMEWORKS)} (default {DEFAULT_FRAMEWORK.value}: this "
        "repository's trainer): its layouts, program and efficiency profile; also the framework of "
        "layout rows without a `framework` column",
    )
    parser.add_argument(
        "--calibrate",
        type=pathlib.Path,
        metavar="MEASURED.csv|SWEEP_DIR",
        help="refit the framework's profile to measured rows (layout-eval's columns + "
        "measured_step_time_s or measured_tokens_per_s) or to a trainer sweep's runs, then predict "
        "or plan with it; layout-eval's older form EFF.json fits LAYOUTS.csv's own measured columns "
        "and writes the constants there",
    )


def fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return v


def add_unique_tokens_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--unique-tokens U`: plan `what` under a corpus of U unique tokens."""
    parser.add_argument(
        "--unique-tokens",
        type=float,
        default=None,
        metavar="U",
        help=f"unique tokens in the corpus (e.g. 2e12): plan {what} under this data limit (repeated "
        "epochs decay in value, Muennighoff et al. 2023): optimum N, D, epochs, penalty against "
        "unlimited data, the < 1%%-epoch point, a bigger model at fewer epochs; with a "
        "data_constrained(_d) law fit, else the paper's R_D*=15.4, R_N*=5.3 on the Chinchilla law",
    )


def add_n_params_argument(parser: argparse.ArgumentParser, default: str | None, default_text: str) -> None:
    """`--n-params total|non_embedding`: which parameter count N is (`default_text` says the default)."""
    parser.add_argument(
        "--n-params",
        choices=("total", "non_embedding", "active"),
        default=default,
        help="which parameter count N is: total (every parameter), non_embedding (without the input "
        "embedding and untied output head, Kaplan et al.'s N; from a column n_params_non_embedding, "
        "which `collect` writes from each run's summary.json) or active (a mixture of experts' "
        "dense-equivalent size: n_params_active, else N as given). "
        f"Default: {default_text}",
    )


def add_fit_until_frac_argument(parser: argparse.ArgumentParser, default: float | None) -> None:
    """`--fit-until-frac F`: an RL fit on the early compute, scored on the rest."""
    parser.add_argument(
        "--fit-until-frac",
        type=fraction,
        default=default,
        metavar="F",
        help="fit on compute <= F x final, score the prediction on the rest"
        + ("" if default is None else f" (default {default:g})"),
    )
