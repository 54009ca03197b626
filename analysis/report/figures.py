"""The report's figures: one function per figure, each returning a matplotlib `Figure`.

Every figure is readable on its own: labelled axes with units, log scales where the quantity
spans decades, a legend, and a title that says what to look at. Functions return None when the
data cannot support the figure (the report then says why instead of showing an empty plot).

Figures are built as `matplotlib.figure.Figure` objects, not through pyplot: no backend is
selected or switched (importing this module leaves a notebook's backend alone), nothing is
registered with pyplot, and `save(fig, path)` renders a PNG with no display. In a notebook, a
returned Figure shows inline as the cell's value.
"""

from __future__ import annotations

import pathlib
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from analysis.laws.allocation import chinchilla_index, closed_form_optimum
from models.base.errors import AnalysisError
from models.base.jsonio import write_figure_atomic
from models.base.rundir import ROLE_FIELDS, RunStatus

DPI = 110
# The report's run tables hold the summary fields: N, C and the loss of each run.
N_COL, C_COL, LOSS_COL = ROLE_FIELDS["N"], ROLE_FIELDS["C"], ROLE_FIELDS["loss"]


def save(fig: Figure, path: str | pathlib.Path) -> pathlib.Path:
    """Write `fig` as a PNG at the report's resolution, whole or not at all (a full disk keeps
    the previous file: models.base.jsonio.write_figure_atomic)."""
    write_figure_atomic(path, fig, dpi=DPI)
    return pathlib.Path(path)


def _laid_out(fig: Figure) -> Figure:
    """Tighten the layout once, so the figure looks the same in a notebook and in the PNG."""
    fig.tight_layout()
    return fig


def _plain_log_y(ax) -> None:
    """Log-scaled y axis labelled 1.8, 2, 2.5 rather than 1.8x10^0 (losses span < 1 decade)."""
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))


def _budget_colors(budgets) -> dict:
    ub = sorted(set(float(b) for b in budgets))
    cmap = matplotlib.colormaps["viridis"]
    return {b: cmap(i / max(1, len(ub) - 1) * 0.9) for i, b in enumerate(ub)}


def _fmt_c(c: float) -> str:
    return f"{c:.2g}".replace("e+", "e")


def loss_vs_compute(done: pd.DataFrame, frontier: dict | None) -> Figure:
    """Every run's final eval loss against its compute, with the fitted compute-optimal frontier."""
    fig = Figure(figsize=(7, 4.6))
    ax = fig.subplots()
    sc = ax.scatter(
        done[C_COL],
        done[LOSS_COL],
        c=np.log10(done[N_COL]),
        cmap="plasma",
        s=36,
        edgecolor="k",
        linewidth=0.4,
        label="runs (colour: model size)",
        zorder=3,
    )
    cb = fig.colorbar(sc, ax=ax)
    cb.set_label("log10 N (parameters)")
    if frontier:
        C = np.asarray(frontier["C"])
        ax.plot(
            C,
            frontier["loss"],
            color="C0",
            lw=2,
            label=f"expected best loss ({frontier.get('method', 'law_minimum')})",
        )
        lo, hi = np.asarray(frontier["loss_lo"]), np.asarray(frontier["loss_hi"])
        plo, phi = (
            np.asarray(frontier.get("loss_pi_lo", [np.nan])),
            np.asarray(frontier.get("loss_pi_hi", [np.nan])),
        )
        if np.isfinite(plo).all() and np.isfinite(phi).all():
            ax.fill_between(C, plo, phi, color="C0", alpha=0.12, label="90% prediction interval (new run)")
        if np.isfinite(lo).all() and np.isfinite(hi).all():
            ax.fill_between(C, lo, hi, color="C0", alpha=0.3, label="95% bootstrap CI (mean loss)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_y(ax)
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("final eval loss (nats/token)")
    ax.set_title("Loss vs compute with the fitted frontier (Approach 3)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _laid_out(fig)


# How each law's compute-optimal N is marked on the IsoFLOP profiles: (matplotlib marker, Plotly
# symbol). "fit" is the fitted law's own optimum; the rest are analysis.report.published.LAWS.
OPTIMUM_MARKERS = {
    "fit": ("o", "circle-open"),
    "hoffmann2022": ("^", "triangle-up"),
    "besiroglu2024": ("D", "diamond"),
    "kaplan2020": ("X", "x"),
}


def isoflop_profiles(
    done: pd.DataFrame, fit: Any, k_flops: float, a2: dict | None, published=()
) -> list[dict]:
    """What the IsoFLOP figure draws, per budget (the PNG and the interactive figure draw the same):
    {budget, color (hex), runs (the budget's rows by N), profile (N grid, the law's loss along C =
    k N D) or None, parabola (N grid, loss) or None, a2 (Approach 2's minimum: N, N_ci, loss) or
    None, optima: [{key, name, N, D, loss}] the fitted law's compute-optimal N at this budget and each
    `published` law's (analysis.report.published.LAWS), placed on the law's profile}."""
    colors = _budget_colors(done["budget"])
    a2_rows = {round(np.log10(r["C"]), 2): r for r in (a2 or {}).get("budgets", [])}
    out = []
    for b, g in done.groupby("budget"):
        g = g.sort_values(N_COL)
        N, L = g[N_COL].to_numpy(float), g[LOSS_COL].to_numpy(float)
        Cb = float(np.exp(np.mean(np.log(g[C_COL]))))
        optima = []
        if fit is not None:
            own = _fit_optimum(fit, Cb)
            if own is not None:
                optima.append({"key": "fit", "name": "this fit (Approach 3)", "N": own})
            for law in published:
                optima.append({"key": law.key, "name": law.name, "N": float(law.n_opt(np.array([Cb]))[0])})
        marks = [o["N"] for o in optima]
        lo = min([N.min() / 1.5, *marks]) if marks else N.min() / 1.5
        hi = max([N.max() * 1.5, *marks]) if marks else N.max() * 1.5
        Ng = np.geomspace(lo, hi, 120)
        profile = None
        if fit is not None:
            profile = (Ng, _law_loss(fit, Ng, Cb / (k_flops * Ng)))
            if optima:
                on = _law_loss(fit, np.array(marks), Cb / (k_flops * np.array(marks)))
                for o, loss in zip(optima, on):
                    o.update(D=Cb / (k_flops * o["N"]), loss=float(loss))
        parabola = None
        if len(np.unique(N)) >= 3:
            Np = np.geomspace(N.min() / 1.5, N.max() * 1.5, 100)
            parabola = (Np, np.polyval(np.polyfit(np.log(N), L, 2), np.log(Np)))
        row = min(a2_rows.items(), key=lambda kv: abs(kv[0] - np.log10(float(b))), default=(None, None))[1]
        a2_min = None
        if row is not None and np.isfinite(row["N_opt"]):
            a2_min = {"N": row["N_opt"], "N_ci": row["N_opt_ci"], "loss": row["min_loss_observed"]}
        out.append(
            {
                "budget": float(b),
                "C": Cb,
                "color": matplotlib.colors.to_hex(colors[float(b)]),
                "runs": g,
                "profile": profile,
                "parabola": parabola,
                "a2": a2_min,
                "optima": optima,
            }
        )
    return out


def _law_loss(fit: Any, N: np.ndarray, D: np.ndarray) -> np.ndarray:
    """The fitted law at (N, D); a data-constrained law on fresh data (U = D)."""
    return np.asarray(fit.predict(pd.DataFrame({"N": N, "D": D, "U": D}), {"N": "N", "D": "D", "U": "U"}))


def _fit_optimum(fit: Any, C: float) -> float | None:
    """The fitted law's compute-optimal N at C (the closed form of a Chinchilla-form law), None for
    a law without one."""
    idx = chinchilla_index(fit.param_names)
    if idx is None:
        return None
    row = np.array([fit.params[fit.param_names[i]] for i in idx], dtype=float)
    try:
        return float(closed_form_optimum(row, [C], fit.flops_per_param_token)["N_opt"][0])
    except AnalysisError:
        return None


def isoflop_curves(done: pd.DataFrame, fit: Any, k_flops: float, a2: dict | None, published=()) -> Figure:
    """Loss against N for each budget: points, the law's IsoFLOP profile, parabola, Approach 2's
    minima, and where the fitted law and each `published` law put the compute-optimal N."""
    fig = Figure(figsize=(7.4, 5))
    ax = fig.subplots()
    optima: dict[str, list] = {}
    for p in isoflop_profiles(done, fit, k_flops, a2, published):
        col, g = p["color"], p["runs"]
        ax.scatter(
            g[N_COL],
            g[LOSS_COL],
            color=col,
            s=36,
            edgecolor="k",
            linewidth=0.4,
            zorder=3,
            label=f"C = {_fmt_c(p['budget'])}",
        )
        if p["profile"] is not None:
            ax.plot(*p["profile"], color=col, lw=1.6)
        if p["parabola"] is not None:
            ax.plot(*p["parabola"], color=col, lw=1, ls="--")
        m = p["a2"]
        if m is not None:
            lo, hi = m["N_ci"]
            xerr = None
            if np.isfinite(lo) and np.isfinite(hi):
                xerr = [[max(m["N"] - lo, 0)], [max(hi - m["N"], 0)]]
            ax.errorbar(
                [m["N"]], [m["loss"]], xerr=xerr, fmt="*", ms=13, color=col, mec="k", capsize=3, zorder=4
            )
        for o in p["optima"]:
            optima.setdefault(o["key"], []).append((o["N"], o["loss"], "none" if o["key"] == "fit" else col))
    for key, pts in optima.items():  # one collection per law: far fewer artists than one per point
        N, loss, face = zip(*pts)
        marker = OPTIMUM_MARKERS.get(key, ("s", "square"))[0]
        ax.scatter(N, loss, s=64, marker=marker, facecolors=face, edgecolors="k", linewidths=0.8, zorder=5)
    ax.plot([], [], color="gray", lw=1.6, label="law profile (Approach 3)")
    ax.plot([], [], color="gray", lw=1, ls="--", label="parabola in log N (Approach 2)")
    ax.plot([], [], "*", color="gray", mec="k", ms=11, ls="none", label="Approach 2 minimum (95% CI)")
    names = {"fit": "N* of this fit"} | {law.key: f"N* of {law.name}" for law in published}
    for key, name in names.items():
        if fit is None:
            break
        marker = OPTIMUM_MARKERS.get(key, ("s", "square"))[0]
        ax.plot([], [], marker, ms=7, mfc="none" if key == "fit" else "0.6", mec="k", ls="none", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("final eval loss (nats/token)")
    ax.set_title("IsoFLOP profiles: loss vs model size at fixed compute")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    return _laid_out(fig)


# Line styles of the published laws on the allocation figure (analysis.report.published.LAWS).
PUBLISHED_STYLES = {
    "hoffmann2022": ("C2", "-."),
    "besiroglu2024": ("C4", ":"),
    "kaplan2020": ("C5", (0, (5, 1))),
}


def allocation_grid(a2: dict | None, alloc_grid: dict | None, requested: list[float]) -> np.ndarray:
    """The budgets the allocation figure spans: the law's grid, else Approach 2's and the requested."""
    if alloc_grid is not None:
        return np.asarray(alloc_grid["C"], float)
    cs = [r["C"] for r in (a2 or {}).get("budgets", [])] + list(requested)
    return np.geomspace(min(cs), max(cs), 50)


def optimal_allocation(
    a2: dict | None, alloc_grid: dict | None, requested: list[float], published=()
) -> Figure | None:
    """N_opt(C) and D_opt(C): Approach 2 per-budget minima (with CIs), Approach 3's law and each
    `published` law (analysis.report.published.LAWS)."""
    if a2 is None and alloc_grid is None:
        return None
    grid = allocation_grid(a2, alloc_grid, requested)
    fig = Figure(figsize=(10, 4.2))
    axes = fig.subplots(1, 2)
    for ax, key, label in (
        (axes[0], "N_opt", "optimal parameters N*"),
        (axes[1], "D_opt", "optimal tokens D*"),
    ):
        if alloc_grid is not None:
            C = np.asarray(alloc_grid["C"])
            ax.plot(C, alloc_grid[key], color="C0", lw=2, label="Approach 3 (law fit)")
            lo, hi = np.asarray(alloc_grid[key + "_lo"]), np.asarray(alloc_grid[key + "_hi"])
            ok = np.isfinite(lo) & np.isfinite(hi) & (lo > 0)
            if ok.any():
                ax.fill_between(C[ok], lo[ok], hi[ok], color="C0", alpha=0.2, label="Approach 3 95% CI")
        if a2 is not None:
            rows = [r for r in a2["budgets"] if np.isfinite(r["N_opt"])]
            if rows:
                C2 = np.array([r["C"] for r in rows])
                Nopt = np.array([r["N_opt"] for r in rows])
                ci = np.array([r["N_opt_ci"] for r in rows], dtype=float)
                k = a2["flops_per_param_token"]
                if key == "N_opt":
                    y, ylo, yhi = Nopt, ci[:, 0], ci[:, 1]
                else:
                    y, ylo, yhi = C2 / (k * Nopt), C2 / (k * ci[:, 1]), C2 / (k * ci[:, 0])
                err = np.array([np.clip(y - ylo, 0, None), np.clip(yhi - y, 0, None)])
                err = np.where(np.isfinite(err), err, 0)
                ax.errorbar(
                    C2, y, yerr=err, fmt="s", color="C3", capsize=3, label="Approach 2 minima (95% CI)"
                )
                if np.isfinite(a2.get("a", np.nan)):
                    Cg = np.geomspace(
                        min(C2.min(), *(requested or [C2.min()])),
                        max(C2.max(), *(requested or [C2.max()])),
                        50,
                    )
                    Ng = a2["G"] * Cg ** a2["a"]
                    ax.plot(
                        Cg,
                        Ng if key == "N_opt" else Cg / (k * Ng),
                        color="C3",
                        ls="--",
                        label=f"Approach 2 power law (a={a2['a']:.2f})",
                    )
        for law in published:
            col, ls = PUBLISHED_STYLES.get(law.key, ("0.4", "-."))
            rows = law.at(grid)
            ax.plot(grid, [r[key] for r in rows], color=col, ls=ls, lw=1.2, label=law.name)
        for c in requested:
            ax.axvline(c, color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training compute C (FLOPs)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Compute-optimal allocation against published laws (dotted: requested budgets)")
    return _laid_out(fig)


def residuals(done: pd.DataFrame, pred: np.ndarray) -> Figure:
    """Relative residuals of the law fit against compute and model size."""
    rel = (pred - done[LOSS_COL].to_numpy(float)) / done[LOSS_COL].to_numpy(float)
    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    colors = _budget_colors(done["budget"])
    c = [colors[float(b)] for b in done["budget"]]
    for ax, col, xl in (
        (axes[0], C_COL, "training compute C (FLOPs)"),
        (axes[1], N_COL, "parameters N"),
    ):
        ax.scatter(done[col], 100 * rel, c=c, s=32, edgecolor="k", linewidth=0.4)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(xl)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("(predicted - actual) / actual  [%]")
    for b, col in colors.items():
        axes[1].scatter([], [], color=col, label=f"C = {_fmt_c(b)}")
    axes[1].legend(fontsize=7)
    fig.suptitle("Residuals of the law fit (Approach 3, all runs)")
    return _laid_out(fig)


def holdout(points_fit: pd.DataFrame, pred_fit: np.ndarray, hold: dict) -> Figure:
    """Predicted vs actual loss: runs the law was fitted on and the held-out largest budget."""
    fig = Figure(figsize=(5.6, 5))
    ax = fig.subplots()
    act_f = points_fit[LOSS_COL].to_numpy(float)
    ax.scatter(act_f, pred_fit, s=32, color="C0", edgecolor="k", linewidth=0.4, label="fitted runs")
    ha = np.array([p["actual"] for p in hold["points"]])
    hp = np.array([p["predicted"] for p in hold["points"]])
    ax.scatter(
        ha,
        hp,
        s=60,
        marker="D",
        color="C3",
        edgecolor="k",
        linewidth=0.4,
        label=f"held out (C > {_fmt_c(hold['threshold'])}): mean |err| {100 * hold['mean_rel_error']:.2f}%",
    )
    lo = min(act_f.min(), ha.min(), pred_fit.min(), hp.min()) * 0.97
    hi = max(act_f.max(), ha.max(), pred_fit.max(), hp.max()) * 1.03
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, label="predicted = actual")
    ax.fill_between(
        [lo, hi], [lo * 0.97, hi * 0.97], [lo * 1.03, hi * 1.03], color="gray", alpha=0.15, label="±3%"
    )
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("actual final eval loss")
    ax.set_ylabel("predicted final eval loss")
    ax.set_title("Held-out check: fit smaller budgets, predict the largest")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _laid_out(fig)


def loss_curves(done: pd.DataFrame, curves: pd.DataFrame) -> Figure | None:
    """Training and eval loss against tokens for every run (colour: model size, line style: budget)."""
    if curves.empty or "tokens" not in curves.columns:
        return None
    fig = Figure(figsize=(11, 4.4))
    axes = fig.subplots(1, 2, sharey=True)
    sizes = sorted(done[N_COL].unique())
    cmap = matplotlib.colormaps["plasma"]
    color = {n: cmap(0.85 * i / max(1, len(sizes) - 1)) for i, n in enumerate(sizes)}
    styles = ["-", "--", ":", "-."]
    style = {b: styles[i % len(styles)] for i, b in enumerate(sorted(done["budget"].unique()))}
    for _, r in done.sort_values(["budget", N_COL]).iterrows():
        c = curves[curves["run"] == r["run"]]
        if c.empty:
            continue
        kw = dict(
            color=color[r[N_COL]],
            ls=style[r["budget"]],
            lw=1.1,
            alpha=0.9,
            label=f"C={_fmt_c(r['budget'])} N={r['n_params'] / 1e3:.0f}k",
        )
        if "loss" in c.columns:
            axes[0].plot(c["tokens"], c["loss"].rolling(20, min_periods=1).mean(), **kw)
        if "eval_loss" in c.columns:
            e = c.dropna(subset=["eval_loss"])
            axes[1].plot(e["tokens"], e["eval_loss"], marker="o", ms=2, **kw)
    for ax, t in ((axes[0], "training loss (20-step mean)"), (axes[1], "eval loss")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens seen")
        ax.set_title(t)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("loss (nats/token)")
    _plain_log_y(axes[0])
    axes[1].legend(fontsize=6, ncol=2, title="colour: N, line: budget", title_fontsize=7)
    fig.suptitle("Loss curves per run")
    return _laid_out(fig)


def throughput(runs: pd.DataFrame, mfu_col: str = "mfu", mfu_convention: str | None = None) -> Figure | None:
    """Tokens/s and MFU (column `mfu_col`, counted as `mfu_convention` says) of every run with a
    summary, against model size."""
    r = runs.dropna(subset=["tokens_per_s"]) if "tokens_per_s" in runs.columns else runs.iloc[0:0]
    if r.empty:
        return None
    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2)
    st = r["status"].astype(str)
    for status, m in ((RunStatus.COMPLETED, "o"), (RunStatus.DIVERGED, "x"), (RunStatus.FAILED, "v")):
        sel = r[st == status]
        if sel.empty:
            continue
        axes[0].scatter(sel[N_COL], sel["tokens_per_s"], marker=m, s=36, label=status)
        if mfu_col in sel.columns:
            axes[1].scatter(sel[N_COL], 100 * sel[mfu_col].astype(float), marker=m, s=36, label=status)
    axes[0].set_ylabel("training throughput (tokens/s)")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("MFU (% of peak FLOP/s)" + (f"\n{mfu_convention}" if mfu_convention else ""))
    if mfu_col not in r.columns or not np.isfinite(pd.to_numeric(r[mfu_col], errors="coerce")).any():
        axes[1].text(
            0.5,
            0.5,
            "no run has an MFU\nin this convention",
            ha="center",
            va="center",
            transform=axes[1].transAxes,
            color="0.4",
        )
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("parameters N")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("Throughput and model FLOPs utilisation per run")
    return _laid_out(fig)


def lr_sensitivity(hparams: dict | None) -> Figure | None:
    """How much worse than the rung's best run each run ended, against the swept hyperparameter
    (log x): one line per (budget, shape) rung, one panel per budget; the run the laws use is
    starred (at 0). Relative loss, so rungs whose losses differ by far more than the LR effect
    share one readable axis. None when nothing was swept."""
    if not hparams or not hparams.get("active") or not hparams.get("x_param"):
        return None
    x_param, groups = hparams["x_param"], hparams["groups"]
    budgets = sorted({g["budget"] for g in groups if np.isfinite(g["budget"])}) or [np.nan]
    ncol = min(len(budgets), 4)
    nrow = -(-len(budgets) // ncol)
    fig = Figure(figsize=(3.6 * ncol + 1.2, 3.4 * nrow))
    axes = np.atleast_1d(fig.subplots(nrow, ncol, sharey=True, squeeze=False)).ravel()
    sizes = sorted({g["N"] for g in groups})
    cmap = matplotlib.colormaps["plasma"]
    color = {n: cmap(0.85 * i / max(1, len(sizes) - 1)) for i, n in enumerate(sizes)}
    for ax, b in zip(axes, budgets):
        panel = [g for g in groups if (np.isnan(b) and not np.isfinite(g["budget"])) or g["budget"] == b]
        for g in sorted(panel, key=lambda g: g["N"]):
            _lr_line(ax, g, x_param, color[g["N"]])
        ax.set_xscale("log")
        ax.set_xlabel(x_param)
        ax.set_title(f"C = {_fmt_c(b)}" if np.isfinite(b) else "all runs", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, title="shape (N)", title_fontsize=6)
    for ax in axes[len(budgets) :]:
        ax.set_visible(False)
    for ax in axes[::ncol]:
        ax.set_ylabel("final loss / rung's best − 1  [%]")
    fig.suptitle(f"Sensitivity to {x_param} per rung (star: the run the laws use)")
    return _laid_out(fig)


def _lr_line(ax, group: dict, x_param: str, color) -> None:
    """One rung's loss-vs-hyperparameter line, sorted by the hyperparameter, its best run starred;
    runs that did not complete are crosses at the rung's highest loss."""
    x = pd.to_numeric(pd.Series(list(group["values"][x_param]), dtype=object), errors="coerce").to_numpy(
        float
    )
    y = 100 * (np.array(group["losses"], dtype=float) / group["best_loss"] - 1)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0)
    order = np.argsort(x[ok])
    ax.plot(x[ok][order], y[ok][order], "o-", color=color, ms=4, lw=1.2, label=f"N={_fmt_c(group['N'])}")
    if group["best"] is not None:
        i = list(group["runs"]).index(group["best"])
        ax.plot([x[i]], [y[i]], "*", ms=13, color=color, mec="k", zorder=4)
    failed = ~np.isfinite(y) & np.isfinite(x)
    if failed.any():
        top = np.nanmax(y) if np.isfinite(y).any() else 0.0
        ax.plot(x[failed], np.full(failed.sum(), top), "x", color=color, ms=7)


MAX_TASK_PANELS = 4


def downstream(done: pd.DataFrame, ds: dict | None) -> Figure | None:
    """Per task: the runs' final accuracies against compute, the chance level, and the predicted
    accuracy with its 90% interval at each target budget's compute-optimal (N*, D*).
    `ds` is report.json's `downstream` object; tasks beyond the first four are left out."""
    tasks = [t for t, v in (ds or {}).get("tasks", {}).items() if f"accuracy/{t}" in done.columns][
        :MAX_TASK_PANELS
    ]
    if not tasks:
        return None
    fig = Figure(
        figsize=(4.2 * len(tasks) + 1.2, 4.2), layout="constrained"
    )  # constrained: one colour bar for all
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks):
        acc = pd.to_numeric(done[f"accuracy/{task}"], errors="coerce")
        sc = ax.scatter(
            done[C_COL],
            acc,
            c=np.log10(done[N_COL]),
            cmap="plasma",
            s=30,
            edgecolor="k",
            linewidth=0.4,
            label="runs (colour: log10 N)",
            zorder=3,
        )
        chance = ds["tasks"][task].get("chance")
        if chance is not None:
            ax.axhline(chance, color="0.5", ls=":", label=f"chance ({chance:.2g})")
        preds = [p for p in ds["predictions"] if p["task"] == task]
        for i, p in enumerate(preds):
            lo, hi = p["accuracy_interval"]
            ax.errorbar(
                [p["C"]],
                [p["accuracy"]],
                yerr=[[p["accuracy"] - lo], [hi - p["accuracy"]]],
                fmt="D",
                color="C0",
                capsize=4,
                zorder=4,
                label="predicted at (N*, D*), 90% interval" if i == 0 else None,
            )
        ax.set_xscale("log")
        ax.set_xlabel("training compute C (FLOPs)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task} ({ds['tasks'][task].get('method', 'not fitted')})", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.colorbar(sc, ax=list(axes)).set_label("log10 N (parameters)")
    fig.suptitle("Downstream tasks: observed accuracy and the prediction at the target budgets")
    return fig


def hparam_penalty(sec: dict | None) -> Figure | None:
    """How much loss a mistuned hyperparameter costs: the relative loss increase at k x the rung
    optimum (log x), the median over rungs with the range over rungs shaded, one line per law.
    `sec` is report.json's `hparams.law`; None without penalty curves."""
    curves = {p: s["penalty"] for p, s in (sec or {}).get("params", {}).items() if s.get("penalty")}
    curves = {
        p: c
        for p, c in curves.items()
        if c.get("k") and np.isfinite(np.asarray(c["loss_increase"], float)).any()
    }
    if not curves:
        return None
    fig = Figure(figsize=(6, 3.8))
    ax = fig.subplots()
    for i, (p, c) in enumerate(curves.items()):
        k, mid, lo, hi = _through_optimum(c["k"], c["loss_increase"], c["lo"], c["hi"])
        ax.plot(k, mid, "o-", color=f"C{i}", ms=4, label=f"{p} (median of {c.get('n_rungs')} rungs)")
        ax.fill_between(k, lo, hi, color=f"C{i}", alpha=0.2, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("value / rung optimum (k)")
    ax.set_ylabel("loss increase [%]")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Loss penalty at k x the optimum (shaded: range over rungs)", fontsize=10)
    return _laid_out(fig)


def _through_optimum(k, *curves) -> tuple[np.ndarray, ...]:
    """(k, curves in %) sorted by k, with the optimum itself (k = 1, no loss increase) added."""
    k = np.asarray(k, float)
    order = np.argsort(k)
    j = int((k < 1).sum())
    return (
        np.insert(k[order], j, 1.0),
        *(np.insert(100 * np.asarray(y, float)[order], j, 0.0) for y in curves),
    )


def hparam_law(sec: dict | None) -> Figure | None:
    """Each rung's located optimum (90% interval; crosses: edge / flat rungs, left out of the law)
    against N, coloured by D, and the law's value at the same rung (open circles); one panel per
    law. None without rungs."""
    params = {p: s for p, s in (sec or {}).get("params", {}).items() if s.get("rungs")}
    if not params:
        return None
    fig = Figure(figsize=(4.4 * len(params) + 1.2, 3.8), layout="constrained")
    axes = fig.subplots(1, len(params), squeeze=False)[0]
    allD = [r["D"] for s in params.values() for r in s["rungs"] if r.get("D")]
    norm = matplotlib.colors.LogNorm(min(allD), max(allD) * 1.0001)
    cmap = matplotlib.colormaps["viridis"]
    for ax, (p, s) in zip(axes, params.items()):
        for r in s["rungs"]:
            opt, iv, col = r.get("optimum"), r.get("interval") or [None, None], cmap(norm(r["D"]))
            if opt is None or not np.isfinite(opt):
                continue
            if r.get("flag"):
                ax.plot([r["N"]], [opt], "x", color=col, ms=7)
            else:
                lo, hi = (opt if v is None else v for v in iv)
                ax.errorbar(
                    [r["N"]], [opt], yerr=[[opt - lo], [hi - opt]], fmt="o", color=col, ms=5, capsize=3
                )
            if r.get("law") is not None:
                ax.plot([r["N"]], [r["law"]], "o", mfc="none", mec="k", ms=8)
        ax.plot([], [], "o", mfc="none", mec="k", label=f"law: {s['expression']}")
        ax.plot([], [], "o", color="0.4", label="rung optimum, 90% interval")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (parameters)")
        ax.set_ylabel(p)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=list(axes)).set_label("D (tokens)")
    fig.suptitle("Hyperparameter optima per rung and the fitted law")
    return fig
