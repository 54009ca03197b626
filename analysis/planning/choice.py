"""Hardware shopping: the same plan on several hardware types (`plan --hardware a100-80gb,h100,...`),
one row each, and the one an objective picks (`--objective time|cost|energy|carbon`: the fewest
days, dollars, MWh or t CO2e) among those that meet the limits (`--max-days`, `--max-cost`).

A fixed model (`--params N --tokens D`, or the inference-aware size) is the same model on every
type, so the rows differ only in what it costs; a FLOP budget is planned afresh on each type (its
shapes and, under a time or cost limit, its loss may differ). The limits of a fixed model are
checked against each row's result; a budget's limits already cap its tokens (planner.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from analysis.planning.costs import OBJECTIVES, money
from analysis.planning.planner import Plan, _layout_text
from models.base.errors import AnalysisError

UNITS = {"time": "days", "cost": "USD", "energy": "MWh", "carbon": "t CO2e"}


@dataclasses.dataclass(frozen=True)
class HardwareOption:
    """One hardware type's plan, or why there is none; `violates`: the limits its plan breaks."""

    hardware: str
    plan: Plan | None
    error: str | None = None
    violates: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.plan is not None and not self.violates

    def as_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "hardware": self.hardware,
            "best": None if p is None else p.as_dict()["best"],
            "n_devices": None if p is None else p.n_devices,
            "unit": None if p is None else p.unit,
            "feasible": self.feasible,
            "violates": list(self.violates),
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True)
class HardwareChoice:
    """Every hardware type's option and the winner under `objective`."""

    options: tuple[HardwareOption, ...]
    objective: str
    winner: HardwareOption
    max_days: float | None = None
    max_cost: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "winner": self.winner.hardware,
            "max_days": self.max_days,
            "max_cost": self.max_cost,
            "by_hardware": [o.as_dict() for o in self.options],
        }

    def text_lines(self) -> list[str]:
        head = (
            f"  {'hardware':10s} {'params':>7s} {'layout':34s} {'MFU':>5s} {'days':>14s} "
            f"{'device-hours':>12s} {'MWh':>8s} {'t CO2e':>8s} {'USD':>8s}"
        )
        out = [f"hardware compared ({self.objective}: fewest {UNITS[self.objective]} wins):", head]
        for o in self.options:
            mark = "*" if o is self.winner else " "
            if o.plan is None:
                out.append(f"{mark} {o.hardware:10s} no plan: {o.error}")
                continue
            b, c = o.plan.best, o.plan.best.costs
            usd = "n/a" if c.cost_usd is None else money(c.cost_usd)
            mwh = "n/a" if c.energy_mwh is None else f"{c.energy_mwh:.3g}"
            co2 = "n/a" if c.tco2eq is None else f"{c.tco2eq:.3g}"
            days = f"{c.days:.1f} [{c.days_interval[0]:.1f}-{c.days_interval[1]:.1f}]"
            out.append(
                f"{mark} {o.hardware:10s} {b.shape.n_params / 1e9:6.2f}B {_layout_text(b.layout):34s} "
                f"{b.mfu:5.3f} {days:>14s} {c.device_hours:12.3g} {mwh:>8s} {co2:>8s} "
                f"{usd:>8s}" + (f"  (breaks {', '.join(o.violates)})" if o.violates else "")
            )
        out.append(
            f"winner: {self.winner.hardware} ({_figure(self.winner, self.objective)}); device-hours are "
            f"{', '.join(sorted({o.plan.unit for o in self.options if o.plan is not None}))}"
        )
        return out


def _figure(o: HardwareOption, objective: str) -> str:
    v = o.plan.best.costs.value(objective)
    return f"${money(v)}" if objective == "cost" else f"{v:.3g} {UNITS[objective]}"


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise AnalysisError(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    return objective


def limits_broken(plan: Plan, max_days: float | None, max_cost: float | None) -> tuple[str, ...]:
    """The limits a plan's best candidate breaks (its point estimate), in words."""
    c = plan.best.costs
    out = []
    if max_days is not None and c.days > max_days:
        out.append(f"--max-days {max_days:g}: {c.days:.1f} days")
    if max_cost is not None:
        if c.cost_usd is None:
            out.append(f"--max-cost {max_cost:g}: no price for {plan.hardware.name} (--price)")
        elif c.cost_usd > max_cost:
            out.append(f"--max-cost {max_cost:g}: ${money(c.cost_usd)}")
    return tuple(out)


def choose(
    options: list[HardwareOption],
    objective: str,
    max_days: float | None = None,
    max_cost: float | None = None,
) -> HardwareChoice:
    """The option with the smallest objective figure among those that have a plan and meet the
    limits; one error line when none does, or when `cost` lacks a price."""
    check_objective(objective)
    planned = [o for o in options if o.plan is not None]
    if not planned:
        raise AnalysisError(
            "no hardware type has a plan: " + "; ".join(f"{o.hardware}: {o.error}" for o in options)
        )
    if objective != "time":
        missing = [o.hardware for o in planned if o.plan.best.costs.value(objective) is None]
        if missing:
            what, flag = ("price", "--price") if objective == "cost" else ("power", "--watts")
            unit = "USD_PER_HOUR" if objective == "cost" else "W"
            raise AnalysisError(
                f"--objective {objective}: no {what} for {', '.join(missing)}; give {flag} "
                + ",".join(f"{m}={unit}" for m in missing)
            )
    feasible = [o for o in options if o.feasible]
    if not feasible:
        raise AnalysisError(
            "no hardware type meets the limits: "
            + "; ".join(f"{o.hardware} breaks {', '.join(o.violates)}" for o in planned if o.violates)
        )
    winner = min(feasible, key=lambda o: o.plan.best.costs.value(objective))
    return HardwareChoice(tuple(options), objective, winner, max_days, max_cost)
