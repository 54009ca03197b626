"""The best loss at a budget far beyond the ladder: each frontier method's error and coverage.

Protocols (all fit with `fit_law(..., "chinchilla")`, i.e. what `fit --budget` does):

- **Epoch**: Epoch's reconstruction of the Chinchilla runs (`../shared/data/chinchilla_epoch`,
  the 5 worst runs dropped as in `../shared/checks/frontier.sh`), fitted on C <= cut for cuts
  3e19, 1e20 (the check's) and 3e20; for each larger half-decade of C, predict the best run in it.
- **Gadre**: the Gadre et al. 2024 runs (`../shared/data/gadre2024_overtraining`), one corpus at
  a time, C4 validation loss, fitted on N <= 154M; predict the best run of each larger half-decade.
  Not an IsoFLOP ladder (each N at token multipliers 0.25-32x): the best run of a bin is rarely
  compute-optimal, so this checks robustness, not the frontier's shape.
- **Synthetic**: IsoFLOP ladders of 7 shapes at 12 budgets 1e16-2.5e19 (x2 apart) on a surface
  the Chinchilla form cannot represent (Kaplan et al. 2020's eq. 1.5 with a floor), 0.5% log
  noise; fitted on C <= 5e17 (6 budgets), predict the best run of each larger budget (2-50x).
- **Own ladder** (`--runs RUNS.csv`, e.g. a `collect`ed demo sweep): fitted on the budgets
  below `--fit-below`, predict the best run of each larger budget.

Per protocol and method it prints the mean |relative error| of the predicted best loss, the 90%
interval coverage and mean width, and which method `fit` chose.

    python benchmarks/frontier_eval.py [--runs RUNS.csv --fit-below 5e11] [--synthetic 10] [--json OUT]
    python benchmarks/frontier_eval.py --quick --json /tmp/frontier.json   # smoke run (the test's):
        Epoch at the check's cut (C <= 1e20) and one synthetic ladder, 20 bootstrap resamples
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import warnings

import numpy as np
import pandas as pd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis.laws.allocation import ScalingLaw  # noqa: E402
from analysis.laws.fitting import fit_law  # noqa: E402
from analysis.laws.frontier import FrontierMethod  # noqa: E402
from models.base.jaxcache import enable_compile_cache  # noqa: E402

SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
BOOTSTRAP = 200


def half_decade_best(df: pd.DataFrame) -> pd.DataFrame:
    """The best run of each half-decade of C (the check's targets)."""
    b = np.floor(np.log10(df.C.to_numpy(float)) * 2) / 2
    return df.loc[df.groupby(b).loss.idxmin()]


def evaluate(fit_df: pd.DataFrame, targets: pd.DataFrame, bootstrap: int = BOOTSTRAP) -> dict:
    """Per method: errors, coverage and width at the targets' (C, best loss); and the choice."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_law(fit_df, "chinchilla", bootstrap=bootstrap)
    law = ScalingLaw.from_fit(fit)
    C, best = targets.C.to_numpy(float), targets.loss.to_numpy(float)
    out = {"chosen": str(fit.frontier.method), "reason": fit.frontier.reason, "methods": {}}
    for m in FrontierMethod:
        rows = ScalingLaw(**{**law.__dict__, "frontier": fit.frontier.with_method(m)}).allocation(C)[
            "budgets"
        ]
        pred = np.array([r["loss"] for r in rows])
        lo, hi = (np.array([r["loss_interval"][i] for r in rows]) for i in (0, 1))
        out["methods"][str(m)] = {
            "errors": list(pred / best - 1),
            "mean_abs_error": float(np.mean(np.abs(pred / best - 1))),
            "coverage": float(np.mean((best >= lo) & (best <= hi))),
            "width": float(np.mean((hi - lo) / pred)),
        }
    out["n_targets"] = int(C.size)
    out["max_distance_x"] = float(C.max() / fit_df.C.max())
    return out


def epoch(cuts=(3e19, 1e20, 3e20), bootstrap: int = BOOTSTRAP) -> dict:
    d = pd.read_csv(SHARED / "chinchilla_epoch" / "svg_extracted_data.csv")
    d = d[d.loss < d.loss.nlargest(5).min()]
    d = pd.DataFrame({"N": d["Model Size"], "C": d["Training FLOP"], "loss": d.loss})
    d["D"] = d.C / (6 * d.N)
    return {
        f"epoch C<={cut:g}": evaluate(d[d.C <= cut], half_decade_best(d[d.C > cut]), bootstrap)
        for cut in cuts
    }


def gadre() -> dict:
    g = pd.read_csv(SHARED / "gadre2024_overtraining" / "runs.csv")
    out = {}
    for corpus, x in g.groupby("dataset"):
        d = pd.DataFrame(
            {"N": x.n_params.astype(float), "D": x.tokens.astype(float), "loss": x.loss_c4_val.astype(float)}
        )
        d["C"] = 6 * d.N * d.D
        small = d.N <= 1.6e8
        big = d[~small & (d.C > d[small].C.max())]
        out[f"gadre {corpus}"] = evaluate(d[small], half_decade_best(big))
    return out


def kaplan_surface(N: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Kaplan et al. 2020 eq. 1.5 (N_c = 8.8e13, D_c = 5.4e13, alpha_N = 0.076, alpha_D = 0.095),
    scaled by 0.9 over a floor of 1.8: not of the additive Chinchilla form."""
    return 1.8 + 0.9 * ((8.8e13 / N) ** (0.076 / 0.095) + 5.4e13 / D) ** 0.095


def kaplan_ladder(seed: int) -> pd.DataFrame:
    """A misspecified ladder (seeded): `kaplan_surface` at 12 budgets x 7 shapes, 0.5% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for C in np.geomspace(1e16, 2.5e19, 12):
        for f in np.geomspace(0.25, 4, 7):
            N = np.sqrt(C / 6 / 20) * f
            D = C / 6 / N
            rows.append(dict(N=N, D=D, C=C, loss=kaplan_surface(N, D) * np.exp(rng.normal(0, 0.005))))
    return pd.DataFrame(rows)


def synthetic_one(seed: int, bootstrap: int = BOOTSTRAP) -> dict:
    """One synthetic ladder (seeded): `evaluate` on its 6 budgets <= 5e17, the 6 larger as targets."""
    x = kaplan_ladder(seed)
    big = x[x.C > 5.1e17]
    return evaluate(x[x.C <= 5.1e17], big.loc[big.groupby("C").loss.idxmin()], bootstrap)


def synthetic(n: int, bootstrap: int = BOOTSTRAP) -> dict:
    return {f"synthetic seed {seed}": synthetic_one(seed, bootstrap) for seed in range(n)}


def own(path: str, fit_below: float) -> dict:
    from analysis.core.best_runs import has_config, select_best_runs

    d = pd.read_csv(path)
    if has_config(d):
        d = select_best_runs(d).selected
    d = d[["N", "D", "C", "loss"]].astype(float)
    big = d[d.C > fit_below]
    b = np.round(np.log10(big.C), 1)
    return {
        f"own {pathlib.Path(path).name} C<={fit_below:g}": evaluate(
            d[d.C <= fit_below], big.loc[big.groupby(b).loss.idxmin()]
        )
    }


def print_table(results: dict) -> None:
    print(f"{'protocol':34s} {'chosen':20s} " + "  ".join(f"{str(m):>26s}" for m in FrontierMethod))
    for name, r in results.items():
        cells = [
            f"{100 * v['mean_abs_error']:5.2f}% cov {v['coverage']:4.0%} w {100 * v['width']:4.1f}%"
            for v in r["methods"].values()
        ]
        print(f"{name:34s} {r['chosen']:20s} " + "  ".join(f"{c:>26s}" for c in cells))
    chosen = [r["methods"][r["chosen"]] for r in results.values()]
    n = sum(r["n_targets"] for r in results.values())
    err = sum(c["mean_abs_error"] * r["n_targets"] for c, r in zip(chosen, results.values())) / n
    cov = sum(c["coverage"] * r["n_targets"] for c, r in zip(chosen, results.values())) / n
    print(f"chosen method over all {n} targets: mean |err| {100 * err:.2f}%, 90% coverage {cov:.0%}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", help="a runs table of our own IsoFLOP sweep")
    ap.add_argument("--fit-below", type=float, default=5e11, help="fit the --runs budgets up to this C")
    ap.add_argument("--synthetic", type=int, default=10, help="synthetic ladders (seeds)")
    ap.add_argument("--skip", nargs="*", default=[], choices=("epoch", "gadre"))
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--bootstrap", type=int, default=BOOTSTRAP, help="bootstrap resamples of each fit")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: Epoch at C <= 1e20, one synthetic ladder"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.synthetic, args.bootstrap, args.skip = 1, 20, ["gadre"]
    enable_compile_cache()
    results = {}
    if "epoch" not in args.skip:
        results.update(epoch((1e20,) if args.quick else (3e19, 1e20, 3e20), args.bootstrap))
    if "gadre" not in args.skip:
        results.update(gadre())
    if args.synthetic:
        results.update(synthetic(args.synthetic, args.bootstrap))
    if args.runs:
        results.update(own(args.runs, args.fit_below))
    print_table(results)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
