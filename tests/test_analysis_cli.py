"""The `python -m analysis fit` / `fit-curve` commands: JSON schema and one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synth_csv(path, n=6):
    rng = np.random.default_rng(0)
    N = np.repeat(np.geomspace(2e7, 3e9, n), n)
    D = np.tile(np.geomspace(4e8, 2e11, n), n)
    L = (1.9 + 600 / N**0.33 + 1800 / D**0.35) * np.exp(rng.normal(0, 0.001, N.size))
    pd.DataFrame({"N": N, "D": D, "loss": L}).to_csv(path, index=False)


def test_fit_json_schema(tmp_path, capsys):
    synth_csv(tmp_path / "d.csv")
    out = tmp_path / "o.json"
    rc = main(
        [
            "fit",
            str(tmp_path / "d.csv"),
            "--law",
            "chinchilla",
            "--bootstrap",
            "30",
            "--holdout-above",
            "1e20",
            "--budget",
            "1e21",
            "--budget",
            "1e23",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    j = json.loads(out.read_text())
    for key in (
        "params",
        "ci",
        "objective",
        "n_points",
        "converged",
        "starts_at_optimum",
        "allocation",
        "holdout",
        "law",
        "param_names",
        "bootstrap_samples",
    ):
        assert key in j, key
    assert j["param_names"] == ["E", "A", "B", "alpha", "beta"] == list(j["params"])
    assert len(j["bootstrap_samples"]) == 30 and len(j["bootstrap_samples"][0]) == 5
    assert [b["C"] for b in j["allocation"]["budgets"]] == [1e21, 1e23]
    for k in ("N_opt", "N_opt_ci", "D_opt", "D_opt_ci"):
        assert k in j["allocation"]["budgets"][0]
    assert {"a", "b"} <= set(j["allocation"])
    pt = j["holdout"]["points"][0]
    assert set(pt) >= {"N", "D", "C", "actual", "predicted", "rel_error"}
    assert {"mean_rel_error", "max_rel_error"} <= set(j["holdout"])
    assert "alpha" in capsys.readouterr().out


BAD = {
    "nan.csv": "N,D,loss\n1e8,2e9,3.1\n2e8,4e9,nan\n4e8,8e9,2.9\n",
    "few.csv": "N,D,loss\n1e8,2e9,3.1\n2e8,4e9,3.0\n",
    "cols.csv": "params,tokens,loss\n1e8,2e9,3.1\n",
    "empty.csv": "",
}


@pytest.mark.parametrize(
    "name, expect",
    [
        ("nan.csv", "NaN"),
        ("few.csv", "point"),
        ("cols.csv", "--n-col"),
        ("empty.csv", "empty"),
        ("missing.csv", "not found"),
    ],
)
def test_bad_input_one_line_no_traceback(tmp_path, name, expect):
    if name in BAD:
        (tmp_path / name).write_text(BAD[name])
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    p = subprocess.run(
        [sys.executable, "-m", "analysis", "fit", str(tmp_path / name), "--json", str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], p.stderr


def test_unknown_law_lists_laws(tmp_path, capsys):
    (tmp_path / "d.csv").write_text(BAD["nan.csv"])
    assert main(["fit", str(tmp_path / "d.csv"), "--law", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "choose from" in err and "chinchilla" in err and "auto" in err


def test_fit_curve_json(shared_data, tmp_path):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    out = tmp_path / "c.json"
    rc = main(
        [
            "fit-curve",
            "--law",
            "mpl",
            "--fit",
            str(d / "cosine_24000.csv"),
            "--fit-until",
            "16000",
            "--predict-curves",
            str(d / "wsd_20000_24000.csv"),
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    j = json.loads(out.read_text())
    assert {"L0", "A", "alpha"} <= set(j["params"])
    for name in ("cosine_24000", "wsd_20000_24000"):
        assert {"mean_rel_error", "max_rel_error", "final_loss_pred", "final_loss_actual"} <= set(
            j["predictions"][name]
        )


# --- one interface style: help on every flag, --version, --budget, --json PATH / - -----------------

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import json as _json  # noqa: E402

from analysis.cli import build_parser, command_modules  # noqa: E402


def strict_loads(text: str):
    """json.loads that rejects NaN/Infinity (as JavaScript's JSON.parse, jq, ... do)."""

    def bad(const):
        raise ValueError(f"bare {const} in JSON")

    return _json.loads(text, parse_constant=bad)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    acts = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(acts[0].choices) if acts else {}


def test_every_flag_of_every_subcommand_has_help():
    parser = build_parser()
    subs = _subparsers(parser)
    assert {"fit", "fit-curve", "fit-rl", "plan", "layout-eval", "report", "rl-report", "collect"} <= set(
        subs
    )
    missing = [
        f"{name} {a.option_strings or a.dest}"
        for name, p in [("", parser), *subs.items()]
        for a in p._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and a.help is not argparse.SUPPRESS  # a renamed flag's old name: hidden on purpose
        and not (a.help and a.help.strip())
    ]
    assert not missing, f"flags without help: {missing}"
    choices = {c.dest: c.help for c in parser._subparsers._group_actions[0]._choices_actions}
    assert all(choices.get(n) for n in subs), "a subcommand lacks its one-line description"


def test_top_level_help_lists_commands_and_an_example(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in command_modules():
        assert name.replace("_", "-") in out
    assert "scalelab fit runs.csv" in out and "scalelab plan --law fit.json" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    expected = importlib.metadata.version("scalelab")
    assert capsys.readouterr().out.strip() == f"scalelab {expected}"


@pytest.mark.parametrize(
    "cmd", [["fit", "d.csv"], ["report", "sweep"], ["plan", "--hardware", "h100", "--gpus", "8"]]
)
def test_budget_means_the_same_everywhere(cmd):
    parser = build_parser()
    forms = [
        ["--budget", "1e21", "--budget", "1e23"],
        ["--budget", "1e21,1e23"],
        ["--budget", "1e21", "1e23"],
    ]
    for form in forms:
        assert parser.parse_args(cmd + form).budget == [1e21, 1e23], form
    assert parser.parse_args(cmd).budget is None
    for bad in ("-3", "nan", "inf", "lots"):
        with pytest.raises(SystemExit):
            parser.parse_args(cmd + ["--budget", bad])


def test_json_dash_writes_pure_json_to_stdout(tmp_path, capsys):
    synth_csv(tmp_path / "d.csv", n=5)
    rc = main(["fit", str(tmp_path / "d.csv"), "--bootstrap", "0", "--budget", "1e21", "--json", "-"])
    assert rc == 0
    cap = capsys.readouterr()
    j = strict_loads(cap.out)  # nothing but the JSON on stdout
    assert j["ci"]["alpha"] == [None, None]  # no bootstrap: CIs are NaN, written as null
    assert "alpha" in cap.err  # the human-readable summary went to stderr
    assert j["allocation"]["budgets"][0]["C"] == 1e21


def test_json_into_a_missing_folder_is_one_line(tmp_path, capsys):
    synth_csv(tmp_path / "d.csv", n=5)
    assert main(["fit", str(tmp_path / "d.csv"), "--json", str(tmp_path / "nope" / "o.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_fit_and_fit_curve_json_are_strict(shared_data, tmp_path):
    synth_csv(tmp_path / "d.csv", n=5)
    assert (
        main(
            [
                "fit",
                str(tmp_path / "d.csv"),
                "--bootstrap",
                "0",
                "--holdout-above",
                "1e20",
                "--json",
                str(tmp_path / "fit.json"),
            ]
        )
        == 0
    )
    fit = strict_loads((tmp_path / "fit.json").read_text())
    assert fit["ci"]["E"] == [None, None] and fit["holdout"]["points"]
    d = shared_data / "mpl_loss_curves" / "csv_25"
    assert (
        main(
            [
                "fit-curve",
                "--law",
                "mpl",
                "--fit",
                str(d / "cosine_24000.csv"),
                "--fit-until",
                "16000",
                "--json",
                str(tmp_path / "c.json"),
            ]
        )
        == 0
    )
    assert {"L0", "A", "alpha"} <= set(strict_loads((tmp_path / "c.json").read_text())["params"])


def test_fit_rl_json_is_strict(tmp_path, capsys):
    """An early-stopped curve (before its midpoint) gives a flagged fit with non-finite fields."""
    rng = np.random.default_rng(3)
    C = np.linspace(0, 2e12, 30)
    A, B, Cm, R0 = 0.8, 2.0, 1e13, 0.1
    p = R0 + (A - R0) / (1 + (Cm / np.maximum(C, 1)) ** B)
    y = rng.binomial(1000, p) / 1000
    pd.DataFrame({"compute": C, "pass_rate": y}).to_csv(tmp_path / "early.csv", index=False)
    assert main(["fit-rl", str(tmp_path / "early.csv"), "--json", "-"]) == 0
    res = strict_loads(capsys.readouterr().out)
    assert {"params", "ci", "flags", "verdict"} <= set(res)


def test_plan_json_is_strict_with_consistent_keys(capsys):
    assert main(["plan", "--budget", "1e22", "--hardware", "h100-sxm", "--gpus", "64", "--json", "-"]) == 0
    j = strict_loads(capsys.readouterr().out)
    assert j["best"]["loss_ci"] is None  # the default law has no bootstrap samples
    assert j["N_opt"] == j["n_opt"] > 0 and j["D_opt"] == j["d_opt"] > 0  # fit's casing + old alias
    assert (
        main(["plan", "--budget", "1e22,1e23", "--hardware", "h100-sxm", "--gpus", "64", "--json", "-"]) == 0
    )
    plans = strict_loads(capsys.readouterr().out)["plans"]
    assert [p["budget_flops"] for p in plans] == [1e22, 1e23]


def test_layout_eval_json_is_strict(tmp_path, capsys):
    """Empty optional cells (NaN in pandas) come back as null, never as bare NaN."""
    csv = tmp_path / "l.csv"
    csv.write_text(
        "n_layers,d_model,n_heads,seq_len,vocab_size,global_batch,tp,d_ff,hardware,n_devices\n"
        "24,2048,16,2048,32000,512,2,,a100-80gb,16\n"
        "24,2048,16,2048,32000,512,1,8192,a100-80gb,16\n"
    )
    assert main(["layout-eval", str(csv), "--json", "-"]) == 0
    cap = capsys.readouterr()
    rows = strict_loads(cap.out)["rows"]
    assert rows[0]["d_ff"] is None and rows[1]["d_ff"] == 8192
    assert all("pred_mfu" in r for r in rows) and "MFU" in cap.err
