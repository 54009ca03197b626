"""A comparison as text (the command's table), as Markdown (`--markdown`, the report's "Recipes"
section) and as a figure: both frontiers with their measured points, and m(C) with its 90% band."""

from __future__ import annotations

import math

import numpy as np

from analysis.compare import frontiers as fr
from analysis.compare.result import BudgetMultiplier, Comparison, PairComparison


def _m(v: float, capped: bool = False) -> str:
    if not math.isfinite(v):
        return "—"
    s = f"{v:.3g}" if 0.01 <= v < 1e4 else f"{v:.2e}"
    return (">" if capped else "") + s


def _row(b: BudgetMultiplier) -> list[str]:
    winner = b.winner or "none (interval holds 1)"
    return [
        f"{b.C:.3g}",
        _m(b.multiplier, b.capped),
        f"[{_m(b.lo)}, {_m(b.hi, b.capped)}]",
        f"{b.p_other_better:.2f}",
        winner,
    ]


HEAD = ["budget C", "multiplier", "90% interval", "P(other better)", "winner"]


def _trend_line(p: PairComparison) -> str:
    t = p.trend
    return (
        f"trend: d log m / d log C = {t.slope:+.3f} [{t.lo:+.3f}, {t.hi:+.3f}] between C = "
        f"{t.between[0]:.3g} and {t.between[1]:.3g} (> 0: {p.other}'s advantage grows with scale)"
    )


def _crossover_line(p: PairComparison) -> str:
    c = p.crossover
    rng = f"C {c.start:.3g} to {c.end:.3g} (100x the top budget {p.top_budget:.3g})"
    share = "" if math.isnan(c.share) else f"; {c.share:.0%} of the bootstrap resamples cross"
    if c.C is None:
        return f"crossover: none in {rng}{share}"
    iv = "" if c.lo is None else f" [{c.lo:.3g}, {c.hi:.3g}]"
    return (
        f"crossover: C = {c.C:.3g}{iv}: {c.winner_below} wins below, {c.winner_above} above (in {rng}{share})"
    )


def text(comp: Comparison) -> str:
    lines = [
        f"compare: REF {comp.ref} against {', '.join(p.other for p in comp.others)} "
        f"(method {comp.method}; multiplier = compute REF needs to match OTHER's best loss, / C; "
        "> 1: OTHER is better; 90% intervals)"
    ]
    for p in comp.others:
        rows = [HEAD] + [_row(b) for b in p.budgets]
        w = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
        lines.append(f"{p.other} vs {p.ref}:")
        lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        lines += ["  " + b.verdict for b in p.budgets if b.verdict]
        lines += ["  " + _trend_line(p), "  " + _crossover_line(p)]
        if p.note:
            lines.append(f"note: {p.other} vs {p.ref}: {p.note}")
    return "\n".join(lines + [f"warning: {w}" for w in comp.warnings])


def markdown(comp: Comparison, level: int = 2, figure: str | None = None) -> str:
    h = "#" * level
    out = [
        f"{h} Recipes: {', '.join(p.other for p in comp.others)} against {comp.ref}",
        "",
        f"Effective compute multiplier m(C): the compute {comp.ref} (REF) needs to reach the other recipe's "
        "expected best loss at budget C, divided by C (> 1: the other recipe is better). Method "
        f"`{comp.method}`; 90% intervals from a joint bootstrap over both ladders' runs plus the "
        "forward-chaining error of the multiplier on the ladders (`python -m analysis compare`). "
        "A winner is named only where the 90% interval excludes 1.",
        "",
    ]
    for p in comp.others:
        out += [f"{h}# {p.other} against {p.ref}", ""]
        out.append("| " + " | ".join(HEAD) + " |")
        out.append("|" + "---|" * len(HEAD))
        out += ["| " + " | ".join(_row(b)) + " |" for b in p.budgets]
        out += [""] + ["- " + b.verdict for b in p.budgets if b.verdict]
        out += ["- " + _trend_line(p), "- " + _crossover_line(p)]
        if p.note:
            out.append(f"- note: {p.note}")
        out.append("")
    if figure:
        out += [f"![Frontiers and the multiplier m(C) with its 90% band]({figure})", ""]
    out += [f"- warning: {w}" for w in comp.warnings]
    return "\n".join(out).rstrip() + "\n"


def _frontiers(ax, comp: Comparison) -> dict[str, str]:
    """Every recipe's measured frontier (best run per budget) and fitted L*(C) out to 100x the top
    budget; returns each recipe's colour."""
    colors: dict[str, str] = {}
    for p in comp.others:
        C = p.curve[0] if p.curve else np.geomspace(p.top_budget / 1e3, p.top_budget * 100, 50)
        for name, rec in p.frontiers.items():
            if name in colors:
                continue
            colors[name] = ax.plot([], [])[0].get_color()
            if rec is not None and rec.get("points"):
                pts = rec["points"]
                ax.plot(
                    pts["C"], pts["loss"], "o", ms=4, color=colors[name], label=f"{name}: best run per budget"
                )
            if rec is not None and rec.get("G") is not None:
                L = fr.frontier_loss(np.array([rec["E"], math.log(rec["G"]), rec["gamma"]]), C)
                ax.plot(C, L, "-", lw=1.2, color=colors[name], label=f"{name}: fitted L*(C)")
    ax.set_yscale("log")
    ax.set_ylabel("best loss at C")
    ax.set_title("frontiers")
    return colors


def multiplier_panel(ax, comp: Comparison, colors: dict[str, str] | None = None) -> None:
    """m(C) of each OTHER with its 90% band, the requested budgets marked, the top budget dashed."""
    for p in comp.others:
        if p.curve:
            Cg, m, lo, hi = p.curve
            line = ax.plot(Cg, m, lw=1.5, label=f"{p.other} vs {p.ref}", color=(colors or {}).get(p.other))[0]
            ax.fill_between(Cg, lo, hi, alpha=0.2, color=line.get_color(), label="90% band")
            ax.plot(
                [b.C for b in p.budgets], [b.multiplier for b in p.budgets], "s", color=line.get_color(), ms=5
            )
            if p.crossover.C is not None:
                ax.axvline(p.crossover.C, ls=":", color=line.get_color(), lw=1)
        ax.axvline(p.top_budget, color="0.6", lw=0.8, ls="--")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel(f"multiplier m(C) (> 1: better than {comp.ref})")
    ax.set_title(f"compute multiplier ({comp.method}); dashed: top budget")
    ax.legend(fontsize=7)


def figure(comp: Comparison):
    """Left: every recipe's frontier and fitted L*(C); right: m(C) of each OTHER with its 90% band."""
    from matplotlib.figure import Figure  # matplotlib only when a figure is drawn (start-up time)

    fig = Figure(figsize=(11, 4.4))
    ax1, ax2 = fig.subplots(1, 2)
    multiplier_panel(ax2, comp, _frontiers(ax1, comp))
    ax1.set_xscale("log")
    ax1.set_xlabel("training compute C (FLOPs)")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    return fig
