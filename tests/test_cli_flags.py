"""One command line: every shared flag name means one thing, every command that reads runs takes
the same inputs and column flags, one --bootstrap default, short --help, --quiet, the renamed
flags' old names, and the `scalelab` console command."""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from analysis.cli import build_parser, main
from analysis.commands._flags import BOOTSTRAP, FLAG_MEANINGS, RUNS_COMMANDS
from tests.test_runs import _law_sweep

COLUMN_FLAGS = ("--n-col", "--d-col", "--c-col", "--loss-col", "--u-col")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    return dict(build_parser()._subparsers._group_actions[0].choices)


def _flags(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The visible long flags of one command (deprecated names are hidden)."""
    return {
        o: a
        for a in p._actions
        if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
        for o in a.option_strings
        if o.startswith("--")
    }


def test_every_shared_flag_name_has_one_stated_meaning():
    used = collections.defaultdict(list)
    for name, p in _subparsers().items():
        for flag in _flags(p):
            used[flag].append(name)
    shared = {f: cmds for f, cmds in used.items() if len(cmds) > 1}
    unstated = {f: cmds for f, cmds in shared.items() if f not in FLAG_MEANINGS}
    assert not unstated, f"flags shared by several commands without one stated meaning: {unstated}"
    assert len(shared) >= 20  # the registry is in use, not empty


def test_commands_that_read_runs_share_inputs_and_column_flags():
    subs = _subparsers()
    for name in RUNS_COMMANDS:
        flags = _flags(subs[name])
        assert set(COLUMN_FLAGS) <= set(flags), f"{name} lacks {set(COLUMN_FLAGS) - set(flags)}"
        first = next(a for a in subs[name]._actions if not a.option_strings and a.dest != "help")
        assert "sweep dir" in (first.help or ""), f"{name}'s runs input does not take a sweep directory"


def test_one_bootstrap_default_and_directories_for_out():
    for name, p in _subparsers().items():
        flags = _flags(p)
        if "--bootstrap" in flags:
            assert flags["--bootstrap"].default == BOOTSTRAP, name
        if "--out" in flags:
            assert flags["--out"].metavar == "DIR", f"{name} --out is not a directory"


def test_every_help_fits_80_lines(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    for name, p in _subparsers().items():
        text = p.format_help()
        assert len(text.splitlines()) <= 80, f"{name} --help is {len(text.splitlines())} lines"
        assert "examples:" in text or name in ("rl-report", "fit-rl", "fit-curve"), name


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli") / "sweep"
    return root, _law_sweep(root)


def test_fit_and_backtest_read_a_sweep_directory(sweep, tmp_path, capsys):
    """The runs of a sweep directory, without `collect` first; `--law FIT.json` reuses a fit's law."""
    root, truth = sweep
    out = tmp_path / "fit.json"
    assert main(["fit", str(root), "--bootstrap", "0", "--json", str(out)]) == 0
    fit = json.loads(out.read_text())
    assert fit["n_points"] == 16 and fit["params"]["alpha"] == pytest.approx(truth["alpha"], rel=0.02)
    again = tmp_path / "again.json"
    assert main(["fit", str(root), "--law", str(out), "--bootstrap", "0", "--json", str(again)]) == 0
    assert json.loads(again.read_text())["law"] == fit["law"]
    bt = tmp_path / "bt.json"
    assert main(["backtest", str(root), "--only-default", "--bootstrap", "0", "--json", str(bt)]) == 0
    assert json.loads(bt.read_text())["protocol"] == "budget"  # the default protocol
    capsys.readouterr()
    assert main(["fit", str(root), "--bootstrap", "0", "--n-col", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "'nope'" in err and len(err.strip().splitlines()) == 1


def test_quiet_prints_nothing_but_errors(sweep, tmp_path):
    root, _ = sweep
    cmd = [sys.executable, "-m", "analysis", "fit", str(root), "--bootstrap", "20", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", (p.stdout, p.stderr)
    p = subprocess.run([*cmd, "--json", "-"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout)["n_points"] == 16 and p.stderr == ""
    p = subprocess.run([*cmd, "--law", "nosuchlaw"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith("error: unknown law")


def test_renamed_flags_keep_their_old_names_with_one_note(capsys):
    ns = build_parser("fit-hparams").parse_args(["fit-hparams", "runs.csv", "--param", "optim.lr"])
    assert ns.param == ["optim.lr"]
    assert capsys.readouterr().err.strip() == "note: --param is deprecated: use --hparam"
    ns = build_parser("fit-hparams").parse_args(["fit-hparams", "runs.csv", "--hparam", "optim.lr"])
    assert ns.param == ["optim.lr"] and capsys.readouterr().err == ""


def test_plan_law_takes_a_fit_json_or_chinchilla(capsys):
    assert build_parser("plan").parse_args(["plan", "--law", "chinchilla"]).law is None
    with pytest.raises(SystemExit):
        build_parser("plan").parse_args(["plan", "--law", "kaplan2020"])
    assert "plan takes a fit's JSON" in capsys.readouterr().err


def test_scalelab_console_command_lists_every_command():
    exe = shutil.which("scalelab") or str(pathlib.Path(sys.executable).parent / "scalelab")
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for word in ("fit", "plan", "report", "backtest", "compare", "forecast", "collect", "train", "sweep"):
        assert f"\n    {word} " in p.stdout or f"\n  {word} " in p.stdout, word
    p = subprocess.run([exe, "fit", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("usage: scalelab fit")
