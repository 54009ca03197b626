"""Figures of a continual-pre-training ladder and its fitted `cpt` law (analysis/laws/cpt.py):
both domains' final loss against the new tokens per replay ratio, and forgetting against replay.

`fit` is a fitted CptFit (or None: the measured runs alone) and `table` its `cpt_table` (or None:
the law alone over its fitted range); neither module imports the other's types at run time.
"""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure


def _colors(values) -> dict[float, Any]:
    vals = sorted(set(float(v) for v in values))
    cmap = matplotlib.colormaps["viridis"]
    return {v: cmap(i / max(1, len(vals) - 1) * 0.9) for i, v in enumerate(vals)}


def _largest(fit: Any, table: pd.DataFrame | None) -> tuple[float, float]:
    """(N, D_A) of the largest base model with continued runs."""
    if table is not None and (table.kind == "cpt").any():
        N = float(table.N[table.kind == "cpt"].max())
        base = table[(table.kind == "base") & np.isclose(table.N, N)]
        rows = base if len(base) else table[(table.kind == "cpt") & np.isclose(table.N, N)]
        return N, float(rows.D_A.iloc[0])
    b = max(fit.base_models, key=lambda m: m["N"])
    return float(b["N"]), float(b["D_A"])


def loss_figure(fit: Any, table: pd.DataFrame | None, ax: Any = None, N: float | None = None) -> Figure:
    """Old- and new-domain loss against D_B, one color per replay ratio r, for one model size
    (default the largest with continued runs): measured runs (dots; other re-warm peaks as
    crosses), the law (lines) and its 90% interval (bands), the base model's own losses (dashed)."""
    fig = Figure(figsize=(10, 4.2), layout="constrained") if ax is None else ax.figure
    axes = fig.subplots(1, 2) if ax is None else [ax, ax]
    n0, d_a = _largest(fit, table)
    N = n0 if N is None else N
    peak = getattr(fit, "peak", None)
    cont = None if table is None else table[(table.kind == "cpt") & np.isclose(table.N, N)]
    replays = sorted(set(cont.r)) if cont is not None and len(cont) else [0.0, 0.01, 0.05, 0.25]
    colors = _colors(replays)
    d_max = float(cont.D_B.max()) if cont is not None and len(cont) else fit.input_ranges["D_B"][1]
    grid = np.geomspace(d_max / 8, d_max * 2, 60)
    for k, (dom, a) in enumerate(zip(("old", "new"), axes)):
        if ax is not None and dom == "old":
            continue
        for r in replays:
            c = colors[float(r)]
            if fit is not None:
                p = fit.predict({"N": N, "D_A": d_a, "D_B": grid, "r": r})
                a.plot(grid, p[dom], color=c, lw=1.3, label=f"r = {r:g}")
                a.fill_between(grid, p[f"{dom}_lo"], p[f"{dom}_hi"], color=c, alpha=0.12, lw=0)
            if cont is not None:
                rows = cont[np.isclose(cont.r, r)]
                main = rows if peak is None else rows[np.isclose(rows.peak, peak)]
                other = rows.drop(main.index)
                a.scatter(main.D_B, main[f"loss_{dom}"], color=c, edgecolor="k", lw=0.4, s=30, zorder=3)
                a.scatter(other.D_B, other[f"loss_{dom}"], color=c, marker="x", s=40, zorder=3)
        if fit is not None:
            base = fit.base_loss(N, d_a)[k]
            a.axhline(float(base), color="0.4", ls="--", lw=1, label="base model")
        elif table is not None:
            b = table[(table.kind == "base") & np.isclose(table.N, N)]
            if len(b):
                a.axhline(float(b[f"loss_{dom}"].iloc[0]), color="0.4", ls="--", lw=1, label="base model")
        names = getattr(fit, "domains", None) or (table.attrs if table is not None else {})
        a.set_xscale("log")
        a.set_xlabel("new tokens D_B")
        a.set_ylabel(f"{dom} domain ({names.get(dom, dom)}) loss")
        a.set_title(f"N = {N:,.0f}, D_A = {d_a:.3g}: {dom} domain", fontsize=9)
        a.grid(True, which="both", alpha=0.3)
    axes[-1].legend(fontsize=7, title="replay (x: lower re-warm peak)", title_fontsize=7)
    return fig


def forgetting_figure(fit: Any, table: pd.DataFrame) -> Figure:
    """Forgetting (old-domain loss over the base model's, - 1) against replay r at the largest D_B,
    per model size: measured (dots; a lower re-warm peak as crosses) and the law (lines)."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    a = fig.subplots()
    cont = table[table.kind == "cpt"]
    d_max = float(cont.D_B.max())
    sizes = sorted(set(cont.N))
    colors = _colors(sizes)
    peak = getattr(fit, "peak", None)
    grid = np.concatenate([[0.0], np.geomspace(1e-3, 0.5, 60)])
    for N in sizes:
        c = colors[N]
        base = table[(table.kind == "base") & np.isclose(table.N, N)]
        if base.empty:
            continue
        b_old, d_a = float(base.loss_old.iloc[0]), float(base.D_A.iloc[0])
        rows = cont[np.isclose(cont.N, N) & np.isclose(cont.D_B, d_max)]
        main = rows if peak is None else rows[np.isclose(rows.peak, peak)]
        x = lambda r: np.maximum(r, 5e-4)  # noqa: E731 - r = 0 drawn at the axis' left edge
        a.scatter(x(main.r), main.loss_old / b_old - 1, color=c, edgecolor="k", lw=0.4, s=30, zorder=3)
        other = rows.drop(main.index)
        a.scatter(x(other.r), other.loss_old / b_old - 1, color=c, marker="x", s=40, zorder=3)
        if fit is not None:
            p = fit.predict({"N": N, "D_A": d_a, "D_B": d_max, "r": grid})
            base_law = float(fit.base_loss(N, d_a)[0])
            a.plot(x(grid), p["old"] / base_law - 1, color=c, lw=1.2, label=f"N = {N:,.0f}")
    a.axhline(0, color="0.4", lw=0.8)
    a.set_xscale("log")
    a.set_xlabel("replay r (old corpus's share; r = 0 at the left edge)")
    a.set_ylabel("forgetting: L_old / L_old(base) - 1")
    a.set_title(f"forgetting after D_B = {d_max:.3g} new tokens", fontsize=9)
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=7)
    return fig
