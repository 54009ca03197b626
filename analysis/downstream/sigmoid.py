"""Accuracy as a sigmoid between the task's chance level and a ceiling, and its batched fitter.

Two forms share the shape `acc = chance + (ceiling - chance) * sigmoid(z)`:

- `LOSS` (step 2 of the chain, Bhagia et al. 2024): z = k (loss0 - task_loss), k > 0, so
  accuracy rises as the task loss falls, from chance towards the ceiling;
- `SIZE` (the direct method): z = b0 + a_N ln(N / N_ref) + a_D ln(D / D_ref), a_N, a_D > 0,
  accuracy straight from model size and tokens (N_ref, D_ref: the ladder's geometric means).

The ceiling is either fitted, bounded to [chance, 1] by construction (ceiling = chance +
(1 - chance) sigmoid(g)), or fixed at 1. Why both: a ladder that sees only the lower part of
the curve barely constrains the ceiling, and a least-squares ceiling fitted to it is arbitrary
(on the Gadre et al. runs it lands anywhere from 0.46 to 1 for one task, depending on which
sizes are fitted); the held-out check (`analysis.downstream.holdout`) decides per task which
one predicted larger models better.

Fit: weighted least squares on accuracy, Levenberg-Marquardt vectorised over a batch (start
points, or bootstrap resamples as weight rows), in NumPy: the problems have 2-4 parameters, so
a few hundred of them are solved together in milliseconds. Plain least squares because the
scatter of accuracy around the curve is roughly Gaussian (binomial evaluation noise, run-to-run
variation) and the same size for every row of one task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

CEILING_FITTED, CEILING_ONE = "fitted", "one"
MAX_EXP = 40.0  # exp() arguments are clipped here: slopes beyond e^40 are numerically a step


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


def _jacobian(f, th: np.ndarray, sw: np.ndarray) -> np.ndarray:
    """(B, N, P) central-difference Jacobian of sqrt(w) * f."""
    B, P = th.shape
    out = np.empty((B, sw.shape[1], P))
    for p in range(P):
        h = 1e-6 * (1.0 + np.abs(th[:, p : p + 1]))
        up, dn = th.copy(), th.copy()
        up[:, p : p + 1] += h
        dn[:, p : p + 1] -= h
        out[:, :, p] = sw * (f(up) - f(dn)) / (2 * h)
    return out


def least_squares_batch(
    f, th0_BxP: np.ndarray, y_N: np.ndarray, w_BxN: np.ndarray, max_iter: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Minimise sum_n w[b, n] (f(th)[b, n] - y[n])^2 for every row b: (th_BxP, cost_B).

    Levenberg-Marquardt with per-row damping (x0.3 on success, x10 on failure); a row stops when an
    accepted step lowers its cost by less than 1e-12 relative, or its damping exceeds 1e10.
    """
    th = np.array(th0_BxP, float)
    sw = np.sqrt(np.broadcast_to(w_BxN, (th.shape[0], y_N.size)))
    cost = np.sum((sw * (f(th) - y_N)) ** 2, axis=1)
    lam = np.full(th.shape[0], 1e-3)
    active = np.isfinite(cost)
    eye = np.eye(th.shape[1])
    for _ in range(max_iter):
        if not active.any():
            break
        a = np.flatnonzero(active)
        ta, swa = th[a], sw[a]
        J = _jacobian(f, ta, swa)
        r = swa * (f(ta) - y_N)
        A, g = np.einsum("bnp,bnq->bpq", J, J), np.einsum("bnp,bn->bp", J, r)
        M = A + lam[a, None, None] * (np.einsum("bpp->bp", A)[:, :, None] * eye + 1e-12 * eye)
        step = np.linalg.solve(M, -g[:, :, None])[:, :, 0]
        new = ta + step
        c_new = np.sum((swa * (f(new) - y_N)) ** 2, axis=1)
        ok = np.isfinite(c_new) & (c_new < cost[a])
        small = ok & (cost[a] - c_new <= 1e-12 * cost[a] + 1e-300)
        th[a[ok]], cost[a[ok]] = new[ok], c_new[ok]
        lam[a] = np.where(ok, np.maximum(lam[a] * 0.3, 1e-12), lam[a] * 10.0)
        active[a[small | (lam[a] > 1e10)]] = False
    return th, cost


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


def _batched(form: Form, X: dict, chance: float, ceiling: str):
    """f(th) over a batch of parameter rows, all on the same inputs X."""
    return lambda th: form.predict(th, X, chance, ceiling)


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
    th, cost = least_squares_batch(_batched(form, X, chance, ceiling), th0, y, w[None, :])
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
    started from the full-data optimum; rows whose refit fails are NaN."""
    form = FORMS[fitted.form]
    chance = fitted.params["chance"]
    th0 = np.repeat(np.array([fitted.theta]), w_BxN.shape[0], axis=0)
    th, cost = least_squares_batch(_batched(form, X, chance, fitted.ceiling_mode), th0, y, w_BxN)
    th[~np.isfinite(cost)] = np.nan
    return th


def predict_samples(fitted: SigmoidFit, theta_BxP: np.ndarray, X: dict) -> np.ndarray:
    """(B, n) predictions: row b uses parameters b (and row b of any (B, n) input in X)."""
    return FORMS[fitted.form].predict(theta_BxP, X, fitted.params["chance"], fitted.ceiling_mode)
