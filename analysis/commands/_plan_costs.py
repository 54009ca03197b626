"""`plan`'s cost flags (`--price`, `--watts`, `--region`, ...) and hardware names, parsed and checked."""

from __future__ import annotations

import argparse
import math

from analysis.commands._flags import positive_float
from analysis.planning.costs import OBJECTIVES, CostOptions, parse_per_hardware
from models.base.errors import AnalysisError
from sharding.costmodel import Hardware, load_hardware


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """The `cost, energy, carbon` group: what picks the hardware, its limits and the assumptions."""
    g = p.add_argument_group("cost, energy, carbon (docs/plan.md)")
    g.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="time",
        metavar="OBJ",
        help="time|cost|energy|carbon: the winner (time)",
    )
    g.add_argument("--max-cost", type=positive_float, metavar="USD", help="dollar limit")
    g.add_argument("--goodput", type=float, metavar="F", help="share of wall-clock that trains (0.9)")
    g.add_argument("--pue", type=float, metavar="X", help="power usage effectiveness (1.1)")
    g.add_argument("--watts", metavar="[HW=]W,..", help="device power (default: the hardware file)")
    g.add_argument("--price", metavar="[HW=]USD,..", help="USD per device-hour (default: the hardware file)")
    g.add_argument("--region", metavar="NAME", help="grid of conf/regions.yaml (world)")
    g.add_argument("--grid-intensity", type=nonnegative_float, metavar="KG", help="kg CO2e per kWh")


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return v


def cost_options(opts) -> CostOptions:
    """The cost flags as `CostOptions` (one error line for a bad region, price or power)."""
    own = _own_names(opts.hardware) if opts.hardware else []
    return CostOptions(
        goodput=opts.goodput,
        pue=opts.pue,
        grid_intensity=opts.grid_intensity,
        region=opts.region,
        watts={} if opts.watts is None else parse_per_hardware(opts.watts, "--watts", own),
        prices={} if opts.price is None else parse_per_hardware(opts.price, "--price", own),
    )


def hardware_names(spec: str) -> list[Hardware]:
    """`--hardware a100-80gb,h100,...`: each type once (aliases resolved; one error line for an
    unknown name)."""
    out: dict[str, Hardware] = {}
    for part in (x.strip() for x in str(spec).split(",")):
        if part:
            hw = load_hardware(part)
            out.setdefault(hw.name, hw)
    if not out:
        raise AnalysisError("--hardware names no hardware type")
    return list(out.values())


def _own_names(spec: str) -> list[str]:
    """The names of the hardware types `--hardware` names (`a,b` or a mixed cluster `a:n,b:m`),
    as --price and --watts accept them; an unknown one is left to the mode that reads it."""
    out = []
    for part in str(spec).split(","):
        name = part.split(":")[0].strip()
        try:
            out.append(load_hardware(name).name)
        except AnalysisError:
            continue
    return out
