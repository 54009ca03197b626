"""Accelerator catalogue: `conf/hardware/<name>.yaml` or a user's own YAML file.

Each YAML gives per-device numbers (the device is what the framework sees as one rank: one GPU,
one MI250X graphics compute die, one TPU chip) and a `sources:` mapping saying where each number
comes from. Bandwidths are per direction, in bytes/s.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

import yaml

from sharding.costmodel.spec import LayoutError

CATALOGUE_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf" / "hardware"
ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "mi250": "mi250x", "v5p": "tpu-v5p",
           "v5e": "tpu-v5e", "v4": "tpu-v4"}
_REQUIRED = ("peak_flops", "hbm_bytes", "hbm_bw", "devices_per_node", "intra_node_bw",
             "inter_node_bw")


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
        for k in fields - {"name", "sources", "devices_per_node"}:
            if k in kw:
                try:
                    kw[k] = float(kw[k])
                except (TypeError, ValueError):
                    raise LayoutError(f"hardware {origin}: {k} must be a number (got {kw[k]!r})")
                if not kw[k] > 0:
                    raise LayoutError(f"hardware {origin}: {k} must be > 0 (got {kw[k]!r})")
        dpn = kw["devices_per_node"]
        if isinstance(dpn, bool) or not isinstance(dpn, int) or dpn <= 0:
            raise LayoutError(f"hardware {origin}: devices_per_node must be a positive integer")
        kw["sources"] = dict(kw.get("sources") or {})
        return cls(**kw)


def catalogue_names() -> list[str]:
    return sorted(p.stem for p in CATALOGUE_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str | pathlib.Path) -> Hardware:
    """A catalogue name (`h100-sxm`, alias `h100`) or a path to the user's own YAML."""
    key = str(name_or_path)
    path = pathlib.Path(key)
    if not (key.endswith((".yaml", ".yml")) or path.is_file()):
        path = CATALOGUE_DIR / f"{ALIASES.get(key.lower(), key.lower())}.yaml"
        if not path.is_file():
            raise LayoutError(f"unknown hardware {key!r}; known: {', '.join(catalogue_names())} "
                              f"(or pass a YAML file path)")
    if not path.is_file():
        raise LayoutError(f"hardware file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LayoutError(f"hardware file {path} is not valid YAML: {str(e).splitlines()[0]}")
    if not isinstance(data, Mapping):
        raise LayoutError(f"hardware file {path} must be a mapping of keys to values")
    return Hardware.from_mapping(data, origin=str(path))
