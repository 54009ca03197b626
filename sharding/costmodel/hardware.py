"""Accelerator catalogue: `conf/hardware/<name>.yaml` or a user's own YAML file.

Each YAML gives per-device numbers (the device is what the framework sees as one rank: one GPU,
one MI250X graphics compute die, one TPU chip) and a `sources:` mapping saying where each number
comes from. Bandwidths are per direction, in bytes/s.

This catalogue is the one table of device peaks: the cost model reads `peak_flops` (bf16), and the
trainer's MFU (experiments/train/peak_flops.py) finds its device through `device_kinds` (what JAX
reports as `device.device_kind`) with `hardware_for_device_kind` and reads the peak of its
compute dtype (`peak_flops_for`).
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
        for k in fields - {"name", "sources", "devices_per_node", "device_kinds", "nics_per_node"}:
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

    def peak_flops_for(self, dtype: str) -> float | None:
        """Dense peak FLOP/s of matmuls in compute dtype `dtype` ("bfloat16" or "float32");
        None when the catalogue has no figure for it."""
        return {Dtype.BFLOAT16: self.peak_flops, Dtype.FLOAT32: self.peak_flops_float32}.get(dtype)


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
