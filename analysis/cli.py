"""`python -m analysis <command> ...` — dispatches to the modules in `analysis.commands`.

User errors (`AnalysisError`, missing files, bad values) end as one line on stderr and exit 2;
anything else is a bug and keeps its traceback. With `--json -` the command's JSON is the only
thing on stdout: its human-readable lines are sent to stderr while it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import pathlib
import pkgutil
import re
import sys

from analysis import commands
from analysis.commands._options import json_to_stdout
from models.base.errors import AnalysisError

DESCRIPTION = "scalelab analysis: fit scaling laws to training runs, forecast loss curves, plan runs."

EXAMPLES = """\
examples:
  python -m analysis collect outputs/isoflop --out runs.csv      # run directories -> runs table
  python -m analysis fit runs.csv --law chinchilla --budget 1e21 --json fit.json
  python -m analysis report outputs/isoflop --budget 1e21         # HTML + Markdown + report.json
  python -m analysis plan --budget 1e23 --law fit.json --hardware h100 --gpus 1024 --json -

Every subcommand takes --help. `--budget C` is repeatable (or C1,C2) wherever it appears, and
`--json PATH` writes strict JSON (NaN -> null); `--json -` writes it to stdout.
See docs/analysis.md."""


def version() -> str:
    """The installed scalelab version, else the one in pyproject.toml (a source checkout)."""
    try:
        return importlib.metadata.version("scalelab")
    except importlib.metadata.PackageNotFoundError:
        pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
        except OSError:
            m = None
        return m.group(1) if m else "unknown"


def command_modules() -> list[str]:
    """Subcommand module names (`_`-prefixed modules hold shared helpers, not commands)."""
    return sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m analysis",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"scalelab {version()}",
        help="print the scalelab version and exit",
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title="commands (python -m analysis COMMAND --help for its flags)",
    )
    for name in command_modules():
        importlib.import_module(f"{commands.__name__}.{name}").register(sub)
    return parser


def _check_json_destination(args: argparse.Namespace) -> None:
    """Fail before the (possibly long) work when `--json` names a folder that does not exist."""
    path = getattr(args, "json", None)
    if path is None or str(path) == "-":
        return
    parent = pathlib.Path(path).parent
    if not parent.is_dir():
        raise AnalysisError(f"--json: directory {parent} does not exist")


def _run(args: argparse.Namespace) -> int:
    _check_json_destination(args)
    if not json_to_stdout(args):
        return int(args.func(args) or 0)
    args.stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return int(args.func(args) or 0)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except AnalysisError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: file not found: {e.filename or e}", file=sys.stderr)
        return 2
    except (PermissionError, IsADirectoryError) as e:
        print(f"error: cannot use {e.filename or e}: {e.strerror}", file=sys.stderr)
        return 2
