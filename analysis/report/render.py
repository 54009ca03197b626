"""Render a report dict (analysis/report/build.py): one Markdown document, and HTML from it.

`report_markdown` writes the report once, as Markdown (report.md: the PNGs linked in figures/);
`markdown_to_html` renders that same text with markdown-it-py (CommonMark plus pipe tables) into
report.html, a self-contained page: each PNG inlined as a base64 `<img>`, so the one file can be
mailed or archived. Every table is a Markdown pipe table from `md_table`. Three conventions of the
Markdown become the page's look (`_as_figures`, `_as_summary`, `_as_warnings`):

* a paragraph holding only an image is a `<figure>`; an emphasised paragraph right after it is
  its `<figcaption>`;
* a table row whose first cell is bold and whose other cells are empty is a section row spanning
  the table (`<tr class="sec">`); a table with such rows is the summary table (`class="summary"`);
* a bullet list whose every item starts with "warning: " is a stack of `<div class="warn">`.
"""

from __future__ import annotations

import base64
import html
import math
import pathlib
import re
import urllib.parse
from typing import Any, Iterable, Sequence

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from analysis.report import hparams as hparam_law
from analysis.report import interactive
from analysis.report.interactive import count as count3
from models.base.jsonio import write_text_atomic

FIGURE_CAPTIONS = {
    "loss_vs_compute": (
        "Final eval loss of every run against compute, with the fitted compute-optimal frontier, "
        "its 95% bootstrap band (parameter noise) and the wider 90% prediction interval of a new run "
        "(adds run scatter and extrapolation drift, see docs/fit.md)."
    ),
    "isoflop": (
        "IsoFLOP profiles: loss against model size at each budget, the law's profile (solid), the parabola "
        "in log N (dashed), Approach 2's minimum with its CI (star), and where this fit (open circle) and "
        "the published laws (Hoffmann et al. 2022, Besiroglu et al. 2024, Kaplan et al. 2020) put the "
        "compute-optimal N at each budget, placed on this fit's profile."
    ),
    "allocation": (
        "N_opt(C) and D_opt(C) from Approach 2 (per-budget minima, power law), Approach 3 (law fit, 95% "
        "CI band) and the published laws (constants and citations under the allocation table)."
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
    "throughput": (
        "Training throughput and MFU of every run; MFU in the planner's convention (PaLM's 6N + 12·L·H·Q·T "
        "FLOPs per token, as `python -m analysis plan` reports it)."
    ),
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
            f"{100 * h['mean_rel_error']:.2f}%, max {100 * h['max_rel_error']:.2f}%"
            + (f"; {coverage_words(h)}" if h.get("n_intervals") else "")
        )
    else:
        out.append("held-out check: not available (see warnings)")
    hp = rep.get("hparams")
    if hp and hp.get("active"):
        out.append(hp["message"])
    out += hparam_law.headline((hp or {}).get("law"))
    return out + downstream_headline(rep)


# shown right under the first-screen tables (the answer's picture); the other figures follow the warnings
LEAD_FIGURE = "isoflop"

# the order a reader knows the Chinchilla law in: L = E + A/N^alpha + B/D^beta
LAW_ORDER = ("E", "A", "alpha", "B", "beta")
SI_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
# How each `loss_method` (analysis.laws.frontier.FrontierMethod) predicts the one best-loss number
LOSS_METHODS = {
    "law_minimum": "the fitted law's IsoFLOP minimum L(N*, D*)",
    "frontier_power_law": "a power law E + A·C^-alpha through each budget's best run (Porian et al. 2024)",
    "combined": "the geometric mean of the law's IsoFLOP minimum and the frontier power law",
}


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


def _tpp(v: Any) -> str:
    """Tokens per parameter: whole numbers from 10 on (70, 1400), two digits below (8.3)."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    return "–" if not math.isfinite(v) else (f"{v:,.0f}" if v >= 10 else f"{v:.2g}")


def _loss_and_interval(loss: float, iv: Sequence[float] | None) -> tuple[str, str]:
    """(loss, "[lo, hi]") in the fewest significant digits (3 to 5) that tell the three apart."""
    for digits in (3, 4, 5):  # "#": trailing zeros kept (26.0, not 26)
        cells = [format(float(v), f"#.{digits}g").rstrip(".") for v in (loss, *(iv or ()))]
        if len(set(cells)) == len(cells):
            break
    return cells[0], (f"[{cells[1]}, {cells[2]}]" if iv else "")


def _pct(x: float) -> str:
    """A percentage in 3 significant digits, 0.01% at least ("within 0.01%", not an exact fit's 1e-14%)."""
    return f"{max(x, 0.01):.3g}%"


def coverage_words(h: dict) -> str:
    """ "2 of 4 inside their 90% prediction intervals", and when that is fewer than such intervals
    plausibly give (analysis.report.build.coverage_check) the flag saying so."""
    n, k = h["n_intervals"], h["n_inside"]
    level = f"{100 * h.get('interval_level', 0.9):.0f}%"
    text = f"{k} of {n} inside {'its' if n == 1 else 'their'} {level} prediction interval{'s' * (n != 1)}"
    if h.get("too_few_inside"):
        text += (
            f" — fewer than {level} intervals plausibly give (one-sided binomial p = {h['coverage_p']:.2g})"
        )
    return text


def holdout_words(h: dict | None) -> str:
    """The held-out check in words, for the verdict: the mean error on the held-out budget and how
    many of its runs fall inside their 90% prediction intervals."""
    if not h:
        return "no held-out check (it needs three or more compute budgets)"
    budget, err = _sci(h["held_out_budget"]), 100 * h["mean_rel_error"]
    text = f"held-out budget ({budget} FLOPs) predicted within {_pct(err)}"
    return text + (f", {coverage_words(h)}" if h.get("n_intervals") else "")


def verdict(rep: dict) -> str:
    """The report's answer in one sentence: at the headline budget (the first --budget, else 10x
    the largest swept) the compute-optimal N*, D* and tokens per parameter, the expected best loss
    with its 90% prediction interval, and the held-out check in words (report.json `verdict`, the
    first line of report.md, the element id="verdict" at the top of report.html)."""
    if rep.get("rl_only"):
        return rep["verdict"]
    law = rep.get("law") or {}
    rows = (law.get("allocation") or {}).get("budgets") or []
    if not rows:
        why = (
            "the law was not fitted"
            if not law
            else f"the {law.get('law', 'fitted')} law has no closed-form optimum"
        )
        return f"No compute-optimal answer: {why} (see the warnings); {holdout_words(rep.get('holdout'))}."
    r = rows[0]
    loss, iv = _loss_and_interval(r["loss"], r.get("loss_interval"))
    loss_text = f"loss {loss} {iv} (90%)" if iv else f"loss {loss} (no interval: the fit has no bootstrap)"
    tpp = r.get("tokens_per_param", r["D_opt"] / r["N_opt"])
    return (
        f"At {_sci(r['C'])} FLOPs train {count3(r['N_opt'])} parameters on {count3(r['D_opt'])} tokens "
        f"({_tpp(tpp)} tokens/param): {loss_text}; {holdout_words(rep.get('holdout'))}."
    )


PREDICTION_HEADER = ["prediction", "C (FLOPs)", "estimate", "90% prediction interval", "how"]


def prediction_rows(rep: dict) -> list[list[str]]:
    """What the report predicts, each with its 90% prediction interval: the expected best loss at
    each requested budget (the report's one best-loss number) and each downstream task's accuracy
    at 10x the largest budget."""
    rows = []
    for r in ((rep.get("law") or {}).get("allocation") or {}).get("budgets", []):
        method = r.get("loss_method", "law_minimum")
        rows.append(
            [
                "expected best loss",
                _sci(r["C"]),
                _g(r["loss"]),
                _iv(r.get("loss_interval")),
                LOSS_METHODS.get(method, method),
            ]
        )
    ds = rep.get("downstream")
    for p in (ds or {}).get("predictions", []):
        if not math.isclose(p["C"], ds["ten_x_budget"], rel_tol=1e-6):
            continue
        chance = ds["tasks"][p["task"]].get("chance")
        how = f"at (N*, D*); chance {_g(chance, '.3g')}; {p['method']}" + (
            f"; warnings: {_tags(p['warnings'])}" if p["warnings"] else ""
        )
        rows.append(
            [
                f"{p['task']} accuracy",
                _sci(p["C"]),
                _g(p["accuracy"], ".3f"),
                _iv(p["accuracy_interval"], _acc),
                how,
            ]
        )
    return rows


ALLOCATION_HEADER = ["law", "N* (params)", "D* (tokens)", "tokens/param", "N* ∝ C^a"]


def allocation_rows(rep: dict) -> list[list[str]]:
    """Per requested budget (a section row each): this fit's N*, D*, tokens per parameter with 95%
    CIs and its exponent a, Approach 2's, and each published law's (report.json `published`)."""
    al = (rep.get("law") or {}).get("allocation") or {}
    a2 = rep.get("approach2") or {}
    a2_at = {round(math.log10(r["C"]), 6): r for r in rep.get("approach2_at_requested", [])}
    pub = rep.get("published") or []
    budgets = [r["C"] for r in al.get("budgets", [])] or list(rep.get("requested_budgets", []))
    rows = []
    for j, C in enumerate(budgets):
        rows.append([f"**At C = {_sci(C)} FLOPs**", "", "", "", ""])
        if al.get("budgets"):
            r = al["budgets"][j]
            rows.append(
                [
                    "this fit (Approach 3, 95% CI)",
                    f"{_count(r['N_opt'])} {_iv(r.get('N_opt_ci'), _count)}",
                    f"{_count(r['D_opt'])} {_iv(r.get('D_opt_ci'), _count)}",
                    f"{_tpp(r.get('tokens_per_param'))} {_iv(r.get('tokens_per_param_ci'), _tpp)}",
                    f"{_g(al['a'], '.3g')} {_iv(al.get('a_ci'), _ci3)}",
                ]
            )
        o = a2_at.get(round(math.log10(C), 6))
        if o:
            rows.append(
                [
                    "this fit, Approach 2 (IsoFLOP parabolas)",
                    _count(o["N_opt"]),
                    _count(o["D_opt"]),
                    _tpp(o["D_opt"] / o["N_opt"]),
                    f"{_g(a2.get('a'), '.3g')} {_iv(a2.get('a_ci'), _ci3)}",
                ]
            )
        for law in pub:
            at = next((x for x in law["at"] if math.isclose(x["C"], C, rel_tol=1e-9)), None)
            if at is not None:
                rows.append(
                    [
                        law["name"],
                        _count(at["N_opt"]),
                        _count(at["D_opt"]),
                        _tpp(at["tokens_per_param"]),
                        _g(law["a"], ".3g"),
                    ]
                )
    return rows


def published_citations(rep: dict) -> str:
    """The published laws' constants and where they are printed (one paragraph)."""
    return (
        "Published laws, all at C = 6ND: "
        + "; ".join(f"{p['citation']}: {p['constants']}" for p in rep.get("published") or [])
        + "."
    )


LAW_HEADER = ["parameter", "estimate", "95% CI", "note"]


def law_rows(rep: dict) -> list[list[str]]:
    """The fitted law's parameters and allocation exponents with their 95% bootstrap CIs."""
    law = rep.get("law")
    if not law:
        return []
    names = [k for k in LAW_ORDER if k in law["params"]] + [
        k for k in law["param_names"] if k not in LAW_ORDER
    ]
    rows = [[k, _g(law["params"][k]), _iv(law["ci"].get(k)), ""] for k in names]
    al = law.get("allocation") or {}
    pub = {p["key"]: p for p in rep.get("published") or []}
    if al:
        quoted = ", ".join(f"{p['name'].split(' (')[0]} {_g(p['a'], '.3g')}" for p in pub.values())
        rows.append(
            [
                "a (N* ∝ C^a)",
                _g(al["a"], ".3g"),
                _iv(al.get("a_ci"), _ci3),
                f"published: {quoted}" if quoted else "",
            ]
        )
        rows.append(["b (D* ∝ C^b)", _g(al["b"], ".3g"), _iv(al.get("b_ci"), _ci3), ""])
    a2 = rep.get("approach2")
    if a2 and math.isfinite(a2.get("a", math.nan)):
        cmp_ = rep.get("comparison")
        note = "" if not cmp_ else ("DISAGREES with the law" if cmp_["disagree"] else "agrees with the law")
        rows.append(["a, Approach 2 (IsoFLOP)", _g(a2["a"], ".3g"), _iv(a2.get("a_ci"), _ci3), note])
    return rows


def holdout_paragraph(h: dict | None) -> str:
    """The held-out check in one paragraph: what was fitted, what was predicted, the errors, and
    the coverage of the 90% prediction intervals (flagged only when it is implausibly low)."""
    if not h:
        return "Not available: see the warnings."
    fb = h["fit_budgets"]
    span = _sci(fb[0]) if len(fb) == 1 else f"{_sci(fb[0])} to {_sci(fb[-1])}"
    text = (
        f"The law fitted on {len(fb)} budget{'s' * (len(fb) != 1)} ({span} FLOPs, {h['n_fit']} runs) "
        f"predicted the {h['n_points']} run{'s' * (h['n_points'] != 1)} at {_sci(h['held_out_budget'])} "
        "FLOPs with mean "
        f"|error| {100 * h['mean_rel_error']:.2f}% (max {100 * h['max_rel_error']:.2f}%)"
    )
    if h.get("n_intervals"):
        text += f"; {coverage_words(h)}"
        if not h.get("too_few_inside"):
            level = f"{100 * h.get('interval_level', 0.9):.0f}%"
            text += f", consistent with {level} intervals (one-sided binomial p = {h['coverage_p']:.2g})"
    return text + ". No fixed error target: a held-out error means more against the width of its interval."


def _ci3(x: Any) -> str:
    return _g(x, ".3g")


def _acc(x: Any) -> str:
    return _g(x, ".3f")


def compute_line(rep: dict) -> str:
    """What the sweep spent on training against the same runs trained separately (sweep_plan.json's
    flops_to_train and flops_if_separate); "" for sweeps whose plan does not record them."""
    c = rep.get("compute")
    if not c:
        return ""
    why = " (WSD cooldown branches share their shape's trunk)" if c["ratio"] < 1 else ""
    line = (
        f"compute: {_sci(c['flops_to_train'])} FLOPs trained, {c['ratio']:.2f}x the "
        f"{_sci(c['flops_if_separate'])} of separate runs{why}"
    )
    e = c.get("early_stop")
    if e:  # sweep.early_stop: what the sweep spent against the full sweep
        stopped, full = len(e.get("stopped_early") or []), float(e["flops_full_sweep"])
        line += (
            f"; early stop: {stopped} run(s) stopped, {_sci(float(e['flops_spent']))} FLOPs spent of the "
            f"full sweep's {_sci(full)} ({float(e['flops_saved_by_early_stop']) / full:.0%} saved)"
        )
    return line


def summary_markdown(rep: dict) -> list[str]:
    """The report's first screen after the verdict, in separate tables by what their intervals
    mean: predictions with 90% prediction intervals; the compute-optimal allocation against the
    published laws and the law's parameters, with 95% bootstrap CIs; the held-out check in words;
    then the compute, hyperparameter, warnings and notes lines."""
    L: list[str] = []
    preds = prediction_rows(rep)
    if preds:
        L += ["## Predictions (90% prediction intervals)", ""] + md_table(PREDICTION_HEADER, preds)
        L += [
            "The expected best loss is the report's one best-loss number (the loss figure's frontier); "
            "a 90% prediction interval covers a new run's loss, scatter and extrapolation drift included.",
            "",
        ]
    alloc = allocation_rows(rep)
    if alloc and (rep.get("law") or {}).get("allocation"):
        L += ["## Compute-optimal allocation against published laws", ""]
        L += md_table(ALLOCATION_HEADER, alloc) + [f"*{md_escape(published_citations(rep))}*", ""]
    law = rep.get("law")
    if law:
        ne = "; N without embeddings" if law.get("n_params") == "non_embedding" else ""
        L += [f"## Fitted law ({law['n_points']} runs{ne}): estimates with 95% bootstrap CIs", ""]
        L += md_table(LAW_HEADER, law_rows(rep))
    else:
        L += ["## Fitted law", "", "Not fitted: see the warnings.", ""]
    h = rep.get("holdout")
    L += ["## Held-out check: the law fitted without the largest budget predicts it", ""]
    L += [md_escape(holdout_paragraph(h)), ""]
    if h and h.get("too_few_inside"):
        L += warning_list([f"held-out coverage: {coverage_words(h)}"])
    line = compute_line(rep)
    if line:
        L += [line, ""]
    hp = rep.get("hparams")
    if hp and hp.get("active"):
        L += [hp["message"] + ".", ""]
    if rep.get("warnings"):
        L += [
            f"{len(rep['warnings'])} warning(s), listed below the figure: "
            + md_escape(warning_tags(rep["warnings"])),
            "",
        ]
    notes = [short_note(n) for n in rep.get("notes", [])]
    L += [f"Note: {md_escape(n)}" for n in notes] + ([""] if notes else [])
    return L


def short_note(note: str, names: int = 5) -> str:
    """A note that ends in a long list of names ("...: a, b, c, ...") cut to its count: the list
    is under Details ("Notes in full")."""
    head, sep, tail = note.rpartition(": ")
    if sep and tail.count(", ") >= names:
        return f"{head} ({tail.count(', ') + 1} names, listed under Details)"
    return note


# shown in the "Hyperparameter law" section, not among the figures
SECTION_FIGURES = ("hparam_law", "hparam_penalty")


def _lead_and_rest(figures: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    lead = [(n, r) for n, r in figures.items() if n == LEAD_FIGURE]
    return lead, [(n, r) for n, r in figures.items() if n != LEAD_FIGURE and n not in SECTION_FIGURES]


def hparam_law_markdown(rep: dict) -> list[str]:
    """The "Hyperparameter law" section's Markdown (analysis/report/hparams.py's numbers), or []
    without laws."""
    sec = (rep.get("hparams") or {}).get("law")
    if not sec:
        return []
    L = ["## Hyperparameter law", "", hparam_law.intro(sec), ""]
    L += md_table(hparam_law.LAW_HEADER, hparam_law.law_rows(sec))
    for name, rel in rep.get("figures", {}).items():
        if name in SECTION_FIGURES:
            L += figure_markdown(name, rel)
    rows = hparam_law.budget_rows(sec)
    if rows:
        L += [
            "The laws at the fitted Chinchilla law's compute-optimal (N*, D*) of each requested budget:",
            "",
        ]
        L += md_table(rows[0], rows[1:])
    return L


TAG_CHARS = 60  # a warning's tag on the first screen: at most this many characters


def warning_tags(warnings: list[str]) -> str:
    """Warnings by a short tag each: the text before its first ":", ";" or " (", cut to TAG_CHARS."""
    tags = []
    for w in warnings:
        tag = re.split(r":|;| \(", w, maxsplit=1)[0].strip()
        tags.append(tag if len(tag) <= TAG_CHARS else tag[: TAG_CHARS - 1].rstrip() + "…")
    return ", ".join(dict.fromkeys(tags))


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


RUN_HEADER = ["run", "status", "budget C", "N (params)", "D (tokens)", "C (FLOPs)", "eval loss", "tokens/s"]


def run_header(rep: dict) -> list[str]:
    """The run list's columns; MFU named by its convention (the planner's, report.json `mfu_convention`)."""
    return [*RUN_HEADER, f"MFU % ({(rep.get('mfu_convention') or {}).get('name', 'as in summary.json')})"]


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
    L = ["## Downstream tasks", "", text, ""]
    if obs:
        L += md_table(DOWNSTREAM_OBSERVED, obs)
    if pred:
        L += md_table(DOWNSTREAM_PREDICTED, pred)
    return L + warning_list(notes)


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


# characters that would start emphasis or an escape inside text set in *...* or **...**
_EMPHASIS_SPECIAL = re.compile(r"[\\*`]|(?<![^\W_])_|_(?![^\W_])")


def md_escape(text: str) -> str:
    """`text` as literal Markdown inline text: backslash, `*`, backtick and an underscore that is
    not inside a word are backslash-escaped (an underscore inside a word, as in N_opt, is literal)."""
    return _EMPHASIS_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The report's one table form: a Markdown pipe table (`|` in a cell escaped, a line break made
    a space) and the blank line that ends it. Cells are Markdown inline text."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *map(line, rows), ""]


WARNING_PREFIX = "warning: "


def warning_list(warnings: Sequence[str]) -> list[str]:
    """Warnings as a Markdown list, "- warning: ..." each (HTML: one `<div class="warn">` each)."""
    return [f"- {WARNING_PREFIX}{w}" for w in warnings] + ([""] if warnings else [])


def figure_markdown(name: str, rel: str) -> list[str]:
    """A figure: the image alone in its paragraph, then its caption in italics."""
    return [f"![{name}]({rel})", "", f"*{md_escape(FIGURE_CAPTIONS.get(name, name))}*", ""]


DETAILS = "Details: "  # an h2 starting so is a collapsed <details> section of report.html


def _source_line(rep: dict) -> str:
    """What was read, by name (the full path is under Details), how many runs, which budgets."""
    b = rep["budgets_swept"]
    budgets = (
        f"{len(b)} budget{'s' * (len(b) != 1)}"
        + (f" from {_sci(b[0])} to {_sci(b[-1])}" if len(b) > 1 else f" {_sci(b[0])}")
        if b
        else "no budgets"
    )
    return (
        f"{_source_kind(rep)} `{rep.get('source_name') or pathlib.Path(rep['sweep_dir']).name}`: "
        f"{rep['n_completed']} "
        f"of {rep['n_runs']} runs completed, {budgets} FLOPs; {rep['bootstrap']} bootstrap resamples "
        f"(seed {rep['seed']}); generated {rep['generated']}."
    )


def details_markdown(rep: dict) -> list[str]:
    """The collapsed sections at the end: every run, the shapes the sweep skipped, notes in full,
    and where the report came from."""
    runs = rep["runs"]
    done = sum(r["status"] == "completed" for r in runs)
    L = [f"## {DETAILS}all {len(runs)} runs ({done} completed)", ""]
    L += [md_escape(mfu_note(rep)), ""] + md_table(run_header(rep), _runs_rows(rep))
    sk = _skipped_rows(rep)
    if sk:
        reasons = ", ".join(
            dict.fromkeys(s.get("reason", "").split(" (")[0] for s in rep.get("skipped_shapes", []))
        )
        L += [
            f"## {DETAILS}{len(sk)} shape{'s' * (len(sk) != 1)} the sweep skipped ({md_escape(reasons)})",
            "",
        ]
        L += md_table(["shape", "budget C", "N", "steps", "reason"], sk)
    notes = rep.get("notes", [])
    if any(short_note(n) != n for n in notes):
        L += [f"## {DETAILS}notes in full", ""] + [f"- {md_escape(n)}" for n in notes] + [""]
    L += [f"## {DETAILS}source", "", f"Read from `{rep['sweep_dir']}`.", ""]
    return L


def mfu_note(rep: dict) -> str:
    """Which MFU the run list shows: the planner's convention, and how many runs could not be converted."""
    m = rep.get("mfu_convention") or {}
    if not m:
        return ""
    text = (
        f"MFU is in the planner's convention ({m['name']}: {m['counts']}), the one `python -m analysis plan` "
        "and the cost model report; summary.json's MFU (the trainer's causal count) is converted by the "
        "ratio of the two FLOP counts per token."
    )
    if m.get("runs_without"):
        text += (
            f" {m['runs_without']} run(s) with an MFU lack the model config or FLOPs per token to convert it "
            "and show – (report.json keeps their mfu_trainer)."
        )
    return text


def report_markdown(rep: dict) -> str:
    """The whole report as one Markdown document (report.md; report.html renders it). It opens with
    the verdict (`verdict`), then the first-screen tables, the lead figure, the warnings, the other
    figures and sections, and ends with the collapsed details (every run, skipped shapes, notes)."""
    if rep.get("rl_only"):
        L = [f"# {rep['title']}", "", f"**{md_escape(rep['verdict'])}**", ""]
        L += [f"Runs `{pathlib.Path(rep['sweep_dir']).name}`; generated {rep['generated']}.", ""]
        L += warning_list(rep["warnings"])
        return "\n".join(L + [sec["markdown"] for sec in rep["sections"]]) + "\n"
    note = source_note(rep)
    L = [
        f"# {rep['title']}",
        "",
        f"**{md_escape(rep.get('verdict') or verdict(rep))}**",
        "",
        _source_line(rep),
        "",
        *([f"*{md_escape(note)}*", ""] if note else []),
        *summary_markdown(rep),
    ]
    lead, rest = _lead_and_rest(rep["figures"])
    for name, rel in lead:
        L += figure_markdown(name, rel)
    L += [
        f"## {DETAILS}the same numbers as the command line prints them",
        "",
        "```text",
        *headline(rep),
        "```",
        "",
    ]
    L += ["## Warnings", ""] + (warning_list(rep["warnings"]) or ["none", ""])
    L += ["## Figures", ""]
    for name, rel in rest:
        L += figure_markdown(name, rel)
    hp = hparam_rows(rep)
    if hp:
        L += ["## Hyperparameter sweep", "", rep["hparams"]["message"] + ".", ""] + md_table(hp[0], hp[1:])
    L += hparam_law_markdown(rep)
    h = rep.get("holdout")
    if h:
        L += ["## Held-out runs", ""] + md_table(HOLDOUT_HEADER, _holdout_rows(h))
    if rep.get("downstream"):
        L += _downstream_markdown(rep["downstream"])
    for sec in rep.get("sections", []):
        L += [sec["markdown"], ""]
    L += details_markdown(rep)
    return "\n".join(L)


CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:1.2em auto;padding:0 1em;color:#222}
h1{font-size:1.45em;margin:.2em 0 .4em}h2{font-size:1.2em;margin:1.1em 0 .4em}
p.verdict{font-size:1.3em;line-height:1.45;background:#eef6ef;border-left:5px solid #2a8a4a;
padding:.6em 1em;margin:.4em 0 .8em}
pre{background:#f5f5f5;padding:.8em;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:13px;max-width:100%}
table.summary{table-layout:fixed;width:100%}table.summary td,table.summary th{overflow-wrap:anywhere}
table.summary th:first-child{width:28%}table.summary tr.sec th{background:#eef2f7;text-align:left}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:first-child,th:first-child{text-align:left}
td:last-child,th:last-child{text-align:left}
.warn{background:#fff4e0;border-left:4px solid #e69500;padding:.4em .8em;margin:.3em 0}
details{margin:.8em 0}summary{cursor:pointer;font-weight:600;font-size:1.05em}
figure{margin:1.2em 0}figcaption{font-style:italic;color:#555}img{max-width:100%}
div.ifig{width:100%;min-height:470px}"""


def _img(out: pathlib.Path, rel: str, alt: str) -> str:
    b64 = base64.b64encode((out / rel).read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{b64}'>"


def _kids(inline: Token) -> list[Token]:
    """An inline token's children without empty text (markdown-it leaves some around emphasis)."""
    return [c for c in inline.children or [] if c.type != "text" or c.content]


def _inline_only(tokens: list[Token], i: int, first: str, last: str) -> bool:
    """Whether tokens[i:i+3] is a paragraph whose inline content runs from a `first` token to a
    `last` token (the image alone: first = last = "image")."""
    if i + 2 >= len(tokens) or tokens[i].type != "paragraph_open" or tokens[i].hidden:
        return False
    kids = _kids(tokens[i + 1])
    return bool(kids) and kids[0].type == first and kids[-1].type == last


def _as_figures(state: StateCore) -> None:
    """An image alone in its paragraph -> <figure>; an emphasised paragraph right after it -> the
    figure's <figcaption> (emphasis dropped)."""
    toks, out, i = state.tokens, [], 0
    while i < len(toks):
        if not (_inline_only(toks, i, "image", "image") and len(_kids(toks[i + 1])) == 1):
            out.append(toks[i])
            i += 1
            continue
        fig_open, img, fig_close = toks[i : i + 3]
        fig_open.tag = fig_close.tag = "figure"
        out += [fig_open, img]
        i += 3
        if _inline_only(toks, i, "em_open", "em_close"):
            cap_open, cap, cap_close = toks[i : i + 3]
            cap_open.tag = cap_close.tag = "figcaption"
            cap.children = _kids(cap)[1:-1]
            out += [cap_open, cap, cap_close]
            i += 3
        out.append(fig_close)
    state.tokens = out


def _as_summary(state: StateCore) -> None:
    """Section rows (first cell bold, the rest empty) -> one <th colspan> cell in <tr class="sec">;
    their table gets class="summary"."""
    toks, drop, table, width = state.tokens, set(), None, 0
    for i, t in enumerate(toks):
        if t.type == "table_open":
            table, width = t, 0
        width += t.type == "th_open"  # pipe tables have <th> in their header row only
        if t.type != "tr_open":
            continue
        end = next(k for k in range(i, len(toks)) if toks[k].type == "tr_close")
        cells = [k for k in range(i, end) if toks[k].type == "td_open"]
        lead = _kids(toks[cells[0] + 1]) if cells else []
        if not (
            len(lead) >= 3
            and (lead[0].type, lead[-1].type) == ("strong_open", "strong_close")
            and all(not toks[k + 1].content.strip() for k in cells[1:])
        ):
            continue
        table.attrSet("class", "summary")
        t.attrSet("class", "sec")
        toks[cells[0]].tag = toks[cells[0] + 2].tag = "th"
        toks[cells[0]].attrSet("colspan", str(width))
        toks[cells[0] + 1].children = lead[1:-1]
        drop.update(k for c in cells[1:] for k in (c, c + 1, c + 2))
    state.tokens = [t for k, t in enumerate(toks) if k not in drop]


def _as_warnings(state: StateCore) -> None:
    """A bullet list whose every item is one paragraph starting "warning: " -> one
    <div class="warn"> per item, without the prefix."""
    toks = state.tokens
    for start, t in enumerate(toks):
        if t.type != "bullet_list_open":
            continue
        end = next(
            k
            for k in range(start, len(toks))
            if toks[k].type == "bullet_list_close" and toks[k].level == t.level
        )
        items = [k for k in range(start + 1, end) if toks[k].level == t.level + 1]  # list_item_open / _close
        if not all(
            toks[k + 1].type == "paragraph_open" and toks[k + 2].content.startswith(WARNING_PREFIX)
            if toks[k].nesting == 1
            else toks[k - 1].type == "paragraph_close"
            for k in items
        ):
            continue
        t.hidden = toks[end].hidden = True
        for k in items:
            toks[k].tag = "div"
            toks[k + toks[k].nesting].hidden = True  # the item's paragraph: its opening or closing
            if toks[k].nesting == 1:
                toks[k].attrSet("class", "warn")
                for x in (toks[k + 2], toks[k + 2].children[0]):
                    x.content = x.content.removeprefix(WARNING_PREFIX)


def _as_verdict(state: StateCore) -> None:
    """The paragraph right after the title, wholly bold, is the verdict: <p id="verdict"
    class="verdict"> (the report's one-sentence answer; its CSS sets it apart, so the bold goes)."""
    toks = state.tokens
    for i, t in enumerate(toks):
        if t.type == "heading_close" and t.tag == "h1":
            if _inline_only(toks, i + 1, "strong_open", "strong_close"):
                toks[i + 1].attrSet("id", "verdict")
                toks[i + 1].attrSet("class", "verdict")
                toks[i + 2].children = _kids(toks[i + 2])[1:-1]
            return


def _html(content: str) -> Token:
    tok = Token("html_block", "", 0)
    tok.content = content
    return tok


def _as_details(state: StateCore) -> None:
    """An h2 whose text starts with DETAILS ("Details: ") opens a collapsed <details> whose
    <summary> is the rest of its text; it closes before the next h1 or h2, or at the end."""
    out, open_ = [], False
    toks, i = state.tokens, 0
    while i < len(toks):
        t = toks[i]
        if t.type == "heading_open" and t.tag in ("h1", "h2"):
            if open_:
                out.append(_html("</details>\n"))
                open_ = False
            text = toks[i + 1].content
            if t.tag == "h2" and text.startswith(DETAILS):
                summary = text.removeprefix(DETAILS)
                out.append(
                    _html(f"<details><summary>{html.escape(summary[:1].upper() + summary[1:])}</summary>\n")
                )
                open_ = True
                i += 3
                continue
        out.append(t)
        i += 1
    if open_:
        out.append(_html("</details>\n"))
    state.tokens = out


def markdown_to_html(md: str, out: pathlib.Path, interactive_specs: dict[str, dict] | None = None) -> str:
    """Markdown as HTML, by markdown-it-py (CommonMark plus pipe tables; raw HTML in the Markdown is
    escaped, not passed through) with the module's verdict, figure, summary-table, warning and
    details conventions. Images are embedded as base64 so the page stays self-contained; an image
    whose path is a key of `interactive_specs` becomes that interactive figure's element instead
    (analysis/report/interactive.py; `html_page` adds the script that draws it); an image whose file
    is missing becomes a line saying so."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    specs = interactive_specs or {}

    def image(_renderer, tokens, idx, _options, _env):
        tok = tokens[idx]
        rel, alt = urllib.parse.unquote(tok.attrGet("src") or ""), tok.content
        if rel in specs:
            return interactive.element(pathlib.PurePath(rel).stem)
        if (out / rel).is_file():
            return _img(out, rel, alt)
        return f"(missing figure {html.escape(rel)})"

    renderer.add_render_rule("image", image)
    for rule in (_as_verdict, _as_figures, _as_summary, _as_warnings, _as_details):
        renderer.core.ruler.push(rule.__name__.strip("_"), rule)
    return renderer.render(md)


def html_page(
    title: str, md: str, out: pathlib.Path, interactive_specs: dict[str, dict] | None = None
) -> str:
    """report.html: the Markdown rendered into a page with the report's CSS; with
    `interactive_specs` (Plotly figures by the PNG path they replace), plotly.js and the figures'
    script at the end of the body, after all the text, so the page's first screen is the verdict."""
    specs = {pathlib.PurePath(rel).stem: spec for rel, spec in (interactive_specs or {}).items()}
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body>\n{markdown_to_html(md, out, interactive_specs)}"
        f"{interactive.scripts(specs)}</body></html>\n"
    )


def write_report(rep: dict, out: pathlib.Path, interactive_specs: dict[str, dict] | None = None) -> None:
    """report.md and report.html in `out`: the Markdown written once, the HTML rendered from it
    (with `interactive_specs`' figures in place of their PNGs)."""
    md = report_markdown(rep)
    write_text_atomic(out / "report.md", md)  # whole or not at all (a full disk keeps the previous one)
    write_text_atomic(out / "report.html", html_page(rep["title"], md, out, interactive_specs))
