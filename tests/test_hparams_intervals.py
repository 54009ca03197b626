"""The 90% intervals of the hyperparameter laws (analysis.hparams.laws): what varies is in them.

Before, a law's interval held its parameter noise and the scatter of the rung optima around it
only: on the zoo's irregular LR ladder (`zoo.lr_ladder()`, cut at 4e8) the four fitted
rungs happened to lie on a line (residual sd 0.004 dex) and the default's intervals (+-0.02 dex)
held 0 of the 2 held-out true optima (off by 0.03 dex). Now each rung optimum is redrawn from its
own interval in the parametric refits, and a forward-chaining drift per decade beyond the fitted
model sizes is added. Each test here fails on the old intervals or on a broken term.
"""

import dataclasses
import json

import numpy as np
import pytest

from analysis import backtests as backtest
from analysis.backtests import zoo
from analysis.hparams import fit_hparams, load_hparams
from analysis.hparams import laws as L

LR, BATCH = "optim.lr", "train.batch_size"
ZOO_CASES = [  # (ladder, protocol, cut): the zoo's synthetic LR / batch cases
    (zoo.lr_ladder, "lr", 4e8),
    (zoo.lr_batch_ladder, "lr", 4.3e8),
    (zoo.lr_batch_ladder, "batch", 4.3e8),
]


def default_points(table, protocol, cut):
    bt = backtest.run(table, protocol, backtest.Options(bootstrap=20, holdout_above_n=cut))
    return next(m for m in bt.methods if m.default).points


@pytest.mark.parametrize("ladder,protocol,cut", ZOO_CASES)
def test_the_zoo_ladders_true_optima_are_covered_as_a_90_percent_interval_may(ladder, protocol, cut):
    """The default's coverage of the known optimum on the zoo's own ladders is consistent with
    90% (two-sided binomial at 5%): the LR ladder was 0/2 before (p = 0.01)."""
    pts = default_points(ladder(), protocol, cut)
    inside = sum(p.lo <= p.actual <= p.hi for p in pts)
    assert len(pts) >= 2
    assert zoo.consistent_with_90(inside, len(pts)), f"{inside}/{len(pts)} inside"
    # an interval, not everything: under x2 either side of the prediction on these ladders
    assert all(p.hi / p.lo < 4 for p in pts), [(p.lo, p.hi) for p in pts]


def held_out_coverage(table, param, cut):
    """(inside, n, mean width in dex) of the default law fitted on the rungs with N <= cut, on the
    held-out rungs' true optimum (`<param>_true`)."""
    truth_col = param + "_true" if param + "_true" in table else "lr_true"
    fit = table[table.N <= cut].drop(columns=[c for c in table if c.endswith("_true")])
    laws = fit_hparams(fit, [param]).laws()
    held = table[table.N > cut].groupby(["N", "D"], as_index=False)[truth_col].median()
    inside, width = 0, []
    for N, D, truth in held.itertuples(index=False):
        _, lo, hi = laws.predict(param, N, D)
        inside += lo <= truth <= hi
        width.append(np.log10(hi / lo))
    return inside, len(held), float(np.mean(width))


def test_coverage_over_seeds_is_about_90_percent_and_the_intervals_stay_narrow():
    """Pooled over 5 seeds of each zoo ladder (10 + 20 + 20 held-out optima), the intervals hold
    the true optimum as a 90% interval may (measured: 10/10, 17/20, 18/20), and they are not made
    so by width: under 0.5 dex on average (measured 0.34, 0.18, 0.31; the LR ladder's seed 4 has
    rungs 0.1 dex off any power law, and 0.98 dex, 1.18 before)."""
    cases = [
        (lambda s: zoo.lr_ladder(s).rename(columns={"lr": LR}), LR, 4e8),
        (zoo.lr_batch_ladder, LR, 4.3e8),
        (zoo.lr_batch_ladder, BATCH, 4.3e8),
    ]
    for make, param, cut in cases:
        got = [held_out_coverage(make(seed), param, cut) for seed in range(5)]
        inside, n = sum(g[0] for g in got), sum(g[1] for g in got)
        assert zoo.consistent_with_90(inside, n), (param, f"{inside}/{n}")
        assert np.mean([g[2] for g in got]) < 0.5, (param, [g[2] for g in got])


def line_of_rungs(sd_dex):
    """Four rung optima exactly on lr* = 3e-3 (N / 1e8)^-0.3 with +-`sd_dex` 90% intervals."""
    N = np.geomspace(2e7, 2e8, 4)
    opt = 3e-3 * (N / 1e8) ** -0.3
    half = 10**sd_dex
    return {"N": N, "D": 20 * N, "C": 120 * N * N}, opt, np.column_stack([opt / half, opt * half])


def test_each_rung_optimums_own_interval_reaches_the_laws_interval():
    """Rungs on an exact line leave no residual: the law's interval then comes from the rungs'
    own location error, and grows with it (the old interval was the round-off's)."""
    inputs, opt, _ = line_of_rungs(0.0)
    widths = []
    for sd in (0.0, 0.03, 0.1):
        _, _, interval = line_of_rungs(sd)
        law = L.fit_power_law(LR, L.FORMS["N"], inputs, opt, interval=interval if sd else None)
        v, lo, hi = law.predict(np.array([4e8]), np.array([8e9]), np.array([1.9e19]))
        assert lo[0] <= v[0] <= hi[0]
        widths.append(float(np.log10(hi[0] / lo[0])))
    assert widths[0] < 1e-6 < 0.02 < widths[1] < widths[2], widths


def test_drift_widens_predictions_beyond_the_fitted_sizes_only():
    """On rungs whose optimum bends away from a power law, forward-chaining measures a drift: the
    interval at the largest fitted N is the in-sample one, and it widens with decades beyond."""
    N = np.geomspace(1e7, 1e9, 7)
    opt = 3e-3 * (N / 1e8) ** -0.3 * np.exp(0.15 * np.log10(N / 1e7) ** 2)
    inputs = {"N": N, "D": 20 * N, "C": 120 * N * N}
    law = L.fit_power_law(LR, L.FORMS["N"], inputs, opt)
    e = law.error
    assert e.drift_per_decade > 0 and e.scale_role == "N" and e.scale_max == pytest.approx(1e9)
    at = np.array([1e9, 1e10, 1e11])
    still = dataclasses.replace(law, error=dataclasses.replace(e, budget_sd=0.0, drift_per_decade=0.0))
    w = [np.log10(hi / lo) for _, lo, hi in [m.predict(at, 20 * at, 120 * at * at) for m in (law, still)]]
    assert w[0][1] > w[1][1] and w[0][2] - w[1][2] > w[0][1] - w[1][1] > 0  # grows with distance
    assert law.decades(at, 20 * at) == pytest.approx([0, 1, 2])


def test_hp_json_keeps_the_drift_and_reads_old_files_without_it(tmp_path):
    table = zoo.lr_batch_ladder(0).drop(columns=["optim.lr_true", "train.batch_size_true"])
    fit = fit_hparams(table[table.N < 4.3e8], [LR])
    path = tmp_path / "hp.json"
    path.write_text(json.dumps(fit.to_json()))
    law, back = fit.laws(), load_hparams(path)
    assert back.laws[LR].error.drift_per_decade == law.laws[LR].error.drift_per_decade > 0
    assert back.predict(LR, 1e9, 2e10) == pytest.approx(law.predict(LR, 1e9, 2e10))
    old = fit.to_json()
    for key in ("budget_sd", "drift_per_decade", "scale_role", "scale_max"):
        del old["laws"][LR][key]
    path.write_text(json.dumps(old))
    v, lo, hi = load_hparams(path).predict(LR, 1e9, 2e10)
    assert lo <= v <= hi and hi / lo < law.predict(LR, 1e9, 2e10)[2] / law.predict(LR, 1e9, 2e10)[1]
