"""The loss frontier: the best loss expected at a compute budget, predicted directly.

Why: a planner acts on the loss at its budget, far beyond the ladder. The law's IsoFLOP minimum,
L(N*(C), D*(C)), reads it off the fitted surface, whose shape is pinned down inside the ladder
but whose level far beyond it is an extrapolation of all five constants at once. Porian et al.
2024 ("Resolving discrepancies in compute-optimal scaling", arXiv:2406.19146) instead fit the
per-budget best losses directly, L*(C) = E + A·C^-alpha. Which extrapolates better is a
property of the data, so both are candidates, with their geometric mean as a third:

- `law_minimum`: the fitted law's closed-form IsoFLOP minimum;
- `frontier_power_law`: E + A·C^-alpha (E >= 0, A >= 0) fitted to the frontier points, the best
  run of each budget (in log loss, by variable projection over a grid of alpha);
- `combined`: the geometric mean of the two.

The default is the direct power law whenever the ladder has enough budgets for it and for its
forward-chaining folds (`BASE_METHOD`; the backtest zoo's evidence is at the constant). The folds
(the law's own forward-chaining cuts, `validation.forward_cuts`, each candidate fitted below the cut
and predicting the best run of every budget above it) are still computed: they give every method's
error model and the `fold_mae` the JSON reports. They do not choose: on two to six folds a choice
can be wrong, and on the zoo it was (see `BASE_METHOD`). Too few budgets: the law minimum, said in
`reason`; `Frontier.with_method` predicts with another method on request.

The chosen method's 90% prediction interval follows the project's error model
(`analysis.core.intervals`): the bootstrap over runs (the law's resamples, and the frontier
refitted on the same resamples' best runs), the frontier points' scatter around the chosen
prediction, and a budget offset plus a drift per decade measured from the same fold errors.

Budgets: an IsoFLOP sweep's runs group into budgets (`budgets.group_budgets`); a ladder whose
runs scatter in C (Epoch's reconstruction of the Chinchilla runs: 23 groups for 240 runs) is
binned instead, at `BIN_DECADES`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from analysis.core import intervals, validation
from analysis.core.budgets import group_budgets

# A budget has >= this many runs on average in an IsoFLOP sweep; below it the C values scatter
# (one run per C) and frontier points come from bins of BIN_DECADES instead.
MIN_RUNS_PER_BUDGET = 3
# Width of a frontier bin in decades of C for scattered ladders: 4 points per decade (a half
# decade leaves Epoch's 1.4e18-1e20 fit side 4 points, too few for its forward-chaining folds).
BIN_DECADES = 0.25
# Points the 3-coefficient frontier needs: one more than its coefficients.
MIN_FRONTIER_POINTS = 4
# Exponent grid of the variable projection: 0.005-2 covers every published compute exponent of
# the loss (Kaplan et al. 2020: 0.050; Porian et al.: ~0.05-0.2) with room either side.
ALPHA_GRID = np.geomspace(0.005, 2.0, 400)
REFINE_ROUNDS = 6  # parabolic refinements of the best grid alpha: 1.5% grid step / 4^6 = 4e-6


class FrontierMethod(enum.StrEnum):
    """How `allocation.budgets[i].loss` was predicted (`loss_method` in the JSON)."""

    LAW_MINIMUM = "law_minimum"
    POWER_LAW = "frontier_power_law"
    COMBINED = "combined"


@dataclass(frozen=True)
class FrontierFit:
    """L*(C) = E + A·(C/C_ref)^-alpha fitted to frontier points."""

    E: float  # the frontier's floor (nats per token)
    A: float  # its scale at C = C_ref
    alpha: float  # its compute exponent
    C_ref: float  # reference budget (the largest frontier point's C)

    def loss(self, C: np.ndarray) -> np.ndarray:
        return self.E + self.A * (np.asarray(C, float) / self.C_ref) ** -self.alpha


@dataclass(frozen=True)
class Frontier:
    """The chosen frontier predictor of one fit, with its evidence (`frontier` in `fit --json`)."""

    method: FrontierMethod  # the candidate used for `allocation.budgets[i].loss`
    reason: str  # why (the fold scores, or why there were none)
    power_law: FrontierFit | None  # the direct fit on all frontier points (None: too few)
    # per candidate, the mean |log error| of its forward-chaining predictions (NaN: not scored)
    fold_mae: dict[str, float]
    n_folds: int  # folds every candidate was scored on
    n_points: int  # frontier points of the full fit
    points_C: tuple[float, ...]  # the frontier points: C of each budget's best run
    points_loss: tuple[float, ...]  # and its loss
    error: intervals.PredictionError  # the chosen method's error model (log-loss units)
    # (S, 3) bootstrap (E, A, alpha) of the power law on the law's resamples, or None
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)
    # every candidate's error model (benchmarks compare them; only the chosen one is written)
    alternatives: dict = field(default_factory=dict, compare=False, repr=False)

    def with_method(self, method: FrontierMethod | str) -> "Frontier":
        """This frontier predicting with `method` (and its error model) instead of the chosen one."""
        m = FrontierMethod(method)
        return replace(self, method=m, error=self.alternatives.get(m, self.error))

    def to_dict(self) -> dict[str, Any]:
        pl = self.power_law
        return {
            "method": str(self.method),
            "reason": self.reason,
            "power_law": None if pl is None else {"E": pl.E, "A": pl.A, "alpha": pl.alpha, "C_ref": pl.C_ref},
            "fold_mae": {k: _finite(v) for k, v in self.fold_mae.items()},
            "n_folds": self.n_folds,
            "points": {"C": list(self.points_C), "loss": list(self.points_loss)},
            "prediction_error": self.error.to_dict(),
            "power_law_samples": None if self.samples is None else self.samples.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Frontier":
        pl = d.get("power_law")
        samples = d.get("power_law_samples")
        return cls(
            method=FrontierMethod(d["method"]),
            reason=str(d.get("reason", "")),
            power_law=None if not pl else FrontierFit(*(float(pl[k]) for k in ("E", "A", "alpha", "C_ref"))),
            fold_mae={k: math.nan if v is None else float(v) for k, v in d.get("fold_mae", {}).items()},
            n_folds=int(d.get("n_folds", 0)),
            n_points=len(d.get("points", {}).get("C", [])),
            points_C=tuple(float(c) for c in d.get("points", {}).get("C", [])),
            points_loss=tuple(float(v) for v in d.get("points", {}).get("loss", [])),
            error=intervals.PredictionError.from_dict(d["prediction_error"]),
            samples=None if not samples else np.asarray(samples, float),
        )

    def predict(
        self, C: np.ndarray, law_loss: np.ndarray, law_samples_SxC: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(loss, (S, len C) bootstrap losses or None) of the chosen method at budgets C, given the
        law's IsoFLOP minimum there (`law_loss`) and on its bootstrap samples."""
        C = np.atleast_1d(np.asarray(C, float))
        if self.method == FrontierMethod.LAW_MINIMUM or self.power_law is None:
            return np.asarray(law_loss, float), law_samples_SxC
        pl = self.power_law.loss(C)
        pl_s = None if self.samples is None else _power_law_samples(self.samples, C, self.power_law.C_ref)
        paired = law_samples_SxC is not None and pl_s is not None and len(pl_s) == len(law_samples_SxC)
        if self.method == FrontierMethod.COMBINED and not paired:
            pl_s = None
        samples = None if pl_s is None else _by_method(self.method, pl_s, law_samples_SxC)
        return _by_method(self.method, pl, np.asarray(law_loss, float)), samples

    def interval(
        self, C: np.ndarray, loss: np.ndarray, samples_SxC: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """90% prediction interval of the best loss at budgets C around `loss` (from `predict`)."""
        C = np.atleast_1d(np.asarray(C, float))
        with np.errstate(all="ignore"):
            log_s = None if samples_SxC is None else np.log(samples_SxC)
        return validation.interval(np.log(loss), log_s, self.error.sd(self.error.decades(C)))


def _by_method(method: FrontierMethod, power_law: np.ndarray | None, law: np.ndarray) -> np.ndarray:
    """A method's prediction from the power law's and the law minimum's (the law's alone without
    a power law)."""
    if method == FrontierMethod.LAW_MINIMUM or power_law is None:
        return law
    return power_law if method == FrontierMethod.POWER_LAW else np.sqrt(power_law * law)


def _finite(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def _power_law_samples(samples_Sx3: np.ndarray, C: np.ndarray, C_ref: float) -> np.ndarray:
    E, A, al = (samples_Sx3[:, i, None] for i in range(3))
    with np.errstate(all="ignore"):
        return E + A * (C[None, :] / C_ref) ** -al


# ---- frontier points -----------------------------------------------------------------------------
def budget_labels(C: np.ndarray) -> np.ndarray:
    """Integer budget per run: IsoFLOP groups when the sweep has them, else bins of BIN_DECADES."""
    C = np.asarray(C, float)
    groups = group_budgets(C)
    if C.size >= MIN_RUNS_PER_BUDGET * (int(groups.max()) + 1):
        return groups
    return np.floor(np.log10(C) / BIN_DECADES).astype(int)


def frontier_points(
    C: np.ndarray, loss: np.ndarray, labels: np.ndarray, weights_BxN: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, loss, present) of each budget's best run, budgets in label order; with (B, N) resample
    counts, one row per resample ((B, K) arrays; `present` False where a resample drew no run)."""
    loss = np.asarray(loss, float)
    uniq = np.unique(labels)
    w = np.ones((1, loss.size)) if weights_BxN is None else np.asarray(weights_BxN, float)
    L = np.where(w > 0, loss[None, :], np.inf)
    Cb, Lb = np.empty((w.shape[0], uniq.size)), np.empty((w.shape[0], uniq.size))
    for j, g in enumerate(uniq):
        idx = np.flatnonzero(labels == g)
        best = idx[np.argmin(L[:, idx], axis=1)]
        Cb[:, j], Lb[:, j] = np.asarray(C, float)[best], L[np.arange(w.shape[0]), best]
    present = np.isfinite(Lb)
    if weights_BxN is None:
        return Cb[0], Lb[0], present[0]
    return Cb, Lb, present


def fit_power_law(C_BxK: np.ndarray, L_BxK: np.ndarray, present_BxK: np.ndarray, C_ref: float) -> np.ndarray:
    """(B, 3) least-squares (E, A, alpha) of log L ~ log(E + A (C/C_ref)^-alpha), E in [0, min L],
    A >= 0, per row: for each alpha of ALPHA_GRID, E and A by weighted linear least squares in L
    (weights 1/L^2: relative errors, the log-loss objective to first order), the best alpha refined
    by parabolic steps on a shrinking bracket. Rows with fewer than MIN_FRONTIER_POINTS points: NaN."""
    C, L, m = (np.atleast_2d(np.asarray(a, float)) for a in (C_BxK, L_BxK, present_BxK))
    m = m > 0
    L = np.where(m, L, 1.0)
    g = np.argmin(_grid_sse(C / C_ref, L, m), axis=1)
    la, h = np.log(ALPHA_GRID)[g], np.log(ALPHA_GRID[1] / ALPHA_GRID[0])
    for _ in range(REFINE_ROUNDS):  # parabolic steps on a bracket shrinking 4x per round
        trial = np.exp(la[:, None] + h * np.array([-1.0, 0.0, 1.0])[None, :])
        x3 = np.where(m[..., None], (C / C_ref)[..., None] ** -trial[:, None, :], 0.0)
        y0, y1, y2 = _sse(x3, L, m).T
        den = y0 - 2 * y1 + y2
        with np.errstate(all="ignore"):
            shift = np.where(den > 0, 0.5 * (y0 - y2) / den, np.where(y0 < y2, -1.0, 1.0))
        la = la + np.clip(np.nan_to_num(shift), -1, 1) * h
        h /= 4
    alpha = np.exp(la)
    x = np.where(m, (C / C_ref) ** -alpha[:, None], 0.0)
    E, A = _linear(x, L, m)
    out = np.stack([E, A, alpha], axis=1)
    out[m.sum(axis=1) < MIN_FRONTIER_POINTS] = np.nan
    return out


def _linear(x: np.ndarray, L: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E, A of L ~ E + A x by weighted least squares over the axis of points (axis 1), with E
    clipped to [0, min L] and A >= 0 (then the other coefficient refitted)."""
    if x.ndim == 3:
        L, m = L[..., None], m[..., None]
    w = np.where(m, 1.0 / L**2, 0.0)
    sw, sx, sy = w.sum(1), (w * x).sum(1), (w * L).sum(1)
    sxx, sxy = (w * x * x).sum(1), (w * x * L).sum(1)
    return _coefficients(sw, sx, sy, sxx, sxy, np.where(m, L, np.inf).min(1))


def _coefficients(sw, sx, sy, sxx, sxy, Lmin) -> tuple[np.ndarray, np.ndarray]:
    """`_linear`'s E, A from the weighted sums over points (and the smallest L)."""
    with np.errstate(all="ignore"):
        det = sw * sxx - sx * sx
        A = (sw * sxy - sx * sy) / det
        E = (sy - A * sx) / sw
        low = E < 0  # no floor: a pure power law
        A = np.where(low, sxy / sxx, A)
        E = np.where(low, 0.0, E)
        high = (E > Lmin) | (A < 0) | ~np.isfinite(A)  # flat: the weighted mean
        E = np.where(high, sy / sw, E)
        A = np.where(high, 0.0, A)
    return E, A


def _grid_sse(ratio_BxK: np.ndarray, L: np.ndarray, m: np.ndarray) -> np.ndarray:
    """`_sse` at every alpha of ALPHA_GRID, the same numbers computed budget by budget: x = (C/C_ref)^-alpha
    is taken from a table over the distinct ratios (a bootstrap's frontier points are the budgets of a
    few hundred runs, not B x K values), and every sum over budgets adds (B, G) slices one budget after
    the other, the order of numpy's sum over that axis, so no (B, K, G) array is made. A budget a
    resample has no run in weighs 0 and its residual is dropped, as `_sse`'s zeros do.
    On Epoch's 1,000 resamples x 23 budgets x 400 alphas: 0.9 s -> 0.1 s, the same samples."""
    ratios, inv = np.unique(ratio_BxK, return_inverse=True)
    inv = inv.reshape(ratio_BxK.shape)
    table_UxG = ratios[:, None] ** -ALPHA_GRID[None, :]
    finite = bool(np.isfinite(table_UxG).all())  # else a budget a resample lacks must not add 0 * inf
    B, K = L.shape
    w = np.where(m, 1.0 / L**2, 0.0)[..., None]  # (B, K, 1), as `_linear` builds it
    sw, sy = w.sum(1), (w * L[..., None]).sum(1)
    sx, sxx, sxy = (np.zeros((B, ALPHA_GRID.size)) for _ in range(3))
    wx, tmp = np.empty_like(sx), np.empty_like(sx)
    for k in range(K):  # (w x).sum(1), (w x x).sum(1) and (w x L).sum(1), budget by budget
        x = table_UxG[inv[:, k]]
        np.multiply(w[:, k], x, out=wx)
        if not finite:
            wx[~m[:, k]] = 0.0
        sx += wx
        sxx += np.multiply(wx, x, out=tmp)
        sxy += np.multiply(wx, L[:, k, None], out=tmp)
    E, A = _coefficients(sw, sx, sy, sxx, sxy, np.where(m, L, np.inf).min(1)[:, None])
    logL = np.log(L)
    sse = np.zeros_like(sx)
    with np.errstate(all="ignore"):
        for k in range(K):
            r = np.multiply(A, table_UxG[inv[:, k]], out=tmp)
            r += E
            np.log(r, out=r)
            r -= logL[:, k, None]
            np.square(r, out=r)
            np.add(sse, r, out=sse, where=m[:, k, None])
    return np.where(np.isfinite(sse), sse, np.inf)


def _sse(x_BxKxG: np.ndarray, L: np.ndarray, m: np.ndarray) -> np.ndarray:
    """(B, G) sum of squared log residuals of the best (E, A) at every alpha of the grid."""
    E, A = _linear(x_BxKxG, L, m)
    with np.errstate(all="ignore"):
        pred = E[:, None, :] + A[:, None, :] * x_BxKxG
        r = np.where(m[..., None], np.log(pred) - np.log(L)[..., None], 0.0)
    sse = (r**2).sum(1)
    return np.where(np.isfinite(sse), sse, np.inf)


# The frontier method used whenever it can be fitted and scored. On the backtest zoo (docs/zoo.md,
# 9 ladders) it is the one method never worse than the simple baseline by more than 10% (at most
# 1.02x). Choosing on the ladder's own folds did worse: the first of power law, combined and law
# minimum within 10% of the best lost to the baseline on 6 of 9 (mean 2.19% vs 1.58%), and keeping
# the power law unless another method beat it on every fold by >10% still lost on 4 of 9 (1.85%):
# on Epoch's runs the law minimum won all 6 folds (0.47% vs 1.76%, early folds leave the 3-parameter
# frontier 4-5 points) and then missed the budgets above 1e20 by 0.83% against the power law's 0.55%.
BASE_METHOD = FrontierMethod.POWER_LAW
# A ladder has 2-6 scoreable folds, so fold errors within 10% of each other are a tie (on
# synthetic misspecified ladders of 6 budgets the two candidates' fold errors were 1.86% and
# 1.89% while their errors 4-50x beyond were 0.5% and 5.4%).


# ---- the choice ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LawFold:
    """One forward-chaining fold of the law: the runs it was fitted on and its refit."""

    fit_mask: np.ndarray  # (n_runs,) bool
    law_params: np.ndarray  # (5,) E, A, B, alpha, beta of the refit


def estimate(
    C: np.ndarray,
    loss: np.ndarray,
    law_params: np.ndarray,
    folds: Sequence[LawFold],
    law_minimum: Callable[[np.ndarray, np.ndarray], np.ndarray],
    counts_BxN: np.ndarray | None = None,
) -> Frontier:
    """Choose and calibrate the frontier predictor of a Chinchilla-form fit on runs (C, loss).

    `law_params` are the full fit's constants, `folds` its forward-chaining refits,
    `law_minimum(params, C)` its IsoFLOP minimum at budgets C (passed in: this module sits below
    `analysis.laws.allocation`, which imports it) and `counts_BxN` the resample counts of its
    bootstrap (the frontier is refitted on the same resamples, so `combined` pairs resample b of
    each)."""
    C, loss = np.asarray(C, float), np.asarray(loss, float)
    labels = budget_labels(C)
    pC, pL, _ = frontier_points(C, loss, labels)
    C_ref = float(pC.max())
    pl_params = fit_power_law(pC[None], pL[None], np.ones((1, pC.size), bool), C_ref)[0]
    pl = FrontierFit(*(float(v) for v in pl_params), C_ref) if np.all(np.isfinite(pl_params)) else None
    errs, dists = _fold_errors(C, loss, labels, folds, law_minimum)
    scored = [
        f
        for f in range(len(folds))
        if errs[FrontierMethod.LAW_MINIMUM][f].size
        and all(np.all(np.isfinite(errs[m][f])) for m in FrontierMethod)
    ]
    mae = {
        str(m): validation.fold_mae([errs[m][f] for f in scored]) if scored else math.nan
        for m in FrontierMethod
    }
    if pl is None or not scored:
        method = FrontierMethod.LAW_MINIMUM
        why = (
            f"too few budgets for the frontier's forward-chaining folds (it needs {MIN_FRONTIER_POINTS} "
            "below a cut): the law's IsoFLOP minimum"
        )
    else:
        method = BASE_METHOD
        why = (
            "the direct frontier, the one method no worse than the simple baseline on every ladder of the "
            "backtest zoo (docs/zoo.md); forward-chaining over budgets for comparison: "
            + ", ".join(f"{m} {100 * mae[str(m)]:.2f}%" for m in FrontierMethod)
            + f" ({len(scored)} folds)"
        )
    law_at = law_minimum(law_params, pC)
    models = {
        m: _error_model(m, pl, law_at, pC, pL, errs, dists, float(C.max()), mae[str(m)])
        for m in FrontierMethod
    }
    samples = None
    if counts_BxN is not None and pl is not None:
        bC, bL, bm = frontier_points(C, loss, labels, counts_BxN)
        samples = fit_power_law(bC, bL, bm, C_ref)
    return Frontier(
        method, why, pl, mae, len(scored), int(pC.size), tuple(pC), tuple(pL), models[method], samples, models
    )


def _error_model(
    method: FrontierMethod,
    pl: FrontierFit | None,
    law_at: np.ndarray,
    pC: np.ndarray,
    pL: np.ndarray,
    errs: dict,
    dists: list,
    scale_max: float,
    mae: float,
) -> intervals.PredictionError:
    """The error model of predicting the frontier with `method`: the frontier points' scatter
    around its full-data prediction, and the budget offset and drift its fold errors show."""
    own = _by_method(method, None if pl is None else pl.loss(pC), law_at)
    noise = validation.scatter_sd(np.log(pL) - np.log(own))
    use = [f for f in range(len(dists)) if errs[method][f].size and np.all(np.isfinite(errs[method][f]))]
    budget_sd, drift = validation.drift_from_folds(
        [errs[method][f] for f in use], [dists[f] for f in use], noise
    )
    return intervals.PredictionError(
        noise_sd=noise,
        budget_sd=budget_sd,
        drift_per_decade=drift,
        scale_max=scale_max,
        scale_role="C",
        n_folds=len(use),
        n_fold_points=int(sum(errs[method][f].size for f in use)),
        fold_mae=mae,
        method="bootstrap + frontier-point scatter + forward-chaining drift over budgets",
    )


def _fold_errors(
    C: np.ndarray, loss: np.ndarray, labels: np.ndarray, folds: Sequence[LawFold], law_minimum: Callable
) -> tuple[dict, list]:
    """Per method, per fold, the log errors (log best - log predicted) at the budgets above the
    fold's cut, each's best run above it (a budget the cut splits counts on both sides; NaN where the
    method cannot be fitted on the fold), and per fold their distances in decades beyond the fold's
    largest run."""
    errs: dict = {m: [] for m in FrontierMethod}
    dists = []
    for fold in folds:
        fm = np.asarray(fold.fit_mask, bool)
        tC, tL, _ = frontier_points(C[~fm], loss[~fm], labels[~fm])
        dists.append(np.log10(tC / C[fm].max()))
        law = law_minimum(fold.law_params, tC) if tC.size else np.zeros(0)
        fC, fL, _ = frontier_points(C[fm], loss[fm], labels[fm])
        p = fit_power_law(fC[None], fL[None], np.ones((1, fC.size), bool), float(fC.max()))[0]
        pl = FrontierFit(*p, float(fC.max())).loss(tC)
        for m in FrontierMethod:
            errs[m].append(np.log(tL) - np.log(_by_method(m, pl, law)))
    return errs, dists
