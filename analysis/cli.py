"""`python -m analysis <command> ...` — dispatches to the modules in `analysis.commands`.

User errors (`AnalysisError`, missing files, bad values) end as one line on stderr and exit 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from analysis import commands
from models.base.errors import AnalysisError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AnalysisError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: file not found: {e.filename or e}", file=sys.stderr)
        return 2
