"""The one method protocol: every family registers its methods here, and `Fit`/`Prediction` are
the results every method returns.

A method is a name in a family (point laws, loss curves, forecasts, hyperparameter laws,
downstream, RL, recipe comparison) with the backtest protocols that score it and its role there:
the protocol's `default` (what the commands use without flags), its `baseline` (the simple method
every default must beat, docs/zoo.md) or a `candidate` (kept because the backtest zoo shows
it best on at least one dataset). `register` adds one; `methods()` lists them (what
`analysis.methods()`, the commands' `--law` choices and the zoo read); `get` finds one.

`Method(table, **options)` fits and returns a `Fit`: `.predict(**inputs) -> Prediction`,
`.summary()`, `.to_dict()`, `.plot(ax=None)`. The family's own record (a point law's `FitResult`,
an `HparamFit`, ...) is `Fit.result`; the family hands the registry three functions: `fit`
(table, **options) -> record, `predict` (record, inputs) -> Prediction and `plot`
(record, table, ax) -> Figure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from analysis.core.validation import PREDICTION_LEVEL
from models.base.errors import AnalysisError


class Family(enum.StrEnum):
    POINT = "point"  # one row per run: L(N, D), repeated data, MoE, the loss frontier
    CURVE = "curve"  # a run's loss against step under its LR schedule
    FORECAST = "forecast"  # a running run's final loss from its curve so far
    HPARAM = "hparam"  # the optimal learning rate / batch size per scale
    DOWNSTREAM = "downstream"  # task accuracy from loss and scale
    RL = "rl"  # RL reward against compute
    COMPARE = "compare"  # the compute multiplier between two recipes


class Role(enum.StrEnum):
    DEFAULT = "default"
    BASELINE = "baseline"
    CANDIDATE = "candidate"


@dataclass(frozen=True)
class Prediction:
    """A prediction with its interval: `mean`, `lo`, `hi` at `level` (arrays shaped as the inputs;
    0-d for scalar inputs, so `float(p.mean)` works)."""

    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    level: float = PREDICTION_LEVEL

    def __post_init__(self) -> None:
        for k in ("mean", "lo", "hi"):
            object.__setattr__(self, k, np.asarray(getattr(self, k), dtype=float))

    def __float__(self) -> float:
        if self.mean.size != 1:
            raise TypeError(f"a prediction of {self.mean.size} values has no single float value")
        return float(self.mean.reshape(()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean.tolist(),
            "lo": self.lo.tolist(),
            "hi": self.hi.tolist(),
            "level": self.level,
        }

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({k: np.atleast_1d(getattr(self, k)) for k in ("mean", "lo", "hi")})

    def __repr__(self) -> str:
        rows = ", ".join(
            f"{m:.5g} [{lo:.5g}, {hi:.5g}]"
            for m, lo, hi in zip(*(np.atleast_1d(v) for v in (self.mean, self.lo, self.hi)))
        )
        return f"Prediction({rows}; {self.level:.0%})"


def _no_plot(record: Any, table: pd.DataFrame | None, ax: Any) -> Any:
    raise AnalysisError("this method has no plot")


@dataclass(frozen=True)
class Method:
    """One registered method (see the module docstring)."""

    name: str
    family: Family
    protocols: tuple[str, ...]
    role: Role
    fit: Callable[..., Any] = field(repr=False)  # (table, **options) -> the family's record
    predict: Callable[[Any, Mapping[str, Any]], Prediction] | None = field(default=None, repr=False)
    plot: Callable[[Any, pd.DataFrame | None, Any], Any] = field(default=_no_plot, repr=False)
    doc: str = ""

    def __call__(self, table: pd.DataFrame | None = None, **options: Any) -> "Fit":
        return Fit(self, self.fit(table, **options), table)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": str(self.family),
            "protocols": list(self.protocols),
            "role": str(self.role),
            "doc": self.doc,
        }


def _as_input(v: Any) -> Any:
    """A prediction input as a float array; a name (a run, a base model, a domain) stays a str."""
    if isinstance(v, str):
        return v
    return np.atleast_1d(np.asarray(v, float))


@dataclass(frozen=True)
class Fit:
    """A fitted method: `.predict(**inputs)`, `.summary()`, `.to_dict()`, `.plot(ax=None)`;
    `.result` is the family's own record."""

    method: Method
    result: Any
    table: pd.DataFrame | None = field(default=None, repr=False)

    def predict(self, **inputs: Any) -> Prediction:
        if self.method.predict is None:
            raise AnalysisError(
                f"{self.method.family} method {self.method.name} predicts nothing at new inputs"
            )
        p = self.method.predict(self.result, {k: _as_input(v) for k, v in inputs.items()})
        numeric = [v for v in inputs.values() if not isinstance(v, str)]
        if numeric and all(np.ndim(v) == 0 for v in numeric) and np.size(p.mean) == 1:  # scalars in, out
            p = Prediction(*(np.asarray(v).reshape(()) for v in (p.mean, p.lo, p.hi)), level=p.level)
        return p

    def summary(self) -> str:
        s = getattr(self.result, "summary", None)
        body = s() if callable(s) else repr(self.result)
        return f"{body}\n  ({self.method.family} method {self.method.name}, {self.method.role})"

    def to_dict(self) -> dict[str, Any]:
        d = self.result.to_dict()  # the family's JSON, and the registry's entry beside it
        return {**(d if isinstance(d, dict) else {}), "registry": self.method.to_dict()}

    def plot(self, ax: Any = None) -> Any:
        """A matplotlib Figure of the fit against its data (on `ax` when given)."""
        return self.method.plot(self.result, self.table, ax)

    def __getattr__(self, name: str) -> Any:  # the record's own fields (fit.params, fit.ci, ...)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["result"], name)


_REGISTRY: dict[tuple[Family, str], Method] = {}


def register(method: Method) -> Method:
    """Add (or replace) a method; the one way a method reaches the commands, the zoo and `auto`."""
    _REGISTRY[(method.family, method.name)] = method
    return method


def methods(family: Family | str | None = None, protocol: str | None = None) -> list[Method]:
    """The registered methods (of one family, or scored by one protocol), in registration order."""
    out = list(_REGISTRY.values())
    if family is not None:
        out = [m for m in out if m.family == Family(family)]
    if protocol is not None:
        out = [m for m in out if protocol in m.protocols]
    return out


def get(name: str, family: Family | str) -> Method:
    try:
        return _REGISTRY[(Family(family), name)]
    except KeyError:
        known = ", ".join(m.name for m in methods(family))
        raise AnalysisError(f"unknown {family} method {name!r}; choose from {known}") from None


def names(family: Family | str, protocol: str | None = None) -> tuple[str, ...]:
    return tuple(m.name for m in methods(family, protocol))
