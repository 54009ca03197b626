"""Downstream-task prediction (`analysis.downstream`, `python -m analysis fit-task`).

Synthetic ladders are drawn from a known chain: the task loss follows the tied Chinchilla law
L = E + A/N^alpha + B/D^alpha, and each task's accuracy a sigmoid of that loss between chance and
a ceiling, plus Gaussian run scatter. One test runs the Gadre et al. 2024 protocol on the shared
data and asserts the accuracy the tool reaches there (docs/downstream.md).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from analysis.cli import main
from analysis.core.methods import get, methods, names
from analysis.downstream import fit_downstream
from analysis.downstream import methods as _methods  # noqa: F401  (registers the family)
from analysis.downstream.data import infer_chance, read_ladder
from analysis.downstream.intervals import interval
from analysis.downstream.taskloss import fit_task_loss
from analysis.laws.fitting import fit_law
from models.base.errors import AnalysisError
from models.base.jaxcache import enable_compile_cache

LAW = dict(E=1.7, A=120.0, B=210.0, alpha=0.25)  # close to the tied law fitted on Gadre et al.'s C4 loss
SIZES = (1e7, 3e7, 1e8, 3e8)
MULTS = (0.5, 1, 2, 4, 8, 16)  # tokens = 20 N x multiplier
TARGETS = [(1e9, 2e10), (1e9, 8e10), (3e9, 6e10), (3e9, 2.4e11)]


def true_loss(N, D):
    N, D = np.asarray(N, float), np.asarray(D, float)
    return LAW["E"] + LAW["A"] * N ** -LAW["alpha"] + LAW["B"] * D ** -LAW["alpha"]


def true_accuracy(loss, chance, ceiling, k, loss0):
    return chance + (ceiling - chance) * expit(k * (loss0 - np.asarray(loss, float)))


def synthetic_ladder(
    tasks: dict, noise: float, seed: int, loss_noise: float = 0.0, checkpoints: int = 1
) -> pd.DataFrame:
    """Rows (run, N, D, task, task_loss, accuracy) for every run of SIZES x MULTS; with
    `checkpoints` > 1 each run also has earlier rows at fractions of its tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in SIZES:
        for m in MULTS:
            D_end = 20 * N * m
            for c in range(1, checkpoints + 1):
                D = D_end * c / checkpoints
                L = true_loss(N, D) * (1 + loss_noise * rng.standard_normal())
                for t, p in tasks.items():
                    acc = float(np.clip(true_accuracy(L, **p) + noise * rng.standard_normal(), 0, 1))
                    rows.append(
                        dict(
                            run=f"{N:g}-{m:g}",
                            N=N,
                            D=D,
                            task=t,
                            task_loss=L,
                            accuracy=acc,
                            chance=p["chance"],
                        )
                    )
    return pd.DataFrame(rows)


def targets_frame(tasks) -> pd.DataFrame:
    return pd.DataFrame([dict(N=N, D=D, task=t) for N, D in TARGETS for t in tasks])


TASK = {"mc4": dict(chance=0.25, ceiling=0.95, k=2.0, loss0=3.0)}


@pytest.fixture(autouse=True, scope="module")
def _compile_cache():
    """The CLI's persistent XLA cache (SCALELAB_JAX_CACHE=0 turns it off): the step-1 fits compile
    the same optimiser programs on every run of this file."""
    enable_compile_cache()


def test_recovers_a_known_chain_with_checkpoints_and_a_task_loss_per_task():
    """Nearly noise-free data from the chain: the fitted laws, and the predictions two decades
    of compute beyond the ladder, match the truth; checkpoints count in step 2 only, and a task
    whose loss differs gets its own step-1 fit."""
    tasks = {"mc4": TASK["mc4"], "other": dict(chance=0.5, ceiling=1.0, k=3.0, loss0=2.8)}
    ladder = synthetic_ladder(tasks, noise=0.002, seed=0, checkpoints=3)
    ladder.loc[ladder.task == "other", "task_loss"] *= 1.1  # another loss (still a tied law): fitted apart
    fit = fit_downstream(ladder, bootstrap=0, method="chain")
    tf = fit.tasks["mc4"]
    assert tf.step1 is not fit.tasks["other"].step1 and not tf.step1.shared
    assert tf.step1.n_runs == len(SIZES) * len(MULTS) and tf.rows.n_points == 3 * tf.step1.n_runs
    assert tf.step1.params["E"] == pytest.approx(LAW["E"], rel=0.02)
    assert tf.step1.params["alpha"] == pytest.approx(LAW["alpha"], rel=0.02)
    assert tf.chain.sigmoid.params["k"] == pytest.approx(2.0, rel=0.1)
    assert tf.chain.sigmoid.params["loss0"] == pytest.approx(3.0, abs=0.05)
    assert tf.chain.sigmoid.n_points == 3 * tf.step1.n_runs
    preds = fit.predict(targets_frame(["mc4"]))
    truth = [true_accuracy(true_loss(N, D), **TASK["mc4"]) for N, D in TARGETS]
    np.testing.assert_allclose([p.task_loss for p in preds], true_loss(*zip(*TARGETS)), rtol=5e-3)
    assert all(
        lo <= t <= hi for (lo, hi), t in zip((p.task_loss_interval for p in preds), true_loss(*zip(*TARGETS)))
    )
    np.testing.assert_allclose([p.accuracy for p in preds], truth, atol=0.01)
    assert all(p.method == "chain" for p in preds)


def test_step1_bootstrap_resamples_runs_in_row_order():
    """The joint bootstrap rests on this: resample b of step 1 is the fit weighted by
    `counts()[b]` (one column per run, in `runs` order), the counts step 2 reuses."""
    ladder = synthetic_ladder(TASK, noise=0.01, seed=1, loss_noise=0.01)
    rows = read_ladder(ladder)["mc4"]
    s1 = fit_task_loss(*(rows.final(k) for k in ("N", "D", "loss", "run")), bootstrap=50, seed=3)
    counts = s1.counts()
    assert counts.shape == (50, rows.n_runs)
    df = pd.DataFrame({"N": rows.final("N"), "D": rows.final("D"), "loss": rows.final("loss")})
    refit = fit_law(df, "chinchilla_tied", bootstrap=0, weights=counts[2], prediction_intervals=False)
    np.testing.assert_allclose(refit.vector, s1.fit.bootstrap_samples[2], rtol=2e-3)


COVERAGE_TASKS = {
    f"t{i}": dict(chance=c, ceiling=u, k=k, loss0=x)
    for i, (c, u, k, x) in enumerate(
        [
            (0.25, 1.0, 2.0, 3.0),
            (0.5, 0.9, 3.0, 2.9),
            (0.0, 0.8, 1.5, 3.2),
            (0.25, 0.9, 2.5, 2.8),
            (0.2, 1.0, 1.2, 3.3),
            (0.5, 1.0, 2.0, 2.7),
            (0.0, 1.0, 3.0, 3.0),
            (0.33, 0.85, 2.0, 3.1),
        ]
    )
}
EXTRA_TASKS = {
    "flat": dict(chance=0.25, ceiling=1.0, k=3.0, loss0=1.0),  # never leaves chance on the ladder
    "steep": dict(chance=0.0, ceiling=1.0, k=8.0, loss0=3.1),
}


@pytest.fixture(scope="module")
def noisy_fit():
    """One ladder, 10 tasks sharing one task loss, run scatter 2 points, loss scatter 1%."""
    ladder = synthetic_ladder({**COVERAGE_TASKS, **EXTRA_TASKS}, noise=0.02, seed=5, loss_noise=0.01)
    return fit_downstream(ladder, bootstrap=50, seed=0)


def test_intervals_cover_new_runs_and_narrower_bands_would_fail(noisy_fit):
    """8 tasks x 4 targets beyond the ladder, each a new noisy run. Bar: at least 27 of 32 inside
    the 90% intervals (a calibrated interval fails it with P = 0.14 by binomial(32, 0.9), one of 75%
    passes it with P = 0.02). The same test fails a band half as wide and the bootstrap band alone
    (no run scatter, no misspecification term): it has the power to catch a bad interval."""
    rng = np.random.default_rng(99)
    inside, half, boot_only = [], [], []
    for t, p in COVERAGE_TASKS.items():
        N, D = np.array(TARGETS).T
        L = true_loss(N, D) * (1 + 0.01 * rng.standard_normal(N.size))
        actual = np.clip(true_accuracy(L, **p) + 0.02 * rng.standard_normal(N.size), 0, 1)
        tf = noisy_fit.tasks[t]
        preds = tf.predict(N, D)
        pred = np.array([q.accuracy for q in preds])
        lo, hi = np.array([q.accuracy_interval for q in preds]).T
        inside += list((lo <= actual) & (actual <= hi))
        half += list((pred - (pred - lo) / 2 <= actual) & (actual <= pred + (hi - pred) / 2))
        blo, bhi = interval(pred, tf.chosen.samples(tf.boot, N, D), 0.0)
        boot_only += list((blo <= actual) & (actual <= bhi))
    assert sum(inside) >= 27, f"{sum(inside)}/32 inside"
    assert sum(half) < 27 and sum(boot_only) < 27, (sum(half), sum(boot_only))


def test_one_step1_fit_serves_tasks_that_share_their_loss(noisy_fit):
    step1 = {id(tf.step1) for tf in noisy_fit.tasks.values()}
    assert len(step1) == 1 and noisy_fit.tasks["t0"].step1.shared
    assert noisy_fit.tasks["t0"].n_boot >= 45


def test_warns_near_chance_and_far_step2_extrapolation(noisy_fit):
    far = pd.DataFrame(
        [dict(N=1e11, D=2e13, task="steep"), dict(N=1e9, D=2e10, task="flat"), dict(N=1e9, D=2e10, task="t0")]
    )
    steep, flat, t0 = noisy_fit.predict(far)
    assert any(w.startswith("near chance") for w in flat.warnings)
    assert not any(w.startswith("near chance") for w in steep.warnings + t0.warnings)
    if steep.method != "direct":  # the warning concerns the chain's step 2
        assert any(w.startswith("step 2 extrapolated") for w in steep.warnings)
    assert not any(w.startswith("step 2 extrapolated") for w in t0.warnings)


def test_chance_is_inferred_from_the_worst_runs():
    loss = np.linspace(6, 3, 30)
    assert infer_chance(loss, np.r_[np.full(6, 0.26), np.linspace(0.3, 0.6, 24)]) == (0.25, "inferred")
    assert infer_chance(loss, np.r_[np.full(6, 0.53), np.linspace(0.55, 0.7, 24)]) == (0.5, "inferred")
    assert infer_chance(loss, np.r_[np.full(6, 0.0), np.linspace(0.05, 0.5, 24)]) == (0.0, "default")


def _ladder_csv(tmp_path, df, name="ladder.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def small_ladder():
    return synthetic_ladder(
        {"a": TASK["mc4"], "b": dict(chance=0.5, ceiling=1.0, k=3.0, loss0=2.8)}, noise=0.01, seed=4
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d, t: (d, t.assign(task=["a", "zzz"] * (len(t) // 2))), "zzz"),
        (lambda d, t: (d.assign(accuracy=d.accuracy * 100), t), "accuracy' must be in [0, 1]"),
        (lambda d, t: (d[d.N >= 1e8], t), "distinct model size"),
        (lambda d, t: (d.assign(task_loss=d.task_loss.where(d.index != 7)), t), "NaN"),
        (lambda d, t: (d.drop(columns="task_loss"), t), "lacks column(s) task_loss"),
        (lambda d, t: (d, t.drop(columns="D")), "targets lacks column(s) D"),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, capsys, small_ladder, edit, message):
    ladder, targets = edit(small_ladder.copy(), targets_frame(["a", "b"]))
    rc = main(
        [
            "fit-task",
            _ladder_csv(tmp_path, ladder),
            "--predict",
            _ladder_csv(tmp_path, targets, "t.csv"),
            "--bootstrap",
            "0",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ") and message in err and "\n" not in err, err


def test_fit_task_json_contract(tmp_path, capsys, small_ladder):
    targets = targets_frame(["b", "a"])
    out = tmp_path / "out.json"
    rc = main(
        [
            "fit-task",
            _ladder_csv(tmp_path, small_ladder),
            "--predict",
            _ladder_csv(tmp_path, targets, "t.csv"),
            "--bootstrap",
            "50",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    preds = doc["predictions"]
    assert [p["task"] for p in preds] == list(targets.task) and [p["N"] for p in preds] == list(targets.N)
    for p in preds:
        assert set(p) >= {
            "N",
            "D",
            "task",
            "task_loss",
            "task_loss_interval",
            "accuracy",
            "accuracy_interval",
            "method",
            "warnings",
        }
        lo, hi = p["task_loss_interval"]
        assert lo < p["task_loss"] < hi
        lo, hi = p["accuracy_interval"]
        assert 0 <= lo <= p["accuracy"] <= hi <= 1 and p["method"] in ("average", "chain", "direct")
    for t in ("a", "b"):
        info = doc["tasks"][t]
        assert set(info) >= {"step1", "step2", "n_runs", "n_points", "method"}
        assert info["n_runs"] == len(SIZES) * len(MULTS) and info["step1"]["shared_by_tasks"] is True
        assert info["step2"]["chance"] == pytest.approx(0.5 if t == "b" else 0.25)
    with pytest.raises(AnalysisError, match="method must be one of"):
        fit_downstream(small_ladder, method="best")


def test_the_registry_methods_predict_a_task_with_its_interval(small_ladder):
    """`auto` (the default), `average` and the baseline through the registry: one fit of the whole
    ladder; `task=` at fit time, or a task index per row at predict time, picks the task; the
    prediction is fit-task's (`TaskFit.predict`) with its 90% interval."""
    assert names("downstream", "downstream") == ("auto", "average", "baseline_linear_log_c")
    assert [m.name for m in methods("downstream") if m.role == "default"] == ["auto"]
    fit = get("average", "downstream")(small_ladder, task="a", bootstrap=20)
    p = fit.predict(N=1e9, D=2e10)
    row = fit.result.tasks["a"].predict(np.array([1e9]), np.array([2e10]))[0]
    assert (float(p), float(p.lo), float(p.hi)) == (row.accuracy, *row.accuracy_interval)
    both = fit.predict(N=[1e9, 1e9], D=[2e10, 2e10], task=[0, 1])  # indices into the ladder's tasks
    assert both.mean[0] == float(p) and both.mean[1] != float(p) and (both.lo <= both.mean).all()
    assert fit.plot().axes
    base = get("baseline_linear_log_c", "downstream")(small_ladder, task="b").predict(N=1e9, D=2e10)
    assert 0 <= base.lo <= float(base) <= base.hi <= 1
    with pytest.raises(AnalysisError, match="not in the ladder"):
        get("baseline_linear_log_c", "downstream")(small_ladder, task="zz")
    with pytest.raises(AnalysisError, match="which task"):
        get("baseline_linear_log_c", "downstream")(small_ladder).predict(N=1e9, D=2e10)


def _gadre_check_protocol(shared_data):
    runs = pd.read_csv(shared_data / "gadre2024_overtraining" / "runs.csv")
    tasks = ["hellaswag", "arc_easy", "piqa", "copa", "lambada_openai"]
    df = pd.DataFrame(
        [
            dict(
                run=r.run,
                N=float(r.n_params),
                D=float(r.tokens),
                task=t,
                task_loss=r.loss_c4_val,
                accuracy=getattr(r, f"acc_{t}"),
            )
            for r in runs.itertuples()
            for t in tasks
        ]
    )
    return df, tasks


def test_gadre_protocol_accuracy_and_coverage(shared_data):
    """The interface check's protocol (../shared/checks/downstream.sh): fit on N <= 412M, predict
    5 tasks at 1.4B and 6.9B, chance inferred. Measured (docs/downstream.md): mean |error| 2.82
    points, 38/45 inside the 90% intervals, mean width 14.5 points, since step 1 fits least squares
    (the zoo's default) and the noise is floored at the run-to-run scatter (binds on piqa and copa);
    before: 2.84, 40/45, 14.0 (before the sharper intervals: 2.95 points, 44/45, 19.0); asserted
    with a small margin. (`--method average` here: 2.51 points, 44/45, 16.6 points.)"""
    df, tasks = _gadre_check_protocol(shared_data)
    small = df.N <= 5e8
    fit = fit_downstream(df[small], bootstrap=200, seed=0)
    preds = fit.predict(df[~small][["N", "D", "task"]])
    actual = df[~small].accuracy.to_numpy()
    err = 100 * np.abs([p.accuracy for p in preds] - actual)
    inside = [p.accuracy_interval[0] <= a <= p.accuracy_interval[1] for p, a in zip(preds, actual)]
    width = 100 * np.mean([hi - lo for lo, hi in (p.accuracy_interval for p in preds)])
    assert err.mean() <= 2.95, f"mean |error| {err.mean():.2f} points"
    assert np.mean(inside) >= 0.84, f"coverage {np.mean(inside):.0%}"
    assert width <= 15.0, f"mean 90% interval width {width:.1f} points"
    assert {t: fit.tasks[t].rows.chance for t in tasks} == {
        "hellaswag": 0.25,
        "arc_easy": 0.25,
        "piqa": 0.5,
        "copa": 0.5,
        "lambada_openai": 0.0,
    }
    assert all(fit.tasks[t].chain.regressor == "law" for t in tasks)  # a shared loss: the law's loss


GADRE_FIT_MAX_N = 5e8  # fit on N <= 412M, predict the 1.4B and 6.9B runs
GADRE_LOSS = "loss_c4_val"  # every task's intermediate loss, as in ../shared/checks/downstream.sh


def _gadre_runs(data: pathlib.Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """(runs, task -> chance accuracy from tasks.csv's random baseline) for the tasks with an
    `acc_` column."""
    runs = pd.read_csv(data / "runs.csv")
    meta = pd.read_csv(data / "tasks.csv")
    base = dict(zip(meta["Eval Task"].astype(str), meta["Random baseline"].astype(float) / 100))
    return runs, {t: base[t] for t in (c[4:] for c in runs.columns if c.startswith("acc_")) if t in base}


def _gadre_ladder(runs: pd.DataFrame, chance: dict[str, float], tasks) -> pd.DataFrame:
    """The long ladder table: one row per (run, task), the C4 loss as every task's loss."""
    df = pd.DataFrame(
        [
            {
                "run": r.run,
                "N": float(r.n_params),
                "D": float(r.tokens),
                "task": t,
                "task_loss": getattr(r, GADRE_LOSS),
                "accuracy": getattr(r, f"acc_{t}"),
            }
            for r in runs.itertuples()
            for t in tasks
        ]
    )
    df["chance"] = df.task.map(chance)
    return df


def _gadre_task_means(runs, small, tasks, chance, bootstrap: int) -> dict:
    """The per-task protocol (the held-out-selected method): MAE, coverage and mean width over
    the tasks left in the means (no falls-with-scale / emerging warning), and which were left out."""
    df = _gadre_ladder(runs, chance, tasks)
    in_fit = small.repeat(len(tasks)).to_numpy()
    fit = fit_downstream(df[in_fit], bootstrap=bootstrap, method="auto")
    test = df[~in_fit].reset_index(drop=True)
    preds = fit.predict(test[["N", "D", "task"]])
    info = fit.to_dict()["tasks"]
    err = 100 * np.abs([p.accuracy for p in preds] - test.accuracy.to_numpy())
    lo, hi = (np.array([p.accuracy_interval[i] for p in preds]) for i in (0, 1))
    inside = (lo <= test.accuracy.to_numpy()) & (test.accuracy.to_numpy() <= hi)
    kept = ~np.array([info[t]["scale_trend"]["excluded_from_means"] for t in test.task])
    return {
        "excluded_tasks": {t for t in tasks if info[t]["scale_trend"]["excluded_from_means"]},
        "n_tasks": test.task[kept].nunique(),
        "mae_pts": float(err[kept].mean()),
        "coverage": float(inside[kept].mean()),
        "mean_width_pts": float(100 * (hi - lo)[kept].mean()),
        "heldout_known": all(info[t]["heldout"]["coverage"] is not None for t in tasks),
    }


def test_gadre_protocol_tasks_above_chance(shared_data):
    """The paper's protocol (fit N <= 412M, predict the 1.4B and 6.9B runs, the C4 validation loss
    as every task's loss; docs/downstream.md) over the 15 tasks above chance (tasks.csv's random
    baselines). The fit-side trend rules flag exactly pubmed_qa_labeled (falls with scale) and squad
    (emerging), which leave the means. Measured over the other 13: MAE 3.52 points, coverage 88.0%,
    mean 90% width 16.9 points (least-squares step 1 and the run-scatter floor; before: 3.55, 89.7%,
    15.9); the issue's targets (MAE <= 3.0, width <= 10) are NOT met
    (docs/downstream.md says why); asserted at the measured figures with a small margin."""
    from analysis.downstream.flags import near_chance

    runs, chance = _gadre_runs(shared_data / "gadre2024_overtraining")
    small = runs.n_params <= GADRE_FIT_MAX_N
    near = {
        t for t, r in read_ladder(_gadre_ladder(runs[small], chance, list(chance))).items() if near_chance(r)
    }
    tasks = [t for t in chance if t not in near]  # above chance by the fit-side rule
    assert len(tasks) == 15
    kept = _gadre_task_means(runs, small, tasks, chance, 200)
    assert kept["excluded_tasks"] == {"pubmed_qa_labeled", "squad"}
    assert kept["n_tasks"] == 13
    assert kept["mae_pts"] <= 3.65, kept
    assert kept["coverage"] >= 0.85, kept
    assert kept["mean_width_pts"] <= 17.3, kept
    assert kept["heldout_known"]


def _rows(N, D, acc, chance=0.25):
    from analysis.downstream.data import TaskRows

    N, D, acc = (np.asarray(v, float) for v in (N, D, acc))
    run = np.arange(N.size)
    return TaskRows("t", N, D, np.ones(N.size), acc, run, np.ones(N.size, bool), chance, "column")


def test_trend_rules_flag_falling_and_emerging_tasks_only():
    """The fit-side rules on the ladder's two largest sizes: a fall with size (controlling for
    tokens) is `falls_with_scale`; a rise from near chance steeper than N^1.5 is `emerging`; an
    ordinary rise (headroom x2.5 for a size x2.7) is neither."""
    from analysis.downstream import flags

    rng = np.random.default_rng(0)
    N = np.repeat([1e7, 1e8, 3e8, 8e8], 8)
    D = 20 * N * np.tile([0.5, 1, 2, 4, 8, 16, 32, 64], 4)
    base = 0.25 + 0.004 * np.log(D / D.min())
    noise = 0.005 * rng.standard_normal(N.size)
    falling = base + np.select([N == 8e8, N == 3e8], [0.30, 0.36], 0.2) + noise
    emerging = base + np.select([N == 8e8, N == 3e8], [0.12, 0.0], 0.0) + noise
    rising = base + np.select([N == 8e8, N == 3e8], [0.12, 0.045], 0.0) + noise
    assert flags.scale_trend(_rows(N, D, falling))[0] == flags.FALLING
    assert flags.scale_trend(_rows(N, D, emerging))[0] == flags.EMERGING
    assert flags.scale_trend(_rows(N, D, rising)) == (flags.RISING, None)


def test_run_scatter_floors_the_noise():
    """Model-free run scatter: the pooled sd of repeated runs at one (N, D) when there are any,
    else of each larger size's runs around a line in log D; 0 when nothing measures it."""
    from analysis.downstream.intervals import run_scatter

    rng = np.random.default_rng(0)
    N = np.repeat([1e8, 2e8, 4e8, 8e8], 40)
    D = np.tile(np.repeat([1e9, 2e9, 4e9, 8e9], 10), 4)
    acc = 0.3 + 0.02 * np.log(D / 1e9) + rng.normal(0, 0.01, N.size)  # 10 replicates per cell
    assert run_scatter(acc, N, D) == pytest.approx(0.01, rel=0.15)
    one = np.unique(N * 1e3 + D, return_index=True)[1]  # one run per cell: the line in log D
    assert run_scatter(acc[one], N[one], D[one]) == pytest.approx(0.01, rel=0.5)
    assert run_scatter(acc[:2], N[:2] * [1, 2], D[:2]) == 0.0
