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
import json
import math
import pathlib

from models.base.errors import AnalysisError

# Every flag name that more than one command has, with its one meaning (tests/test_cli_flags.py
# fails on a shared name missing here: a new one must mean the same thing wherever it appears).
FLAG_MEANINGS: dict[str, str] = {
    "--bootstrap": "bootstrap resamples behind the intervals (default BOOTSTRAP everywhere)",
    "--budget": "training-compute budget(s) in FLOPs",
    "--calibrate": "measured rows or a sweep to refit the cost model to (an input)",
    "--efficiency": "a fitted cost-model constants file to use (an input)",
    "--figure": "a figure file to write",
    "--fit-until-frac": "fit on the first fraction of the compute, score the rest",
    "--fix": "hold a parameter fixed: NAME=VALUE",
    "--framework": "the training stack whose layouts and efficiency profile are used",
    "--gpus": "the number of devices",
    "--hardware": "the device type: a catalogue name or a YAML file",
    "--holdout-above": "leave runs with C above this out and predict them",
    "--hparams": "hyperparameter laws written by `fit-hparams --json` (an input)",
    "--json": "write the result as one JSON file ('-': stdout)",
    "--law": "the law: a name, or a fit's JSON",
    "--markdown": "a Markdown file to write",
    "--method": "force this method instead of the one the backtest folds choose",
    "--n-params": "which parameter count N is",
    "--out": "the output directory",
    "--predict": "a CSV of points to predict at",
    "--quiet": "print nothing but errors",
    "--seed": "the seed of the bootstrap and the intervals",
    "--unique-tokens": "unique tokens in the corpus: the data limit",
    **{f"--{r}-col": f"the {r} column of the runs" for r in ("n", "d", "c", "loss", "u", "x", "experts")},
}
# The commands that read runs: the same inputs (CSV, Parquet or a sweep directory, `add_runs_argument`
# or their own positional) and the same column flags (`add_column_arguments`).
RUNS_COMMANDS = ("fit", "backtest", "compare", "report", "forecast", "fit-hparams", "fit-task")


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
        help=f"compute budget(s) in FLOPs {what} (--budget 1e21,1e23 or repeated)",
    )


def add_json_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--json PATH` (`-` = stdout); `args.json` is the path string or None."""
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help=f"write {what} as JSON to PATH ('-': stdout, the text then goes to stderr)",
    )


def add_column_arguments(
    parser: argparse.ArgumentParser, title: str | None = None, x: bool = False, experts: bool = False
) -> None:
    """--n-col, --d-col, --c-col, --loss-col, --u-col (and --x-col with `x`, --experts-col with
    `experts`): a runs table's columns when they have other names than the ones found by default;
    in a group `title`."""
    g = parser.add_argument_group(title) if title else parser
    g.add_argument("--n-col", metavar="NAME", help="model-size column (default: N, n_params, 'Model Size')")
    g.add_argument("--d-col", metavar="NAME", help="tokens column (default: D, tokens; else C/(6N))")
    g.add_argument("--c-col", metavar="NAME", help="compute column (default: C, flops; else 6ND)")
    g.add_argument("--loss-col", metavar="NAME", help="target column (default: loss, final_eval_loss)")
    if x:
        g.add_argument("--x-col", metavar="NAME", help="input column of the generic 'power' law")
    g.add_argument(
        "--u-col", metavar="NAME", help="unique-tokens column (default: U, unique_tokens): repeated data"
    )
    if experts:
        g.add_argument(
            "--experts-col",
            metavar="NAME",
            help="routed-experts column (default: experts)",
        )


BOOTSTRAP = 200  # the one --bootstrap default of every command


def add_bootstrap_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--bootstrap N`: resamples `what`; the same default (BOOTSTRAP) in every command."""
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=BOOTSTRAP,
        metavar="N",
        help=f"bootstrap resamples {what} (default {BOOTSTRAP}; 0 = none)",
    )


def add_runs_argument(parser: argparse.ArgumentParser, dest: str = "data", what: str = "") -> None:
    """The runs a command reads (`core.runs.read_runs`): a CSV, a Parquet file or a sweep
    directory, the same three inputs in every command."""
    parser.add_argument(
        dest,
        metavar="RUNS",
        help="runs: a CSV, a Parquet file or a sweep directory" + (f" ({what})" if what else ""),
    )


def add_law_argument(parser: argparse.ArgumentParser, default_text: str, names: str = "") -> None:
    """`--law NAME|FIT.json`: the law, everywhere: a law's name, or the JSON a `fit --json` wrote
    (its fitted law)."""
    parser.add_argument(
        "--law",
        default=None,
        metavar="NAME|FIT.json",
        help=f"the law: a name{f' ({names})' if names else ''} or a fit's JSON; default {default_text}",
    )


def law_name(value: str | None) -> str | None:
    """The law's name from `--law`: the value itself, or the `law` of a fit's JSON."""
    if value is None or not value.lower().endswith(".json"):
        return value
    try:
        with open(value) as f:
            law = json.load(f).get("law")
    except FileNotFoundError:
        raise AnalysisError(f"--law {value}: file not found") from None
    except (OSError, ValueError, AttributeError) as e:
        raise AnalysisError(f"--law {value}: not a fit's JSON ({type(e).__name__})") from None
    if not isinstance(law, str):
        raise AnalysisError(f"--law {value}: no 'law' in it; pass a JSON written by `scalelab fit --json`")
    return law


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
        help="efficiency constants fitted to your runs (`layout-eval --calibrate ... --out DIR`)",
    )
    parser.add_argument(
        "--framework",
        default=DEFAULT_FRAMEWORK.value,
        help=f"the training stack: {' | '.join(FRAMEWORKS)} (default {DEFAULT_FRAMEWORK.value}: ours)",
    )
    parser.add_argument(
        "--calibrate",
        type=pathlib.Path,
        metavar="MEASURED.csv|SWEEP_DIR",
        help="refit the framework's profile to measured rows (measured_step_time_s or "
        "measured_tokens_per_s) or a trainer sweep, then use it",
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
        help=f"unique tokens in the corpus (e.g. 2e12): plan {what} under this data limit",
    )


def add_n_params_argument(parser: argparse.ArgumentParser, default: str | None, default_text: str) -> None:
    """`--n-params total|non_embedding`: which parameter count N is (`default_text` says the default)."""
    parser.add_argument(
        "--n-params",
        choices=("total", "non_embedding", "active"),
        default=default,
        help=f"which parameter count N is (default: {default_text}; docs/fit.md)",
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
