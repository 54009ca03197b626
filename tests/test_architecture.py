"""The layer contract: imports only go down, and there are no import cycles.

`LAYERS` is the architecture of docs/architecture.md written as data, lowest layer first. A module
may import modules of its own layer or of a lower one, never of a higher one. Every import
counts, also those inside functions (a function-level import is still a dependency). The check
reads the source with `ast`, so it needs no import of JAX and runs in a fraction of a second.

`test_contract_catches_an_upward_import` shows that the check can fail: it copies the tree, adds
a module that breaks the contract and expects exactly that violation to be reported.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("models", "sharding", "experiments", "analysis", "hydra_plugins")

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("models.base",),  # errors, config parsing, strict JSON, fingerprints
    ("models",),  # the transformer, its config, FLOPs, logical axes
    ("sharding",),  # mesh, axis rules, validation, distributed, cost model
    (
        "experiments",
        "experiments.rundir",
        "experiments.train",  # the training core, and the RL task
        "experiments.rl.tasks",
    ),  # generators (NumPy only) that its eval.tasks probes reuse
    ("experiments.rl", "experiments.sweeps"),  # RL fine-tuning and sweeps, built on the core
    ("hydra_plugins",),  # Hydra sweeper/launcher plugins over experiments.sweeps
    ("analysis.runs", "analysis.laws"),  # run tables, laws and fits (no I/O in laws)
    (
        "analysis.curves",
        "analysis.rl",
        "analysis.planning",  # curve laws, RL laws, budget planner,
        "analysis.downstream",
    ),  # downstream-task prediction
    ("analysis.report",),  # the report: fit + allocation + planning + figures
    ("analysis.commands", "analysis.cli", "analysis.__main__", "analysis"),  # `python -m analysis`
    ("experiments.demo",),  # the main job: sweep -> fit -> report
)


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best is None:
        raise AssertionError(f"module {module} is in no layer: add its package to LAYERS in {__file__}")
    return best


def project_imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """Project modules imported anywhere in `path` (`from a import b` counts `a.b` when that is a
    module, else `a`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] in PACKAGES}
    return out


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for k in PACKAGES for p in (root / k).rglob("*.py")}
    mods = set(files)
    return {m: {d for d in project_imports(p, mods) if d != m} for m, p in files.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
        for m, deps in graph.items()
        for d in deps
        if layer_of(d) > layer_of(m)
    )


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring a package and
    its own submodules (a package `__init__` that re-exports is not a cycle of the design)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 and not all(c.startswith(min(comp, key=len)) for c in comp):
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def test_imports_only_go_down():
    assert upward_imports(import_graph(ROOT)) == []


def test_no_import_cycles():
    assert import_cycles(import_graph(ROOT)) == []


def test_training_code_never_imports_analysis():
    graph = import_graph(ROOT)
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        for d in deps
        if m.split(".")[0] in ("models", "sharding", "hydra_plugins")
        or (m.startswith("experiments.") and m != "experiments.demo")
        if d.startswith("analysis")
    )
    assert bad == []


def test_every_module_has_a_layer():
    for m in import_graph(ROOT):
        layer_of(m)


@pytest.mark.parametrize(
    "culprit, source, expected",
    [
        (
            "sharding/oops.py",
            "from analysis.laws import fitting\n",
            "sharding.oops (layer 2) imports analysis.laws.fitting",
        ),
        (
            "models/oops.py",
            "def f():\n    import experiments.train.loop\n",
            "models.oops (layer 1) imports experiments.train.loop",
        ),
        (
            "analysis/laws/oops.py",
            "from analysis.report.build import build_report\n",
            "analysis.laws.oops (layer 6) imports analysis.report.build",
        ),
    ],
)
def test_contract_catches_an_upward_import(tmp_path, culprit, source, expected):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / culprit).write_text(source)
    found = sorted(set(upward_imports(import_graph(tmp_path))) - set(upward_imports(import_graph(ROOT))))
    assert len(found) == 1 and found[0].startswith(expected), found


def test_contract_catches_a_cycle(tmp_path):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "models" / "cyc_a.py").write_text("from models import cyc_b\n")
    (tmp_path / "models" / "cyc_b.py").write_text("def f():\n    from models import cyc_a\n")
    assert ["models.cyc_a", "models.cyc_b"] in import_cycles(import_graph(tmp_path))
