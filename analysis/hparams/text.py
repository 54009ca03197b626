"""What `fit-hparams` prints of a fit of the learning-rate / batch-size laws: the laws' predictions
at the asked scales, the warnings and the report lines (as analysis/laws/text.py for the point laws)."""

from __future__ import annotations

import math

import numpy as np

MAX_WARNED = 10  # rungs left out that get a warning line each (per parameter); the rest are counted


def predictions(laws, rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        for param in laws.params:
            v, lo, hi = laws.predict(param, r["N"], r["D"], r.get("C"))
            out.append({**r, "param": param, "value": v, "interval": [lo, hi]})
    return out


def _fmt_recipe(laws, N: float, D: float, C: float | None) -> str:
    from analysis.hparams.laws import short_name  # loaded when run, as in run()

    parts = []
    for param in laws.params:
        v, lo, hi = laws.predict(param, N, D, C)
        parts.append(f"{short_name(param)} = {v:.3g} [{lo:.3g}, {hi:.3g}]")
    return f"at N = {N:.3g}, D = {D:.3g}: " + ", ".join(parts) + " (90%)"


def warning_lines(fit) -> list[str]:
    """One `warning:` line per rung left out with 2 values or no located optimum (at most
    MAX_WARNED per parameter, then a count), one for the rungs that did not sweep the parameter."""
    lines = []
    for p, f in fit.fits.items():
        partial = [s for s in f.skipped if s.n_values > 1]
        lines += [f"warning: {p}: rung {s.describe()}; left out" for s in partial[:MAX_WARNED]]
        if len(partial) > MAX_WARNED:
            lines.append(
                f"warning: {p}: {len(partial) - MAX_WARNED} more rung(s) left out for too few values "
                "or no located optimum (each is in the JSON's skipped_rungs)"
            )
        single = len(f.skipped) - len(partial)
        if single:
            lines.append(f"warning: {p}: {single} rung(s) with one value of {p} (not swept there) left out")
    return lines


def report_lines(fit, targets: list[dict] | None, choices: dict | None = None) -> list[str]:
    """The text output: the method per parameter, the laws, then a recipe line, then the rungs and
    penalty."""
    laws = fit.laws()
    lines = ["hyperparameter laws (forms chosen by leave-largest-out error; 90% intervals):"]
    lines += [f"method: {c.summary()}" for c in (choices or {}).values()]
    for p, f in fit.fits.items():
        h = f.holdout
        held = (
            f"{'' if h.held_out.startswith('leave-one-out') else 'held out '}{h.held_out}: "
            f"mean |dlog10| {np.mean([abs(r['dlog10']) for r in h.rungs]):.3f} "
            f"(forms: {', '.join(f'{k} {v:.3f}' for k, v in h.errors.items() if v is not None)})"
            if h
            else "not scored: too few rungs to leave any out"
        )
        lines.append(
            f"  {laws.describe(p)}   [{f.law.n_rungs} rungs, "
            f"scatter x{math.exp(f.law.scatter_sd):.2f}; {held}]"
        )
    at = targets[0] if targets else None
    if at is None:
        r = max((r for f in fit.fits.values() for r in f.rungs), key=lambda r: (r.N, r.D))
        at = {"N": r.N, "D": r.D, "C": r.C}
    lines.append("  " + _fmt_recipe(laws, at["N"], at["D"], at.get("C")))
    for p, f in fit.fits.items():
        pen = f.penalty()
        k2 = pen["k"].index(2.0)
        k4 = pen["k"].index(4.0)
        lines.append(
            f"{p}: {len(f.rungs)} rungs located ({f.n_excluded} at an edge or flat, left out of the law"
            f"{f'; {len(f.skipped)} more without an optimum, left out' if f.skipped else ''}); "
            f"loss noise {f.loss_noise:.2%} ({f.loss_noise_source}); penalty at 2x the optimum "
            f"+{pen['loss_increase'][k2]:.2%}, at 4x +{pen['loss_increase'][k4]:.2%} (median over rungs)"
        )
        for r in f.rungs:
            if r.flag:
                lines.append(f"  N={r.N:.3g}, D={r.D:.3g}: {r.flag}")
    lines += [f"note: {n}" for n in fit.notes]
    return lines
