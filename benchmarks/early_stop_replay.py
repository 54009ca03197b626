"""Does `sweep.early_stop` pay on a sweep we ran? A replay on a finished LR sweep's run directories.

Every run of the sweep finished, so what early stopping would have done can be replayed exactly: the
runs go in their launch order (sweep_plan.json) in waves of `--wave` runs that train at once (the
sweep's packs and launcher slots); at each fraction f of `--at`, a run sees its rung's runs of earlier
waves (finished ones whole, stopped ones up to where they stopped) and of its own wave up to f, learns
from the finished runs of earlier waves (`forecast_runs`, as `python -m analysis forecast <sweep dir>`
does in the run), and stops when its p_best is below `--p`.

It reports: the compute saved (the stopped runs' remaining FLOPs against the sweep's), whether a
rung lost its best run, and the LR law (`fit-hparams` on the sweep's runs table) fitted on every run,
with the stopped runs left out, and with the stopped runs' forecasts in place of their final loss:
each law's lr* at the rungs and at the next size up, against the law fitted on every run.

Usage: python benchmarks/early_stop_replay.py outputs/hparam_ladder [--at 0.25 0.5] [--p 0.05]
           [--wave 8] [--method auto] [--json OUT] [--curves benchmarks/data/zoo/hparam_ladder_curves.csv.gz]
`--curves` also writes the sweep's curves table: the zoo's `ours hparam_ladder` curve-prefix case.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.core import runs as runs_mod  # noqa: E402
from analysis.forecast import forecast_runs, read_curves  # noqa: E402
from analysis.forecast.choose import rung_key  # noqa: E402
from analysis.hparams.fitting import HparamOptions, fit_hparams  # noqa: E402
from models.base.errors import AnalysisError  # noqa: E402
from models.base.jsonio import write_json  # noqa: E402
from models.base.rundir import SWEEP_PLAN_FILE  # noqa: E402

KEY = "optim.lr"


def launch_order(sweep: pathlib.Path, names: set[str]) -> list[str]:
    plan = json.loads((sweep / SWEEP_PLAN_FILE).read_text())
    order = [f"{sweep.name}/{r['run_dir']}" for r in plan["runs"] if r.get("run_dir")]
    return [n for n in dict.fromkeys(order) if n in names]


def replay(sweep: pathlib.Path, at: list[float], p: float, wave: int, method: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curves = {c.run: c for c in read_curves(sweep, "the sweep")}
    order = launch_order(sweep, set(curves))
    stopped: dict[str, tuple[float, float, float]] = {}  # run -> (frac, forecast, p_best)
    finished: list[str] = []
    decisions = 0
    for w in range(0, len(order), wave):
        batch = order[w : w + wave]
        for f in sorted(at):
            for name in batch:
                if name in stopped:
                    continue
                me = curves[name]
                key = rung_key(me.settings, KEY)
                cut = me.until(f * me.total_steps)
                peers = [cut]
                for other in finished + [n for n in stopped if n not in batch]:
                    if other != name and rung_key(curves[other].settings, KEY) == key:
                        c = curves[other]
                        peers.append(c if other in finished else c.until(stopped[other][0] * c.total_steps))
                for other in batch:
                    if other != name and rung_key(curves[other].settings, KEY) == key:
                        frac = stopped[other][0] if other in stopped else f
                        peers.append(curves[other].until(frac * curves[other].total_steps))
                if len(peers) < 2 or cut.step.size < 2:
                    continue
                try:
                    r = forecast_runs(peers, [curves[n] for n in finished], KEY, method)
                except AnalysisError:
                    continue
                decisions += 1
                pb = r.p_best(name)
                if pb is not None and pb < p:
                    stopped[name] = (f, r.forecast(name).final_loss, pb)
        finished += [n for n in batch if n not in stopped]
    return {"order": order, "stopped": stopped, "decisions": decisions}


CURVE_POINTS = 200  # points of each run kept in the curves table


def curves_table(sweep: pathlib.Path) -> pd.DataFrame:
    """The sweep's runs as a curves table (what `forecast` and backtest --protocol curve-prefix read):
    run, step, loss (training), lr, at most CURVE_POINTS points per run evenly spread; total_steps,
    N, the swept settings and final_loss (the final held-out loss) per run."""
    rows = []
    for c in read_curves(sweep, "the sweep"):
        idx = np.unique(np.linspace(0, c.step.size - 1, min(c.step.size, CURVE_POINTS)).round().astype(int))
        per_run = {
            "total_steps": c.total_steps,
            "N": c.settings["N"],
            "final_loss": c.target,
            **{k: c.settings[k] for k in (KEY, "train.batch_size", "sweep.budget") if k in c.settings},
        }
        rows += [
            {
                "run": c.run.split("/")[-1],
                "step": int(c.step[i]),
                "loss": float(c.loss[i]),
                "lr": float(c.lr[i]),
            }
            | per_run
            for i in idx
        ]
    return pd.DataFrame(rows)


def law_table(table: pd.DataFrame, stopped: dict, how: str) -> pd.DataFrame:
    if how == "all":
        return table
    if how == "excluded":
        return table[~table["run"].isin(stopped)]
    t = table.copy()
    for run, (_, fc, _) in stopped.items():
        t.loc[t["run"] == run, "loss"] = fc
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("--at", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--p", type=float, default=0.05)
    ap.add_argument("--wave", type=int, default=8)
    ap.add_argument("--method", default="auto")
    ap.add_argument("--json")
    ap.add_argument(
        "--curves", metavar="PATH", help="also write the sweep's curves table (CSV; .csv.gz) there"
    )
    args = ap.parse_args(argv)
    sweep = pathlib.Path(args.sweep).resolve()
    if args.curves:
        curves_table(sweep).to_csv(args.curves, index=False)  # .csv.gz: compressed
    out = replay(sweep, args.at, args.p, args.wave, args.method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = runs_mod.table(sweep, cache_dir=False)
    flops = table.set_index("run")["C"]
    stopped = out["stopped"]
    saved = sum((1 - f) * flops[r] for r, (f, _, _) in stopped.items())
    lost = []
    for _, g in table.groupby(["N", "train.batch_size", "sweep.budget"]):
        best = g.loc[g["loss"].idxmin(), "run"]
        if best in stopped:
            lost.append(best)
    kept_best_regret = []
    for _, g in table.groupby(["N", "train.batch_size", "sweep.budget"]):
        kept = g[~g["run"].isin(stopped)]
        kept_best_regret.append(float(kept["loss"].min() / g["loss"].min() - 1))
    laws = {}
    for how in ("all", "excluded", "forecast"):
        try:
            fit = fit_hparams(law_table(table, stopped, how), [KEY], HparamOptions())
        except AnalysisError as e:
            laws[how] = {"error": str(e)}
            continue
        law = fit.fits[KEY].law
        Nmax = float(table["N"].max())
        D = float(table.loc[table["N"] == Nmax, "D"].max())
        v, lo, hi = fit.laws().predict(KEY, 2 * Nmax, 2 * D)
        laws[how] = {
            "form": law.form,
            "expression": law.spec.expression(KEY, law.coef),
            "n_rungs": law.n_rungs,
            "lr_at_2x_largest": [v, lo, hi],
            "rung_optima": {f"{r.N:.0f}/{r.D:.0f}": r.optimum for r in fit.fits[KEY].rungs if r.usable},
        }
    base = laws["all"].get("lr_at_2x_largest", [math.nan])[0]
    truth = laws["all"].get("rung_optima", {})
    for how in ("excluded", "forecast"):
        if "lr_at_2x_largest" in laws[how]:
            laws[how]["vs_all"] = laws[how]["lr_at_2x_largest"][0] / base
            got = laws[how]["rung_optima"]
            d = [abs(math.log10(got[k] / v)) for k, v in truth.items() if k in got]
            laws[how]["rung_optima_mean_abs_dlog10"] = float(np.mean(d)) if d else None
            laws[how]["rungs_lost"] = len([k for k in truth if k not in got])
    result = {
        "sweep": str(sweep),
        "at": args.at,
        "p": args.p,
        "wave": args.wave,
        "method": args.method,
        "runs": len(table),
        "decisions": out["decisions"],
        "stopped": {r: {"frac": f, "forecast": fc, "p_best": pb} for r, (f, fc, pb) in stopped.items()},
        "n_stopped": len(stopped),
        "flops_saved_fraction": saved / float(flops.sum()),
        "rungs_that_lost_their_best": lost,
        "mean_regret_of_kept_best": float(np.mean(kept_best_regret)),
        "laws": laws,
    }
    print(
        f"{len(table)} runs, {out['decisions']} decisions, {len(stopped)} stopped, "
        f"{result['flops_saved_fraction']:.1%} of the sweep's FLOPs saved; rungs that lost their best run: "
        f"{len(lost)} (mean regret of the best kept run {result['mean_regret_of_kept_best']:.3%})"
    )
    for how, law in laws.items():
        if "error" in law:
            print(f"  LR law, {how}: {law['error']}")
            continue
        v, lo, hi = law["lr_at_2x_largest"]
        vs = ""
        if "vs_all" in law:
            off = law["rung_optima_mean_abs_dlog10"]
            vs = f", x{law['vs_all']:.3f} the all-runs law; rung optima {off:.3f} dex off theirs, "
            vs += f"{law['rungs_lost']} rung(s) lost"
        band = f"{v:.3g} [{lo:.3g}, {hi:.3g}]"
        print(f"  LR law, {how}: {law['expression']} ({law['n_rungs']} rungs); lr* at 2x N, 2x D {band}{vs}")
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
