"""The HTML report's interactive figures: Plotly specs (plain dicts) built from the same numbers as
the PNGs of analysis/report/figures.py, and the page's script that draws them.

report.md keeps the PNGs; report.html shows these instead, for the figures whose points are runs:
hovering a point names the run with its N, D, C and loss, and every figure zooms (drag a box;
double-click resets). plotly.js is embedded once, after the report's text, so the page stays one
self-contained file (no CDN) and its first screen is text.

Each function returns {"data": [...], "layout": {...}} (Plotly's figure JSON) or None where the
matching PNG is None. Numbers are formatted into the hover text here, so the browser shows what the
report's tables show.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np
import pandas as pd
from plotly.offline import get_plotlyjs

from analysis.report import figures as figs

N_COL, C_COL, LOSS_COL = figs.N_COL, figs.C_COL, figs.LOSS_COL
D_COL = "tokens"
HEIGHT = 470
RUN_HOVER = (
    "<b>%{customdata[0]}</b><br>N = %{customdata[1]} parameters<br>D = %{customdata[2]} tokens"
    "<br>C = %{customdata[3]} FLOPs<br>loss = %{customdata[4]}"
)
SI = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def count(v: Any) -> str:
    """A parameter or token count, 3 significant digits and an SI suffix: 161k, 11.3M."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    for scale, suffix in SI:
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def flops(v: Any) -> str:
    """A FLOP count, 3 significant digits: 1.3e22."""
    try:
        return f"{float(v):.3g}".replace("e+0", "e").replace("e+", "e")
    except (TypeError, ValueError):
        return "–"


def _run_names(df: pd.DataFrame) -> list[str]:
    return df["run"].astype(str).tolist() if "run" in df.columns else [f"row {i + 1}" for i in range(len(df))]


def run_customdata(df: pd.DataFrame, *extra: Sequence[str]) -> list[list[str]]:
    """Per run: [name, N, D, C, loss, *extra] as text (RUN_HOVER reads the first five)."""
    cols = [
        _run_names(df),
        [count(v) for v in df[N_COL]],
        [count(v) for v in df[D_COL]] if D_COL in df.columns else ["–"] * len(df),
        [flops(v) for v in df[C_COL]] if C_COL in df.columns else ["–"] * len(df),
        [f"{float(v):.4f}" if pd.notna(v) else "–" for v in df[LOSS_COL]],
        *extra,
    ]
    return [list(row) for row in zip(*cols)]


def _axis(title: str, log: bool = True, **kw) -> dict:
    return {"title": {"text": title}, "type": "log" if log else "linear", "showgrid": True, **kw}


def _layout(title: str, x: dict, y: dict, **kw) -> dict:
    return {
        "title": {"text": title, "font": {"size": 15}},
        "xaxis": x,
        "yaxis": y,
        "height": HEIGHT,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 55},
        "hovermode": "closest",
        "legend": {"font": {"size": 10}},
        "plot_bgcolor": "white",
        **kw,
    }


def _band(x, lo, hi, name: str, color: str, **kw) -> list[dict]:
    """A filled band between lo and hi (two traces: the second fills to the first)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return []
    common = {"x": x, "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", **kw}
    return [
        {**common, "y": lo, "showlegend": False, "name": name},
        {**common, "y": hi, "fill": "tonexty", "fillcolor": color, "name": name},
    ]


def loss_vs_compute(done: pd.DataFrame, frontier: dict | None) -> dict:
    """Every run's loss against its compute (colour: log10 N) with the fitted frontier and its bands."""
    data: list[dict] = []
    if frontier:
        C = frontier["C"]
        data += _band(
            C,
            frontier.get("loss_pi_lo", [np.nan]),
            frontier.get("loss_pi_hi", [np.nan]),
            "90% prediction interval (new run)",
            "rgba(31,119,180,0.12)",
        )
        data += _band(
            C,
            frontier["loss_lo"],
            frontier["loss_hi"],
            "95% bootstrap CI (mean loss)",
            "rgba(31,119,180,0.3)",
        )
        data.append(
            {
                "x": C,
                "y": frontier["loss"],
                "mode": "lines",
                "line": {"color": "#1f77b4", "width": 2.5},
                "name": f"expected best loss ({frontier.get('method', 'law_minimum')})",
                "hovertemplate": "C = %{x:.3g} FLOPs<br>expected best loss %{y:.4f}<extra></extra>",
            }
        )
    data.append(
        {
            "x": done[C_COL],
            "y": done[LOSS_COL],
            "mode": "markers",
            "name": "runs",
            "marker": {
                "color": np.log10(done[N_COL].to_numpy(float)),
                "colorscale": "Plasma",
                "size": 8,
                "line": {"width": 0.5, "color": "black"},
                "colorbar": {"title": {"text": "log10 N"}},
            },
            "customdata": run_customdata(done),
            "hovertemplate": RUN_HOVER + "<extra></extra>",
        }
    )
    return {
        "data": data,
        "layout": _layout(
            "Loss vs compute with the fitted frontier (Approach 3)",
            _axis("training compute C (FLOPs)"),
            _axis("final eval loss (nats/token)"),
        ),
    }


def _a2_minimum(m: dict, col: str, label: str) -> dict:
    """Approach 2's minimum of one budget, with its 95% CI on N."""
    lo, hi = m["N_ci"]
    err = None
    if np.isfinite(lo) and np.isfinite(hi):
        err = {
            "type": "data",
            "symmetric": False,
            "array": [max(hi - m["N"], 0)],
            "arrayminus": [max(m["N"] - lo, 0)],
            "color": col,
        }
    return {
        "x": [m["N"]],
        "y": [m["loss"]],
        "mode": "markers",
        "legendgroup": label,
        "showlegend": False,
        "marker": {
            "symbol": "star",
            "size": 15,
            "color": col,
            "line": {"width": 0.8, "color": "black"},
        },
        "error_x": err,
        "name": f"Approach 2 minimum, {label}",
        "hovertemplate": f"Approach 2 minimum at {label}<br>N = {count(m['N'])} "
        f"(95% CI {count(lo)}–{count(hi)})<extra></extra>",
    }


def isoflop(profiles: list[dict], published=()) -> dict:
    """analysis.report.figures.isoflop_profiles drawn: runs per budget, the law's profile, the
    parabola, Approach 2's minimum and each law's compute-optimal N on the profile."""
    data: list[dict] = []
    symbols = {k: v[1] for k, v in figs.OPTIMUM_MARKERS.items()}
    optima: dict[str, list] = {}
    for p in profiles:
        label, col, g = f"C = {flops(p['budget'])}", p["color"], p["runs"]
        for key, name, line in (
            ("profile", "law profile", {"color": col, "width": 1.6}),
            ("parabola", "parabola", {"color": col, "width": 1, "dash": "dash"}),
        ):
            if p[key] is not None:
                x, y = p[key][0], p[key][1]
                data.append(
                    {"x": x, "y": y, "mode": "lines", "line": line, "legendgroup": label}
                    | {"showlegend": False, "name": f"{name}, {label}", "hoverinfo": "skip"}
                )
        data.append(
            {
                "x": g[N_COL],
                "y": g[LOSS_COL],
                "mode": "markers",
                "name": label,
                "legendgroup": label,
                "marker": {"color": col, "size": 9, "line": {"width": 0.5, "color": "black"}},
                "customdata": run_customdata(g),
                "hovertemplate": RUN_HOVER + "<extra>" + label + "</extra>",
            }
        )
        if p["a2"] is not None:
            data.append(_a2_minimum(p["a2"], col, label))
        for o in p["optima"]:
            optima.setdefault(o["key"], []).append((o, p, label))
    names = {"fit": "N* of this fit (Approach 3)"} | {law.key: f"N* of {law.name}" for law in published}
    for key, rows in optima.items():
        data.append(
            {
                "x": [o["N"] for o, _, _ in rows],
                "y": [o["loss"] for o, _, _ in rows],
                "mode": "markers+lines",
                "line": {"color": "gray", "width": 0.8, "dash": "dot"},
                "name": names.get(key, key),
                "marker": {
                    "symbol": symbols.get(key, "square"),
                    "size": 10,
                    "color": [p["color"] for _, p, _ in rows] if key != "fit" else "white",
                    "line": {"width": 1.2, "color": "black"},
                },
                "customdata": [
                    [label, count(o["N"]), count(o["D"]), f"{o['D'] / o['N']:.3g}"] for o, _, label in rows
                ],
                "hovertemplate": f"<b>{names.get(key, key)}</b><br>"
                "%{customdata[0]}: N = %{customdata[1]}, "
                "D = %{customdata[2]} (%{customdata[3]} tokens/param)<br>this fit's loss there %{y:.4f}"
                "<extra></extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            "IsoFLOP profiles: loss vs model size at fixed compute, and where each law puts N*",
            _axis("parameters N"),
            _axis("final eval loss (nats/token)", log=False),
        ),
    }


def _allocation_fit(frontier: dict, key: str, what: str, show: bool, ax: dict) -> list[dict]:
    """This fit's N* or D* (Approach 3) with its 95% CI band."""
    data: list[dict] = []
    data += [
        dict(t, legendgroup="band", showlegend=show and t.get("fill") is not None, **ax)
        for t in _band(
            frontier["C"],
            frontier[key + "_lo"],
            frontier[key + "_hi"],
            "Approach 3 95% CI",
            "rgba(31,119,180,0.2)",
        )
    ]
    data.append(
        {
            "x": frontier["C"],
            "y": frontier[key],
            "mode": "lines",
            "line": {"color": "#1f77b4", "width": 2.5},
            "name": "this fit (Approach 3)",
            "legendgroup": "fit",
            "showlegend": show,
            **ax,
            "hovertemplate": f"this fit: C = %{{x:.3g}}, {what} = %{{y:.3s}}<extra></extra>",
        }
    )
    return data


def _allocation_a2(a2: dict, grid, key: str, what: str, show: bool, ax: dict) -> list[dict]:
    """Approach 2's minima (95% CI) and its power law."""
    data: list[dict] = []
    rows = [r for r in a2["budgets"] if np.isfinite(r["N_opt"])]
    if not rows:
        return data
    k = a2["flops_per_param_token"]
    C2 = np.array([r["C"] for r in rows])
    N = np.array([r["N_opt"] for r in rows])
    ci = np.array([r["N_opt_ci"] for r in rows], dtype=float)
    y, lo, hi = (
        (N, ci[:, 0], ci[:, 1])
        if key == "N_opt"
        else (C2 / (k * N), C2 / (k * ci[:, 1]), C2 / (k * ci[:, 0]))
    )
    up, down = np.clip(hi - y, 0, None), np.clip(y - lo, 0, None)
    data.append(
        {
            "x": C2,
            "y": y,
            "mode": "markers",
            "marker": {"symbol": "square", "color": "#d62728", "size": 8},
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": np.where(np.isfinite(up), up, 0),
                "arrayminus": np.where(np.isfinite(down), down, 0),
            },
            "name": "Approach 2 minima (95% CI)",
            "legendgroup": "a2",
            "showlegend": show,
            **ax,
            "hovertemplate": f"Approach 2 minimum: C = %{{x:.3g}}, {what} = %{{y:.3s}}<extra></extra>",
        }
    )
    if np.isfinite(a2.get("a", np.nan)):
        Ng = a2["G"] * grid ** a2["a"]
        data.append(
            {
                "x": grid,
                "y": Ng if key == "N_opt" else grid / (k * Ng),
                "mode": "lines",
                "line": {"color": "#d62728", "dash": "dash"},
                "name": f"Approach 2 power law (a={a2['a']:.2f})",
                "legendgroup": "a2law",
                "showlegend": show,
                **ax,
                "hoverinfo": "skip",
            }
        )
    return data


def _allocation_published(published, grid, key: str, what: str, show: bool, ax: dict) -> list[dict]:
    """The published laws' N* or D*."""
    data: list[dict] = []
    for law in published:
        col, _ = figs.PUBLISHED_STYLES.get(law.key, ("0.4", "-."))
        at = law.at(grid)
        data.append(
            {
                "x": grid,
                "y": [r[key] for r in at],
                "mode": "lines",
                "name": law.name,
                "legendgroup": law.key,
                "showlegend": show,
                "line": {"color": _mpl_hex(col), "dash": "dashdot", "width": 1.5},
                **ax,
                "customdata": [f"{r['tokens_per_param']:.3g}" for r in at],
                "hovertemplate": f"{law.name}: C = %{{x:.3g}}, {what} = %{{y:.3s}} "
                "(%{customdata} tokens/param)<extra></extra>",
            }
        )
    return data


def allocation(a2: dict | None, frontier: dict | None, requested: list[float], published=()) -> dict | None:
    """N*(C) and D*(C) side by side: the law (95% CI band), Approach 2's minima and power law, and
    the published laws; dotted verticals at the requested budgets."""
    if a2 is None and frontier is None:
        return None
    grid = figs.allocation_grid(a2, frontier, requested)
    data: list[dict] = []
    for i, (key, label) in enumerate((("N_opt", "optimal parameters N*"), ("D_opt", "optimal tokens D*"))):
        ax = {} if i == 0 else {"xaxis": "x2", "yaxis": "y2"}
        show = i == 0
        what = "N*" if key == "N_opt" else "D*"
        if frontier is not None:
            data += _allocation_fit(frontier, key, what, show, ax)
        if a2 is not None:
            data += _allocation_a2(a2, grid, key, what, show, ax)
        data += _allocation_published(published, grid, key, what, show, ax)
    shapes = [
        {
            "type": "line",
            "xref": xr,
            "yref": f"{yr} domain",
            "x0": c,
            "x1": c,
            "y0": 0,
            "y1": 1,
            "line": {"color": "gray", "dash": "dot", "width": 1},
        }
        for c in requested
        for xr, yr in (("x", "y"), ("x2", "y2"))
    ]
    layout = _layout(
        "Compute-optimal allocation against published laws (dotted: requested budgets)",
        _axis("training compute C (FLOPs)", domain=[0, 0.45]),
        _axis("optimal parameters N*"),
        xaxis2=_axis("training compute C (FLOPs)", domain=[0.55, 1]),
        yaxis2=_axis("optimal tokens D*", anchor="x2"),
        shapes=shapes,
    )
    layout["yaxis"]["anchor"] = "x"
    layout["xaxis2"]["anchor"] = "y2"
    return {"data": data, "layout": layout}


def _mpl_hex(color: str) -> str:
    return figs.matplotlib.colors.to_hex(color)


def residuals(done: pd.DataFrame, pred: np.ndarray) -> dict:
    """Relative residuals of the law fit against C and N, one colour per budget."""
    rel = 100 * (pred - done[LOSS_COL].to_numpy(float)) / done[LOSS_COL].to_numpy(float)
    colors = figs._budget_colors(done["budget"])
    data = []
    for b in sorted(colors):
        sel = (done["budget"] == b).to_numpy()
        g, r = done[sel], rel[sel]
        custom = run_customdata(g, [f"{v:+.2f}%" for v in r])
        for i, col in enumerate((C_COL, N_COL)):
            data.append(
                {
                    "x": g[col],
                    "y": r,
                    "mode": "markers",
                    "name": f"C = {flops(b)}",
                    "legendgroup": str(b),
                    "showlegend": i == 0,
                    "marker": {
                        "color": figs.matplotlib.colors.to_hex(colors[b]),
                        "size": 8,
                        "line": {"width": 0.5, "color": "black"},
                    },
                    "customdata": custom,
                    **({} if i == 0 else {"xaxis": "x2", "yaxis": "y2"}),
                    "hovertemplate": RUN_HOVER
                    + "<br>(predicted − actual) / actual %{customdata[5]}<extra></extra>",
                }
            )
    layout = _layout(
        "Residuals of the law fit (Approach 3, all runs)",
        _axis("training compute C (FLOPs)", domain=[0, 0.47]),
        _axis("(predicted − actual) / actual [%]", log=False, zeroline=True, zerolinecolor="black"),
        xaxis2=_axis("parameters N", domain=[0.53, 1]),
        yaxis2=_axis("", log=False, anchor="x2", matches="y", zeroline=True, zerolinecolor="black"),
    )
    layout["xaxis2"]["anchor"] = "y2"
    return {"data": data, "layout": layout}


def holdout(part: pd.DataFrame, pred_part: np.ndarray, hold: dict, held: pd.DataFrame) -> dict:
    """Predicted against actual loss: the runs the law was fitted on and the held-out budget's runs
    (with their 90% prediction intervals); `held` names the held-out runs."""
    pts = hold["points"]
    names = []
    flop = []
    for p in pts:  # the held-out runs by their N and D
        m = held[np.isclose(held[N_COL], p["N"], rtol=1e-9) & np.isclose(held[D_COL], p["D"], rtol=1e-9)]
        names.append(str(m["run"].iloc[0]) if len(m) and "run" in m.columns else f"N={count(p['N'])}")
        flop.append(p["C"] if "C" in p else (m[C_COL].iloc[0] if len(m) else np.nan))
    act = np.array([p["actual"] for p in pts])
    pr = np.array([p["predicted"] for p in pts])
    lo = np.array([(p.get("interval") or [np.nan, np.nan])[0] for p in pts], dtype=float)
    hi = np.array([(p.get("interval") or [np.nan, np.nan])[1] for p in pts], dtype=float)
    custom_h = [
        [
            n,
            count(p["N"]),
            count(p["D"]),
            flops(c),
            f"{p['actual']:.4f}",
            f"{p['predicted']:.4f}",
            f"{100 * p['rel_error']:+.2f}%",
            "–" if not np.isfinite(a) else f"[{a:.4f}, {b:.4f}]",
        ]
        for n, p, c, a, b in zip(names, pts, flop, lo, hi)
    ]
    act_f = part[LOSS_COL].to_numpy(float)
    low = float(min(act_f.min(), act.min(), np.nanmin(pred_part), pr.min())) * 0.98
    high = float(max(act_f.max(), act.max(), np.nanmax(pred_part), pr.max())) * 1.02
    data = [
        {
            "x": [low, high],
            "y": [low, high],
            "mode": "lines",
            "line": {"color": "black", "width": 1},
            "name": "predicted = actual",
            "hoverinfo": "skip",
        },
        {
            "x": part[LOSS_COL],
            "y": pred_part,
            "mode": "markers",
            "name": "fitted runs",
            "marker": {"color": "#1f77b4", "size": 7, "line": {"width": 0.5, "color": "black"}},
            "customdata": run_customdata(part, [f"{v:.4f}" for v in pred_part]),
            "hovertemplate": RUN_HOVER + "<br>predicted %{customdata[5]}<extra>fitted</extra>",
        },
        {
            "x": act,
            "y": pr,
            "mode": "markers",
            "name": f"held out (C > {flops(hold['threshold'])})",
            "marker": {
                "symbol": "diamond",
                "color": "#d62728",
                "size": 11,
                "line": {"width": 0.5, "color": "black"},
            },
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": np.where(np.isfinite(hi), hi - pr, 0),
                "arrayminus": np.where(np.isfinite(lo), pr - lo, 0),
                "color": "#d62728",
            },
            "customdata": custom_h,
            "hovertemplate": RUN_HOVER + "<br>predicted %{customdata[5]} (%{customdata[6]})"
            "<br>90% prediction interval %{customdata[7]}<extra>held out</extra>",
        },
    ]
    return {
        "data": data,
        "layout": _layout(
            "Held-out check: fit the smaller budgets, predict the largest (bars: 90% prediction intervals)",
            _axis("actual final eval loss", log=False, range=[low, high]),
            _axis("predicted final eval loss", log=False, range=[low, high]),
        ),
    }


def throughput(runs: pd.DataFrame, mfu_col: str, mfu_convention: str) -> dict | None:
    """Tokens/s and MFU (`mfu_col`, in `mfu_convention`) against N, one trace per run status."""
    r = runs.dropna(subset=["tokens_per_s"]) if "tokens_per_s" in runs.columns else runs.iloc[0:0]
    if r.empty:
        return None
    data = []
    for k, (status, symbol) in enumerate(
        (("completed", "circle"), ("diverged", "x"), ("failed", "triangle-down"))
    ):
        g = r[r["status"].astype(str) == status]
        if g.empty:
            continue
        mfu = 100 * pd.to_numeric(g[mfu_col], errors="coerce") if mfu_col in g.columns else g[N_COL] * np.nan
        custom = run_customdata(
            g,
            [f"{v:,.0f}" for v in g["tokens_per_s"]],
            ["–" if not np.isfinite(v) else f"{v:.1f}%" for v in mfu],
        )
        hover = RUN_HOVER + "<br>%{customdata[5]} tokens/s, MFU %{customdata[6]}<extra>" + status + "</extra>"
        color = f"C{k}"
        for i, y in enumerate((g["tokens_per_s"], mfu)):
            data.append(
                {
                    "x": g[N_COL],
                    "y": y,
                    "mode": "markers",
                    "name": status,
                    "legendgroup": status,
                    "showlegend": i == 0,
                    "marker": {"symbol": symbol, "size": 8, "color": _mpl_hex(color)},
                    "customdata": custom,
                    "hovertemplate": hover,
                    **({} if i == 0 else {"xaxis": "x2", "yaxis": "y2"}),
                }
            )
    layout = _layout(
        "Throughput and model FLOPs utilisation per run",
        _axis("parameters N", domain=[0, 0.45]),
        _axis("training throughput (tokens/s)"),
        xaxis2=_axis("parameters N", domain=[0.55, 1]),
        yaxis2=_axis(f"MFU (% of peak), {mfu_convention}", log=False, anchor="x2"),
    )
    layout["xaxis2"]["anchor"] = "y2"
    return {"data": data, "layout": layout}


def _plain(x: Any) -> Any:
    """`x` as JSON: numpy arrays and scalars as lists and numbers, NaN and inf as null."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.ndarray, pd.Series, pd.Index)):
        return [_plain(v) for v in np.asarray(x).tolist()]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


ELEMENT_PREFIX = "ifig-"  # each figure's <div id="ifig-NAME" class="ifig">
CONFIG = {"responsive": True, "displaylogo": False, "scrollZoom": False}


def element(name: str) -> str:
    """The element an interactive figure is drawn into (its place in the page)."""
    return f'<div class="ifig" id="{ELEMENT_PREFIX}{name}"></div>'


def figure_json(spec: dict) -> str:
    """A spec as JSON safe inside a <script> element."""
    return json.dumps(_plain(spec), allow_nan=False, separators=(",", ":")).replace("</", "<\\/")


def scripts(specs: dict[str, dict]) -> str:
    """The end of the page: plotly.js once, then one call per figure; "" without figures."""
    if not specs:
        return ""
    figures = ",".join(f'"{ELEMENT_PREFIX}{name}":{figure_json(spec)}' for name, spec in specs.items())
    return (
        f"<script>{get_plotlyjs()}</script>\n<script>(function(){{var F={{{figures}}},c={json.dumps(CONFIG)};"
        "for(var id in F){var e=document.getElementById(id);"
        "if(e)Plotly.newPlot(e,F[id].data,F[id].layout,c);}"
        "})();</script>\n"
    )
