"""`python -m analysis backtest`: hide the top of a ladder, fit every candidate method, report how
each did on what it did not see (docs/analysis.md, "Backtesting"). The cuts, intervals and the
method choice come from `analysis.core.validation`, the same code the fitting commands use."""

from __future__ import annotations

import enum
import importlib

import pandas as pd

from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest
from analysis.core.table import read_table


class Protocol(enum.StrEnum):
    BUDGET = "budget"
    FRONTIER = "frontier"
    SIZE = "size"
    EPOCHS = "epochs"
    LR = "lr"
    BATCH = "batch"
    DOWNSTREAM = "downstream"
    CURVE = "curve"
    COOLDOWN = "cooldown"
    COMPARE = "compare"
    CURVE_PREFIX = "curve-prefix"
    MOE = "moe"
    CPT = "cpt"
    CPT_CURVE = "cpt-curve"


# protocol -> (module, function(table, Options) -> Backtest); imported on use (each pulls in its
# own fitting stack). `curve` and `cooldown` take a path as well as a table.
RUNNERS: dict[Protocol, tuple[str, str]] = {
    Protocol.BUDGET: ("analysis.backtests.losses", "budget_protocol"),
    Protocol.SIZE: ("analysis.backtests.losses", "size_protocol"),
    Protocol.EPOCHS: ("analysis.backtests.losses", "epochs_protocol"),
    Protocol.FRONTIER: ("analysis.backtests.losses", "frontier_protocol"),
    Protocol.LR: ("analysis.backtests.hparams", "lr_protocol"),
    Protocol.BATCH: ("analysis.backtests.hparams", "batch_protocol"),
    Protocol.DOWNSTREAM: ("analysis.backtests.downstream", "downstream_protocol"),
    Protocol.CURVE: ("analysis.backtests.curves", "curve_protocol"),
    Protocol.COOLDOWN: ("analysis.backtests.cooldown", "cooldown_protocol"),
    Protocol.COMPARE: ("analysis.backtests.compare", "compare_protocol"),
    Protocol.CURVE_PREFIX: ("analysis.backtests.prefix", "curve_prefix_protocol"),
    Protocol.MOE: ("analysis.backtests.moe", "moe_protocol"),
    Protocol.CPT: ("analysis.backtests.cpt", "cpt_protocol"),
    Protocol.CPT_CURVE: ("analysis.backtests.cpt_curve", "cpt_curve_protocol"),
}
PATH_PROTOCOLS = (Protocol.CURVE, Protocol.COOLDOWN, Protocol.CURVE_PREFIX, Protocol.CPT_CURVE)


def run(data: pd.DataFrame | str, protocol: Protocol | str, opt: Options = Options()) -> Backtest:
    """Run one protocol on a table (a runs table, or for `curve`/`cooldown` also a path)."""
    p = Protocol(protocol)
    module, name = RUNNERS[p]
    if p not in PATH_PROTOCOLS and not isinstance(data, pd.DataFrame):
        data = read_table(data)
    return getattr(importlib.import_module(module), name)(data, opt)


__all__ = ["RUNNERS", "Backtest", "Options", "Protocol", "run"]
