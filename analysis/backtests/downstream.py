"""Downstream protocol: hide the largest models of a `fit-task` ladder, predict their task accuracy.

The table is the LADDER `fit-task` reads (docs/downstream.md): `N, D, task, task_loss, accuracy`,
optional `run`, `chance`, `C`. Held out: the runs with N above `Options.holdout_above_n` (default:
the runs of the largest model size, `validation.holdout_mask`). Every method is fitted on the
other runs' rows and predicts, per task, each held-out run's finished row (its last, largest-D
row); the held-out runs' checkpoints are neither fitted nor scored. Metric: accuracy points.

Rows:
- `baseline_linear_log_c` (baseline): per task, accuracy = a + b ln C (C = 6ND) by ordinary least
  squares on the fitted runs' finished rows, clipped to [0, 1]; its naive 90% interval is the
  prediction +- z * scatter of the in-sample residuals (`validation.scatter_sd`), clipped too;
- `auto` (default): `fit_downstream` exactly as `fit-task` runs it without flags (step-1 law
  chinchilla_tied, method auto: per task the candidate the held-out check inside the fitted
  ladder picks), with `Options.bootstrap` resamples (the backtest's default 100, fit-task's 200:
  only the intervals' bootstrap term depends on it); its 90% intervals;
- one row per candidate of `analysis.downstream.methods.CANDIDATES` (average, chain and direct
  with the ceiling at 1 or fitted): `fitting.fit_task`, fit-task's own per-task pipeline, with
  the held-out selection given only that candidate's fold errors, so each row is what fit-task
  would predict, with its interval, had it chosen that candidate on every task (a candidate
  without a held-out score on a task predicts there without an interval).

`Point.x` holds N, D, C = 6ND and `task`, the task's index in `cut["tasks"]`. The cut's `n_fit` and
`n_held_out` count finished (run, task) rows: fitted, and predicted by each method.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pandas as pd

from analysis.backtests.baselines import Z90
from analysis.backtests.losses import Options
from analysis.backtests.result import Backtest, MethodScore, Metric, Point
from analysis.core import validation
from analysis.downstream.data import LADDER_COLUMNS, TaskRows, read_ladder
from analysis.downstream.fitting import DownstreamFit, TaskFit, fit_downstream, fit_task
from analysis.downstream.holdout import FoldErrors, fold_errors
from analysis.downstream.methods import CANDIDATES, Candidate, fit_all
from models.base.errors import AnalysisError

BASELINE = "baseline_linear_log_c"
DEFAULT = "auto"  # fit-task's --method default: the held-out selection among CANDIDATES


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
    methods = [_baseline(fit_rows, targets)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_downstream(df[~held], bootstrap=opt.bootstrap, seed=opt.seed)
            methods.append(_default(fit, targets))
            methods += _candidates(fit, targets)
    except AnalysisError as e:
        names = [DEFAULT] + [c.name for c in CANDIDATES]
        methods += [MethodScore(n, (), default=n == DEFAULT, note=f"not fitted: {e}") for n in names]
    return Backtest("downstream", cut, Metric.POINTS, tuple(methods))


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


def _baseline(fit_rows: dict[str, TaskRows], targets: pd.DataFrame) -> MethodScore:
    """Per task: accuracy linear in ln C on the fitted finished runs, +- z * residual scatter."""
    pred, lo, hi = (np.full(len(targets), np.nan) for _ in range(3))
    for t, rows in fit_rows.items():
        x = np.log(6 * rows.final("N") * rows.final("D"))
        y = rows.final("accuracy")
        b, a = np.polyfit(x, y, 1)
        half = Z90 * validation.scatter_sd(y - (a + b * x))
        m = (targets.task == t).to_numpy()
        f = a + b * np.log(targets.C.to_numpy()[m])
        pred[m], lo[m], hi[m] = (np.clip(v, 0.0, 1.0) for v in (f, f - half, f + half))
    return MethodScore(BASELINE, _points(targets, pred, lo, hi), baseline=True)


def _by_task(targets: pd.DataFrame):
    """(task, row positions, N, D) of each task with held-out rows."""
    for t, idx in targets.groupby("task", sort=False).indices.items():
        yield t, idx, targets.N.to_numpy()[idx], targets.D.to_numpy()[idx]


def _default(fit: DownstreamFit, targets: pd.DataFrame) -> MethodScore:
    """fit-task's own predictions and intervals (`DownstreamFit.predict`)."""
    preds = fit.predict(targets[["N", "D", "task"]])
    lo, hi = zip(*(p.accuracy_interval for p in preds)) if preds else ((), ())
    chosen: dict[str, list[str]] = collections.defaultdict(list)
    for t, tf in fit.tasks.items():
        chosen[tf.chosen.candidate.name].append(t)
    note = "chose " + "; ".join(f"{k} ({', '.join(v)})" for k, v in chosen.items())
    return MethodScore(
        DEFAULT, _points(targets, [p.accuracy for p in preds], lo, hi), default=True, note=note
    )


def _candidates(fit: DownstreamFit, targets: pd.DataFrame) -> list[MethodScore]:
    """Each candidate through fit-task's per-task pipeline, the selection given only its errors.

    The tasks that share a step-1 fit in `fit` (one loss shared by every task) share its fold
    errors, and the chain's step-2 regressor is the one `fit` used, so each candidate is fitted
    exactly as fit-task fits it when it chooses it."""
    out = {c.name: [np.full(len(targets), np.nan) for _ in range(3)] for c in CANDIDATES}
    missing: dict[str, list[str]] = {c.name: [] for c in CANDIDATES}
    groups: dict[int, list[str]] = {}
    for t, tf in fit.tasks.items():
        groups.setdefault(id(tf.step1), []).append(t)
    errors: dict[str, FoldErrors] = {}
    for group in groups.values():
        regressor = fit.tasks[group[0]].chain.regressor
        errors.update(fold_errors({t: fit.tasks[t].rows for t in group}, fit.law, CANDIDATES, regressor))
    for t, idx, N, D in _by_task(targets):
        tf = fit.tasks[t]
        for c in CANDIDATES:
            res = _forced(tf, errors[t], c, N, D)
            if res is None:
                missing[c.name].append(t)
                res = (fit_all(tf.rows, tf.step1, (c,), tf.chain.regressor)[c.name].predict(N, D), None, None)
            for arr, v in zip(out[c.name], res):
                arr[idx] = np.nan if v is None else v
    return [
        MethodScore(
            c.name,
            _points(targets, *out[c.name]),
            note=f"no held-out score, no interval: {', '.join(missing[c.name])}" if missing[c.name] else "",
        )
        for c in CANDIDATES
    ]


def _forced(tf: TaskFit, fe: FoldErrors, cand: Candidate, N: np.ndarray, D: np.ndarray):
    """(accuracy, lo, hi) of `fit_task` with only `cand`'s held-out errors to choose from; None
    when `cand` has no held-out score (fit-task would then fall back to its default candidate)."""
    name = cand.name
    e = fe.errors.get(name, np.zeros(0))
    if not (e.size and np.isfinite(np.mean(np.abs(e)))):
        return None
    only = FoldErrors({name: e}, {name: fe.distances[name]}, fe.n_folds)
    forced = fit_task(tf.rows, tf.step1, only, seed=tf.seed, regressor=tf.chain.regressor)
    assert forced.chosen.candidate.name == name, (forced.chosen.candidate.name, name)
    preds = forced.predict(N, D)
    return (
        np.array([p.accuracy for p in preds]),
        np.array([p.accuracy_interval[0] for p in preds]),
        np.array([p.accuracy_interval[1] for p in preds]),
    )
