"""The methods of a recipe comparison, each fitted to two ladders (REF and OTHER).

Every method gives each recipe a frontier L*(C) = E + G C^-gamma (`analysis.compare.frontiers`)
with bootstrap rows, from which the multiplier follows in closed form; `DOCS` says what each
fits. `auto_shrunk` picks one of the three joint fits per pair by forward chaining on the ladders
(`comparison.choose_method`: the constant multiplier unless a fit with a drift term predicts the
multiplier above every cut better by the parsimony margin, `validation.choose_against`) and pulls
its multiplier towards 1 by its own uncertainty (`comparison.shrunk`), so a difference within the
noise is reported as none; its interval is the chosen fit's, widened to hold the point. `auto`,
the default, keeps `no_difference` unless `auto_shrunk` beats it on the ladders' own folds
(`choice`).

The law fits are the project's one engine (`analysis.laws.fitting.fit_points`, multi-start
L-BFGS; the joint laws are `Law`s on the inputs N, D and a recipe indicator G: log G = 0 for REF,
1 for OTHER). Intervals come from a joint bootstrap over both ladders' runs: the pooled runs
resampled for a joint law, each ladder's runs resampled on its own for the per-recipe methods
(`bootstrap_counts`), row i of REF paired with row i of OTHER.
"""

from __future__ import annotations

import enum
import math
import warnings
from dataclasses import dataclass

import numpy as np

from analysis.compare import frontiers as fr
from analysis.compare.ladders import Ladder
from analysis.core import table as data_mod
from analysis.core import validation
from analysis.laws.fitting import FitOptions, fit_points
from analysis.laws.frontier import MIN_FRONTIER_POINTS, fit_power_law, frontier_points
from analysis.laws.registry import Law, get_law, logsumexp
from models.base.errors import AnalysisError


class CompareMethod(enum.StrEnum):
    """The compare family's methods (registered in `analysis.compare.methods`)."""

    NO_DIFFERENCE = "no_difference"
    CONSTANT = "joint_constant_multiplier"
    SHARED_EXPONENTS = "joint_shared_exponents"
    SHARED_E = "joint_shared_E"
    FREE = "free_per_recipe"
    FRONTIER = "frontier_power_laws"
    SHRUNK = "auto_shrunk"  # the joint fit the folds choose, pulled towards 1 (comparison.py)
    AUTO = "auto"  # no_difference unless auto_shrunk beats it on the ladders' own folds (choice.py)


DOCS = {
    CompareMethod.NO_DIFFERENCE: "the baseline: m = 1 at every budget (names no winner)",
    CompareMethod.CONSTANT: "one Chinchilla law for both, E, alpha and beta shared, A and B per recipe "
    "(OTHER's as REF's times e^dA, e^dB): a multiplier constant in C",
    CompareMethod.SHARED_EXPONENTS: "one Chinchilla law for both, L = E_r + A_r/N^alpha + B_r/D^beta, "
    "exponents shared, E, A, B per recipe (OTHER's as REF's times e^dE, e^dA, e^dB)",
    CompareMethod.SHARED_E: "one Chinchilla law with one irreducible loss E; A, B, alpha, beta per recipe",
    CompareMethod.FREE: "a Chinchilla law fitted to each ladder on its own",
    CompareMethod.FRONTIER: "L*(C) = E + A C^-alpha fitted to each ladder's best run per budget "
    "(Porian et al. 2024, arXiv:2406.19146)",
    CompareMethod.SHRUNK: "the joint fit the ladders' forward-chaining folds choose, its multiplier pulled "
    "towards 1 by its own uncertainty (positive-part James-Stein)",
    CompareMethod.AUTO: "the ladders' own backtest: no_difference unless auto_shrunk predicts the "
    "multipliers above every fold's cut better by the parsimony margin (choice.py)",
}
# What `python -m analysis compare` uses without --method: the ladders' own backtest (choice.py),
# which keeps the baseline unless auto_shrunk beats it on every fold (docs/zoo.md, compare)
DEFAULT = CompareMethod.AUTO
BASELINE = CompareMethod.NO_DIFFERENCE
# auto_shrunk's candidates, in its order of preference; the first is kept unless another beats it
# by the parsimony margin on every fold (`validation.choose_against`). First the constant multiplier:
# the drift terms of the other two (dE; dalpha, dbeta) are not identified by small budgets, yet they
# decide the multiplier 5-50x beyond them (a Kaplan-form pair with a constant m = 1.3, fitted <= 5e17:
# the shared exponents' dE absorbs the form's misfit and predicts m = 2.8 -> 100 up to 2.6e19, which
# the shrinkage cannot undo, as a larger |log m| is shrunk less; docs/zoo.md). The joint fits
# only: with two or three folds a per-recipe fit's fold scores are noise (on the zoo's Gadre
# RedPajama vs C4 / c4_val, choosing among every method picked free_per_recipe on its folds and
# missed by 1.07 log2, where the joint fit missed by 0.67)
CHOICE_CANDIDATES = (CompareMethod.CONSTANT, CompareMethod.SHARED_EXPONENTS, CompareMethod.SHARED_E)


def _constant(view, logX):
    e, a, b, alpha, beta, da, db = view
    logN, logD, g = logX
    return logsumexp(a + da * g - alpha * logN, b + db * g - beta * logD, e)


def _shared_exponents(view, logX):
    e, a, b, alpha, beta, de, da, db = view
    logN, logD, g = logX
    return logsumexp(a + da * g - alpha * logN, b + db * g - beta * logD, e + de * g)


def _shared_e(view, logX):
    e, a, b, alpha, beta, da, db, dal, dbe = view
    logN, logD, g = logX
    return logsumexp(a + da * g - (alpha + dal * g) * logN, b + db * g - (beta + dbe * g) * logD, e)


_POS, _EXP = (0.0, np.inf), (0.0, 3.0)
_FREE = (-np.inf, np.inf)
# the Chinchilla part of the joint laws' starts: Epoch's grid thinned (972 of its 4,500 points:
# log E -1..1, log A and log B 0..25, alpha and beta 0.2..1), every recipe difference 0
_BASE_GRID = np.array(
    [
        (math.exp(e), math.exp(a), math.exp(b), al, be)
        for e in (-1.0, 0.0, 1.0)
        for a in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
        for b in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)
        for al in (0.2, 0.5, 1.0)
        for be in (0.2, 0.5, 1.0)
    ]
)
FOLD_STRIDE = 61  # a fold searches from the full fit's optimum and every 61st grid start (16 of 972)
JOINT_LAWS = {
    CompareMethod.CONSTANT: Law(
        name="joint_constant_multiplier",
        param_names=("E", "A", "B", "alpha", "beta", "dA", "dB"),
        inputs=("N", "D", "G"),
        log_form=_constant,
        log_params=(True, True, True, False, False, False, False),
        grid=lambda logX, logy: np.column_stack([_BASE_GRID, np.zeros((len(_BASE_GRID), 2))]),
        bounds=(_POS, _POS, _POS, _EXP, _EXP, _FREE, _FREE),
        formula="L = E + A e^(dA g) / N^alpha + B e^(dB g) / D^beta (g = 0 REF, 1 OTHER)",
        min_distinct={"N": 2, "D": 2, "G": 2},
        numpy_form=True,
    ),
    CompareMethod.SHARED_EXPONENTS: Law(
        name="joint_shared_exponents",
        param_names=("E", "A", "B", "alpha", "beta", "dE", "dA", "dB"),
        inputs=("N", "D", "G"),
        log_form=_shared_exponents,
        log_params=(True, True, True, False, False, False, False, False),
        grid=lambda logX, logy: np.column_stack([_BASE_GRID, np.zeros((len(_BASE_GRID), 3))]),
        bounds=(_POS, _POS, _POS, _EXP, _EXP, _FREE, _FREE, _FREE),
        formula="L = E e^(dE g) + A e^(dA g) / N^alpha + B e^(dB g) / D^beta (g = 0 REF, 1 OTHER)",
        min_distinct={"N": 2, "D": 2, "G": 2},
        numpy_form=True,
    ),
    CompareMethod.SHARED_E: Law(
        name="joint_shared_E",
        param_names=("E", "A", "B", "alpha", "beta", "dA", "dB", "dalpha", "dbeta"),
        inputs=("N", "D", "G"),
        log_form=_shared_e,
        log_params=(True, True, True, False, False, False, False, False, False),
        grid=lambda logX, logy: np.column_stack([_BASE_GRID, np.zeros((len(_BASE_GRID), 4))]),
        bounds=(_POS, _POS, _POS, _EXP, _EXP, _FREE, _FREE, (-1.0, 1.0), (-1.0, 1.0)),
        formula="L = E + A e^(dA g) / N^(alpha + dalpha g) + B e^(dB g) / D^(beta + dbeta g)",
        min_distinct={"N": 2, "D": 2, "G": 2},
        numpy_form=True,
    ),
}


def _recipe_params(method: CompareMethod, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(REF's, OTHER's) Chinchilla rows (E, A, B, alpha, beta) of joint-law parameter rows."""
    p = np.atleast_2d(p)
    ref = p[:, :5]
    with np.errstate(all="ignore"):
        if method == CompareMethod.CONSTANT:
            other = np.column_stack([p[:, 0], p[:, 1:3] * np.exp(p[:, 5:7]), p[:, 3:5]])
        elif method == CompareMethod.SHARED_EXPONENTS:
            other = np.column_stack([p[:, :3] * np.exp(p[:, 5:8]), p[:, 3:5]])
        else:
            other = np.column_stack([p[:, 0], p[:, 1:3] * np.exp(p[:, 5:7]), p[:, 3:5] + p[:, 7:9]])
    return ref, other


@dataclass(frozen=True)
class PairFit:
    """One method fitted to REF and OTHER: each recipe's frontier (None for the baseline)."""

    method: CompareMethod
    ref: fr.Frontier | None
    other: fr.Frontier | None
    note: str = ""
    params: np.ndarray | None = None  # a joint law's public parameters (a fold's first start)

    def log_m(self, C: np.ndarray) -> np.ndarray:
        C = np.atleast_1d(np.asarray(C, float))
        if self.ref is None or self.other is None:
            return np.zeros(C.shape)
        return fr.log_multiplier(self.ref.params, self.other.params, C)

    def log_m_samples(self, C: np.ndarray) -> np.ndarray | None:
        """(S, len C) log multipliers of the bootstrap rows (rows unusable for either recipe dropped)."""
        if self.ref is None or self.other is None or self.ref.samples is None or self.other.samples is None:
            return None
        a, b = self.ref.samples, self.other.samples
        n = min(len(a), len(b))
        ok = np.all(np.isfinite(a[:n]), axis=1) & np.all(np.isfinite(b[:n]), axis=1)
        if ok.sum() < 10:
            return None
        return fr.log_multiplier(a[:n][ok], b[:n][ok], np.atleast_1d(np.asarray(C, float)))


def _frontier(x: Ladder, params: np.ndarray, samples: np.ndarray | None) -> fr.Frontier:
    C, L = x.frontier()
    return fr.Frontier(x.name, np.asarray(params, float), samples, tuple(map(float, C)), tuple(map(float, L)))


def _points(ladders: list[Ladder], indicator: bool, cut: float | None = None) -> data_mod.Points:
    """Every run of the ladders as points; with `cut`, those above it weighted 0 (a fold's fit: the
    same padded size as the full fit's, so one compiled program serves every fold)."""
    N = np.concatenate([x.N for x in ladders])
    D = np.concatenate([x.D for x in ladders])
    C = np.concatenate([x.C for x in ladders])
    y = np.concatenate([x.loss for x in ladders])
    inputs = {"N": N, "D": D, "C": C}
    columns = {"N": "N", "D": "D", "C": "C", "loss": "loss"}
    if indicator:
        inputs["G"] = np.concatenate([np.full(x.n, math.e**i) for i, x in enumerate(ladders)])
        columns["G"] = "recipe"
    w = np.ones(y.size) if cut is None else (C <= cut).astype(float)
    return data_mod.Points(inputs, y, w, columns, np.arange(y.size))


def _quiet_fit(law: Law, pts: data_mod.Points, opts: FitOptions):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_points(law, pts, opts)


def fit_pair(
    ref: Ladder,
    other: Ladder,
    method: CompareMethod | str,
    bootstrap: int = 200,
    seed: int = 0,
    cut: float | None = None,
    start: np.ndarray | None = None,
) -> PairFit:
    """Fit `method` to the two ladders (with `cut`: to their runs with C <= cut only); AnalysisError
    when it cannot be fitted to them. `start`: a joint law's public parameters to search from, with
    every `FOLD_STRIDE`-th row of its grid, instead of the whole grid (a fold starts at the full fit)."""
    method = CompareMethod(method)
    if method in (CompareMethod.SHRUNK, CompareMethod.AUTO):
        raise AnalysisError(
            f"method {method} is chosen per pair by comparison.compare_pair, not fitted itself"
        )
    if method == CompareMethod.NO_DIFFERENCE:
        return PairFit(method, None, None, "m = 1 at every budget")
    if method in JOINT_LAWS:
        return _fit_joint(ref, other, method, bootstrap, seed, cut, start)
    if method == CompareMethod.FREE:
        law = get_law("chinchilla")
        out = []
        for i, x in enumerate((ref, other)):
            opts = FitOptions(bootstrap=bootstrap, seed=seed + i, prediction_intervals=False)
            fit = _quiet_fit(law, _points([x], False, cut), opts)
            s = None if fit.bootstrap_samples is None else fr.chinchilla_frontier(fit.bootstrap_samples, x.k)
            out.append(_frontier(x, fr.chinchilla_frontier(fit.vector, x.k), s))
        return PairFit(method, *out)
    if cut is not None:
        ref, other = ref.below(cut), other.below(cut)
    return PairFit(method, *(_power_law_frontier(x, bootstrap, seed + i) for i, x in enumerate((ref, other))))


def _fit_joint(ref, other, method, bootstrap, seed, cut, start) -> PairFit:
    law = JOINT_LAWS[method]
    grid = None if start is None else np.vstack([start, law.grid((), np.zeros(0))[::FOLD_STRIDE]])
    opts = FitOptions(bootstrap=bootstrap, seed=seed, grid=grid, prediction_intervals=False)
    fit = _quiet_fit(law, _points([ref, other], True, cut), opts)
    p = np.array([fit.params[k] for k in law.param_names])
    (rp,), (op,) = _recipe_params(method, p)
    rs = os_ = None
    if fit.bootstrap_samples is not None:
        rb, ob = _recipe_params(method, fit.bootstrap_samples)
        rs, os_ = fr.chinchilla_frontier(rb, ref.k), fr.chinchilla_frontier(ob, other.k)
    fits = (
        _frontier(ref, fr.chinchilla_frontier(rp, ref.k), rs),
        _frontier(other, fr.chinchilla_frontier(op, other.k), os_),
    )
    return PairFit(method, *fits, params=p)


def _power_law_frontier(x: Ladder, bootstrap: int, seed: int) -> fr.Frontier:
    """L*(C) = E + A C^-alpha through the ladder's best run per budget (Porian et al. 2024)."""
    labels = x.labels
    C, L, present = frontier_points(x.C, x.loss, labels)
    if present.sum() < MIN_FRONTIER_POINTS:
        raise AnalysisError(
            f"{x.name}: {int(present.sum())} budgets; the frontier power law needs {MIN_FRONTIER_POINTS}"
        )
    C_ref = float(C.max())
    p = fr.power_law_frontier(fit_power_law(C[None], L[None], present[None], C_ref)[0], C_ref)
    s = None
    if bootstrap:
        bC, bL, bp = frontier_points(x.C, x.loss, labels, validation.bootstrap_counts(x.n, bootstrap, seed))
        s = fr.power_law_frontier(fit_power_law(bC, bL, bp, C_ref), C_ref)
    return _frontier(x, p, s)
