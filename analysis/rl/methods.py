"""The RL family's method in the one registry (`analysis.core.methods`): `sigmoid`, ScaleRL's
saturating law of pass rate against RL compute (Khatri et al. 2025), the default and the one
choice of `fit-rl --law`. No backtest protocol scores it: its intervals and flags are judged on
secret laws (docs/rl.md; `tests/test_rl_laws.py`).

`fit(table, burn_in=None, burn_in_frac=None, r0="fit", ci_method="profile", fit_until_frac=None,
n_boot=200, seed=0)` fits a reward-vs-compute curve table (columns compute, pass_rate, optional
stderr: what `fit-rl FILE.csv` reads) as `fit-rl` does; the record's `.to_dict()` is fit-rl's JSON
and `.summary()` its verdict. `predict(record, {"C": ...})` is the pass rate at compute C with its
90% interval: the pointwise band of the sigmoids refitted on the evaluations resampled with
replacement (`laws.bootstrap_params`). `plot` draws the evaluations, the fit and that band.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core.methods import Family, Method, Prediction, Role, register
from analysis.rl import laws
from analysis.rl.curves import table_curve
from analysis.rl.fitting import RLFitOptions, fit_recipe, recipe_points
from models.base.errors import AnalysisError


@dataclasses.dataclass(frozen=True)
class RLRecipeFit:
    """fit-rl's result for one curve (`result`) and the bootstrap parameter rows behind `predict`."""

    result: dict[str, Any]
    rows: np.ndarray = dataclasses.field(repr=False)

    def summary(self) -> str:
        return f"{self.result['law']} fit: {self.result['verdict']}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.result)


def fit(table: pd.DataFrame | None, seed: int = 0, **options: Any) -> RLRecipeFit:
    if table is None:
        raise AnalysisError("the RL law is fitted to a table of compute and pass_rate")
    unknown = set(options) - {f.name for f in dataclasses.fields(RLFitOptions)}
    if unknown:
        raise AnalysisError(f"unknown RL fit option(s) {sorted(unknown)}")
    curve, opts = table_curve(table), RLFitOptions(**options)
    result = fit_recipe([curve], opts)
    pts, _, r0 = recipe_points([curve], opts, opts.fit_until_frac)
    return RLRecipeFit(result, laws.bootstrap_params(pts, r0, opts.n_boot, seed))


def predict(record: RLRecipeFit, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """The pass rate at compute `C` with its 90% interval (the bootstrap band of the curve)."""
    if "C" not in inputs:
        raise AnalysisError("the RL law predicts the pass rate at RL compute C (predict(C=...))")
    C = np.asarray(inputs["C"], float)
    lo, hi = laws.band(record.rows, C.ravel())
    return Prediction(laws.predict(record.result["params"], C), lo.reshape(C.shape), hi.reshape(C.shape))


def plot(record: RLRecipeFit, table: pd.DataFrame | None, ax: Any = None):
    """The evaluations (with their stderr), the fitted sigmoid and its 90% band, against compute."""
    from matplotlib.figure import Figure  # matplotlib only when a figure is drawn (start-up time)

    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    lo_c, hi_c = record.result["fit_range"]
    if table is not None:
        c = table_curve(table)
        ax.errorbar(c.compute, c.pass_rate, yerr=np.nan_to_num(c.stderr), fmt="o", ms=3, alpha=0.6, lw=0.6)
    grid = np.geomspace(lo_c, 3 * hi_c, 200)
    p = predict(record, {"C": grid})
    ax.fill_between(grid, p.lo, p.hi, alpha=0.2, lw=0, label="90% band")
    ax.plot(grid, p.mean, lw=1.5, label=f"sigmoid: {record.result['verdict']}")
    ax.set_xscale("log")
    ax.set_xlabel("RL compute C")
    ax.set_ylabel("pass rate")
    ax.legend(fontsize=7)
    return fig


register(
    Method(
        laws.LAW,
        Family.RL,
        (),
        Role.DEFAULT,
        fit,
        predict,
        plot,
        "ScaleRL's sigmoid R0 + (A - R0) / (1 + (C_mid / C)^B) (Khatri et al. 2025)",
    )
)
