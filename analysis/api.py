"""The notebook API: `analysis.load`, `analysis.fit`, `analysis.backtest`, `analysis.plan` and
`analysis.methods` (re-exported lazily by `analysis/__init__.py`).

    import analysis
    t = analysis.load("runs.csv")              # CSV, Parquet, a sweep directory or a DataFrame
    f = analysis.fit(t, law="auto")            # a Fit: .predict(N=, D=) .summary() .plot() .to_dict()
    p = f.predict(N=1e10, D=2e11)              # a Prediction: .mean .lo .hi (90%)
    b = analysis.backtest(t, protocol="size")  # every method of the protocol on the hidden top
    analysis.plan(1e22, law=f, hardware="h100-sxm", gpus=1024)

Every method comes from the one registry (`analysis.core.methods`); the modules below register
their family's methods when imported.
"""

from __future__ import annotations

import importlib
import os
import pathlib
from typing import Any, Mapping

import pandas as pd

import analysis.laws.methods  # noqa: F401  (the point laws register when imported)
import analysis.rl.methods  # noqa: F401  (the RL law, scored by no protocol)
from analysis import backtests as backtest_mod
from analysis.backtests.result import Backtest
from analysis.core import methods as registry
from analysis.core.methods import Family, Fit, Method, Prediction
from analysis.core.runs import table as runs_table
from analysis.core.table import read_table
from analysis.laws.allocation import ScalingLaw
from analysis.laws.fitting import FitResult
from analysis.planning.planner import Plan
from analysis.planning.planner import plan as plan_run
from models.base.errors import AnalysisError

__all__ = ["Fit", "Prediction", "backtest", "fit", "load", "methods", "plan"]

# Every protocol's module imports its family's methods and registers its baseline: importing them
# all fills the registry (the RL family, scored by no protocol, registers above).
for _module, _ in backtest_mod.RUNNERS.values():
    importlib.import_module(_module)


def methods(family: Family | str | None = None, protocol: str | None = None) -> list[Method]:
    """The registered methods: name, family, protocols, role (default, baseline or candidate)."""
    return registry.methods(family, protocol)


def load(source: str | os.PathLike | pd.DataFrame, **options: Any) -> pd.DataFrame:
    """The runs table of a CSV, a Parquet file, a sweep or run directory, or a DataFrame (copied).
    Columns keep their names; every command and method finds its roles (N, D, C, loss, ...) by the
    same aliases (`analysis.core.table.ALIASES`) or by an explicit `columns={role: name}`."""
    if isinstance(source, pd.DataFrame):
        if source.empty:
            raise AnalysisError("the table has no rows")
        return source.copy()
    path = pathlib.Path(source)
    if path.is_dir():
        return runs_table(path, **options)
    return read_table(path)


def fit(
    table: pd.DataFrame | str | os.PathLike,
    law: str = "auto",
    family: Family | str = Family.POINT,
    **options: Any,
) -> Fit:
    """Fit one registered method (`law`, a name of `methods(family)`) to a runs table; options go to
    the family's fit (point laws: columns, bootstrap, seed, holdout_above, fixed, delta, ...)."""
    family = Family(family)
    # curves and forecasts read their own inputs (curve files, a folder of them, a sweep's curves)
    paths_ok = family in (Family.CURVE, Family.FORECAST) and not isinstance(table, pd.DataFrame)
    return registry.get(law, family)(table if paths_ok else load(table), **options)


def backtest(table: pd.DataFrame | str | os.PathLike, protocol: str, **options: Any) -> Backtest:
    """Hide the top of the ladder (`protocol`: budget, frontier, size, epochs, lr, batch, downstream,
    curve, cooldown, compare, curve-prefix, moe), fit every method scored there below the cut,
    score each on what it did not see. Options: holdout_above, holdout_above_n,
    holdout_epochs_above, bootstrap, seed, only_default, columns."""
    data = table if isinstance(table, pd.DataFrame) else str(table)
    return backtest_mod.run(data, protocol, backtest_mod.Options(**options))


def plan(
    budget: float | None = None,
    law: Fit | FitResult | ScalingLaw | str | None = None,
    hardware: str = "h100-sxm",
    gpus: int = 1024,
    **options: Any,
) -> Plan:
    """The compute-budget plan (shape, tokens, layout, days, loss with its interval) for `budget`
    FLOPs on `gpus` devices of `hardware`, under `law`: a Fit or FitResult of a Chinchilla-form law,
    a ScalingLaw, a `fit --json` path, or None for Hoffmann et al.'s constants."""
    return plan_run(budget, gpus, hardware, law=_scaling_law(law), **options)


def _scaling_law(law: Fit | FitResult | ScalingLaw | str | Mapping | None) -> ScalingLaw | None:
    if isinstance(law, Fit):
        law = law.result
    if isinstance(law, FitResult):
        return ScalingLaw.from_fit(law)
    if isinstance(law, (str, os.PathLike)):
        return ScalingLaw.from_json(law)
    return law
