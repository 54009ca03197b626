"""Plans for a fixed corpus: the compute-optimal model when only U unique tokens exist.

Chinchilla's allocation assumes every token is fresh. A group that owns a corpus of U tokens
trains D = C / (k N) tokens, D / U epochs, and repeated tokens are worth less: Muennighoff et al.
2023 ("Scaling Data-Constrained Language Models", eq. 5; analysis/laws/repeated.py) replace D by
the effective data D' = U + U R_D* (1 - exp(-R / R_D*)), R = D / U - 1 repetitions, and N by the
effective parameters N' (the same form in R_N* for parameters beyond N_opt(U)). `plan_data_limit`
answers, for a budget C and U:

- the optimum under the data limit: min over N of L(N, C / (k N), U), N searched on a log grid
  around Chinchilla's N* and refined by a bounded scalar search; its D, epochs and D';
- the penalty against unlimited data: that loss minus the same law's with U = infinity, which is
  Chinchilla's law (`repeated.loss`), so its optimum is Chinchilla's closed form of the same
  constants;
- the epoch count past which one more epoch adds less than 1% of the first epoch's value (value =
  effective data D'; `repeated.epochs_worth_it`: 1 + R_D* ln 100, ~72 epochs for the paper's R_D*);
- the alternative of a bigger model at fewer epochs: the N at which the budget repeats the corpus
  `ALT_MAX_EPOCHS` (4) times, the paper's "nearly as good as fresh data" point, and its loss.

The law is a fit of `data_constrained` or `data_constrained_d` (`python -m analysis fit --law ...
--json`), or, without one, the paper's fitted decay constants R_D* = 15.4 and R_N* = 5.3 on top
of a Chinchilla law (the planner's: Hoffmann et al. 2022's constants or the user's Chinchilla fit);
that prior is the paper's law, not a fit of the user's runs, and every output says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Mapping

import numpy as np
from scipy.optimize import minimize_scalar

from analysis.core.enums import LawName
from analysis.laws import repeated
from analysis.laws.allocation import ScalingLaw
from models.base.errors import AnalysisError

# Muennighoff et al. 2023: up to ~4 epochs of repeated data are nearly as good as fresh data
ALT_MAX_EPOCHS = 4.0
EPOCH_LADDER = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # epochs the plan's table shows the budget's loss at
SEARCH_DECADES = (-3.0, 4.0)  # N searched from Chinchilla's N* / 1e3 to N* x 1e4
SEARCH_POINTS = 1401  # log-N grid points (200 per decade) before the bounded refinement
DATA_CONSTRAINED_LAWS = (LawName.DATA_CONSTRAINED, LawName.DATA_CONSTRAINED_D)
PAPER = "Muennighoff et al. 2023 (Scaling Data-Constrained Language Models)"


@dataclasses.dataclass(frozen=True)
class RepeatedDataLaw:
    """L(N, D, U) = E + A / N'^alpha + B / D'^beta: a Chinchilla law in effective parameters and data."""

    base: ScalingLaw  # E, A, B, alpha, beta and k (C = k N D): the same law with unlimited data
    r_d: float  # R_D*: repetitions over which repeated tokens' value decays by 1/e
    r_n: float | None  # R_N* for parameters beyond N_opt(U); None: the data_constrained_d form
    fitted: bool  # False: R_D* (and R_N*) are the paper's constants, a prior, not a fit of these runs
    source: str  # where the constants came from, for plans and reports

    def __post_init__(self) -> None:
        for name, v in (("R_D", self.r_d), ("R_N", self.r_n)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise AnalysisError(f"data-constrained law: {name} must be a positive number (got {v!r})")

    @property
    def name(self) -> str:
        return LawName.DATA_CONSTRAINED if self.r_n is not None else LawName.DATA_CONSTRAINED_D

    @property
    def params(self) -> dict[str, float]:
        """Public parameters, the registry's names (R_N only for the data_constrained form)."""
        b = self.base
        out = {"E": b.E, "A": b.A, "B": b.B, "alpha": b.alpha, "beta": b.beta, "R_D": self.r_d}
        return out | ({"R_N": self.r_n} if self.r_n is not None else {})

    def effective_data(self, d, u) -> np.ndarray:
        """D' of D tokens drawn from U unique ones (U = inf: D itself)."""
        d, u = np.asarray(d, dtype=float), np.asarray(u, dtype=float)
        return np.where(np.isfinite(u), repeated.effective_data(d, np.minimum(u, d), self.r_d), d)

    def loss(self, n, d, u) -> np.ndarray:
        """The law's loss at (N, D, U), `repeated.loss` (the fit's own formula); U = inf: Chinchilla."""
        return repeated.loss(self.params, n, d, u)

    def as_dict(self) -> dict[str, Any]:
        return {
            "law": str(self.name),
            "params": self.params,
            "flops_per_param_token": self.base.flops_per_param_token,
            "fitted": self.fitted,
            "source": self.source,
        }


def paper_prior(base: ScalingLaw) -> RepeatedDataLaw:
    """The paper's R_D* = 15.4, R_N* = 5.3 (`repeated.PAPER_R_D`, `PAPER_R_N`) on top of `base`."""
    return RepeatedDataLaw(
        base=base,
        r_d=repeated.PAPER_R_D,
        r_n=repeated.PAPER_R_N,
        fitted=False,
        source=f"{PAPER}'s law, not a fit: their R_D*={repeated.PAPER_R_D:g}, "
        f"R_N*={repeated.PAPER_R_N:g} on top of {base.source}",
    )


def from_params(law_name: str, params: Mapping[str, Any], base: ScalingLaw, source: str) -> RepeatedDataLaw:
    """The fitted law `law_name` (data_constrained or data_constrained_d) from its public `params`;
    any other law gets the paper's prior on top of `base`."""
    if law_name not in DATA_CONSTRAINED_LAWS:
        return paper_prior(base)
    needed = ("R_D", "R_N") if law_name == LawName.DATA_CONSTRAINED else ("R_D",)
    try:
        r = [float(params[k]) for k in needed]
    except (KeyError, TypeError, ValueError):
        raise AnalysisError(
            f"{source}: law {law_name} needs numeric parameters {', '.join(needed)} (got {dict(params)})"
        ) from None
    return RepeatedDataLaw(base=base, r_d=r[0], r_n=r[1] if len(r) > 1 else None, fitted=True, source=source)


def from_json(path: pathlib.Path | None, base: ScalingLaw) -> RepeatedDataLaw:
    """The data-constrained law of a `fit --json` file (its Chinchilla part is `base`, read from
    the same file by `ScalingLaw.from_json`), or the paper's prior without a file or for a
    Chinchilla-form fit."""
    if path is None:
        return paper_prior(base)
    data = json.loads(pathlib.Path(path).read_text())  # from_json already checked file and JSON
    name = str(data.get("law", LawName.CHINCHILLA)).lower()
    return from_params(
        name, data.get("params") or {}, base, f"{name} law fitted in {pathlib.Path(path).name}"
    )


def base_law(fit, source: str) -> ScalingLaw:
    """The Chinchilla law a plan starts from: a Chinchilla-form fit's (`ScalingLaw.from_fit`), or a
    data-constrained fit's E, A, B, alpha, beta (its law with unlimited data) with its error model."""
    if str(fit.law) not in DATA_CONSTRAINED_LAWS:
        return ScalingLaw.from_fit(fit, source=source)
    p = fit.params
    return ScalingLaw(
        **{k: float(p[k]) for k in ("E", "A", "B", "alpha", "beta")},
        flops_per_param_token=float(fit.flops_per_param_token),
        source=source,
        ci_level=float(fit.ci_level),
        prediction_error=getattr(fit, "prediction_error", None),
    )


def from_fit(fit, base: ScalingLaw, source: str) -> RepeatedDataLaw:
    """The data-constrained law of a FitResult (the report's fit), else the paper's prior on `base`."""
    return from_params(str(fit.law), fit.params, base, source)


@dataclasses.dataclass(frozen=True)
class DataPoint:
    """One way to spend the budget: N parameters on D tokens, D / U epochs, and its loss."""

    n_params: float
    tokens: float
    epochs: float  # D / U (NaN with unlimited data)
    effective_tokens: float  # D' (the tokens' value in fresh tokens)
    loss: float

    def as_dict(self) -> dict[str, float | None]:
        return {
            "N": self.n_params,
            "D": self.tokens,
            "epochs": self.epochs if math.isfinite(self.epochs) else None,
            "effective_D": self.effective_tokens,
            "loss": self.loss,
        }


@dataclasses.dataclass(frozen=True)
class DataLimitPlan:
    """`plan --unique-tokens U`: the budget's best use of a fixed corpus (the JSON `data_limit`)."""

    budget_flops: float
    unique_tokens: float
    law: RepeatedDataLaw
    optimum: DataPoint  # the loss-minimising N with D = C / (k N) under the data limit
    unlimited: DataPoint  # the same law with U = infinity: Chinchilla's optimum of the same constants
    epochs_1pct: float  # epochs past which one more adds < 1% of the first epoch's effective data
    alternative: DataPoint | None  # a bigger model at <= alt_epochs epochs; None: nothing repeats
    alt_epochs: float | None  # the epochs of `alternative`
    ladder: tuple[DataPoint, ...]  # the budget's loss at EPOCH_LADDER epochs (N = C / (k e U))

    @property
    def penalty(self) -> float:
        """Loss above unlimited data's (>= 0)."""
        return self.optimum.loss - self.unlimited.loss

    def as_dict(self) -> dict[str, Any]:
        return {
            "budget_flops": self.budget_flops,
            "unique_tokens": self.unique_tokens,
            "law": self.law.as_dict(),
            "optimum": self.optimum.as_dict(),
            "unlimited": self.unlimited.as_dict(),
            "penalty": self.penalty,
            "penalty_rel": self.penalty / self.unlimited.loss,
            "epochs_1pct": self.epochs_1pct,
            "marginal_epoch_fraction": repeated.MARGINAL_EPOCH_VALUE,
            "alternative": None if self.alternative is None else self.alternative.as_dict(),
            "alternative_epochs": self.alt_epochs,
            "alternative_penalty": None
            if self.alternative is None
            else self.alternative.loss - self.optimum.loss,
            "by_epochs": [p.as_dict() for p in self.ladder],
        }

    def text_lines(self) -> list[str]:
        o, u = self.optimum, self.unlimited
        lines = [
            f"data limit: {count_text(self.unique_tokens)} unique tokens; law: {self.law.source}",
            f"  optimum under the limit: N = {count_text(o.n_params)} parameters, D = {count_text(o.tokens)} "
            f"tokens = {o.epochs:.3g} epochs (worth {count_text(o.effective_tokens)} fresh tokens), "
            f"loss {o.loss:.4f}",
            f"  unlimited data (U = inf, Chinchilla): N = {count_text(u.n_params)}, "
            f"D = {count_text(u.tokens)}, "
            f"loss {u.loss:.4f}; penalty of the limit {self.penalty:+.4f} ({self.penalty / u.loss:+.2%})",
            f"  past {self.epochs_1pct:.3g} epochs one more epoch adds < "
            f"{repeated.MARGINAL_EPOCH_VALUE:.0%} of the first epoch's value (effective data D')",
        ]
        a = self.alternative
        if a is None:
            lines.append("  no alternative needed: the optimum does not repeat the data")
        else:
            lines.append(
                f"  alternative, a bigger model at {self.alt_epochs:g} epoch(s): "
                f"N = {count_text(a.n_params)}, "
                f"D = {count_text(a.tokens)}, loss {a.loss:.4f} ({a.loss - o.loss:+.4f} against the optimum)"
            )
        return lines

    def markdown(self) -> list[str]:
        """The planning section's "Data limit" lines (Markdown)."""
        rows = [
            f"| {p.epochs:g} | {count_text(p.n_params)} | {count_text(p.tokens)} | {p.loss:.4f} |"
            for p in self.ladder
        ]
        return [
            "### Data limit",
            "",
            *[f"- {line.strip()}" for line in self.text_lines()],
            "",
            "| epochs | N | D | loss |",
            "|---:|---:|---:|---:|",
            *rows,
        ]


def count_text(x: float) -> str:
    """A parameter or token count for text: 38.5B, 4.32T, 120M."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _point(law: RepeatedDataLaw, n: float, budget: float, u: float) -> DataPoint:
    d = budget / (law.base.flops_per_param_token * n)
    d_eff = law.effective_data(d, u)
    epochs = d / u if math.isfinite(u) else math.nan  # unlimited data: no epochs to count
    return DataPoint(float(n), float(d), float(epochs), float(d_eff), float(law.loss(n, d, u)))


def optimum_n(law: RepeatedDataLaw, budget: float, u: float) -> float:
    """argmin over N of L(N, C / (k N), U): a log grid of `SEARCH_POINTS` over `SEARCH_DECADES`
    around Chinchilla's N*, then a bounded scalar search between the best point's neighbours."""
    k = law.base.flops_per_param_token
    n_star, _ = law.base.optimal(budget)
    log_n = math.log(n_star) + np.linspace(*SEARCH_DECADES, SEARCH_POINTS) * math.log(10)

    def f(x):
        n = np.exp(x)
        return law.loss(n, budget / (k * n), u)

    i = int(np.argmin(f(log_n)))
    lo, hi = log_n[max(i - 1, 0)], log_n[min(i + 1, SEARCH_POINTS - 1)]
    r = minimize_scalar(lambda x: float(f(x)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return float(math.exp(r.x if r.fun <= f(log_n[i]) else log_n[i]))


def check_unique_tokens(u: float, batch_tokens: int) -> None:
    """One-line errors: U must be a positive finite token count of at least one batch."""
    if not (isinstance(u, (int, float)) and math.isfinite(u) and u > 0):
        raise AnalysisError(f"--unique-tokens must be a positive number of tokens (got {u!r})")
    if u < batch_tokens:
        raise AnalysisError(
            f"--unique-tokens {u:.4g} is smaller than one batch ({batch_tokens} tokens per step): "
            "every step would repeat the corpus; give the corpus size in tokens (e.g. 2e12)"
        )


def plan_data_limit(
    budget: float, unique_tokens: float, law: RepeatedDataLaw, batch_tokens: int
) -> DataLimitPlan:
    """The data-limited plan of `budget` FLOPs with `unique_tokens` unique tokens (module docstring)."""
    check_unique_tokens(unique_tokens, batch_tokens)
    if not (math.isfinite(budget) and budget > 0):
        raise AnalysisError(f"--budget must be a positive number of FLOPs (got {budget!r})")
    u, k = float(unique_tokens), law.base.flops_per_param_token
    optimum = _point(law, optimum_n(law, budget, u), budget, u)
    n_inf, _ = law.base.optimal(budget)
    unlimited = _point(law, n_inf, budget, math.inf)
    alt_epochs = None
    if optimum.epochs > 1:
        alt_epochs = ALT_MAX_EPOCHS if optimum.epochs > ALT_MAX_EPOCHS else 1.0
    alternative = None if alt_epochs is None else _point(law, budget / (k * alt_epochs * u), budget, u)
    ladder = tuple(_point(law, budget / (k * e * u), budget, u) for e in EPOCH_LADDER)
    return DataLimitPlan(
        budget_flops=float(budget),
        unique_tokens=u,
        law=law,
        optimum=optimum,
        unlimited=unlimited,
        epochs_1pct=repeated.epochs_worth_it(law.r_d),
        alternative=alternative,
        alt_epochs=alt_epochs,
        ladder=ladder,
    )
