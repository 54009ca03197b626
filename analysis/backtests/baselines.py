"""The simple baselines every default is measured against: what a researcher writes in 40 lines of
SciPy, with no engine, no Huber loss, no method choice. Each gives a point prediction and a naive
90% interval (the in-sample log residuals' scatter, `validation.scatter_sd`, as a Gaussian).

- `chinchilla`: L = E + A N^-alpha + B D^-beta by `scipy.optimize.least_squares` on log loss from a
  small grid of starts (repeated tokens count as fresh ones);
- `minima_power_law`: L*(C) = E + A C^-alpha on the best run of each budget;
- `log_linear`: log h* = a + b log N (+ c log D) by ordinary least squares on the rung optima.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
from scipy.optimize import least_squares

from analysis.core import validation
from analysis.core.methods import Family, Method, Prediction, Role, register


@dataclass(frozen=True)
class BaselineFit:
    """A fitted baseline: its parameters and the sd of its in-sample log residuals."""

    name: str
    params: np.ndarray
    log_sd: float

    def band(self, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The naive 90% interval around predictions (Gaussian in log units)."""
        return pred * np.exp(-validation.Z90 * self.log_sd), pred * np.exp(validation.Z90 * self.log_sd)


def _chinchilla_loss(p: np.ndarray, N: np.ndarray, D: np.ndarray) -> np.ndarray:
    E, a, b, al, be = p
    return np.exp(E) + np.exp(a - al * np.log(N)) + np.exp(b - be * np.log(D))


def fit_chinchilla(N: np.ndarray, D: np.ndarray, loss: np.ndarray) -> BaselineFit:
    """Least squares of log L on E + A N^-alpha + B D^-beta (E, A, B fitted in log) from a grid."""
    y = np.log(loss)
    best = None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for e, a, b, al, be in itertools.product(
            (-1.0, 0.5), (0.0, 5.0, 10.0), (0.0, 5.0, 10.0), (0.2, 0.5), (0.2, 0.5)
        ):
            f = lambda p: np.log(_chinchilla_loss(p, N, D)) - y
            r = least_squares(f, [e, a, b, al, be], bounds=([-10, -5, -5, 0, 0], [3, 40, 40, 2.5, 2.5]))
            if np.isfinite(r.cost) and (best is None or r.cost < best.cost):
                best = r
    resid = np.log(_chinchilla_loss(best.x, N, D)) - y
    return BaselineFit("chinchilla", best.x, validation.scatter_sd(resid))


def predict_chinchilla(fit: BaselineFit, N: np.ndarray, D: np.ndarray) -> np.ndarray:
    return _chinchilla_loss(fit.params, np.asarray(N, float), np.asarray(D, float))


def fit_minima_power_law(C: np.ndarray, best_loss: np.ndarray) -> BaselineFit:
    """L*(C) = E + A (C / C_max)^-alpha (E >= 0, A >= 0) by least squares in log loss."""
    c = np.asarray(C, float) / np.max(C)
    y = np.log(best_loss)
    f = lambda p: np.log(p[0] + p[1] * c ** -p[2]) - y
    best = None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for e_frac, al in itertools.product((0.0, 0.5, 0.9), (0.05, 0.2, 0.5)):
            e0 = e_frac * best_loss.min()
            p0 = [e0, max(best_loss.min() - e0, 1e-3), al]
            r = least_squares(f, p0, bounds=([0, 0, 0], [best_loss.min(), np.inf, 3.0]))
            if np.isfinite(r.cost) and (best is None or r.cost < best.cost):
                best = r
    params = np.append(best.x, np.max(C))
    return BaselineFit("minima_power_law", params, validation.scatter_sd(f(best.x)))


def predict_minima_power_law(fit: BaselineFit, C: np.ndarray) -> np.ndarray:
    E, A, al, C_max = fit.params
    return E + A * (np.asarray(C, float) / C_max) ** -al


def fit_log_linear(X: np.ndarray, target: np.ndarray) -> BaselineFit:
    """log target = X @ coef by ordinary least squares (X: [1, log N, (log D)])."""
    y = np.log(target)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    return BaselineFit("log_linear", coef, validation.scatter_sd(X @ coef - y))


def predict_log_linear(fit: BaselineFit, X: np.ndarray) -> np.ndarray:
    return np.exp(X @ fit.params)


@dataclass(frozen=True)
class BaselineResult:
    """A baseline fitted on a whole table (what the registry's baseline methods return)."""

    fit: BaselineFit
    predict_fn: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    n_points: int

    def summary(self) -> str:
        p = ", ".join(f"{v:.4g}" for v in self.fit.params)
        return (
            f"baseline {self.fit.name} on {self.n_points} points: params [{p}], log sd {self.fit.log_sd:.3g}"
        )

    def to_dict(self) -> dict:
        return {"baseline": self.fit.name, "params": self.fit.params.tolist(), "log_sd": self.fit.log_sd}


def predict_baseline(result: BaselineResult, inputs: Mapping[str, np.ndarray]) -> Prediction:
    pred = np.asarray(result.predict_fn({k: np.asarray(v, float) for k, v in inputs.items()}), float)
    return Prediction(pred, *result.fit.band(pred))


def register_baseline(
    name: str, family: Family, protocols: tuple[str, ...], fit: Callable[..., BaselineResult], doc: str
) -> Method:
    return register(Method(name, family, protocols, Role.BASELINE, fit, predict_baseline, doc=doc))
