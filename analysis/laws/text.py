"""A fit as text: the lines `python -m analysis fit` prints after the fit's own summary
(`FitResult.summary()`): which N it counts, the compute-optimal allocation, the held-out check."""

from __future__ import annotations

from analysis.core.enums import NParams


def fit_lines(fit, result: dict, budgets: list[float] | None = None) -> list[str]:
    """The lines after the summary, from the fit and its JSON (`result`: `FitResult.to_dict`)."""
    return n_params_lines(fit) + allocation_lines(result, budgets) + holdout_lines(result.get("holdout"))


def n_params_lines(fit) -> list[str]:
    """Which parameter count N is, when the fit says."""
    kind = fit.n_params
    if kind is None:
        return []
    what = {
        NParams.NON_EMBEDDING: "non-embedding parameters",
        NParams.ACTIVE: "active (dense-equivalent) parameters",
    }.get(kind, "all parameters")
    return [f"  N = {what} (column {fit.columns.get('N', '?')}); --n-params {kind}"]


def allocation_lines(result: dict, budgets: list[float] | None = None) -> list[str]:
    """The allocation exponents, the frontier's method and, with budgets, N*, D* and the best
    loss at each."""
    if "allocation" not in result:
        return []
    al = result["allocation"]
    ci = al.get("a_ci", [float("nan")] * 2)
    out = [f"  allocation: N* ~ C^{al['a']:.4f} (CI [{ci[0]:.4f}, {ci[1]:.4f}]), D* ~ C^{al['b']:.4f}"]
    frontier = result.get("frontier")
    if frontier is not None:
        out.append(f"  best loss per budget: {frontier['method']}, by {frontier['reason']}")
    for r in al["budgets"] if budgets else []:
        band = r.get("loss_interval")
        iv = f" [{band[0]:.4f}, {band[1]:.4f}]" if band else ""
        out.append(
            f"  at C = {r['C']:.3g}: N* = {r['N_opt']:.4g}, D* = {r['D_opt']:.4g}, "
            f"best loss {r['loss']:.4f}{iv} ({r['loss_method']})"
        )
    return out


def holdout_lines(h: dict | None) -> list[str]:
    """The held-out runs' errors and how many fell inside their prediction intervals."""
    if h is None:
        return []
    coverage = (
        f"; {h['coverage']:.0%} inside their 90% prediction intervals (mean width "
        f"{h['mean_interval_rel_width']:.2%})"
        if "coverage" in h
        else ""
    )
    return [
        f"  held out {h['n_points']} runs above C={h['threshold']:.3g}: "
        f"mean |rel err| {h['mean_rel_error']:.3%}, max {h['max_rel_error']:.3%}{coverage}"
    ]
