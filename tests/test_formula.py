"""`fit --formula`: a law written as an expression (analysis/laws/formula.py), per-group parameters
(analysis/laws/groups.py) and `--formula search` (analysis/laws/formula_search.py).

The parser, the names' binding and the roles are checked without fitting; the fits share a few
module-scoped command lines on small synthetic tables whose truth is known."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main
from analysis.core import methods as method_registry
from analysis.laws import formula as fm
from analysis.laws import groups as gr
from analysis.laws import registry
from models.base.errors import AnalysisError


@pytest.fixture(scope="module", autouse=True)
def _registry_restored():
    """Formula laws register themselves (laws and methods); leave the registries as found. The
    point methods are registered first (importing analysis.laws.methods), so that restoring the
    snapshot never removes them from a process that goes on with other test modules."""
    import analysis.laws.methods  # noqa: F401

    laws, users, meths = dict(registry._REGISTRY), dict(registry.USER_LAWS), dict(method_registry._REGISTRY)
    yield
    for d, saved in (
        (registry._REGISTRY, laws),
        (registry.USER_LAWS, users),
        (method_registry._REGISTRY, meths),
    ):
        d.clear()
        d.update(saved)


def _vocab(n=240, seed=0, offset=1.7):
    rng = np.random.default_rng(seed)
    N = rng.choice(np.geomspace(3e7, 3e9, 6), n)
    V = rng.choice([4096, 16384, 65536], n).astype(float)
    D = N * rng.choice([10, 40], n)
    L = (400 / N**0.33 + 6 / V**0.25 + 900 / D**0.3 + offset) * np.exp(rng.normal(0, 0.003, n))
    return pd.DataFrame({"params": N, "vocab": V, "tokens": D, "loss": L})


def _sft(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(3):
        A, B, C = 10 ** rng.uniform(1, 2), 10 ** rng.uniform(1, 3), rng.uniform(0.8, 1.6)
        for d in np.geomspace(200, 800_000, 10):
            rows.append(
                {"model": f"m{g}", "n": d, "loss": (A / (d**0.45 + B) + C) * np.exp(rng.normal(0, 0.002))}
            )
    return pd.DataFrame(rows)


# ---- parsing, names, roles (no fit) -------------------------------------------------------------
COLS = ["params", "vocab", "tokens", "loss", "N", "D", "U", "lr", "n", "experts", "r1"]


def _roles(text, inputs=None):
    spec = fm.make_spec(text, COLS, inputs or {}, {}, "loss")
    return spec, {p: (r.kind, spec.bounds[p]) for p, r in spec.roles.items()}


def test_roles_set_bounds_from_where_a_parameter_appears():
    spec, roles = _roles("E + A / N**alpha + B / V**beta + C / D^gamma", {"V": "vocab"})
    assert spec.inputs == {"N": "N", "V": "vocab", "D": "D"}
    assert roles["E"] == ("offset", (-np.inf, np.inf))
    assert roles["A"] == roles["B"] == roles["C"] == ("positive", (0.0, np.inf))
    assert roles["alpha"] == roles["gamma"] == ("exponent", (0.0, 3.0))  # `^` is a power too
    # an unsigned exponent may take either sign; an inner shift and a time constant stay positive
    _, roles = _roles("A * N**a + C")
    assert roles["a"] == ("exponent", (-3.0, 3.0))
    spec, roles = _roles("Dp = U + RD * U * (1 - exp(-(D / U - 1) / RD)); E + A / N**alpha + B / Dp**beta")
    assert spec.params == ("RD", "E", "A", "alpha", "B", "beta") and roles["RD"][0] == "positive"
    _, roles = _roles("A / (n**alpha + B) + C")
    assert roles["B"] == ("positive", (0.0, np.inf)) and roles["C"][0] == "offset"
    _, roles = _roles("E + C * (log(lr) - m)**2 + k * exp(t * r1) + where(N > 1e9, a, b)")
    assert roles["m"][0] == "coefficient" and roles["t"][0] == "rate" and roles["k"][0] == "positive"


def test_param_flags_override_bounds_and_starts():
    opts = fm.parse_param_options(["alpha=0:1", "E=1.8", "alpha=0.4"])
    spec = fm.make_spec("E + A / N**alpha", COLS, {}, opts, "loss")
    assert spec.bounds["alpha"] == (0.0, 1.0) and spec.starts == {"E": 1.8, "alpha": 0.4}
    # a --param name is a parameter even when a column has that name
    spec = fm.make_spec("E + A / N**lr", COLS, {}, fm.parse_param_options(["lr=0:2"]), "loss")
    assert "lr" in spec.params and spec.inputs == {"N": "N"}
    for bad in ("alpha", "alpha=2:1", "alpha=x", "1a=3"):
        with pytest.raises(AnalysisError, match="--param"):
            fm.parse_param_options([bad])


@pytest.mark.parametrize(
    "text, inputs, message",
    [
        ("E + A / N**", {}, "syntax error at the end"),
        ("E + A / N**alpha + foo(D)", {}, "unknown function foo()"),
        ("E + A / Q**alpha", {"N": "params"}, "Q is neither a column nor an --input"),
        ("E + A * B", {}, "uses no input"),
        ("E + A // N", {}, "operator //"),
        ("__import__('os').system('true') + N", {}, "unknown function"),
        ("E + N.real", {}, "attributes"),
        ("exp(N, 2)", {}, "takes 1 argument"),
        ("Dp + N; Dp = N", {}, "definitions"),
        ("E + A / loss**a", {}, "target column"),
        ("E + A / N**a", {"N": "nope"}, "no column 'nope'"),
    ],
)
def test_bad_formulas_are_refused_with_what_to_fix(text, inputs, message):
    with pytest.raises(AnalysisError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fm.make_spec(text, COLS, inputs, {}, "loss")


def test_compiled_formula_evaluates_like_numpy():
    f = fm.parse("Dp = U * (1 - exp(-D / U)); where(D > U, A / Dp**b, sqrt(D)) + maximum(N, 2)")
    x = {"U": np.array([2.0, 4.0]), "D": np.array([3.0, 1.0]), "N": np.array([1.0, 5.0]), "A": 2.0, "b": 0.5}
    got = fm.compile_formula(f, np)(x)
    dp = x["U"] * (1 - np.exp(-x["D"] / x["U"]))
    want = np.where(x["D"] > x["U"], 2.0 / dp**0.5, np.sqrt(x["D"])) + np.maximum(x["N"], 2)
    np.testing.assert_allclose(got, want)


# ---- fits on the command line -------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab_run(tmp_path_factory):
    """`fit --formula` with renamed inputs, --predict and --json on a vocabulary-style law."""
    d = tmp_path_factory.mktemp("formula")
    t = _vocab()
    t[t.params < 1e9].to_csv(d / "fit.csv", index=False)
    t[t.params >= 1e9][["params", "vocab", "tokens"]].to_csv(d / "targets.csv", index=False)
    args = ["fit", str(d / "fit.csv"), "--formula", "E + A / N**alpha + B / V**beta + C / D**gamma"]
    args += ["--input", "N=params", "--input", "V=vocab,D=tokens", "--target", "loss", "--bootstrap", "30"]
    args += ["--predict", str(d / "targets.csv"), "--json", str(d / "fit.json")]
    assert main(args) == 0
    return d, json.loads((d / "fit.json").read_text()), t[t.params >= 1e9]


def test_formula_fit_predicts_larger_models_with_intervals(vocab_run):
    d, out, truth = vocab_run
    assert out["law"] == "formula" and out["formula"].startswith("E + A / N**alpha")
    assert out["inputs"] == {"N": "params", "V": "vocab", "D": "tokens"} and out["residuals"] == "linear"
    assert out["scale_input"] == "N" and out["roles"]["alpha"]["role"] == "exponent"
    assert set(out["params"]) == {"E", "A", "alpha", "B", "beta", "C", "gamma"}
    assert out["params"]["alpha"] == pytest.approx(0.33, abs=0.03) and out["converged"]
    assert {"ci", "bootstrap", "prediction_error", "objective", "n_points"} <= set(out)  # fit's schema
    rows = out["predictions"]
    assert len(rows) == len(truth) and rows[0]["N"] == truth.params.iloc[0]  # every target row, in order
    y = truth.loss.to_numpy()
    pred = np.array([r["prediction"] for r in rows])
    lo, hi = np.array([r["interval"] for r in rows]).T
    assert np.all((lo < pred) & (pred < hi))
    assert 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2) > 0.98
    assert np.mean((lo <= y) & (y <= hi)) >= 0.7


def test_bad_formula_on_the_command_line_is_one_error_line(vocab_run, capsys):
    d, _, _ = vocab_run
    base = ["fit", str(d / "fit.csv"), "--input", "N=params", "--input", "D=tokens", "--target", "loss"]
    for text in ("E + A / N**", "E + A / N**alpha + foo(D)", "E + A / Q**alpha"):
        capsys.readouterr()
        assert main([*base, "--formula", text]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: formula"), err
    # a log of data that is negative, and one that no parameter value can keep positive
    for text, extra in (("E + A * log(N - 1e9)", []), ("E + B / log(A - N)", ["--param", "A=0:1"])):
        assert main([*base, "--formula", text, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "a log of a negative value" in err[0], err
    assert main([*base, "--formula", "E + A / N**a", "--law", "chinchilla"]) == 2
    assert "--law does not apply to --formula" in capsys.readouterr().err
    pd.DataFrame({"params": [2e9]}).to_csv(d / "no_tokens.csv", index=False)  # fails before the fit
    assert main([*base, "--formula", "E + A / N**a + B / D**b", "--predict", str(d / "no_tokens.csv")]) == 2
    assert "no column 'tokens' (the input D)" in capsys.readouterr().err


# ---- groups, several targets, linear residuals (API) ------------------------------------------------
@pytest.fixture(scope="module")
def sft_fit():
    s = _sft()
    fit = gr.fit_formula(
        s[s.n < 2.5e5],
        "A / (n**alpha + B) + C",
        "loss",
        group="model",
        shared=["alpha"],
        options=gr.FormulaOptions(bootstrap=20),
    )
    return s, fit


def test_groups_fit_one_parameter_set_each_with_shared_exponent(sft_fit):
    s, fit = sft_fit
    gp = fit.group_params()
    assert sorted(gp) == ["m0", "m1", "m2"]
    assert len({round(v["alpha"], 12) for v in gp.values()}) == 1  # tied
    assert gp["m0"]["alpha"] == pytest.approx(0.45, abs=0.06)
    assert len({round(v["C"], 6) for v in gp.values()}) == 3  # one per group
    d = fit.to_dict()
    assert d["groups"] == ["m0", "m1", "m2"] and d["shared"] == ["alpha"] and "A[m1]" in d["params"]
    test = s[s.n >= 2.5e5]
    rows = fit.prediction_rows(test[["model", "n"]])
    assert [r["model"] for r in rows] == list(test.model)
    y, pred = test.loss.to_numpy(), np.array([r["prediction"] for r in rows])
    assert np.max(np.abs(pred / y - 1)) < 0.02
    with pytest.raises(AnalysisError, match="'m9' was not among the fitted groups"):
        fit.prediction_rows(pd.DataFrame({"model": ["m9"], "n": [1e6]}))


def test_negative_target_and_a_target_spanning_decades_as_several_targets(tmp_path, capsys):
    t = _vocab(n=160, seed=1)
    t["norm_loss"] = t.loss - 6.0  # negative, as a unigram-normalised loss: linear residuals
    t["lr_opt"] = 2.0 * t.params**-0.6  # a learning rate over 16x: log residuals
    t.to_csv(tmp_path / "runs.csv", index=False)
    laws = "-E + A / params**alpha + B / vocab**beta + C / tokens**gamma\nA * params**a\n"
    (tmp_path / "laws.txt").write_text("# one line per target\n" + laws)
    args = ["fit", str(tmp_path / "runs.csv"), "--formula", "@" + str(tmp_path / "laws.txt")]
    args += ["--target", "norm_loss", "--target", "lr_opt", "--predict", str(tmp_path / "runs.csv")]
    assert main([*args, "--bootstrap", "0", "--json", str(tmp_path / "o.json")]) == 0
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["targets"] == ["norm_loss", "lr_opt"] and out["formula"]["lr_opt"] == "A * params**a"
    first, second = out["fits"]["norm_loss"], out["fits"]["lr_opt"]
    assert first["residuals"] == "linear" and first["residual_scale"] > 0 and second["residuals"] == "log"
    assert second["params"]["a"] == pytest.approx(-0.6, abs=1e-6)
    pred = np.array([r["prediction"] for r in out["predictions_by_target"]["norm_loss"]])
    assert np.max(np.abs(pred - t.norm_loss)) < 0.05
    assert len(out["predictions_by_target"]["lr_opt"]) == len(t)


# ---- search --------------------------------------------------------------------------------------
def test_search_returns_a_formula_that_fits_again(tmp_path):
    rng = np.random.default_rng(3)
    N = rng.choice(np.geomspace(1e7, 3e9, 7), 150)
    D = N * rng.choice([5, 20, 80], 150)
    L = (2.0 + 300 / N**0.3 + 600 / D**0.28) * np.exp(rng.normal(0, 0.003, 150))
    df = pd.DataFrame({"N": N, "D": D, "loss": L})
    res = __import__("analysis.laws.formula_search", fromlist=["search"]).search(
        df, "loss", {"N": "N", "D": "D"}, options=gr.FormulaOptions(bootstrap=0)
    )
    spec = fm.make_spec(res.formula, df.columns, {}, {}, "loss")  # `--formula` accepts it
    assert set(spec.inputs) == {"N", "D"} and res.chosen.mean < 0.01
    assert res.to_dict()["formula"] == res.formula and len(res.to_dict()["next"]) == 3
    fit = gr.fit_formula(
        df, res.formula, "loss", options=gr.FormulaOptions(bootstrap=0, extra_starts=res.starts)
    )
    rel = np.abs(fit.predict(df[["N", "D"]])[1] / L - 1)
    assert np.median(rel) < 0.005


def test_registered_formula_is_a_law_and_a_method_for_backtests():
    law = gr.register_formula("test_formula_tied", "E + A / N**alpha + B / D**alpha", protocols=("budget",))
    assert registry.get_law("test_formula_tied") is law
    assert "test_formula_tied" in method_registry.names("point", "budget")
    rng = np.random.default_rng(4)
    N = np.repeat(np.geomspace(1e7, 1e9, 5), 4)
    D = np.tile(np.geomspace(1e9, 1e11, 4), 5)
    df = pd.DataFrame(
        {"N": N, "D": D, "loss": (1.8 + 400 / N**0.3 + 900 / D**0.3) * np.exp(rng.normal(0, 1e-3, 20))}
    )
    from analysis.laws.fitting import fit_law

    fit = fit_law(df, "test_formula_tied", bootstrap=0, prediction_intervals=False)  # what backtest calls
    assert fit.params["alpha"] == pytest.approx(0.3, abs=0.02)
