"""The report's "Downstream tasks" section (analysis/report/downstream.py) on a fake sweep whose
runs carry task metrics from a known chain: the Chinchilla law for the eval loss, a tied law for
each task's loss and a sigmoid from task loss to accuracy. The report predicts every task at the
fitted law's compute-optimal (N*, D*) for the requested budget and for 10x the largest swept
budget, with 90% intervals, in report.json, report.md, report.html and the headline; a task with
too few model sizes becomes a one-line warning, not a failed report."""

import json
import math

import numpy as np
import pytest
from test_analysis_cli import strict_loads

SIZES = (1.2e4, 2.5e4, 5e4, 1e5, 2e5)
BUDGETS = (1e11, 3e11, 1e12)
K = 6.0  # C = 6 N D
CHECKPOINTS = (0.25, 0.5, 0.75, 1.0)  # fractions of a run's tokens at which it evaluates
TASKS = {  # name: (chance, loss params E, A, B, alpha (tied); sigmoid ceiling, k, loss0)
    "pick4": (0.25, (1.0, 30.0, 60.0, 0.3), (0.9, 2.5, 2.6)),
    "complete": (0.0, (0.8, 25.0, 50.0, 0.3), (0.8, 3.0, 2.0)),
}
TASKS["few"] = TASKS["pick4"]  # measured by the two largest sizes only


def eval_loss(n, d):
    return 1.5 + 60.0 / n**0.34 + 120.0 / d**0.30


def task_truth(task, n, d):
    """(task loss, accuracy) of the known chain."""
    chance, (e, a, b, al), (ceil, k, l0) = TASKS[task]
    loss = e + a / n**al + b / d**al
    return loss, chance + (ceil - chance) / (1.0 + np.exp(-k * (l0 - loss)))


def _write_run(run_dir, n, c, rng, tasks):
    """summary.json (with task_metrics) and metrics.jsonl (an eval record per checkpoint)."""
    run_dir.mkdir(parents=True)
    d_final = c / (K * n)
    lines, metrics = [], {}
    for i, f in enumerate(CHECKPOINTS):
        d = f * d_final
        rec = {
            "step": i + 1,
            "tokens": d,
            "flops": K * n * d,
            "loss": eval_loss(n, d),
            "eval_loss": eval_loss(n, d),
        }
        for t in tasks:
            loss, acc = task_truth(t, n, d)
            acc = float(np.clip(acc + rng.normal(0, 0.01), 0, 1))
            rec[f"task/{t}/loss"], rec[f"task/{t}/accuracy"] = loss, acc
            metrics[t] = {"loss": loss, "accuracy": acc, "chance": TASKS[t][0]}
        lines.append(json.dumps(rec))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "n_params": n,
                "tokens": d_final,
                "flops": c,
                "final_eval_loss": eval_loss(n, d_final),
                "final_train_loss": eval_loss(n, d_final),
                "tokens_per_s": 1e5,
                "mfu": 0.1,
                "wall_time_s": 1.0,
                "task_metrics": metrics,
            }
        )
    )


@pytest.fixture(scope="module")
def task_sweep(tmp_path_factory):
    """3 budgets x 5 sizes measuring pick4 and complete; `few` is measured only by the two largest."""
    sw = tmp_path_factory.mktemp("ds") / "sweep"
    rng = np.random.default_rng(0)
    for c in BUDGETS:
        for n in SIZES:
            tasks = ["pick4", "complete"] + (["few"] if n >= SIZES[-2] else [])
            _write_run(sw / f"C{c:.0e}_N{int(n)}", n, c, rng, tasks)
    return sw


@pytest.mark.slow  # about 35 s on 2 cores: the law, held-out and downstream fits compile in-process
def test_report_predicts_tasks_at_the_optimal_allocation(task_sweep, tmp_path):
    from analysis.report.build import build_report
    from analysis.report.render import headline
    from models.base.jaxcache import enable_compile_cache

    # the session's cache (tests/conftest.py): the CLI tests compiled these fits already
    enable_compile_cache()
    out = tmp_path / "rep"
    rep = build_report(task_sweep, out, budgets=[3e12], bootstrap=0)
    ds = strict_loads((out / "report.json").read_text())["downstream"]
    assert math.isclose(ds["ten_x_budget"], 1e13) and ds["targets"][0]["C"] == 3e12
    assert [t["C"] for t in ds["targets"]] == [3e12, ds["ten_x_budget"]]
    alloc = {r["C"]: r for r in rep["law"]["allocation"]["budgets"]}
    assert math.isclose(ds["targets"][0]["N"], alloc[3e12]["N_opt"], rel_tol=1e-6)
    assert math.isclose(ds["targets"][0]["D"], alloc[3e12]["D_opt"], rel_tol=1e-6)
    assert set(ds["tasks"]) == {"pick4", "complete", "few"}
    outside = 0
    for task in ("pick4", "complete"):
        t = ds["tasks"][task]
        assert t["method"] in ("average", "chain", "direct") and t["chance"] == TASKS[task][0]
        assert t["observed"]["n_runs"] == 15 and t["observed"]["n_points"] == 15 * len(CHECKPOINTS)
        preds = [p for p in ds["predictions"] if p["task"] == task]
        assert [p["C"] for p in preds] == [3e12, ds["ten_x_budget"]]
        for p in preds:
            lo, hi = p["accuracy_interval"]
            _, truth = task_truth(task, p["N"], p["D"])
            assert 0 <= lo <= p["accuracy"] <= hi <= 1 and hi - lo > 0.005
            assert abs(p["accuracy"] - truth) < 0.05 and lo - 0.005 <= truth <= hi + 0.005, (task, p, truth)
            outside += not lo <= truth <= hi  # 90% intervals: one of the four may miss, by < 0.5 points
            assert p["accuracy"] > max(t["observed"]["accuracy_range"])  # beyond the ladder, above its best
    assert outside <= 1, f"{outside} of 4 truths outside their 90% intervals"
    # a task measured at two sizes cannot be fitted: a warning, the other tasks still predicted
    assert "error" in ds["tasks"]["few"] and not any(p["task"] == "few" for p in ds["predictions"])
    assert any(w.startswith("downstream task few:") and "distinct model size" in w for w in rep["warnings"])

    lines = headline(rep)
    ten_x = [ln for ln in lines if ln.startswith("downstream ")]
    assert len(ten_x) == 2 and all(
        "at C = 1e+13 FLOPs" in ln and "90% prediction interval" in ln for ln in ten_x
    )
    assert any("pick4" in ln and "chance 0.25" in ln for ln in ten_x)
    md = (out / "report.md").read_text()
    assert (
        "## Downstream tasks" in md
        and md.count("| pick4 | 3e+12 |") == 1
        and md.count("| complete | 1e+13 |") == 1
    )
    p = next(p for p in ds["predictions"] if p["task"] == "pick4" and p["C"] == ds["ten_x_budget"])
    assert f"[{p['accuracy_interval'][0]:.3f}, {p['accuracy_interval'][1]:.3f}]" in md
    assert "- warning: downstream task few:" in md
    html = (out / "report.html").read_text()
    assert "<h2>Downstream tasks</h2>" in html and "<td>pick4</td>" in html
    assert "downstream" in rep["figures"] and html.count("<img") + html.count('class="ifig"') == len(
        rep["figures"]
    )
    # the first screen's predictions table has each task's accuracy at 10x the largest budget
    head = html[: html.index("<figure")]
    assert f"<td>pick4 accuracy</td>\n<td>{ds['ten_x_budget']:.3g}".replace("e+", "e") in head


def test_no_task_metrics_no_section_and_no_law_is_a_warning(task_sweep):
    """Runs without tasks give no section; without a fitted law there is no (N*, D*): one warning."""
    from analysis.report.build import collect
    from analysis.report.downstream import downstream_section, target_budgets

    _, done, curves, _ = collect(task_sweep)
    warn: list[str] = []
    plain = done.drop(columns=[c for c in done.columns if c.startswith(("task", "accuracy/", "chance/"))])
    assert downstream_section(plain, None, None, [1e12], [1e11], 0, 0, warn) is None and warn == []
    sec = downstream_section(done, curves, None, [1e12], [1e11, 1e12], 0, 0, warn)
    assert sec["predictions"] == [] and len(warn) == 1 and "no compute-optimal (N*, D*)" in warn[0]
    assert target_budgets([1e12, 3e12], [1e11]) == ([1e12, 3e12], 1e12)
    assert target_budgets([], [4e11]) == ([4e12], 4e12)
    json.dumps(sec, allow_nan=False)


def test_downstream_render_headline_tables_and_notes(tmp_path):
    """Markdown, HTML and headline of a section (no fits): the 10x budget's predictions in the
    headline, one table row per prediction, each distinct warning once, failures listed."""
    from analysis.report.render import _downstream_markdown, downstream_headline, markdown_to_html

    near = "near chance: the ladder's largest runs sit +0.010 from chance"
    extra = "step 2 extrapolated: predicted task loss 2 is 0.5 below the ladder's lowest"
    ds = {
        "ten_x_budget": 4e12,
        "settings": {"bootstrap": 200, "seed": 0, "interval_level": 0.9},
        "errors": [
            "downstream task few: task 'few' has 2 distinct model size(s) N; fit-task needs at least 3"
        ],
        "tasks": {
            "pick4": {
                "observed": {
                    "n_runs": 12,
                    "n_points": 40,
                    "accuracy_range": [0.26, 0.41],
                    "largest_run": {"accuracy": 0.39},
                    "chance": 0.25,
                },
                "chance": 0.25,
                "method": "average",
                "heldout_mae": 0.031,
                "warnings": [near],
            },
            "few": {
                "observed": {
                    "n_runs": 4,
                    "n_points": 4,
                    "accuracy_range": [0.3, 0.35],
                    "largest_run": {"accuracy": 0.35},
                    "chance": None,
                },
                "chance": None,
                "error": "2 sizes",
            },
        },
        "predictions": [
            {
                "task": "pick4",
                "C": c,
                "N": 1e6,
                "D": 2e7,
                "task_loss": 2.5,
                "accuracy": a,
                "accuracy_interval": [a - 0.1, a + 0.12],
                "method": "average",
                "warnings": w,
            }
            for c, a, w in ((1e13, 0.52, [near, extra]), (4e12, 0.47, [near]))
        ],
    }
    lines = downstream_headline({"downstream": ds})
    assert lines == [
        "downstream pick4 at C = 4e+12 FLOPs (10x the largest budget; N* = 1e+06, D* = 2e+07): "
        "accuracy 0.470 [0.370, 0.590] (90% prediction interval; chance 0.25; average); "
        "warnings: near chance"
    ]
    md = "\n".join(_downstream_markdown(ds))
    assert "| pick4 | 12 | 40 | 0.260 – 0.410 | 0.390 | 0.25 | average | 3.10 |" in md
    assert "| few | 4 | 4 | 0.300 – 0.350 | 0.350 | – | not fitted | – |" in md
    assert (
        "| pick4 | 1e+13 | 1,000,000 | 20,000,000 | 2.5 | 0.520 | [0.420, 0.640] | average | "
        "near chance, step 2 extrapolated |" in md
    )
    assert md.count("- warning: pick4: near chance") == 1 and md.count("- warning: pick4: step 2") == 1
    assert "- warning: downstream task few: task 'few' has 2 distinct" in md
    html = markdown_to_html(md, tmp_path)
    assert html.count("<td>pick4</td>") == 3 and html.count('<div class="warn">') == 3
    assert '<div class="warn">pick4: near chance: the ladder' in html and "<li>" not in html
    assert downstream_headline({"downstream": dict(ds, predictions=[])}) == [
        "downstream tasks: no prediction (see warnings)"
    ]
    assert downstream_headline({"downstream": None}) == [] and downstream_headline({}) == []
