"""Power laws of the optimal hyperparameters, chosen by leave-largest-out error, with intervals.

Each located rung optimum h* (analysis.hparams.rungs) is one point; a law is linear in logs:

    form  expression        source it follows (their fitted laws, cited as references only)
    N_D   h* = c N^p D^q    Step Law (Li et al. 2025, "Predictable Scale I"): lr* = 1.79 N^-0.713 D^0.307
    C     h* = c C^a        DeepSeek LLM (2024): lr* = 0.3118 C^-0.125, B* = 0.2920 C^0.3271 (tokens)
    D     h* = c D^q        Step Law's batch law B* = 0.58 D^0.571 (tokens)
    N     h* = c N^p        muP-style transfer: the optimum moves with width only

fitted by least squares on ln h*. The form is chosen by leave-largest-out: every form is fitted
on the rungs below the largest model size (the largest D when one N was swept) and predicts the
rungs of it; the form with the lowest mean |log10 error| there wins and is refitted on every rung.

A prediction's 90% interval is that of ln h = x.beta_b + s t_b: beta_b a bootstrap refit over
rungs (parameter noise), s the residual sd of the full fit (sqrt(SSR / (n - k)): the scatter of a
rung's optimum around the law, including the noise of locating it) and t_b a Student-t draw with
n - k degrees of freedom (s itself is estimated from few rungs).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from analysis import validation
from analysis.validation import PREDICTION_LEVEL
from models.base.errors import AnalysisError

BOOTSTRAP = 1000
MIN_BOOTSTRAP_RUNGS = 3  # rungs per coefficient for a bootstrap over rungs (else parametric draws)
SAMPLES_KEPT = 400  # bootstrap coefficient samples written to the JSON (enough for a 90% interval)
FLOPS_PER_PARAM_TOKEN = 6.0  # C = 6 N D when a table gives no compute
MAX_LOG = 700.0  # math.exp overflows just above 709


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


def _exp(v: float) -> float:
    """exp that gives inf (null in JSON) instead of raising for a degenerate bootstrap's huge log."""
    return math.inf if v > MAX_LOG else math.exp(v)


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
    scatter_sd: float  # residual sd of ln h* around the law
    dof: int  # n_rungs - len(coef)
    n_rungs: int  # rungs fitted

    @property
    def spec(self) -> Form:
        return FORMS[self.form]

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
            out[name] = [_exp(lo), _exp(hi)] if name == "c" else [float(lo), float(hi)]
        return out

    def predict(self, N, D, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(value, 90% lo, 90% hi) at arrays N, D, C."""
        X = self.spec.design({"N": N, "D": D, "C": C})
        value = np.exp(X @ np.asarray(self.coef))
        s = np.asarray(self.samples, float)
        rng = np.random.default_rng(0)
        t = rng.standard_t(max(self.dof, 1), size=len(s)) if self.dof > 0 else np.zeros(len(s))
        draws = X @ s.T + self.scatter_sd * t[None, :]
        lo, hi = validation.percentile_interval(draws, PREDICTION_LEVEL, axis=1)
        return value, np.exp(lo), np.exp(hi)

    def to_json(self) -> dict:
        return {
            "param": self.param,
            "form": self.form,
            "inputs": list(self.spec.inputs),  # ln h* = coef_log . [1, ln inputs...] (sweeps read this)
            "expression": self.spec.expression(self.param, self.coef),
            "coef_log": list(self.coef),
            "samples": [list(r) for r in self.samples[:SAMPLES_KEPT]],
            "scatter_sd": self.scatter_sd,
            "dof": self.dof,
            "n_rungs": self.n_rungs,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> "HparamLaw":
        return cls(
            param=str(d["param"]),
            form=str(d["form"]),
            coef=tuple(float(v) for v in d["coef_log"]),
            samples=tuple(tuple(float(v) for v in r) for r in d["samples"]),
            scatter_sd=float(d["scatter_sd"]),
            dof=int(d["dof"]),
            n_rungs=int(d["n_rungs"]),
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


def fit_law(
    param: str, form: Form, inputs: Mapping[str, np.ndarray], opt: np.ndarray, seed: int = 0
) -> HparamLaw:
    """Least squares on ln(opt); coefficient samples from a bootstrap over rungs, or, with fewer
    than MIN_BOOTSTRAP_RUNGS rungs per coefficient, from the regression's own sampling distribution
    (multivariate Student-t around the fit with covariance s^2 (X'X)^-1): a bootstrap of 3 rungs
    only ever resamples the same exact fit or a degenerate one."""
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
        cov = sd**2 * np.linalg.inv(X.T @ X)
        z = rng.multivariate_normal(np.zeros(k), cov, size=SAMPLES_KEPT)
        scale = np.sqrt(dof / rng.chisquare(dof, size=(SAMPLES_KEPT, 1)))
        samples = [tuple(float(v) for v in coef + row) for row in z * scale]
    else:
        samples = []
    if not samples:
        samples = [tuple(float(v) for v in coef)]
    # keep only what the JSON keeps, so an HP.json read back predicts the intervals fit-hparams printed
    kept = tuple(samples[:SAMPLES_KEPT])
    return HparamLaw(param, form.name, tuple(float(v) for v in coef), kept, sd, dof, n)


def _bootstrap(X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> list[tuple[float, ...]]:
    n, k = X.shape
    out = []
    for idx in validation.bootstrap_indices(n, BOOTSTRAP, rng):
        if len(np.unique(idx)) <= k or np.linalg.matrix_rank(X[idx]) < k:
            continue  # cannot identify every exponent, or an exact fit through k rungs (no scatter)
        out.append(tuple(float(v) for v in _lstsq(X[idx], y[idx])))
    return out


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
    seed: int = 0,
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
