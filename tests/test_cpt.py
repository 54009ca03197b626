"""Continual pre-training: starting from another run (`train.init_from`), mixtures of corpora
(`data.mixture`), evaluation on each corpus (`eval_loss/<corpus>`), the re-warm schedule, and
the `cpt` law, backtest and plan on synthetic tables with a known truth."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import optax
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from experiments.rundir import config_fingerprint
from experiments.train import init as cpt_init
from experiments.train.config import resolve_config
from experiments.train.loop import run
from experiments.train.mixture import MixtureSampler
from experiments.train.optimizer import OptimConfig, hyperparams, schedule_value
from models.base.errors import ConfigError
from models.base.rundir import LOCK_FILE, read_metrics

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.seq_len=16",
    "train.batch_size=4",
    "train.eval_tokens=256",
    "train.progress_every_s=0",
    "train.eval_every=0",
    "train.ckpt_every=0",
]


def cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """A 6-step base run on stdlib, also scored on cpp."""
    rd = tmp_path_factory.mktemp("cpt") / "base"
    s = run(cfg(*TINY, "train.steps=6", "optim.lr=3e-2", "data.eval_corpora=[cpp]"), rd)
    assert s.status == "completed"
    return rd


def test_base_run_reports_every_corpus(parent):
    s = json.loads((parent / "summary.json").read_text())
    assert {"eval_loss/stdlib", "eval_loss/cpp"} <= set(s)
    assert s["final_eval_loss"] == s["eval_loss/stdlib"]  # trained on stdlib alone: its loss
    assert s["eval_loss/cpp"] != s["eval_loss/stdlib"]
    last = read_metrics(parent / "metrics.jsonl")[-1]
    assert last["eval_loss/cpp"] == s["eval_loss/cpp"]


def test_continued_run_starts_from_the_parent_on_the_mixture(parent, tmp_path):
    mix = "data.mixture={cpp: 0.75, stdlib: 0.25}"
    c = cfg(*TINY, "train.steps=3", mix, f"train.init_from={parent}", "optim.warmup_init=0.1")
    s = run(c, tmp_path / "cpt").as_dict()
    assert s["init_from"] == "base" and s["init_from_step"] == 6 and s["init_from_tokens"] == 6 * 4 * 16
    weighted = 0.75 * s["eval_loss/cpp"] + 0.25 * s["eval_loss/stdlib"]
    assert s["final_eval_loss"] == pytest.approx(weighted, rel=1e-6)  # the mixture's held-out loss
    assert s["tokens"] == 3 * 4 * 16  # its own tokens only
    first = read_metrics(tmp_path / "cpt" / "metrics.jsonl")[0]
    # the parent's weights, not a fresh init (whose first loss is ln 256 = 5.55)
    assert first["step"] == 1 and first["loss"] < 5.3
    # the parent is part of the run's identity; the same config without it is another run
    assert config_fingerprint(c) != config_fingerprint(cfg(*TINY, "train.steps=3", mix))


def test_shape_mismatch_is_one_error_line(parent, tmp_path):
    c = cfg(*TINY, "model.d_model=32", "model.n_heads=4", "train.steps=2", f"train.init_from={parent}")
    with pytest.raises(ConfigError, match=r"its weights do not fit this model .*d_model=16.*d_model=32"):
        run(c, tmp_path / "bad")


def test_missing_or_unfinished_parent_is_one_error_line(tmp_path):
    with pytest.raises(ConfigError, match="no such run directory"):
        run(cfg(*TINY, "train.steps=2", f"train.init_from={tmp_path / 'nope' / 'x'}"), tmp_path / "child")
    (tmp_path / "half").mkdir()
    with pytest.raises(ConfigError, match="has not completed"):
        run(cfg(*TINY, "train.steps=2", f"train.init_from={tmp_path / 'half'}"), tmp_path / "elsewhere" / "c")
    with pytest.raises(ConfigError, match="train.init_step / train.init_optimizer need train.init_from"):
        resolve_config(cfg(*TINY, "train.steps=2", "train.init_step=3"), n_devices=1)


def test_init_optimizer_keeps_adam_moments_and_restarts_the_schedule():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lambda c: 1e-3 * (c + 1)))
    params = {"w": np.ones(3, np.float32)}
    state = tx.init(params)
    for _ in range(5):
        _, state = tx.update({"w": np.full(3, 0.1, np.float32)}, state, params)
    fresh = cpt_init.restart_schedule(state)
    leaves = [x for x in _states(fresh) if isinstance(x, optax.ScaleByScheduleState)]
    adam = [x for x in _states(fresh) if isinstance(x, optax.ScaleByAdamState)]
    assert leaves and all(int(x.count) == 0 for x in leaves)
    assert int(adam[0].count) == 5 and float(np.abs(adam[0].mu["w"]).sum()) > 0


def _states(tree):
    if isinstance(tree, (optax.ScaleByScheduleState, optax.ScaleByAdamState)):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for x in tree:
            yield from _states(x)


def test_child_waits_for_a_parent_in_training(tmp_path):
    parent, child = tmp_path / "p", tmp_path / "c"
    parent.mkdir()
    f = open(parent / LOCK_FILE, "w")
    from models.base.portable import lock_file, unlock_file

    lock_file(f)
    said: list[str] = []
    t0 = time.monotonic()

    def finish():
        time.sleep(1.2)
        (parent / "summary.json").write_text('{"status": "completed"}')
        unlock_file(f)
        f.close()

    threading.Thread(target=finish).start()
    cpt_init.wait_for_parent(parent, child, said.append, grace_s=0.0)
    assert time.monotonic() - t0 >= 1.0 and said and "waiting" in said[0]


# ---- mixtures -------------------------------------------------------------------------------


def _sampler(weights, seed=0, batch=16):
    corpora = [
        (n, np.arange(1000 * (k + 1), 1000 * (k + 1) + 500, dtype=np.uint16), w)
        for k, (n, w) in enumerate(weights.items())
    ]
    return MixtureSampler(corpora, seq_len=8, batch_size=batch, seed=seed)


def test_mixture_is_deterministic_per_step_and_in_proportion():
    a, b = _sampler({"new": 0.95, "old": 0.05}), _sampler({"new": 0.95, "old": 0.05})
    for i in (0, 7, 123):
        np.testing.assert_array_equal(a.rows(i), b.rows(i))
        np.testing.assert_array_equal(a.rows(i, np.array([3, 1])), a.rows(i)[[3, 1]])
    shares = a.shares(100)  # 1600 rows
    assert shares["old"] == pytest.approx(0.05, abs=2 / 1600)
    rare = _sampler({"new": 0.99, "old": 0.01})
    assert rare.shares(100)["old"] == pytest.approx(0.01, abs=2 / 1600)
    # the rows of each corpus come from that corpus (token ranges 1000.. and 2000..)
    src, rows = a.sources(5), a.rows(5)
    assert ((rows[src == 0] >= 1000) & (rows[src == 0] < 1500)).all()
    assert ((rows[src == 1] >= 2000) & (rows[src == 1] < 2500)).all()
    never = _sampler({"new": 1.0, "old": 0.0})
    assert never.shares(50)["old"] == 0.0


@pytest.mark.parametrize(
    "override,msg",
    [
        ("data.mixture={cpp: 0.9, stdlib: 0.2}", "weights must sum to 1"),
        ("data.mixture={cpp: 1.2, stdlib: -0.2}", "must be a weight >= 0"),
        ("data.mixture={web: 1.0}", "unknown corpus 'web'"),
        ("data.eval_corpora=[nope]", "unknown corpus 'nope'"),
    ],
)
def test_bad_mixtures_are_one_line(override, msg):
    with pytest.raises(ConfigError, match=msg):
        resolve_config(cfg(*TINY, "train.steps=2", override), n_devices=1)


# ---- the re-warm schedule -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cosine", "wsd"])
def test_rewarm_schedule_values(kind):
    hp = hyperparams(
        OptimConfig(lr=1e-2, schedule=kind, warmup_init=0.1, min_lr_ratio=0.1, decay_fraction=0.2), 100, 10
    )
    lr = [float(schedule_value(hp, s)) for s in range(100)]
    assert lr[0] == pytest.approx(1e-2 * (0.1 + 0.9 / 10), rel=1e-5)  # from the parent's final lr
    assert lr[9] == pytest.approx(1e-2, rel=1e-5) and max(lr) == pytest.approx(1e-2, rel=1e-5)
    assert all(x <= y + 1e-9 for x, y in zip(lr[:10], lr[1:10]))  # rises monotonically to the peak
    assert 1e-3 * (1 - 1e-6) <= lr[-1] < 2e-3  # re-decayed towards min_lr_ratio * peak
    if kind == "wsd":
        assert lr[50] == pytest.approx(1e-2) and lr[85] < 1e-2  # stable, then re-decays
    default = hyperparams(OptimConfig(lr=1e-2, schedule=kind), 100, 10)
    assert float(schedule_value(default, 0)) == pytest.approx(1e-3, rel=1e-6)  # from zero, as before


# ---- the law, its backtest and the plan (synthetic ladders with a known truth) ----------------

TRUTH = dict(
    E_o=0.78, N_o=2e4, D_o=1.6e4, E_n=0.3, N_n=5e5, D_n=3.8e4, alpha=0.18, beta=0.6,
    tau_o=0.03, tau_n=0.03, K=20.0, phi=0.66, rho=6.0, eta=0.47,
)  # fmt: skip
SIZES = (5912.0, 12336.0, 26232.0, 49312.0)


def synthetic_runs(noise: float = 0.002, seed: int = 0, truth=TRUTH) -> pd.DataFrame:
    """A runs table shaped as `collect` reads a +sweep=cpt directory, its losses from `truth`."""
    from analysis.laws.cpt import CPT_FORM

    rng = np.random.default_rng(seed)
    rows = []
    for N in SIZES:
        d_a = 1.2e6
        rows.append(dict(run=f"base_{N:g}", n_params=N, tokens=d_a, **{"data.eval_corpora": '["cpp"]'}))
        rows.append(
            {"run": f"scratch_{N:g}", "n_params": N, "tokens": d_a + 6e5,
             "data.mixture.cpp": 1 / 3, "data.mixture.stdlib": 2 / 3}
        )  # fmt: skip
        for r in (0.0, 0.01, 0.05, 0.25):
            for d_b in (1.5e5, 3e5, 6e5):
                rows.append(
                    {"run": f"cpt_{N:g}_{r:g}_{d_b:g}", "n_params": N, "tokens": d_b, "init_from_tokens": d_a,
                     "data.mixture.cpp": 1 - r, "data.mixture.stdlib": r}
                )  # fmt: skip
    df = pd.DataFrame(rows)
    df["optim.lr"] = 1e-2
    df["flops_per_token"] = 6 * df.n_params
    parent = df["init_from_tokens"].fillna(0.0)
    mixed = df["data.mixture.cpp"].notna()
    x = {
        "N": df.n_params.to_numpy(float),
        "D_A": np.where(parent > 0, parent, np.where(mixed, 0.0, df.tokens)),
        "D_B": np.where(mixed, df.tokens, 0.0),
        "r": df["data.mixture.stdlib"].fillna(0.0).to_numpy(float),
    }
    old, new = CPT_FORM.predict(truth, x)
    df["eval_loss/stdlib"] = old * np.exp(rng.normal(0, noise, len(df)))
    df["eval_loss/cpp"] = new * np.exp(rng.normal(0, noise, len(df)))
    return df


@pytest.fixture(scope="module")
def ladder():
    return synthetic_runs()


def test_cpt_table_reads_the_roles_of_each_kind(ladder):
    from analysis.laws.cpt import cpt_table

    t = cpt_table(ladder)
    assert t.attrs == {"old": "stdlib", "new": "cpp"}
    assert (
        (t.kind == "base").sum() == 4 and (t.kind == "scratch").sum() == 4 and (t.kind == "cpt").sum() == 48
    )
    c = t[t.run == "cpt_49312_0.05_300000"].iloc[0]
    assert (c.D_A, c.D_B, c.r) == (1.2e6, 3e5, 0.05)
    s = t[t.kind == "scratch"].iloc[0]
    assert s.D_A == 0.0 and s.r == pytest.approx(2 / 3)


def test_cpt_law_recovers_a_known_truth_and_predicts_the_held_out_model(ladder):
    from analysis.laws.cpt import CPT_FORM, cpt_table, fit_cpt_table

    t = cpt_table(ladder)
    held = (t.kind != "base") & (t.N == max(SIZES))
    fit_rows = t[~held].reset_index(drop=True)
    fit_rows.attrs.update(t.attrs)
    fit = fit_cpt_table(fit_rows, bootstrap=4)
    assert fit.residual_sd < 0.006  # the 0.2% noise, not a misfit
    test = t[held & (t.kind == "cpt")]
    p = fit.predict({k: test[k].to_numpy() for k in ("N", "D_A", "D_B", "r")})
    truth_old, truth_new = CPT_FORM.predict(TRUTH, {k: test[k].to_numpy() for k in ("N", "D_A", "D_B", "r")})
    assert np.abs(p["old"] / truth_old - 1).max() < 0.01 and np.abs(p["new"] / truth_new - 1).max() < 0.01
    inside = (p["old_lo"] <= test.loss_old) & (test.loss_old <= p["old_hi"])
    assert inside.mean() >= 0.9
    # forgetting falls with replay, as in the truth
    f = [fit.predict({"N": 4.9e4, "D_A": 1.2e6, "D_B": 6e5, "r": r})["old"][0] for r in (0.0, 0.05, 0.25)]
    assert f[0] > f[1] > f[2]


def test_fit_command_keeps_the_rewarm_probes_out_of_the_best_run_selection(ladder, tmp_path, capsys):
    """Continued runs at another re-warm peak differ only in optim.lr: `fit --law cpt` must not read
    them as an LR sweep (best run per rung, edge warnings); the law sets them aside itself."""
    from analysis.cli import main

    t = ladder.copy()
    probe = t.run.str.endswith("_600000") & t.run.str.startswith("cpt_")
    probes = t[probe].assign(**{"optim.lr": 3e-3, "run": t[probe].run + "_p0.3"})
    path = tmp_path / "runs.csv"
    pd.concat([t, probes]).to_csv(path, index=False)
    assert main(["fit", str(path), "--law", "cpt", "--bootstrap", "0"]) == 0
    out, err = capsys.readouterr()
    assert "hyperparameter sweep" not in out and "swept range" not in err
    assert "continued runs at other peaks left out" in out


def test_cpt_backtest_rows(ladder):
    from analysis.backtests import Options, run

    bt = run(ladder, "cpt", Options(bootstrap=3)).to_dict()
    rows = bt["methods"]
    assert [m["method"] for m in rows if m["baseline"]] == ["cpt_chinchilla"]
    assert [m["method"] for m in rows if m["default"]] == ["cpt"]
    d = next(m for m in rows if m["default"])
    assert d["n"] == 24 and {p["domain"] for p in d["points"]} == {0.0, 1.0}  # 12 runs x 2 domains
    assert d["mean_abs_rel_error"] < 0.01 and d["coverage_90"] >= 0.8
    assert bt["cut"]["threshold"] == 26232.0 and bt["cut"]["n_held_out"] == 12
    by_db = run(ladder, "cpt", Options(bootstrap=0, holdout_above=4e5)).to_dict()
    assert by_db["cut"]["n_held_out"] == 16 and "D_B > 4e+05" in by_db["cut"]["what"]


def _law(**changes):
    from analysis.laws.cpt import CptFit

    params = {**TRUTH, **changes}
    return CptFit(
        law="cpt", params=params, samples=np.zeros((0, 14)), residual_sd=0.005, drift_sd=0.0, n_folds=0,
        domains={"old": "stdlib", "new": "cpp"}, n_runs=56, n_max=4.9e4,
        input_ranges={"N": [5e3, 5e4], "D_A": [0, 1.2e6], "D_B": [0, 1.8e6], "r": [0, 0.67],
                      "D_B_continued": [1.5e5, 6e5]},
        peak=1e-2, base_models=[{"N": 4.9e4, "D_A": 1.2e6, "model": {"n_layers": 2}, "path": "/runs/base"}],
        flops_per_token={"49000.0": 6 * 4.9e4},
    )  # fmt: skip


def test_plan_verdicts_on_synthetic_laws():
    from analysis.planning.continual import plan_continual, read_base

    law = _law()
    base = read_base(None, law)
    out = plan_continual(law, base, None, 0.02)
    assert out["verdict"] == "continue" and out["continue"]["feasible"]
    c, r = out["continue"], out["retrain"]
    assert c["forgetting"] <= 0.02 + 1e-9 and c["loss_new"] <= out["target_loss_new"] + 1e-9
    assert c["flops"] < r["flops"] and "train.init_from=/runs/base" in c["command"]
    assert "data.mixture={cpp:" in c["command"] and c["replay"] in (
        0.0,
        0.005,
        0.01,
        0.02,
        0.05,
        0.1,
        0.15,
        0.25,
        0.35,
        0.5,
    )
    # old knowledge that erodes at once and replay that does not help: continuing cannot keep it
    brittle = _law(K=1e6, rho=0.0, tau_o=0.0)
    out = plan_continual(brittle, read_base(None, brittle), None, 0.02)
    assert out["verdict"] == "retrain" and not out["continue"]["feasible"] and out["retrain"]["feasible"]
    json.dumps(out)  # strict-JSON-able


def test_plan_command_line(tmp_path, capsys):
    from analysis.cli import main

    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(_law().to_dict()))
    assert (
        main(
            [
                "plan",
                "--continue-from",
                str(fit),
                "--max-forgetting",
                "2%",
                "--json",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "p.json").read_text())["continual"]["verdict"] in ("continue", "retrain")
    assert main(["plan", "--continue-from", str(fit), "--max-forgetting", "lots"]) == 2
    assert "error: --max-forgetting" in capsys.readouterr().err
    # priced on hardware: each feasible option's dollars, energy and carbon, in proportion to tokens
    priced = ["plan", "--continue-from", str(fit), "--base-model", "1e9,2e10", "--hardware", "h100"]
    assert main([*priced, "--gpus", "8", "--json", str(tmp_path / "h.json")]) == 0
    c = json.loads((tmp_path / "h.json").read_text())["continual"]
    opts = [c[k] for k in ("continue", "retrain") if c[k]["feasible"]]
    assert opts and all(o["cost"]["cost_usd"] > 0 and o["cost"]["energy_mwh"] > 0 for o in opts)
    if len(opts) == 2:
        usd = [o["cost"]["cost_usd"] / o["tokens"] for o in opts]
        assert usd[0] == pytest.approx(usd[1], rel=0.2)  # one model size: the same price per token
    assert "cost:" in capsys.readouterr().out
    assert main(priced) == 2 and "needs --gpus" in capsys.readouterr().err


def test_report_section(ladder, tmp_path):
    from analysis.report.continual import continual_section

    warn: list[str] = []
    low = ladder[ladder.run.str.endswith("_0_600000")].assign(**{"optim.lr": 3e-3})  # a lower re-warm peak
    low = low.assign(run=low.run + "_p0.3", **{"eval_loss/stdlib": low["eval_loss/stdlib"] * 0.97})
    runs = pd.concat([ladder, low], ignore_index=True)
    sec = continual_section(runs, tmp_path, 2, 0, warn)
    assert sec["title"] == "Continual pre-training" and not warn
    for rel in sec["figures"]:
        assert (tmp_path / rel).stat().st_size > 10_000
    md = sec["markdown"]
    assert md.startswith("## Continual pre-training") and "**Verdict**" in md and "**Forgetting**" in md
    assert "0.003 vs 0.01" in md
    assert sec["continual"]["plan"]["verdict"] in ("continue", "retrain")
    assert continual_section(ladder.drop(columns=["init_from_tokens"]), tmp_path, 0, 0, warn) is None


def test_the_other_report_sections_fit_the_base_models_only(ladder):
    """On a CPT sweep the Chinchilla sections must not fit continued or mixed runs."""
    from analysis.report.continual import base_only

    base = base_only(ladder)
    assert sorted(base.run) == sorted(f"base_{n:g}" for n in SIZES)
    plain = ladder[ladder.run.str.startswith("base_")].drop(columns=["init_from_tokens"])
    assert base_only(plain) is plain  # no continued runs: any other table unchanged


def test_cpt_sweep_plan_names_each_parent_by_the_sweepers_run_id(tmp_path):
    """A continued run's `train.init_from` is its base's directory as the sweeper will name it:
    the base job composed by Hydra hashes to the id the planner computed."""
    from omegaconf import OmegaConf

    from experiments.sweeps.grid import plan_sweep
    from experiments.sweeps.runs import run_dirname, run_id

    def composed(*overrides):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
            c = compose(config_name="config", overrides=["+sweep=cpt", f"sweep.dir={tmp_path}", *overrides])
        return {k: v for k, v in OmegaConf.to_container(c, resolve=True).items() if k != "hydra"}

    base_cfg = composed()
    plan = plan_sweep(base_cfg, base_cfg["sweep"])
    labels = [p.label for p in plan]
    assert len(plan) == 64 and labels[0] == "base_L2-d32" and labels.index("scratch_L2-d32") == 4
    assert "cpt_L1-d8_r0.01_D1.5e5" in labels and "cpt_L2-d32_r0.05_D6e5_p0.3" in labels
    base = next(p for p in plan if p.label == "base_L2-d32")
    child = next(p for p in plan if p.label == "cpt_L2-d32_r0.05_D3e5")
    want = run_dirname(base.label, run_id(composed(*base.overrides), base_cfg["sweep"]["id_ignore"]))
    assert f"train.init_from='{tmp_path / want}'" in child.overrides
    job = composed(*child.overrides)
    assert job["data"]["mixture"] == {"cpp": 0.95, "stdlib": 0.05} and job["optim"]["warmup_init"] == 0.1
    assert job["train"]["tokens"] == child.tokens and child.tokens == 293 * 1024


def test_sweeps_launch_base_models_before_the_trunks_that_continue_them():
    """With WSD branches a continued run's trunk waits on its base model: bases launch first, then
    trunks, then the rest, in planned order within each (two jobs at a time must not both wait)."""
    from hydra_plugins.scalelab_sweeps.sweeper import RunRole, launch_order

    def job(name, role=None, parent=None):
        return {"rec": {"label": name, "role": role}, "config": {"train": {"init_from": parent}}}

    jobs = [
        job("trunk_a_r0", RunRole.TRUNK, "/s/base_a"),
        job("trunk_b_r0", RunRole.TRUNK, "/s/base_b"),
        job("base_a"),
        job("probe_a", None, "/s/base_a"),
        job("trunk_plain", RunRole.TRUNK),
        job("base_b"),
    ]
    order = [j["rec"]["label"] for j in launch_order(jobs)]
    assert order == ["trunk_plain", "base_a", "base_b", "trunk_a_r0", "trunk_b_r0", "probe_a"]
