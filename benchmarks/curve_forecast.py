"""Loss-curve forecasts on the public multi-power-law curves: accuracy and 90% interval coverage.

The MPL authors' protocol (Luo et al. 2025, arXiv:2503.12811; curves in
`../shared/data/mpl_loss_curves`): fit on cosine_24000, constant_24000 and wsdcon_9, predict
the other six curves (two of them 3x longer). Per model size it prints

- the mean relative error over the predicted curves (the paper's "PredE": the mean over curves of
  each curve's mean |pred - actual| / actual), the worst single point, and the mean over curves of
  each curve's worst point (what the paper's "WorstE" column averages: its evaluation script
  averages every metric over the predicted curves);
- the 90% intervals: the fraction of all predicted points inside (and per curve), and the mean
  interval width relative to the loss;
- the wall time of the fit with its calibration refits (after the first size: compiled).

Paper figures for comparison (their README): PredE 0.110% / 0.142%, WorstE 0.41% / 0.58% for
25M / 100M (0.168% / 1.00% for their 400M set, not in the shared data).

`--protocol` picks how the MPL is fitted (`analysis/curves/fitting.py`, `PROTOCOLS`): optimum
(ours; the default for tissue), authors (Luo et al.'s code, `analysis/curves/protocol.py`) or
multistart (the default for mpl).
The curves' warm-up is 2160 steps (SOURCE.md), while some are logged first at step 2176.

    python benchmarks/curve_forecast.py [--sizes 25 100] [--law mpl] [--protocol authors] [--per-point]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from analysis.curves.fitting import PROTOCOLS, fit_curve, load_curve  # noqa: E402
from models.base.jaxcache import enable_compile_cache  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "mpl_loss_curves"
FIT = ("cosine_24000", "constant_24000", "wsdcon_9")
PREDICT = ("cosine_72000", "constant_72000", "wsd_20000_24000", "wsdld_20000_24000", "wsdcon_3", "wsdcon_18")
WARMUP_STEPS = 2160  # the runs' warm-up (SOURCE.md; the authors' schedules use it for every curve)


def summary(result) -> dict:
    """Accuracy and interval figures over the predicted curves of one fit."""
    p = result.predictions
    n = np.array([p[k]["n_points"] for k in PREDICT])
    cov = np.array([p[k].get("interval_coverage", np.nan) for k in PREDICT])
    width = np.array([p[k].get("interval_mean_rel_width", np.nan) for k in PREDICT])
    return {
        "mean": float(np.mean([p[k]["mean_rel_error"] for k in PREDICT])),
        "worst": float(max(p[k]["max_rel_error"] for k in PREDICT)),
        "mean_of_worst": float(np.mean([p[k]["max_rel_error"] for k in PREDICT])),
        "coverage": float(np.sum(cov * n) / n.sum()),
        "width": float(np.sum(width * n) / n.sum()),
    }


def run_size(
    size: str, law: str, per_point: bool, protocol: str | None = None, warmup_steps=WARMUP_STEPS
) -> dict:
    d = DATA / f"csv_{size}"
    load = lambda k: load_curve(d / f"{k}.csv", warmup_steps=warmup_steps)  # noqa: E731
    t = time.perf_counter()
    r = fit_curve([load(k) for k in FIT], law, predict=[load(k) for k in PREDICT], protocol=protocol)
    wall = time.perf_counter() - t
    s = summary(r)
    m = r.intervals
    print(
        f"{size}M {law} ({r.protocol}): mean {s['mean']:.3%}  worst {s['worst']:.3%}  "
        f"mean-of-worst {s['mean_of_worst']:.3%}  "
        f"| 90% intervals: coverage {s['coverage']:.1%}, mean width {s['width']:.2%} of the loss "
        f"(scatter + drift from {len(m.refits)} refits, {len(m.units)} units)  | {wall:.1f} s"
    )
    for k in PREDICT:
        e = r.predictions[k]
        print(
            f"    {k:18s} mean {e['mean_rel_error']:.3%} max {e['max_rel_error']:.3%}  "
            f"coverage {e['interval_coverage']:.0%} width {e['interval_mean_rel_width']:.2%}"
        )
    if per_point:
        for u in m.units:
            print(f"    unit {u.split:28s} {u.curve:16s} score {u.score:.3%} (max scale {u.max_scale:.2f})")
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["25", "100"], choices=["25", "100"])
    ap.add_argument("--law", default="mpl", choices=["mpl", "tissue"])
    ap.add_argument(
        "--protocol", default=None, choices=PROTOCOLS, help="how the law is fitted (default: fit-curve's)"
    )
    ap.add_argument(
        "--warmup-steps",
        type=int,
        default=WARMUP_STEPS,
        help=f"where the linear warm-up ends (default {WARMUP_STEPS}); 0 = at each curve's first logged step",
    )
    ap.add_argument("--per-point", action="store_true", help="also print the calibration units")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        print(f"{DATA} not found (the public curves live beside the checkout)", file=sys.stderr)
        return 1
    enable_compile_cache()
    for size in args.sizes:
        run_size(size, args.law, args.per_point, args.protocol, args.warmup_steps or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
