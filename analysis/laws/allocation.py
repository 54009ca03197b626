"""The Chinchilla scaling law as one object: loss, bootstrap CIs and compute-optimal allocation.

`ScalingLaw` is what the fit hands to the report's allocation and to the planner, so that all
three use the same constants *and the same FLOPs model*. Minimising `E + A/N^alpha + B/D^beta`
subject to `C = k N D` gives

    N*(C) = G (C/k)^a,   D*(C) = G^-1 (C/k)^b,   a = beta/(alpha+beta),  b = alpha/(alpha+beta),
    G = (alpha A / (beta B))^(1/(alpha+beta)).

k (`flops_per_param_token`) is the fit's: 6 for the usual 6ND model, or the median of C/(N D)
when the runs recorded real FLOPs next to N and D (so a FLOPs model with attention or embedding
terms, k near 8 for long contexts, carries into the allocation and the plan). Every quantity is
also computed for each bootstrap sample; CIs are percentile intervals of those.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from analysis.core import intervals, validation
from analysis.laws.frontier import Frontier, FrontierMethod
from models.base.errors import AnalysisError

CHINCHILLA_NAMES = ("E", "A", "B", "alpha", "beta")
DEFAULT_BUDGETS = (1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25)
# The 6ND convention; equal to analysis.core.table.FLOPS_PER_PARAM_TOKEN (not imported from there:
# points pulls in pandas, which `python -m analysis --help` does not load).
DEFAULT_FLOPS_PER_PARAM_TOKEN = 6.0
MIN_CI_SAMPLES = 10  # fewer finite bootstrap values than this give no loss interval

# Hoffmann et al. 2022, eq. 10 (approach 3).
HOFFMANN_2022 = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


TIED_NAMES = ("E", "A", "B", "alpha")  # the chinchilla_tied law: beta = alpha


def chinchilla_index(param_names: Sequence[str]) -> list[int] | None:
    """Columns of a parameter vector in `param_names` order that give E, A, B, alpha, beta: the
    Chinchilla law itself, its tied form (beta = alpha), or a data-constrained law, which on fresh
    data (D <= U, N <= N_opt(U)) is Chinchilla's exactly (its decay constants follow E..beta);
    None for any other law."""
    names = tuple(param_names)
    if names[:5] == CHINCHILLA_NAMES and set(names[5:]) <= {"R_D", "R_N"}:
        return [0, 1, 2, 3, 4]
    if names == TIED_NAMES:
        return [0, 1, 2, 3, 3]
    return None


def supports_allocation(fit) -> bool:
    """True when `fit` (a FitResult) is a Chinchilla-form law (beta free or tied to alpha): the
    forms with a closed-form optimum."""
    return chinchilla_index(fit.param_names) is not None


def closed_form_optimum(params_xP: np.ndarray, C: np.ndarray, k: float) -> dict[str, np.ndarray]:
    """Closed-form optimum for parameter rows (..., 5) in E, A, B, alpha, beta order and budgets C.

    One row gives arrays over the budgets; (S, 5) rows (bootstrap samples) give (S, n_budgets)
    arrays, so point estimate and CIs come from the same formula.
    """
    p = np.asarray(params_xP, dtype=float)
    if p.ndim == 1:
        check_allocatable(dict(zip(CHINCHILLA_NAMES, p)), "closed-form optimum")
    else:  # a sample with A, B, alpha or beta <= 0 has no optimum: NaN row, dropped by the CIs
        p = np.where(np.all(p[..., 1:] > 0, axis=-1, keepdims=True), p, np.nan)
    E, A, B, al, be = (p[..., i, None] for i in range(5))
    C = np.asarray(C, dtype=float)[None, :] if p.ndim > 1 else np.asarray(C, dtype=float)
    with np.errstate(all="ignore"):
        s = al + be
        a, b = be / s, al / s
        logG = (np.log(al * A) - np.log(be * B)) / s
        logc = np.log(C / k)
        N = np.exp(logG + a * logc)
        D = np.exp(-logG + b * logc)
        loss = E + A / N**al + B / D**be
    return {
        "a": a[..., 0],
        "b": b[..., 0],
        "G": np.exp(logG[..., 0]),
        "N_opt": N,
        "D_opt": D,
        "tokens_per_param": D / N,
        "loss": loss,
    }


def check_allocatable(params: Mapping[str, float], origin: str) -> None:
    """One-line AnalysisError unless E is finite and A, B, alpha, beta are finite and > 0: with a
    non-positive exponent a loss term never falls with scale, the optimum does not exist, and the
    closed form would give NaN (or a nonsense N*) silently."""
    bad = [
        f"{n}={params[n]:g}"
        for n in CHINCHILLA_NAMES
        if not math.isfinite(params[n]) or (n != "E" and not params[n] > 0)
    ]
    if bad:
        raise AnalysisError(
            f"{origin}: no compute-optimal allocation with {', '.join(bad)} (A, B, alpha and "
            "beta must be finite and > 0, E finite)"
        )


def _positive_k(value: Any, origin: str) -> float:
    """FLOPs per parameter-token as a float, or a one-line AnalysisError naming `origin`."""
    try:
        k = float(value)
    except (TypeError, ValueError):
        k = math.nan
    if not (math.isfinite(k) and k > 0):
        raise AnalysisError(f"{origin}: flops_per_param_token must be a positive number (got {value!r})")
    return k


@dataclasses.dataclass(frozen=True)
class ScalingLaw:
    """L(N, D) = E + A/N^alpha + B/D^beta with the FLOPs model C = k·N·D it was fitted under.

    Build it with `from_fit` (a FitResult), `from_json` (a `python -m analysis fit --json` file)
    or `chinchilla_2022()` (Hoffmann et al.'s published constants).
    """

    E: float  # irreducible loss (nats per token)
    A: float  # scale of the parameter term A/N^alpha
    B: float  # scale of the data term B/D^beta
    alpha: float  # exponent of the parameter count N
    beta: float  # exponent of the token count D
    flops_per_param_token: float = DEFAULT_FLOPS_PER_PARAM_TOKEN  # k in C = k·N·D (6: 6ND)
    source: str = "user-supplied constants"  # where the constants came from (plans, reports)
    # (S, 5) bootstrap parameter samples in E, A, B, alpha, beta order, or None (no CIs)
    samples: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)
    ci_level: float = 0.95  # central coverage of every parameter/optimum CI this law reports
    # measured error model of the fit (analysis.core.intervals): gives the 90% prediction
    # interval of a new run's loss; None (published constants) gives none
    prediction_error: intervals.PredictionError | None = dataclasses.field(default=None, compare=False)
    # how the best loss per budget is predicted (analysis.laws.frontier); None: the IsoFLOP minimum
    # with the law's own error model (published constants, older fit files)
    frontier: Frontier | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        _positive_k(self.flops_per_param_token, "scaling law")
        check_allocatable({n: getattr(self, n) for n in CHINCHILLA_NAMES}, "scaling law")
        if not 0 < self.ci_level < 1:
            raise AnalysisError(f"scaling law: ci_level must be in (0, 1) (got {self.ci_level!r})")

    # ---- constructors ---------------------------------------------------------------------------
    @classmethod
    def chinchilla_2022(cls) -> "ScalingLaw":
        """Hoffmann et al. 2022 (Chinchilla) approach 3, eq. 10, with C = 6ND."""
        return cls(
            **HOFFMANN_2022,
            source="Hoffmann et al. 2022 (Chinchilla) approach 3: "
            "E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28",
        )

    @classmethod
    def from_fit(
        cls, fit, source: str | None = None, flops_per_param_token: float | None = None
    ) -> "ScalingLaw":
        """The law of a Chinchilla-form FitResult, with its k, bootstrap samples and CI level.

        `flops_per_param_token` overrides the fit's k (None keeps it).
        """
        if not supports_allocation(fit):
            raise AnalysisError(
                f"compute-optimal allocation needs a Chinchilla-form law "
                f"({', '.join(CHINCHILLA_NAMES)}, or beta tied to alpha); law {fit.law} has "
                f"{', '.join(fit.param_names)}"
            )
        k = fit.flops_per_param_token if flops_per_param_token is None else flops_per_param_token
        idx = chinchilla_index(fit.param_names)
        samples = None
        if fit.bootstrap_samples is not None:
            samples = np.asarray(fit.bootstrap_samples, dtype=float)[:, idx]
        vector = np.array([fit.params[n] for n in fit.param_names], dtype=float)[idx]
        return cls(
            **{n: float(v) for n, v in zip(CHINCHILLA_NAMES, vector)},
            flops_per_param_token=_positive_k(k, f"law {fit.law}"),
            source=source
            or f"{fit.law} law fitted on {fit.n_points} points"
            + (" (at fresh data, D <= U)" if len(fit.param_names) > 5 else ""),
            samples=samples,
            ci_level=float(fit.ci_level),
            prediction_error=getattr(fit, "prediction_error", None),
            frontier=getattr(fit, "frontier", None),
        )

    @classmethod
    def from_json(cls, path: str | pathlib.Path) -> "ScalingLaw":
        """A `python -m analysis fit --json` file: `params` {E, A, B, alpha, beta}, optional
        `bootstrap_samples` in `param_names` order, `flops_per_param_token` and `ci_level`."""
        p = pathlib.Path(path)
        if not p.is_file():
            raise AnalysisError(f"law file not found: {p}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise AnalysisError(f"law file {p} is not valid JSON ({e.msg} at line {e.lineno})")
        if not isinstance(data, dict):
            raise AnalysisError(f"law file {p} must hold a JSON object")
        return cls.from_dict(data, p)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: pathlib.Path) -> "ScalingLaw":
        """The law in a parsed fit JSON object; `origin` (its file) names it in errors and `source`."""
        law_name = str(data.get("law", "chinchilla")).lower()
        vals = _law_constants(data, law_name, origin)
        k = data.get("flops_per_param_token")
        level = data.get("ci_level")
        return cls(
            **vals,
            source=f"{law_name} law fitted in {origin.name}",
            flops_per_param_token=(
                DEFAULT_FLOPS_PER_PARAM_TOKEN if k is None else _positive_k(k, f"law file {origin}")
            ),
            samples=_json_samples(data),
            ci_level=float(level) if isinstance(level, (int, float)) and 0 < level < 1 else 0.95,
            prediction_error=_json_prediction_error(data),
            frontier=_json_frontier(data),
        )

    # ---- predictions ----------------------------------------------------------------------------
    @property
    def params(self) -> np.ndarray:
        """(5,) constants in E, A, B, alpha, beta order (the `samples` column order)."""
        return np.array([self.E, self.A, self.B, self.alpha, self.beta], dtype=float)

    def loss(self, n: float, d: float) -> float:
        """Predicted loss of an N-parameter model trained on D tokens."""
        return self.E + self.A / n**self.alpha + self.B / d**self.beta

    def loss_ci(self, n: float, d: float, level: float | None = None) -> tuple[float, float] | None:
        """Percentile interval (default `ci_level`) of the loss over the bootstrap samples;
        None without samples or with fewer than MIN_CI_SAMPLES finite values."""
        vals = self._sample_losses(n, d)
        if vals is None or np.isfinite(vals).sum() < MIN_CI_SAMPLES:
            return None
        lo, hi = validation.percentile_bounds(vals, self.ci_level if level is None else level)
        return lo, hi

    def loss_interval(
        self, n, d, level: float = validation.PREDICTION_LEVEL
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """90% prediction interval (lo, hi) of a new run's loss at N = n, D = d (arrays or floats):
        parameter noise (bootstrap samples) + run scatter + extrapolation drift beyond the fitted
        data (see analysis.core.intervals); None when the law carries no error model."""
        pe = self.prediction_error
        if pe is None:
            return None
        n, d = np.atleast_1d(np.asarray(n, dtype=float)), np.atleast_1d(np.asarray(d, dtype=float))
        scale = {"C": self.flops_per_param_token * n * d, "N": n, "D": d}.get(pe.scale_role)
        if scale is None:
            return None
        vals = self._sample_losses(n, d)
        with np.errstate(all="ignore"):
            log_s = None if vals is None else np.log(vals)
            return validation.interval(np.log(self.loss(n, d)), log_s, pe.sd(pe.decades(scale)), level)

    def _sample_losses(self, n, d) -> np.ndarray | None:
        """(S, ...) loss at (n, d) under every bootstrap sample; None with fewer than MIN_CI_SAMPLES."""
        if self.samples is None or len(self.samples) < MIN_CI_SAMPLES:
            return None
        e, a, b, al, be = (np.asarray(self.samples, dtype=float)[:, i] for i in range(5))
        n, d = np.asarray(n, dtype=float), np.asarray(d, dtype=float)
        shape = (-1,) + (1,) * n.ndim
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return (
                e.reshape(shape)
                + a.reshape(shape) / n ** al.reshape(shape)
                + b.reshape(shape) / d ** be.reshape(shape)
            )

    def optimal(self, flops: float) -> tuple[float, float]:
        """(N*, D*) minimising L under k·N·D = C (Hoffmann et al. 2022, eq. 4)."""
        opt = closed_form_optimum(self.params, [flops], self.flops_per_param_token)
        return float(opt["N_opt"][0]), float(opt["D_opt"][0])

    def allocation(self, budgets: Sequence[float] | None = None) -> dict:
        """a, b, G, k and, per budget, N*, D*, tokens per parameter and loss, with CIs from the
        bootstrap samples (the `allocation` object of `fit --json`)."""
        budgets = np.asarray(DEFAULT_BUDGETS if budgets is None else budgets, dtype=float)
        if budgets.size == 0 or np.any(~np.isfinite(budgets)) or np.any(budgets <= 0):
            raise AnalysisError("budgets must be positive FLOP counts")
        k = self.flops_per_param_token
        point = closed_form_optimum(self.params, budgets, k)
        out = {
            "a": float(point["a"]),
            "b": float(point["b"]),
            "G": float(point["G"]),
            "flops_per_param_token": k,
        }
        boot = closed_form_optimum(self.samples, budgets, k) if self.samples is not None else None
        if boot is not None:
            out["a_ci"] = validation.percentile_bounds(boot["a"], self.ci_level)
            out["b_ci"] = validation.percentile_bounds(boot["b"], self.ci_level)
        out["budgets"] = [self._budget_row(j, C, point, boot) for j, C in enumerate(budgets)]
        return out

    def _budget_row(self, j: int, C: float, point: dict, boot: dict | None) -> dict:
        """One budget's row of `allocation`: point values, with samples their CIs, and the best
        loss expected at C (`loss`, `loss_method`; analysis.laws.frontier) with its 90% prediction
        interval; without a frontier model, the IsoFLOP minimum and the law's own error model."""
        row = {"C": float(C)}
        for key in ("N_opt", "D_opt", "tokens_per_param", "loss"):
            row[key] = float(point[key][j])
            if boot is not None:
                row[f"{key}_ci"] = validation.percentile_bounds(boot[key][:, j], self.ci_level)
        row["loss_method"] = str(FrontierMethod.LAW_MINIMUM)
        if self.frontier is None:
            band = self.loss_interval(row["N_opt"], row["D_opt"])
            if band is not None:
                row["loss_interval"] = [float(band[0][0]), float(band[1][0])]
            return row
        law_s = None if boot is None else boot["loss"][:, j : j + 1]
        loss, samples = self.frontier.predict(np.array([C]), np.array([row["loss"]]), law_s)
        lo, hi = self.frontier.interval(np.array([C]), loss, samples)
        row["loss_law_minimum"] = row["loss"]
        row["loss"], row["loss_method"] = float(loss[0]), str(self.frontier.method)
        if samples is not None and np.isfinite(samples).sum() >= MIN_CI_SAMPLES:
            row["loss_ci"] = validation.percentile_bounds(samples[:, 0], self.ci_level)
        row["loss_interval"] = [float(lo[0]), float(hi[0])]
        return row

    def best_loss(self, C: float) -> tuple[float, tuple[float, float] | None, str]:
        """(expected best loss at budget C, its 90% prediction interval or None, loss_method)."""
        row = self.allocation([C])["budgets"][0]
        band = row.get("loss_interval")
        return row["loss"], (None if band is None else (band[0], band[1])), row["loss_method"]


def _law_constants(data: Mapping[str, Any], law_name: str, origin: pathlib.Path) -> dict[str, float]:
    """E, A, B, alpha, beta from a fit JSON's `params`, checked (finite; A, B, alpha, beta > 0)."""
    params = data.get("params")
    if not isinstance(params, dict):
        raise AnalysisError(
            f"law file {origin} has no 'params' object (write it with `python -m "
            f"analysis fit DATA.csv --law chinchilla --json {origin.name}`)"
        )
    if "beta" not in params and "alpha" in params and law_name == "chinchilla_tied":
        params = {**params, "beta": params["alpha"]}
    missing = [k for k in CHINCHILLA_NAMES if k not in params]
    if missing:
        raise AnalysisError(
            f"law {law_name!r} in {origin} lacks parameter(s) {missing}; the planner "
            f"needs a Chinchilla-form law L = E + A/N^alpha + B/D^beta"
        )
    try:
        vals = {k: float(params[k]) for k in CHINCHILLA_NAMES}
    except (TypeError, ValueError):
        raise AnalysisError(f"law file {origin}: parameters must be numbers (got {params})")
    if (
        not all(math.isfinite(v) for v in vals.values())
        or min(vals["A"], vals["B"], vals["alpha"], vals["beta"]) <= 0
    ):
        raise AnalysisError(f"law file {origin}: A, B, alpha, beta must be finite and > 0 (got {vals})")
    return vals


def _json_samples(data: Mapping[str, Any]) -> np.ndarray | None:
    """`bootstrap_samples` reordered to E, A, B, alpha, beta; None when absent or malformed
    (the law then falls back to its point estimate, and plans say the CI is unavailable)."""
    raw = data.get("bootstrap_samples")
    if not raw:
        return None
    idx = chinchilla_index(data.get("param_names") or CHINCHILLA_NAMES)
    if idx is None:
        return None
    try:
        return np.asarray(raw, dtype=float)[:, idx]
    except (ValueError, IndexError, TypeError):
        return None


def _json_prediction_error(data: Mapping[str, Any]) -> intervals.PredictionError | None:
    """The fit JSON's `prediction_error` object; None when absent or malformed (no interval)."""
    raw = data.get("prediction_error")
    if not isinstance(raw, dict):
        return None
    try:
        pe = intervals.PredictionError.from_dict(raw)
    except (KeyError, TypeError, ValueError):
        return None
    ok = all(math.isfinite(v) for v in (pe.noise_sd, pe.drift_per_decade, pe.scale_max)) and pe.scale_max > 0
    return pe if ok else None


def _json_frontier(data: Mapping[str, Any]) -> Frontier | None:
    """The fit JSON's `frontier` object; None when absent or malformed (the IsoFLOP minimum)."""
    raw = data.get("frontier")
    if not isinstance(raw, dict):
        return None
    try:
        return Frontier.from_dict(raw)
    except (KeyError, TypeError, ValueError):
        return None


def allocation(
    fit, budgets: Sequence[float] | None = None, flops_per_param_token: float | None = None
) -> dict:
    """N*, D*, tokens per parameter and loss at each budget, with CIs from `fit.bootstrap_samples`
    (`ScalingLaw.from_fit(fit).allocation(budgets)`; `flops_per_param_token` overrides the fit's k)."""
    return ScalingLaw.from_fit(fit, flops_per_param_token=flops_per_param_token).allocation(budgets)
