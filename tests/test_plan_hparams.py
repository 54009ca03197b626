"""Plans carry the recipe: `plan --hparams HP.json` states the learning rate, batch (sequences and
tokens), warm-up and schedule of the recommended run with the laws' 90% intervals and emits
`optim.lr=` / `train.batch_size=`; without --hparams the plan says the recipe is untuned; a bad
HP.json is one line; the report gains a "Hyperparameter law" section and the planning recipe.

The laws come from `fit-hparams` on a small synthetic LR x batch grid with a known optimum law
(lr* = 0.5 N^-0.35 D^0.05, B* = 0.3 D^0.33 sequences), like ../shared/checks/hparams.sh.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis.cli import main as analysis_main
from analysis.hparams import load_hparams
from analysis.planning.planner import DEFAULT_BATCH_TOKENS, plan
from analysis.planning.recipe import BatchSource, load_hparam_set
from models.base.errors import AnalysisError

REPO = pathlib.Path(__file__).resolve().parents[1]
PLAN = ["plan", "--budget", "1e21", "--hardware", "h100-sxm", "--gpus", "64"]
SEQ_LEN = 2048  # plan's default --seq-len


def _grid(batch: bool) -> pd.DataFrame:
    """5 sizes x 3 token counts, 7 learning rates (x 5 batches), quadratic penalty in the logs."""
    rng, rows = np.random.default_rng(0), []
    for N in np.geomspace(1e7, 1e9, 5):
        for D in np.geomspace(20 * N, 80 * N, 3):
            lr_best, b_best = 0.5 * N**-0.35 * D**0.05, 0.3 * D**0.33
            base = 1.8 + 480 / N**0.34 + 2100 / D**0.37
            for lr in np.geomspace(lr_best / 8, lr_best * 8, 7) * np.exp(rng.uniform(-0.3, 0.3)):
                for B in np.geomspace(b_best / 4, b_best * 4, 5) if batch else [None]:
                    pen = 0.02 * np.log(lr / lr_best) ** 2
                    row = {"N": N, "D": D, "optim.lr": lr}
                    if batch:
                        pen += 0.01 * np.log(B / b_best) ** 2
                        row["train.batch_size"] = int(round(B))
                    rows.append(dict(row, loss=base * (1 + pen) * np.exp(rng.normal(0, 0.002))))
    return pd.DataFrame(rows)


def _run(argv: list[str]) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = analysis_main([str(a) for a in argv])
    return rc, out.getvalue().splitlines(), err.getvalue()


@pytest.fixture(scope="module")
def laws(tmp_path_factory) -> dict[str, pathlib.Path]:
    """{"both": HP.json with lr and batch laws, "lr": HP.json with the lr law only}."""
    d = tmp_path_factory.mktemp("hp")
    out = {}
    for name, batch in (("both", True), ("lr", False)):
        _grid(batch).to_csv(d / f"{name}.csv", index=False)
        # the law itself (the plan carries whichever law it is given; the folds' choice is tested in
        # test_fit_hparams_choice.py)
        argv = ["fit-hparams", d / f"{name}.csv", "--method", "fit_hparams", "--json", d / f"{name}.json"]
        rc, lines, err = _run(argv)
        assert rc == 0, err
        out[name] = d / f"{name}.json"
    return out


@pytest.fixture(scope="module")
def tuned_plan(laws, tmp_path_factory):
    """(plan JSON, printed lines, markdown) of `plan --hparams both.json --emit overrides`."""
    d = tmp_path_factory.mktemp("plan")
    rc, lines, err = _run(
        [
            *PLAN,
            "--hparams",
            laws["both"],
            "--emit",
            "overrides",
            "--json",
            d / "p.json",
            "--markdown",
            d / "p.md",
        ]
    )
    assert rc == 0, err
    return json.loads((d / "p.json").read_text()), lines, (d / "p.md").read_text()


def _override(ov: list[str], key: str) -> str:
    hits = [o.split("=", 1)[1] for o in ov if o.startswith(key + "=")]
    assert len(hits) == 1, (key, ov)
    return hits[0]


def test_recipe_states_lr_and_batch_with_the_laws_intervals(tuned_plan, laws):
    data, lines, md = tuned_plan
    r, best = data["recipe"], data["best"]
    assert r["tuned"] is True and r["source"] == str(laws["both"])
    # the lr is the law's at the recommended run's (N, D), inside its interval
    hp = load_hparams(laws["both"])
    v, lo, hi = hp.predict("optim.lr", best["n_params"], best["tokens"])
    assert r["lr"]["value"] == pytest.approx(v, rel=1e-9) and r["lr"]["interval"] == pytest.approx([lo, hi])
    assert lo < v < hi and hi / lo < 2
    # the batch is the layout's global batch, inside the batch law's 90% interval
    b = r["batch_size"]
    assert b["source"] == BatchSource.LAW.value and b["sequences"] == best["layout"]["global_batch"]
    assert b["tokens"] == b["sequences"] * SEQ_LEN and b["interval"][0] <= b["sequences"] <= b["interval"][1]
    bv, blo, bhi = hp.predict("train.batch_size", best["n_params"], best["tokens"])
    assert b["law_value"] == pytest.approx(bv, rel=1e-9) and b["interval"] == pytest.approx([blo, bhi])
    # warm-up and schedule: the trainer's defaults
    assert r["schedule"] == "cosine" and r["warmup_tokens"] == round(0.05 * best["tokens"])
    assert "OptimConfig" in r["schedule_source"]
    text = "\n".join(lines)
    assert "recipe (tuned" in text and f"lr {float(r['lr']['value']):.4g}" in text
    assert f"batch {b['sequences']} sequences" in text and "warm-up" in text and "untuned" not in text
    assert "Recipe (tuned" in md and "| learning rate (optim.lr) |" in md and "| batch, tokens |" in md


def test_emitted_overrides_carry_lr_and_a_dp_multiple_batch(tuned_plan):
    data, lines, _ = tuned_plan
    ov, trainer = data["best"]["overrides"], data["best"]["trainer"]
    assert float(_override(ov, "optim.lr")) == pytest.approx(data["recipe"]["lr"]["value"], rel=1e-3)
    batch = int(_override(ov, "train.batch_size"))
    dp = trainer["layout"]["mesh"]["data"] * trainer["layout"]["mesh"]["fsdp"]
    assert batch > 0 and batch % dp == 0 and batch == trainer["layout"]["global_batch"]
    lo, hi = data["recipe"]["batch_size"]["interval"]
    assert lo <= batch <= hi  # the trainer's layout was searched inside the law's interval too
    command = [ln for ln in lines if ln.startswith("python -m experiments.train ")]
    assert command and command[-1].split()[3:] == ov


def test_batch_from_the_plan_without_a_batch_law_or_with_explicit_batch_tokens(laws):
    lr_only = plan(1e21, 64, "h100-sxm", hparams=load_hparam_set(laws["lr"]))
    r = lr_only.recipe.as_dict()
    assert r["tuned"] and r["lr"]["value"] and r["batch_size"]["source"] == "plan"
    assert r["batch_size"]["interval"] is None and "no train.batch_size" in r["batch_size"]["note"]
    assert lr_only.best.layout.global_batch * SEQ_LEN == pytest.approx(DEFAULT_BATCH_TOKENS, rel=0.5)
    flag = plan(1e21, 64, "h100-sxm", batch_tokens=2**23, hparams=load_hparam_set(laws["both"]))
    assert flag.recipe.batch_source == BatchSource.FLAG and flag.recipe.batch is not None
    assert flag.best.layout.global_batch * SEQ_LEN == pytest.approx(2**23, rel=0.5)
    law = plan(1e21, 64, "h100-sxm", hparams=load_hparam_set(laws["both"]))
    assert law.best.layout.global_batch != flag.best.layout.global_batch  # the law moved the batch


def test_time_limited_plan_is_tuned_at_its_own_size(laws):
    p = plan(None, 8, "h100-sxm", max_days=3, hparams=load_hparam_set(laws["both"]))
    r = p.recipe
    assert r.n_params == p.best.shape.n_params and r.tokens == p.best.tokens
    assert r.batch.lo <= p.best.layout.global_batch <= r.batch.hi
    assert any(n.startswith("optim.lr law extrapolated") for n in r.notes)  # N > 1e9, the largest rung


def test_untuned_plan_says_so_in_one_line_and_emits_no_lr(tmp_path):
    rc, lines, err = _run([*PLAN, "--emit", "overrides", "--json", tmp_path / "p.json"])
    assert rc == 0, err
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["recipe"]["tuned"] is False and "untuned" in data["recipe"]["note"]
    assert set(data["recipe"]) == {"tuned", "note"}
    assert sum(ln.startswith("recipe untuned: ") for ln in lines) == 1 and not any(
        "recipe (" in ln for ln in lines
    )
    assert not any(o.startswith("optim.lr=") for o in data["best"]["overrides"])
    assert any(o.startswith("train.batch_size=") for o in data["best"]["overrides"])


@pytest.mark.parametrize(
    "content, msg",
    [
        (None, "not found"),
        ("{not json", "cannot read"),
        ('{"kind": "fit"}', "not a fit-hparams result"),
        ('{"kind": "hparams", "laws": {"optim.lr": {"form": "N"}}}', "malformed law entry"),
    ],
)
def test_bad_hparams_file_is_one_line(tmp_path, content, msg):
    path = tmp_path / "HP.json"
    if content is not None:
        path.write_text(content)
    rc, lines, err = _run([*PLAN, "--hparams", path])
    assert rc == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0 and err.startswith("error: ") and msg in err


def _env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    return dict(e, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory) -> pathlib.Path:
    """A fake isoFLOP sweep (tests/sweep_fake_app.py): 2 budgets x 4 shapes, seconds to run."""
    sw = tmp_path_factory.mktemp("sw") / "sweep"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[2e10,6e10]",
            "sweep.min_steps=10",
            "train.eval_every=1000",
            "train.ckpt_every=100000",
            "sweep.ladder.depths=[1,2,3,4]",
            f"hydra.sweep.dir={sw}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return sw


def test_report_shows_the_hyperparameter_law_and_the_plans_recipe(small_sweep, laws, tmp_path):
    from analysis.report.build import build_report
    from analysis.report.render import headline

    out = tmp_path / "rep"
    rep = build_report(
        small_sweep, out, budgets=[1e21], bootstrap=20, hardware="a100-80gb", gpus=64, hparams=laws["both"]
    )
    sec = rep["hparams"]["law"]
    assert sec["source"] == str(laws["both"]) and sec["found"] == "flag"
    assert set(sec["params"]) == {"optim.lr", "train.batch_size"}
    lr = sec["params"]["optim.lr"]
    assert lr["expression"].startswith("lr* = ") and lr["holdout"]["mean_abs_dlog10"] < 0.1
    assert lr["penalty"]["k"] and len(lr["rungs"]) == 15 and all(r["law"] > 0 for r in lr["rungs"])
    assert {r["param"] for r in sec["at_budgets"]} == {"optim.lr", "train.batch_size"}
    assert {"hparam_penalty", "hparam_law"} <= set(rep["figures"])
    assert all((out / rep["figures"][k]).is_file() for k in ("hparam_penalty", "hparam_law"))
    md = (out / "report.md").read_text()
    section = md.split("## Hyperparameter law", 1)[1].split("\n## ", 1)[0]
    assert "| optim.lr | lr* = " in section and "(figures/hparam_penalty.png)" in section
    assert "Recipe (tuned" in md.split("## Planning", 1)[1]
    assert rep["sections"][0]["recipe"]["tuned"] and rep["sections"][0]["recipe"]["lr"]["value"] > 0
    html = (out / "report.html").read_text()
    figures = html.count("<img") + html.count('class="ifig"')  # PNGs and interactive figures
    assert "<h2>Hyperparameter law</h2>" in html and figures == len(rep["figures"])
    assert any(re.match(r"hyperparameter law lr\* = .*held-out", ln) for ln in headline(rep))
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["hparams"]["law"]["params"]["optim.lr"]["form"] == lr["form"]


def test_report_finds_hparams_beside_the_sweep_and_says_untuned_without(small_sweep, laws, tmp_path):
    from analysis.report.build import build_report
    from analysis.report.hparams import load_laws

    sw = tmp_path / "sweep"
    shutil.copytree(small_sweep, sw)
    rep = build_report(sw, tmp_path / "plain", budgets=[1e21], bootstrap=0, hardware="a100-80gb", gpus=64)
    assert "law" not in (rep["hparams"] or {}) and "hparam_penalty" not in rep["figures"]
    assert rep["sections"][0]["recipe"] == {"tuned": False, "note": rep["sections"][0]["recipe"]["note"]}
    assert "Recipe untuned" in (tmp_path / "plain" / "report.md").read_text()
    (sw / "hparams.json").write_text(laws["lr"].read_text())
    rep = build_report(sw, tmp_path / "auto", bootstrap=0)
    assert rep["hparams"]["law"]["found"] == "auto" and list(rep["hparams"]["law"]["params"]) == ["optim.lr"]
    (sw / "hparams.json").write_text("{}")  # a bad file found automatically is a warning ...
    warn: list[str] = []
    assert load_laws(sw, None, warn) == (None, "auto") and "not used" in warn[0]
    with pytest.raises(AnalysisError, match="not a fit-hparams result"):  # ... given, an error
        build_report(sw, tmp_path / "bad", bootstrap=0, hparams=sw / "hparams.json")


def test_layouts_keep_the_global_batch_inside_the_batch_band():
    from analysis.planning.planner import layouts_for, shape_for
    from sharding.costmodel import load_hardware

    shape, hw = shape_for(20, 2560, SEQ_LEN, 32000), load_hardware("h100-sxm")
    target = 700  # sequences: dp 64 x micro-batch 8 rounds it to 512
    free = {lo.global_batch for lo in layouts_for(shape, 64, hw, target * SEQ_LEN)}
    banded = {lo.global_batch for lo in layouts_for(shape, 64, hw, target * SEQ_LEN, batch_band=(600, 800))}
    assert 512 in free and banded and all(600 <= b <= 800 for b in banded)
