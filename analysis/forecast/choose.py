"""Rungs and the probability that each of their runs ends best.

A rung is the runs whose settings differ only in the chosen key (`--choose optim.lr`): equal in
every other setting (N, total_steps, optim.*, ...; floats compared to `DIGITS` significant digits;
run lengths within `LENGTH_RTOL` of each other are one: the logs of one planned length can end a
few steps apart).
Each run's final ln loss is Gaussian around its forecast (`log_sd`: 0 for a finished run), the runs
independent; `p_best` is the share of `DRAWS` joint draws (fixed seed) in which the run has the
lowest final loss. A rung's choice is its run with the highest p_best.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from analysis.core import validation

DIGITS = 6
LENGTH_RTOL = 0.01
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


def rungs(settings: Mapping[str, Mapping[str, Any]], key: str) -> dict[tuple, list[str]]:
    """{rung key: its runs} of runs given as {run: settings}, the runs of each rung sorted by name
    and the rungs by their first run (module docstring)."""
    names = sorted(settings)
    T = np.array([float(settings[r].get("total_steps", math.nan)) for r in names])
    ok = np.isfinite(T) & (T > 0)
    if ok.any():
        lv, g = validation.level_index(T[ok], LENGTH_RTOL)
        T[ok] = lv[g]
    out: dict[tuple, list[str]] = {}
    for r, t in zip(names, T):
        s = {**settings[r], "total_steps": t} if math.isfinite(t) else settings[r]
        out.setdefault(rung_key(s, key), []).append(r)
    return out


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


def choices(
    settings: Mapping[str, Mapping[str, Any]], forecasts: Sequence[Any], key: str
) -> tuple[Choice, ...]:
    """Each rung's choice among runs given as {run: settings}, from their forecasts (`RunForecast`s:
    run, final_loss, log_sd, value)."""
    by_run = {f.run: f for f in forecasts}
    out = []
    for rk, members in rungs({r: settings[r] for r in settings if r in by_run}, key).items():
        fs = [by_run[r] for r in members]
        p = p_best([math.log(f.final_loss) for f in fs], [f.log_sd for f in fs])
        ms = tuple(Member(f.run, f.value, f.final_loss, float(pi)) for f, pi in zip(fs, p))
        best = max(ms, key=lambda m: (m.p_best, -m.final_loss))
        out.append(Choice(best.run, best.value, best.p_best, dict(rk), ms))
    return tuple(out)
