"""Fitting a user's formula (`fit --formula`), with one parameter set per group (`--group COL`)
and parameters tied across groups (`--shared alpha,beta`), on the engine of the built-in laws.

`fit_formula` binds the formula to the table (analysis/laws/formula.py), builds its `FormulaModel`
(a registry `Law`: the formula's parameters, one copy per group of those not shared), computes
starts by variable projection (`FormulaModel.starts`) and hands the rest to `fitting.fit_points`:
multi-start batched L-BFGS, case-resampling bootstrap CIs and the forward-chaining prediction-error
model, the same code as `fit --law`. The result (`FormulaFit`) predicts new rows (with their group)
with 90% prediction intervals, and writes the `fit --json` schema plus `formula`, `inputs`,
`target`, `groups`, `shared` and `group_params` (every parameter's value per group).

Residuals: least squares (`FORMULA_DELTA`; `--delta` makes it a Huber loss) on linear residuals
divided by the target's mean |y| (`residual_scale` in the JSON), or on log residuals (relative
errors, as the registered laws) for a positive target that spans more than a decade (a learning
rate, a perplexity: `residuals_for`). Measured on six synthetic tasks shaped like the public
benchmarks (tests/formula_bench.py, docs/measurements.md): linear least squares reproduced a SciPy
multistart least-squares fit's held-out R^2 on every task; log least squares was within 0.0003 of
it; the registered laws' Huber 1e-3 fell 0.003 below it on one task and rose above it on three.

The scale the fit extrapolates in (forward-chaining folds, the drift of the intervals, the
search's backtest) is one input (`scale`): `--scale NAME`, else the first input named like a model
size (N, params, ...), then like compute or tokens, else the first `--input`, else the formula's
first input.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.core import table as data_mod
from analysis.core.enums import Precision
from analysis.core.validation import PREDICTION_LEVEL, coverage
from analysis.laws import formula as fm
from analysis.laws import registry
from analysis.laws.fitting import FitOptions, FitResult, fit_points
from models.base.errors import AnalysisError

FORMULA_DELTA = 1.0  # least squares on residuals of ~1e-2 (module docstring); `--delta` overrides it
# what a column name says about the input (the scale the fit extrapolates in, `choose_scale`)
SCALE_HINTS = (
    (
        "N",
        "n",
        "params",
        "n_params",
        "num_params",
        "parameters",
        "model_size",
        "non_embedding",
        "nonembedding",
    ),
    ("C", "flops", "compute", "training_flops"),
    ("D", "tokens", "n_tokens", "data", "data_size", "num_tokens"),
)


def choose_scale(
    inputs: Mapping[str, str], requested: str | None, order: Sequence[str], positive: set[str]
) -> str:
    """The input the fit extrapolates in (module docstring): `inputs` formula name -> column,
    `order` the --input names as given, `positive` the inputs whose values are all > 0."""
    if requested:
        if requested not in inputs:
            raise AnalysisError(
                f"--scale {requested}: not an input of the formula (inputs: {', '.join(inputs)})"
            )
        if requested not in positive:
            raise AnalysisError(f"--scale {requested}: its values must be > 0 (a size, a count)")
        return requested
    for hints in SCALE_HINTS:
        for name, col in inputs.items():
            keys = {name.lower(), str(col).lower(), str(col).lower().replace(" ", "_")}
            if name in positive and (
                keys & {h.lower() for h in hints}
                or any(h.lower() in str(col).lower() for h in hints[2:] if len(h) > 4)
            ):
                return name
    for name in [*order, *inputs]:
        if name in inputs and name in positive:
            return name
    return next(iter(inputs))


@dataclass(frozen=True)
class FormulaOptions:
    """How `fit_formula` fits (the fit command's flags)."""

    bootstrap: int = 200
    seed: int = 0
    fixed: Mapping[str, float] | None = None  # formula parameters (all groups) or engine names
    delta: float = FORMULA_DELTA
    precision: Precision | str = Precision.FLOAT64
    ci_level: float = 0.95
    prediction_intervals: bool = True
    starts: int = 64  # L-BFGS starts (the best variable-projection starts, and a sample of the rest)
    residuals: str = "auto"  # auto: log for a positive target, else linear
    extra_starts: Sequence[Mapping[str, float]] = ()  # public starts by formula parameter name


@dataclass(frozen=True)
class Data:
    """The rows of one fit: inputs by formula name, target, weights, group numbers."""

    x: dict[str, np.ndarray]
    y: np.ndarray
    w: np.ndarray
    gidx: np.ndarray | None
    index: np.ndarray


def _numeric(df: pd.DataFrame, column: str, what: str) -> np.ndarray:
    try:
        return pd.to_numeric(df[column], errors="raise").to_numpy(dtype=float)
    except (ValueError, TypeError):
        raise AnalysisError(f"column {column!r} ({what}) has non-numeric values") from None


def read_rows(
    df: pd.DataFrame,
    spec: fm.FormulaSpec,
    target: str | None,
    group: str | None,
    groups: Sequence[str] = (),
    weights: str | None = None,
    where: str = "the runs",
) -> tuple[Data, list[str]]:
    """The rows with every input (and the target, when given) present: (Data, notes on rows left
    out). Group labels are matched against `groups` (a label not among them: one error line)."""
    keep = np.ones(len(df), bool)
    notes = []
    shown = ", ".join(map(str, list(df.columns)[:20]))
    for name, col in spec.inputs.items():
        if col not in df.columns:
            raise AnalysisError(f"{where} have no column {col!r} (the input {name}); their columns: {shown}")
    cols = {name: _numeric(df, col, f"input {name}") for name, col in spec.inputs.items()}
    for name, v in cols.items():
        bad = ~np.isfinite(v)
        if bad.any():
            notes.append(
                f"{int(bad.sum())} row(s) of {where} have no value of {spec.inputs[name]!r}; left out"
            )
            keep &= ~bad
    y = np.full(len(df), np.nan)
    if target is not None:
        if target not in df.columns:
            shown = ", ".join(map(str, list(df.columns)[:20]))
            raise AnalysisError(f"--target {target}: {where} have no column {target!r}; columns: {shown}")
        y = _numeric(df, target, "the target")
        bad = ~np.isfinite(y) & keep
        if bad.any():
            notes.append(f"{int(bad.sum())} row(s) of {where} have no value of {target!r}; left out")
            keep &= np.isfinite(y)
    w = np.ones(len(df))
    if weights is not None:
        if weights not in df.columns:
            raise AnalysisError(
                f"weight column {weights!r} not found; columns: {', '.join(map(str, df.columns))}"
            )
        w = _numeric(df, weights, "weights")
        if np.any(~np.isfinite(w[keep])) or np.any(w[keep] < 0) or not np.any(w[keep] > 0):
            raise AnalysisError(f"weight column {weights!r}: weights must be finite, >= 0, with one > 0")
    gidx = None
    if group is not None:
        if group not in df.columns:
            shown = ", ".join(map(str, list(df.columns)[:20]))
            raise AnalysisError(f"--group {group}: {where} have no column {group!r}; columns: {shown}")
        labels = df[group].astype(str).to_numpy()
        missing = pd.isna(df[group]).to_numpy()
        if missing.any():
            notes.append(f"{int(missing.sum())} row(s) of {where} have no {group!r}; left out")
            keep &= ~missing
        lookup = {g: i for i, g in enumerate(groups)}
        unknown = sorted({lab for lab, k in zip(labels, keep) if k and lab not in lookup})
        if unknown:
            raise AnalysisError(
                f"{where}: {group} {unknown[0]!r} was not among the fitted groups ({', '.join(groups)}); "
                f"a group's parameters come from its own runs"
            )
        gidx = np.array([lookup.get(lab, -1) for lab in labels])
    if not keep.any():
        raise AnalysisError(
            f"{where}: no row has a value for every input{' and the target' if target else ''}"
        )
    return (
        Data(
            {k: v[keep] for k, v in cols.items()},
            y[keep],
            w[keep],
            None if gidx is None else gidx[keep],
            np.asarray(df.index)[keep],
        ),
        notes,
    )


def _shift(values: Sequence[np.ndarray]) -> float:
    """How far an input is moved so the engine (which takes logs) sees it > 0: 0 when it already is."""
    v = np.concatenate([np.asarray(a, float).ravel() for a in values])
    v = v[np.isfinite(v)]
    lo, hi = float(v.min()), float(v.max())
    return 0.0 if lo > 0 else 1.0 - lo + (hi - lo)


@dataclass(frozen=True)
class FormulaFit:
    """A fitted formula: the model (its law), the engine's result, and what it was fitted on."""

    model: fm.FormulaModel
    result: FitResult
    group_column: str | None
    input_ranges: dict[str, tuple[float, float]]
    notes: tuple[str, ...] = ()
    holdout: dict | None = None

    @property
    def spec(self) -> fm.FormulaSpec:
        return self.model.spec

    @property
    def formula(self) -> str:
        return self.spec.formula.text

    def group_params(self) -> dict[str, dict[str, float]]:
        """{group: {parameter: value}} (every parameter, shared ones repeated); {} without groups."""
        if not self.model.groups:
            return {}
        v = self.result.vector
        return {
            g: {p: float(v[idx[j] if len(idx) > 1 else idx[0]]) for p, idx in self.model.index.items()}
            for j, g in enumerate(self.model.groups)
        }

    def predict(
        self, df: pd.DataFrame, where: str = "--predict"
    ) -> tuple[Data, np.ndarray, np.ndarray, np.ndarray]:
        """(rows used, prediction, lo, hi) for the rows of `df` that have every input (and a fitted
        group), in row order; lo/hi the 90% prediction interval (NaN without an error model)."""
        data, notes = read_rows(df, self.spec, None, self.group_column, self.model.groups, where=where)
        if len(data.y) < len(df):
            raise AnalysisError(f"{where}: {notes[0]}" if notes else f"{where}: rows without inputs")
        return (data, *self.predict_data(data))

    def predict_data(self, data: Data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self.model
        for name, shift in m.shifts:
            if shift and np.any(data.x[name] + shift <= 0):
                raise AnalysisError(
                    f"input {name} ({m.spec.inputs[name]}) goes below the range the fit can take "
                    f"({-shift:.4g}); refit with these rows in --predict"
                )
        enc = m.encode(data.x, data.gidx)
        if self.result.prediction_error is None:
            pred = m.decode_y(m.law.predict(self.result.vector, enc))
            return pred, np.full_like(pred, np.nan), np.full_like(pred, np.nan)
        pred, lo, hi = self.result.predict_interval(enc)
        return m.decode_y(pred), m.decode_y(lo), m.decode_y(hi)

    def prediction_rows(self, df: pd.DataFrame, where: str = "--predict") -> list[dict]:
        """One entry per row of `df`, in order: its inputs (formula names), its group, `prediction`
        (the target's predicted value) and `interval` [lo, hi]."""
        data, pred, lo, hi = self.predict(df, where)
        rows = []
        for i in range(len(pred)):
            row: dict[str, Any] = {k: float(v[i]) for k, v in data.x.items()}
            if self.group_column is not None:
                row[self.group_column] = self.model.groups[int(data.gidx[i])]
            row["prediction"] = float(pred[i])
            row["interval"] = [float(lo[i]), float(hi[i])]
            rows.append(row)
        return rows

    def to_dict(self) -> dict:
        """The `fit --json` schema plus the formula's own keys (module docstring)."""
        out = self.result.to_dict()
        m = self.model
        out.pop("allocation", None)
        out.pop("frontier", None)
        out.update(
            law="formula",
            formula=self.formula,
            target=m.target,
            inputs=dict(m.spec.inputs),
            roles={p: {**m.spec.roles[p].to_dict(), "bounds": list(m.spec.bounds[p])} for p in m.spec.params},
            residuals=m.mode,
            residual_scale=m.y_scale if m.mode == fm.LINEAR else None,
            scale_input=m.scale,
            input_ranges={k: list(v) for k, v in self.input_ranges.items()},
            columns={**dict(m.spec.inputs), "target": m.target},
            groups=list(m.groups) if m.groups else None,
            group_column=self.group_column,
            shared=sorted(m.shared) if m.groups else None,
            group_params=self.group_params() or None,
        )
        if self.holdout is not None:
            out["holdout"] = self.holdout
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def summary(self) -> str:
        m = self.model
        inputs = ", ".join(k if k == c else f"{k}={c}" for k, c in m.spec.inputs.items())
        head = (
            f"formula: {self.formula}  ({self.result.n_points} rows; inputs {inputs}; target {m.target}; "
            f"{m.mode} residuals"
            + (f"; {len(m.groups)} groups of {self.group_column}" if m.groups else "")
            + (f", shared {', '.join(sorted(m.shared))}" if m.groups and m.shared else "")
            + ")"
        )
        lines = self.result.summary().splitlines()
        return "\n".join([head, *lines[1:]])

    def holdout_lines(self) -> list[str]:
        h = self.holdout
        if not h:
            return []
        return [
            f"  held out {h['n_points']} rows with {h['scale_input']} > {h['threshold']:.4g}: mean |error| "
            f"{h['mean_abs_error']:.4g} ({h['mean_rel_error']:.2%}), R2 {h['r2']:.4f}, "
            f"{PREDICTION_LEVEL:.0%} coverage {h['coverage']:.0%}"
        ]


def prediction_lines(rows: list[dict], path: str, target: str) -> list[str]:
    """The predictions as a short table (every row)."""
    keys = [k for k in rows[0] if k not in ("prediction", "interval")]
    lines = [
        f"  predictions of {target} for {path} ({PREDICTION_LEVEL:.0%} prediction intervals):",
        "    " + "".join(f"{k[:10]:>11}" for k in keys) + f"{'prediction':>12}  interval",
    ]
    for row in rows:
        lo, hi = row["interval"]
        cells = "".join(
            f"{row[k]:>11.4g}" if isinstance(row[k], float) else f"{str(row[k])[:10]:>11}" for k in keys
        )
        lines.append(f"    {cells}{row['prediction']:>12.5g}  [{lo:.5g}, {hi:.5g}]")
    return lines


LOG_SPAN = 10.0  # a positive target whose max / min exceeds this is fitted on log residuals


def residuals_for(y: np.ndarray) -> str:
    """log for a positive target spanning more than `LOG_SPAN`, else linear (module docstring)."""
    y = np.asarray(y, float)
    return fm.LOG if np.all(y > 0) and y.max() / y.min() > LOG_SPAN else fm.LINEAR


def build_model(
    spec: fm.FormulaSpec,
    data: Data,
    target: str,
    groups: Sequence[str] = (),
    shared: Sequence[str] = (),
    scale: str | None = None,
    input_order: Sequence[str] = (),
    more_x: Sequence[Mapping[str, np.ndarray]] = (),
    residuals: str = "auto",
) -> fm.FormulaModel:
    """The engine law of `spec` for these rows (and the inputs of rows to predict, `more_x`, so
    that every input the law will see is encodable)."""
    unknown = [p for p in shared if p not in spec.params]
    if unknown:
        raise AnalysisError(
            f"--shared {unknown[0]}: not a parameter of the formula (parameters: {', '.join(spec.params)})"
        )
    if shared and not groups:
        raise AnalysisError("--shared ties parameters across groups: give --group COLUMN too")
    shifts = tuple((k, _shift([data.x[k], *(m[k] for m in more_x if k in m)])) for k in spec.inputs)
    positive = {k for k, s in shifts if s == 0.0}
    y = data.y
    if residuals not in ("auto", fm.LOG, fm.LINEAR):
        raise AnalysisError(f"residuals must be auto, log or linear, not {residuals!r}")
    mode = residuals_for(y) if residuals == "auto" else residuals
    if mode == fm.LOG and not np.all(y > 0):
        raise AnalysisError(f"the target {target!r} has values <= 0: log residuals need a positive target")
    ys = float(np.mean(np.abs(y))) or float(np.std(y)) or 1.0
    model = fm.FormulaModel(
        spec=spec,
        target=target,
        groups=tuple(groups),
        shared=frozenset(shared),
        shifts=tuple((k, s) for k, s in shifts if s),
        mode=mode,
        y_scale=float(f"{ys:.6g}") if mode == fm.LINEAR else 1.0,
        scale=choose_scale(spec.inputs, scale, input_order, positive),
    )
    # one model (one law, one compiled program) per law in a process: the same formula fitted
    # again (a refit, another fold, a notebook cell) reuses its programs
    return _MODELS.setdefault(model.key, model)


_MODELS: dict[str, fm.FormulaModel] = {}


def _registered(model: fm.FormulaModel):
    """The model's law, registered again if the registry lost it (a reset between notebook cells
    or test modules): a fit's result finds its law by name."""

    law = model.law
    try:
        same = registry.get_law(law.name) is law
    except AnalysisError:
        same = False
    if not same:
        registry.register(law, replace=True)
    return law


def engine_fixed(
    model: fm.FormulaModel, fixed: Mapping[str, float] | None
) -> tuple[dict[str, float], dict[str, float]]:
    """(--fix as engine names, the formula parameters fixed in every group); one error line for a
    name that is neither a parameter nor a parameter[group]."""
    out, whole = {}, {}
    for name, v in (fixed or {}).items():
        if name in model.index:
            whole[name] = float(v)
            for i in model.index[name]:
                out[model.engine_names[i]] = float(v)
        elif name in model.engine_names:
            out[name] = float(v)
        else:
            raise AnalysisError(
                f"cannot fix {name}: the formula's parameters are {', '.join(model.spec.params)}"
                + (" (or NAME[group])" if model.groups else "")
            )
    return out, whole


def _engine_vector(model: fm.FormulaModel, values: Mapping[str, float]) -> np.ndarray | None:
    theta = np.zeros(len(model.engine_names))
    for p, idx in model.index.items():
        if p not in values:
            return None
        theta[list(idx)] = values[p]
    return theta


def fit_model(model: fm.FormulaModel, data: Data, opts: FormulaOptions) -> FitResult:
    """The engine's fit of `model` to `data` (starts by variable projection)."""
    model.check_domain(data.x)
    fixed, whole = engine_fixed(model, opts.fixed)
    extra = [v for v in (_engine_vector(model, s) for s in opts.extra_starts) if v is not None]
    starts = model.starts(
        data.x, data.y, data.gidx, data.w, whole, k=opts.starts, extra=np.array(extra) if extra else None
    )
    law = _registered(model)
    pts = data_mod.Points(
        inputs=model.encode(data.x, data.gidx),
        y=model.encode_y(data.y),
        weights=data.w,
        columns={**{k: str(c) for k, c in model.spec.inputs.items()}, "loss": model.target},
        index=data.index,
    )
    precision = Precision.FLOAT64 if opts.precision == Precision.AUTO else opts.precision
    fit_opts = FitOptions(
        bootstrap=opts.bootstrap,
        seed=opts.seed,
        fixed=fixed,
        grid=starts,
        delta=opts.delta,
        precision=precision,
        ci_level=opts.ci_level,
        prediction_intervals=opts.prediction_intervals,
    )
    try:
        return fit_points(law, pts, fit_opts)
    except AnalysisError as e:
        if "not finite at any start" in str(e):
            raise model.diagnose(data.x, data.y) from None
        raise AnalysisError(
            str(e).replace(f"law {law.name}", f"formula {model.spec.formula.text!r}")
        ) from None


def fit_formula(
    df: pd.DataFrame,
    formula: str | fm.FormulaSpec,
    target: str,
    inputs: Mapping[str, str] | None = None,
    params: Mapping[str, fm.ParamOption] | None = None,
    group: str | None = None,
    shared: Sequence[str] = (),
    scale: str | None = None,
    weights: str | None = None,
    options: FormulaOptions | None = None,
    predict_df: pd.DataFrame | None = None,
    holdout_above: float | None = None,
) -> FormulaFit:
    """Fit a formula to a table (module docstring). `predict_df`: rows that will be predicted
    (only their inputs' ranges are read, so the law can encode them)."""
    opts = options or FormulaOptions()
    inputs = dict(inputs or {})
    spec = (
        formula
        if isinstance(formula, fm.FormulaSpec)
        else fm.make_spec(formula, df.columns, inputs, params, target, group)
    )
    groups: tuple[str, ...] = ()
    if group is not None:
        if group not in df.columns:
            shown = ", ".join(map(str, list(df.columns)[:20]))
            raise AnalysisError(f"--group {group}: the runs have no column {group!r}; columns: {shown}")
        labels = df[group].dropna().astype(str)
        groups = tuple(sorted(labels.unique(), key=_natural))
    data, notes = read_rows(df, spec, target, group, groups, weights)
    notes += [
        f"--input {a}={c} is not in the formula; left out" for a, c in inputs.items() if a not in spec.inputs
    ]
    for note in notes:
        warnings.warn(note, data_mod.FitNotice, stacklevel=2)
    if groups:
        present = set(data.gidx.tolist())
        groups_kept = tuple(g for i, g in enumerate(groups) if i in present)
        if groups_kept != groups:
            groups = groups_kept
            data, _ = read_rows(df, spec, target, group, groups, weights)
    more = []
    if predict_df is not None:  # a bad TARGETS table fails before the fit
        if group is not None and group not in predict_df.columns:
            raise AnalysisError(f"--predict: the rows to predict need their group: no column {group!r}")
        more.append(read_rows(predict_df, spec, None, None, (), where="--predict rows")[0].x)
    model = build_model(spec, data, target, groups, shared, scale, list(inputs), more, opts.residuals)
    held = None
    if holdout_above is not None:
        s = data.x[model.scale]
        mask = s > holdout_above
        if not mask.any() or mask.all():
            raise AnalysisError(
                f"--holdout-above {holdout_above:g}: {'no' if not mask.any() else 'every'} row has "
                f"{model.scale} above it ({model.scale} spans {s.min():.4g} .. {s.max():.4g})"
            )
        held = _subset(data, mask)
        data = _subset(data, ~mask)
    result = fit_model(model, data, opts)
    ranges = {k: (float(np.min(v)), float(np.max(v))) for k, v in data.x.items()}
    fit = FormulaFit(model, result, group, ranges, tuple(notes))
    if held is not None:
        fit = dataclasses.replace(fit, holdout=_holdout(fit, held, holdout_above))
    return fit


def _natural(label: str):
    """Sort key: numbers by value, then text."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def _subset(data: Data, mask: np.ndarray) -> Data:
    return Data(
        {k: v[mask] for k, v in data.x.items()},
        data.y[mask],
        data.w[mask],
        None if data.gidx is None else data.gidx[mask],
        data.index[mask],
    )


def _holdout(fit: FormulaFit, held: Data, threshold: float) -> dict:
    """How the fit predicted the rows held out above `threshold` of its scale input."""
    pred, lo, hi = fit.predict_data(held)
    y = held.y
    err = pred - y
    ss = float(np.sum((y - y.mean()) ** 2))
    return {
        "threshold": float(threshold),
        "scale_input": fit.model.scale,
        "n_points": int(y.size),
        "mean_abs_error": float(np.mean(np.abs(err))),
        "mean_rel_error": float(np.mean(np.abs(err / y))) if np.all(y != 0) else math.nan,
        "max_rel_error": float(np.max(np.abs(err / y))) if np.all(y != 0) else math.nan,
        "r2": 1.0 - float(np.sum(err**2)) / ss if ss > 0 else math.nan,
        "coverage": coverage(y, lo, hi),
        "interval_level": PREDICTION_LEVEL,
        "points": [
            {
                **{k: float(v[i]) for k, v in held.x.items()},
                "actual": float(y[i]),
                "predicted": float(pred[i]),
                "interval": [float(lo[i]), float(hi[i])],
            }
            for i in range(y.size)
        ],
    }


def register_formula(
    name: str,
    formula: str,
    protocols: Sequence[str] = (),
    inputs: Mapping[str, str] | None = None,
    params: Mapping[str, fm.ParamOption] | None = None,
    columns: Sequence[str] = ("N", "D", "C", "U", "experts", "x"),
    scale: str | None = None,
):
    """Register a formula as a law and a method of the registry, under `name`: `fit --law NAME`
    (in this process), and `backtest` with `protocols=("budget", "size")` score it among the point
    laws (they fit it with `fit_law` on the runs table's N, D, U, C and loss, log residuals).
    Inputs are the roles' names (N, D, U, C, experts, x) unless `inputs` maps others. Example::

        register_formula("gadre_tied", "E + A / N**alpha + B / D**alpha", protocols=("budget",))
    """
    from analysis.laws import methods  # noqa: F401 - the method registry listens to new laws

    spec = fm.make_spec(formula, [*columns, *(inputs or {}).values()], inputs, params, "loss")
    positive = set(spec.inputs)
    model = fm.FormulaModel(
        spec=spec,
        target="loss",
        scale=choose_scale(spec.inputs, scale, list(inputs or {}), positive),
        registered_name=name,
        protocols=tuple(protocols),
    )
    return model.law
