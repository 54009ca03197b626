"""Downstream-task prediction on Gadre et al. 2024's runs, with the paper's protocol.

Protocol (arXiv:2403.08540; data ../shared/data/gadre2024_overtraining, MIT): fit on the runs of
N <= 412M (95 runs: 11M-412M, three corpora, 0.25x-32x Chinchilla tokens), predict the 1.4B and
6.9B runs (9 runs). The intermediate loss is the C4 validation loss (`loss_c4_val`), shared by
every task, as in ../shared/checks/downstream.sh. Reported:

1. loss: step 1 alone (chinchilla_tied on the C4 loss), mean |relative error| on the 9 runs;
2. average top-1 error over the tasks above chance (below): Gadre et al.'s own form
   Err(L) = eps - k exp(-gamma L) fitted on the small runs and chained with step 1, and the
   same average treated as one task by `fit_downstream`;
3. per task, for every task above chance: the chain alone (`method="chain"`) and the
   held-out-selected method (`auto`), mean |error| in accuracy points and the share of actual
   accuracies inside the 90% intervals; the 5 tasks of the interface check separately, once with
   chance inferred (as the check does) and once from tasks.csv.

"Above chance" uses only the fit side and the tool's own rule (`flags.near_chance`): the median
accuracy of the largest third of the small runs is at least 5 points above the task's random
baseline (tasks.csv); the other tasks get a near-chance warning and are reported apart. Among the
tasks above chance, those whose accuracy falls with scale or that are emerging (`flags.
scale_trend`, computed on the ladder only) are warned and left out of the `*_included` means;
every summary also gives the means over all its tasks. Per task: MAE, mean 90% interval width
and coverage on the targets, and the fit-side held-out check (`heldout`: the error model on the
ladder's own held-out size). The issue's targets: mean width <= 10 points with coverage >= 75%
and MAE <= 3 points over the included tasks above chance.

Usage: python benchmarks/downstream_eval.py [--bootstrap 200] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis.downstream import fit_downstream  # noqa: E402
from analysis.downstream.data import read_ladder  # noqa: E402
from analysis.downstream.flags import near_chance  # noqa: E402
from analysis.downstream.taskloss import fit_task_loss  # noqa: E402
from models.base.jaxcache import enable_compile_cache  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "gadre2024_overtraining"
CHECK_TASKS = ("hellaswag", "arc_easy", "piqa", "copa", "lambada_openai")
FIT_MAX_N = 5e8  # fit on N <= 412M, predict 1.4B and 6.9B
LOSS = "loss_c4_val"


def load(data: pathlib.Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """(runs, task -> chance accuracy) for the tasks with an `acc_` column."""
    runs = pd.read_csv(data / "runs.csv")
    meta = pd.read_csv(data / "tasks.csv")
    base = dict(zip(meta["Eval Task"].astype(str), meta["Random baseline"].astype(float) / 100))
    tasks = [c[4:] for c in runs.columns if c.startswith("acc_")]
    return runs, {t: base[t] for t in tasks if t in base}


def above_chance(small: pd.DataFrame, chance: dict[str, float]) -> tuple[list[str], list[str]]:
    """(tasks above chance, tasks near chance) by the fit-side rule of `flags.near_chance`."""
    rows = read_ladder(ladder(small, list(chance), chance))
    near = [t for t, r in rows.items() if near_chance(r)]
    return [t for t in chance if t not in near], near


def ladder(runs: pd.DataFrame, tasks, chance: dict[str, float] | None) -> pd.DataFrame:
    """The long LADDER table: one row per (run, task), the C4 loss as every task's loss."""
    rows = [
        dict(
            run=r.run,
            N=float(r.n_params),
            D=float(r.tokens),
            task=t,
            task_loss=getattr(r, LOSS),
            accuracy=getattr(r, f"acc_{t}"),
        )
        for r in runs.itertuples()
        for t in tasks
    ]
    df = pd.DataFrame(rows)
    if chance is not None:
        df["chance"] = df.task.map(chance)
    return df


def loss_protocol(small: pd.DataFrame, big: pd.DataFrame) -> dict:
    """Step 1 alone: relative error of the C4 loss of each large run."""
    f = fit_task_loss(
        small.n_params.to_numpy(float),
        small.tokens.to_numpy(float),
        small[LOSS].to_numpy(float),
        np.arange(len(small)),
    )
    pred = f.predict(big.n_params.to_numpy(float), big.tokens.to_numpy(float))
    rel = 100 * (pred / big[LOSS].to_numpy() - 1)
    return {
        "law": f.law,
        "mean_abs_rel_error_pct": float(np.mean(np.abs(rel))),
        "per_run": dict(zip(big.run, map(float, rel))),
    }


def _gadre_error_law(loss: np.ndarray, err: np.ndarray) -> np.ndarray:
    """(eps, log k, log gamma) of Err(L) = eps - k exp(-gamma L), least squares from a small grid."""
    best = None
    for lk in (0.0, 2.0, 4.0):
        for lg in (-1.0, 0.0, 0.5):
            r = least_squares(lambda p: p[0] - np.exp(p[1] - np.exp(p[2]) * loss) - err, [0.8, lk, lg])
            best = r if best is None or r.cost < best.cost else best
    return best.x


def average_error_protocol(small, big, tasks, chance, bootstrap: int) -> dict:
    """Average top-1 error over `tasks`: Gadre et al.'s exponential law chained with step 1, and
    the average accuracy fitted as one task by fit_downstream."""
    err_s = 1 - small[[f"acc_{t}" for t in tasks]].mean(axis=1).to_numpy()
    err_b = 1 - big[[f"acc_{t}" for t in tasks]].mean(axis=1).to_numpy()
    f = fit_task_loss(
        small.n_params.to_numpy(float),
        small.tokens.to_numpy(float),
        small[LOSS].to_numpy(float),
        np.arange(len(small)),
    )
    loss_b = f.predict(big.n_params.to_numpy(float), big.tokens.to_numpy(float))
    p = _gadre_error_law(small[LOSS].to_numpy(float), err_s)
    pred = p[0] - np.exp(p[1] - np.exp(p[2]) * loss_b)
    avg = lambda d: pd.DataFrame(
        {
            "run": d.run,
            "N": d.n_params.astype(float),
            "D": d.tokens.astype(float),
            "task": "average",
            "task_loss": d[LOSS],
            "accuracy": d[[f"acc_{t}" for t in tasks]].mean(axis=1),
            "chance": float(np.mean([chance[t] for t in tasks])),
        }
    )
    fit = fit_downstream(avg(small), bootstrap=bootstrap)
    ours = fit.predict(avg(big)[["N", "D", "task"]])
    ours_err = np.array([1 - q.accuracy for q in ours])
    inside = [q.accuracy_interval[0] <= 1 - e <= q.accuracy_interval[1] for q, e in zip(ours, err_b)]
    return {
        "n_tasks": len(tasks),
        "actual": dict(zip(big.run, map(float, err_b))),
        "gadre_law": {
            "params": {"eps": p[0], "k": float(np.exp(p[1])), "gamma": float(np.exp(p[2]))},
            "mean_abs_rel_error_pct": float(np.mean(np.abs(pred / err_b - 1)) * 100),
            "mean_abs_error_pts": float(np.mean(np.abs(pred - err_b)) * 100),
        },
        "fit_task": {
            "method": ours[0].method,
            "mean_abs_rel_error_pct": float(np.mean(np.abs(ours_err / err_b - 1)) * 100),
            "mean_abs_error_pts": float(np.mean(np.abs(ours_err - err_b)) * 100),
            "coverage": float(np.mean(inside)),
        },
    }


def task_protocol(runs, small_mask, tasks, chance, method: str, bootstrap: int) -> tuple[pd.DataFrame, dict]:
    """(one row per (large run, task): actual, predicted, interval, method, warnings, excluded;
    task -> its fit-task JSON object)."""
    df = ladder(runs, tasks, chance)
    fit_rows, test = (
        df[small_mask.repeat(len(tasks)).to_numpy()],
        df[~small_mask.repeat(len(tasks)).to_numpy()],
    )
    fit = fit_downstream(fit_rows, bootstrap=bootstrap, method=method)
    preds = fit.predict(test[["N", "D", "task"]])
    out = test[["run", "task", "N", "accuracy"]].reset_index(drop=True).rename(columns={"accuracy": "actual"})
    out["predicted"] = [p.accuracy for p in preds]
    out["lo"], out["hi"] = [p.accuracy_interval[0] for p in preds], [p.accuracy_interval[1] for p in preds]
    out["method"] = [p.method for p in preds]
    out["warned"] = [bool(p.warnings) for p in preds]
    out["error_pts"] = 100 * (out.predicted - out.actual)
    out["inside"] = (out.lo <= out.actual) & (out.actual <= out.hi)
    info = fit.to_dict()["tasks"]
    out["excluded"] = [info[t]["scale_trend"]["excluded_from_means"] for t in out.task]
    return out, info


def _means(rows: pd.DataFrame) -> dict:
    return {
        "n_tasks": int(rows.task.nunique()),
        "n_predictions": int(len(rows)),
        "mae_pts": float(rows.error_pts.abs().mean()),
        "coverage": float(rows.inside.mean()),
        "mean_width_pts": float(100 * (rows.hi - rows.lo).mean()),
    }


def summary(result: tuple[pd.DataFrame, dict]) -> dict:
    """Means over all tasks, over the included ones (no falls-with-scale / emerging warning), and
    per task: MAE, width, coverage on the targets and the fit-side held-out check."""
    rows, info = result
    per = rows.assign(width=100 * (rows.hi - rows.lo)).groupby("task", sort=False)
    out = _means(rows)
    kept = rows[~rows.excluded]
    out["included"] = _means(kept) if len(kept) else None
    out["excluded_tasks"] = {
        t: info[t]["scale_trend"]["reason"]
        for t in rows.task.unique()
        if info[t]["scale_trend"]["excluded_from_means"]
    }
    out["per_task"] = {
        t: {
            "method": g.method.iloc[0],
            "mae_pts": float(g.error_pts.abs().mean()),
            "mean_width_pts": float(g.width.mean()),
            "coverage": float(g.inside.mean()),
            "scale_trend": info[t]["scale_trend"]["verdict"],
            "heldout": info[t]["heldout"],
        }
        for t, g in per
    }
    return out


def run(bootstrap: int, data: pathlib.Path = DATA) -> dict:
    runs, chance = load(data)
    small_mask = runs.n_params <= FIT_MAX_N
    small, big = runs[small_mask], runs[~small_mask]
    tasks, near = above_chance(small, chance)
    out = {
        "protocol": "fit N <= 412M (95 runs), predict 1.4B and 6.9B (9 runs); C4 validation loss",
        "loss": loss_protocol(small, big),
        "tasks_above_chance": tasks,
        "tasks_near_chance": near,
        "average_top1_error": average_error_protocol(small, big, tasks, chance, bootstrap),
    }
    out["check_tasks_inferred_chance"] = summary(
        task_protocol(runs, small_mask, CHECK_TASKS, None, "auto", bootstrap)
    )
    out["check_tasks"] = summary(task_protocol(runs, small_mask, CHECK_TASKS, chance, "auto", bootstrap))
    for method in ("auto", "chain", "direct", "average"):
        out[f"above_chance_{method}"] = summary(
            task_protocol(runs, small_mask, tasks, chance, method, bootstrap)
        )
    out["near_chance_auto"] = summary(task_protocol(runs, small_mask, near, chance, "auto", bootstrap))
    return out


def _report(out: dict) -> None:
    lp, av = out["loss"], out["average_top1_error"]
    print(f"{out['protocol']}")
    print(f"loss (step 1, {lp['law']}): mean |rel error| {lp['mean_abs_rel_error_pct']:.2f}%")
    print(
        f"average top-1 error over {av['n_tasks']} tasks above chance: Gadre et al. law "
        f"{av['gadre_law']['mean_abs_rel_error_pct']:.2f}% rel "
        f"({av['gadre_law']['mean_abs_error_pts']:.2f} pts); "
        f"fit-task ({av['fit_task']['method']}) {av['fit_task']['mean_abs_rel_error_pct']:.2f}% rel "
        f"({av['fit_task']['mean_abs_error_pts']:.2f} pts), coverage {av['fit_task']['coverage']:.0%}"
    )
    for key in (
        "check_tasks_inferred_chance",
        "check_tasks",
        "above_chance_auto",
        "above_chance_chain",
        "above_chance_direct",
        "above_chance_average",
        "near_chance_auto",
    ):
        s = out[key]
        for label, m in (("", s), (" included", s["included"])):
            if m is None or (label and not s["excluded_tasks"]):
                continue
            print(
                f"{key}{label}: {m['n_tasks']} tasks, {m['n_predictions']} predictions: MAE "
                f"{m['mae_pts']:.2f} pts, 90% PI coverage {m['coverage']:.1%}, mean width "
                f"{m['mean_width_pts']:.1f} pts"
            )
        for t, why in s["excluded_tasks"].items():
            print(f"    excluded {t}: {why}")
        if key in ("above_chance_direct", "above_chance_average"):
            continue
        for t, r in s["per_task"].items():
            h = r["heldout"]
            held = "–" if h["coverage"] is None else f"{h['coverage']:.0%} / {100 * h['mean_width']:.1f}"
            print(
                f"    {t:<36} {r['method']:<7} MAE {r['mae_pts']:5.2f} pts  "
                f"width {r['mean_width_pts']:5.1f}  coverage {r['coverage']:4.0%}  "
                f"(held-out check: coverage / width {held})"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--data", type=pathlib.Path, default=DATA)
    ap.add_argument("--json", help="write the figures as JSON")
    args = ap.parse_args(argv)
    enable_compile_cache()
    t0 = time.time()
    out = run(args.bootstrap, args.data)
    out["seconds"] = time.time() - t0
    _report(out)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
