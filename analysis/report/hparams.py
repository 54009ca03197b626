"""The report's "Hyperparameter law" section: the fitted laws of the optimal hyperparameters.

`python -m analysis report SWEEP_DIR --hparams HP.json` (or an HP.json found beside the sweep:
SWEEP_DIR/hparams.json, then SWEEP_DIR/../hparams.json) adds, from a `python -m analysis
fit-hparams` result:

* each parameter's law (expression, form, 90% CIs of its exponents), the rungs it was fitted on
  and those left out (optimum at the grid's edge, or a flat rung);
* its leave-largest-out error (the law fitted without the largest rungs predicting them: |log10|
  error of the optimum and the loss lost by training at the predicted value);
* the loss penalty curve (loss increase at k x the optimum, from each rung's quadratic) as a
  figure (`figures.hparam_penalty`), and the rung optima against the law (`figures.hparam_law`);
* the laws' values at the report's requested budgets (at the Chinchilla law's N*, D*), and the
  planning sections' recipe (analysis/planning/recipe.py) when the report plans.

Everything lands in report.json under `hparams.law`.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Sequence

from analysis.planning.recipe import HparamSet, load_hparam_set, predict
from models.base.errors import AnalysisError
from models.base.rundir import HPARAMS_FILE  # the name `report` looks for beside a sweep

# The issue's own-ladder target for the largest shape's predicted optimum: within x1.5 of the
# measured one; a held-out error beyond it is a warning.
HOLDOUT_RATIO_TARGET = 1.5
PENALTY_AT = (2.0, 4.0)  # the multiples of the optimum the section's table quotes


def find_hparams(
    sweep_dir: pathlib.Path, given: str | pathlib.Path | None
) -> tuple[pathlib.Path | None, str]:
    """(HP.json path or None, how it was found: "flag" / "auto")."""
    if given is not None:
        return pathlib.Path(given), "flag"
    for cand in (sweep_dir / HPARAMS_FILE, sweep_dir.parent / HPARAMS_FILE):
        if cand.is_file():
            return cand, "auto"
    return None, "auto"


def load_laws(sweep_dir: pathlib.Path, given, warn: list[str]) -> tuple[HparamSet | None, str]:
    """(the laws, how they were found: "flag" / "auto"), (None, ...) without an HP.json. A bad
    file given with --hparams is an error (one line, raised before any fitting); one found
    automatically is a warning."""
    path, how = find_hparams(sweep_dir, given)
    if path is None:
        return None, how
    try:
        return load_hparam_set(path), how
    except AnalysisError as e:
        if how == "flag":
            raise
        warn.append(f"hyperparameter laws {path} (found beside the sweep) not used: {e}")
        return None, how


def law_section(
    hp: HparamSet | None, how: str, law: dict | None, requested: Sequence[float], warn: list[str]
) -> dict | None:
    """report.json's `hparams.law` (None without laws); `law` is report.json's Chinchilla law
    (its allocation gives the requested budgets' N*, D*)."""
    if hp is None:
        return None
    raw = json.loads(pathlib.Path(hp.source).read_text())
    sec = {
        "source": hp.source,
        "found": how,
        "level": raw.get("level", 0.9),
        "params": {p: _param_summary(raw, p, hp) for p in hp.laws.params},
        "at_budgets": _at_budgets(hp, law, requested),
    }
    warn += _warnings(sec)
    return sec


def _param_summary(raw: dict, param: str, hp: HparamSet) -> dict[str, Any]:
    """One law: expression, form, CIs, rungs (used / left out), holdout, penalty, and each rung's
    optimum beside the law's value there (`law`)."""
    rungs = [r for r in raw.get("rungs") or [] if r.get("param") == param]
    flags = [r.get("flag") for r in rungs]
    law = (raw.get("laws") or {}).get(param, {})
    hold = (raw.get("holdout") or {}).get(param)
    return {
        "expression": (raw.get("expression") or {}).get(param) or law.get("expression"),
        "form": (raw.get("law_form") or {}).get(param) or law.get("form"),
        "ci": (raw.get("ci") or {}).get(param),
        "n_rungs_fitted": law.get("n_rungs"),
        "n_rungs_located": len(rungs),
        "n_edge": sum(1 for f in flags if f and "edge" in str(f)),
        "n_flat": sum(1 for f in flags if f and "flat" in str(f)),
        "holdout": None if hold is None else {k: v for k, v in hold.items() if k != "rungs"},
        "holdout_rungs": [] if hold is None else hold.get("rungs", []),
        "penalty": (raw.get("penalty") or {}).get(param),
        "rungs": [dict(_rung(r), law=_law_at(hp, param, r)) for r in rungs],
    }


def _rung(r: dict) -> dict[str, Any]:
    return {k: r.get(k) for k in ("N", "D", "C", "optimum", "interval", "best_tried", "flag")}


def _law_at(hp: HparamSet, param: str, r: dict) -> float | None:
    """The law's optimum at a rung's (N, D, C); None when the rung lacks them."""
    try:
        n, d, c = float(r["N"]), float(r["D"]), float(r["C"])
    except (KeyError, TypeError, ValueError):
        return None
    return hp.laws.predict(param, n, d, c)[0]


def _at_budgets(hp: HparamSet, law: dict | None, requested: Sequence[float]) -> list[dict]:
    """Each law's optimum at the Chinchilla law's (N*, D*) of every requested budget."""
    rows = ((law or {}).get("allocation") or {}).get("budgets") or []
    out = []
    for r in rows:
        n, d = r.get("N_opt"), r.get("D_opt")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (n, d)):
            continue
        for p in hp.laws.params:
            pr = predict(hp.laws, p, n, d)
            out.append(
                {"C": r["C"], "N": n, "D": d, "param": p, "value": pr.value, "interval": pr.interval()}
            )
    return out


def _warnings(sec: dict) -> list[str]:
    """Edge / flat rungs and a held-out error beyond the x1.5 target."""
    out = []
    for p, s in sec["params"].items():
        if s["n_edge"] or s["n_flat"]:
            out.append(
                f"hyperparameter law {p}: {s['n_edge']} rung(s) with the optimum at the edge of the tried "
                f"range and {s['n_flat']} flat one(s) of {s['n_rungs_located']} left out of the law; widen "
                "the swept range there"
            )
        ratio = (s["holdout"] or {}).get("max_ratio")
        if isinstance(ratio, (int, float)) and ratio > HOLDOUT_RATIO_TARGET:
            out.append(
                f"hyperparameter law {p}: the law fitted without the largest rungs misses their optimum by "
                f"up to x{ratio:.2f} (target x{HOLDOUT_RATIO_TARGET:g}); treat its extrapolation with care"
            )
    return out


def _g(v: Any, fmt: str = ".4g") -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def _penalty_at(pen: dict | None, k: float) -> str:
    """The median relative loss increase at k x the optimum, as text."""
    if not pen:
        return "–"
    for kk, v in zip(pen.get("k", []), pen.get("loss_increase", [])):
        if math.isclose(kk, k) and isinstance(v, (int, float)):
            return f"+{100 * v:.2f}%"
    return "–"


LAW_HEADER = [
    "parameter",
    "law",
    "exponent 90% CIs",
    "rungs fitted / located",
    "held out",
    "held-out mean abs log10 error",
    "held-out loss lost",
    *(f"loss at {k:g}x optimum" for k in PENALTY_AT),
]


def law_rows(sec: dict) -> list[list[str]]:
    """One row per parameter of the law table (LAW_HEADER)."""
    rows = []
    for p, s in sec["params"].items():
        ci = s["ci"] or {}
        exps = ", ".join(f"{k} [{_g(v[0], '.3f')}, {_g(v[1], '.3f')}]" for k, v in ci.items() if k != "c")
        h = s["holdout"] or {}
        err = h.get("mean_abs_dlog10")
        rows.append(
            [
                p,
                f"{s['expression']} ({s['form']})",
                exps or "–",
                f"{s['n_rungs_fitted']} / {s['n_rungs_located']}",
                h.get("held_out") or "none (too few sizes)",
                "–" if err is None else f"{_g(err, '.3f')} (max x{_g(h.get('max_ratio'), '.2f')})",
                "–" if h.get("mean_loss_penalty") is None else f"+{100 * h['mean_loss_penalty']:.3f}%",
                *(_penalty_at(s["penalty"], k) for k in PENALTY_AT),
            ]
        )
    return rows


def budget_rows(sec: dict) -> list[list[str]]:
    """Header + one row per (budget, parameter): the law's optimum at N*, D*."""
    if not sec["at_budgets"]:
        return []
    rows = [["C (FLOPs)", "N*", "D* (tokens)", "parameter", "optimum", "90% interval"]]
    for r in sec["at_budgets"]:
        rows.append(
            [
                _g(r["C"], ".3g"),
                _g(r["N"], ".4g"),
                _g(r["D"], ".4g"),
                r["param"],
                _g(r["value"]),
                f"[{_g(r['interval'][0])}, {_g(r['interval'][1])}]",
            ]
        )
    return rows


def intro(sec: dict) -> str:
    """The section's opening paragraph (Markdown): where the laws come from and how they were chosen."""
    how = "given with --hparams" if sec["found"] == "flag" else "found beside the sweep"
    return (
        f"Laws of the optimal hyperparameters from `python -m analysis fit-hparams` (`{sec['source']}`, "
        f"{how}): each rung's optimum is the vertex of a quadratic in log(value) through its best run "
        "and neighbours, and the law is the power-law form with the lowest leave-largest-out error "
        f"(fitted without the largest rungs, predicting them). Intervals are {100 * sec['level']:.0f}%."
    )


def headline(sec: dict | None) -> list[str]:
    """One line per law for the report's headline."""
    if not sec:
        return []
    out = []
    for p, s in sec["params"].items():
        h = s["holdout"] or {}
        err = h.get("mean_abs_dlog10")
        out.append(
            f"hyperparameter law {s['expression']} ({s['n_rungs_fitted']} rungs"
            + (
                ""
                if err is None
                else f"; held-out |log10 error| {err:.3f}, max x{h.get('max_ratio', math.nan):.2f}"
            )
            + f"; {_penalty_at(s['penalty'], 2.0)} loss at 2x the optimum)"
        )
    return out
