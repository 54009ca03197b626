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


# ---- typed value checks ---------------------------------------------------------------------
# Hydra types a config value by its schema, but a value can still reach a config dataclass from a
# plain dict (sweeps, notebooks, tests), where YAML's `true` is an int to Python: `isinstance(True,
# int)` holds. These checks refuse booleans where numbers are meant and raise one ConfigError line
# that names the key as typed on the command line (`name`) and the range it must be in.


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float that is not a bool and not NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _range(lo: Any, hi: Any, lo_open: bool = False) -> str:
    """` >= lo and <= hi` (either bound may be absent; `> lo` when `lo_open`)."""
    text = "" if lo is None else f" {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        text += f"{' and' if lo is not None else ''} <= {hi}"
    return text


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None, what: str = "") -> int:
    """`value` if it is an integer in [lo, hi], else ConfigError `<name> must be an integer >= lo
    (got ...)`; `what` replaces `an integer >= lo` (e.g. "a positive integer")."""
    if not is_int(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{name} must be {what or 'an integer' + _range(lo, hi)} (got {value!r})")
    return value


def check_float(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    what: str = "",
) -> float:
    """`value` if it is a number (int or float, not NaN) in [lo, hi] ((lo, hi] when `lo_open`),
    else ConfigError `<name> must be a number >= lo and <= hi (got ...)`; `what` replaces
    `a number >= lo ...` (e.g. "a positive number")."""
    ok = is_number(value) and (lo is None or (value > lo if lo_open else value >= lo))
    if not (ok and (hi is None or value <= hi)):
        raise ConfigError(f"{name} must be {what or 'a number' + _range(lo, hi, lo_open)} (got {value!r})")
    return value


def check_choice(name: str, value: Any, choices: Any) -> Any:
    """`value` if it is one of `choices` (a sequence of strings, or a str enum class whose values
    are the strings on disk), else ConfigError `<name> must be one of (...) (got ...)`."""
    allowed = tuple(getattr(c, "value", c) for c in choices)
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {allowed} (got {value!r})")
    return value


def check_bool(name: str, value: Any) -> bool:
    """`value` if it is a bool, else ConfigError `<name> must be true or false`."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false")
    return value
