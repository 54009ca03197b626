"""`python -m analysis backtest DIR --protocol cooldown`: forecasts of cooldown (WSD branch) end
losses of larger shapes from their hot curve up to the branch. On a synthetic suite drawn from the
multi-power law (the drop's scale B a power law in N) the default beats the branch-ratio baseline;
on Gemstones (needs ../shared/data, fails under CI=true when it is missing) the measured figures
hold: the baseline wins there. A table or a folder without the layout is one error line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.backtests.cooldown import BASELINE, PEAK_LR, cooldown_protocol
from analysis.backtests.losses import Options
from analysis.cli import main as cli_main
from analysis.curves.data import Curve
from analysis.curves.features import features
from analysis.curves.laws import evaluate, get_curve_law
from models.base.errors import AnalysisError

HOT_STEPS = np.arange(100, 3001, 100)
BRANCHES = (900, 1800, 2700)


def _mpl(curve: Curve, t: np.ndarray, N: float) -> np.ndarray:
    """The multi-power law with shape-dependent L0 and B (the annealing drop shrinks with N)."""
    p = [1.7 + 60 * N**-0.2, 0.3, 0.5, 400 * (N / 1e8) ** -0.35, 2.0, 0.6, 0.6]
    return evaluate(get_curve_law("mpl"), np.array(p), features([(curve, t)]))


def _suite(folder, seed: int = 0) -> None:
    """hot_checkpoints.csv and cooldowns.csv of 6 shapes (50M-2B), 0.05% noise."""
    rng = np.random.default_rng(seed)
    hot, cool = [], []
    for N in np.geomspace(5e7, 2e9, 6):
        model = f"m{N:.0e}"
        flat = np.full(HOT_STEPS.size, PEAK_LR)
        loss = _mpl(Curve(model, HOT_STEPS, np.ones(HOT_STEPS.size), flat), HOT_STEPS, N)
        loss = loss * np.exp(rng.normal(0, 5e-4, loss.size))
        hot += [dict(model=model, N=N, step=s, loss=v) for s, v in zip(HOT_STEPS, loss)]
        for b in BRANCHES:
            e = b + b // 10
            c = Curve(model, np.array([b, e]), np.ones(2), np.array([PEAK_LR, 0.0]), warmup_steps=100)
            end = _mpl(c, np.array([e]), N)[0] * np.exp(rng.normal(0, 5e-4))
            at = loss[HOT_STEPS == b][0]
            cool.append(dict(model=model, N=N, branch_step=b, loss_at_branch=at, step_end=e, loss_end=end))
    pd.DataFrame(hot).to_csv(folder / "hot_checkpoints.csv", index=False)
    pd.DataFrame(cool).to_csv(folder / "cooldowns.csv", index=False)


def _rows(bt) -> dict[str, dict]:
    rows = bt.rows()
    assert sum(r["baseline"] for r in rows) == 1 and sum(r["default"] for r in rows) == 1
    return {r["method"]: r for r in rows}


def test_default_beats_the_ratio_baseline_on_a_synthetic_mpl_suite(tmp_path):
    _suite(tmp_path)
    bt = cooldown_protocol(str(tmp_path), Options(holdout_above_n=8e8))
    assert bt.cut["n_held_out"] == 2 and bt.cut["n_fit"] == 4 and bt.cut["n_points_held_out"] == 6
    rows = _rows(bt)
    base, default = rows[BASELINE], next(r for r in rows.values() if r["default"])
    assert default["method"] == "mpl" and default["n"] == base["n"] == 6
    # the ratio baseline misses the drop's trend in N; the transferred B follows it
    assert default["mean_abs_rel_error"] < 0.5 * base["mean_abs_rel_error"]
    assert default["mean_abs_rel_error"] < 2e-3
    # the baseline's band (the fitted ratios' spread) misses that trend too; the default's
    # leave-one-shape-out band covers
    assert default["coverage_90"] >= 0.5 and 0 <= base["coverage_90"] <= 1
    assert 0 < default["mean_width"] < 0.02 and 0 < base["mean_width"] < 0.02


def test_gemstones_cooldowns_measured(shared_data, tmp_path):
    out = tmp_path / "bt.json"
    path = shared_data / "gemstones"
    rc = cli_main(
        ["backtest", str(path), "--protocol", "cooldown", "--holdout-above-n", "1.5e9", "--only-default"]
        + ["--json", str(out)]
    )
    assert rc == 0
    j = json.loads(out.read_text())
    assert j["cut"]["held_out"] == ["1536x50", "2048x27", "3072x12"] and j["cut"]["n_fit"] == 17
    rows = {r["method"]: r for r in j["methods"]}
    base, default = rows[BASELINE], rows["mpl"]
    assert default["default"] and base["baseline"] and base["n"] == default["n"] == 29
    # measured: the ratio baseline 0.28% (cov 93%), mpl 0.47% (cov 62%): MPL's
    # cross-shape transfer does NOT beat the baseline on Gemstones (the drop's scale B extrapolated
    # in N is ~15% low at 2B; the baseline's drop-proportional-to-loss holds better)
    assert base["mean_abs_rel_error"] == pytest.approx(0.0028, abs=3e-4)
    assert default["mean_abs_rel_error"] == pytest.approx(0.0047, abs=5e-4)
    assert default["mean_abs_rel_error"] > 1.1 * base["mean_abs_rel_error"]
    assert base["coverage_90"] >= 0.85 and 0.4 <= default["coverage_90"] <= 0.8


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: pd.DataFrame({"N": [1.0]}), "reads a folder holding hot_checkpoints.csv"),
        (lambda p: str(p), "no hot_checkpoints.csv"),
        (lambda p: _without(p, "loss_end"), "cooldowns.csv: missing column(s) loss_end"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, make, message):
    with pytest.raises(AnalysisError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cooldown_protocol(make(tmp_path), Options())


def _without(folder, column: str) -> str:
    _suite(folder)
    c = pd.read_csv(folder / "cooldowns.csv").drop(columns=column)
    c.to_csv(folder / "cooldowns.csv", index=False)
    return str(folder)


def test_cli_prints_one_error_line(tmp_path, capsys):
    rc = cli_main(["backtest", str(tmp_path), "--protocol", "cooldown"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert "hot_checkpoints.csv" in err[0]
