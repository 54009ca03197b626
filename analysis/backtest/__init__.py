"""`python -m analysis backtest`: hide the top of a ladder, fit every candidate method, report how
each did on what it did not see (docs/analysis.md, "Backtesting"). The cuts, intervals and the
method choice come from `analysis.validation`, the same code the fitting commands use."""

from __future__ import annotations

import enum

import pandas as pd

from analysis.backtest.losses import Options
from analysis.backtest.result import Backtest
from analysis.laws.points import read_table


class Protocol(enum.StrEnum):
    BUDGET = "budget"
    FRONTIER = "frontier"
    SIZE = "size"
    EPOCHS = "epochs"
    LR = "lr"
    DOWNSTREAM = "downstream"
    CURVE = "curve"


def run(data: pd.DataFrame | str, protocol: Protocol | str, opt: Options = Options()) -> Backtest:
    """Run one protocol on a table (a runs table, or for `curve` a curves table / folder)."""
    p = Protocol(protocol)
    if p == Protocol.CURVE:
        from analysis.backtest.curves import curve_protocol

        return curve_protocol(data, opt)
    df = data if isinstance(data, pd.DataFrame) else read_table(data)
    if p in (Protocol.BUDGET, Protocol.SIZE, Protocol.EPOCHS):
        from analysis.backtest.losses import point_protocol

        return point_protocol(df, str(p), opt)
    if p == Protocol.FRONTIER:
        from analysis.backtest.losses import frontier_protocol

        return frontier_protocol(df, opt)
    if p == Protocol.LR:
        from analysis.backtest.hparams import lr_protocol

        return lr_protocol(df, opt)
    from analysis.backtest.downstream import downstream_protocol

    return downstream_protocol(df, opt)


__all__ = ["Backtest", "Options", "Protocol", "run"]
