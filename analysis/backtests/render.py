"""A backtest as a text table, as Markdown and as a figure (predicted against actual per method)."""

from __future__ import annotations

import pathlib

from analysis.backtests.result import Backtest, Metric

_UNIT = {
    Metric.REL: ("mean |rel err|", "%"),
    Metric.DLOG10: ("mean |dlog10|", " dex"),
    Metric.POINTS: ("MAE", " pts"),
    Metric.LOG2: ("mean |log2 err|", ""),
}


def _fmt(v, metric: Metric, rel: bool = True) -> str:
    if v is None:
        return "—"
    if metric == Metric.REL and rel:
        return f"{100 * v:.2f}%"
    return f"{v:.3f}"


def table_rows(bt: Backtest) -> list[list[str]]:
    """Header and one row per method: method, role, n, error, (lr: loss penalty), coverage, width."""
    key = bt.error_key()
    extra = bt.metric == Metric.DLOG10 or any("mean_loss_penalty" in r for r in bt.rows())
    head = (
        ["method", "role", "n", _UNIT[bt.metric][0]]
        + (["loss penalty" if bt.metric == Metric.DLOG10 else "regret"] if extra else [])
        + ["90% cov", "width"]
        + (["named winners right"] if bt.metric == Metric.LOG2 else [])
    )
    rows = [head]
    for r in bt.rows():
        role = "+".join(k for k in ("baseline", "default") if r[k]) or ""
        cov = "—" if r["coverage_90"] is None else f"{100 * r['coverage_90']:.0f}%"
        row = [r["method"], role, str(r["n"]), _fmt(r[key], bt.metric)]
        if extra:
            row.append("—" if r.get("mean_loss_penalty") is None else f"{100 * r['mean_loss_penalty']:.3f}%")
        row += [cov, _fmt(r["mean_width"], bt.metric)]
        if bt.metric == Metric.LOG2:  # compare: where the interval excludes 1, is the named side right?
            row.append(f"{r['winners_right']}/{r['winners_named']}")
        rows.append(row)
    return rows


def text(bt: Backtest) -> str:
    rows = table_rows(bt)
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        f"backtest {bt.protocol}: held out {bt.cut.get('what', '')} "
        f"({bt.cut.get('n_held_out', '?')} held out, {bt.cut.get('n_fit', '?')} fitted)"
    ]
    lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    notes = [f"  {m.method}: {m.note}" for m in bt.methods if m.note]
    return "\n".join(lines + notes + [f"  warning: {x}" for x in bt.warnings])


def markdown(bt: Backtest) -> str:
    rows = table_rows(bt)
    out = [f"## Backtest `{bt.protocol}`: held out {bt.cut.get('what', '')}", ""]
    out.append("| " + " | ".join(rows[0]) + " |")
    out.append("|" + "---|" * len(rows[0]))
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    notes = [f"- `{m.method}`: {m.note}" for m in bt.methods if m.note]
    return "\n".join(out + ([""] + notes if notes else [])) + "\n"


def figure(bt: Backtest, path: str | pathlib.Path) -> None:
    """Predicted against actual, one marker per method (error bars: the 90% intervals)."""
    # deferred: matplotlib only when a figure is drawn (the backtest's tables need none)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # deferred with matplotlib above

    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    lo_all, hi_all = [], []
    for m in bt.methods:
        if not m.points:
            continue
        a = [p.actual for p in m.points]
        f = [p.predicted for p in m.points]
        err = [
            [max(p.predicted - p.lo, 0) if p.lo == p.lo else 0 for p in m.points],
            [max(p.hi - p.predicted, 0) if p.hi == p.hi else 0 for p in m.points],
        ]
        label = m.method + (" (baseline)" if m.baseline else "") + (" (default)" if m.default else "")
        ax.errorbar(a, f, yerr=err, fmt="o", ms=4, capsize=2, alpha=0.8, label=label)
        lo_all += a + f
        hi_all += a + f
    if lo_all:
        lo, hi = min(lo_all), max(hi_all)
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    if bt.metric in (Metric.DLOG10, Metric.LOG2):
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("actual")
    ax.set_ylabel("predicted")
    ax.set_title(f"backtest {bt.protocol}: {bt.cut.get('what', '')}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
