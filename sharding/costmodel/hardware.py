"""Accelerator catalogue: `conf/hardware/<name>.yaml` or a user's own YAML file.

Each YAML gives per-device numbers (the device is what the framework sees as one rank: one GPU,
one MI250X graphics compute die, one TPU chip) and a `sources:` mapping saying where each number
comes from. Bandwidths are per direction, in bytes/s.

This catalogue is the one table of device peaks: the cost model reads `peak_flops` (bf16), and the
trainer's MFU (experiments/train/peak_flops.py) finds its device through `device_kinds` (what JAX
reports as `device.device_kind`) with `hardware_for_device_kind` and reads the peak of its
compute dtype (`peak_flops_for`).

What a device-hour costs (`plan`'s energy, carbon and dollars, analysis/planning/costs.py):
`power_w` (the device's datasheet maximum power, W), `power_w_range` (only where the power is an
estimate: its plausible [lo, hi]), `price_per_hour` (USD per device-hour from a public price list;
null where none is listed), `hour_unit` (how a device-hour is named: GPU-hours, chip-hours on a
TPU), each number with its `sources:` entry and the date it was taken in `as_of:`.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any, Mapping

import yaml

from models.base.configs import is_int
from models.config import Dtype
from sharding.costmodel.spec import LayoutError

CATALOGUE_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf" / "hardware"
ALIASES = {
    "h100": "h100-sxm",
    "a100": "a100-80gb",
    "mi250": "mi250x",
    "v5p": "tpu-v5p",
    "v5e": "tpu-v5e",
    "v4": "tpu-v4",
    "v6e": "tpu-v6e",
}
_REQUIRED = ("peak_flops", "hbm_bytes", "hbm_bw", "devices_per_node", "intra_node_bw", "inter_node_bw")


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One accelerator type and the node it sits in.

    intra_node_bw: per-device, per-direction bandwidth to peers in its node (NVLink/xGMI/ICI).
    inter_node_bw: per-device share of the node's network bandwidth, per direction
    (DGX A100: 8 × 200 Gb/s HDR InfiniBand for 8 GPUs = 25 GB/s per GPU).
    """

    name: str
    peak_flops: float  # dense bf16 FLOP/s per device
    hbm_bytes: float
    hbm_bw: float
    devices_per_node: int
    intra_node_bw: float
    inter_node_bw: float
    intra_node_latency_s: float = 5e-6
    inter_node_latency_s: float = 10e-6
    host_bw: float = 25e9  # device<->host (PCIe) for optimizer offload
    # network adapters per node; None: one per device (DGX-style rails). With fewer, a device
    # that sends alone (a pipeline hop) gets a whole adapter, node bandwidth / adapters
    nics_per_node: int | None = None
    # dense FLOP/s of float32 matmuls as XLA runs them by default (TF32 tensor cores on NVIDIA,
    # bf16 passes on TPU); None = not catalogued
    peak_flops_float32: float | None = None
    # lower-cased substrings of JAX's `device.device_kind` that name this chip (the longest
    # match over the catalogue wins, so "tpu v5 lite" beats "tpu v5")
    device_kinds: tuple[str, ...] = ()
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)
    # what a device-hour costs (module docstring): power in W, its range where it is an estimate,
    # USD per device-hour (None: no list price), the name of a device-hour, and when each was taken
    power_w: float | None = None
    power_w_range: tuple[float, float] | None = None
    price_per_hour: float | None = None
    hour_unit: str = "GPU-hours"
    as_of: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any], origin: str = "<mapping>") -> "Hardware":
        missing = [k for k in _REQUIRED if k not in m]
        if missing:
            raise LayoutError(f"hardware file {origin} lacks {missing}; required: {list(_REQUIRED)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(m) - fields)
        if unknown:
            raise LayoutError(f"hardware file {origin} has unknown key(s) {unknown}")
        kw = dict(m)
        kw.setdefault("name", pathlib.Path(origin).stem)
        kw["device_kinds"] = _device_kinds(kw.get("device_kinds"), origin)
        _cost_fields(kw, origin)
        for k in fields - {
            "name",
            "sources",
            "devices_per_node",
            "device_kinds",
            "nics_per_node",
            *_COST_KEYS,
        }:
            if k in kw:
                try:
                    kw[k] = float(kw[k])
                except (TypeError, ValueError):
                    raise LayoutError(f"hardware {origin}: {k} must be a number (got {kw[k]!r})")
                if not kw[k] > 0:
                    raise LayoutError(f"hardware {origin}: {k} must be > 0 (got {kw[k]!r})")
        dpn = kw["devices_per_node"]
        if not is_int(dpn) or dpn <= 0:
            raise LayoutError(f"hardware {origin}: devices_per_node must be a positive integer")
        nics = kw.get("nics_per_node")
        if nics is not None and (not is_int(nics) or nics <= 0):
            raise LayoutError(f"hardware {origin}: nics_per_node must be a positive integer")
        kw["sources"] = dict(kw.get("sources") or {})
        return cls(**kw)

    def cost_source(self, key: str) -> dict[str, str | None]:
        """{source, as_of} of one cost field (`power_w`, `price_per_hour`) as the file states it."""
        return {"source": self.sources.get(key), "as_of": self.as_of.get(key)}

    def peak_flops_for(self, dtype: str) -> float | None:
        """Dense peak FLOP/s of matmuls in compute dtype `dtype` ("bfloat16" or "float32");
        None when the catalogue has no figure for it."""
        return {Dtype.BFLOAT16: self.peak_flops, Dtype.FLOAT32: self.peak_flops_float32}.get(dtype)


_COST_KEYS = ("power_w", "power_w_range", "price_per_hour", "hour_unit", "as_of")


def _cost_fields(kw: dict[str, Any], origin: str) -> None:
    """Check and convert the cost fields of a hardware mapping in place (absent or null: None)."""
    for k in ("power_w", "price_per_hour"):
        v = kw.get(k)
        if v is None:
            continue
        try:
            kw[k] = float(v)
        except (TypeError, ValueError):
            raise LayoutError(f"hardware {origin}: {k} must be a number or null (got {v!r})") from None
        if not kw[k] > 0:
            raise LayoutError(f"hardware {origin}: {k} must be > 0 (got {v!r})")
    rng = kw.get("power_w_range")
    if rng is not None:
        try:
            lo, hi = (float(x) for x in rng)
        except (TypeError, ValueError):
            raise LayoutError(
                f"hardware {origin}: power_w_range must be [lo, hi] in W (got {rng!r})"
            ) from None
        if not 0 < lo <= (kw.get("power_w") or lo) <= hi:
            raise LayoutError(f"hardware {origin}: power_w_range {rng!r} must bracket power_w")
        kw["power_w_range"] = (lo, hi)
    unit = kw.get("hour_unit", "GPU-hours")
    if not isinstance(unit, str) or not unit.strip():
        raise LayoutError(f"hardware {origin}: hour_unit must be a name such as GPU-hours (got {unit!r})")
    kw["hour_unit"] = unit.strip()
    as_of = kw.get("as_of") or {}
    if not isinstance(as_of, Mapping):
        raise LayoutError(f"hardware {origin}: as_of must map a field to the date it was taken")
    kw["as_of"] = {str(k): str(v) for k, v in as_of.items()}


def _device_kinds(value: Any, origin: str) -> tuple[str, ...]:
    """`device_kinds` as a tuple of lower-cased strings (a YAML list, or one string)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in items):
        raise LayoutError(
            f"hardware {origin}: device_kinds must be a list of non-empty strings (got {value!r})"
        )
    return tuple(v.strip().lower() for v in items)


def catalogue_names() -> list[str]:
    return sorted(p.stem for p in CATALOGUE_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str | pathlib.Path) -> Hardware:
    """A catalogue name (`h100-sxm`, alias `h100`) or a path to the user's own YAML."""
    key = str(name_or_path)
    path = pathlib.Path(key)
    if not (key.endswith((".yaml", ".yml")) or path.is_file()):
        path = CATALOGUE_DIR / f"{ALIASES.get(key.lower(), key.lower())}.yaml"
        if not path.is_file():
            raise LayoutError(
                f"unknown hardware {key!r}; known: {', '.join(catalogue_names())} (or pass a YAML file path)"
            )
    if not path.is_file():
        raise LayoutError(f"hardware file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LayoutError(f"hardware file {path} is not valid YAML: {str(e).splitlines()[0]}")
    if not isinstance(data, Mapping):
        raise LayoutError(f"hardware file {path} must be a mapping of keys to values")
    return Hardware.from_mapping(data, origin=str(path))


@functools.lru_cache(maxsize=1)
def _catalogue() -> tuple[Hardware, ...]:
    """Every catalogue entry, read once per process (catalogue_names order)."""
    return tuple(load_hardware(name) for name in catalogue_names())


def hardware_for_device_kind(device_kind: str) -> Hardware | None:
    """The catalogue entry naming `device_kind` (JAX's `device.device_kind`, any case), or None.

    An entry matches when one of its `device_kinds` is a substring of the lower-cased kind; among
    matches the longest substring wins (ties: catalogue order), so "TPU v5 lite" is a v5e and
    not a v5p ("tpu v5"), and "NVIDIA A100-SXM4-40GB" the 40 GB A100 rather than the generic one.
    """
    kind = device_kind.lower()
    best, best_len = None, 0
    for hw in _catalogue():
        for key in hw.device_kinds:
            if key in kind and len(key) > best_len:
                best, best_len = hw, len(key)
    return best
