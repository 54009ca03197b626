"""The point-law family's methods in the one registry (`analysis.core.methods`).

Each registered law of `analysis.laws.registry` that earns its place (docs/backtests.md) is a
method: `fit(table, law=...)` is `fit_law`, `auto` the choice among the Chinchilla forms (and the
data-constrained ones when the runs repeat their data), `moe` the choice among the MoE forms. A
law a user registers with `register_law` becomes a candidate here too (`register_point_law`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from analysis.core.methods import Family, Method, Prediction, Role, get, methods, register
from analysis.core.table import resolve_inputs
from analysis.laws import cpt as _cpt  # noqa: F401 - registers `cpt` and its baseline (continual pre-training)
from analysis.laws.allocation import ScalingLaw
from analysis.laws.choice import BASELINE
from analysis.laws.fitting import FitResult, fit_law
from analysis.laws.moe import fit_moe
from analysis.laws.registry import ON_REGISTER, USER_LAWS, get_law
from analysis.laws.selection import AUTO, fit_chosen, repeats
from models.base.errors import AnalysisError

LOSS_PROTOCOLS = ("budget", "size", "epochs")
# name -> (protocols, role, one line)
POINT_METHODS: dict[str, tuple[tuple[str, ...], Role, str]] = {
    "chinchilla": (
        LOSS_PROTOCOLS,
        Role.DEFAULT,
        "Hoffmann et al. 2022: E + A/N^alpha + B/D^beta",
    ),
    "chinchilla_tied": (
        LOSS_PROTOCOLS,
        Role.CANDIDATE,
        "Chinchilla with beta = alpha (Gadre et al. 2024)",
    ),
    AUTO: (
        LOSS_PROTOCOLS,
        Role.DEFAULT,
        "Chinchilla unless a form beats it on every fold of the runs' own backtests (fit's default "
        "on repeated data)",
    ),
    "data_constrained": (("epochs", "size"), Role.CANDIDATE, "Muennighoff et al. 2023, eq. 5"),
    "data_constrained_d": (("epochs", "size"), Role.CANDIDATE, "Muennighoff et al.'s effective data alone"),
    "moe": (("moe",), Role.DEFAULT, "the MoE form that extrapolated best in N on the runs' own folds"),
    "moe_joint_n": (("moe",), Role.CANDIDATE, "Ludziejewski et al. 2025 at one token count"),
    "moe_joint": (("moe",), Role.CANDIDATE, "Ludziejewski et al. 2025's joint (N, D, E) law"),
}


def candidates(repeated: bool = False) -> tuple[str, ...]:
    """`auto`'s candidates, simplest (fewest parameters) first, read from the method registry: the
    point laws scored by the `budget` protocol (`chinchilla_tied`, `chinchilla`) or, when the runs
    repeat their data, by the `epochs` protocol (the data-constrained forms too). A law a user
    registers with `protocols=("budget",)` joins them."""
    scored = methods(Family.POINT, "epochs" if repeated else "budget")
    names = [m.name for m in scored if m.role != Role.BASELINE and m.name not in (AUTO, "frontier_chosen")]
    return tuple(sorted(names, key=lambda n: len(get_law(n).param_names)))


def fit_auto(df: pd.DataFrame, columns: Mapping[str, str] | None = None, **fit_kwargs) -> FitResult:
    """`fit_law` with the law chosen among `candidates()` by the runs' own folds
    (`selection.fit_chosen`); the result's `law_selection` says which and why."""
    repeated = repeats(df, columns)
    return fit_chosen(df, columns, candidates(repeated), BASELINE, fit_kwargs, repeated=repeated)


def _fit(name: str):
    def fit(table: pd.DataFrame, columns: Mapping[str, str] | None = None, **options: Any) -> FitResult:
        if name == AUTO:
            return fit_auto(table, columns, **options)
        if name == "moe":
            return fit_moe(table, columns, **options)
        return fit_law(table, name, columns, **options)

    return fit


def predict(result: FitResult, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """The loss at `inputs` (roles N, D, ...; C alone gives D = C / (6N)) with its 90% prediction
    interval (parameter noise, run scatter and extrapolation drift); NaN bounds for a fit without
    an error model."""
    inputs = dict(inputs)
    if "D" in result.law_obj.inputs and "D" not in inputs and {"C", "N"} <= inputs.keys():
        inputs["D"] = np.asarray(inputs["C"], float) / (
            result.flops_per_param_token * np.asarray(inputs["N"], float)
        )
    x = {k: np.asarray(inputs[k], float) for k in result.law_obj.inputs}
    if result.prediction_error is None:
        mean = result.law_obj.predict(result.vector, x)
        return Prediction(mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan))
    return Prediction(*result.predict_interval(x))


def plot(fit: FitResult, table: pd.DataFrame | None, ax: Any = None):
    """A fitted point law against its runs: measured loss (dots) and the law's prediction with its
    90% interval along each model size's tokens (lines), loss against compute."""
    # matplotlib only when a figure is asked for (importing analysis stays light)
    import matplotlib
    from matplotlib.figure import Figure

    fig = ax.figure if ax is not None else Figure(figsize=(7, 4.6), layout="constrained")
    ax = ax if ax is not None else fig.subplots()
    law = fit.law_obj
    roles = tuple(r for r in law.inputs if r != "x")
    cols = {r: c for r, c in fit.columns.items() if not c.startswith("<")}
    if table is not None:
        vals, _ = resolve_inputs(
            table, (*roles, "loss"), {k: v for k, v in cols.items() if k in (*roles, "loss")}
        )
    else:  # no table: the law over the fitted range
        g = {r: np.geomspace(*fit.input_ranges[r], 5) for r in roles}
        vals = {r: np.repeat(g[r], 5) if i == 0 else np.tile(g[r], 5) for i, r in enumerate(roles)}
    k = fit.flops_per_param_token
    x = vals["N"] * vals["D"] * k if {"N", "D"} <= set(vals) else vals[roles[0]]
    if "loss" in vals:
        ax.scatter(
            x, vals["loss"], c=np.log10(vals[roles[0]]), cmap="plasma", s=30, edgecolor="k", lw=0.4, zorder=3
        )
    for i, n in enumerate(np.unique(vals[roles[0]])):
        mask = vals[roles[0]] == n
        grid = {
            r: np.full(40, n)
            if r == roles[0]
            else np.geomspace(vals[r][mask].min(), vals[r][mask].max() * 1.5, 40)
            for r in roles
        }
        pred = law.predict(fit.vector, grid)
        xs = grid["N"] * grid["D"] * k if {"N", "D"} <= set(grid) else grid[roles[0]]
        color = matplotlib.colormaps["plasma"](i / max(1, len(np.unique(vals[roles[0]])) - 1))
        ax.plot(xs, pred, color=color, lw=1.2)
        if fit.prediction_error is not None:
            _, lo, hi = fit.predict_interval(grid)
            ax.fill_between(xs, lo, hi, color=color, alpha=0.12, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training compute C (FLOPs)" if "D" in roles else roles[0])
    ax.set_ylabel("loss")
    ax.set_title(f"{fit.law}: {law.formula}", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def register_point_law(
    name: str, protocols: tuple[str, ...] = (), role: Role = Role.CANDIDATE, doc: str = ""
) -> Method:
    """A point law as a method of the registry (what `register_law` calls for a user's law)."""
    return register(Method(name, Family.POINT, protocols, role, _fit(name), predict, plot, doc))


for _name, (_protocols, _role, _doc) in POINT_METHODS.items():
    register_point_law(_name, _protocols, _role, _doc)


def _user_law(name: str, protocols: tuple[str, ...] = ()) -> None:
    register_point_law(name, protocols, doc=get_law(name).formula)


for _name, _protocols in list(USER_LAWS.items()):  # laws registered before this module loaded
    _user_law(_name, _protocols)
ON_REGISTER.append(_user_law)  # and every later one


def frontier_loss(law: ScalingLaw, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best loss expected at each budget C (the frontier `fit` chose) and its 90% interval."""
    rows = law.allocation(np.asarray(C, float))["budgets"]
    pred = np.array([r["loss"] for r in rows])
    lo, hi = (np.array([r["loss_interval"][i] for r in rows]) for i in (0, 1))
    return pred, lo, hi


def predict_frontier(result: FitResult, inputs: Mapping[str, np.ndarray]) -> Prediction:
    """`frontier_chosen`: the best loss at budgets `C` (not a run's loss at N, D)."""
    if "C" not in inputs:
        raise AnalysisError("frontier_chosen predicts the best loss at a budget: give C=...")
    return Prediction(*frontier_loss(ScalingLaw.from_fit(result), inputs["C"]))


register(
    Method(
        "frontier_chosen",
        Family.POINT,
        ("frontier",),
        Role.DEFAULT,
        _fit("chinchilla"),
        predict_frontier,
        plot,
        "the best loss per budget: the law's IsoFLOP minimum or a power law of the best runs, by folds",
    )
)


def law_choices() -> tuple[str, ...]:
    """What `fit --law` accepts: the registered point methods that fit a law (not the baselines, not
    the frontier, which every Chinchilla-form fit carries)."""
    return tuple(
        m.name for m in methods(Family.POINT) if m.role != Role.BASELINE and m.name != "frontier_chosen"
    )


def fit_point(
    name: str, table: pd.DataFrame, columns: Mapping[str, str] | None = None, **options: Any
) -> FitResult:
    """Fit the point method `name` (one of `law_choices()`); one line naming the choices otherwise."""
    if name not in law_choices():
        raise AnalysisError(f"unknown law {name!r}; choose from {', '.join(law_choices())}")
    return get(name, Family.POINT).fit(table, columns, **options)
