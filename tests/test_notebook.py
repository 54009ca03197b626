"""notebooks/explore.ipynb runs top to bottom on the public data and the zoo tables (so it never
rots), and what it shows is right: every section's fit, prediction, backtest and forecast."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "explore.ipynb"
# Appended by the test (not part of the notebook): the live objects of every section, as JSON.
PROBE = """
import json
def _pred(p):
    return {"mean": float(p.mean), "lo": float(p.lo), "hi": float(p.hi), "level": p.level}
def _rows(b):
    return [{"method": str(r["method"]), "default": r["default"], "baseline": r["baseline"],
             "error": r[b.error_key()]} for r in b.rows()]
print("PROBE " + json.dumps({
    "families": sorted({str(m.family) for m in analysis.methods()}),
    "point": {"law": str(law.law), **_pred(chinchilla_70b)},
    "budget": _rows(budget),
    "plan_loss": plan.best_loss()["loss"],
    "curve": [{"schedule": r["schedule"], "error_pct": r["mean |error| %"]} for r in held_out],
    "lr": _pred(lr_opt),
    "lr_backtest": _rows(lr_backtest),
    "multiplier": _pred(multiplier),
    "forecast": {m: {k: float(v) for k, v in f.items()} for m, f in forecasts.items()},
}, default=float))
"""


@pytest.mark.slow
def test_explore_notebook_executes(shared_data, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("SCALELAB_SHARED_DATA", str(shared_data))
    monkeypatch.setenv("SCALELAB_BOOTSTRAP", "50")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    start = time.perf_counter()
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    print(f"explore.ipynb: {len(nb.cells) - 1} cells in {time.perf_counter() - start:.0f} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in outputs)
    facts = json.loads(next(l for l in text.splitlines() if l.startswith("PROBE "))[6:])

    # what each section shows: the registry, the summaries, the predictions and one figure per fit
    assert set(facts["families"]) >= {"point", "curve", "hparam", "compare", "forecast"}
    assert "law chinchilla" in text and "law mpl" in text and "lr* =" in text
    assert "compare: REF" in text and "expected best loss at 1e+24 FLOPs" in text
    assert text.count("Prediction(") >= 3 and "; 90%)" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4  # point, curve, LR, compare

    # point law: auto keeps Chinchilla's form; the 70B prediction sits inside its finite interval
    p = facts["point"]
    assert p["law"] == "chinchilla" and p["level"] == 0.9
    assert p["lo"] < p["mean"] < p["hi"] and 1.8 < p["mean"] < 2.4 and p["hi"] - p["lo"] < 1
    assert 1.5 < facts["plan_loss"] < 2.5

    # the backtests show the protocol's default against its baseline, both scored
    for name in ("budget", "lr_backtest"):
        rows = facts[name]
        assert [r["default"] for r in rows].count(True) == 1, rows
        assert [r["baseline"] for r in rows].count(True) == 1, rows
        assert all(r["error"] is not None and 0 <= r["error"] < 1 for r in rows), rows
    assert next(r for r in facts["budget"] if r["default"])["method"] == "chinchilla"

    # the multi-power law predicts Luo et al.'s six held-out schedules within 0.5% (they report 0.11%)
    assert len(facts["curve"]) == 6
    assert all(r["error_pct"] < 0.5 for r in facts["curve"]), facts["curve"]

    # LR optimum and the compute multiplier: each inside its interval
    for key in ("lr", "multiplier"):
        q = facts[key]
        assert 0 < q["lo"] <= q["mean"] <= q["hi"], (key, q)

    # the forecast section scores both methods on the 36 held-out runs' true final losses
    fc = facts["forecast"]
    assert set(fc) == {"transfer", "baseline_lowest_at_cut"}
    for f in fc.values():
        assert f["runs"] == 36 and 0 < f["mean |error| %"] < 20 and 0 <= f["coverage_90"] <= 1


def test_importing_analysis_leaves_the_matplotlib_backend_alone():
    """A notebook user's backend survives `import analysis` and every analysis module."""
    code = (
        "import matplotlib, pkgutil, importlib; matplotlib.use('svg'); import analysis\n"
        "for m in pkgutil.walk_packages(analysis.__path__, 'analysis.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        "from analysis import build_report, fit, load, plan\n"
        "print(matplotlib.get_backend())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "svg"


def _runs():
    import numpy as np
    import pandas as pd

    N = np.repeat([1e5, 2e5, 4e5], 2)
    return pd.DataFrame(
        {
            "n_params": N,
            "tokens": 1e7 / N * 1e3,
            "flops": np.tile([6e12, 1.2e13], 3),
            "final_eval_loss": 3 + 1e2 / N**0.3,
            "budget": np.tile([6e12, 1.2e13], 3),
            "status": "completed",
            "tokens_per_s": 1e4,
            "mfu": 0.3,
        }
    )


def test_figure_functions_return_figures():
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.figure import Figure

    from analysis.report import figures

    done = _runs()
    before = plt.get_fignums()
    fig = figures.loss_vs_compute(done, None)
    assert isinstance(fig, Figure) and fig.axes[0].get_xlabel().startswith("training compute")
    assert isinstance(figures.throughput(done), Figure)
    assert figures.loss_curves(done, pd.DataFrame()) is None  # no curves: no figure
    assert plt.get_fignums() == before  # made without pyplot: nothing to close in a notebook


def test_fit_plot_returns_a_figure_without_pyplot():
    """`Fit.plot()` (the notebook's figures) makes a Figure without pyplot, or draws on `ax`."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.figure import Figure

    import analysis

    runs = _runs()
    N, D = runs["n_params"].to_numpy(), runs["tokens"].to_numpy()
    runs["final_eval_loss"] = 1.8 + 4e2 / N**0.34 + 4e3 / D**0.28
    law = analysis.fit(runs, law="chinchilla", bootstrap=0)
    before = plt.get_fignums()
    fig = law.plot()
    assert isinstance(fig, Figure) and fig.axes[0].get_ylabel() == "loss"
    assert plt.get_fignums() == before
    ax = Figure().subplots()
    assert law.plot(ax=ax) is ax.figure and len(ax.lines) == np.unique(N).size
