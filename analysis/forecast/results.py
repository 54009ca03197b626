"""The typed results of a forecast: one run's forecast, what one cut fraction's fit learnt."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class Method(enum.StrEnum):
    """How a forecast is made (`forecast --method`; analysis/forecast/engine.py)."""

    AUTO = "auto"  # mpl when every run's schedule is known to its end, else transfer
    TRANSFER = "transfer"
    RATIO = "ratio"
    MPL = "mpl"


SEEN = "seen"  # a finished run: its forecast is its final loss


@dataclass(frozen=True)
class RunForecast:
    """One run's forecast final loss, its 90% interval and how much of the run it saw."""

    run: str
    final_loss: float
    interval: tuple[float, float]
    frac_seen: float
    method: str  # Method, or SEEN for a finished run
    log_sd: float  # sd of ln(final loss) (0 for a finished run; NaN without one)
    value: Any = None  # the run's value of the chosen key

    def to_dict(self) -> dict:
        return {**asdict(self), "interval": list(self.interval)}


@dataclass(frozen=True)
class FitInfo:
    """What one cut fraction's fit learnt: the features, its error, the finished curves behind it."""

    frac: float
    method: str
    n_complete: int
    detail: str
    log_sd: float

    def to_dict(self) -> dict:
        return asdict(self)
