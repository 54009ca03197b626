"""notebooks/explore.ipynb runs top to bottom on a small fixture sweep (so it never rots)."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fixture_sweep(tmp_path_factory):
    """3 budgets x 4 shapes from the fake trainer (losses drawn from a known Chinchilla law)."""
    sw = tmp_path_factory.mktemp("nb") / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "sweep_fake_app.py"),
            "-m",
            "+sweep=isoflop",
            "sweep.budgets=[2e10,6e10,1.8e11]",
            "sweep.min_steps=5",
            "train.eval_every=1000",
            "train.ckpt_every=100000",
            f"hydra.sweep.dir={sw}",
            f"hydra.searchpath=[file://{REPO}/conf]",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return sw


@pytest.mark.slow
def test_explore_notebook_executes(fixture_sweep, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("SCALELAB_SWEEP", str(fixture_sweep))
    monkeypatch.setenv("SCALELAB_BOOTSTRAP", "100")
    monkeypatch.setenv("SCALELAB_CACHE_DIR", str(fixture_sweep.parent / "cache"))
    nb = nbformat.read(REPO / "notebooks" / "explore.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}
    ).execute()
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "law chinchilla" in text and "predicted loss at N=" in text
    held = next(l for l in text.splitlines() if "mean |error|" in l)
    # the fake trainer's losses follow a Chinchilla law exactly (x1.01), so the held-out error is tiny
    assert float(held.split("mean |error| ")[1].split("%")[0]) < 1.0


def test_importing_analysis_leaves_the_matplotlib_backend_alone():
    """A notebook user's backend survives `import analysis` and every analysis module."""
    code = (
        "import matplotlib, pkgutil, importlib; matplotlib.use('svg'); import analysis\n"
        "for m in pkgutil.walk_packages(analysis.__path__, 'analysis.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        "from analysis import build_report, plan\n"
        "print(matplotlib.get_backend())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "svg"


def test_figure_functions_return_figures():
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

    from analysis.report import figures

    N = np.repeat([1e5, 2e5, 4e5], 2)
    done = pd.DataFrame(
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
    before = plt.get_fignums()
    fig = figures.loss_vs_compute(done, None)
    assert isinstance(fig, Figure) and fig.axes[0].get_xlabel().startswith("training compute")
    assert isinstance(figures.throughput(done), Figure)
    assert figures.loss_curves(done, pd.DataFrame()) is None  # no curves: no figure
    assert plt.get_fignums() == before  # made without pyplot: nothing to close in a notebook
