"""Accuracy as a sigmoid between the task's chance level and a ceiling, and its batched fitter.

Two forms share `acc = chance + (ceiling - chance) * sigmoid(z)`: `LOSS` (step 2 of the chain,
Bhagia et al. 2024), z = k (loss0 - task_loss), k > 0; `SIZE` (the direct method), z = b0 +
a_N ln(N / N_ref) + a_D ln(D / D_ref), a_N, a_D > 0 (refs: the ladder's geometric means). The
ceiling is fitted in [chance, 1] (chance + (1 - chance) sigmoid(g)) or fixed at 1: a ladder that
sees only the curve's foot barely constrains it, so the held-out check decides which predicted
better (docs/downstream.md).

Fit: least squares on accuracy by the shared multi-start L-BFGS (`core.lbfgs.minimize_batch`),
batched over starts or bootstrap resamples (weight rows); the bounds hold by construction, so the
optimiser is unconstrained. Every form and ceiling mode is one objective on a 4-slot parameter
vector, so a process compiles one program per padded row count for all of a ladder's fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit

from analysis.core import validation
from analysis.core.lbfgs import LBFGSConfig, minimize_batch

CEILING_FITTED, CEILING_ONE = "fitted", "one"
MAX_EXP = 40.0  # exp() arguments are clipped here: slopes beyond e^40 are numerically a step
SLOTS = 4  # the objective's parameter vector: [g (fitted ceiling), then z's parameters, padded]
MIN_ROWS = 128  # rows are padded (weight 0) to a power of two, at least this: one compiled shape
WIDTH = 64  # batch width of every fit and bootstrap (more starts queue for a free slot)
CFG = LBFGSConfig(max_evals=2000)


@dataclass(frozen=True)
class Form:
    """A sigmoid form: which inputs drive z, and how its internal parameters map to z."""

    name: str  # "loss" or "size"
    z_names: tuple[str, ...]  # internal parameters of z (after the ceiling's g when fitted)

    def n_params(self, ceiling: str) -> int:
        return len(self.z_names) + (ceiling == CEILING_FITTED)

    def z(self, th_BxP: np.ndarray, X: dict) -> np.ndarray:
        """(B, n) sigmoid argument for internal z-parameters `th_BxP` (without g); the inputs in X
        are (n,) arrays shared by the batch or (B, n) arrays, one row per batch member."""
        if self.name == "loss":
            k = np.exp(np.minimum(th_BxP[:, :1], MAX_EXP))
            return k * (th_BxP[:, 1:2] - X["loss"])
        aN, aD = (np.exp(np.minimum(th_BxP[:, i : i + 1], MAX_EXP)) for i in (1, 2))
        return th_BxP[:, :1] + aN * X["logN"] + aD * X["logD"]

    def predict(self, th_BxP: np.ndarray, X: dict, chance: float, ceiling: str) -> np.ndarray:
        th_BxP = np.atleast_2d(th_BxP)
        if ceiling == CEILING_FITTED:
            top = chance + (1.0 - chance) * expit(th_BxP[:, :1])
            th_BxP = th_BxP[:, 1:]
        else:
            top = 1.0
        return chance + (top - chance) * expit(self.z(th_BxP, X))

    def starts(self, X: dict, ceiling: str) -> np.ndarray:
        """(S, P) internal start points, scaled to the data so that no unit choice matters."""
        if self.name == "loss":
            lo, span = float(X["loss"].min()), float(np.ptp(X["loss"])) or 1.0
            z = [
                (math.log(s / span), x0)
                for s in (1.0, 3.0, 10.0, 30.0)
                for x0 in (lo - span / 2, lo, lo + span / 4, lo + span / 2)
            ]
        else:
            z = [
                (b0, math.log(aN), math.log(aD))
                for b0 in (-3.0, -1.0, 1.0)
                for aN in (0.1, 0.5, 1.5)
                for aD in (0.1, 0.5, 1.5)
            ]
        z = np.array(z, float)
        if ceiling != CEILING_FITTED:
            return z
        return np.vstack([np.hstack([np.full((len(z), 1), g), z]) for g in (0.0, 3.0, 8.0)])

    def public(self, th: np.ndarray, chance: float, ceiling: str, refs: dict) -> dict:
        """Named parameters in the units a reader uses (ceiling as an accuracy)."""
        th = np.asarray(th, float).ravel()
        top = chance + (1 - chance) * float(expit(th[0])) if ceiling == CEILING_FITTED else 1.0
        z = th[1:] if ceiling == CEILING_FITTED else th
        out = {"chance": chance, "ceiling": top}
        if self.name == "loss":
            out.update(k=math.exp(min(z[0], MAX_EXP)), loss0=float(z[1]))
        else:
            out.update(
                b0=float(z[0]),
                a_N=math.exp(min(z[1], MAX_EXP)),
                a_D=math.exp(min(z[2], MAX_EXP)),
                N_ref=refs["N_ref"],
                D_ref=refs["D_ref"],
            )
        return out


LOSS = Form("loss", ("log_k", "loss0"))
SIZE = Form("size", ("b0", "log_a_N", "log_a_D"))
FORMS = {f.name: f for f in (LOSS, SIZE)}


def inputs(form: Form, loss: np.ndarray | None, N: np.ndarray, D: np.ndarray, refs: dict) -> dict:
    """The arrays `form` reads: task loss, or log N and log D about the ladder's references."""
    if form.name == "loss":
        return {"loss": np.asarray(loss, float)}
    return {
        "logN": np.log(np.asarray(N, float) / refs["N_ref"]),
        "logD": np.log(np.asarray(D, float) / refs["D_ref"]),
    }


def _objective(th, loss, logN, logD, y, w, chance, is_loss, fitted):
    """sum_n w_n (acc(th)_n - y_n)^2 on the 4-slot vector th = [g, t1, t2, t3]: `is_loss` picks
    z = e^t1 (t2 - loss) (LOSS) or t1 + e^t2 logN + e^t3 logD (SIZE); `fitted` the ceiling
    chance + (1 - chance) sigmoid(g) over the ceiling 1. The same formulas as `Form.predict`."""
    top = jnp.where(fitted, chance + (1.0 - chance) * jax.nn.sigmoid(th[0]), 1.0)
    e1, e2, e3 = (jnp.exp(jnp.minimum(th[i], MAX_EXP)) for i in (1, 2, 3))
    z = jnp.where(is_loss, e1 * (th[2] - loss), th[1] + e2 * logN + e3 * logD)
    r = chance + (top - chance) * jax.nn.sigmoid(z) - y
    return jnp.sum(w * r * r)


def minimize_sse(
    form: Form, X: dict, y_N: np.ndarray, chance: float, ceiling: str, th0_BxP: np.ndarray, w_BxN: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Minimise sum_n w[b, n] (acc(th)[b, n] - y[n])^2 from every row b of `th0_BxP` (the form's
    internal parameters) with its own row of weights (and, when X["loss"] is (B, n), its own row of
    task losses): (th_BxP, cost_B), cost inf where the objective was never finite. One
    `minimize_batch` call on the padded 4-slot program."""
    B, P = th0_BxP.shape
    n = y_N.size
    pad = validation.padded_rows(n, MIN_ROWS) - n
    offset = int(ceiling == CEILING_FITTED)
    th4 = np.zeros((B, SLOTS))
    th4[:, 1 - offset : 1 - offset + P] = th0_BxP  # g in slot 0 when fitted; z's parameters from slot 1

    def col(v):
        return np.concatenate([np.zeros(n) if v is None else np.asarray(v, float), np.zeros(pad)])

    w = np.broadcast_to(np.asarray(w_BxN, float), (B, n))
    # the task loss may differ per batch row (the law-loss chain's bootstrap: resample b's law), so it
    # is always passed as a (B, n) argument: one compiled program for both cases
    loss = (
        np.zeros((B, n)) if X.get("loss") is None else np.broadcast_to(np.asarray(X["loss"], float), (B, n))
    )
    args = (
        np.concatenate([loss, np.zeros((B, pad))], axis=1),
        col(X.get("logN")),
        col(X.get("logD")),
        col(y_N),
        np.concatenate([w, np.zeros((B, pad))], axis=1),
        np.asarray(float(chance)),
        np.asarray(form.name == LOSS.name),
        np.asarray(ceiling == CEILING_FITTED),
    )
    with jax.enable_x64(True):
        res = minimize_batch(
            _objective,
            th4,
            args,
            batched_args=(True, False, False, False, True, False, False, False),
            cfg=CFG,
            width=WIDTH,
            slots=WIDTH,
        )
    cost = np.where(np.isfinite(res.f), res.f, np.inf)
    return res.x[:, 1 - offset : 1 - offset + P], cost


@dataclass(frozen=True)
class SigmoidFit:
    """A fitted sigmoid of one task (the `step2` / `direct` objects of `fit-task --json`)."""

    form: str  # "loss" (step 2 of the chain) or "size" (direct method)
    ceiling_mode: str  # "fitted" (in [chance, 1]) or "one" (fixed at 1)
    theta: tuple[float, ...]  # internal parameters (see `Form`)
    params: dict  # public parameters: chance, ceiling, and k, loss0 or b0, a_N, a_D, N_ref, D_ref
    rms: float  # root-mean-square in-sample residual (accuracy units)
    n_points: int  # rows fitted

    def predict(self, X: dict) -> np.ndarray:
        return FORMS[self.form].predict(np.array([self.theta]), X, self.params["chance"], self.ceiling_mode)[
            0
        ]

    def to_dict(self) -> dict:
        return {
            "form": self.form,
            "ceiling_mode": self.ceiling_mode,
            **self.params,
            "rms": self.rms,
            "n_points": self.n_points,
        }


def fit(
    form: Form,
    X: dict,
    y: np.ndarray,
    chance: float,
    ceiling: str,
    refs: dict,
    weights: np.ndarray | None = None,
) -> SigmoidFit:
    """The best of the form's start grid (all starts in one batch)."""
    th0 = form.starts(X, ceiling)
    w = np.ones(y.size) if weights is None else np.asarray(weights, float)
    th, cost = minimize_sse(form, X, y, chance, ceiling, th0, w[None, :])
    best = int(np.nanargmin(cost))
    pred = form.predict(th[best : best + 1], X, chance, ceiling)[0]
    rms = float(np.sqrt(np.average((pred - y) ** 2, weights=w)))
    return SigmoidFit(
        form=form.name,
        ceiling_mode=ceiling,
        theta=tuple(map(float, th[best])),
        params=form.public(th[best], chance, ceiling, refs),
        rms=rms,
        n_points=int(y.size),
    )


def bootstrap(fitted: SigmoidFit, X: dict, y: np.ndarray, w_BxN: np.ndarray) -> np.ndarray:
    """(B, P) internal parameters refitted under each weight row (a resample's run counts),
    started from the full-data optimum; rows whose refit fails are NaN. X["loss"] may be (B, n):
    row b's task losses (a NaN row, a failed step-1 resample, gives a NaN refit)."""
    form = FORMS[fitted.form]
    chance = fitted.params["chance"]
    B = w_BxN.shape[0]
    th0 = np.repeat(np.array([fitted.theta]), B, axis=0)
    bad = np.zeros(B, bool)
    if X.get("loss") is not None and np.ndim(X["loss"]) == 2:
        loss = np.array(X["loss"], float)
        bad = ~np.all(np.isfinite(loss), axis=1)
        loss[bad] = 1.0  # placeholder: the row's refit is discarded below
        X = {**X, "loss": loss}
    th, cost = minimize_sse(form, X, y, chance, fitted.ceiling_mode, th0, w_BxN)
    th[~np.isfinite(cost) | bad] = np.nan
    return th


def predict_samples(fitted: SigmoidFit, theta_BxP: np.ndarray, X: dict) -> np.ndarray:
    """(B, n) predictions: row b uses parameters b (and row b of any (B, n) input in X)."""
    return FORMS[fitted.form].predict(theta_BxP, X, fitted.params["chance"], fitted.ceiling_mode)
