"""Hyperparameter-aware fits (analysis.core.best_runs): an LR sweep per rung is fitted on the best
run per (budget, shape), said in one line, plotted per rung, and never merges runs that differ in
anything but `optim.*`.

The synthetic sweep: 3 budgets x 4 shapes, each rung trained at 3 learning rates. The final loss
is a known Chinchilla law plus an LR penalty that is zero at the rung's optimal LR and grows with
model size (bigger models are more LR-sensitive), so the best run of each rung lies exactly on
the law while the other runs lie above it by a size-dependent amount: a fit on all runs is
biased, a fit on the best runs recovers the law. One rung's grid stops at its optimum (the best
run is at the highest LR tried) and must draw the edge warning.
"""

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.core.best_runs import select_best_runs

TRUTH = dict(E=1.8, A=400.0, B=900.0, alpha=0.34, beta=0.30)
BUDGETS = (1e17, 1e18, 1e19)
SIZES = tuple(float(n) for n in np.geomspace(1e7, 3e8, 4).round())
LR_STEPS = (1 / 3, 1.0, 3.0)  # the grid around each rung's optimum
EDGE_RUNG = (1e18, SIZES[1])  # its grid is lr_opt x (1/9, 1/3, 1): the best is the highest lr


def law(N, D):
    return TRUTH["E"] + TRUTH["A"] / N ** TRUTH["alpha"] + TRUTH["B"] / D ** TRUTH["beta"]


def lr_opt(N):
    return 3e-3 * (N / 1e7) ** -0.5


def lr_penalty(N, lr):
    return 0.05 * (N / 1e7) ** 0.5 * math.log10(lr / lr_opt(N)) ** 2


def write_run(
    root,
    name,
    *,
    N,
    D,
    C,
    lr,
    loss,
    status="completed",
    seed=0,
    source="auto",
    n_layers=4,
    mesh_data=1,
    eval_every=50,
):
    """A run directory as the trainer writes it: summary.json and .hydra/config.yaml."""
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    summary = {
        "status": status,
        "n_params": N,
        "n_params_non_embedding": 0.9 * N,
        "tokens": D,
        "total_tokens": D,
        "flops": C,
        "final_eval_loss": loss if status == "completed" else None,
        "tokens_per_s": 1e4,
        "mfu": 0.3,
        "wall_time_s": 1.0,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    d_model = int(round((N / 1e4) ** 0.5)) * 8
    cfg = {
        "model": {"d_model": d_model, "n_layers": n_layers, "seq_len": 64},
        "train": {"batch_size": 16, "tokens": int(D), "seed": seed, "eval_every": eval_every},
        "optim": {"lr": float(lr), "schedule": "cosine", "warmup_tokens": int(0.05 * D)},
        "data": {"source": source},
        "sharding": {"data": mesh_data},
        "sweep": {"kind": "isoflop", "budget": float(C)},
    }
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return d


def lr_sweep(root):
    """36 runs: every (budget, shape) at three learning rates; returns {rung: best lr}."""
    best = {}
    for C in BUDGETS:
        for N in SIZES:
            D = C / (6 * N)
            steps = [s / 3 for s in LR_STEPS] if (C, N) == EDGE_RUNG else LR_STEPS
            for s in steps:
                lr = lr_opt(N) * s
                write_run(
                    root,
                    f"C{C:g}_N{N:g}_lr{lr:.3g}",
                    N=N,
                    D=D,
                    C=C,
                    lr=lr,
                    loss=law(N, D) + lr_penalty(N, lr),
                )
            best[(C, N)] = lr_opt(N)
    return best


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("hp") / "sweep"
    return root, lr_sweep(root)


def load(root, **kw):
    from analysis.core import runs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", runs.RunWarning)  # "did not complete": tested in test_runs.py
        return runs.with_roles(runs.load(root, cache_dir=False, **kw)[0])


def test_best_run_per_rung_is_selected_and_edge_warns(sweep):
    root, best = sweep
    sel = select_best_runs(load(root))
    assert sel.active and sel.varied == ("optim.lr",) and len(sel.groups) == 12
    assert sel.message == (
        "LR sweep: 36 runs in 12 groups differ only in optim.lr; fitting the best run per (budget, shape)"
    )
    chosen = sel.selected
    assert len(chosen) == 12 and set(chosen["hparam_group"]) == set(range(12))
    for _, r in chosen.iterrows():
        assert r["optim.lr"] == pytest.approx(best[(r["sweep.budget"], r["n_params"])], rel=1e-9)
        assert r["final_eval_loss"] == pytest.approx(law(r["N"], r["D"]), rel=1e-12)
    # exactly the edge rung warns, and says which end of the range
    assert len(sel.warnings) == 1
    assert sel.warnings[0].startswith(f"C=1e+18, N={EDGE_RUNG[1]:,.0f}") and "highest of 3" in sel.warnings[0]


def test_runs_differing_outside_optim_are_not_merged(tmp_path):
    """Same N, D and budget, different LR, but a different seed / data source / model field:
    separate experiments, so every run stays selected and nothing is called a sweep."""
    N, C = 1e8, 1e18
    rung = dict(N=N, D=C / (6 * N), C=C)
    write_run(tmp_path, "a", lr=1e-3, loss=3.0, **rung)
    write_run(tmp_path, "b", lr=3e-3, loss=2.9, seed=1, **rung)
    write_run(tmp_path, "c", lr=1e-2, loss=2.8, source="other", **rung)
    write_run(tmp_path, "d", lr=3e-2, loss=2.7, n_layers=5, **rung)
    sel = select_best_runs(load(tmp_path))
    assert not sel.active and sel.message == "" and sel.table["selected"].all()
    assert sel.table["hparam_group"].nunique() == 4
    # ...while runs that differ only in optim.* and in how they were run (mesh, eval cadence) merge
    write_run(tmp_path, "e", lr=3e-3, loss=2.95, mesh_data=8, eval_every=10, **rung)
    sel = select_best_runs(load(tmp_path))
    assert sel.active and len(sel.groups) == 1
    assert [r.rsplit("/", 1)[-1] for r in sel.groups[0].runs] == ["a", "e"]
    assert sel.groups[0].best.endswith("/e") and sel.n_unchanged == 3
    assert sel.table["selected"].sum() == 4  # b, c, d unchanged, e the best of {a, e}


def test_a_diverged_higher_lr_brackets_the_optimum(tmp_path):
    """The best completed run is below an LR that diverged: tried on both sides, no edge warning;
    without the diverged run the same best run is at the edge."""
    N, C = 1e8, 1e18
    rung = dict(N=N, D=C / (6 * N), C=C)
    write_run(tmp_path, "lr1e-3", lr=1e-3, loss=3.1, **rung)
    write_run(tmp_path, "lr3e-3", lr=3e-3, loss=3.0, **rung)
    write_run(tmp_path, "lr1e-2", lr=1e-2, loss=None, status="diverged", **rung)
    both = select_best_runs(load(tmp_path, include_unfinished=True))
    assert len(both.groups[0].runs) == 3 and both.groups[0].best.endswith("lr3e-3")
    assert both.warnings == [] and both.table["selected"].sum() == 1
    completed_only = select_best_runs(load(tmp_path))
    assert completed_only.groups[0].best.endswith("lr3e-3")
    assert len(completed_only.warnings) == 1 and "highest of 2" in completed_only.warnings[0]


@pytest.mark.slow
def test_collect_marks_and_fit_uses_only_the_best(sweep, tmp_path, capsys):
    """collect keeps every run and marks the best; fit on that table recovers the law from the 12
    best runs, and says so; `--all-runs` fits all 36 and is biased by the LR penalty."""
    from analysis.cli import main

    root, _ = sweep
    table = tmp_path / "runs.csv"
    assert main(["collect", str(root), "--out", str(table), "--no-cache"]) == 0
    out = capsys.readouterr()
    assert "LR sweep: 36 runs in 12 groups differ only in optim.lr" in out.out
    assert "highest of 3" in out.err
    df = pd.read_csv(table)
    assert list(df.columns[:6]) == ["N", "D", "C", "loss", "selected", "hparam_group"]
    assert len(df) == 36 and df["selected"].sum() == 12

    best_json, all_json = tmp_path / "best.json", tmp_path / "all.json"
    assert main(["fit", str(table), "--bootstrap", "0", "--json", str(best_json)]) == 0
    assert "fitting the best run per (budget, shape)" in capsys.readouterr().out
    assert main(["fit", str(table), "--bootstrap", "0", "--all-runs", "--json", str(all_json)]) == 0
    best, every = json.loads(best_json.read_text()), json.loads(all_json.read_text())
    assert best["n_points"] == 12 and every["n_points"] == 36
    assert best["hparam_selection"]["n_selected"] == 12 and "hparam_selection" not in every

    def worst(fit):
        return max(abs(fit["params"][k] / TRUTH[k] - 1) for k in ("E", "alpha", "beta"))

    assert worst(best) < 0.01, best["params"]
    assert worst(every) > 3 * worst(best), (every["params"], best["params"])


@pytest.mark.slow
def test_report_fits_the_best_runs_and_plots_lr_sensitivity(sweep, tmp_path):
    from analysis.report.build import build_report
    from analysis.report.render import headline

    root, _ = sweep
    rep = build_report(root, tmp_path / "rep", bootstrap=0)
    hp = rep["hparams"]
    assert hp["active"] and hp["n_selected"] == 12 and len(hp["groups"]) == 12
    assert rep["law"]["n_points"] == 12 and rep["n_completed"] == 36
    assert rep["law"]["params"]["alpha"] == pytest.approx(TRUTH["alpha"], rel=0.02)
    lines = headline(rep)
    assert lines[0].startswith("law: ")  # the answer first, then how it was selected
    assert any(line.startswith("LR sweep: 36 runs in 12 groups") for line in lines)
    assert sum("optimum may lie outside the swept range" in w for w in rep["warnings"]) == 1
    assert (
        "lr_sensitivity" in rep["figures"]
        and (tmp_path / "rep" / rep["figures"]["lr_sensitivity"]).stat().st_size > 10_000
    )
    assert sum(r["selected"] for r in rep["runs"]) == 12
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Hyperparameter sweep" in md and md.count("| yes |") == 1
    on_disk = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert on_disk["hparams"]["groups"][0]["values"]["optim.lr"]


def test_no_config_means_no_selection(tmp_path):
    """A plain CSV (no run configs) is fitted as it is: nothing grouped, every row selected."""
    df = pd.DataFrame({"N": [1e7, 2e7], "D": [1e9, 1e9], "loss": [3.0, 2.9]})
    sel = select_best_runs(df)
    assert not sel.active and sel.table["selected"].all() and sel.warnings == []


def test_lr_sweep_preset_plans_every_rung_at_each_lr(tmp_path):
    """conf/sweep/lr_isoflop.yaml: the isoflop plan crossed with the preset's optim.lr values
    (hydra.sweeper.params); an optim.lr list on the command line replaces them."""
    import os
    import pathlib
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(repo))

    def plan(sweep_dir, *extra):
        p = subprocess.run(
            [
                sys.executable,
                str(repo / "tests" / "sweep_fake_app.py"),
                "-m",
                "+sweep=lr_isoflop",
                "sweep.dry_run=true",
                "sweep.min_steps=1",
                f"hydra.sweep.dir={sweep_dir}",
                f"hydra.searchpath=[file://{repo}/conf]",
                *extra,
            ],
            env=env,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        runs = json.loads((sweep_dir / "sweep_plan.json").read_text())["runs"]
        lrs: dict[str, set[float]] = {}
        for r in runs:
            lr = [float(o.split("=", 1)[1]) for o in r["overrides"] if o.startswith("optim.lr=")]
            lrs.setdefault(r["label"], set()).update(lr)
        return runs, lrs

    runs, lrs = plan(tmp_path / "a")
    assert len(runs) == 27 and len(lrs) == 9  # 3 budgets x 3 shapes x 3 lrs
    assert all(v == {3e-3, 1e-2, 3e-2} for v in lrs.values())
    assert len({r["run_dir"] for r in runs}) == 27  # one directory per (rung, lr)
    runs, lrs = plan(tmp_path / "b", "optim.lr=2e-3,4e-3")
    assert len(runs) == 18 and all(v == {2e-3, 4e-3} for v in lrs.values())


def test_at_optimum_fits_each_rung_at_its_quadratic_vertex(tmp_path):
    """A grid offset from each rung's optimum (x0.4, x1.2, x3.6): the best run lies above the law by
    its LR penalty, which is exactly quadratic in ln lr, so the vertex's loss is the law's loss;
    a rung whose grid ends at its best keeps that run's loss (its vertex is an extrapolation)."""
    rungs = [(C, N) for C in BUDGETS for N in SIZES[:2]]
    for C, N in rungs:
        D = C / (6 * N)
        steps = (0.1, 0.3, 0.9) if (C, N) == EDGE_RUNG else (0.4, 1.2, 3.6)
        for s in steps:
            lr = lr_opt(N) * s
            write_run(
                tmp_path,
                f"C{C:g}_N{N:g}_lr{lr:.3g}",
                N=N,
                D=D,
                C=C,
                lr=lr,
                loss=law(N, D) + lr_penalty(N, lr),
            )
    sel = select_best_runs(load(tmp_path))
    rows, records = sel.at_optimum(["final_eval_loss"])
    assert len(rows) == len(rungs) == len(records)
    for _, r in rows.iterrows():
        truth, best = law(r["N"], r["D"]), sel.table.loc[sel.table["hparam_group"] == r["hparam_group"]]
        best_loss = best["final_eval_loss"].min()
        if (r["sweep.budget"], r["n_params"]) == EDGE_RUNG:
            assert r["final_eval_loss"] == best_loss  # kept
        else:
            assert best_loss > truth + 1e-4  # the grid misses the optimum...
            assert r["final_eval_loss"] == pytest.approx(truth, rel=1e-9)  # ...the vertex does not
    kept = [rec for rec in records if rec["loss_at_optimum"] is None]
    assert len(kept) == 1 and "edge" in kept[0]["kept"]
    moved = [rec for rec in records if rec["optimum"] is not None]
    for rec in moved:
        N = float(rec["label"].split("N=")[1].replace(",", ""))
        assert rec["optimum"] == pytest.approx(lr_opt(N), rel=1e-6)
