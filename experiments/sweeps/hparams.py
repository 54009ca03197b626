"""`sweep.hparams: HP.json`: each planned run's learning rate (and batch size) from fitted laws.

HP.json is what `python -m analysis fit-hparams --json` writes; a law there is
ln h* = coef_log . [1, ln x for x in inputs] with inputs among N (parameters), D (tokens) and C
(FLOPs), so the sweep evaluates it without the analysis package (training code never imports
analysis). Only the point value is used here: the interval is the plan's business.

- `optim.*` laws set that key (`optim.lr=...`, 4 significant digits);
- a `train.batch_size` law sets the batch in sequences, rounded to a multiple of the mesh's
  data-parallel size (sharding.data x sharding.fsdp) and at least one per data-parallel rank; the
  run's length is then rounded to whole steps of that batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping

from models.base.errors import ConfigError
from models.base.rundir import HPARAMS_KIND

BATCH_KEY = "train.batch_size"
INPUTS = ("N", "D", "C")
PROBE = "probe"  # sweep.hparams=probe: fit on the LR probe first (hydra_plugins/scalelab_sweeps)


class HparamsError(ConfigError):
    """A `sweep.hparams` file that cannot be used (the message says what to fix)."""


@dataclasses.dataclass(frozen=True)
class PointLaw:
    """One fitted optimum law: ln h* = coef[0] + sum(coef[i] ln inputs[i - 1])."""

    param: str
    inputs: tuple[str, ...]
    coef: tuple[float, ...]

    def __call__(self, N: float, D: float, C: float) -> float:
        x = {"N": N, "D": D, "C": C}
        return math.exp(self.coef[0] + sum(b * math.log(x[i]) for i, b in zip(self.inputs, self.coef[1:])))


def read_laws(path: str | os.PathLike) -> dict[str, PointLaw]:
    """The laws of an HP.json, one-line errors for a missing or foreign file."""
    where = f"sweep.hparams={os.fspath(path)}"
    try:
        with open(path) as f:
            d = json.load(f)
    except FileNotFoundError:
        raise HparamsError(
            f"{where}: file not found; write it with python -m analysis fit-hparams --json"
        ) from None
    except (OSError, ValueError) as e:
        raise HparamsError(f"{where}: cannot read it ({e})") from None
    if not isinstance(d, Mapping) or d.get("kind") != HPARAMS_KIND or not isinstance(d.get("laws"), Mapping):
        raise HparamsError(f"{where} is not a fit-hparams result (python -m analysis fit-hparams --json)")
    out = {}
    for param, law in d["laws"].items():
        if not (param.startswith("optim.") or param == BATCH_KEY):
            raise HparamsError(f"{where}: a sweep can set optim.* and {BATCH_KEY} laws, not {param}")
        try:
            inputs, coef = tuple(law["inputs"]), tuple(float(v) for v in law["coef_log"])
        except (KeyError, TypeError, ValueError):
            raise HparamsError(
                f"{where}: law {param} lacks inputs / coef_log; refit with fit-hparams"
            ) from None
        if set(inputs) - set(INPUTS) or len(coef) != len(inputs) + 1:
            raise HparamsError(f"{where}: law {param} has inputs {inputs}; expected a subset of {INPUTS}")
        out[param] = PointLaw(param, inputs, coef)
    return out


def data_parallel(run_cfg: Mapping[str, Any]) -> int:
    """The batch must split over sharding.data x sharding.fsdp ranks."""
    sh = run_cfg.get("sharding") or {}
    return max(1, int(sh.get("data", 1) or 1)) * max(1, int(sh.get("fsdp", 1) or 1))


def round_batch(value: float, multiple: int) -> int:
    """The nearest multiple of `multiple` (in log terms: x1.5 is rounded up, not x1.4), >= multiple."""
    k = max(1, round(value / multiple))
    return k * multiple


def value_override(param: str, value: float) -> str:
    return f"{param}={value:.4g}"
