"""What a comparison reports: per OTHER, the multiplier at each budget with its 90% interval, the
probability that OTHER is better, the trend of the multiplier with scale and the crossover.

`Comparison.to_dict()` is `compare --json`: `{ref, method, level, budgets_requested, others:
[{other, budgets: [{C, multiplier, interval, p_other_better, winner, decided, capped, verdict}],
trend: {dlog_m_dlog_C, interval, between}, crossover, crossover_detail, error_model, frontiers,
top_budget, note, method, method_choice}]}`; with a single OTHER its keys also stand at the top
level (`method` then stays the method asked for; `method_choice.chosen` is the one used).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from analysis.core import validation


@dataclass(frozen=True)
class BudgetMultiplier:
    """The multiplier at one budget: > 1 means OTHER is better (REF needs m times the compute)."""

    C: float
    multiplier: float
    lo: float  # the 90% interval
    hi: float
    p_other_better: float  # P(m > 1) under the same error model as the interval
    winner: str | None  # named only when the 90% interval excludes 1 (None: no clear winner)
    capped: bool = False  # REF cannot reach OTHER's loss: m is the ceiling (frontiers.MAX_MULTIPLIER)
    verdict: str = ""  # the sentence: "<winner> wins at C=..." or "no clear winner at C=..."

    @property
    def decided(self) -> bool:
        """Whether the interval excludes 1 (the winner is clear at the 90% level)."""
        return self.lo > 1 or self.hi < 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "C": self.C,
            "multiplier": self.multiplier,
            "interval": [self.lo, self.hi],
            "p_other_better": self.p_other_better,
            "winner": self.winner,
            "decided": self.decided,
            "capped": self.capped,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Trend:
    """d log m / d log C between two budgets (the secant), with its 90% interval."""

    slope: float
    lo: float
    hi: float
    between: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return {"dlog_m_dlog_C": self.slope, "interval": [self.lo, self.hi], "between": list(self.between)}


@dataclass(frozen=True)
class Crossover:
    """Where the winner changes (the first sign change of log m on [start, end]), or none."""

    C: float | None
    lo: float | None  # the 90% interval of the crossing among the bootstrap rows that cross
    hi: float | None
    share: float  # share of bootstrap rows with a crossing in the range (NaN: no bootstrap)
    start: float
    end: float  # 100 x the ladder's top budget
    winner_below: str | None = None
    winner_above: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "C": self.C,
            "interval": None if self.lo is None else [self.lo, self.hi],
            "share_of_resamples": None if math.isnan(self.share) else self.share,
            "range": [self.start, self.end],
            "winner_below": self.winner_below,
            "winner_above": self.winner_above,
        }


@dataclass(frozen=True)
class PairComparison:
    """REF against one OTHER under one method."""

    ref: str
    other: str
    method: str
    budgets: tuple[BudgetMultiplier, ...]
    trend: Trend
    crossover: Crossover
    error_model: dict[str, Any]  # the forward-chaining error model behind the intervals
    frontiers: dict[str, Any]  # per recipe: (E, G, gamma) and its measured frontier points
    top_budget: float  # the ladders' largest budget
    note: str = ""
    # m(C) on a grid from the smallest budget to 100x the top: (C, m, lo, hi) arrays (the figure)
    curve: tuple = field(default=(), repr=False, compare=False)
    # the ladders' own backtest behind the method (`choice.MethodChoice.to_dict`)
    method_choice: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "other": self.other,
            "budgets": [b.to_dict() for b in self.budgets],
            "trend": self.trend.to_dict(),
            "crossover": self.crossover.C,
            "crossover_detail": self.crossover.to_dict(),
            "error_model": dict(self.error_model),
            "frontiers": dict(self.frontiers),
            "top_budget": self.top_budget,
            "note": self.note,
            "method": self.method,
            "method_choice": self.method_choice,
        }


@dataclass(frozen=True)
class Comparison:
    """REF against every OTHER (`python -m analysis compare`)."""

    ref: str
    method: str
    others: tuple[PairComparison, ...]
    requested: tuple[float, ...]  # the budgets asked for (or the default: top x1, x10, x100)
    bootstrap: int
    sources: dict[str, str] = field(default_factory=dict)  # recipe -> where its runs came from
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ref": self.ref,
            "method": self.method,
            "level": validation.PREDICTION_LEVEL,
            "bootstrap": self.bootstrap,
            "budgets_requested": list(self.requested),
            "sources": dict(self.sources),
            "others": [o.to_dict() for o in self.others],
            "warnings": list(self.warnings),
        }
        if len(self.others) == 1:
            out.update(self.others[0].to_dict())
        return out
