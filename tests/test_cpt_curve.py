"""The continual-pre-training curve law (`cpt_curve`): a sweep directory of base and continued runs
whose evaluation curves follow a known truth (the law at parameters fitted on the CPU ladder, 0.3%
noise), read from metrics.jsonl and summary.json as a real +sweep=cpt directory is; the law fitted
without one replay ratio predicts that ratio's curves on both domains, `backtest --protocol
cpt-curve` scores it against the nearest-replay baseline, and `fit-curve --law cpt_curve` and the
notebook API give the same fit."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.cli import main as analysis_main
from analysis.curves import cpt as law

TRUTH = {
    "old": dict(L0=1.13, A=1.07, alpha=0.35, B=22.7, Bb=16.1, C=9950.0, beta=5.0, gamma=2.98, H=0.593,
                E=12.5, h=0.602, rho=0.0647, Er=4.84),
    "new": dict(L0=2.68, A=0.427, alpha=0.936, B=32.0, Bb=24.2, C=0.0024, beta=5.0, gamma=1.26, H=2.64,
                E=230.0, h=0.087, rho=0.05, Er=0.3),
}  # fmt: skip
CORPUS = {"old": "stdlib", "new": "cpp"}
PEAK, BASE_STEPS, EVERY = 1e-2, 600, 50


def _cosine(steps: int, peak: float, start: float, warm: int) -> np.ndarray:
    """The logged rate at steps 1..steps: linear warm-up from `start` x peak, cosine to 0.1 x peak."""
    t = np.arange(1, steps + 1, dtype=float)
    up = peak * (start + (1 - start) * np.minimum(t / warm, 1.0))
    frac = np.clip((t - warm) / max(steps - warm, 1), 0.0, 1.0)
    down = peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(math.pi * frac)))
    return np.where(t <= warm, up, down)


def _truth_curve(c: law.CptCurve, seed: int) -> np.ndarray:
    y = law.predict(TRUTH[c.domain], law.points([c]), c.domain)
    return y * np.exp(np.random.default_rng(seed).normal(0.0, 0.003, y.size))


def _write_run(d: Path, lr: np.ndarray, evals: dict[str, np.ndarray], summary: dict) -> None:
    d.mkdir(parents=True)
    steps = np.arange(1, lr.size + 1)
    rows = []
    for i, s in enumerate(steps):
        row = {"step": int(s), "tokens": int(s) * 1024, "loss": 3.0, "lr": float(lr[i])}
        if s % EVERY == 0 or s == steps[-1]:
            j = int(np.searchsorted(evals["steps"], s))
            row.update({f"eval_loss/{CORPUS[k]}": float(evals[k][j]) for k in ("old", "new")})
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    last = {f"eval_loss/{CORPUS[k]}": float(evals[k][-1]) for k in ("old", "new")}
    fields = summary.pop("config_fields")
    (d / "summary.json").write_text(json.dumps({"status": "completed", "n_params": 49312, **last, **summary}))
    (d / ".hydra").mkdir()
    (d / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump(fields)
    )  # the composed config, as Hydra writes it


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """One base model continued at four replay ratios x two token counts, curves from TRUTH."""
    root = tmp_path_factory.mktemp("cptc") / "sweep"
    base_lr = _cosine(BASE_STEPS, PEAK, 0.0, 30)
    base_dir = root / "base_L2-d32"
    ev_steps = np.unique(np.r_[np.arange(EVERY, BASE_STEPS + 1, EVERY), BASE_STEPS])
    sched = law.Curve("b", np.arange(1, BASE_STEPS + 1), np.ones(BASE_STEPS), base_lr)
    evals = {"steps": ev_steps}
    for i, dom in enumerate(("old", "new")):
        c = law.CptCurve("b", "b", dom, CORPUS[dom], 0.0, PEAK, 0.0, sched, 0, ev_steps, ev_steps * 0.0)
        evals[dom] = _truth_curve(c, i)
    fields = {"data": {"eval_corpora": ["cpp"]}, "optim": {"lr": PEAK}}
    _write_run(base_dir, base_lr, evals, {"tokens": BASE_STEPS * 1024, "config_fields": fields})
    seed = 10
    for r in (0.0, 0.01, 0.05, 0.25):
        for n in (150, 300):
            lr = _cosine(n, PEAK, 0.1, max(1, n // 20))
            ev = np.unique(np.r_[np.arange(EVERY, n + 1, EVERY), n])
            full = law.Curve(
                "c", np.arange(1, BASE_STEPS + n + 1), np.ones(BASE_STEPS + n), np.r_[base_lr, lr]
            )
            evals = {"steps": ev}
            for dom in ("old", "new"):
                c = law.CptCurve("c", "b", dom, CORPUS[dom], r, PEAK, n * 1024.0, full, BASE_STEPS,
                                 BASE_STEPS + ev, ev * 0.0)  # fmt: skip
                seed += 1
                evals[dom] = _truth_curve(c, seed)
            fields = {
                "data": {"mixture": {"cpp": 1 - r, "stdlib": r}},
                "train": {"init_from": str(base_dir)},
                "optim": {"lr": PEAK},
            }
            _write_run(
                root / f"cpt_r{r:g}_D{n}",
                lr,
                evals,
                {
                    "tokens": n * 1024,
                    "init_from_tokens": BASE_STEPS * 1024,
                    "init_from_step": BASE_STEPS,
                    "config_fields": fields,
                },  # fmt: skip
            )
    return root


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = analysis_main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def test_curves_are_read_on_the_concatenated_schedule(sweep):
    curves = law.load_cpt_curves(sweep)
    cont = [c for c in curves if c.continued]
    assert len(curves) == 18 and len(cont) == 16
    c = next(c for c in cont if c.replay == 0.05 and c.domain == "old" and c.tokens_b == 300 * 1024)
    assert c.start == BASE_STEPS and c.steps[0] == BASE_STEPS + EVERY and c.steps[-1] == BASE_STEPS + 300
    eta = c.schedule.schedule()
    # the update after the base's last step runs at its last rate, the next at the re-warm's first
    first = _cosine(300, PEAK, 0.1, 15)[0]
    assert eta.size == BASE_STEPS + 300 + 1 and eta[BASE_STEPS + 2] == pytest.approx(first, rel=1e-9)
    assert eta[BASE_STEPS + 1] == pytest.approx(_cosine(BASE_STEPS, PEAK, 0.0, 30)[-1], rel=1e-9)
    assert {c.corpus for c in curves} == {"stdlib", "cpp"}


def test_held_out_replay_ratio_is_predicted_within_one_percent(sweep):
    """Each interior ratio hidden in turn: the fit on the rest predicts its curves within 1% mean
    error on both domains (the noise alone is 0.3%), and the true parameters' curves agree."""
    curves = law.load_cpt_curves(sweep)
    for dom in ("old", "new"):
        group = [c for c in curves if c.domain == dom]
        errs = law.held_out_errors(group, dom)
        for r in (0.01, 0.05):
            assert np.mean(np.abs(np.expm1(errs[r]))) < 0.01, (dom, r, np.mean(np.abs(errs[r])))


def test_backtest_and_fit_curve_commands(sweep, tmp_path):
    rc, out, err = _cli("backtest", sweep, "--protocol", "cpt-curve", "--json", tmp_path / "bt.json")
    assert rc == 0, err
    bt = json.loads((tmp_path / "bt.json").read_text())
    rows = {m["method"]: m for m in bt["methods"]}
    assert rows["nearest_replay"]["baseline"] and rows["cpt_curve"]["default"]
    law_err = rows["cpt_curve"]["mean_abs_rel_error"]
    assert law_err < 0.01 and law_err < rows["nearest_replay"]["mean_abs_rel_error"]
    assert rows["cpt_curve"]["coverage_90"] >= 0.8
    rc, out, err = _cli("fit-curve", "--law", "cpt_curve", "--fit", sweep, "--json", tmp_path / "fit.json")
    assert rc == 0, err
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["law"] == "cpt_curve" and {f["domain"] for f in fit["fits"]} == {"old", "new"}
    assert all(f["log_scale"] is not None for f in fit["fits"]) and "held-out replay" in out


def test_notebook_api_predicts_a_new_continuation(sweep):
    import analysis

    f = analysis.fit(sweep, law="cpt_curve", family="curve", calibrate=False)
    base = next(c.base for c in f.result.curves if not c.continued)
    steps, lr = np.arange(1, 201), _cosine(200, PEAK, 0.1, 10)
    p0, p25 = (f.predict(base=base, domain="old", replay=r, step=steps, lr=lr).mean for r in (0.0, 0.25))
    assert p0.shape == (200,) and np.all(p25 < p0)  # replay protects the old domain
    new = f.predict(base=base, domain="new", replay=0.0, step=steps, lr=lr).mean
    assert new[-1] < new[0]  # the new domain is learned


def test_errors_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    rc, _, err = _cli("fit-curve", "--law", "cpt_curve", "--fit", tmp_path / "empty")
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error:")
