"""Downstream protocol: hide the largest models of a `fit-task` ladder, predict their task accuracy.

The table is the LADDER `fit-task` reads (docs/downstream.md): `N, D, task, task_loss, accuracy`,
optional `run`, `chance`, `C`. Held out: the runs with N above `Options.holdout_above_n` (default:
the runs of the largest model size, `validation.holdout_mask`). Every method is fitted on the
other runs' rows and predicts, per task, each held-out run's finished row (its last, largest-D
row); the held-out runs' checkpoints are neither fitted nor scored. Metric: accuracy points.

Rows: every method the registry scores on the protocol (analysis/downstream/methods.py), fitted
on the other runs (all tasks in one fit, as fit-task fits them) with `Options.bootstrap` resamples
(the backtest's default 100, fit-task's 200: only the intervals' bootstrap term depends on it):
`baseline_linear_log_c` (baseline: per task, accuracy linear in ln C = ln 6ND), `average` (the
default, fit-task without flags) and `auto` (per task the candidate the held-out check inside the
fitted ladder picks), each with its 90% intervals.

`Point.x` holds N, D, C = 6ND and `task`, the task's index in `cut["tasks"]`. The cut's `n_fit` and
`n_held_out` count finished (run, task) rows: fitted, and predicted by each method.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import progress, validation
from analysis.core.methods import Family, Method, Role, methods
from analysis.downstream.data import LADDER_COLUMNS, TaskRows, read_ladder
from analysis.downstream.methods import BASELINE, DEFAULT  # noqa: F401  (registers the methods)
from models.base.errors import AnalysisError


def downstream_protocol(df: pd.DataFrame, opt: Options) -> Backtest:
    """Every downstream method fitted on the ladder's smaller models, scored on the largest."""
    _require_ladder(df)
    df = df.reset_index(drop=True)
    tasks = read_ladder(df)  # the whole table is validated as fit-task would
    held, cut = _split(df, opt)
    try:
        fit_rows = read_ladder(df[~held])
    except AnalysisError as e:
        fitted = f"N <= {cut['threshold']:.4g}"
        raise AnalysisError(f"the fitted runs ({fitted}): {e}; raise --holdout-above-n") from None
    targets = _targets(df, tasks, held)
    cut.update(
        n_fit=int(sum(r.n_runs for r in fit_rows.values())),
        n_held_out=len(targets),
        n_tasks=len(tasks),
        tasks=list(tasks),
    )
    # the baseline first, then the default and the candidates (the registry's order within a role)
    scored = sorted(methods(Family.DOWNSTREAM, "downstream"), key=lambda m: m.role != Role.BASELINE)
    scored = [m for m in scored if opt.scores(m.role != Role.CANDIDATE)]
    rows = [
        _score(m, df[~held], targets, opt)
        for m in progress.track(scored, desc="backtest downstream", unit="method")
    ]
    return Backtest("downstream", cut, Metric.POINTS, tuple(rows))


def _require_ladder(df: pd.DataFrame) -> None:
    """A one-line error naming the fix when the table is not a fit-task LADDER."""
    missing = [c for c in LADDER_COLUMNS if c not in df.columns]
    if not missing:
        return
    wide = [c for c in df.columns if str(c).startswith("acc_")]
    hint = (
        f"; its {len(wide)} acc_<task> columns are one task each: write one row per (run, task) with the "
        "task's name in `task`, its accuracy in `accuracy` and the loss it depends on in `task_loss`"
        if wide
        else ""
    )
    raise AnalysisError(
        f"--protocol downstream needs fit-task's LADDER table (columns {', '.join(LADDER_COLUMNS)}; "
        f"optional run, chance, C); this table lacks {', '.join(missing)}{hint} (docs/downstream.md; "
        "`python -m analysis collect SWEEP_DIR --tasks ladder.csv` writes one from your runs)"
    )


def _split(df: pd.DataFrame, opt: Options) -> tuple[np.ndarray, dict]:
    """(held-out row mask, cut description): the rows of the models above the N cut."""
    if opt.holdout_above is not None:
        raise AnalysisError(
            "--holdout-above (a compute cut) does not apply to --protocol downstream, which hides "
            "the largest model sizes: use --holdout-above-n"
        )
    N = pd.to_numeric(df["N"]).to_numpy(float)
    thr = opt.holdout_above_n
    held = validation.holdout_mask(N, thr)
    thr = float(N[~held].max()) if thr is None and (~held).any() else thr
    what = f"N > {thr:.4g}"
    if not held.any():
        raise AnalysisError(f"no model has {what}; lower --holdout-above-n")
    if held.all():
        raise AnalysisError(f"every model has {what}; nothing is left to fit on: raise --holdout-above-n")
    return held, {"what": what, "threshold": float(thr)}


def _targets(df: pd.DataFrame, tasks: dict[str, TaskRows], held: np.ndarray) -> pd.DataFrame:
    """The held-out runs' finished rows, task by task: N, D, C, task, task_index, accuracy."""
    task_col = df["task"].astype(str).str.strip().to_numpy()  # as read_ladder names the tasks
    parts = []
    for i, (t, rows) in enumerate(tasks.items()):
        m = rows.last & held[task_col == t]
        parts.append(
            pd.DataFrame(
                {
                    "N": rows.N[m],
                    "D": rows.D[m],
                    "task": t,
                    "task_index": float(i),
                    "accuracy": rows.accuracy[m],
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    out["C"] = 6 * out.N * out.D
    return out


def _points(targets: pd.DataFrame, pred, lo=None, hi=None) -> tuple[Point, ...]:
    nan = np.full(len(targets), np.nan)
    pred, lo, hi = (np.asarray(v if v is not None else nan, float) for v in (pred, lo, hi))
    return tuple(
        Point(
            {"N": float(r.N), "D": float(r.D), "C": float(r.C), "task": float(r.task_index)},
            float(r.accuracy),
            float(pred[i]),
            float(lo[i]),
            float(hi[i]),
        )
        for i, r in enumerate(targets.itertuples())
    )


def _score(method: Method, fit_df: pd.DataFrame, targets: pd.DataFrame, opt: Options) -> MethodScore:
    """A registered method fitted on the runs below the cut, scored on the held-out finished rows."""
    roles = {"default": method.role == Role.DEFAULT, "baseline": method.role == Role.BASELINE}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = method.fit(fit_df, bootstrap=opt.bootstrap, seed=opt.seed)
    except AnalysisError as e:
        return MethodScore(method.name, (), **roles, note=f"not fitted: {e}")
    index = {t: i for i, t in enumerate(record.tasks)}  # the record's task order
    p = method.predict(record, {"N": targets.N, "D": targets.D, "task": targets.task.map(index)})
    return MethodScore(method.name, _points(targets, p.mean, p.lo, p.hi), **roles, note=record.note)
