"""`python -m analysis backtest`: the JSON contract (one baseline row, one default row, the error keys
of each protocol), the outputs (--markdown, --figure), one-line errors, and the zoo's quick subset
on the shared data (fails under CI=true when the data is missing)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.backtests import zoo
from analysis.cli import main as cli_main
from analysis.core import validation

ROW_KEYS = ("method", "baseline", "default", "n", "coverage_90", "mean_width", "points")


def chinchilla_ladder(seed: int = 0, noise: float = 0.004) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for C in np.geomspace(1e17, 1e20, 7):
        for f in np.geomspace(0.3, 3, 5):
            N = np.sqrt(C / 6 / 20) * f
            D = C / 6 / N
            loss = 1.7 + 400 / N**0.34 + 1400 / D**0.28
            rows.append(dict(N=N, D=D, C=C, loss=loss * np.exp(rng.normal(0, noise))))
    return pd.DataFrame(rows)


def run_bt(tmp_path, table: pd.DataFrame, *args: str) -> tuple[int, dict]:
    data = tmp_path / "runs.csv"
    table.to_csv(data, index=False)
    out = tmp_path / "bt.json"
    rc = cli_main(["backtest", str(data), *args, "--bootstrap", "20", "--json", str(out)])
    return rc, json.loads(out.read_text()) if out.exists() else {}


def check_contract(j: dict, protocol: str, key: str) -> None:
    assert j["protocol"] == protocol and "what" in j["cut"]
    rows = j["methods"]
    assert sum(r["baseline"] for r in rows) == 1 and sum(r["default"] for r in rows) == 1
    for r in rows:
        assert all(k in r for k in ROW_KEYS) and key in r
    scored = [r for r in rows if r["n"]]
    assert len(scored) >= 2 and all(np.isfinite(r[key]) for r in scored)


@pytest.mark.parametrize(
    "protocol,flags",
    [("budget", []), ("frontier", ["--holdout-above", "2e19"]), ("size", ["--holdout-above-n", "1.5e8"])],
)
def test_loss_protocols_report_baseline_and_default(tmp_path, protocol, flags):
    rc, j = run_bt(tmp_path, chinchilla_ladder(), "--protocol", protocol, *flags)
    assert rc == 0
    check_contract(j, protocol, "mean_abs_rel_error")
    rows = {r["method"]: r for r in j["methods"]}
    default = next(r for r in j["methods"] if r["default"])
    # on a ladder of the law's own form, the default predicts what it did not see within 2%
    assert default["mean_abs_rel_error"] < 0.02, rows
    if protocol == "budget":
        assert default["method"] == "chinchilla" and j["cut"]["n_held_out"] == 5
        assert 0 <= default["coverage_90"] <= 1 and default["mean_width"] > 0


def test_epochs_protocol_scores_the_data_constrained_laws(tmp_path):
    """Scored with --only-default (every candidate's row is the zoo's, docs/zoo.md): the
    baseline and the default only, which is the law `fit` picks on runs that repeat their data."""
    rc, j = run_bt(
        tmp_path,
        zoo.repeated(1, 5.0),  # R_D = 5: repetition costs enough for the folds to tell
        "--protocol",
        "epochs",
        "--holdout-epochs-above",
        "4",
        "--only-default",
    )
    assert rc == 0
    check_contract(j, "epochs", "mean_abs_rel_error")
    rows = {r["method"]: r for r in j["methods"]}
    assert set(rows) == {"baseline_scipy_chinchilla", "auto"}
    # fit's law without --law on runs that repeat their data: the form the runs' own folds choose;
    # the data is of the data-constrained form, so a data-constrained law is chosen and beats the
    # baseline (which treats repeats as fresh tokens) by more than 2x
    default = next(r for r in j["methods"] if r["default"])
    assert default["method"] == "auto" and default["note"].startswith("chose data_constrained"), default
    assert default["mean_abs_rel_error"] < 0.5 * rows["baseline_scipy_chinchilla"]["mean_abs_rel_error"]


def test_lr_protocol_scores_dlog10_and_loss_penalty(tmp_path):
    rc, j = run_bt(tmp_path, zoo.lr_ladder(), "--protocol", "lr", "--holdout-above-n", "4e8")
    assert rc == 0
    check_contract(j, "lr", "mean_abs_dlog10")
    default = next(r for r in j["methods"] if r["default"])
    assert default["mean_abs_dlog10"] < 0.15 and default["mean_loss_penalty"] >= 0
    assert all("loss_penalty" in p for p in default["points"])
    # the ladder carries its true optimum (lr_true): scored against it, never fitted on
    assert j["cut"]["target"] == "the known optimum"
    truth = {round(N): 3e-3 * (N / 1e8) ** -0.3 for N in zoo.lr_ladder().N}
    for p in default["points"]:
        assert p["actual"] == pytest.approx(truth[round(p["N"])], rel=1e-9)


def test_markdown_and_figure(tmp_path):
    md, fig = tmp_path / "bt.md", tmp_path / "bt.png"
    rc, _ = run_bt(
        tmp_path, chinchilla_ladder(), "--protocol", "budget", "--markdown", str(md), "--figure", str(fig)
    )
    assert rc == 0
    text = md.read_text()
    assert "| method |" in text and "baseline_scipy_chinchilla" in text and "default" in text
    assert fig.stat().st_size > 5000


@pytest.mark.parametrize(
    "table,args,fix",
    [
        (pd.DataFrame({"N": [1e8, 2e8], "D": [1e9, 2e9]}), ["--protocol", "budget"], "loss"),
        (chinchilla_ladder(), ["--protocol", "budget", "--holdout-above", "1e30"], "lower the threshold"),
        (chinchilla_ladder(), ["--protocol", "epochs"], "U"),
        (chinchilla_ladder(), ["--protocol", "lr"], "learning-rate column"),
        (zoo.gemstones_lr, ["--protocol", "lr"], "3 learning rates"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, table, args, fix, request):
    if callable(table):
        request.getfixturevalue("shared_data")
        table = table()
    rc, _ = run_bt(tmp_path, table, *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and fix in err[0], err


def test_validation_cuts_and_choice():
    assert validation.top_levels(np.array([1, 1, 2, 3, 4, 5.0]), 2, 3) == [5.0, 4.0]
    assert validation.top_levels(np.array([1, 2, 3.0]), 2, 3) == []
    assert list(validation.holdout_mask(np.array([1, 2, 3, 3.0]))) == [False, False, True, True]
    assert list(validation.holdout_mask(np.array([1, 2, 3.0]), 1.5)) == [False, True, True]
    assert validation.share_cut(np.array([1, 1, 2, 4, 8.0]), 0.6) == 2.0
    assert validation.choose({"a": 1.05, "b": 1.0}, ["a", "b"]) == "a"
    assert validation.choose({"a": 1.2, "b": 1.0}, ["a", "b"]) == "b"
    assert validation.choose({"a": np.nan, "b": np.nan}, ["a", "b"]) == "b"
    lo, hi = validation.percentile_interval(np.array([[1.0, np.nan], [2.0, np.inf], [3.0, 5.0]]), 0.5)
    assert lo[0] == 1.5 and hi[0] == 2.5 and lo[1] == hi[1] == 5.0
    assert validation.padded_rows(5) == 128 and validation.padded_rows(200, 128) == 256
    assert validation.padded_rows(17, 16, quantum=16) == 32
    c = validation.bootstrap_counts(7, 3, 0)
    assert c.shape == (3, 7) and (c.sum(axis=1) == 7).all()


def test_zoo_quick_subset(shared_data, tmp_path):
    """The zoo's quick subset (one dataset per protocol) runs and writes its table."""
    md = tmp_path / "zoo.md"
    assert (
        zoo.main(
            [
                "--quick",
                "--bootstrap",
                "10",
                "--only",
                "epoch budget",
                "--only-default",
                "--markdown",
                str(md),
            ]
        )
        == 0
    )
    text = md.read_text()
    assert "| budget | 1 |" in text and "baseline_scipy_chinchilla" in text


@pytest.mark.slow
def test_frontier_default_never_loses_to_the_baseline_on_the_zoo(shared_data):
    """The default rule at the zoo's figures (docs/zoo.md): on every frontier ladder of the zoo
    the default best-loss method is no worse than the simple baseline by more than 10%."""
    cases = [c for c in zoo.cases() if c.protocol == "frontier"]
    assert len(cases) >= 8
    for case in cases:
        o = zoo.run_case(case, bootstrap=0)
        assert o.error is None, (case.dataset, o.error)
        d, b = o.role("default")[o.error_key], o.role("baseline")[o.error_key]
        assert d <= (1 + zoo.MARGIN) * b + 1e-4, (case.dataset, d, b)


def test_command_choices_are_the_protocols():
    """The CLI's --protocol choices (a literal, so `--help` imports no pandas) list every protocol."""
    import argparse

    from analysis.backtests import RUNNERS, Protocol
    from analysis.commands import backtest as cmd

    sub = argparse.ArgumentParser().add_subparsers()
    cmd.register(sub)
    parser = sub.choices["backtest"]
    choices = next(a.choices for a in parser._actions if a.dest == "protocol")
    assert tuple(choices) == tuple(p.value for p in Protocol)
    assert set(RUNNERS) == set(Protocol)
