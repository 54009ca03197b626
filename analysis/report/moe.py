"""The report's "Mixture of experts" section, for a sweep whose runs differ in their expert count
(`+sweep=moe`, or any runs table with an `experts` / `model.moe.experts` column at two or more
values; a dense run counts as one expert).

- The law: `fit --law moe` on the completed runs (analysis/laws/moe.py: N = active parameters,
  experts, and D where the runs vary it; the form chosen by forward-chaining in N against the
  log-bilinear baseline), with its parameters and the choice's reason.
- The table: each (budget, shape)'s final loss at every expert count, and what the experts bought
  against the dense run of the same shape and budget (the loss ratio).
- The figure: loss against experts per shape and budget, with the fitted law through them.

Every other section of the report is fitted to the dense runs only (experts = 1), as a dense
scaling study of the same sweep would be: a note says so (`dense_only`).
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.core.runs import ACTIVE_COLUMN, EXPERTS_COLUMN, with_moe_columns
from analysis.core.table import resolve
from analysis.laws.moe import fit_moe
from models.base.errors import AnalysisError
from models.base.jsonio import write_figure_atomic

FIGURE = "moe_loss_vs_experts.png"
TITLE = "Mixture of experts"


def experts_of(table: pd.DataFrame) -> pd.Series | None:
    """Each run's expert count (a dense run: 1), None when the table has no expert column."""
    t = with_moe_columns(table)
    if EXPERTS_COLUMN not in t.columns:
        return None
    return pd.to_numeric(t[EXPERTS_COLUMN], errors="coerce").fillna(1.0)


def is_routed(table: pd.DataFrame) -> bool:
    """Whether the runs hold two or more expert counts (a sweep over E)."""
    e = experts_of(table)
    return e is not None and e.nunique() >= 2


def dense_only(table: pd.DataFrame) -> pd.DataFrame:
    """The dense runs (experts = 1) of a routed sweep; any other table unchanged."""
    if not is_routed(table):
        return table
    return table[(experts_of(table) == 1).to_numpy()].reset_index(drop=True)


@dataclass(frozen=True)
class Cell:
    """One (budget, shape, experts) run's loss and its ratio to the dense run of its shape and budget."""

    budget: float
    shape: str
    n_active: float
    tokens: float
    experts: int
    loss: float
    vs_dense: float  # loss / the dense run's loss (NaN without one)


def _cells(done: pd.DataFrame) -> list[Cell]:
    t = with_moe_columns(done).reset_index(drop=True)
    pts = resolve(t, ("D", "C"))  # the loss and tokens columns by the fits' own spellings, checked
    shape = (
        t["model.n_layers"].astype(str) + "x" + t["model.d_model"].astype(str)
        if "model.d_model" in t
        else t[ACTIVE_COLUMN].map(lambda n: f"N={n:.3g}")
    )
    rows = pd.DataFrame(
        {
            "budget": pd.to_numeric(t["budget"], errors="coerce") if "budget" in t else pts.inputs["C"],
            "shape": shape,
            "n_active": pd.to_numeric(t[ACTIVE_COLUMN], errors="coerce"),
            "tokens": pts.inputs["D"],
            "experts": experts_of(t).astype(int),
            "loss": pts.y,
        }
    )
    out = []
    for (c, s), g in rows.groupby(["budget", "shape"], sort=True, dropna=False):
        dense = g.loc[g.experts == 1, "loss"]
        ref = float(dense.min()) if not dense.empty else math.nan
        for r in g.sort_values("experts").itertuples():
            out.append(
                Cell(
                    float(c),
                    str(s),
                    float(r.n_active),
                    float(r.tokens),
                    int(r.experts),
                    float(r.loss),
                    r.loss / ref,
                )
            )
    return out


def _figure(cells: list[Cell], fit) -> Figure:
    """One panel per budget: each shape's loss against experts, the fitted law dashed through it."""
    budgets = sorted({c.budget for c in cells})
    fig = Figure(figsize=(min(4.2 * len(budgets), 13), 4.2))
    axes = np.atleast_1d(fig.subplots(1, len(budgets), sharey=True))
    E_grid = np.geomspace(1, max(c.experts for c in cells), 40)
    shapes = sorted({(c.n_active, c.shape) for c in cells})
    colors = {s: f"C{i % 10}" for i, s in enumerate(shapes)}
    for ax, budget in zip(axes, budgets):
        for key in shapes:
            g = [c for c in cells if c.budget == budget and (c.n_active, c.shape) == key]
            if not g:
                continue
            label = f"{key[1]} ({key[0]:,.0f} active)"
            ax.plot(
                [c.experts for c in g],
                [c.loss for c in g],
                "o-",
                ms=4,
                lw=0.8,
                color=colors[key],
                label=label,
            )
            if fit is not None:
                D = float(np.exp(np.mean([np.log(c.tokens) for c in g])))
                at = {"N": g[0].n_active, "experts": E_grid, "D": D}
                inputs = {
                    k: np.broadcast_to(np.asarray(at[k], float), E_grid.shape) for k in fit.law_obj.inputs
                }
                ax.plot(E_grid, fit.law_obj.predict(fit.vector, inputs), "--", lw=1, color=colors[key])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("experts E (1 = dense)")
        ax.set_title(f"C = {budget:.0e} FLOPs", fontsize=10)
    axes[0].set_ylabel("final eval loss")
    axes[-1].legend(fontsize=7)
    fig.suptitle(
        "loss against experts at one active size per shape" + (" (dashed: the fitted law)" if fit else ""),
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _markdown(cells: list[Cell], fit, err: str | None, figure: str | None) -> str:
    L = [f"## {TITLE}", ""]
    if fit is not None:
        params = ", ".join(f"{k} = {v:.4g}" for k, v in fit.params.items())
        roles = "N = active parameters, experts" + (", D" if "D" in fit.law_obj.inputs else "")
        L += [f"Law `{fit.law}` (`fit --law moe`: {roles}; {fit.n_points} runs): {params}.", ""]
        if fit.law_selection is not None:
            L += [f"Chosen: {fit.law_selection.message}", ""]
    else:
        L += [f"No MoE law: {err}", ""]
    experts = sorted({c.experts for c in cells})
    header = ["budget C", "shape", "N active"] + [f"E={e}" for e in experts]
    L += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    seen: dict[tuple[float, str], dict[int, Cell]] = {}
    for c in cells:
        seen.setdefault((c.budget, c.shape), {})[c.experts] = c
    for (budget, shape), by_e in seen.items():
        n = next(iter(by_e.values())).n_active
        vals = []
        for e in experts:
            c = by_e.get(e)
            if c is None:
                vals.append("—")
            elif e == 1 or not math.isfinite(c.vs_dense):
                vals.append(f"{c.loss:.4f}")
            else:
                vals.append(f"{c.loss:.4f} ({c.vs_dense - 1:+.1%})")
        L.append(f"| {budget:.0e} | {shape} | {n:,.0f} | " + " | ".join(vals) + " |")
    L += ["", "In brackets: the loss against the dense run of the same shape and budget."]
    if figure:
        L += ["", f"![loss against experts]({figure})"]
    return "\n".join(L)


def moe_section(
    done: pd.DataFrame, out: pathlib.Path, bootstrap: int, seed: int, warn: list[str]
) -> dict | None:
    """The section ({markdown, moe: {law, cells}, figure}) for a routed sweep's completed runs; None
    when the runs hold one expert count."""
    if not is_routed(done):
        return None
    table = with_moe_columns(done)
    fit, err = None, None
    try:
        fit = fit_moe(table, None, bootstrap=bootstrap, seed=seed)
    except AnalysisError as e:
        err = str(e)
        warn.append(f"no MoE law: {e}")
    cells = _cells(table)
    rel = f"figures/{FIGURE}"
    (out / "figures").mkdir(parents=True, exist_ok=True)
    write_figure_atomic(out / rel, _figure(cells, fit), dpi=120)
    return {
        "title": TITLE,
        "markdown": _markdown(cells, fit, err, rel),
        "moe": {
            "law": None
            if fit is None
            else {
                "law": fit.law,
                "params": dict(fit.params),
                "selection": None if fit.law_selection is None else fit.law_selection.to_dict(),
            },
            "cells": [c.__dict__ for c in cells],
        },
        "figure": rel,
    }
