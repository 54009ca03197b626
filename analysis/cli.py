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
import os
import pathlib
import pkgutil
import re
import subprocess
import sys
import warnings

from analysis import commands
from analysis.commands._options import json_stdout_only, json_to_stdout, silence_progress
from models.base.diskspace import disk_full_of
from models.base.errors import AnalysisError

DESCRIPTION = "scalelab analysis: fit scaling laws to training runs, forecast loss curves, plan runs."
PROG = "python -m analysis"  # `scalelab` sets it to its own name

EXAMPLES = """\
my runs -> a law -> a plan:
  scalelab fit runs.csv --json fit.json               # runs: a CSV, a Parquet file or a sweep directory
  scalelab backtest runs.csv                          # how the default predicted your largest budgets
  scalelab plan --law fit.json --budget 1e22 --hardware h100 --gpus 256
more:
  scalelab collect outputs/isoflop --out tables       # run directories (or --from tensorboard|mlflow|wandb)
  scalelab report outputs/isoflop                     # the verdict, figures, HTML + Markdown + report.json
  scalelab compare ref.csv other.csv --budget 1e21,1e22

`scalelab COMMAND --help` shows each command's flags and examples; --json PATH writes strict JSON
('-': stdout), --out DIR is always a directory, --quiet prints only errors. Docs: README.md, docs/."""


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


class _VersionAction(argparse.Action):
    """`--version`: looks the version up only when asked (the lookup reads package metadata)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"scalelab {version()}")  # on stdout, as argparse's own version action
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or only of `command` when it names one: a command line
    then imports just the module it runs (the others pull in the planner, the cost model...)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction, help="print the scalelab version and exit")
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title=f"commands ({PROG} COMMAND --help for its flags)",
    )
    names = command_modules()
    module = (command or "").replace("-", "_")  # `fit-curve` is module fit_curve
    for name in [module] if module in names else names:
        importlib.import_module(f"{commands.__name__}.{name}").register(sub)
    for p in sub.choices.values():  # flags every command has
        p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
        if p.description:
            p.description = p.description.replace("python -m analysis", PROG)
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The subcommand a command line names: its first word that is not an option (top-level
    options take no value), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def _check_json_destination(path: str | None) -> None:
    """Fail before the (possibly long) work when `--json` names a folder that does not exist."""
    if path is None or json_to_stdout(path):
        return
    parent = pathlib.Path(path).parent
    if not parent.is_dir():
        raise AnalysisError(f"--json: directory {parent} does not exist")


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command line's command (its `func` builds the command's typed options)."""
    json_path = getattr(args, "json", None)
    _check_json_destination(json_path)
    if getattr(args, "quiet", False):
        return _run_quiet(args, json_path)
    if not json_to_stdout(json_path):
        return int(args.func(args) or 0)
    with json_stdout_only():
        return int(args.func(args) or 0)


def _run_quiet(args: argparse.Namespace, json_path: str | None) -> int:
    """`--quiet`: no progress bars, no text lines, no warnings; errors still reach stderr (the
    `error:` line is printed by `main`) and `--json -` still writes its JSON to stdout."""
    silence_progress()
    with open(os.devnull, "w") as null, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if json_to_stdout(json_path):
            with json_stdout_only(), contextlib.redirect_stderr(null), contextlib.redirect_stdout(null):
                return int(args.func(args) or 0)
        with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            return int(args.func(args) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command_word(argv)).parse_args(argv)
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
    except BrokenPipeError:  # stdout closed early (`| head`): the --json file is already written
        sys.stdout = None  # nothing more to flush to the closed pipe at exit
        return 0
    except OSError as e:  # a full disk: one line naming the file (written whole or not at all)
        full = disk_full_of(e)
        if full is None:
            raise
        print(f"error: {full.command_line()}", file=sys.stderr)
        return 1


# `scalelab` runs the trainer's entry points too: the word, then the module it starts (the rest
# of the command line is handed on unchanged, Hydra overrides included)
TRAINING = {
    "train": ("experiments.train", [], "train one model (Hydra overrides: model.d_model=256 ...)"),
    "sweep": ("experiments.train", ["-m"], "a Hydra multirun sweep (+sweep=isoflop ...)"),
    "rl": ("experiments.rl", [], "an RL run"),
    "demo": ("experiments.demo", [], "the demo: sweep -> fit -> report on the embedded corpus"),
    "prepare-data": ("experiments.prepare_data", [], "tokenize a corpus for training"),
}


def _training_help() -> str:
    rows = "\n".join(f"  {word:<13} {what}" for word, (_, _, what) in TRAINING.items())
    return f"training (scalelab WORD --help for its options):\n{rows}\n"


def scalelab(argv: list[str] | None = None) -> int:
    """The `scalelab` console command: the analysis commands, plus `train`, `sweep`, `rl`, `demo`
    and `prepare-data`, which start the `python -m experiments.*` entry points."""
    global PROG
    argv = sys.argv[1:] if argv is None else list(argv)
    word = _command_word(argv)
    if word in TRAINING and argv and argv[0] == word:
        module, extra, _ = TRAINING[word]
        rest = [a for a in argv[1:] if a not in ("-q", "--quiet")]
        if len(rest) < len(argv) - 1:  # the trainer's progress and step lines go quiet; errors stay
            os.environ["SCALELAB_QUIET"] = "1"
        cmd = [sys.executable, "-m", module, *extra, *rest]
        if os.name == "posix":
            sys.stdout.flush()
            os.execv(sys.executable, cmd)  # the trainer owns the process: signals, exit code
        return subprocess.call(cmd)
    PROG = "scalelab"
    if not argv or argv[0] in ("-h", "--help"):
        build_parser(None).print_help()
        print("\n" + _training_help())
        return 0
    return main(argv)
