"""Power laws of the optimal hyperparameters, chosen by leave-largest-out error, with intervals.

Each located rung optimum h* (analysis.hparams.rungs) is one point; a law is linear in logs, least
squares on ln h*: N_D (c N^p D^q, Step Law), C (c C^a, DeepSeek LLM), D (c D^q) or N (c N^p). The
form is chosen by leave-largest-out: each is fitted below the largest model size (the largest D
when one N was swept), predicts its rungs, and the lowest mean |log10 error| wins. The four forms
are `fit_hparams`' internal candidates; the registered methods are the choice (`fit_hparams`) and
N_D alone (`form_N_D`, analysis/hparams/methods.py).

A prediction's 90% interval is that of ln h = x.beta_b + s t_b + e_b (docs/fit.md,
"Hyperparameter laws"; the error model is a `core.intervals.PredictionError`):

1. beta_b: a bootstrap over rungs (>= MIN_BOOTSTRAP_RUNGS per coefficient), else refits to the law
   plus redrawn errors: each rung's optimum from its own 90% interval (`redraw`) and the scatter
   beyond that (`excess_scatter`) with the Student-t's common scale: four rungs on a line do not
   pin a law to their residual sd when each is located only to +-0.03-0.1 dex;
2. s t_b: s the residual sd (noise_sd), t_b a Student-t draw with n - k degrees of freedom;
3. e_b ~ Normal(0, budget_sd^2 + (drift_per_decade * decades)^2), beyond the largest fitted N (or
   D), both from forward-chaining on the rungs (`drift`, `validation.drift_from_folds`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from analysis.core import validation
from analysis.core.intervals import PredictionError
from analysis.core.validation import PREDICTION_LEVEL, Z90
from analysis.hparams.rungs import safe_exp
from models.base.errors import AnalysisError

BOOTSTRAP = 1000
MIN_BOOTSTRAP_RUNGS = 3  # rungs per coefficient for a bootstrap over rungs (else parametric draws)
SAMPLES_KEPT = 400  # bootstrap coefficient samples written to the JSON (enough for a 90% interval)


@dataclasses.dataclass(frozen=True)
class Form:
    """One functional form of a hyperparameter law: ln h* = ln c + sum(exponent * ln input)."""

    name: str
    inputs: tuple[str, ...]  # "N", "D", "C"
    exponents: tuple[str, ...]  # the exponent's name for each input

    @property
    def coef_names(self) -> tuple[str, ...]:
        return ("c", *self.exponents)

    def expression(self, param: str, coef: Sequence[float] | None = None) -> str:
        short = short_name(param)
        if coef is None:
            return f"{short}* = c · " + " · ".join(f"{i}^{e}" for i, e in zip(self.inputs, self.exponents))
        c = math.exp(coef[0])
        return f"{short}* = {c:.4g} · " + " · ".join(f"{i}^{b:+.3f}" for i, b in zip(self.inputs, coef[1:]))

    def design(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        cols = [np.log(np.asarray(inputs[i], float)) for i in self.inputs]
        return np.column_stack([np.ones_like(cols[0]), *cols])


FORMS: dict[str, Form] = {
    "N_D": Form("N_D", ("N", "D"), ("p", "q")),
    "C": Form("C", ("C",), ("a",)),
    "D": Form("D", ("D",), ("q",)),
    "N": Form("N", ("N",), ("p",)),
}


def short_name(param: str) -> str:
    """The name a law's text uses for a config key: lr, batch, else the key."""
    return {"optim.lr": "lr", "train.batch_size": "batch"}.get(param, param)


@dataclasses.dataclass(frozen=True)
class HparamLaw:
    """A fitted law of one hyperparameter's optimum: enough to predict with intervals."""

    param: str  # config key, e.g. "optim.lr"
    form: str  # key of FORMS
    coef: tuple[float, ...]  # (ln c, exponents...) of the fit on every rung
    samples: tuple[tuple[float, ...], ...]  # bootstrap refits of coef
    dof: int  # n_rungs - len(coef)
    n_rungs: int  # rungs fitted
    # noise_sd: the residual sd s of ln h* around the law (drawn with a Student-t); budget_sd and
    # drift_per_decade: the forward-chained extrapolation term along scale_role ("N", or "D" when
    # one model size was swept) beyond scale_max (inf: an older HP.json without a drift term)
    error: PredictionError

    @property
    def spec(self) -> Form:
        return FORMS[self.form]

    @property
    def scatter_sd(self) -> float:
        return self.error.noise_sd

    def params(self) -> dict[str, float]:
        """{c, exponents} with c as a value, not a log."""
        out = dict(zip(self.spec.coef_names, self.coef))
        out["c"] = math.exp(out["c"])
        return out

    def ci(self) -> dict[str, list[float]]:
        s = np.asarray(self.samples, float)
        out = {}
        for j, name in enumerate(self.spec.coef_names):
            lo, hi = validation.percentile_interval(s[:, j], PREDICTION_LEVEL)
            out[name] = [safe_exp(lo), safe_exp(hi)] if name == "c" else [float(lo), float(hi)]
        return out

    def decades(self, N, D) -> np.ndarray:
        """Distance beyond the fitted rungs in decades of the scale input (0 inside them)."""
        scale = np.asarray(N if self.error.scale_role == "N" else D, float)
        return self.error.decades(scale) if math.isfinite(self.error.scale_max) else np.zeros_like(scale)

    def predict(self, N, D, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(value, 90% lo, 90% hi) at arrays N, D, C."""
        X = self.spec.design({"N": N, "D": D, "C": C})
        s = np.asarray(self.samples, float)
        rng = np.random.default_rng(0)
        t = rng.standard_t(max(self.dof, 1), size=len(s)) if self.dof > 0 else np.zeros(len(s))
        z = rng.standard_normal(len(s))
        e = self.error
        drift = np.atleast_1d(np.hypot(e.budget_sd, e.drift_per_decade * self.decades(N, D)))
        draws = X @ s.T + e.noise_sd * t[None, :] + drift[:, None] * z[None, :]
        lo, hi = validation.percentile_interval(draws, PREDICTION_LEVEL, axis=1)
        return np.exp(X @ np.asarray(self.coef)), np.exp(lo), np.exp(hi)

    def to_json(self) -> dict:
        e = self.error
        return {
            "param": self.param,
            "form": self.form,
            "inputs": list(self.spec.inputs),  # ln h* = coef_log . [1, ln inputs...] (sweeps read this)
            "expression": self.spec.expression(self.param, self.coef),
            "coef_log": list(self.coef),
            "samples": [list(r) for r in self.samples[:SAMPLES_KEPT]],
            "scatter_sd": e.noise_sd,
            "dof": self.dof,
            "n_rungs": self.n_rungs,
            "budget_sd": e.budget_sd,
            "drift_per_decade": e.drift_per_decade,
            "scale_role": e.scale_role,
            "scale_max": e.scale_max if math.isfinite(e.scale_max) else None,
            "n_folds": e.n_folds,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "HparamLaw":
        error = PredictionError(  # an HP.json written before the drift term: none
            noise_sd=float(d["scatter_sd"]),
            budget_sd=float(d.get("budget_sd") or 0.0),
            drift_per_decade=float(d.get("drift_per_decade") or 0.0),
            scale_max=math.inf if d.get("scale_max") is None else float(d["scale_max"]),
            scale_role=str(d.get("scale_role") or "N"),
            n_folds=int(d.get("n_folds") or 0),
            n_fold_points=0,
        )
        return cls(
            param=str(d["param"]),
            form=str(d["form"]),
            coef=tuple(float(v) for v in d["coef_log"]),
            samples=tuple(tuple(float(v) for v in r) for r in d["samples"]),
            dof=int(d["dof"]),
            n_rungs=int(d["n_rungs"]),
            error=error,
        )


def _check_positive(param: str, what: Mapping[str, np.ndarray]) -> None:
    """Every value a law takes the log of must be a finite positive number: a NaN or a negative one
    (a missing or overflowed C, an unlocated optimum) would turn into NaN in the design matrix and
    fail deep in LAPACK ("SVD did not converge"). The callers exclude such rungs first."""
    for name, v in what.items():
        v = np.asarray(v, float)
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            raise AnalysisError(
                f"{param}: {int(bad.sum())} of {len(v)} rungs have a missing, non-finite or non-positive "
                f"{name} (e.g. {v[bad][0]:g}); a law in logs needs every {name} > 0"
            )


def feasible(form: Form, inputs: Mapping[str, np.ndarray], n_min_extra: int = 1) -> bool:
    """Whether `form` can be fitted to these points: full rank and a spare point for the scatter."""
    _check_positive(form.name + " law", {i: inputs[i] for i in form.inputs})
    X = form.design(inputs)
    return len(X) >= X.shape[1] + n_min_extra and np.linalg.matrix_rank(X) == X.shape[1]


def _lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(X, y, rcond=None)[0]


def fit_power_law(
    param: str,
    form: Form,
    inputs: Mapping[str, np.ndarray],
    opt: np.ndarray,
    seed: int = 0,
    interval: np.ndarray | None = None,
) -> HparamLaw:
    """Least squares on ln(opt); coefficient samples from a bootstrap over rungs, or, with fewer
    than MIN_BOOTSTRAP_RUNGS rungs per coefficient, from the regression's own sampling distribution
    (refits to the law plus errors: a bootstrap of 3 rungs only ever resamples the same exact fit or
    a degenerate one). There `interval` ((n, 2): each rung optimum's 90% interval) redraws every
    rung's optimum from it (`redraw`) and the rest of the scatter is `excess_scatter`'s; without
    it, the multivariate Student-t around the fit with covariance s^2 (X'X)^-1. The extrapolation
    drift is measured by forward-chaining (`drift`)."""
    _check_positive(param, {**{i: inputs[i] for i in form.inputs}, "optimum": opt})
    X, y = form.design(inputs), np.log(opt)
    coef = _lstsq(X, y)
    n, k = X.shape
    dof = n - k
    ssr = float(np.sum((y - X @ coef) ** 2))
    sd = math.sqrt(ssr / dof) if dof > 0 else 0.0
    rng = np.random.default_rng(seed)
    if n >= MIN_BOOTSTRAP_RUNGS * k:
        samples = _bootstrap(X, y, rng)
    elif dof > 0:
        # refits to the law plus redrawn errors: each rung's location error from its interval,
        # the scatter beyond it (tau) with the Student-t's common scale (tau is estimated from few rungs)
        located = redraw(y, interval, SAMPLES_KEPT, rng) - y
        tau = excess_scatter(X, y - X @ coef, interval, dof)
        scale = np.sqrt(dof / rng.chisquare(dof, size=(SAMPLES_KEPT, 1)))
        ys = X @ coef + located + tau * scale * rng.standard_normal((SAMPLES_KEPT, n))
        samples = [tuple(float(v) for v in row) for row in _lstsq(X, ys.T).T]
    else:
        samples = []
    if not samples:
        samples = [tuple(float(v) for v in coef)]
    # keep only what the JSON keeps, so an HP.json read back predicts the intervals fit-hparams printed
    kept = tuple(samples[:SAMPLES_KEPT])
    error = drift(form, inputs, y, sd)
    return HparamLaw(param, form.name, tuple(float(v) for v in coef), kept, dof, n, error)


def redraw(y: np.ndarray, interval: np.ndarray | None, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, n) redraws of the rungs' ln optima `y` from their 90% intervals (None: `y` itself):
    a split normal with median y whose 5% and 95% points are the interval's ends."""
    if interval is None:
        return np.broadcast_to(y, (draws, len(y)))
    lo, hi = np.log(np.asarray(interval, float)).T
    z = rng.standard_normal((draws, len(y)))
    sd = np.where(z < 0, np.maximum(y - lo, 0.0), np.maximum(hi - y, 0.0)) / Z90
    return y + sd * z


def _bootstrap(X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> list[tuple[float, ...]]:
    n, k = X.shape
    out = []
    for idx in validation.bootstrap_indices(n, BOOTSTRAP, rng):
        if len(np.unique(idx)) <= k or np.linalg.matrix_rank(X[idx]) < k:
            continue  # cannot identify every exponent, or an exact fit through k rungs (no scatter)
        out.append(tuple(float(v) for v in _lstsq(X[idx], y[idx])))
    return out


def excess_scatter(X: np.ndarray, resid: np.ndarray, interval: np.ndarray | None, dof: int) -> float:
    """Sd of the rung optima around the law beyond their own location error (method of moments:
    E[SSR] = dof tau^2 + sum (1 - h_ii) sigma_i^2, sigma_i a rung's sd from its 90% interval, h_ii
    its leverage), at least 0; the residual sd itself without intervals."""
    ssr = float(np.sum(resid**2))
    if interval is None:
        return math.sqrt(ssr / dof)
    lo, hi = np.log(np.asarray(interval, float)).T
    sigma2 = ((hi - lo) / (2 * Z90)) ** 2
    leverage = np.einsum("ij,ji->i", X, np.linalg.pinv(X))
    return math.sqrt(max(ssr - float(np.sum((1 - leverage) * sigma2)), 0.0) / dof)


def drift(form: Form, inputs: Mapping[str, np.ndarray], y: np.ndarray, scatter: float) -> PredictionError:
    """The law's error model: the residual sd `scatter` of ln h*, and its forward-chained drift
    along N (D when one N was swept: the leave-largest-out axis of `holdout_split`). Each fold
    (validation's cuts; those whose rungs identify the form, with a spare rung) predicts the rungs
    above its cut; their errors beyond `scatter` against their decades beyond the fold give
    budget_sd and drift_per_decade (`validation.drift_from_folds`; 0 without two errors)."""
    N = np.asarray(inputs["N"], float)
    role, scale = ("N", N) if validation.levels(N).size > 1 else ("D", np.asarray(inputs["D"], float))
    X = form.design(inputs)
    errors, decades = [], []
    for cut in validation.forward_cuts(scale):
        fit = scale <= cut
        if not feasible(form, _take(inputs, fit)):
            continue
        coef = _lstsq(X[fit], y[fit])
        errors.append(y[~fit] - X[~fit] @ coef)
        decades.append(np.log10(scale[~fit] / scale[fit].max()))
    budget_sd, per_decade = validation.drift_from_folds(errors, decades, scatter)
    return PredictionError(
        noise_sd=scatter,
        budget_sd=budget_sd,
        drift_per_decade=per_decade,
        scale_max=float(np.max(scale)),
        scale_role=role,
        n_folds=len(errors),
        n_fold_points=int(sum(e.size for e in errors)),
        fold_mae=validation.fold_mae(errors),
        method="bootstrap over rungs + residual scatter (Student-t) + forward-chained drift",
    )


@dataclasses.dataclass(frozen=True)
class Holdout:
    """Leave-largest-out: every form fitted below the largest rungs, scored on them."""

    held_out: str  # which rungs were held out, e.g. "N = 1e9 (3 rungs)"
    errors: dict[str, float | None]  # form -> mean |log10 error| on the held-out rungs (None: infeasible)
    chosen: str
    rungs: list[dict]  # per held-out rung: N, D, measured, predicted, dlog10, loss_penalty (chosen form)

    def to_json(self) -> dict:
        pen = [r["loss_penalty"] for r in self.rungs if r["loss_penalty"] is not None]
        dl = [abs(r["dlog10"]) for r in self.rungs]
        return {
            "held_out": self.held_out,
            "errors": self.errors,
            "chosen": self.chosen,
            "mean_abs_dlog10": float(np.mean(dl)) if dl else None,
            "max_ratio": float(10 ** max(dl)) if dl else None,
            "mean_loss_penalty": float(np.mean(pen)) if pen else None,
            "rungs": self.rungs,
        }


def holdout_split(inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, str] | None:
    """Mask of the held-out rungs: those of the largest N (the largest D with a single N)."""
    for role in ("N", "D"):
        v = np.asarray(inputs[role], float)
        top = validation.holdout_mask(v)
        if 0 < top.sum() < len(v) and len(np.unique(np.round(np.log(v), 6))) > 1:
            return top, f"{role} = {v.max():.4g} ({int(top.sum())} rungs)"
    return None


def choose_form(
    param: str,
    inputs: Mapping[str, np.ndarray],
    opt: np.ndarray,
    kappa: np.ndarray,
    forms: Sequence[str] = tuple(FORMS),
) -> tuple[str, Holdout | None]:
    """The form with the lowest leave-largest-out error (ties: fewer coefficients). When holding
    the largest model size out leaves too few rungs for any form, the error is leave-one-out;
    when no form survives that either, the simplest form the rungs identify (unscored)."""
    cands = [FORMS[f] for f in forms if feasible(FORMS[f], inputs)]
    if not cands:
        raise AnalysisError(
            f"{param}: {len(opt)} located optima cannot identify any law (need >= 3 rungs at "
            "different N or D); sweep more rungs"
        )
    errors: dict[str, float | None] = {f: None for f in forms}
    preds: dict[str, np.ndarray] = {}
    split = holdout_split(inputs)
    folds = [split[0]] if split is not None else []
    label = split[1] if split is not None else ""
    if not folds or not any(feasible(f, _take(inputs, ~folds[0])) for f in cands):
        # no model size can be held out and still leave a fit: leave each rung out in turn
        folds = [np.arange(len(opt)) == i for i in range(len(opt))]
        label = f"leave-one-out over {len(opt)} rungs (too few model sizes to hold the largest out)"
    for form in cands:
        if all(feasible(form, _take(inputs, ~t)) for t in folds):
            p = np.empty(len(opt))
            for t in folds:
                coef = _lstsq(form.design(_take(inputs, ~t)), np.log(opt[~t]))
                p[t] = np.exp(form.design(_take(inputs, t)) @ coef)
            preds[form.name] = p
            test = np.any(folds, axis=0)
            errors[form.name] = float(np.mean(np.abs(np.log10(p[test] / opt[test]))))
    scored = [f for f in cands if errors[f.name] is not None]
    if not scored:  # the simplest form the rungs identify, unscored
        return min(cands, key=lambda f: len(f.inputs)).name, None
    simplest_first = [f.name for f in sorted(scored, key=lambda f: len(f.inputs))]
    best = validation.choose({f.name: errors[f.name] for f in scored}, simplest_first, margin=0.0)
    test = np.any(folds, axis=0)
    p = preds[best]
    idx = np.flatnonzero(test)
    rungs = [
        {
            "N": float(inputs["N"][i]),
            "D": float(inputs["D"][i]),
            "measured": float(opt[i]),
            "predicted": float(p[i]),
            "dlog10": float(math.log10(p[i] / opt[i])),
            "loss_penalty": None
            if not math.isfinite(kappa[i])
            else float(kappa[i] * math.log(p[i] / opt[i]) ** 2),
        }
        for i in idx
    ]
    return best, Holdout(label, errors, best, rungs)


def _take(inputs: Mapping[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[mask] for k, v in inputs.items()}
