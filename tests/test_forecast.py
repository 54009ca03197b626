"""`python -m analysis forecast PREFIX --train COMPLETE --choose KEY`: a synthetic LR sweep in which
the high learning rate looks worse early and wins late (its noise floor decays with the cosine
schedule), picked right where the lowest loss at the cut picks wrong; the JSON contract; the
curve-prefix backtest on it; bad input as one line. The Gemstones check lives in
../shared/checks/forecast.sh (and in test_zoo's protocol run)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import backtests as backtest
from analysis.cli import main as cli_main
from analysis.forecast import forecast_runs, read_curves
from analysis.forecast.choose import p_best

LRS = (1e-3, 3e-3)
SIZES = (1e7, 2e7, 4e7, 8e7, 1.6e8)
T = 1000


def synthetic_sweep(seed: int = 0, noise: float = 5e-4) -> pd.DataFrame:
    """Every size at both learning rates, T steps of a cosine schedule (to 10% of the peak), logged
    every 10 steps: L = E(N) + 0.5 (lr t)^-0.4 + 300 lr eta(t)/eta_peak, the last term the noise floor
    a high rate pays until it decays; `noise` relative Gaussian noise per point."""
    rng = np.random.default_rng(seed)
    rows = []
    t = np.arange(10, T + 1, 10)
    eta = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * t / T))
    for N in SIZES:
        for lr in LRS:
            loss = 2 + 5 * (N / 1e7) ** -0.3 + 0.5 * (lr * t) ** -0.4 + 300 * lr * eta
            loss = loss * np.exp(rng.normal(0, noise, t.size))
            rows += [
                {"run": f"N{N:.0e}_lr{lr:g}", "step": int(s), "D": int(s) * 4096, "loss": y}
                | {"total_steps": T, "N": N, "optim.lr": lr}
                for s, y in zip(t, loss)
            ]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = synthetic_sweep()
    w = tmp_path_factory.mktemp("forecast")
    big = d.N == max(SIZES)
    d[~big].to_csv(w / "complete.csv", index=False)
    cut = d[big & (d.step <= 0.25 * T)]
    cut.to_csv(w / "prefix.csv", index=False)
    truth = d[big & (d.step == T)].set_index("run").loss
    return w, truth


def _forecast(w, *args) -> dict:
    out = w / "fc.json"
    rc = cli_main(
        ["forecast", str(w / "prefix.csv"), "--train", str(w / "complete.csv"), *args, "--json", str(out)]
    )
    assert rc == 0
    return json.loads(out.read_text())


def test_the_early_leader_loses_and_the_late_winner_is_picked(tables):
    w, truth = tables
    at_cut = pd.read_csv(w / "prefix.csv").sort_values("step").groupby("run").loss.last()
    assert at_cut.idxmin().endswith("lr0.001") and truth.idxmin().endswith("lr0.003")  # the trap is set
    j = _forecast(w, "--choose", "optim.lr")
    (choice,) = j["choices"]
    assert choice["run"] == truth.idxmin() and choice["value"] == 3e-3 and choice["p_best"] > 0.9
    assert sorted(m["run"] for m in choice["members"]) == sorted(truth.index)
    for r in j["runs"]:
        assert set(r) >= {"run", "final_loss", "interval", "frac_seen"}
        assert r["frac_seen"] == pytest.approx(0.25)
        lo, hi = r["interval"]
        assert lo < r["final_loss"] < hi and lo <= truth[r["run"]] <= hi
        assert abs(r["final_loss"] / truth[r["run"]] - 1) < 0.01
    # the baseline orders the runs by their loss at the cut: the wrong pick
    base = _forecast(w, "--choose", "optim.lr", "--method", "ratio")
    assert base["choices"][0]["run"] == at_cut.idxmin()


def test_curve_prefix_backtest_regret(tables):
    bt = backtest.run(synthetic_sweep(), "curve-prefix", backtest.Options(holdout_above_n=1e8)).to_dict()
    rows = {m["method"]: m for m in bt["methods"]}
    assert bt["cut"]["swept"] == "optim.lr" and bt["cut"]["n_held_out"] == 2
    base, default = rows["baseline_lowest_at_cut"], next(m for m in bt["methods"] if m["default"])
    assert base["baseline"] and default["method"] == "auto"
    assert base["mean_loss_penalty"] > 0.01 and default["mean_loss_penalty"] == 0.0
    assert default["mean_abs_rel_error"] < base["mean_abs_rel_error"]


def test_finished_runs_are_their_own_forecast(tables):
    w, truth = tables
    curves = read_curves(w / "complete.csv", "COMPLETE")
    r = forecast_runs(curves, curves, "optim.lr")
    assert all(f.method == "seen" and f.frac_seen == 1.0 and f.interval[0] == f.final_loss for f in r.runs)
    assert all(c.p_best in (0.0, 1.0) for c in r.choices for c in c.members)


def test_p_best():
    assert p_best([0.0], [0.1]).tolist() == [1.0]
    p = p_best([0.0, 0.0], [0.01, 0.01])
    assert p.sum() == pytest.approx(1.0) and abs(p[0] - 0.5) < 0.02
    assert p_best([0.0, 0.1], [0.0, 0.0]).tolist() == [1.0, 0.0]
    a, b = p_best([0.0, 0.01], [0.01, 0.01])
    assert a == pytest.approx(0.5 + 0.5 * math.erf(0.01 / 0.02), abs=0.02)


@pytest.mark.parametrize(
    "edit, expect",
    [
        (lambda d: d[(d.step <= 10) | (d.N < max(SIZES))], "logged point(s); a forecast needs at least 2"),
        (lambda d: d.drop(columns=["total_steps"]), "no total_steps column"),
        (
            lambda d: d.assign(total_steps=np.where(d.run == d.run.iloc[-1], np.nan, d.total_steps)),
            "no total_steps",
        ),
        (lambda d: d.drop(columns=["loss"]), "missing column(s) loss"),
    ],
    ids=["one-point prefix", "no total_steps column", "a run without total_steps", "no loss"],
)
def test_bad_input_is_one_line(tmp_path, capsys, edit, expect):
    d = synthetic_sweep()
    big = d.N == max(SIZES)
    prefix = edit(d[~big | (d.step <= 0.25 * T)])
    prefix.to_csv(tmp_path / "p.csv", index=False)
    rc = cli_main(["forecast", str(tmp_path / "p.csv"), "--choose", "optim.lr"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and expect in err[0], err


def test_unknown_choose_key_and_too_few_finished_runs(tables, capsys):
    w, _ = tables
    assert (
        cli_main(["forecast", str(w / "prefix.csv"), "--train", str(w / "complete.csv"), "--choose", "x"])
        == 2
    )
    assert "--choose x: no run has that setting" in capsys.readouterr().err
    assert cli_main(["forecast", str(w / "prefix.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "finished curve(s)" in err[0], err


def test_auto_is_the_baseline_unless_a_law_beats_it_on_every_fold_of_the_finished_curves(tables):
    """`auto` forecasts the finished curves, cut where the running ones are, from the other finished
    ones (as far beyond them as the running runs are beyond the finished: select.folds) and keeps the
    baseline unless a law beats it by the parsimony margin on every fold. On the synthetic sweep
    (smooth curves) the shape transfer wins both folds; with forecasters that are exact or off by a
    set amount per fold, the choice follows the rule; without a fold (one size, one length), the
    baseline."""
    from analysis.forecast import Method, select

    w, _ = tables
    j = _forecast(w, "--choose", "optim.lr")
    assert j["method"] == "transfer" and j["notes"][0].startswith("auto: transfer")
    assert "2 fold(s)" in j["notes"][0]
    learn, going = read_curves(w / "complete.csv", "COMPLETE"), read_curves(w / "prefix.csv", "PREFIX")
    names = [n for n, _, _ in select.folds(learn, going)]
    assert names == ["N 4e+07-8e+07 from smaller (x2)", "N 2e+07-4e+07 from smaller (x2)"]
    assert [n for n, _, _ in select.folds(learn)] == ["N=8e+07 from smaller", "N=4e+07 from smaller"]
    exact, far = {8e7: 0.0, 4e7: 0.0}, {8e7: 0.05, 4e7: 0.05}
    one_fold = {8e7: 0.0, 4e7: 0.05}
    pick = lambda off: select.select(going, learn, ["N"], _fake(learn, off)).method  # noqa: E731
    assert pick({Method.RATIO: far, Method.TRANSFER: exact}) == Method.TRANSFER
    assert pick({Method.RATIO: exact, Method.TRANSFER: far}) == Method.RATIO
    assert pick({Method.RATIO: {8e7: 0.02, 4e7: 0.02}, Method.TRANSFER: one_fold}) == Method.RATIO
    one = [c for c in learn if c.number("N") == min(SIZES)]
    assert select.folds(one, going) == []
    sel = select.select(going, one, ["N"], _fake(learn, {}), choose="optim.lr")
    assert sel.method == Method.RATIO and sel.pick == Method.RATIO and "no fold" in sel.note()


def _fake(learn, off: dict, flip: dict | None = None):
    """A forecaster off by `off[method][N]` (relative) on every run of a fold of size N, and, where
    `flip[method][N]` is set, ranking each rung's runs upside down (its picks the worst runs)."""
    from analysis.forecast import RunForecast

    held = {c.run: c for c in learn}

    def forecaster(method, frac, runs, complete, keys):
        N = runs[0].number("N")
        e = off.get(method, {}).get(N, 0.0)
        out = []
        for c in runs:
            y = held[c.run].final_loss
            if (flip or {}).get(method, {}).get(N):
                y = 20.0 - y  # the order reversed
            out.append(RunForecast(c.run, y * (1 + e), (0, 9), frac, method, 0.01))
        return out

    return forecaster


def test_picks_use_a_forecaster_only_when_its_picks_beat_the_lowest_loss_at_the_cut_on_every_fold(tables):
    """The early-stop decision: the folds score each forecaster's picks (regret against each rung's
    best finished run) beside the lowest loss at the cut's (the baseline), and a forecaster's picks are
    used only when they beat it by the parsimony margin on every fold; too few rungs, or a baseline that
    already picked every best run, keep the lowest loss at the cut."""
    from analysis.forecast import Method, select

    w, _ = tables
    learn, going = read_curves(w / "complete.csv", "COMPLETE"), read_curves(w / "prefix.csv", "PREFIX")
    T, R = Method.TRANSFER, Method.RATIO
    both, one = {8e7: True, 4e7: True}, {8e7: True}
    sel = lambda flip: select.select(going, learn, ["N", "optim.lr"], _fake(learn, {}, flip), "optim.lr")  # noqa: E731
    won = sel({R: both})  # the lowest loss at the cut picks wrong on both folds, transfer right
    assert won.pick == T and won.rungs == 2 and won.regrets[R] and set(won.regrets[T].values()) == {0.0}
    assert sel({R: one}).pick == R  # beaten on one fold only
    assert sel({T: both}).pick == R and sel({}).pick == R  # transfer worse; nobody errs
    assert "picked every fold's best run" in sel({}).why_pick
    few = select.select(going, learn, ["N"], _fake(learn, {}, {R: both}), "N")  # a rung per run
    assert few.pick == R and few.rungs == 0 and "too few" in few.why_pick
    rec = won.to_dict()
    assert {"chosen", "baseline", "candidates", "fold_errors", "note"} <= set(rec)
    assert rec["chosen"] == "transfer" and rec["baseline"] == "ratio" and rec["candidates"] == ["transfer"]
    assert set(rec["fold_regrets"]) == {"ratio", "transfer"} and len(rec["fold_errors"]["ratio"]) == 2


def test_without_folds_the_picks_are_the_lowest_loss_at_the_cut_and_one_note_says_so(
    tables, tmp_path, capsys
):
    """The two smallest sizes finished (no fold with 3 runs to learn from): the lowest loss at the cut
    picks, whatever the method, and exactly one `note:` line says why; method_choice carries it."""
    w, truth = tables
    d = pd.read_csv(w / "complete.csv")
    d[d.N < 4e7].to_csv(tmp_path / "one.csv", index=False)  # two sizes: no fold with 3 runs to learn from
    at_cut = pd.read_csv(w / "prefix.csv").sort_values("step").groupby("run").loss.last()
    for method in ("auto", "transfer"):
        out = tmp_path / f"{method}.json"
        args = [
            "forecast",
            str(w / "prefix.csv"),
            "--train",
            str(tmp_path / "one.csv"),
            "--choose",
            "optim.lr",
        ]
        assert cli_main([*args, "--method", method, "--json", str(out)]) == 0
        notes = [x for x in capsys.readouterr().out.splitlines() if x.startswith("note:")]
        j = json.loads(out.read_text())
        assert len(notes) == 1 and "picks by the lowest loss at the cut" in notes[0], notes
        assert j["choices"][0]["run"] == at_cut.idxmin() != truth.idxmin()
        mc = j["method_choice"]
        assert mc["chosen"] == "ratio" and mc["fold_errors"] == {} and mc["note"] == notes[0][len("note: ") :]
