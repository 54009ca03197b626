"""Fit one RL recipe (one or more seeds) and produce the JSON-ready result.

This is the layer the CLI (`fit-rl`), the RL report and notebooks call. It applies the burn-in,
pools the seeds for the main fit, fits each seed on its own for the seed-to-seed spread,
optionally fits on the first part of the compute budget and scores the extrapolation on the
rest, and turns flags into the only honest statement left when they fire: the gain per decade
of compute observed so far, not a ceiling.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from analysis.rl.curves import RLCurve, burn_in_cutoff, fit_points, variance_collapsed
from analysis.rl.laws import RLPoints, SigmoidFit, fit_rl_law, gain_per_decade
from models.base.errors import AnalysisError


@dataclasses.dataclass(frozen=True)
class RLFitOptions:
    """How to fit: burn-in (compute, or fraction of final compute), R0 handling ("fit" | "start" |
    a number), CI method (and its resamples), and the optional fit-until fraction."""

    burn_in: float | None = None
    burn_in_frac: float | None = None
    r0: str | float = "fit"
    ci_method: str = "profile"
    fit_until_frac: float | None = None
    n_boot: int = 200


def _concat(pts: Sequence[RLPoints]) -> RLPoints:
    s = np.concatenate([p.s if p.s_known else np.full(p.s.shape, np.nan) for p in pts])
    return RLPoints.make(np.concatenate([p.C for p in pts]), np.concatenate([p.y for p in pts]), s)


def _r0_value(opts: RLFitOptions, curves: Sequence[RLCurve]) -> float | None:
    if opts.r0 == "fit":
        return None
    if opts.r0 == "start":
        return float(np.mean([c.pass_rate[0] for c in curves]))  # the measured start
    try:
        v = float(opts.r0)
    except (TypeError, ValueError):
        raise AnalysisError(f"--r0 must be fit, start or a number in [0, 1] (got {opts.r0!r})") from None
    if not 0 <= v <= 1:
        raise AnalysisError(f"--r0 must lie in [0, 1] (got {v})")
    return v


def recipe_points(
    curves: Sequence[RLCurve], opts: RLFitOptions = RLFitOptions(), until_frac: float | None = None
) -> tuple[RLPoints, list[RLPoints], float | None]:
    """(the pooled points the fit uses: past each curve's burn-in, up to `until_frac` of its final
    compute, with the start evaluation when R0 is fitted; the held-out points per curve; R0 when
    fixed)."""
    r0 = _r0_value(opts, curves)
    fit_pts, held = [], []
    for c in curves:
        cut = burn_in_cutoff(c, opts.burn_in, opts.burn_in_frac)
        until = None if until_frac is None else until_frac * c.final_compute
        fit_pts.append(fit_points(c, cut, until, keep_start=r0 is None))
        if until is not None:
            m = c.compute > until
            held.append(RLPoints.make(c.compute[m], c.pass_rate[m], c.stderr[m]))
    return _concat(fit_pts), held, r0


def _fit(
    curves: Sequence[RLCurve], opts: RLFitOptions, until_frac: float | None
) -> tuple[SigmoidFit, RLPoints, list[RLPoints]]:
    """Fit the pooled points of `curves`; returns (fit, fit points, held-out points per curve)."""
    pooled, held, r0 = recipe_points(curves, opts, until_frac)
    n_pos = int((pooled.C > 0).sum())
    if n_pos < 4:
        what = f" before {until_frac:g} of the final compute" if until_frac else ""
        raise AnalysisError(
            f"only {n_pos} evaluation point(s) after the burn-in{what}; need "
            "at least 4 (evaluate more often, or lower --burn-in)"
        )
    fit = fit_rl_law(pooled, r0=r0, ci_method=opts.ci_method, n_boot=opts.n_boot)
    flags = list(fit.flags)
    if "unstable" not in flags and any(
        variance_collapsed(c, None if until_frac is None else until_frac * c.final_compute) for c in curves
    ):
        flags.append("unstable")
        fit = dataclasses.replace(fit, flags=tuple(flags))
    return fit, pooled, held


def _prediction(fit: SigmoidFit, curves: Sequence[RLCurve], held: Sequence[RLPoints]) -> dict[str, Any]:
    errs, preds, actual = [], [], []
    for c, h in zip(curves, held):
        if len(h) == 0:
            raise AnalysisError(f"{c.name}: no evaluation after the fit-until cutoff to predict")
        errs.append(np.abs(fit.predict(h.C) - h.y))
        preds.append(float(fit.predict(np.array([c.final_compute]))[0]))
        actual.append(float(c.pass_rate[-1]))
    fp, fa = float(np.mean(preds)), float(np.mean(actual))
    return {
        "final_pred": fp,
        "final_actual": fa,
        "final_abs_error": abs(fp - fa),
        "mean_abs_error": float(np.mean(np.concatenate(errs))),
        "n_heldout": int(sum(len(h) for h in held)),
        "withheld": bool(fit.flags),
    }


def _summary(fit: SigmoidFit, pts: RLPoints) -> dict[str, Any]:
    flagged = bool(fit.flags)
    gpd = gain_per_decade(pts.take(pts.C > 0)) if (pts.C > 0).sum() >= 3 else None
    verdict = f"ceiling A = {fit.params['A']:.3f} [{fit.ci['A'][0]:.3f}, {fit.ci['A'][1]:.3f}]"
    if flagged:
        verdict = f"no ceiling: {', '.join(fit.flags)}"
        verdict += (
            f"; observed gain {gpd['value']:+.3f} ± {gpd['stderr']:.3f} pass rate per 10x compute"
            if gpd
            else ""
        )
    return {
        "law": fit.law,
        "params": fit.params,
        "ci": fit.ci,
        "flags": list(fit.flags),
        "ceiling": None if flagged else fit.params["A"],
        "gain_per_decade": gpd,
        "verdict": verdict,
        "chi2": fit.chi2,
        "dof": fit.dof,
        "n_points": fit.n_points,
        "fit_range": list(fit.fit_range),
        "ci_method": fit.ci_method,
    }


def fit_recipe(curves: Sequence[RLCurve], opts: RLFitOptions = RLFitOptions()) -> dict[str, Any]:
    """Pooled fit of all seeds (+ per-seed fits and their spread when there are several)."""
    if not curves:
        raise AnalysisError("no input curves")
    if opts.fit_until_frac is not None and not 0 < opts.fit_until_frac < 1:
        raise AnalysisError("--fit-until-frac must be in (0, 1)")
    fit, pts, held = _fit(curves, opts, opts.fit_until_frac)
    out: dict[str, Any] = {
        "inputs": [c.name for c in curves],
        **_summary(fit, pts),
        "burn_in": [burn_in_cutoff(c, opts.burn_in, opts.burn_in_frac) for c in curves],
        "r0_mode": opts.r0,
        "fit_until_frac": opts.fit_until_frac,
    }
    if opts.fit_until_frac is not None:
        out["prediction"] = _prediction(fit, curves, held)
    if len(curves) > 1:
        per_seed = []
        for c in curves:
            f, p, h = _fit([c], opts, opts.fit_until_frac)
            row = {"input": c.name, **_summary(f, p)}
            if opts.fit_until_frac is not None:
                row["prediction"] = _prediction(f, [c], h)
            per_seed.append(row)
        out["per_seed"] = per_seed
        spread = {k: _spread([r["params"][k] for r in per_seed]) for k in ("A", "B", "C_mid")}
        spread["gain_per_decade"] = _spread([(r.get("gain_per_decade") or {}).get("value") for r in per_seed])
        out["seed_spread"] = {**spread, "n_flagged": sum(bool(r["flags"]) for r in per_seed)}
    return out


def _spread(values: Sequence[float | None]) -> dict[str, float]:
    v = np.array([x for x in values if x is not None and math.isfinite(x)], np.float64)
    return {
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
        "min": float(v.min()),
        "max": float(v.max()),
        "n": int(v.size),
    }
