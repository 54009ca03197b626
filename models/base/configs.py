"""Config parsing shared by every config dataclass: Hydra mappings in, validated dataclasses out."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from models.base.errors import ConfigError


def to_plain(cfg: Any) -> Any:
    """DictConfig / ListConfig -> plain resolved Python containers; anything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf  # lazy: the base imports nothing heavy

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return cfg


def config_from_mapping(cls: type, m: Mapping[str, Any], section: str) -> Any:
    """`cls(**m)` for a config dataclass, after checking every key is one of its fields (the error
    names the section and the bad key), then `validate()` if the class has one."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(m) - names)
    if unknown:
        raise ConfigError(f"unknown {section} key(s) {unknown}; known: {sorted(names)}")
    cfg = cls(**dict(m))
    if hasattr(cfg, "validate"):
        cfg.validate()
    return cfg
