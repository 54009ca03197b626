"""`plan --budget C --unique-tokens U`: the compute-optimal run on a fixed corpus (Muennighoff et
al. 2023's data-constrained law), its penalty against unlimited data, the < 1%-epoch point, the
bigger-model-at-fewer-epochs alternative, the planner and report hooks, and one-line errors."""

import contextlib
import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main
from analysis.laws import repeated
from analysis.laws.allocation import ScalingLaw
from analysis.laws.registry import get_law
from analysis.planning.data_limit import (
    ALT_MAX_EPOCHS,
    from_json,
    paper_prior,
    plan_data_limit,
)
from analysis.planning.planner import DEFAULT_BATCH_TOKENS, plan
from models.base.errors import AnalysisError

CHINCHILLA = ScalingLaw.chinchilla_2022()
PRIOR = paper_prior(CHINCHILLA)
BATCH = DEFAULT_BATCH_TOKENS
HUGE_U = 1e30  # "infinitely many" unique tokens: no budget here repeats them


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def strict_loads(text: str):
    def bad(const):
        raise ValueError(f"non-strict JSON constant {const}")

    return json.loads(text, parse_constant=bad)


def test_unlimited_data_is_the_plain_chinchilla_plan():
    dl = plan_data_limit(1e24, HUGE_U, PRIOR, BATCH)
    n_star, d_star = CHINCHILLA.optimal(1e24)
    assert dl.optimum.n_params == pytest.approx(n_star, rel=1e-5)
    assert dl.optimum.tokens == pytest.approx(d_star, rel=1e-5)
    assert dl.optimum.loss == pytest.approx(CHINCHILLA.loss(n_star, d_star), rel=1e-12)
    assert abs(dl.penalty) < 1e-12 and dl.alternative is None
    assert dl.unlimited.n_params == pytest.approx(n_star, rel=1e-12)


def test_the_planner_with_unlimited_data_plans_as_without_a_limit():
    plain = plan(1e22, 64, "h100-sxm")
    limited = plan(1e22, 64, "h100-sxm", unique_tokens=HUGE_U)
    assert plain.data_limit is None and limited.data_limit is not None
    assert limited.best.shape == plain.best.shape and limited.best.layout == plain.best.layout
    assert limited.best.tokens == pytest.approx(plain.best.tokens, rel=1e-12)
    assert limited.best.loss == pytest.approx(plain.best.loss, rel=1e-9)
    assert limited.n_opt == pytest.approx(plain.n_opt, rel=1e-5)


def test_a_small_corpus_means_more_epochs_and_a_penalty():
    plans = [plan_data_limit(1e24, u, PRIOR, BATCH) for u in (2e13, 2e12, 2e11, 2e10)]
    epochs = [p.optimum.epochs for p in plans]
    penalties = [p.penalty for p in plans]
    assert epochs == sorted(epochs) and epochs[-1] > 10 * epochs[1]
    assert penalties[0] == pytest.approx(0, abs=1e-12)  # 2e13 tokens: 4T of them needed, none repeated
    assert all(b > a for a, b in zip(penalties[1:], penalties[2:])) and penalties[1] > 0
    for p in plans:  # the same optimum as the law module's own grid search, refined
        ref = repeated.allocate(p.law.params, 1e24, p.unique_tokens)
        assert p.optimum.n_params == pytest.approx(ref["N"], rel=5e-3)
        assert p.optimum.loss <= ref["loss"] * (1 + 1e-12)


def test_the_optimum_is_a_minimum_and_the_alternative_costs_loss():
    u = 2e11
    p = plan_data_limit(1e24, u, PRIOR, BATCH)
    k = CHINCHILLA.flops_per_param_token
    for f in (0.98, 1.02):
        n = p.optimum.n_params * f
        assert PRIOR.loss(n, 1e24 / (k * n), u) > p.optimum.loss
    assert p.optimum.epochs > ALT_MAX_EPOCHS and p.alt_epochs == ALT_MAX_EPOCHS
    alt = p.alternative
    assert alt.epochs == pytest.approx(ALT_MAX_EPOCHS) and alt.n_params > p.optimum.n_params
    assert alt.loss > p.optimum.loss
    assert [q.epochs for q in p.ladder] == pytest.approx([1, 2, 4, 8, 16, 32, 64])


def test_the_loss_is_the_registered_laws():
    law = get_law("data_constrained")
    vector = np.array([PRIOR.params[k] for k in law.param_names])
    N, D, U = np.array([1e9, 5e10, 1e11]), np.array([1e12, 3e12, 1e13]), np.array([2e11, 2e12, 2e12])
    np.testing.assert_allclose(PRIOR.loss(N, D, U), law.predict(vector, {"N": N, "D": D, "U": U}), rtol=1e-12)


def test_epochs_past_which_one_more_buys_under_one_percent():
    p = plan_data_limit(1e24, 2e12, PRIOR, BATCH)
    e = p.epochs_1pct
    assert e == pytest.approx(1 + repeated.PAPER_R_D * math.log(100))  # ~71.9 epochs at R_D* = 15.4
    u = 1e9

    def value(epochs):  # effective data D' of `epochs` passes over u tokens
        return float(PRIOR.effective_data(epochs * u, u))

    assert value(1) == pytest.approx(u, rel=1e-12)  # the first epoch is all fresh: worth u
    h = 1e-3  # the marginal value per epoch there is 1% of the first's
    assert (value(e + h) - value(e - h)) / (2 * h) == pytest.approx(0.01 * u, rel=1e-4)
    assert value(e + 1) - value(e) < 0.01 * u < value(e - 1) - value(e - 2)


def test_plan_cli_without_hardware_prints_the_papers_law(tmp_path):
    md = tmp_path / "plan.md"
    rc, out, err = run_cli(
        ["plan", "--budget", "1e24", "--unique-tokens", "2e12", "--json", "-", "--markdown", str(md)]
    )
    assert rc == 0, err
    j = strict_loads(out)
    dl = j["data_limit"]
    assert dl["law"]["fitted"] is False and dl["law"]["params"]["R_D"] == repeated.PAPER_R_D
    assert dl["law"]["params"]["R_N"] == repeated.PAPER_R_N
    assert "not a fit" in dl["law"]["source"] and "not a fit" in err
    for key in ("optimum", "unlimited", "penalty", "epochs_1pct", "alternative", "by_epochs"):
        assert key in dl
    assert dl["optimum"]["epochs"] == pytest.approx(dl["optimum"]["D"] / 2e12)
    assert dl["optimum"]["D"] * dl["optimum"]["N"] * 6 == pytest.approx(1e24)
    assert "### Data limit" in md.read_text()


def test_plan_cli_with_hardware_plans_the_data_limited_size():
    rc, out, err = run_cli(
        ["plan", "--budget", "1e22", "--unique-tokens", "3e10", "--hardware", "h100-sxm", "--gpus", "64"]
        + ["--json", "-"]
    )
    assert rc == 0, err
    j = strict_loads(out)
    dl = j["data_limit"]
    assert dl["optimum"]["epochs"] > ALT_MAX_EPOCHS
    assert j["n_opt"] == pytest.approx(dl["optimum"]["N"])
    best = j["best"]
    assert abs(math.log(best["n_params"] / dl["optimum"]["N"])) < 0.35
    assert best["loss"] == pytest.approx(float(PRIOR.loss(best["n_params"], best["tokens"], 3e10)))
    assert "on 3e+10 unique tokens" in err and "data limit" in err


def test_a_fitted_data_constrained_law_is_used(tmp_path):
    params = dict(E=1.9, A=600.0, B=1800.0, alpha=0.33, beta=0.35, R_D=9.0)
    path = tmp_path / "dc.json"
    path.write_text(json.dumps({"law": "data_constrained_d", "params": params, "param_names": list(params)}))
    law = from_json(path, ScalingLaw.from_json(path))
    assert law.fitted and law.r_d == 9.0 and law.r_n is None and "dc.json" in law.source
    p = plan_data_limit(1e21, 1e10, law, BATCH)
    assert p.epochs_1pct == pytest.approx(1 + 9.0 * math.log(100))
    rc, out, err = run_cli(
        ["plan", "--budget", "1e21", "--unique-tokens", "1e10", "--law", str(path), "--json", "-"]
    )
    assert rc == 0, err
    assert strict_loads(out)["data_limit"]["law"]["fitted"] is True and "not a fit" not in err
    chin = tmp_path / "chin.json"
    chin.write_text(
        json.dumps({"law": "chinchilla", "params": {k: params[k] for k in ("E", "A", "B", "alpha", "beta")}})
    )
    prior = from_json(chin, ScalingLaw.from_json(chin))
    assert not prior.fitted and prior.r_d == repeated.PAPER_R_D and prior.base.A == 600.0


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["plan", "--budget", "1e24", "--unique-tokens", "1e6"], "smaller than one batch"),
        (["plan", "--budget", "1e24", "--unique-tokens", "1e8", "--batch-tokens", "200000000"], "one batch"),
        (["plan", "--budget", "1e24", "--unique-tokens", "0"], "positive"),
        (["plan", "--budget", "1e24", "--unique-tokens", "nan"], "positive"),
        (["plan", "--unique-tokens", "2e12"], "--budget"),
        (["plan", "--budget", "1e24"], "--hardware is required"),
        (
            ["plan", "--budget", "1e24", "--unique-tokens", "2e12", "--hardware", "a100-80gb:8,h100-sxm:8"],
            "mixed",
        ),
        (["report", "nowhere", "--unique-tokens", "10"], "smaller than one batch"),
    ],
)
def test_bad_input_is_one_line(argv, expect):
    rc, _, err = run_cli(argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], err


def test_bad_unique_tokens_in_the_api():
    with pytest.raises(AnalysisError, match="--budget"):
        plan(None, 8, "h100", max_days=3, unique_tokens=2e12)
    with pytest.raises(AnalysisError, match="one batch"):
        plan_data_limit(1e24, 1e5, PRIOR, BATCH)


def _synthetic_runs(law_name: str, truth: dict) -> pd.DataFrame:
    """A small repeated-data ladder of `law_name` with 0.3% scatter (N x U x epochs)."""
    law = get_law(law_name)
    rows = [
        (n, u * e, u)
        for n in np.geomspace(2e7, 1e9, 5)
        for u in (4e9, 1e9, 2.5e8)
        for e in (0.5, 1, 2, 4, 8, 16)
    ]
    N, D, U = map(np.array, zip(*rows))
    loss = law.predict(np.array([truth[k] for k in law.param_names]), {"N": N, "D": D, "U": U})
    loss = loss * np.exp(np.random.default_rng(3).normal(0, 0.003, N.size))
    return pd.DataFrame({"N": N, "D": D, "unique_tokens": U, "loss": loss})


@pytest.mark.parametrize("law_name", ["chinchilla", "data_constrained_d"])
def test_report_planning_sections_take_unique_tokens(law_name):
    """The report's planning section under a data limit: a data-constrained fit is used as fitted; a
    Chinchilla fit gets the paper's decay constants on top (and says it is not a fit)."""
    from analysis.laws.fitting import fit_law
    from analysis.report.build import _plan_sections

    truth = dict(E=1.9, A=600.0, B=1800.0, alpha=0.33, beta=0.35, R_D=12.0)
    fit = fit_law(_synthetic_runs("data_constrained_d", truth), law_name, bootstrap=0)
    warn: list[str] = []
    (section,) = _plan_sections(fit, [1e21], "h100-sxm", 64, warn, None, unique_tokens=1e10)
    assert not warn
    dl = section["data_limit"]
    assert dl["law"]["law"] == ("data_constrained" if law_name == "chinchilla" else "data_constrained_d")
    assert dl["law"]["fitted"] is (law_name != "chinchilla")
    if law_name != "chinchilla":
        assert dl["law"]["params"]["R_D"] == pytest.approx(fit.params["R_D"])
    assert "### Data limit" in section["markdown"] and "unique tokens" in section["markdown"]
    assert dl["optimum"]["epochs"] > 1 and dl["penalty"] > 0
