"""Render a report dict (analysis/report/build.py) as Markdown and as self-contained HTML.

Both formats carry the same sections in the same order; HTML inlines each PNG as a base64
`<img>` so the one file can be mailed or archived, Markdown links the PNGs in figures/.
"""

from __future__ import annotations

import base64
import html
import math
import pathlib
from typing import Any

from analysis.report import hparams as hparam_law
from models.flops import MFU_CAUSAL

FIGURE_CAPTIONS = {
    "loss_vs_compute": (
        "Final eval loss of every run against compute, with the fitted compute-optimal frontier, "
        "its 95% bootstrap band (parameter noise) and the wider 90% prediction interval of a new run "
        "(adds run scatter and extrapolation drift, see docs/analysis.md)."
    ),
    "isoflop": (
        "IsoFLOP profiles: loss against model size at each budget, the law's profile (solid), "
        "the parabola in log N (dashed) and Approach 2's minimum with its CI."
    ),
    "allocation": (
        "N_opt(C) and D_opt(C) from Approach 2 (per-budget minima, power law) "
        "and Approach 3 (law fit, 95% CI band)."
    ),
    "residuals": "Relative residuals of the law fit on every completed run.",
    "holdout": "Held-out check: the law fitted on the smaller budgets predicts the largest budget's runs.",
    "lr_sensitivity": (
        "Sensitivity to the swept optimiser setting: each run's final eval loss relative to its "
        "rung's best (in %), against the setting (log scale), one line per (budget, shape) rung; "
        "the star is the run every fit uses, crosses are runs that did not complete."
    ),
    "downstream": (
        "Downstream tasks: each run's final accuracy against compute (colour: model size), "
        "the task's chance level, and the predicted accuracy with its 90% prediction interval "
        "at the fitted law's compute-optimal (N*, D*) for each target budget."
    ),
    "loss_curves": "Training and eval loss curves of every run.",
    "hparam_law": (
        "Hyperparameter optima per rung (vertex of the quadratic in log value, 90% interval; crosses: "
        "edge or flat rungs, left out of the law) against model size, colour: tokens; open circles: "
        "the fitted law at the same rung."
    ),
    "hparam_penalty": (
        "Loss penalty of a mistuned hyperparameter: relative loss increase at k times the rung "
        "optimum (from each rung's quadratic), median over rungs, shaded: their range."
    ),
    "throughput": "Training throughput and MFU of every run.",
}


def _g(v: Any, fmt: str = ".4g") -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    return "–" if not math.isfinite(v) else format(v, fmt)


def _ci(ci: Any, fmt: str = ".4g") -> str:
    if not ci or len(ci) != 2:
        return ""
    return f"[{_g(ci[0], fmt)}, {_g(ci[1], fmt)}]"


def headline(rep: dict) -> list[str]:
    """Plain-text lines with the numbers a reader wants first (also printed by the demo): the
    law, the allocation at the requested budgets, Approach 2, the held-out check, the
    hyperparameter selection, the downstream predictions."""
    out = []
    law = rep.get("law")
    if law:
        p, ci = law["params"], law["ci"]
        out.append(
            f"law: L(N,D) = {p['E']:.3f} + {p['A']:.4g}/N^{p['alpha']:.3f} + {p['B']:.4g}/D^{p['beta']:.3f}"
            f"  ({law['n_points']} runs"
            f"{'; N without embeddings' if law.get('n_params') == 'non_embedding' else ''})"
        )
        out.append("  95% CIs: " + ", ".join(f"{k} {_ci(ci[k], '.3g')}" for k in law["param_names"]))
        al = law.get("allocation")
        if al:
            out.append(
                f"  N* ∝ C^a, D* ∝ C^b: a = {al['a']:.3f} {_ci(al.get('a_ci'), '.3f')}, "
                f"b = {al['b']:.3f} {_ci(al.get('b_ci'), '.3f')}"
            )
            for r in al["budgets"]:
                out.append(
                    f"  at C = {r['C']:.3g} FLOPs: N* = {r['N_opt']:,.0f} {_ci(r.get('N_opt_ci'), ',.0f')}, "
                    f"D* = {r['D_opt']:,.0f} {_ci(r.get('D_opt_ci'), ',.0f')} tokens, "
                    f"best loss {r['loss']:.3f} {_ci(r.get('loss_ci'), '.3f')} "
                    f"({r.get('loss_method', 'law_minimum')})"
                    + (
                        f", 90% prediction interval {_ci(r['loss_interval'], '.3f')}"
                        if r.get("loss_interval")
                        else ""
                    )
                )
    else:
        out.append("law: not fitted (see warnings)")
    a2 = rep.get("approach2")
    if a2 and math.isfinite(a2.get("a", math.nan)):
        out.append(f"Approach 2 (IsoFLOP parabolas): a = {a2['a']:.3f} {_ci(a2.get('a_ci'), '.3f')}")
        for r in rep.get("approach2_at_requested", []):
            out.append(
                f"  at C = {r['C']:.3g} FLOPs: N_opt = {r['N_opt']:,.0f}, D_opt = {r['D_opt']:,.0f} tokens"
            )
    h = rep.get("holdout")
    if h:
        out.append(
            f"held-out check: fitted on C <= {max(h['fit_budgets']):.3g} ({h['n_fit']} runs), predicted the "
            f"{h['n_points']} runs at C = {h['held_out_budget']:.3g}: mean |error| "
            f"{100 * h['mean_rel_error']:.2f}%, max {100 * h['max_rel_error']:.2f}% (target <= 3%)"
            + (
                f"; {100 * h['coverage']:.0f}% inside their 90% prediction intervals"
                if "coverage" in h
                else ""
            )
        )
    else:
        out.append("held-out check: not available (see warnings)")
    hp = rep.get("hparams")
    if hp and hp.get("active"):
        out.append(hp["message"])
    out += hparam_law.headline((hp or {}).get("law"))
    return out + downstream_headline(rep)


# shown right under the headline (the answer's picture); the other figures follow the warnings
LEAD_FIGURE = "isoflop"

# The HTML report's first screen: one summary table instead of the headline's preformatted lines,
# which ran off a 1280 px page. Five columns, every cell short (3-4 significant digits).
SUMMARY_HEADER = ["", "estimate", "95% CI", "90% prediction interval", "note"]
# the order a reader knows the Chinchilla law in: L = E + A/N^alpha + B/D^beta
LAW_ORDER = ("E", "A", "alpha", "B", "beta")
# the held-out target the verdict is judged against (analysis.report.build.HOLDOUT_TARGET, also
# written as holdout.target; this default serves report dicts written before that key)
HOLDOUT_TARGET_DEFAULT = 0.03
SI_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _sci(v: Any) -> str:
    """A FLOP count in 3 significant digits, compact: 1e12, 1.8e11 (not 1e+12)."""
    s = _g(v, ".3g")
    return s.replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _count(v: Any) -> str:
    """A parameter or token count in 4 significant digits with an SI suffix: 64.16k, 2.76M."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    for scale, suffix in SI_SUFFIXES:
        if math.isfinite(v) and abs(v) >= scale:
            return f"{v / scale:.4g}{suffix}"
    return _g(v, ".4g")


def _iv(ci: Any, fmt=None) -> str:
    """An interval as "[lo, hi]" in `fmt` (a function of one number; default 4 significant digits)."""
    fmt = fmt or (lambda x: _g(x, ".4g"))
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci and len(ci) == 2 else "–"


def _law_rows(law: dict) -> list[list[str]]:
    """One row per law parameter: value and 95% CI."""
    names = [k for k in LAW_ORDER if k in law["params"]] + [
        k for k in law["param_names"] if k not in LAW_ORDER
    ]
    return [[k, _g(law["params"][k]), _iv(law["ci"].get(k)), "", ""] for k in names]


def _budget_rows(rep: dict) -> list[tuple[str, list[list[str]]]]:
    """Per requested budget: N*, D* and the loss with its 90% prediction interval (Approach 3),
    with Approach 2's N_opt and D_opt at the same budget as the note."""
    al = (rep.get("law") or {}).get("allocation") or {}
    a2 = {round(math.log10(r["C"]), 6): r for r in rep.get("approach2_at_requested", [])}
    out = []
    for r in al.get("budgets", []):
        o = a2.get(round(math.log10(r["C"]), 6))
        out.append(
            (
                f"At C = {_sci(r['C'])} FLOPs (law fit, Approach 3)",
                [
                    [
                        "N* (params)",
                        _count(r["N_opt"]),
                        _iv(r.get("N_opt_ci"), _count),
                        "",
                        f"Approach 2: {_count(o['N_opt'])}" if o else "",
                    ],
                    [
                        "D* (tokens)",
                        _count(r["D_opt"]),
                        _iv(r.get("D_opt_ci"), _count),
                        "",
                        f"Approach 2: {_count(o['D_opt'])}" if o else "",
                    ],
                    [
                        f"best loss ({r.get('loss_method', 'law_minimum')})",
                        _g(r["loss"]),
                        _iv(r.get("loss_ci")),
                        _iv(r.get("loss_interval")),
                        f"law minimum {_g(r['loss_law_minimum'])}" if "loss_law_minimum" in r else "",
                    ],
                ],
            )
        )
    return out


def _exponent_rows(rep: dict) -> list[list[str]]:
    """The allocation exponents a (N* ∝ C^a) and b (D* ∝ C^b) of the law, and Approach 2's a."""
    al = (rep.get("law") or {}).get("allocation") or {}
    rows = []
    if al:
        rows.append(["a (N* ∝ C^a), law", _g(al["a"], ".3g"), _iv(al.get("a_ci"), _ci3), "", ""])
        rows.append(["b (D* ∝ C^b), law", _g(al["b"], ".3g"), _iv(al.get("b_ci"), _ci3), "", ""])
    a2 = rep.get("approach2")
    if a2 and math.isfinite(a2.get("a", math.nan)):
        cmp_ = rep.get("comparison")
        verdict = (
            "" if not cmp_ else ("DISAGREES with the law" if cmp_["disagree"] else "agrees with the law")
        )
        rows.append(["a, Approach 2 (IsoFLOP)", _g(a2["a"], ".3g"), _iv(a2.get("a_ci"), _ci3), "", verdict])
    return rows


def _ci3(x: Any) -> str:
    return _g(x, ".3g")


def _holdout_summary_rows(h: dict | None) -> list[list[str]]:
    """The held-out check: what was fitted, what was predicted, the errors and the verdict."""
    if not h:
        return [["held-out check", "not available", "", "", "see the warnings"]]
    target = h.get("target", HOLDOUT_TARGET_DEFAULT)
    ok = h["mean_rel_error"] <= target
    rows = [
        ["fitted on budgets", ", ".join(_sci(b) for b in h["fit_budgets"]), "", "", f"{h['n_fit']} runs"],
        ["held-out budget", _sci(h["held_out_budget"]), "", "", f"{h['n_points']} runs predicted"],
        [
            "mean |error|",
            f"{100 * h['mean_rel_error']:.2f}%",
            "",
            "",
            f"{'PASS' if ok else 'FAIL'}: target ≤ {100 * target:.0f}%",
        ],
        ["max |error|", f"{100 * h['max_rel_error']:.2f}%", "", "", ""],
    ]
    if "coverage" in h:
        inside = round(h["coverage"] * h["n_points"])
        level = 100 * h.get("interval_level", 0.9)
        rows.append(
            [
                "coverage",
                f"{100 * h['coverage']:.0f}%",
                "",
                f"{inside} of {h['n_points']} inside",
                f"runs inside their {level:.0f}% prediction interval",
            ]
        )
    return rows


def _downstream_summary_rows(rep: dict) -> list[list[str]]:
    """Each task's predicted accuracy at 10x the largest budget (the rows of `downstream_headline`)."""
    ds = rep.get("downstream")
    if not ds:
        return []
    rows = []
    for p in ds["predictions"]:
        if not math.isclose(p["C"], ds["ten_x_budget"], rel_tol=1e-6):
            continue
        chance = ds["tasks"][p["task"]].get("chance")
        note = f"chance {_g(chance, '.3g')}; {p['method']}" + (
            f"; warnings: {_tags(p['warnings'])}" if p["warnings"] else ""
        )
        rows.append(
            [f"{p['task']} accuracy", _g(p["accuracy"], ".3f"), "", _iv(p["accuracy_interval"], _acc), note]
        )
    return rows or [["downstream tasks", "no prediction", "", "", "see the warnings"]]


def _acc(x: Any) -> str:
    return _g(x, ".3f")


def summary_sections(rep: dict) -> list[tuple[str, list[list[str]]]]:
    """The first screen's summary as (section title, rows of SUMMARY_HEADER cells): the law with
    its CIs, N*/D*/loss at each requested budget, the allocation exponents, the held-out check,
    the downstream predictions. The same numbers as `headline`, in cells that wrap."""
    law = rep.get("law")
    out: list[tuple[str, list[list[str]]]] = []
    if law:
        ne = "; N without embeddings" if law.get("n_params") == "non_embedding" else ""
        out.append((f"Law L(N,D) = E + A/N^alpha + B/D^beta ({law['n_points']} runs{ne})", _law_rows(law)))
    else:
        out.append(("Law", [["law", "not fitted", "", "", "see the warnings"]]))
    out += _budget_rows(rep)
    exps = _exponent_rows(rep)
    if exps:
        out.append(("Allocation exponents", exps))
    out.append(
        (
            "Held-out check: the law fitted without the largest budget predicts it",
            _holdout_summary_rows(rep.get("holdout")),
        )
    )
    ds = _downstream_summary_rows(rep)
    if ds:
        out.append(
            (
                f"Downstream tasks at C = {_sci(rep['downstream']['ten_x_budget'])} FLOPs "
                "(10x the largest budget)",
                ds,
            )
        )
    return out


def compute_line(rep: dict) -> str:
    """What the sweep spent on training against the same runs trained separately (sweep_plan.json's
    flops_to_train and flops_if_separate); "" for sweeps whose plan does not record them."""
    c = rep.get("compute")
    if not c:
        return ""
    why = " (WSD cooldown branches share their shape's trunk)" if c["ratio"] < 1 else ""
    return (
        f"compute: {_sci(c['flops_to_train'])} FLOPs trained, {c['ratio']:.2f}x the "
        f"{_sci(c['flops_if_separate'])} of separate runs{why}"
    )


def summary_html(rep: dict) -> str:
    """The summary table (a header row per section) plus the compute, hyperparameter and warnings
    lines: the HTML report's first screen, readable at 1280 px without horizontal scrolling."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in SUMMARY_HEADER)
    body = []
    for title, rows in summary_sections(rep):
        body.append(f"<tr class='sec'><th colspan='{len(SUMMARY_HEADER)}'>{html.escape(title)}</th></tr>")
        body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
    parts = [f"<table class='summary'><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"]
    line = compute_line(rep)
    if line:
        parts.append(f"<p class='compute'>{html.escape(line)}</p>")
    hp = rep.get("hparams")
    if hp and hp.get("active"):
        parts.append(f"<p>{html.escape(hp['message'])}.</p>")
    if rep.get("warnings"):
        parts.append(
            f"<p>{len(rep['warnings'])} warning(s), listed below the figure: "
            f"{html.escape(_tags(rep['warnings']))}</p>"
        )
    return "\n".join(parts)


# shown in the "Hyperparameter law" section, not among the figures
SECTION_FIGURES = ("hparam_law", "hparam_penalty")


def _lead_and_rest(figures: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    lead = [(n, r) for n, r in figures.items() if n == LEAD_FIGURE]
    return lead, [(n, r) for n, r in figures.items() if n != LEAD_FIGURE and n not in SECTION_FIGURES]


def hparam_law_markdown(rep: dict) -> list[str]:
    """The "Hyperparameter law" section's Markdown, or [] without laws."""
    sec = (rep.get("hparams") or {}).get("law")
    if not sec:
        return []
    figures = {n: r for n, r in rep.get("figures", {}).items() if n in SECTION_FIGURES}
    return hparam_law.section_markdown(sec, figures, FIGURE_CAPTIONS)


def _tags(warnings: list[str]) -> str:
    """Warnings by their short name (the text before the first colon: "near chance", ...)."""
    return ", ".join(dict.fromkeys(w.split(":")[0] for w in warnings))


def downstream_headline(rep: dict) -> list[str]:
    """One line per task: its predicted accuracy with the 90% interval at 10x the largest swept
    budget (the demo's question), at the law's compute-optimal (N*, D*)."""
    ds = rep.get("downstream")
    if not ds:
        return []
    c10 = ds["ten_x_budget"]
    out = []
    for p in ds["predictions"]:
        if not math.isclose(p["C"], c10, rel_tol=1e-6):
            continue
        chance = ds["tasks"][p["task"]].get("chance")
        out.append(
            f"downstream {p['task']} at C = {c10:.3g} FLOPs (10x the largest budget; N* = {p['N']:.3g}, "
            f"D* = {p['D']:.3g}): accuracy {p['accuracy']:.3f} {_ci(p['accuracy_interval'], '.3f')} "
            f"(90% prediction interval; chance {_g(chance, '.3g')}; {p['method']})"
            + (f"; warnings: {_tags(p['warnings'])}" if p["warnings"] else "")
        )
    if not out:
        out.append("downstream tasks: no prediction (see warnings)")
    return out


def _runs_rows(rep: dict) -> list[list[str]]:
    rows = []
    for r in rep["runs"]:
        rows.append(
            [
                r["run"],
                r["status"],
                _g(r["budget"], ".3g"),
                _g(r["N"], ",.0f"),
                _g(r["D"], ",.0f"),
                _g(r["C"], ".3g"),
                _g(r["loss"], ".4f"),
                _g(r["tokens_per_s"], ",.0f"),
                _g(None if r["mfu"] is None else 100 * r["mfu"], ".1f"),
            ]
        )
    return rows


HOLDOUT_HEADER = ["N", "D", "C", "actual", "predicted", "error %", "90% interval"]


def _holdout_rows(h: dict) -> list[list[str]]:
    """The held-out runs; the interval cell says whether the actual loss lies inside it."""
    rows = []
    for p in h["points"]:
        iv = p.get("interval")
        cell = (
            "–"
            if not iv
            else (f"[{iv[0]:.4f}, {iv[1]:.4f}] " + ("inside" if iv[0] <= p["actual"] <= iv[1] else "OUTSIDE"))
        )
        rows.append(
            [
                f"{p['N']:,.0f}",
                f"{p['D']:,.0f}",
                f"{p['C']:.3g}",
                f"{p['actual']:.4f}",
                f"{p['predicted']:.4f}",
                f"{100 * p['rel_error']:+.2f}",
                cell,
            ]
        )
    return rows


RUN_HEADER = [
    "run",
    "status",
    "budget C",
    "N (params)",
    "D (tokens)",
    "C (FLOPs)",
    "eval loss",
    "tokens/s",
    f"MFU % ({MFU_CAUSAL})",
]


def hparam_rows(rep: dict) -> list[list[str]]:
    """Header + one row per swept (budget, shape): the values tried, the best one, its loss, how
    much worse the worst completed run was, and whether the best sits at the range's edge."""
    hp = rep.get("hparams")
    if not hp or not hp.get("active"):
        return []
    x = hp.get("x_param") or hp["varied"][0]
    rows = [["rung", "runs", f"{x} tried", f"best {x}", "best loss", "worst / best − 1", "at edge of range"]]
    for g in hp["groups"]:
        vals = list(g["values"].get(x, []))
        best = vals[g["runs"].index(g["best"])] if g["best"] is not None and vals else None
        done = [v for v in g["losses"] if v is not None and math.isfinite(v)]
        spread = f"{100 * (max(done) / g['best_loss'] - 1):.2f}%" if done and g["best"] is not None else "–"
        rows.append(
            [
                g["label"],
                str(len(g["runs"])),
                ", ".join(_g(v, ".3g") for v in sorted(vals, key=_sort_key)),
                _g(best, ".3g"),
                _g(g["best_loss"], ".4f"),
                spread,
                "yes" if g["at_edge"] else "no",
            ]
        )
    return rows


def _sort_key(v: Any) -> tuple[int, float, str]:
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _skipped_rows(rep: dict) -> list[list[str]]:
    return [
        [
            s["label"],
            _g(s.get("budget"), ".3g"),
            _g(s.get("n_params"), ",.0f"),
            str(s.get("steps")),
            s["reason"],
        ]
        for s in rep.get("skipped_shapes", [])
    ]


DOWNSTREAM_OBSERVED = [
    "task",
    "runs",
    "eval points",
    "final accuracy (min – max)",
    "largest run's accuracy",
    "chance",
    "method",
    "held-out MAE (points)",
]
DOWNSTREAM_PREDICTED = [
    "task",
    "C (FLOPs)",
    "N*",
    "D* (tokens)",
    "task loss",
    "accuracy",
    "90% interval",
    "method",
    "warnings",
]


def downstream_tables(ds: dict) -> tuple[list[list[str]], list[list[str]]]:
    """(observed rows, predicted rows) of the downstream section, cells as text."""
    obs = []
    for task, t in ds["tasks"].items():
        o = t["observed"]
        mae = t.get("heldout_mae")
        obs.append(
            [
                task,
                str(o["n_runs"]),
                str(o["n_points"]),
                " – ".join(_g(a, ".3f") for a in o["accuracy_range"]),
                _g(o["largest_run"]["accuracy"], ".3f"),
                _g(t.get("chance", o["chance"]), ".3g"),
                t.get("method", "not fitted"),
                _g(None if mae is None else 100 * mae, ".2f"),
            ]
        )
    pred = [
        [
            p["task"],
            _g(p["C"], ".3g"),
            _g(p["N"], ",.0f"),
            _g(p["D"], ",.0f"),
            _g(p["task_loss"], ".4g"),
            _g(p["accuracy"], ".3f"),
            _ci(p["accuracy_interval"], ".3f"),
            p["method"],
            _tags(p["warnings"]) or "–",
        ]
        for p in ds["predictions"]
    ]
    return obs, pred


def downstream_notes(ds: dict) -> tuple[str, list[str]]:
    """(the section's explanatory paragraph, its warnings: failures, then each task's distinct
    warnings once)."""
    s = ds["settings"]
    text = (
        f"Each task the runs measured (`eval.tasks`) is fitted on the runs the law was fitted to "
        f"(docs/downstream.md: task loss as L(N, D), accuracy as a sigmoid of it, a direct fit, and a "
        f"held-out check that picks the method per task). Predictions are at the fitted law's "
        f"compute-optimal (N*, D*) for each budget, including 10x the largest swept budget "
        f"({ds['ten_x_budget']:.3g} FLOPs). Intervals are {100 * s['interval_level']:.0f}% prediction "
        f"intervals ({s['bootstrap']} bootstrap resamples of the runs); they do not include the "
        f"uncertainty of N* and D* themselves."
    )
    notes = list(ds["errors"])
    for task, t in ds["tasks"].items():
        seen = dict.fromkeys(w for p in ds["predictions"] if p["task"] == task for w in p["warnings"])
        notes += [f"{task}: {w}" for w in dict.fromkeys([*t.get("warnings", []), *seen])]
    return text, notes


def _downstream_markdown(ds: dict) -> list[str]:
    text, notes = downstream_notes(ds)
    obs, pred = downstream_tables(ds)
    L = ["", "## Downstream tasks", "", text, ""]
    if obs:
        L += ["| " + " | ".join(DOWNSTREAM_OBSERVED) + " |", "|" + "---|" * len(DOWNSTREAM_OBSERVED)]
        L += ["| " + " | ".join(r) + " |" for r in obs] + [""]
    if pred:
        L += ["| " + " | ".join(DOWNSTREAM_PREDICTED) + " |", "|" + "---|" * len(DOWNSTREAM_PREDICTED)]
        L += ["| " + " | ".join(r) + " |" for r in pred] + [""]
    return L + [f"- warning: {w}" for w in notes]


def _downstream_html(ds: dict) -> list[str]:
    text, notes = downstream_notes(ds)
    obs, pred = downstream_tables(ds)
    parts = ["<h2>Downstream tasks</h2>", f"<p>{html.escape(text)}</p>"]
    if obs:
        parts.append(_table(DOWNSTREAM_OBSERVED, obs))
    if pred:
        parts.append(_table(DOWNSTREAM_PREDICTED, pred))
    return parts + [f"<div class='warn'>{html.escape(w)}</div>" for w in notes]


def _source_kind(rep: dict) -> str:
    """How the report's opening line names what it read: a sweep directory or a runs table."""
    return "Runs table" if (rep.get("source") or {}).get("kind") == "runs_table" else "Sweep"


def source_note(rep: dict) -> str:
    """The line under the opening one saying which columns a runs table's fit used and which
    sections are left out (they need run directories); "" for a sweep."""
    src = rep.get("source") or {}
    if src.get("kind") != "runs_table":
        return ""
    cols = ", ".join(f"{role} = {name.strip('<>')}" for role, name in (src.get("columns") or {}).items())
    return (f"Columns: {cols}. " if cols else "") + src.get("note", "")


def write_markdown(rep: dict, path: pathlib.Path) -> None:
    if rep.get("rl_only"):
        L = [f"# {rep['title']}", "", f"Runs `{rep['sweep_dir']}`; generated {rep['generated']}.", ""]
        L += [f"- warning: {w}" for w in rep["warnings"]]
        path.write_text("\n".join(L + [sec["markdown"] for sec in rep["sections"]]) + "\n")
        return
    L = [
        f"# {rep['title']}",
        "",
        f"{_source_kind(rep)} `{rep['sweep_dir']}` — {rep['n_completed']} of {rep['n_runs']} runs "
        f"completed; budgets {', '.join(_g(b, '.3g') for b in rep['budgets_swept'])} FLOPs; "
        f"{rep['bootstrap']} bootstrap resamples (seed {rep['seed']}); generated {rep['generated']}.",
        "",
        *([f"*{source_note(rep)}*", ""] if source_note(rep) else []),
        "## Headline",
        "",
        "```",
        *headline(rep),
        "```",
        "",
    ]
    lead, rest = _lead_and_rest(rep["figures"])
    for name, rel in lead:
        L += [f"![{name}]({rel})", "", f"*{FIGURE_CAPTIONS.get(name, name)}*", ""]
    L += ["## Warnings", ""] + ([f"- {w}" for w in rep["warnings"]] or ["- none"]) + [""]
    L += ["## Figures", ""]
    for name, rel in rest:
        L += [f"![{name}]({rel})", "", f"*{FIGURE_CAPTIONS.get(name, name)}*", ""]
    hp = hparam_rows(rep)
    if hp:
        L += [
            "## Hyperparameter sweep",
            "",
            rep["hparams"]["message"] + ".",
            "",
            "| " + " | ".join(hp[0]) + " |",
            "|" + "---|" * len(hp[0]),
        ]
        L += ["| " + " | ".join(r) + " |" for r in hp[1:]] + [""]
    L += hparam_law_markdown(rep)
    L += ["## Runs", "", "| " + " | ".join(RUN_HEADER) + " |", "|" + "---|" * len(RUN_HEADER)]
    L += ["| " + " | ".join(r) + " |" for r in _runs_rows(rep)]
    sk = _skipped_rows(rep)
    if sk:
        L += [
            "",
            "## Shapes the sweep skipped",
            "",
            "| shape | budget C | N | steps | reason |",
            "|---|---|---|---|---|",
        ]
        L += ["| " + " | ".join(r) + " |" for r in sk]
    h = rep.get("holdout")
    if h:
        L += [
            "",
            "## Held-out runs",
            "",
            "| " + " | ".join(HOLDOUT_HEADER) + " |",
            "|---|---|---|---|---|---|---|",
        ]
        L += ["| " + " | ".join(r) + " |" for r in _holdout_rows(h)]
    if rep.get("downstream"):
        L += _downstream_markdown(rep["downstream"])
    for sec in rep.get("sections", []):
        L += ["", sec["markdown"]]
    path.write_text("\n".join(L) + "\n")


def _table(header: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
pre{background:#f5f5f5;padding:.8em;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:13px;max-width:100%}
table.summary{table-layout:fixed;width:100%}table.summary td,table.summary th{overflow-wrap:anywhere}
table.summary th:first-child{width:24%}table.summary td:last-child{text-align:left}
table.summary tr.sec th{background:#eef2f7;text-align:left}.compute{color:#333}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:first-child,th:first-child{text-align:left}
.warn{background:#fff4e0;border-left:4px solid #e69500;padding:.4em .8em;margin:.3em 0}
figure{margin:1.2em 0}figcaption{font-style:italic;color:#555}img{max-width:100%}"""


def _img(out: pathlib.Path, rel: str, alt: str) -> str:
    b64 = base64.b64encode((out / rel).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"


def markdown_to_html(md: str, out: pathlib.Path) -> str:
    """A report section's Markdown as HTML, by markdown-it-py (CommonMark plus pipe tables; raw
    HTML in the Markdown is escaped, not passed through). Images are embedded as base64 so the
    page stays self-contained; an image whose file is missing becomes a line saying so."""
    from markdown_it import MarkdownIt  # lazy: only a report that writes HTML needs it

    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")

    def image(_renderer, tokens, idx, _options, _env):
        tok = tokens[idx]
        rel, alt = tok.attrGet("src") or "", tok.content
        if (out / rel).is_file():
            return f"<figure>{_img(out, rel, alt)}</figure>"
        return f"(missing figure {html.escape(rel)})"

    renderer.add_render_rule("image", image)
    return renderer.render(md)


def write_html(rep: dict, path: pathlib.Path) -> None:
    out = path.parent
    if rep.get("rl_only"):
        parts = [
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(rep['title'])}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(rep['title'])}</h1>"
        ]
        parts += [f"<div class='warn'>{html.escape(w)}</div>" for w in rep["warnings"]]
        parts += [markdown_to_html(sec["markdown"], out) for sec in rep["sections"]]
        path.write_text("\n".join(parts + ["</body></html>"]))
        return
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(rep['title'])}</title>"
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(rep['title'])}</h1>",
        f"<p>{_source_kind(rep)} <code>{html.escape(rep['sweep_dir'])}</code> — "
        f"{rep['n_completed']} of {rep['n_runs']} runs "
        f"completed; budgets {', '.join(_g(b, '.3g') for b in rep['budgets_swept'])} FLOPs; "
        f"{rep['bootstrap']} bootstrap resamples (seed {rep['seed']}); generated {rep['generated']}.</p>",
        *([f"<p class='note'><em>{html.escape(source_note(rep))}</em></p>"] if source_note(rep) else []),
        "<h2>Headline</h2>",
        summary_html(rep),
    ]
    lead, rest = _lead_and_rest(rep["figures"])

    def figure(name: str, rel: str) -> str:
        b64 = base64.b64encode((out / rel).read_bytes()).decode()
        return (
            f"<figure><img alt='{name}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{html.escape(FIGURE_CAPTIONS.get(name, name))}</figcaption></figure>"
        )

    parts += [figure(n, r) for n, r in lead] + ["<h2>Warnings</h2>"]
    parts += [f"<div class='warn'>{html.escape(w)}</div>" for w in rep["warnings"]] or ["<p>none</p>"]
    parts.append("<h2>Figures</h2>")
    parts += [figure(n, r) for n, r in rest]
    hp = hparam_rows(rep)
    if hp:
        parts += [
            "<h2>Hyperparameter sweep</h2>",
            f"<p>{html.escape(rep['hparams']['message'])}.</p>",
            _table(hp[0], hp[1:]),
        ]
    law_md = hparam_law_markdown(rep)
    if law_md:
        parts.append(markdown_to_html("\n".join(law_md), out))
    parts += ["<h2>Runs</h2>", _table(RUN_HEADER, _runs_rows(rep))]
    sk = _skipped_rows(rep)
    if sk:
        parts += [
            "<h2>Shapes the sweep skipped</h2>",
            _table(["shape", "budget C", "N", "steps", "reason"], sk),
        ]
    h = rep.get("holdout")
    if h:
        parts += ["<h2>Held-out runs</h2>", _table(HOLDOUT_HEADER, _holdout_rows(h))]
    if rep.get("downstream"):
        parts += _downstream_html(rep["downstream"])
    parts += [markdown_to_html(sec["markdown"], out) for sec in rep.get("sections", [])]
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
