"""Flags and outputs every `python -m analysis` subcommand shares, so they mean the same everywhere.

- `--budget C`: a training-compute budget in FLOPs. Repeatable (`--budget 1e21 --budget 1e23`);
  one flag may also carry several values, space- or comma-separated (`--budget 1e21 1e23`,
  `--budget 1e21,1e23`). Every value must be a positive, finite FLOP count.
- `--json PATH`: write the command's result as strict JSON (NaN and inf become `null`) to PATH,
  atomically; `--json -` writes it to stdout, and the command's human-readable lines then go to
  stderr (`analysis.cli` arranges that, `json_stdout_only`), so stdout is pure JSON.
- `--bootstrap`, `--seed`, `--fix NAME=VALUE` and the cost model's `--efficiency`, `--framework`,
  `--calibrate`: one definition each, here.

Each command turns argparse's namespace into one frozen options object (a `CommandOptions`
subclass, `from_args`) as its first step and passes that on; no helper takes the namespace.

Not a subcommand: `analysis.cli` skips modules whose name starts with `_`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import pathlib
import sys
from typing import Any, Iterator, TypeVar

from models.base.errors import AnalysisError
from models.base.jsonio import write_json

STDOUT = "-"
_T = TypeVar("_T", bound="CommandOptions")
_REAL_STDOUT: list = []  # while a command runs with `--json -`: the stdout its JSON goes to


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommandOptions:
    """A command's options, typed: each command subclasses it with its own fields (named as
    argparse's destinations) and builds it once from the namespace."""

    json: str | None = None  # `--json PATH` (`-`: stdout)

    @classmethod
    def from_args(cls: type[_T], args: argparse.Namespace, **parsed: Any) -> _T:
        """The fields from `args` (argparse's destinations of the same names; a field with a default
        may have no flag); `parsed` gives the fields whose flag is parsed further (a `Framework`,
        the `--fix` values, ...)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in parsed and hasattr(args, f.name)]
        return cls(**{n: getattr(args, n) for n in names}, **parsed)


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ColumnOptions(CommandOptions):
    """Options of a command that reads a runs table: the columns named with --n-col & co.
    (`add_column_arguments`); the roles not named are found by their usual names."""

    n_col: str | None = None
    d_col: str | None = None
    c_col: str | None = None
    loss_col: str | None = None
    x_col: str | None = None  # the generic power law's input (fit only)
    u_col: str | None = None

    def columns(self) -> dict[str, str]:
        """{role: column} of the roles the user named."""
        named = (
            ("N", self.n_col),
            ("D", self.d_col),
            ("C", self.c_col),
            ("loss", self.loss_col),
            ("x", self.x_col),
            ("U", self.u_col),
        )
        return {role: name for role, name in named if name}


def add_column_arguments(parser: argparse.ArgumentParser, title: str | None = None, x: bool = False) -> None:
    """--n-col, --d-col, --c-col, --loss-col, --u-col (and --x-col with `x`): a runs table's
    columns when they have other names than the ones found by default; in a group `title`."""
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


def json_to_stdout(path: str | None) -> bool:
    """Whether `--json` names stdout (`-`)."""
    return path is not None and str(path) == STDOUT


@contextlib.contextmanager
def json_stdout_only() -> Iterator[None]:
    """Run a `--json -` command: its printed lines go to stderr, `emit_json` writes to the real stdout."""
    _REAL_STDOUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _REAL_STDOUT.pop()


def emit_json(path: str | pathlib.Path | None, obj: Any) -> None:
    """Write `obj` where `--json` says: a file (and say so), or the real stdout for `-`.

    While a command runs with `--json -`, `analysis.cli` points `sys.stdout` at stderr
    (`json_stdout_only`) and keeps the real stdout; the JSON goes there.
    """
    if path is None:
        return
    if json_to_stdout(str(path)):
        with contextlib.redirect_stdout(_REAL_STDOUT[-1] if _REAL_STDOUT else sys.stdout):
            write_json(STDOUT, obj)
    else:
        write_json(path, obj)
        print(f"wrote {path}")


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


def parse_fixed(items: list[str] | None) -> dict[str, float]:
    """`--fix` values as {name: value} (a one-line error for anything but NAME=VALUE)."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise AnalysisError(f"--fix expects NAME=VALUE (e.g. --fix E=1.69), got {item!r}") from None
    return out


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
