"""Held-out scale accuracy and interval coverage of point-law fits on the shared public data.

Each *experiment* is one table of runs split into a fit part (the smaller scales) and a held-out
part (the largest); the law is fitted on the first and predicts the second. Reported per
experiment and pooled: mean |relative error| of the held-out predictions, the coverage of their
90% prediction intervals and the intervals' mean relative width.

Protocols (all data in ../shared/data; nothing else is used):
- `epoch`: Epoch AI's reconstruction of the Chinchilla runs (Besiroglu et al. 2024), the 5
  highest losses dropped as in the interface check; held out: C > 2e21 FLOPs (the top budgets).
- `gadre-size`: Gadre et al. 2024 open_lm runs, per dataset (C4, RedPajama, RefinedWeb) and per
  validation set (8): fit on N <= 412M, predict the 1.4B and 6.9B runs (the paper's protocol:
  far beyond the fitted sizes and, for 1.4B x 4, over-trained).
- `gadre-compute`: the same tables, fit on C <= 1e21 (6ND), predict every run above.
The "multi-source" figure pools epoch + gadre-compute (each experiment fitted on its smaller
budgets, its largest predicted).

Usage: python benchmarks/holdout_eval.py [--protocol all|epoch|gadre-size|gadre-compute]
           [--law chinchilla|chinchilla_tied|auto] [--bootstrap 200] [--val-sets main|all] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis.laws.fitting import fit_law  # noqa: E402
from analysis.laws.selection import AUTO, fit_auto  # noqa: E402

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
GADRE_SETS = {"c4_original": "C4", "rpj": "RedPajama", "rw_original": "RefinedWeb"}
GADRE_MAIN_LOSS = "loss_c4_val"


def epoch_table() -> pd.DataFrame:
    d = pd.read_csv(SHARED / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    return pd.DataFrame({"N": d["Model Size"], "C": d["Training FLOP"], "loss": d.loss}).reset_index(
        drop=True
    )


def gadre_tables(val_sets: str) -> dict[str, pd.DataFrame]:
    r = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
    losses = [c for c in r.columns if c.startswith("loss_")] if val_sets == "all" else [GADRE_MAIN_LOSS]
    out = {}
    for ds, name in GADRE_SETS.items():
        x = r[r.dataset == ds]
        for col in losses:
            out[f"{name}/{col[5:]}"] = (
                pd.DataFrame(
                    {
                        "N": x.n_params.astype(float),
                        "D": x.tokens.astype(float),
                        "N_ne": x.n_params_non_embedding.astype(float),
                        "loss": x[col].astype(float),
                    }
                )
                .dropna()
                .reset_index(drop=True)
            )
    return out


def experiments(protocol: str, val_sets: str) -> list[tuple[str, str, pd.DataFrame, np.ndarray]]:
    """(protocol, name, table, held-out mask) for every experiment of `protocol`."""
    out = []
    if protocol in ("all", "epoch"):
        t = epoch_table()
        out.append(("epoch", "Chinchilla (Epoch)", t, t.C.values > 2e21))
    if protocol in ("all", "gadre-size", "gadre-compute"):
        for name, t in gadre_tables(val_sets).items():
            if protocol in ("all", "gadre-size"):
                out.append(("gadre-size", name, t, t.N.values > 5e8))
            if protocol in ("all", "gadre-compute"):
                out.append(("gadre-compute", name, t, 6 * t.N.values * t.D.values > 1e21))
    return out


def run_one(table: pd.DataFrame, held: np.ndarray, law: str, bootstrap: int, seed: int) -> dict:
    cols = {"N": "N", "loss": "loss"}
    cols.update({"D": "D"} if "D" in table else {"C": "C"})
    if law == AUTO:
        fit = fit_auto(table[~held], cols, bootstrap=bootstrap, seed=seed)
    else:
        fit = fit_law(table[~held], law, cols, bootstrap=bootstrap, seed=seed)
    h = table[held]
    inputs = {"N": h.N.values}
    if "D" in h:
        inputs["D"] = h.D.values
        inputs["C"] = 6 * h.N.values * h.D.values
    else:
        inputs["C"] = h.C.values
        inputs["D"] = h.C.values / (6 * h.N.values)
    pred, lo, hi = fit.predict_interval(inputs)
    y = h.loss.values
    rel = (pred - y) / y
    return {
        "rel_error": rel.tolist(),
        "inside": ((y >= lo) & (y <= hi)).tolist(),
        "rel_width": ((hi - lo) / pred).tolist(),
        "n_fit": int((~held).sum()),
        "prediction_error": fit.prediction_error.to_dict() if fit.prediction_error else None,
        "law": fit.law,
    }


def summarise(rows: list[dict]) -> dict:
    rel = np.abs(np.concatenate([r["rel_error"] for r in rows]))
    inside = np.concatenate([r["inside"] for r in rows])
    width = np.concatenate([r["rel_width"] for r in rows])
    return {
        "n_points": int(rel.size),
        "mean_rel_error": float(rel.mean()),
        "max_rel_error": float(rel.max()),
        "coverage": float(inside.mean()),
        "mean_rel_width": float(width.mean()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", default="all", choices=("all", "epoch", "gadre-size", "gadre-compute"))
    ap.add_argument("--law", default="chinchilla")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-sets", default="main", choices=("main", "all"))
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    for proto, name, table, held in experiments(args.protocol, args.val_sets):
        r = run_one(table, held, args.law, args.bootstrap, args.seed)
        r["name"] = name
        results.setdefault(proto, []).append(r)
        s = summarise([r])
        pe = r["prediction_error"] or {}
        print(
            f"{proto:14s} {name:28s} {r['law']:15s} n_fit {r['n_fit']:3d} held {s['n_points']:2d}  "
            f"mean {s['mean_rel_error']:.2%}  "
            f"max {s['max_rel_error']:.2%}  cover {s['coverage']:.0%}  width {s['mean_rel_width']:.2%}  "
            f"noise {pe.get('noise_sd', float('nan')):.4f} budget {pe.get('budget_sd', float('nan')):.4f} "
            f"drift/dec {pe.get('drift_per_decade', float('nan')):.4f}",
            flush=True,
        )
    summary = {proto: summarise(rows) for proto, rows in results.items()}
    multi = [r for p in ("epoch", "gadre-compute") for r in results.get(p, [])]
    if multi:
        summary["multi-source"] = summarise(multi)
    for k, s in summary.items():
        print(
            f"== {k:14s} points {s['n_points']:3d}  mean |rel err| {s['mean_rel_error']:.2%}  "
            f"max {s['max_rel_error']:.2%}  "
            f"90% coverage {s['coverage']:.0%}  mean width {s['mean_rel_width']:.2%}"
        )
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"summary": summary, "experiments": results}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    raise SystemExit(main())
