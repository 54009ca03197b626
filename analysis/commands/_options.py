"""What every `python -m analysis` subcommand shares besides its flags (those are in `_flags`):
its typed options and its output.

Each command turns argparse's namespace into one frozen options object (a `CommandOptions`
subclass, `from_args`) as its first step and passes that on; no helper takes the namespace.
`emit_json` writes the result where `--json` says: a file, atomically, or stdout for `-`, while
the command's human-readable lines go to stderr (`json_stdout_only`, which `analysis.cli` uses).

Not a subcommand: `analysis.cli` skips modules whose name starts with `_`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
    experts_col: str | None = None  # the MoE laws' experts (fit only)

    def columns(self) -> dict[str, str]:
        """{role: column} of the roles the user named."""
        named = (
            ("N", self.n_col),
            ("D", self.d_col),
            ("C", self.c_col),
            ("loss", self.loss_col),
            ("x", self.x_col),
            ("U", self.u_col),
            ("experts", self.experts_col),
        )
        return {role: name for role, name in named if name}


def silence_progress() -> None:
    """`--quiet`: no progress bar anywhere in this process."""
    # deferred: only a --quiet command line needs the progress module
    from analysis.core import progress

    progress.set_quiet(True)


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


class _Deprecated(argparse.Action):
    """A renamed flag's old name: does what the new one does, after one `note:` line on stderr."""

    def __init__(self, option_strings, dest, new: str = "", append: bool = False, **kw):
        self.new, self.append = new, append
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kw) -> None:
    """Keep `old` working for `new` (same destination), hidden from --help."""
    parser.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS, **kw)
