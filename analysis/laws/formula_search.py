"""`scalelab fit RUNS --formula search --input ... --target Y`: find a law's form by the runs' own
backtest.

**Grammar.** Each input becomes a feature: log(x) for a positive input (power laws), x itself
for a proportion (values in [0, 1], some above 0.5) or an input that is not positive (exponentials of mixture
weights). A candidate form is an optional irreducible term E plus
terms of three kinds:

- a power term `A * X1**a1 * X2**a2 ...` over a subset of the features (one feature per term:
  the additive power laws of Chinchilla, Kaplan, vocabulary laws; all features in one term: a
  product law);
- an exponential of a quadratic in the features `A * exp(a1 u1 + q11 u1^2 + q12 u1 u2 ...)` (u: a
  centred log), with interactions (an exponent that moves with another input, as in the MoE laws)
  or squares (a bowl in the learning rate or the batch size);
- a saturating term `A / (1 + B * X**b)` (a fine-tuning law's `A / (D**alpha + B)`);
- or, instead of all that, a polynomial of the centred logs (log-linear and bilinear laws).

**Engine.** Every candidate is one masked instance of a single template (`_template`), so all of
them run on one compiled program of the same batched L-BFGS the law fits use
(`analysis.core.lbfgs.minimize_batch`): a start carries its candidate's mask, and a masked
coefficient has zero gradient and never moves. Starts come from variable projection (amplitudes,
E and polynomial coefficients solved by least squares over grids of the exponents), computed on
each fold's own rows. With `--group`, E, the amplitudes and the polynomial's coefficients are
per group (and a saturating term's offset), the exponents shared (one variant) or per group too
(the other).

**Score.** The user's own backtest: forward-chaining folds on the scale input (`groups.choose_scale`,
the same input as the fit's intervals), the largest cuts (`validation.forward_cuts`), each fold
fitted on the rows at or below its cut by least squares and scored by the RMS residual (in the
fit's units: linear divided by the mean |y|, or log, `groups.residuals_for`) on the rows above it.
The choice is validation's parsimony rule, applied as a chain in order of complexity
(`validation.choose_against`): a form replaces the current one only when it beats it by 10% on
every fold. The winner is printed as a string `--formula` accepts, with
its fold errors and the next three forms; the command then fits it as any formula.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.core import validation
from analysis.core.lbfgs import LBFGSConfig, minimize_batch
from analysis.laws import formula as fm
from analysis.laws import groups as gr
from analysis.laws.fitting import huber
from models.base.errors import AnalysisError

MAX_INPUTS = 6
N_FOLDS = 3  # the largest forward-chaining cuts scored
STARTS = 3  # L-BFGS starts per candidate and fold (the best variable-projection starts)
GRID_CAP = 256  # exponent combinations tried per candidate and fold
# float32 (2-3x faster on CPU than float64; the objectives agree to ~2e-6 on the vocabulary check's
# data): the search ranks forms, the chosen one is fitted again in float64 by `--formula`
SEARCH_CFG = LBFGSConfig(max_evals=600, ftol=1e-9, gtol=0.0)
POLISH_CFG = LBFGSConfig(max_evals=1500)
# least squares: the Huber loss at the fits' delta (1e-3) is nearly L1 on runs that scatter by
# ~0.3%, a kinked objective on which L-BFGS crawls (and stalls in float32); the chosen form is
# then fitted with the user's --delta
SEARCH_DELTA = 1.0
POLISH = False  # polish each fold's best float32 fit in float64 (measured: no change of choice)
FIRST_KEEP = 12  # forms scored on every fold after the largest cut's (the others ranked below them)
WIDTH = 128
AGRID = np.array([-1.5, -0.7, -0.3, -0.1, 0.1, 0.3, 0.7, 1.5])  # exponents of standardised features
QGRID = np.array([-0.3, 0.0, 0.3])
HGRID = np.array([-1.5, -0.5, 0.5, 1.5])
H0GRID = np.array([-2.0, 0.0, 2.0])


# ---- the grammar --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """One positive term: exp(theta0 + sum a_i f_i + sum q_ij f_i f_j) / (1 + exp(h0 + h f_sat))."""

    feats: tuple[int, ...]
    quad: tuple[tuple[int, int], ...] = ()
    sat: int | None = None


@dataclass(frozen=True)
class Candidate:
    """A form: E (or not), positive terms, or a polynomial of the features (linear + `poly`)."""

    E: bool
    terms: tuple[Term, ...] = ()
    lin: tuple[int, ...] = ()  # polynomial: linear features
    poly: tuple[tuple[int, int], ...] = ()  # polynomial: products
    per_group: bool = False  # with groups: every coefficient per group (else only the linear ones)

    def n_params(self, G: int = 1) -> int:
        lin = (
            int(self.E)
            + len(self.terms)
            + len(self.lin)
            + len(self.poly)
            + (1 if self.lin or self.poly else 0)
        )
        nl = sum(len(t.feats) + len(t.quad) + (2 if t.sat is not None else 0) for t in self.terms)
        g = max(G, 1)
        return lin * g + nl * (g if self.per_group else 1)


def grammar(k: int, log_feats: Sequence[bool], grouped: bool) -> list[Candidate]:
    """Candidate forms for k features, simplest first (fewest parameters, then this order)."""
    feats = range(k)
    out: list[Candidate] = []
    subsets = [s for r in range(1, k + 1) for s in itertools.combinations(feats, r)]
    for s in subsets:  # additive power laws (Chinchilla-like) with and without E
        for E in (True, False):
            out.append(Candidate(E, tuple(Term((i,)) for i in s)))
    if k > 1:
        for E in (True, False):  # one product term
            out.append(Candidate(E, (Term(tuple(feats)),)))
        for i, j in itertools.combinations(feats, 2):  # additive + an interaction term
            others = tuple(Term((m,)) for m in feats)
            out.append(Candidate(True, (*others, Term((i, j)))))
            out.append(Candidate(True, (Term(tuple(feats), ((i, j),)),)))
            out.append(Candidate(False, (Term(tuple(feats), ((i, j),)),)))
    for i in feats:  # a bowl (square) in one feature, the others additive
        out.append(Candidate(True, tuple(Term((m,), ((m, m),) if m == i else ()) for m in feats)))
        out.append(Candidate(True, (Term(tuple(feats), ((i, i),)),)))
    if k > 1:  # separable bowl in every feature, and the full quadratic
        out.append(Candidate(True, (Term(tuple(feats), tuple((i, i) for i in feats)),)))
        pairs = tuple((i, j) for i in feats for j in feats if i <= j)
        out.append(Candidate(True, (Term(tuple(feats), pairs),)))
    for r in (1, 2):  # power laws in the other inputs + a quadratic (a bowl) in 1-2 inputs, its
        for bowl in itertools.combinations(feats, r):  # centre moving with every other input
            if r >= k:
                continue
            quad = {(b, b) for b in bowl} | {tuple(sorted((b, i))) for b in bowl for i in feats if i != b}
            powers = tuple(Term((i,)) for i in feats if i not in bowl)
            out.append(Candidate(True, powers, tuple(bowl), tuple(sorted(quad))))
    for i in feats:  # saturating in one feature (a fine-tuning law), the others additive
        if log_feats[i]:
            out.append(Candidate(True, tuple(Term((m,), (), i if m == i else None) for m in feats)))
            out.append(Candidate(True, tuple(Term((), (), i) if m == i else Term((m,)) for m in feats)))
    pairs_all = tuple((i, j) for i, j in itertools.combinations(feats, 2))
    out.append(Candidate(False, (), tuple(feats)))  # log-linear
    if k > 1:
        out.append(Candidate(False, (), tuple(feats), pairs_all))  # + interactions
    out.append(Candidate(False, (), tuple(feats), tuple((i, i) for i in feats)))  # + squares
    if grouped:
        out += [Candidate(c.E, c.terms, c.lin, c.poly, per_group=True) for c in out if c.terms]
    seen, uniq = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return sorted(uniq, key=lambda c: c.n_params(2 if grouped else 1))


# ---- the template -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where each coefficient lives in one parameter row (P entries)."""

    k: int
    T: int

    @property
    def m(self) -> int:
        return self.k * (self.k + 1) // 2

    @property
    def term_size(self) -> int:
        return 2 + 2 * self.k + self.m

    def term(self, t: int) -> int:
        return 1 + t * self.term_size

    @property
    def poly0(self) -> int:
        return 1 + self.T * self.term_size

    @property
    def P(self) -> int:
        return self.poly0 + 1 + self.k + self.m

    def pair(self, i: int, j: int) -> int:
        i, j = min(i, j), max(i, j)
        return i * self.k - i * (i - 1) // 2 + (j - i)

    def slots(self, c: Candidate) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(mask (P,), on (T,), sat (T,), linear (P,): the coefficients solved by least squares)."""
        mask, lin = np.zeros(self.P), np.zeros(self.P, bool)
        on, sat = np.zeros(self.T), np.zeros(self.T)
        if c.E:
            mask[0] = lin[0] = 1
        for t, term in enumerate(c.terms):
            o = self.term(t)
            on[t] = 1
            mask[o] = lin[o] = 1  # theta0: log of the amplitude (solved as the amplitude)
            for i in term.feats:
                mask[o + 1 + i] = 1
            for i, j in term.quad:
                mask[o + 1 + self.k + self.pair(i, j)] = 1
            if term.sat is not None:
                sat[t] = 1
                mask[o + 1 + self.k + self.m] = 1
                mask[o + 2 + self.k + self.m + term.sat] = 1
        if (c.lin or c.poly) and not c.E:  # the polynomial's constant, unless E is one already
            mask[self.poly0] = lin[self.poly0] = 1
        if c.lin or c.poly:
            for i in c.lin:
                mask[self.poly0 + 1 + i] = lin[self.poly0 + 1 + i] = 1
            for i, j in c.poly:
                p = self.poly0 + 1 + self.k + self.pair(i, j)
                mask[p] = lin[p] = 1
        return mask, on, sat, lin


def _template(eff, on, sat, phi, phi2, layout: Layout, mod):
    """The template's value: eff (..., P) effective coefficients (masked; per row with groups),
    phi (n, k) features, phi2 (n, m) their products."""
    k, m = layout.k, layout.m
    f = eff[..., 0]
    for t in range(layout.T):
        o = layout.term(t)
        g = eff[..., o] + mod.sum(eff[..., o + 1 : o + 1 + k] * phi, axis=-1)
        g = g + mod.sum(eff[..., o + 1 + k : o + 1 + k + m] * phi2, axis=-1)
        h = eff[..., o + 1 + k + m] + mod.sum(eff[..., o + 2 + k + m : o + 2 + 2 * k + m] * phi, axis=-1)
        f = f + on[t] * mod.exp(g - sat[t] * mod.logaddexp(0.0, h))
    p = layout.poly0
    return (
        f
        + eff[..., p]
        + mod.sum(eff[..., p + 1 : p + 1 + k] * phi, axis=-1)
        + mod.sum(eff[..., p + 1 + k : p + 1 + k + m] * phi2, axis=-1)
    )


def _effective(theta, mask, grouped, gidx, G: int, P: int, mod):
    """Per-row coefficients: a group's own row where `grouped`, the shared row 0 elsewhere."""
    th = theta.reshape((G + 1, P))
    if G == 0:
        return th[0] * mask
    return mask * mod.where(grouped > 0, th[1:][gidx], th[0])


def _objective(layout: Layout, G: int, mode: str, delta: float, y_scale: float):
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    import jax.numpy as jnp

    def f(theta, mask, on, sat, grouped, phi, phi2, gidx, yt, w):
        eff = _effective(theta, mask, grouped, gidx, G, layout.P, jnp)
        val = _template(eff, on, sat, phi, phi2, layout, jnp)
        r = yt - (jnp.log(val) if mode == fm.LOG else val / y_scale)
        return jnp.sum(w * huber(r, delta))

    return f


# ---- the data -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Features:
    """The search's features: standardised logs (positive inputs) or standardised values."""

    names: tuple[str, ...]  # formula names of the inputs
    columns: tuple[str, ...]
    log: tuple[bool, ...]
    mu: np.ndarray
    sd: np.ndarray

    def of(self, x: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        cols = []
        for i, name in enumerate(self.names):
            v = np.asarray(x[name], float)
            cols.append(((np.log(v) if self.log[i] else v) - self.mu[i]) / self.sd[i])
        phi = np.stack(cols, axis=1)
        k = phi.shape[1]
        phi2 = np.stack([phi[:, i] * phi[:, j] for i in range(k) for j in range(i, k)], axis=1)
        return phi, phi2


@dataclass
class Scored:
    candidate: Candidate
    folds: dict[float, float] = field(default_factory=dict)  # cut -> RMS held-out residual
    theta: np.ndarray | None = None  # fitted on every row, (G + 1) * P
    text: str = ""
    starts: dict = field(default_factory=dict)
    shared: tuple[str, ...] = ()

    @property
    def mean(self) -> float:
        v = list(self.folds.values())
        return float(np.mean(v)) if v else math.inf


@dataclass
class SearchResult:
    """The chosen form and how the others scored."""

    formula: str
    target: str
    scale: str
    cuts: list[float]
    ranked: list[Scored]
    chosen: Scored
    seconds: float
    n_candidates: int
    shared: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def starts(self) -> list[dict]:
        return [self.chosen.starts] if self.chosen.starts else []

    def lines(self) -> list[str]:
        def folds(s: Scored) -> str:
            return ", ".join(f"{e:.4g}" for e in s.folds.values())

        out = [f"note: {n}" for n in self.notes] + [
            f"search: {self.n_candidates} forms scored on {len(self.cuts)} folds of {self.scale} (cuts "
            + ", ".join(f"{c:.3g}" for c in self.cuts)
            + f"), {self.seconds:.0f} s",
            f"  chosen: {self.formula}",
            f"    held-out RMS residual per fold: {folds(self.chosen)} (mean {self.chosen.mean:.4g})",
        ]
        others = [s for s in self.ranked if s is not self.chosen][:3]
        for s in others:
            out.append(f"  next: {s.text}  folds {folds(s)} (mean {s.mean:.4g})")
        return out

    def to_dict(self) -> dict:
        def one(s: Scored) -> dict:
            return {
                "formula": s.text,
                "fold_errors": [{"cut": c, "rms": e} for c, e in s.folds.items()],
                "mean_fold_error": s.mean,
                "n_params": s.candidate.n_params(),
            }

        return {
            "formula": self.formula,
            "shared": list(self.shared),
            "scale_input": self.scale,
            "cuts": self.cuts,
            "chosen": one(self.chosen),
            "next": [one(s) for s in self.ranked if s is not self.chosen][:3],
            "n_candidates": self.n_candidates,
            "seconds": self.seconds,
            "rule": "chain in order of complexity: a form replaces the current one when it beats it by "
            f"{validation.PARSIMONY:.0%} on every fold (validation.choose_against)",
        }


# ---- starts: variable projection over grids of the exponents ---------------------------------------
@dataclass(frozen=True)
class Problem:
    """One search: features, target (in fit space), weights, groups, the template's layout."""

    layout: Layout
    feats: Features
    phi: np.ndarray
    phi2: np.ndarray
    y: np.ndarray  # the target, its own units
    w: np.ndarray
    gidx: np.ndarray
    G: int  # 0 without groups
    mode: str
    y_scale: float
    delta: float

    @property
    def yt(self) -> np.ndarray:
        return np.log(self.y) if self.mode == fm.LOG else self.y / self.y_scale

    def residuals(self, theta: np.ndarray, mask, on, sat, grouped, rows: np.ndarray) -> np.ndarray:
        eff = _effective(theta, mask, grouped, self.gidx[rows], self.G, self.layout.P, np)
        with np.errstate(all="ignore"):
            val = _template(eff, on, sat, self.phi[rows], self.phi2[rows], self.layout, np)
            return self.yt[rows] - (np.log(val) if self.mode == fm.LOG else val / self.y_scale)


def _grid_for(layout: Layout, slot: int) -> np.ndarray:
    if slot >= layout.poly0:
        return np.array([0.0])
    off = (slot - 1) % layout.term_size
    k, m = layout.k, layout.m
    if off <= k:
        return AGRID
    if off <= k + m:
        return QGRID
    return H0GRID if off == k + m + 1 else HGRID


def _basis(prob: Problem, c: Candidate, nl_slots: np.ndarray, nl_vals: np.ndarray, rows: np.ndarray):
    """Columns (S, n, K) of the linear coefficients (E, each term's amplitude, the polynomial's) at
    each setting (S rows) of the nonlinear ones, and the slot each column solves (amplitudes: the
    log of the column's coefficient goes to theta0)."""
    L = prob.layout
    S = nl_vals.shape[0]
    row = np.zeros((S, L.P))
    row[:, nl_slots] = nl_vals
    phi, phi2 = prob.phi[rows], prob.phi2[rows]
    cols, slots = [], []
    if c.E:
        cols.append(np.ones((S, phi.shape[0])))
        slots.append(0)
    k, m = L.k, L.m
    for t, term in enumerate(c.terms):
        o = L.term(t)
        g = row[:, None, o + 1 : o + 1 + k] * phi[None]
        g = np.sum(g, -1) + np.sum(row[:, None, o + 1 + k : o + 1 + k + m] * phi2[None], -1)
        if term.sat is not None:
            h = row[:, None, o + 1 + k + m] + np.sum(
                row[:, None, o + 2 + k + m : o + 2 + 2 * k + m] * phi[None], -1
            )
            g = g - np.logaddexp(0.0, h)
        with np.errstate(over="ignore"):
            cols.append(np.exp(np.clip(g, -700, 700)))
        slots.append(o)
    if c.lin or c.poly:
        p = L.poly0
        if not c.E:
            cols.append(np.ones((S, phi.shape[0])))
            slots.append(p)
        for i in c.lin:
            cols.append(np.broadcast_to(phi[:, i], (S, phi.shape[0])))
            slots.append(p + 1 + i)
        for i, j in c.poly:
            cols.append(np.broadcast_to(phi2[:, L.pair(i, j)], (S, phi.shape[0])))
            slots.append(p + 1 + k + L.pair(i, j))
    return row, np.stack(cols, axis=-1), slots


def _solve(A: np.ndarray, b: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """Weighted least squares per setting: A (S, n, K), b (n,), weights (n,) -> (S, K)."""
    sw = np.sqrt(wt)
    An = A * sw[None, :, None]
    bn = b * sw
    ok = np.all(np.isfinite(An), axis=(1, 2))
    An = np.where(ok[:, None, None], An, 0.0)
    norms = np.sqrt(np.sum(An * An, axis=1))
    norms = np.where(norms > 0, norms, 1.0)
    An = An / norms[:, None, :]
    gram = np.einsum("snk,snl->skl", An, An) + 1e-10 * np.eye(A.shape[-1])[None]
    coef = np.linalg.solve(gram, np.einsum("snk,n->sk", An, bn)[..., None])[..., 0] / norms
    return np.where(ok[:, None], coef, np.nan)


def candidate_starts(
    prob: Problem, c: Candidate, rows: np.ndarray, r: int = STARTS, seed: int = 0
) -> np.ndarray:
    """(<= r, (G + 1) * P) starts of candidate `c` fitted on `rows`: its exponents over grids, the
    linear coefficients by least squares (per group), the best by squared residuals."""
    L = prob.layout
    mask, on, sat, lin = L.slots(c)
    nl_slots = np.flatnonzero((mask > 0) & ~lin)
    nl_vals = fm.combos([_grid_for(L, s) for s in nl_slots], GRID_CAP, seed)
    base, A, slots = _basis(prob, c, nl_slots, nl_vals, rows)
    amp = [s for s in slots if 0 < s < L.poly0]
    y, w = prob.y[rows], prob.w[rows]
    wt = w / (y * y) if prob.mode == fm.LOG else w
    G = max(prob.G, 1)
    g_rows = prob.gidx[rows] if prob.G else np.zeros(rows.sum(), int)
    theta = np.zeros((nl_vals.shape[0], prob.G + 1, L.P))
    theta[:, 0, :] = base
    if prob.G:
        theta[:, 1:, :] = base[:, None, :]
    pred = np.zeros((nl_vals.shape[0], y.size))
    tiny = 1e-8 * float(np.mean(np.abs(y)))
    for g in range(G):
        sel = g_rows == g
        if not sel.any():
            continue
        coef = _solve(A[:, sel], y[sel], wt[sel])
        for j, s in enumerate(slots):
            v = coef[:, j]
            if s in amp:
                colmax = np.max(np.abs(A[:, sel, j]), axis=1) + 1e-300
                v = np.log(np.maximum(v, tiny / colmax))
                coef[:, j] = np.exp(v)
            theta[:, (g + 1) if prob.G else 0, s] = v
        pred[:, sel] = np.einsum("snk,sk->sn", A[:, sel], np.nan_to_num(coef, nan=0.0))
    with np.errstate(all="ignore"):
        res = np.log(y) - np.log(pred) if prob.mode == fm.LOG else (y - pred) / prob.y_scale
        score = np.sum(w * res * res, axis=1)
    score = np.where(np.isfinite(score), score, np.inf)
    order = np.argsort(score, kind="stable")[:r]
    order = order[np.isfinite(score[order])]
    if not order.size:
        order = np.arange(min(r, nl_vals.shape[0]))
    return theta[order].reshape(order.size, -1)


# ---- running and scoring ------------------------------------------------------------------------
def _run(prob: Problem, jobs: list[tuple[Candidate, np.ndarray, np.ndarray]], dtype=np.float32) -> np.ndarray:
    """L-BFGS for every job (candidate, start, row weights), all on one compiled program per
    precision: (J, size) fitted parameters with (J,) objectives appended as the last column."""
    # deferred: JAX, SciPy and the formula modules load when a command runs (a fast --help)
    import jax

    L, G = prob.layout, prob.G
    slots = {c: L.slots(c) for c in {j[0] for j in jobs}}
    grouped = {c: _grouped(L, c, G) for c in slots}
    x0 = np.stack([j[1] for j in jobs])
    w = np.stack([j[2] for j in jobs])
    cols = [np.stack([slots[j[0]][i] for j in jobs]).astype(float) for i in range(3)]
    gp = np.stack([grouped[j[0]] for j in jobs]).astype(float)
    fun = _objective(L, G, prob.mode, prob.delta, prob.y_scale)
    x64 = np.dtype(dtype) == np.float64
    with jax.enable_x64(x64):
        r = minimize_batch(
            fun,
            x0.astype(dtype),
            (
                *(a.astype(dtype) for a in (*cols, gp, prob.phi, prob.phi2)),
                prob.gidx.astype(np.int32),
                prob.yt.astype(dtype),
                w.astype(dtype),
            ),
            batched_args=(True, True, True, True, False, False, False, False, True),
            cfg=POLISH_CFG if x64 else SEARCH_CFG,
            width=WIDTH,
        )
    f = np.where(np.isfinite(r.f), r.f, np.inf)
    return np.column_stack([np.asarray(r.x, float), np.asarray(f, float)])


def _run_best(prob: Problem, jobs: list, owner: list) -> dict:
    """Every job in float32, then the best of each owner polished in float64 (as the law fits'
    mixed precision): {owner: row of `_run`}."""
    out = _run(prob, jobs)
    best: dict = {}
    for key, row, job in zip(owner, out, jobs):
        if key not in best or row[-1] < best[key][0][-1]:
            best[key] = (row, job)
    keys = [k for k, (row, _) in best.items() if math.isfinite(row[-1])]
    if keys and POLISH:
        polish = [(best[k][1][0], best[k][0][:-1], best[k][1][2]) for k in keys]
        out64 = _run(prob, polish, np.float64)
        for k, row in zip(keys, out64):
            if row[-1] <= best[k][0][-1] or not math.isfinite(best[k][0][-1]):
                best[k] = (row, best[k][1])
    return {k: row for k, (row, _) in best.items()}


def _grouped(L: Layout, c: Candidate, G: int) -> np.ndarray:
    """The coefficients that are per group: all of them (`per_group`), else the linear ones and
    each saturation's offset (a fine-tuning law's B per group), the exponents shared."""
    if not G:
        return np.zeros(L.P, bool)
    _, _, _, lin = L.slots(c)
    if c.per_group:
        return np.ones(L.P, bool)
    out = lin.copy()
    for t in range(L.T):
        out[L.term(t) + 1 + L.k + L.m] = True
    return out


def _best(prob: Problem, c: Candidate, out: np.ndarray) -> np.ndarray:
    i = int(np.argmin(out[:, -1]))
    return out[i, :-1]


def _choose(scored: list[Scored], rule: str = "chain") -> Scored:
    """Validation's parsimony rule over forms in order of complexity (module docstring)."""
    ok = [s for s in scored if s.folds and all(math.isfinite(e) for e in s.folds.values())]
    if not ok:
        raise AnalysisError("--formula search: no form could be fitted and scored on the folds")
    if rule == "mean":
        return ok[validation.choose({i: s.mean for i, s in enumerate(ok)}, list(range(len(ok))))]
    current = 0
    for i in range(1, len(ok)):
        folds = {current: ok[current].folds, i: ok[i].folds}
        if validation.choose_against(current, folds, [current, i]) == i:
            current = i
    return ok[current]


# ---- the chosen form as a formula string --------------------------------------------------------
def _num(v: float) -> str:
    """A centre as printed: 6 significant digits (the rounding shifts a centred log by < 1e-5, and
    the linear terms that shift would add are dropped: the printed form has the candidate's terms)."""
    return f"{float(f'{v:.6g}'):.6g}"


class _Names:
    """Parameter names that are neither inputs nor columns of the table."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)

    def __call__(self, want: str) -> str:
        name = want
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name


def _poly_in_u(feats: Features, const: float, lin: dict[int, float], quad: dict[tuple[int, int], float]):
    """A polynomial in the standardised features rewritten in the printed variables u_i (a centred
    log, log(x / c), or a centred value, x - c, c rounded to 4 digits): (constant, {i: coef},
    {(i, j): coef}, {i: text of u_i})."""
    alpha, delta, text = {}, {}, {}
    for i in {*lin, *(i for p in quad for i in p)}:
        name = feats.names[i]
        if feats.log[i]:
            c = float(_num(math.exp(feats.mu[i])))
            delta[i] = (math.log(c) - feats.mu[i]) / feats.sd[i]
            text[i] = f"log({name} / {_num(c)})"
        else:
            c = float(_num(feats.mu[i]))
            delta[i] = (c - feats.mu[i]) / feats.sd[i]
            text[i] = f"({name} - {_num(c)})" if c else name
        alpha[i] = 1.0 / feats.sd[i]
    c0 = (
        const
        + sum(a * delta[i] for i, a in lin.items())
        + sum(q * delta[i] * delta[j] for (i, j), q in quad.items())
    )
    c1 = {i: a * alpha[i] for i, a in lin.items()}
    for (i, j), q in quad.items():
        c1[i] = c1.get(i, 0.0) + q * alpha[i] * delta[j]
        c1[j] = c1.get(j, 0.0) + q * alpha[j] * delta[i]
    c2 = {(i, j): q * alpha[i] * alpha[j] for (i, j), q in quad.items()}
    return c0, c1, c2, text


def _pair_name(feats: Features, i: int, j: int) -> str:
    return f"{feats.names[i]}2" if i == j else f"{feats.names[i]}_{feats.names[j]}"


def _u_text(text: dict, i: int, j: int) -> str:
    return f"{text[i]}**2" if i == j else f"{text[i]} * {text[j]}"


def render(
    prob: Problem, c: Candidate, theta: np.ndarray, taken: set[str]
) -> tuple[str, dict, tuple[str, ...]]:
    """(formula text, starts {parameter: value, or per-group values}, parameters shared across
    groups) of candidate `c` at fitted `theta` ((G + 1) * P)."""
    L, G = prob.layout, prob.G
    th = theta.reshape(G + 1, L.P)
    grouped = _grouped(L, c, G)
    rows = [np.where(grouped, th[1 + g], th[0]) for g in range(G)] if G else [th[0]]
    pr = _Printer(prob, rows, grouped, _Names(taken))
    parts: list[str] = []
    poly_text, poly_c0 = pr.poly(c) if c.lin or c.poly else ("", np.zeros(len(rows)))
    if c.E:  # E absorbs the polynomial's constant (its centring)
        parts.append(pr.param("E", [r[0] + c0 for r, c0 in zip(rows, poly_c0)], 0))
    for t, term in enumerate(c.terms, start=1):
        parts.append(pr.term(term, L.term(t - 1), t))
    if poly_text:
        parts.append(poly_text)
    text = " + ".join(parts).replace("+ -", "- ")
    return text, pr.starts, tuple(pr.shared)


class _Printer:
    """Writes a candidate's parts with fresh parameter names and records their fitted values."""

    def __init__(self, prob: Problem, rows: list[np.ndarray], grouped: np.ndarray, names: _Names):
        self.prob, self.rows, self.grouped, self.names = prob, rows, grouped, names
        self.starts: dict = {}
        self.shared: list[str] = []

    def param(self, want: str, values, slot: int) -> str:
        """A fresh name holding `values` (one per row: per group when `slot` is grouped)."""
        name = self.names(want)
        v = np.asarray(values, float)
        if self.prob.G and self.grouped[slot]:
            self.starts[name] = v
        else:
            self.starts[name] = float(v[0])
            if self.prob.G:
                self.shared.append(name)
        return name

    def term(self, term: Term, o: int, t: int) -> str:
        L, feats = self.prob.layout, self.prob.feats
        k = L.k
        polys = []
        for r in self.rows:
            a = {i: float(r[o + 1 + i]) for i in term.feats}
            q = {pq: float(r[o + 1 + k + L.pair(*pq)]) for pq in term.quad}
            polys.append(_poly_in_u(feats, float(r[o]), a, q))
        text = polys[0][3]
        if term.quad or any(not feats.log[i] for i in term.feats):
            inner = [
                f"{self.param(f'a{t}_{feats.names[i]}', [p[1][i] for p in polys], o + 1 + i)} * {text[i]}"
                for i in term.feats
            ]
            for i, j in term.quad:
                pn = self.param(
                    f"q{t}_{_pair_name(feats, i, j)}",
                    [p[2][(i, j)] for p in polys],
                    o + 1 + k + L.pair(i, j),
                )
                inner.append(f"{pn} * {_u_text(text, i, j)}")
            amp = self.param(f"A{t}", [math.exp(p[0]) for p in polys], o)
            body = f"{amp} * exp({' + '.join(inner)})" if inner else amp
        else:  # a power law A * X**a / Y**b: the centring folded into A
            logamp = np.array([p[0] for p in polys])
            num, den = [], []
            for i in term.feats:
                b = np.array([p[1][i] for p in polys])
                logamp = logamp - b * math.log(float(_num(math.exp(feats.mu[i]))))
                want = f"a{t}" if len(term.feats) == 1 else f"a{t}_{feats.names[i]}"
                if np.mean(b) < 0:
                    den.append(f"{feats.names[i]}**{self.param(want, -b, o + 1 + i)}")
                else:
                    num.append(f"{feats.names[i]}**{self.param(want, b, o + 1 + i)}")
            amp = self.param(f"A{t}", np.exp(logamp), o)
            body = " * ".join([amp, *num]) if num or not den else amp
            if den:
                body += " / " + (den[0] if len(den) == 1 else f"({' * '.join(den)})")
        if term.sat is not None:
            body = f"{body} / {self.saturation(term.sat, o, t)}"
        return body

    def saturation(self, i: int, o: int, t: int) -> str:
        L, feats = self.prob.layout, self.prob.feats
        k, m = L.k, L.m
        h0_slot, h_slot = o + 1 + k + m, o + 2 + k + m + i
        eta = np.array([r[h_slot] / feats.sd[i] for r in self.rows])
        x = feats.names[i]
        if feats.log[i]:
            h0 = np.array([r[h0_slot] - r[h_slot] * feats.mu[i] / feats.sd[i] for r in self.rows])
            B = self.param(f"B{t}", np.exp(h0), h0_slot)
            if np.mean(eta) >= 0:
                return f"(1 + {B} * {x}**{self.param(f'b{t}', eta, h_slot)})"
            return f"(1 + {B} * {x}**-{self.param(f'b{t}', -eta, h_slot)})"
        h0 = np.array([r[h0_slot] - r[h_slot] * feats.mu[i] / feats.sd[i] for r in self.rows])
        B = self.param(f"B{t}", np.exp(h0), h0_slot)
        return f"(1 + {B} * exp({self.param(f'b{t}', eta, h_slot)} * {x}))"

    def poly(self, c: Candidate) -> tuple[str, np.ndarray]:
        """The polynomial's text, and its constant per row when E holds it instead (else zeros)."""
        L, feats = self.prob.layout, self.prob.feats
        p0 = L.poly0
        polys = []
        for r in self.rows:
            lin = {i: float(r[p0 + 1 + i]) for i in c.lin}
            quad = {pq: float(r[p0 + 1 + L.k + L.pair(*pq)]) for pq in c.poly}
            polys.append(_poly_in_u(feats, float(r[p0]), lin, quad))
        text = polys[0][3]
        c0 = np.array([p[0] for p in polys])
        out = [] if c.E else [self.param("c0", c0, p0)]
        for i in sorted(c.lin):
            out.append(
                f"{self.param(f'c_{feats.names[i]}', [p[1][i] for p in polys], p0 + 1 + i)} * {text[i]}"
            )
        for i, j in c.poly:
            pn = self.param(
                f"c_{_pair_name(feats, i, j)}",
                [p[2][(i, j)] for p in polys],
                p0 + 1 + L.k + L.pair(i, j),
            )
            out.append(f"{pn} * {_u_text(text, i, j)}")
        return " + ".join(out), (c0 if c.E else np.zeros(len(polys)))


# ---- the search ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Inputs:
    """What `groups.read_rows` reads of a spec: the inputs (formula name -> column)."""

    inputs: dict[str, str]


def _problem(
    df, target, inputs, group, weights, predict_df, opts
) -> tuple[Problem, gr.Data, tuple[str, ...], list[str]]:
    """The search's data: rows, features (constant inputs dropped with a note), groups, layout."""
    if not inputs:
        raise AnalysisError(
            "--formula search needs the inputs to search over: --input NAME[=COLUMN] for each"
        )
    if len(inputs) > MAX_INPUTS:
        raise AnalysisError(f"--formula search takes at most {MAX_INPUTS} inputs, got {len(inputs)}")
    for alias, col in inputs.items():
        if col not in df.columns:
            shown = ", ".join(map(str, list(df.columns)[:20]))
            raise AnalysisError(
                f"--input {alias}={col}: the table has no column {col!r}; its columns: {shown}"
            )
        if col == target:
            raise AnalysisError(f"--input {alias}={col} is the target; a law predicts it from other columns")
    groups: tuple[str, ...] = ()
    if group is not None:
        if group not in df.columns:
            raise AnalysisError(f"--group {group}: the runs have no column {group!r}")
        groups = tuple(sorted(df[group].dropna().astype(str).unique(), key=gr._natural))
    data, notes = gr.read_rows(df, _Inputs(dict(inputs)), target, group, groups, weights)
    more = []
    if predict_df is not None:
        try:
            more.append(
                gr.read_rows(predict_df, _Inputs(dict(inputs)), None, None, (), where="--predict")[0].x
            )
        except AnalysisError:
            pass
    y = data.y
    mode = gr.residuals_for(y)
    names, cols, logs, mu, sd = [], [], [], [], []
    for alias, col in inputs.items():
        v = data.x[alias]
        allv = np.concatenate([v, *(m[alias] for m in more if alias in m)])
        # a proportion (every value in [0, 1], some above 0.5: a mixture weight) enters as itself,
        # as in the data mixing laws' exp(sum t_j r_j); any other positive input (a learning rate
        # of 1e-3 too) as its log (power laws)
        share = bool(np.all((allv >= 0) & (allv <= 1)) and np.max(allv) >= 0.5)
        lg = bool(np.all(allv > 0)) and not share
        u = np.log(v) if lg else v
        if not np.std(u) > 0:
            notes.append(f"--input {alias}: {col!r} is constant on the runs; left out of the search")
            continue
        names.append(alias)
        cols.append(col)
        logs.append(lg)
        mu.append(float(np.mean(u)))
        sd.append(float(np.std(u)))
    if not names:
        raise AnalysisError("--formula search: every input is constant on the runs; nothing to search over")
    feats = Features(tuple(names), tuple(cols), tuple(logs), np.array(mu), np.array(sd))
    phi, phi2 = feats.of(data.x)
    k = len(names)
    G = len(groups)
    ys = float(np.mean(np.abs(y))) or 1.0
    prob = Problem(
        layout=Layout(k, k + 1),
        feats=feats,
        phi=phi,
        phi2=phi2,
        y=y,
        w=data.w,
        gidx=data.gidx if G else np.zeros(y.size, int),
        G=G,
        mode=mode,
        y_scale=ys if mode == fm.LINEAR else 1.0,
        delta=SEARCH_DELTA,
    )
    return prob, data, groups, notes


def search(
    df: pd.DataFrame,
    target: str,
    inputs: Mapping[str, str] | None = None,
    params=None,
    group: str | None = None,
    shared: Sequence[str] = (),
    scale: str | None = None,
    weights: str | None = None,
    options: gr.FormulaOptions | None = None,
    predict_df: pd.DataFrame | None = None,
    rule: str = "chain",
    holdout_above: float | None = None,
) -> SearchResult:
    """Search the grammar for the form the runs' own backtest prefers (module docstring); with
    `holdout_above`, on the rows whose scale input is at or below it only (the fit's held-out rows
    stay unseen)."""
    t0 = time.time()
    opts = options or gr.FormulaOptions()
    if params:
        raise AnalysisError(
            "--param sets a written formula's parameters; it does not apply to --formula search"
        )
    if shared:
        raise AnalysisError(
            "--shared does not apply to --formula search: it tries shared and per-group exponents"
        )
    inputs = dict(inputs or {})
    prob, data, groups, notes = _problem(df, target, inputs, group, weights, predict_df, opts)
    positive = {n for n, lg in zip(prob.feats.names, prob.feats.log) if lg}
    scale_name = gr.choose_scale(
        dict(zip(prob.feats.names, prob.feats.columns)), scale, list(inputs), positive
    )
    s = data.x[scale_name]
    if holdout_above is not None and np.any(s > holdout_above) and np.any(s <= holdout_above):
        seen = df.loc[data.index[s <= holdout_above]]
        prob, data, groups, notes = _problem(seen, target, inputs, group, weights, predict_df, opts)
        s = data.x[scale_name]
    cuts = validation.forward_cuts(s)[-N_FOLDS:]
    if not cuts:
        raise AnalysisError(
            f"--formula search scores forms on folds of {scale_name}: it needs at least 3 distinct values "
            f"of it, with 40% of the rows at or below the cut (--scale NAME picks another input)"
        )
    cands = grammar(len(prob.feats.names), prob.feats.log, bool(prob.G))
    scored = _score(prob, cands, s, cuts)
    chosen = _choose(scored, rule)
    ranked = sorted([x for x in scored if x.folds], key=lambda x: x.mean)
    top = [chosen] + [x for x in ranked if x is not chosen][:3]
    taken = set(map(str, df.columns)) | set(inputs) | set(fm.FUNCTIONS)
    _fit_all(prob, top, taken)
    return SearchResult(
        formula=chosen.text,
        target=target,
        scale=scale_name,
        cuts=[float(c) for c in cuts],
        ranked=ranked,
        chosen=chosen,
        seconds=time.time() - t0,
        n_candidates=len(cands),
        shared=chosen.shared,
        notes=tuple(notes),
    )


def _score(prob: Problem, cands: list[Candidate], s: np.ndarray, cuts: list[float]) -> list[Scored]:
    """Each candidate fitted on the largest cut's rows (from its own starts) and scored on the rest;
    the best `FIRST_KEEP` then on every other cut too (a form that lost the fold most like the real
    extrapolation is not chosen)."""
    scored = [Scored(c) for c in cands]
    _score_folds(prob, scored, s, cuts[-1:])
    if len(cuts) > 1:
        keep = sorted(scored, key=lambda x: x.mean)[:FIRST_KEEP]
        _score_folds(prob, keep, s, cuts[:-1])
        for sc in scored:
            if sc not in keep:
                sc.folds.clear()
    for sc in scored:  # reorder the folds as the cuts
        sc.folds = {float(c): sc.folds[float(c)] for c in cuts if float(c) in sc.folds}
    return scored


def _score_folds(prob: Problem, scored: list[Scored], s: np.ndarray, cuts: list[float]) -> None:
    jobs, owner = [], []
    for f, cut in enumerate(cuts):
        rows = s <= cut
        w = prob.w * rows
        for ci, sc in enumerate(scored):
            for x0 in candidate_starts(prob, sc.candidate, rows):
                jobs.append((sc.candidate, x0, w))
                owner.append((ci, f))
    best = _run_best(prob, jobs, owner)
    L = prob.layout
    for ci, sc in enumerate(scored):
        c = sc.candidate
        mask, on, sat, _ = L.slots(c)
        for f, cut in enumerate(cuts):
            row = best.get((ci, f))
            e = math.inf
            if row is not None and math.isfinite(row[-1]):
                test = s > cut
                r = prob.residuals(row[:-1], mask, on, sat, _grouped(L, c, prob.G), test)
                e = float(np.sqrt(np.sum(prob.w[test] * r * r) / np.sum(prob.w[test])))
            sc.folds[float(cut)] = e if math.isfinite(e) else math.inf


def _fit_all(prob: Problem, top: list[Scored], taken: set[str]) -> None:
    """The chosen form and the runners-up fitted on every row: their texts and starts."""
    every = np.ones(prob.y.size, bool)
    jobs, owner = [], []
    for i, sc in enumerate(top):
        for x0 in candidate_starts(prob, sc.candidate, every):
            jobs.append((sc.candidate, x0, prob.w))
            owner.append(i)
    best = _run_best(prob, jobs, owner)
    for i, sc in enumerate(top):
        sc.theta = best[i][:-1]
        sc.text, sc.starts, sc.shared = render(prob, sc.candidate, sc.theta, taken)
