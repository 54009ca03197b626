"""`sweep.recipes: {name: [overrides]}` (issue "Which recipe wins, and by how much compute"): one
IsoFLOP ladder per recipe through the real sweeper (with tests/sweep_fake_app.py's fast trainer),
then `python -m analysis compare SWEEP` and the report's "Recipes" section on it.

The fake trainer's loss carries a learning-rate penalty around lr* = 3e-3 (N / 1e5)^-0.2, so the
recipe at lr 3e-3 beats the one at 3e-2 at every budget: the multiplier of `hot` over `base` is < 1.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pandas as pd
import pytest

from analysis.cli import main
from experiments.sweeps.recipes import RecipeError, recipe_label, recipe_overrides

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from test_sweep_fake import cmd, env, plan_of, run_dirs  # noqa: E402

RECIPES = 'sweep.recipes={base:["optim.lr=3e-3"],hot:["optim.lr=3e-2"]}'


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    sw = tmp_path_factory.mktemp("recipes") / "sw"
    argv = cmd(sw, "sweep.budgets=[1e10,3e10,1e11,3e11]", RECIPES, "fake.lr_penalty=0.05")
    argv[argv.index("sweep.budgets=[1e10,3e10]")] = argv.pop()  # the module's BUDGETS replaced
    p = subprocess.run(argv, env=env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
    return sw


def test_one_ladder_per_recipe(swept):
    dirs = run_dirs(swept)
    by = {r: [d for d in dirs if d.name.rsplit("_", 1)[0].endswith("_" + r)] for r in ("base", "hot")}
    assert len(by["base"]) == len(by["hot"]) > 0 and len(dirs) == 2 * len(by["base"])
    for r, ds in by.items():
        cfg = (ds[0] / ".hydra" / "config.yaml").read_text()
        assert f"recipe: {r}" in cfg and "recipes: null" in cfg
        assert ("lr: 0.003" if r == "base" else "lr: 0.03") in cfg
    labels = [x["label"] for x in plan_of(swept)]
    assert sum(x.endswith("_hot") for x in labels) == sum(x.endswith("_base") for x in labels)


def test_collect_never_merges_two_recipes_as_an_lr_sweep(swept, tmp_path, capsys):
    """The recipes differ only in optim.lr, but a recipe is an experiment, not a tuning of one: every
    run stays selected (before `sweep.recipe` was a science key, each rung kept one recipe's run)."""
    assert main(["collect", str(swept), "--out", str(tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr()
    assert "lowest of 2 values" not in out.err + out.out
    df = pd.read_csv(tmp_path / "runs.csv")
    assert df["selected"].all() and set(df["sweep.recipe"]) == {"base", "hot"}


def test_compare_and_the_report_on_the_sweep(swept, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    # the sweep directory read as `collect` reads it; the fit-free method keeps this fast (the
    # report below runs the default method)
    argv = ["compare", str(swept), "--method", "frontier_power_laws", "--bootstrap", "20", "--json", str(out)]
    assert main(argv) == 0
    j = json.loads(out.read_text())
    assert (j["ref"], j["other"]) == ("base", "hot")  # the order of sweep.recipes
    # the point says base is better; a winner is named only where the 90% interval excludes 1 (four
    # budgets and 20 resamples leave the power laws' intervals open here)
    assert all(b["multiplier"] < 1 for b in j["budgets"])
    for b in j["budgets"]:
        lo, hi = b["interval"]
        assert b["winner"] == (None if lo <= 1 <= hi else "base"), b
        assert b["verdict"].startswith("no clear winner at C=" if b["winner"] is None else "base wins at C=")
    rep = tmp_path / "rep"
    assert main(["report", str(swept), "--bootstrap", "20", "--out", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    assert "## Recipes: hot against base" in md and "| budget C | multiplier | 90% interval |" in md
    assert "fitted to the first recipe, base" in md
    assert (rep / "figures" / "recipes.png").stat().st_size > 10_000
    sec = json.loads((rep / "report.json").read_text())["sections"][-1]["recipes"]
    assert sec["ref"] == "base" and sec["others"][0]["other"] == "hot" and sec["method"] == "auto"
    assert sec["method_choice"]["chosen"] in ("no_difference", "auto_shrunk"), sec["method_choice"]
    assert all(b["multiplier"] <= 1 and b["winner"] in (None, "base") for b in sec["budgets"])
    capsys.readouterr()


@pytest.mark.parametrize(
    "recipes, msg",
    [
        ({"a": ["optim.lr=1e-3"]}, "compare two or more"),
        ([], "must map recipe names"),
        ({"a b": [], "c": []}, "recipe name 'a b'"),
        ({"a": "optim.lr=1", "b": []}, "list of overrides"),
        ({"a": ["sweep.recipe=x"], "b": []}, "sweep.recipe=x"),
    ],
)
def test_bad_recipes_name_the_key(recipes, msg):
    with pytest.raises(RecipeError, match="sweep.recipes") as e:
        recipe_overrides(recipes)
    assert msg in str(e.value)


def test_recipe_overrides_and_labels():
    (a, ovs_a), (b, _) = recipe_overrides({"wsd": ["optim.schedule=wsd"], "cos": None})
    assert (a, b) == ("wsd", "cos")
    assert ovs_a == ["optim.schedule=wsd", "++sweep.recipe=wsd", "sweep.recipes=null"]
    assert recipe_label("C1e11_L2-d16", "wsd") == "C1e11_L2-d16_wsd" and recipe_label("x", None) == "x"
