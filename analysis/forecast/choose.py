"""Rungs and the probability that each of their runs ends best.

A rung is the runs whose settings differ only in the chosen key (`--choose optim.lr`): equal in
every other setting (N, total_steps, optim.*, ...; floats compared to `DIGITS` significant digits).
Each run's final ln loss is Gaussian around its forecast (`log_sd`: 0 for a finished run), the runs
independent; `p_best` is the share of `DRAWS` joint draws (fixed seed) in which the run has the
lowest final loss. A rung's choice is its run with the highest p_best.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

DIGITS = 6
DRAWS = 20000
SEED = 0


def _norm(v: Any) -> Any:
    if isinstance(v, (float, np.floating)) and math.isfinite(v):
        return float(f"{float(v):.{DIGITS}g}")
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return float(f"{float(v):.{DIGITS}g}")
    return str(v)


def rung_key(settings: Mapping[str, Any], key: str) -> tuple:
    """The settings that make the rung: all of them but `key`, normalised."""
    return tuple(sorted((k, _norm(v)) for k, v in settings.items() if k != key))


def p_best(mu: Sequence[float], sd: Sequence[float], draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """P(run i has the lowest value) for independent N(mu_i, sd_i^2) (ties share the draw)."""
    mu, sd = np.asarray(mu, float), np.asarray(sd, float)
    if mu.size == 1:
        return np.ones(1)
    z = np.random.default_rng(seed).standard_normal((draws, mu.size))
    x = mu + z * sd
    low = x == x.min(axis=1, keepdims=True)
    return (low / low.sum(axis=1, keepdims=True)).mean(axis=0)


@dataclass(frozen=True)
class Member:
    """One run of a rung: its value of the chosen key, its forecast and its chance to end best."""

    run: str
    value: Any
    final_loss: float
    p_best: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Choice:
    """A rung's pick (its run most likely to end best) and every member's chance."""

    run: str
    value: Any
    p_best: float
    rung: dict
    members: tuple[Member, ...]

    def to_dict(self) -> dict:
        return {**asdict(self), "members": [m.to_dict() for m in self.members]}
