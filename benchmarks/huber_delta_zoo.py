"""The Huber delta of the Chinchilla fit, on the backtest zoo's budget and size protocols: is any
(law, delta) no worse than the SciPy least-squares baseline on every dataset (issue "Defaults that
generalize", the default rule)? Prints one JSON line per backtest, then per variant its mean error,
on how many datasets it is worse than 1.1x the baseline, and its worst ratio.

Usage: python benchmarks/huber_delta_zoo.py [--out OUT.json]   (~10 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import warnings

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import backtest_zoo as zoo  # noqa: E402

from analysis import backtests as backtest  # noqa: E402
from analysis.backtests import baselines, losses  # noqa: E402
from analysis.laws.fitting import fit_law  # noqa: E402
from models.base.errors import AnalysisError  # noqa: E402

DELTAS = (1e-3, 1e-2, 1.0)
LAWS = ("chinchilla", "chinchilla_tied")


def one(case: zoo.Case) -> dict:
    runs = losses.runs_table(case.load())
    held, _ = losses._split(runs, case.protocol, backtest.Options(**case.options))
    fit, test = runs[~held], runs[held]
    b = baselines.fit_chinchilla(fit.N.values, fit.D.values, fit.loss.values)
    pred = baselines.predict_chinchilla(b, test.N.values, test.D.values)
    row = {
        "case": f"{case.dataset} {case.protocol}",
        "baseline": float(np.mean(np.abs(pred / test.loss - 1))),
    }
    for delta in DELTAS:
        for law in LAWS:
            try:
                f = fit_law(fit, law, bootstrap=0, prediction_intervals=False, delta=delta)
                row[f"{law}@{delta:g}"] = float(np.mean(np.abs(f.predict(test) / test.loss.values - 1)))
            except AnalysisError:
                row[f"{law}@{delta:g}"] = None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for case in zoo.cases():
        if case.protocol in ("budget", "size"):
            rows.append(one(case))
            print(json.dumps(rows[-1]), flush=True)
    for k in [k for k in rows[0] if k not in ("case", "baseline")]:
        ok = [x for x in rows if x[k] is not None]
        ratio = [x[k] / x["baseline"] for x in ok]
        print(
            f"{k:22s} n={len(ok)} mean {100 * np.mean([x[k] for x in ok]):.2f}% "
            f"worse than 1.1x the baseline on {sum(r > 1.1 for r in ratio)}, worst {max(ratio):.2f}x"
        )
    print(f"baseline mean {100 * np.mean([x['baseline'] for x in rows]):.2f}%")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
