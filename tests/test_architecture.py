"""The layer contract: each package imports only what its may-import set names, and there are no
import cycles.

`MAY_IMPORT` is the architecture of docs/architecture.md written as data: for each unit (a package,
or a module named on its own; a module belongs to the unit of the longest prefix naming it), the
units it may import besides itself. Every import counts, also those inside functions (a
function-level import is still a dependency). The check reads the source with `ast`, so it needs
no import of JAX and runs in a fraction of a second. The units' sets must themselves form a DAG,
so the table cannot hide a cycle between packages.

`test_contract_catches_a_forbidden_import` shows that the check can fail: it copies the tree,
adds a module that breaks the contract (an upward import, or `analysis.laws` importing the
training code that sits below it) and expects exactly that violation to be reported.
`test_commands_import_no_command` adds one rule inside a unit: a subcommand module of
`analysis.commands` imports no other subcommand (what they share lives in an analysis unit or in
a `_`-prefixed module such as `_options`); a planted one is caught the same way.
`test_function_level_imports_say_why` holds docs/architecture.md's rule that an import inside a
function says why it is not at the top of its module (start-up time, an optional dependency, an
import cycle): a comment on its own line(s), or a comment line directly above it or above its
block of imports; planted imports without one are caught.
"""

from __future__ import annotations

import ast
import io
import pathlib
import shutil
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("models", "sharding", "experiments", "analysis", "hydra_plugins")

# The layer contract as data: each unit (a package, or a module named on its own) and the units it
# may import besides itself. A module belongs to the unit of the longest prefix that names it. The
# sets are explicit rather than "anything below": `analysis.laws` may not import the training code
# even though it sits above it. docs/architecture.md has the same table in words.
BASE = "models.base"
TRAINING_CORE = (BASE, "models", "sharding", "experiments", "experiments.rundir")
MAY_COMMANDS = (
    BASE,
    "models",
    "sharding",
    "analysis.core",
    "analysis.laws",
    "analysis.curves",
    "analysis.rl",
    "analysis.planning",
    "analysis.downstream",
    "analysis.hparams",
    "analysis.report",
    "analysis.backtests",
    "analysis.compare",
    "analysis.forecast",
)
MAY_IMPORT: dict[str, frozenset[str]] = {
    k: frozenset(v)
    for k, v in {
        BASE: (),  # errors, config parsing, strict JSON, fingerprints, the run directory
        "models": (BASE,),  # the transformer, its config, FLOPs, logical axes
        "sharding": (BASE, "models"),  # mesh, axis rules, validation, distributed, cost model
        "experiments.rundir": (BASE, "sharding"),  # run-dir bookkeeping and the exit-code contract
        "experiments": TRAINING_CORE,  # cli, preemption, the loop skeleton shared by train and RL
        "experiments.rl.tasks": (BASE,),  # NumPy task generators the trainer's probes reuse
        "experiments.train": (*TRAINING_CORE, "experiments.rl.tasks"),  # one training run
        "experiments.rl": (*TRAINING_CORE, "experiments.train", "experiments.rl.tasks"),  # RL fine-tuning
        "experiments.sweeps": (*TRAINING_CORE, "experiments.train"),  # ladders, grids, run ids
        "hydra_plugins": (*TRAINING_CORE, "experiments.sweeps"),  # Hydra sweeper / launcher
        # held-out cuts, fold errors, intervals, bootstrap draws, the padded batch, the method choice
        "analysis.core": (BASE,),
        "analysis.laws": (
            BASE,
            "analysis.core",
        ),  # point laws and the one fitting engine: no training code
        "analysis.rl": (
            BASE,
            "analysis.core",
            "analysis.laws",
        ),  # RL laws, curves, report section
        "analysis.curves": (BASE, "analysis.core", "analysis.laws"),  # loss-curve laws
        "analysis.downstream": (BASE, "analysis.core", "analysis.laws"),  # downstream-task prediction
        "analysis.hparams": (BASE, "analysis.core", "analysis.laws"),  # learning-rate / batch-size laws
        # recipe comparison: the compute multiplier between two ladders (`python -m analysis compare`)
        "analysis.compare": (BASE, "analysis.core", "analysis.laws"),
        # a run's final loss from the first part of its curve (`python -m analysis forecast`)
        "analysis.forecast": (
            BASE,
            "models",
            "analysis.core",
            "analysis.laws",
            "analysis.curves",
        ),
        # `python -m analysis backtest`: every family's candidate methods on a hidden top of the ladder
        "analysis.backtests": (
            BASE,
            "analysis.core",
            "analysis.laws",
            "analysis.curves",
            "analysis.downstream",
            "analysis.hparams",
            "analysis.compare",
            "analysis.forecast",
        ),
        # the budget planner: law + cost model (+ the trainer's config for the trainer plan)
        "analysis.planning": (
            BASE,
            "models",
            "sharding",
            "analysis.core",
            "analysis.laws",
            "analysis.hparams",
            "experiments.train",
        ),
        "analysis.report": (
            BASE,
            "models",
            "analysis.core",
            "analysis.laws",
            "analysis.curves",
            "analysis.rl",
            "analysis.planning",
            "analysis.downstream",
            "analysis.hparams",
            "analysis.compare",
        ),
        "analysis.commands": (*MAY_COMMANDS, "analysis.api"),
        "analysis.api": MAY_COMMANDS,  # the notebook API: load, fit, backtest, plan, methods
        "analysis.cli": (BASE, "analysis.commands"),
        "analysis.__main__": ("analysis.cli",),
        "analysis": (BASE,),  # the lazy public API (importlib by name, no import statements)
        "experiments.demo": ("*",),  # the main job: sweep -> fit -> report, may use everything
    }.items()
}


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def unit_of(module: str) -> str:
    """The contract unit of `module`: the longest key of MAY_IMPORT that is it or a prefix of it."""
    best = max((u for u in MAY_IMPORT if module == u or module.startswith(u + ".")), key=len, default=None)
    if best is None:
        raise AssertionError(f"module {module} is in no unit: add its package to MAY_IMPORT in {__file__}")
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


def forbidden_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import a module's unit may not make, as `a (unit u) imports b (unit v; u may import ...)`."""
    out = []
    for m, deps in graph.items():
        u = unit_of(m)
        allowed = MAY_IMPORT[u]
        for d in deps:
            v = unit_of(d)
            if v != u and v not in allowed and "*" not in allowed:
                out.append(f"{m} (unit {u}) imports {d} (unit {v}; {u} may import {sorted(allowed)})")
    return sorted(out)


COMMANDS = "analysis.commands"


def is_command(module: str) -> bool:
    """A subcommand module: `analysis.commands.<name>`, `<name>` not starting with `_` (those hold
    what commands share, such as the option definitions in `_options`)."""
    head, _, name = module.rpartition(".")
    return head == COMMANDS and not name.startswith("_")


def command_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a command by another command, as `a imports b`: what two commands share
    lives in an analysis unit or a `_`-prefixed module of analysis.commands."""
    return sorted(
        f"{m} imports {d}" for m, deps in graph.items() if is_command(m) for d in deps if is_command(d)
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


def test_imports_follow_the_contract():
    assert forbidden_imports(import_graph(ROOT)) == []


def test_the_contract_is_a_dag():
    units = {u: set(v) - {"*", u} for u, v in MAY_IMPORT.items()}
    assert not [u for u, v in units.items() for w in v if w not in MAY_IMPORT], "unknown unit in a set"
    order: list[str] = []  # a topological order exists: repeatedly take a unit whose deps are placed
    while len(order) < len(units):
        ready = [u for u, v in units.items() if u not in order and v <= set(order)]
        assert ready, f"MAY_IMPORT has a cycle among {sorted(set(units) - set(order))}"
        order += sorted(ready)


def test_no_import_cycles():
    assert import_cycles(import_graph(ROOT)) == []


def test_commands_import_no_command():
    assert command_imports(import_graph(ROOT)) == []


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


def test_every_module_has_a_unit():
    for m in import_graph(ROOT):
        unit_of(m)


@pytest.mark.parametrize(
    "culprit, source, expected",
    [
        (
            "sharding/oops.py",
            "from analysis.laws import fitting\n",
            "sharding.oops (unit sharding) imports analysis.laws.fitting",
        ),
        (
            "models/oops.py",
            "def f():\n    import experiments.train.loop\n",
            "models.oops (unit models) imports experiments.train.loop",
        ),
        (
            "analysis/laws/oops.py",
            "from analysis.report.build import build_report\n",
            "analysis.laws.oops (unit analysis.laws) imports analysis.report.build",
        ),
        # downward, yet forbidden: the laws are fitted without the training code
        (
            "analysis/laws/oops_planted.py",
            "import experiments.train.loop\n",
            "analysis.laws.oops_planted (unit analysis.laws) imports experiments.train.loop",
        ),
        (
            "analysis/rl/oops.py",
            "from sharding.costmodel import Layout\n",
            "analysis.rl.oops (unit analysis.rl) imports sharding.costmodel",
        ),
    ],
)
def test_contract_catches_a_forbidden_import(tmp_path, culprit, source, expected):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / culprit).write_text(source)
    found = sorted(
        set(forbidden_imports(import_graph(tmp_path))) - set(forbidden_imports(import_graph(ROOT)))
    )
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize(
    "source",
    [
        "from analysis.commands.fit import run  # planted\n",
        "def f():\n    from analysis.commands import layout_eval\n",
    ],
)
def test_contract_catches_a_command_importing_a_command(tmp_path, source):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "analysis" / "commands" / "oops_planted.py"
    planted.write_text(source)
    found = sorted(set(command_imports(import_graph(tmp_path))) - set(command_imports(import_graph(ROOT))))
    assert len(found) == 1, found
    assert found[0].startswith("analysis.commands.oops_planted imports analysis.commands."), found
    # a module the commands share (`_`-prefixed) may be imported by every command
    planted.write_text("from analysis.commands import _options\n")
    assert command_imports(import_graph(tmp_path)) == command_imports(import_graph(ROOT))


def test_contract_catches_a_cycle(tmp_path):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "models" / "cyc_a.py").write_text("from models import cyc_b\n")
    (tmp_path / "models" / "cyc_b.py").write_text("def f():\n    from models import cyc_a\n")
    assert ["models.cyc_a", "models.cyc_b"] in import_cycles(import_graph(tmp_path))


def _statement_lists(node: ast.AST):
    """The statement lists directly in `node` (a body, an `else`, a `finally`)."""
    for _, value in ast.iter_fields(node):
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value


def imports_without_reason(path: pathlib.Path, root: pathlib.Path) -> list[str]:
    """Every import inside a function of `path` that says no reason, as `file:line: import ...`.
    A reason is a comment on the import's own line(s), or on the comment line(s) directly above
    it or above the first import of its contiguous block of imports (blank lines may separate
    the groups of one block; any other statement ends it)."""
    text = path.read_text()
    lines = text.splitlines()
    comments = {
        t.start[0] for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT
    }

    def comment_above(line: int) -> bool:
        return line - 1 in comments and lines[line - 2].lstrip().startswith("#")

    def says_why(imp: ast.stmt, block: list[ast.stmt]) -> bool:
        own = range(imp.lineno, (imp.end_lineno or imp.lineno) + 1)
        return any(n in comments for n in own) or comment_above(imp.lineno) or comment_above(block[0].lineno)

    out: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if in_function:
            for stmts in _statement_lists(node):
                block: list[ast.stmt] = []
                for st in stmts:
                    if not isinstance(st, (ast.Import, ast.ImportFrom)):
                        block = []
                        continue
                    block.append(st)
                    if not says_why(st, block):
                        out.append(f"{path.relative_to(root)}:{st.lineno}: {lines[st.lineno - 1].strip()}")
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(text), False)
    return out


def function_imports_without_reason(root: pathlib.Path) -> list[str]:
    return [
        line
        for k in PACKAGES
        for p in sorted((root / k).rglob("*.py"))
        if "__pycache__" not in p.parts
        for line in imports_without_reason(p, root)
    ]


def test_function_level_imports_say_why():
    """docs/architecture.md: an import is kept inside a function only for start-up time, an
    optional dependency or an import cycle, and says which."""
    assert function_imports_without_reason(ROOT) == []


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("import json\n\ndef f():\n    import os  # deferred: planted\n", []),
        ("def f():\n    import json\n", [2]),
        ("def f():\n    s = '# not a comment'\n    import json\n", [3]),
        ('def f():\n    """# a docstring, not a comment"""\n    import json\n', [3]),
        # one comment line covers a contiguous block (isort's blank line between groups included)...
        ("def f():\n    # deferred: planted\n    import json\n\n    from models import config\n", []),
        # ...and no further than the next statement
        ("def f():\n    # deferred: planted\n    import json\n    x = 1\n    import os\n", [5]),
        ("def f():\n    # deferred: planted\n    x = 1\n    import json\n", [4]),
        # a trailing comment on the line above is not a comment line
        ("def f():\n    x = 1  # unrelated\n    import json\n", [3]),
        ("def f():\n    from models import (\n        config,  # deferred: planted\n    )\n", []),
        ("class C:\n    def m(self):\n        def g():\n            import json\n", [4]),
        ("def f():\n    try:\n        import json\n    except ImportError:\n        pass\n", [3]),
        ("def f():\n    if x:\n        import json  # optional dependency: planted\n", []),
        ("async def f():\n    import json\n", [2]),
        ("try:\n    import json\nexcept ImportError:\n    json = None\n", []),  # module level
    ],
)
def test_function_level_imports_without_a_reason_are_caught(tmp_path, source, flagged):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "oops_planted.py").write_text(source)
    found = function_imports_without_reason(tmp_path)
    assert [int(f.split(":")[1]) for f in found] == flagged, found
    assert all(f.startswith("models/oops_planted.py:") for f in found), found


def test_function_level_import_check_catches_one_in_the_tree(tmp_path):
    for k in PACKAGES:
        shutil.copytree(ROOT / k, tmp_path / k, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "analysis" / "core" / "enums.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    import json\n\n    return json\n")
    before = set(function_imports_without_reason(ROOT))
    found = sorted(set(function_imports_without_reason(tmp_path)) - before)
    n = len(target.read_text().splitlines()) - 2
    assert found == [f"analysis/core/enums.py:{n}: import json"], found
