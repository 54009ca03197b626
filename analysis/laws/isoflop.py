"""Hoffmann et al.'s Approaches 1 and 2, and their comparison with Approach 3 (the law fit).

Approach 1: the envelope of minimum loss over runs as a function of compute; the run on the
envelope at each budget gives N_opt(C), and a power law N_opt = G C^a is fitted to it. With
per-step curves (`runs.load`'s curves table) the envelope is taken along every run's curve; with
one final point per run, per compute bin.

Approach 2: IsoFLOP profiles. Runs are grouped by compute budget; within each budget the loss is
modelled as a function of x = ln N and its minimum gives N_opt(C):
- `parabola`: quadratic in x (Hoffmann et al.). Biased when the profile is asymmetric, which it
  is for a Chinchilla law (a sum of two exponentials in x) unless the sampled N are centred on the
  optimum;
- `cubic`: a cubic in x, whose extra term absorbs the asymmetry (less biased, more variance);
- `law` (default for comparisons): the profile implied by the Chinchilla law,
  L = c0 + c1 e^{-alpha x} + c2 e^{beta x} with alpha, beta shared by all budgets and the linear
  coefficients solved exactly per budget (variable projection); unbiased when the law holds.
Uncertainty: stratified bootstrap (points resampled within each budget), vectorised with numpy.

`compare_approaches` reports whether the exponent a of Approach 2 (or 1) and of the law fit
disagree beyond their CIs.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from analysis.core import table as data_mod
from analysis.core import validation
from analysis.core.budgets import group_budgets  # moved there; `isoflop.group_budgets` still works
from analysis.laws.allocation import allocation
from models.base.errors import AnalysisError

METHODS = ("parabola", "cubic", "law")


def _powerlaw(logC: np.ndarray, logY_xB: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and intercept of logY on logC along the last axis (NaNs dropped)."""
    ok = np.isfinite(logY_xB)
    w = ok.astype(float)
    y = np.where(ok, logY_xB, 0.0)
    n = w.sum(-1)
    mx = (w * logC).sum(-1) / np.maximum(n, 1)
    my = (w * y).sum(-1) / np.maximum(n, 1)
    sxx = (w * (logC - mx[..., None]) ** 2).sum(-1)
    sxy = (w * (logC - mx[..., None]) * (y - my[..., None])).sum(-1)
    with np.errstate(all="ignore"):
        slope = np.where((n >= 2) & (sxx > 0), sxy / sxx, np.nan)
    return slope, my - slope * mx


def _poly_opt(x: np.ndarray, L: np.ndarray, W_BxN: np.ndarray, degree: int) -> np.ndarray:
    """Weighted polynomial fits of L on centred x for each weight row; returns argmin x (B,)."""
    xc = x.mean()
    V = np.vander(x - xc, degree + 1, increasing=True)  # (n, d+1)
    A = np.einsum("bn,ni,nj->bij", W_BxN, V, V)
    rhs = np.einsum("bn,ni,n->bi", W_BxN, V, L)
    with np.errstate(all="ignore"):
        ok = np.linalg.matrix_rank(A) == degree + 1
        coef = np.full((W_BxN.shape[0], degree + 1), np.nan)
        if ok.any():
            coef[ok] = np.linalg.solve(A[ok], rhs[ok][..., None])[..., 0]
    lo, hi = x.min() - xc, x.max() - xc
    span = hi - lo
    if degree == 2:
        c1, c2 = coef[:, 1], coef[:, 2]
        with np.errstate(all="ignore"):
            xs = np.where(c2 > 0, -c1 / (2 * c2), np.nan)
    else:
        c1, c2, c3 = coef[:, 1], coef[:, 2], coef[:, 3]
        with np.errstate(all="ignore"):
            disc = 4 * c2**2 - 12 * c3 * c1
            root = np.sqrt(np.where(disc >= 0, disc, np.nan))
            r1 = (-2 * c2 + root) / (6 * c3)
            r2 = (-2 * c2 - root) / (6 * c3)
            is_min = lambda r: 2 * c2 + 6 * c3 * r > 0  # noqa: E731
            xs = np.where(is_min(r1), r1, np.where(is_min(r2), r2, np.nan))
            quad = np.where(c2 > 0, -c1 / (2 * c2), np.nan)
            xs = np.where(np.abs(c3) < 1e-12, quad, xs)
    # A minimum far outside the sampled sizes is an extrapolation, not a measurement.
    xs = np.where((xs >= lo - 0.5 * span) & (xs <= hi + 0.5 * span), xs, np.nan)
    return xs + xc


_LAW_GRID = np.linspace(0.05, 1.5, 30)


def _law_profiles(
    groups: list[tuple[np.ndarray, np.ndarray]], W: list[np.ndarray], grid=_LAW_GRID
) -> np.ndarray:
    """Shared-exponent law profiles; (B, n_budgets) argmin x per weight row (variable projection
    over a grid of (alpha, beta): per budget the coefficients are a weighted linear solve)."""
    B = W[0].shape[0]
    al, be = np.meshgrid(grid, grid, indexing="ij")
    al, be = al.ravel(), be.ravel()  # (G,)
    sse = np.zeros((B, al.size))
    coefs = []
    for (x, L), w in zip(groups, W):
        xc = x - x.mean()
        Phi = np.stack(
            [np.ones((al.size, x.size)), np.exp(-al[:, None] * xc), np.exp(be[:, None] * xc)], -1
        )  # (G,n,3)
        A = np.einsum("bn,gni,gnj->bgij", w, Phi, Phi) + 1e-12 * np.eye(3)
        rhs = np.einsum("bn,gni,n->bgi", w, Phi, L)
        with np.errstate(all="ignore"):
            c = np.linalg.solve(A, rhs[..., None])[..., 0]  # (B,G,3)
        resid = L[None, None, :] - np.einsum("gni,bgi->bgn", Phi, c)
        sse += np.einsum("bn,bgn->bg", w, resid**2)
        coefs.append((c, x.mean()))
    g = np.argmin(np.where(np.isfinite(sse), sse, np.inf), axis=1)  # (B,)
    out = np.full((B, len(groups)), np.nan)
    a_, b_ = al[g], be[g]
    for j, (c, xm) in enumerate(coefs):
        cb = c[np.arange(B), g]  # (B,3)
        with np.errstate(all="ignore"):
            ratio = a_ * cb[:, 1] / (b_ * cb[:, 2])
            out[:, j] = np.where(ratio > 0, xm + np.log(ratio) / (a_ + b_), np.nan)
    return out


def _budget_labels(df: pd.DataFrame, C: np.ndarray, budget_col: str | None, rtol: float) -> np.ndarray:
    """Compute-budget label per row: from `budget_col` when given, else by grouping C."""
    if budget_col is None:
        return group_budgets(C, rtol)
    if budget_col not in df.columns:
        raise AnalysisError(
            f"budget column {budget_col!r} not found; columns: {', '.join(map(str, df.columns))}"
        )
    return pd.factorize(df[budget_col])[0]


def _budget_groups(
    N: np.ndarray, C: np.ndarray, labels: np.ndarray, need: int
) -> tuple[list[np.ndarray], list[float], list[float]]:
    """Row indices and geometric-mean budget of every budget with >= `need` model sizes, and the
    budgets skipped for having fewer."""
    groups, budgets, skipped = [], [], []
    for lab in np.unique(labels):
        m = labels == lab
        Cb = float(np.exp(np.mean(np.log(C[m]))))
        if len(np.unique(N[m])) < need:
            skipped.append(Cb)
            continue
        groups.append(np.flatnonzero(m))
        budgets.append(Cb)
    if len(groups) < 2:
        raise AnalysisError(
            f"Approach 2 needs at least 2 compute budgets with >= {need} model sizes each; "
            f"found {len(groups)} "
            f"(group runs by --budget-col or adjust rtol)"
        )
    return groups, budgets, skipped


def _stratified_weights(groups: list[np.ndarray], Bt: int, seed: int) -> list[np.ndarray]:
    """Per budget, (1 + Bt, n) point weights: row 0 all ones, then Bt within-budget resamples."""
    rng = np.random.default_rng(seed)
    W = []
    for idx in groups:
        w = np.ones((1 + Bt, idx.size))
        if Bt:
            w[1:] = validation.bootstrap_counts(idx.size, Bt, rng)
        W.append(w)
    return W


def _percentile_ci(bootstrap: int, ci_level: float):
    """v -> [lo, hi] percentile interval of the bootstrap values (NaNs without a bootstrap)."""
    if not bootstrap:
        return lambda v: [math.nan] * 2
    return lambda v: validation.percentile_bounds(v, ci_level)


def approach2(
    df: pd.DataFrame | str,
    columns: Mapping[str, str] | None = None,
    method: str = "law",
    budget_col: str | None = None,
    rtol: float = 0.1,
    bootstrap: int = 200,
    seed: int = 0,
    ci_level: float = 0.95,
    min_points: int | None = None,
) -> dict:
    """IsoFLOP profiles -> N_opt per budget and the power law N_opt = G C^a (with CIs)."""
    if method not in METHODS:
        raise AnalysisError(f"unknown IsoFLOP method {method!r}; choose one of {', '.join(METHODS)}")
    if isinstance(df, (str, bytes)):
        df = data_mod.read_table(df)
    pts = data_mod.resolve(df, ("N", "D"), columns)
    N, C, L = pts.inputs["N"], pts.inputs["C"], pts.y
    k_flops = float(np.median(C / (N * pts.inputs["D"])))
    labels = _budget_labels(df, C, budget_col, rtol)
    need = min_points or {"parabola": 3, "cubic": 4, "law": 3}[method]
    groups, budgets, skipped = _budget_groups(N, C, labels, need)
    Bt = int(bootstrap)
    W = _stratified_weights(groups, Bt, seed)
    xs = [(np.log(N[idx]), L[idx]) for idx in groups]
    if method == "law":
        xopt = _law_profiles(xs, W)
    else:
        deg = 2 if method == "parabola" else 3
        xopt = np.stack([_poly_opt(x, l, w, deg) for (x, l), w in zip(xs, W)], axis=1)
    logC = np.log(np.asarray(budgets))
    a, logG = _powerlaw(logC, xopt)
    Nopt = np.exp(xopt)
    ci = _percentile_ci(Bt, ci_level)
    rows = []
    for j, Cb in enumerate(budgets):
        idx = groups[j]
        rows.append(
            {
                "C": Cb,
                "N_opt": float(Nopt[0, j]),
                "N_opt_ci": ci(Nopt[1:, j]),
                "D_opt": float(Cb / (k_flops * Nopt[0, j])),
                "n_points": int(idx.size),
                "min_loss_observed": float(L[idx].min()),
            }
        )
    return {
        "method": method,
        "a": float(a[0]),
        "a_ci": ci(a[1:]),
        "b": float(1 - a[0]),
        "b_ci": [1 - v for v in ci(a[1:])][::-1],
        "G": float(np.exp(logG[0])),
        "flops_per_param_token": k_flops,
        "budgets": rows,
        "skipped_budgets": skipped,
        "bootstrap": Bt,
        "seed": seed,
        "bootstrap_failed": int(np.sum(~np.isfinite(a[1:]))),
    }


isoflop_profiles = approach2


def _approach1_table(
    df: pd.DataFrame,
    n_col: str,
    c_col: str,
    loss_col: str,
    run_col: str | None,
    runs_df: pd.DataFrame | None,
) -> tuple[pd.DataFrame, str]:
    """The rows approach1 uses (run, N, cumulative compute, loss; positive and finite) and the
    name of the run column (`_run`, one run per row, when the table has none)."""
    for c in (c_col, loss_col):
        if c not in df.columns:
            raise AnalysisError(
                f"approach1: column {c!r} not found; columns: {', '.join(map(str, df.columns))}"
            )
    d = df.copy()
    if run_col is None or run_col not in d.columns:
        d["_run"] = np.arange(len(d))
        run_col = "_run"
    if n_col not in d.columns:
        if runs_df is None or n_col not in runs_df.columns:
            raise AnalysisError(
                f"approach1 needs model size per run: column {n_col!r} in the table or in runs_df"
            )
        d = d.merge(runs_df[["run", n_col]], left_on=run_col, right_on="run", how="inner")
    d = d[[run_col, n_col, c_col, loss_col]].apply(pd.to_numeric, errors="coerce") if run_col == "_run" else d
    d = d[(d[c_col] > 0) & (d[loss_col] > 0) & np.isfinite(d[loss_col].astype(float))]
    return d, run_col


def _run_losses_on_grid(
    d: pd.DataFrame, runs: list, run_col: str, c_col: str, loss_col: str, grid: np.ndarray
) -> np.ndarray:
    """(runs, grid) loss of each run at each compute grid point (inf where it has none): its curve
    interpolated in log-log, or a single final point at its nearest compute bin."""
    Lg = np.full((len(runs), grid.size), np.inf)
    for i, r in enumerate(runs):
        g = d[d[run_col] == r].sort_values(c_col)
        c, l = g[c_col].to_numpy(float), g[loss_col].to_numpy(float)
        if c.size == 1:  # a final point: it stands at its own compute bin
            j = int(np.argmin(np.abs(np.log(grid) - np.log(c[0]))))
            Lg[i, j] = l[0]
            continue
        inside = (grid >= c[0]) & (grid <= c[-1])
        Lg[i, inside] = np.exp(np.interp(np.log(grid[inside]), np.log(c), np.log(l)))
    return Lg


def _envelope_winners(
    Lg: np.ndarray, Nrun: np.ndarray, bootstrap: int, seed: int, exclude_edges: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(1 + bootstrap, grid) index of the run on the envelope, and whether it counts, for the full
    set of runs (row 0) and each bootstrap resample of runs."""
    rng = np.random.default_rng(seed)
    R = len(Nrun)
    masks = np.ones((1 + bootstrap, R), bool)
    if bootstrap:
        masks[1:] = validation.bootstrap_counts(R, bootstrap, rng) > 0
    Lm = np.where(masks[:, :, None], Lg[None], np.inf)  # (B, R, G)
    best = np.argmin(Lm, axis=1)  # (B, G)
    valid = np.isfinite(np.min(Lm, axis=1))
    if exclude_edges:
        # Where the smallest or largest model wins, the true optimum may lie beyond the sampled
        # sizes (censored): those budgets would flatten the fitted exponent.
        Nb = np.where(masks, Nrun[None, :], np.nan)
        edge = (Nrun[best] <= np.nanmin(Nb, axis=1)[:, None]) | (Nrun[best] >= np.nanmax(Nb, axis=1)[:, None])
        valid &= ~edge
    return best, valid


def approach1(
    df: pd.DataFrame,
    n_col: str = "n_params",
    c_col: str = "flops",
    loss_col: str = "loss",
    run_col: str | None = "run",
    runs_df: pd.DataFrame | None = None,
    n_grid: int = 40,
    bootstrap: int = 200,
    seed: int = 0,
    ci_level: float = 0.95,
    exclude_edges: bool = True,
) -> dict:
    """Envelope of minimum loss over compute -> N_opt(C) power law, with a bootstrap over runs.

    exclude_edges drops budgets won by the smallest or largest model (censored optima).
    `df` is either a curves table (several rows per run: `run_col`, `c_col` cumulative FLOPs,
    `loss_col`), with N per run from `df[n_col]` or `runs_df` (columns run, n_params), or a
    table with one final point per run (then `run_col=None`).
    """
    d, run_col = _approach1_table(df, n_col, c_col, loss_col, run_col, runs_df)
    runs = list(pd.unique(d[run_col]))
    if len(runs) < 2:
        raise AnalysisError("approach1 needs at least 2 runs")
    Nrun = np.array([float(d.loc[d[run_col] == r, n_col].iloc[0]) for r in runs])
    cmin, cmax = float(d[c_col].min()), float(d[c_col].max())
    grid = np.geomspace(cmin, cmax, n_grid)
    Lg = _run_losses_on_grid(d, runs, run_col, c_col, loss_col, grid)
    R = len(runs)
    best, valid = _envelope_winners(Lg, Nrun, bootstrap, seed, exclude_edges)
    logN = np.where(valid, np.log(Nrun[best]), np.nan)
    a, logG = _powerlaw(np.log(grid), logN)
    a_ci = validation.percentile_bounds(a[1:], ci_level) if bootstrap else [math.nan] * 2
    env = [
        {"C": float(grid[j]), "N_opt": float(Nrun[best[0, j]]), "loss": float(Lg[best[0, j], j])}
        for j in range(n_grid)
        if valid[0, j]
    ]
    return {
        "a": float(a[0]),
        "a_ci": a_ci,
        "G": float(np.exp(logG[0])),
        "envelope": env,
        "n_runs": R,
        "bootstrap": bootstrap,
        "seed": seed,
    }


def compare_approaches(fit, other: dict, name: str = "approach2") -> dict:
    """Do the law fit (Approach 3) and Approach 1/2 agree on a = d ln N_opt / d ln C?

    They disagree when their CIs do not overlap; the message says so in one line.
    """
    al = allocation(fit, budgets=[1e21])
    a3, ci3 = al["a"], al.get("a_ci", [math.nan, math.nan])
    a2, ci2 = other["a"], other.get("a_ci", [math.nan, math.nan])
    known = all(math.isfinite(v) for v in (*ci3, *ci2))
    disagree = bool(known and (ci3[1] < ci2[0] or ci2[1] < ci3[0]))
    msg = (
        f"{name} a = {a2:.3f} [{ci2[0]:.3f}, {ci2[1]:.3f}] "
        f"vs law fit a = {a3:.3f} [{ci3[0]:.3f}, {ci3[1]:.3f}]: "
        + ("DISAGREE beyond their CIs" if disagree else ("consistent" if known else "no CIs to compare"))
    )
    return {
        "a_law": a3,
        "a_law_ci": ci3,
        f"a_{name}": a2,
        f"a_{name}_ci": ci2,
        "disagree": disagree,
        "message": msg,
    }
