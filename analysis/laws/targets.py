"""A fitted law's loss for runs not yet trained (`python -m analysis fit --predict TARGETS.csv`).

`check_targets` checks a TARGETS table against the inputs of the law(s) before any fitting;
`predict_targets` gives one entry per row, in row order: its inputs, the predicted loss and its
90% prediction interval (`{N, D, U?, experts?, loss, interval: [lo, hi]}`); `prediction_lines`
prints them.
Every error is one line starting with `where` (the flag and the file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from analysis.core.table import ALIASES, resolve_inputs
from analysis.core.validation import PREDICTION_LEVEL
from analysis.laws.registry import get_law
from models.base.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

# Inputs a prediction entry repeats, in this order, besides the law's own (N and D whenever known)
PREDICTION_ROLES = ("N", "D", "U", "C", "x", "experts")


def target_inputs(law, targets: pd.DataFrame, columns: dict[str, str], where: str):
    """(role -> array, role -> column) of `law`'s inputs in TARGETS, found as in the fit: a column
    the fit used (or --n-col & co. named) when TARGETS has it, else the usual spellings; D from C / 6N.
    Any error is one line naming the file and the law."""
    cols = {
        role: name
        for role, name in columns.items()
        if role in ALIASES and role != "loss" and not name.startswith("<") and name in targets.columns
    }
    try:
        return resolve_inputs(targets, law.inputs, cols)
    except AnalysisError as e:
        raise AnalysisError(f"{where}: law {law.name}: {e}") from None


def check_targets(
    targets: pd.DataFrame, law_names: Sequence[str], columns: dict[str, str], where: str
) -> None:
    """Raise on the first input TARGETS lacks among those every law of `law_names` needs (the
    candidates of --law auto: the chosen law's own inputs are checked after the fit)."""
    laws = [get_law(name) for name in law_names]
    for law in laws:
        if all(all(role in other.inputs for other in laws) for role in law.inputs):
            target_inputs(law, targets, columns, where)


def predict_targets(fit, targets: pd.DataFrame, where: str) -> list[dict]:
    """One entry per TARGETS row, in row order: the inputs ({N, D, U (data-constrained laws)...}),
    the predicted `loss` (FitResult.predict) and its 90% prediction `interval` [lo, hi]
    (FitResult.predict_interval: parameter noise + run scatter + extrapolation drift)."""
    law = fit.law_obj
    vals, used = target_inputs(law, targets, fit.columns, where)
    loss = fit.predict(targets, {r: c for r, c in used.items() if not c.startswith("<")})
    try:
        _, lo, hi = fit.predict_interval(vals)
    except AnalysisError as e:
        raise AnalysisError(f"{where}: {e}") from None
    shown = [r for r in PREDICTION_ROLES if r in vals and (r in law.inputs or r in ("N", "D"))]
    return [
        {
            **{r: float(vals[r][i]) for r in shown},
            "loss": float(loss[i]),
            "interval": [float(lo[i]), float(hi[i])],
        }
        for i in range(len(targets))
    ]


def prediction_lines(rows: list[dict], path: str) -> list[str]:
    """The predictions as a short table (every row; TARGETS files are user queries, not sweeps)."""
    roles = [k for k in rows[0] if k not in ("loss", "interval")]
    lines = [
        f"  predictions for {path} ({PREDICTION_LEVEL:.0%} prediction intervals):",
        "    " + "".join(f"{r:>11}" for r in roles) + f"{'loss':>10}  interval",
    ]
    for row in rows:
        lo, hi = row["interval"]
        cells = "".join(f"{row[r]:>11.4g}" for r in roles)
        lines.append(f"    {cells}{row['loss']:>10.4f}  [{lo:.4f}, {hi:.4f}]")
    return lines
