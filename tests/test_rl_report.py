"""RL report section: recipe grouping, ranking (identified by A then B, flagged last), figures."""

import json

import numpy as np

from analysis.rl.laws import sigmoid
from analysis.rl.report import rank, rl_section


def _write_run(d, algo, seed, A, B, Cm, c_end, rng, n=30):
    d.mkdir(parents=True)
    C = np.linspace(0, c_end, n)
    p = rng.binomial(1000, sigmoid(C, A, B, Cm, 0.1)) / 1000
    rows = [
        {
            "step": i * 10,
            "prompts_seen": i * 320,
            "flops_rl": float(c),
            "pass_rate": float(v),
            "pass_rate_stderr": float(np.sqrt(max(v * (1 - v), 1e-4) / 1000)),
            "kl": 0.05 * i,
            "train_reward": float(v),
            "zero_var_frac": 0.3,
        }
        for i, (c, v) in enumerate(zip(C, p))
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fields = {
        "model": {"d_model": 64},
        "optim": {"lr": 5e-4},
        "rl": {"seed": seed, "steps": 300, "task": {"name": "add"}, "algo": {"name": algo}},
    }
    (d / "summary.json").write_text(
        json.dumps({"status": "completed", "config_fields": fields, "prompts_per_pass": None})
    )


def test_rl_section_ranks_and_writes_figures(tmp_path):
    rng = np.random.default_rng(0)
    runs = tmp_path / "runs"
    for s in range(2):
        _write_run(runs / f"good_s{s}", "good", s, 0.7, 2.0, 1e11, 2e12, rng)
    _write_run(runs / "low_s0", "low", 0, 0.5, 2.0, 1e11, 2e12, rng)
    _write_run(runs / "early_s0", "early", 0, 0.8, 2.0, 1e13, 2e12, rng)
    md = rl_section(runs, tmp_path / "out")
    for f in ("rl_curves.png", "rl_prediction_card.png", "rl_reward_vs_kl.png", "rl_section.md"):
        assert (tmp_path / "out" / f).stat().st_size > 0
    table = [l for l in md.splitlines() if l.startswith("| ") and "add/" in l]
    order = [l.split("|")[2].strip() for l in table]
    assert order == ["add/good", "add/low", "add/early"], order
    early = table[2]
    assert "pre_midpoint" in early or "A_unbounded" in early
    assert early.split("|")[4].strip() == "—"  # no ceiling for a flagged recipe
    assert "seed-to-seed A" in md  # the 2 seeds of "good" are identified


def test_rank_orders_by_B_when_A_overlaps():
    res = {
        "x": {"flags": [], "params": {"A": 0.70, "B": 1.0}, "ci": {"A": [0.66, 0.74]}},
        "y": {"flags": [], "params": {"A": 0.69, "B": 3.0}, "ci": {"A": [0.65, 0.73]}},
        "z": {"flags": [], "params": {"A": 0.50, "B": 9.0}, "ci": {"A": [0.48, 0.52]}},
        "f": {
            "flags": ["pre_midpoint"],
            "params": {"A": 0.99, "B": 1.0},
            "ci": {"A": [0.3, 1.0]},
            "gain_per_decade": {"value": 0.2},
        },
    }
    assert rank(res) == ["y", "x", "z", "f"]


def test_rl_report_command_prints_section_and_strict_json(tmp_path, capsys):
    """`python -m analysis rl-report RUNS OUT --json -` (replaces `python -m analysis.rl_report`)."""
    from test_analysis_cli import strict_loads

    from analysis.cli import main

    rng = np.random.default_rng(1)
    runs = tmp_path / "runs"
    _write_run(runs / "good_s0", "good", 0, 0.7, 2.0, 1e11, 2e12, rng)
    _write_run(runs / "early_s0", "early", 0, 0.8, 2.0, 1e13, 2e12, rng)
    assert main(["rl-report", str(runs), str(tmp_path / "out"), "--json", "-"]) == 0
    cap = capsys.readouterr()
    rep = strict_loads(cap.out)
    assert "## RL scaling" in cap.err and rep["markdown"].startswith("## RL scaling")
    assert [r["label"] for r in rep["recipes"]] == ["add/good", "add/early"]
    assert rep["recipes"][0]["rank"] == 1 and rep["recipes"][1]["fit"]["flags"]
    for f in rep["figures"].values():
        assert (tmp_path / "out" / f).stat().st_size > 0
    assert main(["rl-report", str(tmp_path / "nothing"), str(tmp_path / "o2")]) == 2
    assert "not a directory of RL runs" in capsys.readouterr().err


def test_rl_figures_are_figures_made_without_pyplot(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from analysis.rl.report import curves_figure, fit_recipes, prediction_card_figure, reward_vs_kl_figure

    rng = np.random.default_rng(2)
    _write_run(tmp_path / "runs" / "good_s0", "good", 0, 0.7, 2.0, 1e11, 2e12, rng)
    before = plt.get_fignums()
    fits = fit_recipes(tmp_path / "runs")
    for make in (curves_figure, prediction_card_figure, reward_vs_kl_figure):
        assert isinstance(make(fits), Figure)
    assert plt.get_fignums() == before  # nothing registered with pyplot, nothing to close
