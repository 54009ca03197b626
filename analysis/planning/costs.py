"""What a plan costs: device-hours, days, energy, carbon and dollars, each with its 90% interval.

The cost model gives the training time of a candidate at full speed (tokens / tokens per second).
A real run also loses time to failures, restarts from the last checkpoint, checkpoint writes and
hangs; `goodput` is the share of the wall-clock that advances training, so

    device_hours = training seconds / 3600 x devices / goodput,   days = device_hours / (24 devices)
    energy_mwh   = device_hours x watts x PUE / 1e6
    tco2eq       = energy_mwh x grid intensity (kg CO2e per kWh = t CO2e per MWh)
    cost_usd     = device_hours x price per device-hour

Every number behind them has a source and a date (`Assumptions.as_dict()["sources"]`): the
goodput and PUE defaults in conf/plan_costs.yaml, the grid intensity of conf/regions.yaml (or
`--grid-intensity`), a device's power (`power_w`, its datasheet maximum) and price
(`price_per_hour`, a public list price) in its conf/hardware file; the flags override them and
the sources then say so.

Intervals (90%): the device-hours combine the cost model's interval of measured / predicted MFU
(`Efficiency.rate_interval`, measured on runs its constants were not fitted to) with the goodput
interval, each side in log space as a root sum of squares (independent errors); energy adds the
power range of a device whose power is an estimate (`power_w_range`); carbon and dollars scale the
energy and device-hours intervals. A user's own --goodput or --watts carries no interval.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
from typing import Any, Mapping, Sequence

import yaml

from models.base.errors import AnalysisError
from sharding.costmodel import Hardware, load_hardware

CONF_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf"
DEFAULTS_FILE = CONF_DIR / "plan_costs.yaml"
REGIONS_FILE = CONF_DIR / "regions.yaml"
ALL = "*"  # the key of a --price / --watts value that applies to every hardware type
OBJECTIVES = ("time", "cost", "energy", "carbon")


@dataclasses.dataclass(frozen=True)
class Sourced:
    """One assumed number, where it comes from and when it was taken (None: not stated)."""

    value: float | None
    source: str
    as_of: str | None = None
    interval: tuple[float, float] | None = None  # 90% interval where the number is uncertain

    def source_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "as_of": self.as_of}
        if self.interval is not None:
            out["interval"] = list(self.interval)
        return out


def _user(value: float, flag: str) -> Sourced:
    return Sourced(value, f"{flag} {value:g} (given on the command line)")


# ---- the conf files ------------------------------------------------------------------------------
def _read_yaml(path: pathlib.Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise AnalysisError(f"cost defaults file not found: {path}") from None
    except yaml.YAMLError as e:
        raise AnalysisError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise AnalysisError(f"{path} must be a mapping")
    return data


@functools.lru_cache(maxsize=1)
def defaults() -> dict[str, Sourced | str]:
    """conf/plan_costs.yaml: the goodput (with its interval), the PUE and the default grid region."""
    data = _read_yaml(DEFAULTS_FILE)
    out: dict[str, Sourced | str] = {}
    for key in ("goodput", "pue"):
        item = data.get(key)
        if not isinstance(item, Mapping) or "value" not in item or "source" not in item:
            raise AnalysisError(f"{DEFAULTS_FILE}: {key} needs value and source")
        iv = item.get("interval")
        out[key] = Sourced(
            float(item["value"]),
            " ".join(str(item["source"]).split()),
            str(item.get("as_of")) if item.get("as_of") is not None else None,
            None if iv is None else (float(iv[0]), float(iv[1])),
        )
    out["grid_region"] = str(data.get("grid_region", "world"))
    return out


@functools.lru_cache(maxsize=1)
def regions() -> dict[str, Sourced]:
    """conf/regions.yaml: region name -> grid intensity in kg CO2e per kWh, with its source."""
    data = _read_yaml(REGIONS_FILE)
    source, as_of = str(data.get("source", "")), data.get("as_of")
    table = data.get("regions")
    if not isinstance(table, Mapping) or not table:
        raise AnalysisError(f"{REGIONS_FILE}: no regions")
    out = {}
    for name, row in table.items():
        if not isinstance(row, Mapping) or "kg_per_kwh" not in row:
            raise AnalysisError(f"{REGIONS_FILE}: region {name!r} needs kg_per_kwh")
        label = f"{row.get('name', name)}: {row.get('source', source)}"
        out[str(name).lower()] = Sourced(
            float(row["kg_per_kwh"]), label, str(row.get("as_of", as_of)) if as_of else None
        )
    return out


# ---- what the user overrides ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CostOptions:
    """The flags that override the conf defaults (None / empty: the default). `watts` and `prices`
    map a catalogue name (h100-sxm, after aliases) or ALL to W and USD per device-hour."""

    goodput: float | None = None
    pue: float | None = None
    grid_intensity: float | None = None  # kg CO2e per kWh
    region: str | None = None
    watts: Mapping[str, float] = dataclasses.field(default_factory=dict)
    prices: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.goodput is not None and not 0 < self.goodput <= 1:
            raise AnalysisError(f"--goodput is a share of the wall-clock in (0, 1] (got {self.goodput:g})")
        if self.pue is not None and not (math.isfinite(self.pue) and self.pue >= 1):
            raise AnalysisError(f"--pue is facility over IT energy, >= 1 (got {self.pue:g})")
        if self.grid_intensity is not None and not (
            math.isfinite(self.grid_intensity) and self.grid_intensity >= 0
        ):
            raise AnalysisError(f"--grid-intensity is kg CO2e per kWh, >= 0 (got {self.grid_intensity:g})")
        if self.grid_intensity is not None and self.region is not None:
            raise AnalysisError("give --grid-intensity or --region, not both")
        if self.region is not None:
            grid_intensity_of(self.region)  # unknown region: one error line before any planning

    def price_for(self, hw: Hardware) -> float | None:
        return self.prices.get(hw.name, self.prices.get(ALL))

    def watts_for(self, hw: Hardware) -> float | None:
        return self.watts.get(hw.name, self.watts.get(ALL))


def grid_intensity_of(region: str) -> Sourced:
    """The grid intensity of a conf/regions.yaml region (one error line naming the known ones)."""
    table = regions()
    row = table.get(str(region).strip().lower())
    if row is None:
        raise AnalysisError(
            f"unknown region {region!r}; known: {', '.join(sorted(table))} "
            "(or give --grid-intensity KG_PER_KWH)"
        )
    return row


def parse_per_hardware(text: str, flag: str, own: Sequence[str] = ()) -> dict[str, float]:
    """`--price h100=2.49,a100-80gb=1.8` (or one number for every hardware type) -> {catalogue
    name: value}; names go through the catalogue's aliases (h100 -> h100-sxm); `own`: the names of
    the user's own hardware files in this request, accepted as they are."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, sep, value = part.rpartition("=")
        try:
            v = float(value)
        except ValueError:
            raise AnalysisError(
                f"{flag} {text!r}: {part!r} is not NAME=NUMBER (e.g. {flag} h100=2.49,a100-80gb=1.8)"
            ) from None
        if not (math.isfinite(v) and v > 0):
            raise AnalysisError(f"{flag} {text!r}: {part!r} must be a positive number")
        name = name.strip()
        key = ALL if not sep else name if name in own else load_hardware(name).name
        if key in out:
            raise AnalysisError(f"{flag} {text!r} gives {name or 'every hardware'} twice")
        out[key] = v
    if not out:
        raise AnalysisError(f"{flag} needs NAME=NUMBER[,NAME=NUMBER...] or one number")
    return out


# ---- the assumptions of one hardware type ---------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Assumptions:
    """Everything a device-hour is priced with on one hardware type, each with its source."""

    hardware: str
    unit: str  # how a device-hour is named in text: GPU-hours, chip-hours
    goodput: Sourced
    watts: Sourced
    pue: Sourced
    grid_intensity: Sourced
    price_per_hour: Sourced
    region: str | None = None

    @property
    def estimated_power(self) -> bool:
        return self.watts.interval is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "goodput": self.goodput.value,
            "watts": self.watts.value,
            "pue": self.pue.value,
            "grid_intensity": self.grid_intensity.value,
            "price_per_hour": self.price_per_hour.value,
            "unit": self.unit,
            "region": self.region,
            "sources": {
                k: getattr(self, k).source_dict()
                for k in ("goodput", "watts", "pue", "grid_intensity", "price_per_hour")
            },
        }

    def text(self) -> str:
        """One line: the assumptions in words."""
        price = (
            f"${self.price_per_hour.value:g}/{self.unit[:-1]}"
            if self.price_per_hour.value is not None
            else f"no price (--price {self.hardware}=USD)"
        )
        where = f" ({self.region})" if self.region else ""
        est = " (an estimate: no datasheet value)" if self.estimated_power else ""
        watts = (
            f"{self.watts.value:g} W per device{est}"
            if self.watts.value is not None
            else f"no power (--watts {self.hardware}=W)"
        )
        return (
            f"{self.hardware}: goodput {self.goodput.value:g}, {watts}, "
            f"PUE {self.pue.value:g}, grid {self.grid_intensity.value:g} kg CO2e/kWh{where}, {price}"
        )


def assumptions_for(hw: Hardware, opts: CostOptions | None = None) -> Assumptions:
    """The assumptions of `hw` under the user's overrides `opts` (None: all defaults)."""
    opts = opts or CostOptions()
    d = defaults()
    goodput = _user(opts.goodput, "--goodput") if opts.goodput is not None else d["goodput"]
    pue = _user(opts.pue, "--pue") if opts.pue is not None else d["pue"]
    region = None
    if opts.grid_intensity is not None:
        grid = _user(opts.grid_intensity, "--grid-intensity")
    else:
        region = (opts.region or d["grid_region"]).strip().lower()
        grid = grid_intensity_of(region)
    w = opts.watts_for(hw)
    if w is not None:
        watts = _user(w, "--watts")
    elif hw.power_w is not None:
        watts = Sourced(
            hw.power_w,
            hw.sources.get("power_w", "the hardware file"),
            hw.as_of.get("power_w"),
            hw.power_w_range,
        )
    else:  # energy and carbon stay unknown, as dollars do without a price
        watts = Sourced(None, f"no power_w in the hardware file (--watts {hw.name}=W)")
    p = opts.price_for(hw)
    if p is not None:
        price = _user(p, "--price")
    else:
        price = Sourced(
            hw.price_per_hour,
            hw.sources.get("price_per_hour", "no price in the hardware file"),
            hw.as_of.get("price_per_hour"),
        )
    return Assumptions(hw.name, hw.hour_unit, goodput, watts, pue, grid, price, region)


# ---- the figures ---------------------------------------------------------------------------------
def _log_side(*factors: float) -> float:
    """exp(root sum of squares of ln(factor)): independent multiplicative errors on one side."""
    return math.exp(math.sqrt(sum(math.log(f) ** 2 for f in factors)))


@dataclasses.dataclass(frozen=True)
class Costs:
    """The cost figures of one planned run (keys of its JSON row)."""

    device_hours: float
    device_hours_interval: tuple[float, float]
    days: float
    days_interval: tuple[float, float]
    energy_mwh: float | None  # None: the hardware states no power (--watts)
    energy_mwh_interval: tuple[float, float] | None
    tco2eq: float | None
    tco2eq_interval: tuple[float, float] | None
    cost_usd: float | None
    cost_usd_interval: tuple[float, float] | None
    assumptions: Assumptions

    def value(self, objective: str) -> float | None:
        """The figure an objective minimises: days, dollars, MWh or t CO2e."""
        return {
            "time": self.days,
            "cost": self.cost_usd,
            "energy": self.energy_mwh,
            "carbon": self.tco2eq,
        }[objective]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("device_hours", "days", "energy_mwh", "tco2eq", "cost_usd"):
            iv = getattr(self, f"{k}_interval")
            out[k] = getattr(self, k)
            out[f"{k}_interval"] = None if iv is None else list(iv)
        out["assumptions"] = self.assumptions.as_dict()
        return out

    def text(self) -> str:
        """One line: device-hours, energy, carbon and dollars with their intervals."""
        a = self.assumptions
        iv = self.device_hours_interval
        ci = self.cost_usd_interval
        cost = (
            f"${money(self.cost_usd)} [{money(ci[0])}, {money(ci[1])}]"
            if self.cost_usd is not None
            else f"$ unknown (no price for {a.hardware}: --price {a.hardware}=USD)"
        )
        e, c = self.energy_mwh_interval, self.tco2eq_interval
        if self.energy_mwh is None:
            energy = f"energy and CO2e unknown (no power for {a.hardware}: --watts {a.hardware}=W)"
        else:
            energy = (
                f"{self.energy_mwh:.3g} [{e[0]:.3g}, {e[1]:.3g}] MWh "
                f"({a.watts.value:g} W x PUE {a.pue.value:g}), "
                f"{self.tco2eq:.3g} [{c[0]:.3g}, {c[1]:.3g}] t CO2e "
                f"({a.grid_intensity.value:g} kg/kWh{', ' + a.region if a.region else ''})"
            )
        return (
            f"cost: {self.device_hours:.3g} [{iv[0]:.3g}, {iv[1]:.3g}] {a.unit} "
            f"(goodput {a.goodput.value:g}), {cost}, {energy}"
        )


def money(v: float) -> str:
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def price_run(
    train_seconds: float, n_devices: int, a: Assumptions, mfu_ratio: tuple[float, float] | None
) -> Costs:
    """The cost figures of `train_seconds` of training at full speed on `n_devices` devices.
    `mfu_ratio`: the cost model's (lo, hi) measured / predicted MFU, or None (no MFU error model)."""
    g = a.goodput
    hours = train_seconds / 3600 * n_devices / g.value
    up, down = [], []  # multiplicative error factors (>= 1) on the high and the low side
    if mfu_ratio is not None:
        up.append(1 / min(mfu_ratio[0], 1.0))
        down.append(max(mfu_ratio[1], 1.0))
    if g.interval is not None:
        up.append(g.value / min(g.interval[0], g.value))
        down.append(max(g.interval[1], g.value) / g.value)
    hi, lo = _log_side(*up) if up else 1.0, _log_side(*down) if down else 1.0
    dh = (hours / lo, hours * hi)
    energy = e_iv = None
    if a.watts.value is not None:
        energy = hours * a.watts.value * a.pue.value / 1e6
        e_hi, e_lo = hi, lo
        if a.watts.interval is not None:
            e_hi = _log_side(*up, max(a.watts.interval[1], a.watts.value) / a.watts.value)
            e_lo = _log_side(*down, a.watts.value / min(a.watts.interval[0], a.watts.value))
        e_iv = (energy / e_lo, energy * e_hi)
    k = a.grid_intensity.value
    price = a.price_per_hour.value
    return Costs(
        device_hours=hours,
        device_hours_interval=dh,
        days=hours / 24 / n_devices,
        days_interval=(dh[0] / 24 / n_devices, dh[1] / 24 / n_devices),
        energy_mwh=energy,
        energy_mwh_interval=e_iv,
        tco2eq=None if energy is None else energy * k,
        tco2eq_interval=None if e_iv is None else (e_iv[0] * k, e_iv[1] * k),
        cost_usd=None if price is None else hours * price,
        cost_usd_interval=None if price is None else (dh[0] * price, dh[1] * price),
        assumptions=a,
    )
