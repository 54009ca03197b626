"""`sweep.early_stop` (experiments/early_stop.py): a run of a sweep stops itself when its forecast
(`python -m analysis forecast`) gives it a chance below p to end best in its rung. A real tiny run
among finished peers of its rung that ended far lower stops at 25%: status `stopped` with its reason,
forecast and frac_done, a checkpoint at that step; it resumes to its end when started again without
early stopping. In a pack, the stopped member leaves and the other goes on. The sweeper keeps a
stopped run while early stopping is on and resumes it when off; the plan counts the compute spent
against the full sweep; collect leaves stopped runs out (never a finished loss) with a note; bad
settings are one line."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import experiments.train.config  # noqa: F401 - registers the config schema (base_distributed, ...) _cfg composes
from analysis.core import runs as runs_mod
from experiments.early_stop import EarlyStop, Stopper, judge, run_name, spent
from experiments.sweeps.runs import decide, read_status
from models.base.configs import to_plain
from models.base.errors import ConfigError
from models.base.packs import Member
from models.base.rundir import HYDRA_CONFIG, RunDir, RunStatus, RunSummary

REPO = Path(__file__).resolve().parents[1]
STEPS = 40
EARLY = {"at": [0.25], "p": 0.05}


def _cfg(*overrides: str, early_stop: dict | None = None) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        c = compose(
            config_name="config",
            overrides=[
                "model.d_model=16",
                "model.n_layers=1",
                "model.n_heads=2",
                "model.seq_len=32",
                "train.batch_size=8",
                "train.eval_every=20",
                "train.eval_tokens=512",
                "train.ckpt_every=0",
                f"train.steps={STEPS}",
                *overrides,
            ],
        )
    d = to_plain(c)
    d.pop("hydra", None)
    d["sweep"] = {"early_stop": early_stop, "budget": 1e9}
    return d


def _peer(sweep: Path, name: str, cfg: dict, level: float) -> Path:
    """A finished run of the rung (written, not trained): its config, a falling loss curve ending
    near `level`, a completed summary."""
    d = sweep / name
    (d / HYDRA_CONFIG).parent.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(cfg), d / HYDRA_CONFIG)
    steps = np.arange(1, STEPS + 1)
    loss = level * (1 + 2.0 * steps**-0.7)
    lr = cfg["optim"]["lr"] * np.minimum(1.0, steps / 2)
    with open(d / "metrics.jsonl", "w") as f:
        for s, y, r in zip(steps, loss, lr):
            f.write(json.dumps({"step": int(s), "loss": float(y), "lr": float(r)}) + "\n")
    RunDir(d).write_summary(
        RunSummary.of(
            status=RunStatus.COMPLETED, steps=STEPS, steps_done=STEPS, final_eval_loss=float(loss[-1])
        )
    )
    return d


def _peers(sweep: Path, base: dict) -> None:
    for i, lr in enumerate((1e-2, 2e-2, 4e-2)):
        cfg = json.loads(json.dumps(base))
        cfg["optim"]["lr"] = lr
        _peer(sweep, f"peer{i}", cfg, 1.0 + 0.01 * i)


def test_a_loser_stops_at_25_percent_and_resumes_to_its_end(tmp_path):
    from experiments.train.loop import run  # deferred: JAX

    sweep = tmp_path / "sweep"
    cfg = _cfg("optim.lr=1e-4", early_stop=EARLY)
    _peers(sweep, cfg)
    me = sweep / "loser"
    (me / HYDRA_CONFIG).parent.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(cfg), me / HYDRA_CONFIG)  # as Hydra writes it for a sweep's job
    s = run(cfg, me)
    assert s.status == RunStatus.STOPPED and read_status(me) == RunStatus.STOPPED
    assert s.steps_done == STEPS // 4 and s.frac_done == pytest.approx(0.25)
    assert s.forecast["p_best"] < 0.05 and s.forecast["rung_size"] == 4
    assert s.forecast["rung_best_run"].endswith("peer0")
    lo, hi = s.forecast["interval"]
    assert lo < s.forecast["final_loss"] < hi and s.forecast["final_loss"] > 2.0
    assert "p_best" in s.stop_reason and "25%" in s.stop_reason
    on_disk = RunDir(me).read_summary()
    assert on_disk.as_dict() == s.as_dict()
    assert (me / "checkpoints" / str(STEPS // 4)).is_dir()
    steps = [r["step"] for r in RunDir(me).metrics()]
    assert steps[-1] == STEPS // 4 and "eval_loss" in RunDir(me).metrics()[-1]  # the decision's eval
    # started again without early stopping: it resumes from its checkpoint and trains to its end
    done = run(_cfg("optim.lr=1e-4"), me)
    assert done.status == RunStatus.COMPLETED and done.resumed_from_step == STEPS // 4
    assert done.steps_done == STEPS and done.stop_reason is None and done.frac_done is None
    steps = [r["step"] for r in RunDir(me).metrics()]
    assert steps == sorted(set(steps)) and steps[-1] == STEPS


def test_a_pack_with_one_member_stopped(tmp_path):
    from experiments.train.pack import run_pack  # deferred: JAX

    sweep = tmp_path / "sweep"
    loser = _cfg("optim.lr=1e-4", early_stop=EARLY)
    _peers(sweep, loser)
    alone = _cfg("optim.lr=1e-4", "train.seed=1", early_stop=EARLY)  # another rung: no peers
    members = [Member(sweep / "a", "a", loser), Member(sweep / "b", "b", alone)]
    a, b = run_pack(members, 2)
    assert a.status == RunStatus.STOPPED and a.steps_done == STEPS // 4 and a.packed_with == ["a", "b"]
    assert b.status == RunStatus.COMPLETED and b.steps_done == STEPS
    assert "alone in its rung" in (sweep / "b" / "train.log").read_text()


def _result(members: list[tuple[str, float, float]], sd: float = 0.01) -> dict:
    runs = [
        {"run": r, "final_loss": y, "interval": [y * math.exp(-1.645 * sd), y * math.exp(1.645 * sd)]}
        for r, y, _ in members
    ]
    choice = {"members": [{"run": r, "final_loss": y, "p_best": p} for r, y, p in members]}
    return {"runs": runs, "choices": [choice]}


def test_judge():
    cfg = EarlyStop((0.25,), 0.05)
    d = judge(_result([("s/a", 2.0, 0.01), ("s/b", 1.9, 0.99)]), "s/a", 10, 40, cfg)
    assert d.stop and d.frac_done == 0.25 and d.forecast["rung_best_run"] == "s/b"
    assert set(d.summary_fields()) == {"stop_reason", "forecast", "frac_done"}
    assert not judge(_result([("s/a", 2.0, 0.2), ("s/b", 1.9, 0.8)]), "s/a", 10, 40, cfg).stop
    assert judge(_result([("s/a", 2.0, 1.0)]), "s/a", 10, 40, cfg).reason == "alone in its rung so far"
    assert not judge({"runs": [], "choices": []}, "s/a", 10, 40, cfg).stop
    assert run_name(Path("/x/sweep/run_1")) == "sweep/run_1"


def test_settings_and_bad_settings():
    e = EarlyStop.parse({"at": [0.5, 0.25], "p": 0.05})
    assert e.at == (0.25, 0.5) and e.key == "optim.lr" and e.steps(40) == {10: 0.25, 20: 0.5}
    assert EarlyStop.parse(None) is None and EarlyStop.parse({"at": 0.3}).p == 0.05
    for bad, word in (
        ({"at": [1.5]}, "fractions in (0, 1)"),
        ({"at": [0.25], "p": 2}, "sweep.early_stop.p"),
        ({"at": "x"}, "sweep.early_stop.at"),
        ({"at": [0.25], "every": 3}, "unknown keys"),
        ([0.25], "must be a mapping"),
    ):
        with pytest.raises(ConfigError, match=re.escape(word)) as err:
            EarlyStop.parse(bad)
        assert "\n" not in str(err.value)
    trunk = {"sweep": {"early_stop": EARLY}, "train": {"branch_points": [10]}}
    assert EarlyStop.of_run(trunk) is None and EarlyStop.of_run({"train": {}}) is None
    assert Stopper.of({"sweep": {"early_stop": EARLY}, "train": {}}, Path("/x/s/r"), 8, print).steps == {
        2: 0.25
    }


def test_the_sweeper_keeps_or_resumes_a_stopped_run_and_counts_the_compute(tmp_path):
    assert decide(RunStatus.STOPPED, False, early_stop=True)[0] is False
    go, why = decide(RunStatus.STOPPED, False, early_stop=False)
    assert go and "resuming" in why
    d = tmp_path / "r1"
    d.mkdir()
    RunDir(d).write_summary(RunSummary.of(status=RunStatus.STOPPED, flops=25.0, frac_done=0.25))
    records = [
        {"action": "launch", "flops": 100.0, "run_dir": "r1", "status_after": RunStatus.STOPPED},
        {"action": "reuse", "flops": 100.0, "run_dir": "r2", "status_before": RunStatus.COMPLETED},
        {"action": "skip", "flops": 100.0},
    ]
    out = spent(records, tmp_path)
    assert out == {
        "flops_spent": 125.0,
        "flops_full_sweep": 200.0,
        "flops_saved_by_early_stop": 75.0,
        "stopped_early": ["r1"],
    }


def test_collect_leaves_stopped_runs_out_with_a_note(tmp_path):
    base = _cfg()
    _peers(tmp_path / "sweep", base)
    stopped = tmp_path / "sweep" / "stopped"
    (stopped / HYDRA_CONFIG).parent.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(base), stopped / HYDRA_CONFIG)
    RunDir(stopped).write_summary(
        RunSummary.of(status=RunStatus.STOPPED, final_eval_loss=0.1, frac_done=0.25)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df, _ = runs_mod.load(tmp_path / "sweep", cache_dir=False)
    assert sorted(df["run"]) == ["sweep/peer0", "sweep/peer1", "sweep/peer2"]  # never its loss
    notes = [w for w in caught if issubclass(w.category, runs_mod.RunNote)]
    assert len(notes) == 1 and "stopped early by sweep.early_stop" in str(notes[0].message)
    assert not [w for w in caught if w.category is runs_mod.RunWarning]


def _lr_sweep(seed: int = 0) -> pd.DataFrame:
    """Four sizes x five learning rates, loss quadratic in ln lr around lr* = 3e-3 (N/1e8)^-0.3."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in (2e7, 5e7, 1.2e8, 3e8):
        star = 3e-3 * (N / 1e8) ** -0.3
        for lr in star * np.exp(np.linspace(-1.4, 1.4, 5)):
            loss = (2 + 400 / N**0.34) * (1 + 0.02 * np.log(lr / star) ** 2) * np.exp(rng.normal(0, 1e-3))
            rows.append(
                {"N": N, "D": 20 * N, "optim.lr": lr, "loss": loss, "status": RunStatus.COMPLETED.value}
            )
    return pd.DataFrame(rows)


def test_fits_never_take_a_stopped_run_as_a_finished_loss():
    """A stopped run in a table (its loss the one it had when it stopped, here absurdly low) changes
    neither fit-hparams' laws nor the best run `fit` takes per rung: both read completed runs only."""
    from analysis.core.best_runs import select_best_runs
    from analysis.hparams.fitting import fit_hparams  # deferred: the fitting stack

    runs = _lr_sweep()
    stopped = runs.groupby("N").head(1).assign(loss=0.5, status=RunStatus.STOPPED.value)
    both = pd.concat([runs, stopped], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean, mixed = fit_hparams(runs, ["optim.lr"]), fit_hparams(both, ["optim.lr"])
    assert mixed.fits["optim.lr"].law.coef == pytest.approx(clean.fits["optim.lr"].law.coef)
    assert [r.optimum for r in mixed.fits["optim.lr"].rungs] == [
        r.optimum for r in clean.fits["optim.lr"].rungs
    ]
    assert any("not completed left out" in n for n in mixed.notes)
    sel = select_best_runs(both.assign(**{"model.d_model": both.N}))
    picked = sel.table[sel.table["selected"]]
    assert (picked["status"] == RunStatus.COMPLETED.value).all() and len(picked) == 4


def test_the_report_states_the_compute_against_the_full_sweep():
    from analysis.report.render import compute_line

    early = {"flops_spent": 80.0, "flops_full_sweep": 100.0, "flops_saved_by_early_stop": 20.0}
    rep = {
        "compute": {
            "flops_to_train": 100.0,
            "flops_if_separate": 100.0,
            "ratio": 1.0,
            "early_stop": early | {"stopped_early": ["a", "b"]},
        }
    }
    line = compute_line(rep)
    assert "early stop: 2 run(s) stopped" in line and "20% saved" in line
