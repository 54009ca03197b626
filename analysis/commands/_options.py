"""Flags and outputs every `python -m analysis` subcommand shares, so they mean the same everywhere.

- `--budget C`: a training-compute budget in FLOPs. Repeatable (`--budget 1e21 --budget 1e23`);
  one flag may also carry several values, space- or comma-separated (`--budget 1e21 1e23`,
  `--budget 1e21,1e23`). Every value must be a positive, finite FLOP count.
- `--json PATH`: write the command's result as strict JSON (NaN and inf become `null`) to PATH,
  atomically; `--json -` writes it to stdout, and the command's human-readable lines then go to
  stderr (`analysis.cli` arranges that), so stdout is pure JSON.

Not a subcommand: `analysis.cli` skips modules whose name starts with `_`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from typing import Any

from models.base.jsonio import write_json

STDOUT = "-"


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


def json_to_stdout(args: argparse.Namespace) -> bool:
    return getattr(args, "json", None) == STDOUT


def emit_json(args: argparse.Namespace, obj: Any, path: str | None = None) -> None:
    """Write `obj` where `--json` says: a file (and say so), or the real stdout for `-`.

    While a command runs with `--json -`, `analysis.cli` points `sys.stdout` at stderr and keeps
    the real stdout in `args.stdout`; the JSON goes there.
    """
    path = args.json if path is None else path
    if path is None:
        return
    if str(path) == STDOUT:
        with contextlib.redirect_stdout(getattr(args, "stdout", None) or sys.stdout):
            write_json(STDOUT, obj)
    else:
        write_json(path, obj)
        print(f"wrote {path}")
