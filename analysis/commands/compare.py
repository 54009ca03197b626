"""`python -m analysis compare REF OTHER [OTHER ...]`: which recipe wins, and by how much compute.

Each input is a runs table (CSV/parquet) or a sweep directory, one recipe each (REF the first); or
one table (or several) with a recipe column: `--by recipe --ref NAME` (a `sweep.recipes` sweep's
`sweep.recipe` column is found as `recipe`, and one such input needs no `--by`). At each budget
(`--budget`; default: the ladders' top budget, 10x and 100x it) it prints the multiplier m(C), the
compute REF needs to reach OTHER's expected best loss at C divided by C (> 1: OTHER is better),
its 90% interval, P(OTHER better), the winner (named only where the interval excludes 1) and the
verdict; then the trend d log m / d log C and the crossover (where the winner changes, up to 100x
the top budget). Without --method, the ladders' own backtest picks the method first: "no
difference" (m = 1) unless `auto_shrunk` beats it on every fold. --json, --markdown and --figure
write the same; docs/compare.md, "Comparing recipes".
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from analysis.commands._flags import (
    add_bootstrap_argument,
    add_budget_argument,
    add_column_arguments,
    add_json_argument,
    add_seed_argument,
)
from analysis.commands._options import ColumnOptions, emit_json
from models.base.errors import AnalysisError

# the compare family's registered methods (analysis.compare.methods; spelled here so that --help
# loads no fitting code; tests/test_compare.py checks the two agree)
METHODS = (
    "no_difference",
    "joint_constant_multiplier",
    "joint_shared_exponents",
    "joint_shared_E",
    "free_per_recipe",
    "frontier_power_laws",
    "auto_shrunk",
    "auto",
)


EXAMPLES = """\
examples:
  scalelab compare ref.csv other.csv --budget 1e21,1e22    # m(C): compute multiplier of other over ref
  scalelab compare outputs/recipes --by recipe --json cmp.json
A winner is named only where the 90% interval of m excludes 1; docs/compare.md."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="which recipe wins, by how much compute: the multiplier m(C) of each OTHER over REF",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="REF, then each OTHER: runs (a CSV, a Parquet file or a sweep directory), one recipe "
        "each; or tables with a recipe column (--by)",
    )
    p.add_argument(
        "--by", metavar="COLUMN", help="the recipe column of the table(s) (recipe: also sweep.recipe)"
    )
    p.add_argument("--ref", metavar="NAME", help="the reference recipe (default: the first)")
    add_budget_argument(p, "to state the multiplier at (default: the top budget, 10x and 100x it)")
    p.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="how the multiplier is predicted (default auto: no_difference unless auto_shrunk beats it "
        "on the ladders' own backtest folds; docs/compare.md, 'Comparing recipes')",
    )
    add_bootstrap_argument(p, "per ladder (the joint bootstrap behind the intervals)")
    add_seed_argument(p)
    p.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    p.add_argument(
        "--figure", metavar="PATH", help="draw both frontiers and m(C) with its band (PNG/PDF/SVG)"
    )
    add_column_arguments(p, "runs-table columns (as in `python -m analysis fit`)")
    add_json_argument(p, "the comparison: others[{other, budgets, trend, crossover}]")
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareOptions(ColumnOptions):
    inputs: list[str]
    by: str | None
    ref: str | None
    budget: list[float] | None
    method: str | None
    bootstrap: int
    seed: int
    markdown: str | None
    figure: str | None


def run(args: argparse.Namespace) -> int:
    opts = CompareOptions.from_args(args)
    # pandas, JAX and the fits load here, not at import, so `python -m analysis --help` stays fast.
    from analysis.compare import render
    from analysis.compare.comparison import compare_recipes
    from analysis.compare.ladders import load_ladders
    from models.base.jaxcache import enable_compile_cache
    from models.base.jsonio import write_text_atomic

    for flag, path in (("markdown", opts.markdown), ("figure", opts.figure)):
        if path and not pathlib.Path(path).parent.is_dir():
            raise AnalysisError(f"--{flag}: directory {pathlib.Path(path).parent} does not exist")
    enable_compile_cache()
    ref, others = load_ladders(opts.inputs, opts.by, opts.ref, opts.columns())
    comp, _ = compare_recipes(ref, others, opts.method, opts.budget, opts.bootstrap, opts.seed)
    print(render.text(comp))
    if opts.markdown:
        write_text_atomic(opts.markdown, render.markdown(comp))
        print(f"wrote {opts.markdown}")
    if opts.figure:
        render.figure(comp).savefig(opts.figure, dpi=120)
        print(f"wrote {opts.figure}")
    emit_json(opts.json, comp.to_dict())
    return 0
