"""`fit --law moe`: a mixture-of-experts loss law in N (active parameters), E (experts) and, where
the runs vary it, D, chosen among the forms of `analysis/laws/moe_forms.py` by how each one
extrapolated in N on the runs themselves.

The candidates, simplest first:

- a fixed-token ladder (no D, or one D: Clark et al. 2022's setting): `moe_bilinear` (log-bilinear
  in ln N and ln E, the baseline), `moe_clark` (the same in Clark et al.'s saturating Ê),
  `moe_joint_n` (an irreducible loss plus a power law in N whose coefficient and exponent move with
  ln E, Ludziejewski et al. 2025 at one token count);
- an (N, D, E) ladder (two or more token counts): `moe_bilinear_d` (the baseline: + e ln D) and
  `moe_joint` (Ludziejewski et al.'s joint law).

Each candidate's fit already measures its forward-chaining error in N (fit the runs up to a model
size, predict every larger one, at every cut `validation.forward_cuts` picks; the MoE laws'
`scale` is N). The rule is `--law auto`'s (`selection.fit_chosen`, `validation.choose_against`):
the baseline unless another form beats it by 10% on *every* fold, then the simplest within 10% of
the best, so the choice is never worse than the log-bilinear baseline on the folds it can see. The
chosen law is refitted with the caller's bootstrap; its prediction intervals (`fit --predict`) are
the engine's: bootstrap + run scatter + the drift measured on those folds.

`MoeLaw` is a fitted MoE law read back from `fit --json` for the planner (`plan --moe`): the loss
and its 90% interval at (N, E[, D]).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core import validation
from analysis.core.enums import LawName
from analysis.core.intervals import PredictionError
from analysis.core.table import resolve_inputs
from analysis.laws.fitting import FitResult
from analysis.laws.registry import get_law
from analysis.laws.selection import fit_chosen
from models.base.errors import AnalysisError

MOE = "moe"  # the family word of `fit --law`
FIXED_TOKEN_CANDIDATES = (LawName.MOE_BILINEAR, LawName.MOE_CLARK, LawName.MOE_JOINT_N)
TOKEN_CANDIDATES = (LawName.MOE_BILINEAR_D, LawName.MOE_JOINT)
BASELINE = LawName.MOE_BILINEAR  # the log-bilinear baseline (fixed tokens)
TOKEN_BASELINE = LawName.MOE_BILINEAR_D  # ... and with a token term
MOE_LAWS = frozenset(map(str, FIXED_TOKEN_CANDIDATES + TOKEN_CANDIDATES))
CRITERION = (
    "forward-chaining folds in N: the log-bilinear baseline unless a form beats it by the parsimony "
    "margin on every fold; then the simplest within the margin of the best"
)
TOKEN_RTOL = 0.01  # token counts within 1% of each other are one level (whole steps differ)


def varies_tokens(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> bool:
    """Whether the runs have a token count (D, or C and N) with two or more levels: an (N, D, E)
    ladder. Without one (Clark et al.'s fixed-token ladders) the law is fitted in N and E alone."""
    try:
        vals, _ = resolve_inputs(df, ("N", "D"), columns)
    except AnalysisError:
        return False
    return validation.levels(vals["D"], TOKEN_RTOL).size >= 2


def candidates(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The forms `--law moe` chooses among on this table, simplest first (the baseline first)."""
    order = TOKEN_CANDIDATES if varies_tokens(df, columns) else FIXED_TOKEN_CANDIDATES
    return tuple(map(str, order))


def check_experts(df: pd.DataFrame, columns: Mapping[str, str] | None = None) -> np.ndarray:
    """The experts column (one-line errors: missing, non-numeric, NaN, below 1), checked before
    any candidate is fitted; at least two expert counts are needed to see what experts buy."""
    vals, used = resolve_inputs(df, ("experts",), {k: v for k, v in (columns or {}).items() if k != "loss"})
    e = vals["experts"]
    if np.unique(e).size < 2:
        raise AnalysisError(
            f"every run has experts = {e[0]:g} (column {used['experts']!r}): --law moe needs runs at two "
            "or more expert counts (dense runs count as experts = 1)"
        )
    return e


def fit_moe(df: pd.DataFrame, columns: Mapping[str, str] | None = None, **fit_kwargs) -> FitResult:
    """`fit_law` with the MoE form chosen on the table (module docstring); `law_selection` says which
    and why."""
    check_experts(df, columns)
    order = candidates(df, columns)
    return fit_chosen(
        df, columns, order, order[0], fit_kwargs, criterion=CRITERION, family=MOE, shared_folds=True
    )


def is_moe_law(name: str) -> bool:
    return str(name) in MOE_LAWS


# ---- a fitted law read back (the planner's) -------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MoeLaw:
    """A fitted MoE law from `fit --law moe --json`: loss and 90% prediction interval at (N, E[, D])."""

    law: str
    params: tuple[float, ...]  # public values, the law's `param_names` order
    samples: np.ndarray | None  # (B, P) bootstrap samples, public values
    prediction_error: PredictionError | None
    input_ranges: dict[str, tuple[float, float]]
    source: str
    seed: int = 0

    @property
    def law_obj(self):
        return get_law(self.law)

    @property
    def needs_tokens(self) -> bool:
        return "D" in self.law_obj.inputs

    @property
    def fitted_experts(self) -> tuple[float, float]:
        return self.input_ranges.get("experts", (1.0, 1.0))

    @classmethod
    def from_fit(cls, fit: FitResult, source: str = "fit") -> "MoeLaw":
        if not is_moe_law(fit.law):
            raise AnalysisError(f"{source}: law {fit.law} is not a mixture-of-experts law (fit --law moe)")
        return cls(
            law=str(fit.law),
            params=tuple(float(fit.params[k]) for k in fit.param_names),
            samples=fit.bootstrap_samples,
            prediction_error=fit.prediction_error,
            input_ranges={k: (float(v[0]), float(v[1])) for k, v in fit.input_ranges.items()},
            source=source,
            seed=fit.seed,
        )

    @staticmethod
    def in_json(path: str | pathlib.Path) -> bool:
        """Whether `path` is a fit JSON of a MoE law (False for anything else, readable or not)."""
        try:
            data = json.loads(pathlib.Path(path).read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and is_moe_law(str(data.get("law", "")))

    @classmethod
    def from_json(cls, path: str | pathlib.Path) -> "MoeLaw":
        """From `fit --law moe --json FILE`; one-line errors for a missing or unsuitable file."""
        path = pathlib.Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise AnalysisError(f"--moe-law: file not found: {path}") from None
        except (OSError, ValueError) as e:
            raise AnalysisError(f"--moe-law: cannot read {path} as JSON ({e})") from None
        name = str(data.get("law", "")) if isinstance(data, dict) else ""
        if not is_moe_law(name):
            raise AnalysisError(
                f"--moe-law: {path} holds law {name or '?'!r}, not a mixture-of-experts law; write one "
                "with `python -m analysis fit RUNS.csv --law moe --json FILE`"
            )
        law = get_law(name)
        try:
            params = tuple(float(data["params"][k]) for k in law.param_names)
        except (KeyError, TypeError, ValueError):
            raise AnalysisError(
                f"--moe-law: {path} lacks the parameters {', '.join(law.param_names)}"
            ) from None
        raw = data.get("bootstrap_samples") or []
        samples = np.asarray(raw, float) if len(raw) else None
        pe = data.get("prediction_error")
        return cls(
            law=name,
            params=params,
            samples=samples if samples is not None and samples.ndim == 2 else None,
            prediction_error=PredictionError.from_dict(pe) if isinstance(pe, dict) else None,
            input_ranges={k: (float(v[0]), float(v[1])) for k, v in (data.get("input_ranges") or {}).items()},
            source=f"{name} fitted ({path})",
            seed=int((data.get("bootstrap") or {}).get("seed", 0)),
        )

    def _inputs(self, N, experts, D=None) -> dict[str, np.ndarray]:
        out = {"N": np.atleast_1d(np.asarray(N, float)), "experts": np.atleast_1d(np.asarray(experts, float))}
        if self.needs_tokens:
            if D is None:
                raise AnalysisError(f"law {self.law} needs the tokens D")
            out["D"] = np.atleast_1d(np.asarray(D, float))
        out = dict(zip(out, np.broadcast_arrays(*out.values())))
        return out

    def loss(self, N, experts, D=None) -> np.ndarray:
        return self.law_obj.predict(np.asarray(self.params), self._inputs(N, experts, D))

    def loss_interval(self, N, experts, D=None) -> tuple[np.ndarray, np.ndarray] | None:
        """The 90% prediction interval (as `FitResult.predict_interval`: bootstrap + run scatter +
        drift beyond the fitted N), None without the fit's error model."""
        pe = self.prediction_error
        if pe is None:
            return None
        inputs = self._inputs(N, experts, D)
        law = self.law_obj
        pred = law.predict(np.asarray(self.params), inputs)
        samples = None
        if self.samples is not None and len(self.samples) >= 10:
            with np.errstate(all="ignore"):
                samples = np.log(np.stack([law.predict(s, inputs) for s in self.samples]))
        scale = inputs[pe.scale_role] if pe.scale_role in inputs else inputs["N"]
        return validation.interval(np.log(pred), samples, pe.sd(pe.decades(scale)), seed=self.seed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "law": self.law,
            "params": dict(zip(self.law_obj.param_names, self.params)),
            "source": self.source,
            "fitted_experts": list(self.fitted_experts),
            "fitted_N": list(self.input_ranges.get("N", (math.nan, math.nan))),
        }
