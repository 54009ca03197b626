"""The multi-power law under its authors' protocol (issue 28 item 3): their published figures on the
public 25M / 100M curves from their parameters, and fit-curve's multistart fit beyond them.

Their README (github.com/thu-yao-01-luo/MultiPowerLaw, `../shared/data/mpl_loss_curves/SOURCE.md`)
reports PredE 0.110% / 0.142% and WorstE 0.409% / 0.583% for 25M / 100M, both averaged over the
six predicted curves (WorstE: the mean of each curve's worst point), and the fitted parameters
below (their `src/config.py`, PARAMS)."""

import functools

import numpy as np
import pytest

from analysis import AnalysisError, fit_curve, load_curve
from analysis.cli import main
from analysis.curves.fitting import features
from analysis.curves.laws import evaluate, get_curve_law

FIT = ("cosine_24000", "constant_24000", "wsdcon_9")
PREDICT = ("cosine_72000", "constant_72000", "wsd_20000_24000", "wsdld_20000_24000", "wsdcon_3", "wsdcon_18")
WARMUP_STEPS = 2160  # the runs' warm-up (SOURCE.md); some curves are logged first at step 2176
README = {  # size -> (PredE, WorstE, parameters L0, A, alpha, B, C, beta, gamma)
    "25": (
        0.00110,
        0.00409,
        (3.04045406, 0.52468604, 0.50786857, 363.78751622, 2.06560812, 0.58279013, 0.64142257),
    ),
    "100": (
        0.00142,
        0.00583,
        (2.6514477, 0.60115152, 0.45295811, 437.9464276, 2.13245612, 0.59785199, 0.65523644),
    ),
}


def _curve(shared_data, size, name):
    return load_curve(
        shared_data / "mpl_loss_curves" / f"csv_{size}" / f"{name}.csv", warmup_steps=WARMUP_STEPS
    )


@functools.lru_cache(maxsize=None)
def _fit(data_dir, size: str):
    import pathlib

    d = pathlib.Path(data_dir)
    return fit_curve(
        [_curve(d, size, n) for n in FIT],
        "mpl",
        predict=[_curve(d, size, n) for n in PREDICT],
    )


def _scores(result) -> tuple[float, float, float, float]:
    """(PredE, WorstE as the authors average it, pooled interval coverage, min per-curve coverage)."""
    p = result.predictions
    n = np.array([p[k]["n_points"] for k in PREDICT])
    cov = np.array([p[k]["interval_coverage"] for k in PREDICT])
    return (
        float(np.mean([p[k]["mean_rel_error"] for k in PREDICT])),
        float(np.mean([p[k]["max_rel_error"] for k in PREDICT])),
        float(cov @ n / n.sum()),
        float(cov.min()),
    )


@pytest.mark.parametrize("size", ["25", "100"])
def test_the_authors_law_and_scoring_give_their_figures_from_their_parameters(shared_data, size):
    """Their law (warm-up rises in the drop sum) on our rebuilt schedules, scored on every logged
    step of the six curves, gives the README's PredE / WorstE from the README's parameters: the
    law, schedules and score are theirs (the fit is tested below). Summed from the peak instead
    (`features` without warmup_rises), the same parameters are 3-5% off."""
    pred_e, worst_e, params = README[size]
    law = get_curve_law("mpl")
    mean, worst, shifted = [], [], []
    for name in PREDICT:
        c = _curve(shared_data, size, name)
        t, y = c.law_steps(), c.loss_at(c.law_steps())
        rel = np.abs(evaluate(law, np.array(params), features([(c, t)], warmup_rises=True)) - y) / y
        mean.append(rel.mean())
        worst.append(rel.max())
        shifted.append(np.mean(np.abs(evaluate(law, np.array(params), features([(c, t)])) - y) / y))
    assert np.mean(mean) == pytest.approx(pred_e, abs=0.00003)
    assert np.mean(worst) == pytest.approx(worst_e, abs=0.00015)
    assert min(shifted) > 0.02


@pytest.mark.slow
@pytest.mark.parametrize("size", ["25", "100"])
def test_multistart_beats_the_authors_on_both_sets(shared_data, size):
    """fit-curve's default, the multistart protocol (their AdamW run from 27 annealing starts, the
    lowest objective kept: no test curve enters the choice) is below the README's PredE and WorstE
    on both sets (measured: 0.104% / 0.373% on 25M, 0.114% / 0.476% on 100M). Interval coverage, measured:
    87.7% on 25M (worst curve 68%) and 75.6% on 100M (worst 48%: cosine_72000, three times the
    fitted horizon, misses by 0.22% on average against a 0.43%-wide interval; no fitted curve's
    refit shows that drift, so the calibration cannot see it: docs/measurements.md)."""
    r = _fit(str(shared_data), size)
    mean, worst, coverage, worst_curve = _scores(r)
    assert mean < README[size][0] and worst < README[size][1], (mean, worst)
    assert r.protocol == "multistart" and r.n_starts == 27
    assert coverage >= 0.7 and worst_curve >= 0.45, (coverage, worst_curve)


def test_adamw_rounds_keep_every_row_bit_for_bit(shared_data, monkeypatch):
    """The AdamW loop runs in rounds, the rows still running in a smaller batch once a quarter of
    the batch has stopped (`protocol._run_compacted`): a pure speed-up. 54 rows (the 27 starts on
    every point and on a leave-one-curve-out row, every 8th step of the 25M fit set: small and
    fast) give the parameters, objectives, gradients, steps and stop codes of one loop over the
    whole batch bit for bit, and the rows do stop at different steps (the batch did shrink)."""
    from analysis.curves import fitting as cf
    from analysis.curves import protocol as authors

    parts = [(c, c.law_steps()[::8]) for c in (_curve(shared_data, "25", n) for n in FIT)]
    problem = cf.problem(parts, None, 32, warmup_rises=True)
    first = np.arange(problem.F.n) < parts[0][1].size
    W = np.vstack([np.ones(problem.F.n), (~first).astype(float)])
    p0 = authors.starts(problem, parts, W, authors.MULTISTART_GRID)
    weights = np.repeat(W, len(authors.MULTISTART_GRID), axis=0)
    starts = p0.copy()
    rounds, chunk = authors.adamw(problem, p0, weights), authors.CHUNK_STEPS
    assert np.array_equal(p0, starts)  # the caller's starts are its own (the calibration reuses them)
    monkeypatch.setattr(authors, "CHUNK_STEPS", authors.MAX_STEPS)  # one loop, one batch: as before
    whole = authors.adamw(problem, p0, weights)
    # over a quarter of the rows stop two rounds before the last one: the batch shrank
    assert np.sum(rounds.steps <= rounds.steps.max() - 2 * chunk) > (1 - authors.SHRINK) * len(p0)
    for k in ("params", "f", "grad_norm", "steps", "stop"):
        assert np.array_equal(getattr(rounds, k), getattr(whole, k)), k


def test_protocol_errors_are_one_line(shared_data, tmp_path):
    d = shared_data / "mpl_loss_curves" / "csv_25"
    fit = [d / "cosine_24000.csv"]
    with pytest.raises(AnalysisError, match="unknown fit protocol 'nope'"):
        fit_curve(fit, "mpl", protocol="nope")
    with pytest.raises(AnalysisError, match="unknown curve law 'tissue'"):
        fit_curve(fit, "tissue")
    with pytest.raises(AnalysisError, match="drop --fix"):
        fit_curve(fit, "mpl", protocol="multistart", fixed={"gamma": 0.5})
    with pytest.raises(AnalysisError, match="warmup_steps must be in"):
        load_curve(d / "constant_24000.csv", warmup_steps=3000).schedule()
    assert main(["fit-curve", "--fit", str(fit[0]), "--search", "nope"]) != 0


def test_warmup_steps_end_the_linear_warmup_there():
    """`warmup_steps=W`: the rate rises linearly from 0 to the first logged rate at step W and holds
    it up to the first logged step; by default the rise ends at the first logged step."""
    from analysis.curves.data import Curve

    steps, lr = np.array([100, 200, 300]), np.array([1.0, 1.0, 0.5])
    eta = Curve("c", steps, np.ones(3), lr, warmup_steps=80).schedule()
    assert eta[0] == 0 and eta[40] == pytest.approx(0.5) and np.all(eta[80:201] == 1.0)
    eta = Curve("c", steps, np.ones(3), lr).schedule()
    assert eta[50] == pytest.approx(0.5) and eta[80] == pytest.approx(0.8) and eta[100] == 1.0
