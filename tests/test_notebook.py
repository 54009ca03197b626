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
    p = subprocess.run([sys.executable, str(REPO / "tests" / "sweep_fake_app.py"), "-m", "+sweep=isoflop",
                        "sweep.budgets=[2e10,6e10,1.8e11]", "sweep.min_steps=5", "train.eval_every=1000",
                        "train.ckpt_every=100000", f"hydra.sweep.dir={sw}", f"hydra.searchpath=[file://{REPO}/conf]"],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
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
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "law chinchilla" in text and "predicted loss at N=" in text
    held = next(l for l in text.splitlines() if "mean |error|" in l)
    # the fake trainer's losses follow a Chinchilla law exactly (x1.01), so the held-out error is tiny
    assert float(held.split("mean |error| ")[1].split("%")[0]) < 1.0
