"""Sweep planning without launching anything: ladder rules, IsoFLOP token counts, skip rules,
run ids and the relaunch decision table."""

import math

import pytest

from experiments.sweeps.grid import PlanError, format_budget, plan_sweep
from experiments.sweeps.ladder import LadderError, Shape, ladder, shapes_from_config
from experiments.sweeps.runs import decide, read_status, run_id
from models.config import ModelConfig
from models.flops import flops_per_token, param_count

BASE = {
    "model": {
        "vocab_size": 256,
        "d_model": 64,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": None,
        "d_ff": None,
        "seq_len": 64,
    },
    "train": {"batch_size": 8, "tokens": None, "steps": 50, "seed": 0},
    "optim": {"lr": 3e-3, "warmup_tokens": 0},
    "data": {"source": "auto"},
}
SWEEP = {
    "kind": "isoflop",
    "budgets": [1e11, 3e11],
    "ladder": {"depths": [1, 2, 3, 4], "head_dim": 16, "aspect_ratio": 32},
    "min_steps": 20,
    "max_epochs": 1.0,
    "warmup_fraction": 0.05,
}


def test_ladder_keeps_head_width_and_aspect_ratio():
    shapes = ladder([4, 1, 2], head_dim=16, aspect_ratio=32)
    assert [s.n_layers for s in shapes] == [1, 2, 4]
    for s in shapes:
        assert s.d_model == 32 * s.n_layers and s.d_model // s.n_heads == 16
    gqa = ladder([2, 4], head_dim=16, aspect_ratio=32, kv_groups=2)
    assert [s.n_kv_heads for s in gqa] == [2, 4]
    # widths that are not whole heads are rounded up
    assert ladder([1], head_dim=64, aspect_ratio=40)[0].d_model == 64


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"depths": []}, "depths is empty"),
        ({"depths": [2, 2]}, "repeated"),
        ({"depths": [1], "head_dim": 15}, "even"),
        ({"depths": [1], "kv_groups": 4}, "kv_groups"),
        ({"depths": [0]}, "positive integer"),
    ],
)
def test_ladder_rejects_bad_rules(kw, msg):
    with pytest.raises(LadderError, match=msg):
        ladder(**kw)


def test_explicit_shapes_replace_the_rule():
    shapes = shapes_from_config(
        {"shapes": [{"n_layers": 3, "d_model": 48, "n_heads": 3}], "ladder": {"depths": [1]}}
    )
    assert shapes == [Shape(3, 48, 3)]
    with pytest.raises(LadderError, match=r"sweep.shapes\[0\]"):
        shapes_from_config({"shapes": [{"n_layers": 3}]})


def test_isoflop_tokens_come_from_real_flops_per_token():
    runs = plan_sweep(BASE, SWEEP, corpus_tokens=10**9)
    assert len(runs) == 8
    tps = 8 * 64
    for r in runs:
        shape = {
            o.split("=")[0].split(".")[1]: o.split("=")[1] for o in r.overrides if o.startswith("model.")
        }
        mc = ModelConfig.from_mapping(
            {**BASE["model"], **{k: (None if v == "null" else int(v)) for k, v in shape.items()}}
        )
        assert r.flops_per_token == flops_per_token(mc) and r.n_params == param_count(mc)
        assert r.flops_per_token > 6 * (param_count(mc) - 256 * mc.d_model)  # attention counted
        assert r.tokens % tps == 0 and r.steps == r.tokens // tps
        assert abs(r.tokens - r.budget / r.flops_per_token) <= tps / 2  # nearest whole step
        assert f"train.tokens={r.tokens}" in r.overrides and "train.steps=null" in r.overrides
        assert f"optim.warmup_tokens={round(0.05 * r.tokens)}" in r.overrides
        assert f"sweep.budget={r.budget:g}" in r.overrides
        assert (r.skip is None) == (r.steps >= 20)
    assert [r.label for r in runs][:2] == ["C1e11_L1-d32", "C1e11_L2-d64"]


def test_lr_probe_adds_each_shape_at_other_learning_rates():
    runs = plan_sweep(BASE, {**SWEEP, "lr_probe": {"lrs": [1e-3, 1e-2]}}, corpus_tokens=10**9)
    base, probe = runs[:8], runs[8:]
    assert len(probe) == 4 * 2 and {r.budget for r in probe} == {1e11}  # the smallest budget
    for r in probe:
        twin = next(b for b in base if b.label == r.label.rsplit("_lr", 1)[0])
        assert r.tokens == twin.tokens and r.n_params == twin.n_params
        assert set(r.overrides) - set(twin.overrides) == {f"optim.lr={r.label.rsplit('_lr', 1)[1]}"}
    both = plan_sweep(
        BASE, {**SWEEP, "lr_probe": {"lrs": [1e-3], "budgets": [1e11, 3e11]}}, corpus_tokens=10**9
    )
    assert len(both) == 8 + 8
    with pytest.raises(PlanError, match="needs `lrs`"):
        plan_sweep(BASE, {**SWEEP, "lr_probe": {"budgets": [1e11]}})
    with pytest.raises(PlanError, match="not in sweep.budgets"):
        plan_sweep(BASE, {**SWEEP, "lr_probe": {"lrs": [1e-3], "budgets": [5e11]}})


def test_epoch_limit_skips_with_reason():
    runs = plan_sweep(BASE, SWEEP, corpus_tokens=50_000)
    big = [r for r in runs if r.tokens > 50_000 and r.steps >= 20]
    assert big and all("epochs" in r.skip and "max_epochs=1.0" in r.skip for r in big)
    assert all("data-constrained law" in r.skip for r in big)  # why it is excluded, not trained
    assert all(r.skip is None for r in runs if r.tokens <= 50_000 and r.steps >= 20)


def test_other_kinds():
    ml = plan_sweep(
        BASE, {"kind": "model_ladder", "tokens_per_param": 2, "ladder": {"depths": [1, 2]}, "min_steps": 1}
    )
    assert [abs(r.tokens - 2 * r.n_params) <= 256 for r in ml] == [True, True]
    dl = plan_sweep(BASE, {"kind": "data_ladder", "tokens": [1e5, 2e4], "min_steps": 1})
    assert [r.tokens for r in dl] == [19968, 99840] and all(r.n_params == dl[0].n_params for r in dl)
    lay = plan_sweep(BASE, {"kind": "layouts", "meshes": [{"data": 8}, {"data": 2, "tensor": 4}]})
    assert lay[1].overrides == ("sharding.data=2", "sharding.fsdp=1", "sharding.tensor=4")
    assert lay[0].steps == 50
    new = plan_sweep(
        BASE,
        {
            "kind": "layouts",
            "meshes": [
                {
                    "data": 2,
                    "pipeline": 2,
                    "pipeline_schedule": "interleaved",
                    "virtual_stages": 2,
                    "micro_batches": 4,
                },
                {"tensor": 2, "context": 2, "sequence_parallel": True},
            ],
        },
    )
    assert [r.label for r in new] == [
        "mesh-data2-fsdp1-tensor1-pp2-interleaved-v2-mb4",
        "mesh-data1-fsdp1-tensor2-cp2-sp",
    ]
    assert new[0].overrides[-4:] == (
        "sharding.pipeline=2",
        "sharding.pipeline_schedule=interleaved",
        "sharding.virtual_stages=2",
        "train.micro_batches=4",
    )
    assert new[1].overrides[-2:] == ("sharding.context=2", "sharding.sequence_parallel=true")


@pytest.mark.parametrize(
    "sweep, msg",
    [
        ({**SWEEP, "budgets": []}, "sweep.budgets is empty"),
        ({**SWEEP, "budgets": [1e11, -1]}, "positive number"),
        ({**SWEEP, "kind": "grid"}, "sweep.kind"),
        ({**SWEEP, "warmup_fraction": 1.5}, "warmup_fraction"),
        ({"kind": "layouts", "meshes": [{"pipe": 2}]}, "unknown keys"),
        ({"kind": "data_ladder"}, "sweep.tokens is empty"),
    ],
)
def test_bad_sweep_configs_name_the_key(sweep, msg):
    with pytest.raises(PlanError, match=msg):
        plan_sweep(BASE, sweep, corpus_tokens=None)


def test_format_budget():
    assert [format_budget(c) for c in (1e11, 3e11, 1.5e12, 9.9999e9, 2.5e9)] == [
        "1e11",
        "3e11",
        "1.5e12",
        "1e10",
        "2.5e9",
    ]


def test_run_id_ignores_hydra_and_sweep_but_not_the_run():
    cfg = {**BASE, "sweep": {"budgets": [1]}, "hydra": {"run": {"dir": "x"}}}
    rid = run_id(cfg)
    assert rid == run_id({**BASE, "sweep": {"budgets": [1, 2, 3]}})
    assert rid != run_id({**BASE, "optim": {**BASE["optim"], "lr": 1e-3}})
    assert rid == run_id({**BASE, "train": {**BASE["train"], "seed": 0}})
    assert run_id(BASE, ignore=["train.seed"]) == run_id(
        {**BASE, "train": {**BASE["train"], "seed": 7}}, ignore=["train.seed"]
    )
    assert len(rid) == 10 and math.isfinite(int(rid, 16))


def test_status_and_decision(tmp_path):
    assert read_status(tmp_path / "nope") == "new"
    d = tmp_path / "r"
    d.mkdir()
    assert read_status(d) == "interrupted"
    (d / "summary.json").write_text("{not json")
    assert read_status(d) == "interrupted"
    for status in ("completed", "diverged", "failed", "running"):
        (d / "summary.json").write_text(f'{{"status": "{status}"}}')
        assert read_status(d) == (status if status != "running" else "interrupted")
    assert decide("completed", True) == (False, "completed earlier; reused")
    assert decide("diverged", False)[0] is False and decide("diverged", True)[0] is True
    assert decide("interrupted", False)[0] is True and decide("new", False) == (True, "new")


def _hp_file(tmp_path, laws):
    """An HP.json as fit-hparams writes it (only what a sweep reads: kind, laws.inputs/coef_log)."""
    import json

    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"kind": "hparams", "laws": laws}))
    return str(path)


def _value(run, key):
    return next(float(o.split("=", 1)[1]) for o in run.overrides if o.startswith(key + "="))


def test_hparams_set_each_runs_lr_from_the_law_and_the_probe_keeps_its_own(tmp_path):
    # lr* = 2 N^-0.5: each run's lr follows its own N
    hp = _hp_file(tmp_path, {"optim.lr": {"inputs": ["N"], "coef_log": [math.log(2.0), -0.5]}})
    sweep = {**SWEEP, "hparams": hp, "lr_probe": {"lrs": [1e-3]}}
    runs = [r for r in plan_sweep(BASE, sweep, corpus_tokens=10**9) if not r.skip]
    main = [r for r in runs if "_lr" not in r.label]
    assert len({_value(r, "optim.lr") for r in main}) > 1
    for r in main:
        assert _value(r, "optim.lr") == pytest.approx(2.0 * r.n_params**-0.5, rel=1e-3)
    probe = [r for r in runs if "_lr" in r.label]
    assert probe and all(_value(r, "optim.lr") == 1e-3 for r in probe)
    assert all(sum(o.startswith("optim.lr=") for o in r.overrides) == 1 for r in runs)


def test_hparams_batch_law_is_rounded_to_the_mesh_and_sets_the_length(tmp_path):
    # B* = 0.01 D^0.5 sequences, on a data=2 x fsdp=2 mesh: multiples of 4
    hp = _hp_file(tmp_path, {"train.batch_size": {"inputs": ["D"], "coef_log": [math.log(0.01), 0.5]}})
    base = {**BASE, "sharding": {"data": 2, "fsdp": 2}}
    runs = [r for r in plan_sweep(base, {**SWEEP, "hparams": hp}) if not r.skip]
    batches = {_value(r, "train.batch_size") for r in runs}
    assert len(batches) > 1 and all(b % 4 == 0 and b >= 4 for b in batches)
    for r in runs:
        b = int(_value(r, "train.batch_size"))
        assert r.tokens == r.steps * b * BASE["model"]["seq_len"]
        assert abs(b - 0.01 * r.tokens**0.5) <= 2 + 0.5 * b  # nearest multiple of 4 (rounded in D)


def test_hparams_with_branches_give_one_value_per_shape(tmp_path):
    hp = _hp_file(tmp_path, {"optim.lr": {"inputs": ["N", "D"], "coef_log": [0.0, -0.5, 0.1]}})
    runs = [r for r in plan_sweep(BASE, {**SWEEP, "hparams": hp, "branches": True}) if not r.skip]
    by_shape = {}
    for r in runs:
        by_shape.setdefault(r.n_params, set()).add(_value(r, "optim.lr"))
    assert len(by_shape) > 1 and all(len(v) == 1 for v in by_shape.values())
    unbranched = [r for r in plan_sweep(BASE, {**SWEEP, "hparams": hp}) if not r.skip]
    assert len({_value(r, "optim.lr") for r in unbranched}) > len(by_shape)  # D moves it otherwise


def test_hparams_file_errors_are_one_line(tmp_path):
    with pytest.raises(PlanError, match="file not found"):
        plan_sweep(BASE, {**SWEEP, "hparams": str(tmp_path / "missing.json")})
    (tmp_path / "other.json").write_text('{"params": {}}')
    with pytest.raises(PlanError, match="not a fit-hparams result"):
        plan_sweep(BASE, {**SWEEP, "hparams": str(tmp_path / "other.json")})
    bad = _hp_file(tmp_path, {"model.d_model": {"inputs": ["N"], "coef_log": [0.0, 1.0]}})
    with pytest.raises(PlanError, match="not model.d_model"):
        plan_sweep(BASE, {**SWEEP, "hparams": bad})


# ---- data_limited (issue 27: repeated data) ------------------------------------------------------

DATA_LIMITED = {
    "kind": "data_limited",
    "unique_tokens": [16_000, 64_000],
    "epochs": [1, 4, 16],
    "ladder": {"depths": [1, 2], "head_dim": 16, "aspect_ratio": 32},
    "min_steps": 10,
    "max_epochs": None,
    "warmup_fraction": 0.05,
}


def test_data_limited_plans_every_shape_u_and_epochs():
    runs = plan_sweep(BASE, DATA_LIMITED, corpus_tokens=10**7)
    assert len(runs) == 2 * 2 * 3
    tps = 8 * 64
    # largest first: shapes by FLOPs per token, then U, then epochs
    assert [r.label for r in runs[:4]] == [
        "U6.4e4_ep16_L2-d64",
        "U6.4e4_ep4_L2-d64",
        "U6.4e4_ep1_L2-d64",
        "U1.6e4_ep16_L2-d64",
    ]
    assert {r.label for r in runs} == {
        f"U{u}_ep{e}_{s}" for u in ("1.6e4", "6.4e4") for e in (1, 4, 16) for s in ("L1-d32", "L2-d64")
    }
    for r in runs:
        u = 16_000 if r.label.startswith("U1.6e4") else 64_000
        e = int(r.label.split("_ep")[1].split("_")[0])
        assert f"data.max_unique_tokens={u}" in r.overrides
        assert r.tokens % tps == 0 and abs(r.tokens - e * u) <= tps / 2
        assert f"train.tokens={r.tokens}" in r.overrides and "train.steps=null" in r.overrides
        assert r.budget is None
    # 16k unique tokens, one epoch: 31 steps of 512 tokens; 64k x 16 epochs is 2,000 steps
    assert {r.steps for r in runs if r.label.startswith("U1.6e4_ep1_")} == {31}


def test_data_limited_repeats_by_design_but_skips_short_runs():
    runs = plan_sweep(BASE, {**DATA_LIMITED, "min_steps": 40}, corpus_tokens=10**7)
    short = [r for r in runs if r.skip]
    assert {r.label.split("_L")[0] for r in short} == {"U1.6e4_ep1"}  # 31 steps < 40
    assert all("sweep.min_steps=40" in r.skip for r in short)
    assert all(r.skip is None for r in runs if r.steps >= 40)  # 16 epochs: no epoch limit
    # an explicit epoch limit counts passes over each run's own U, not over the corpus
    capped = plan_sweep(BASE, {**DATA_LIMITED, "max_epochs": 4}, corpus_tokens=10**7)
    over = [r for r in capped if r.skip]
    assert {r.label.split("_L")[0] for r in over} == {"U1.6e4_ep16", "U6.4e4_ep16"}
    assert all("unique tokens (data.max_unique_tokens)" in r.skip for r in over)


def test_epoch_limit_counts_the_capped_split():
    """`sweep.max_epochs` with a cap in the base config: the sweeper's corpus size is the cap
    (experiments/sweeps/corpus.py), so a run past it is skipped."""
    from experiments.sweeps import corpus

    cfg = {**BASE, "data": {"source": "auto", "max_unique_tokens": 50_000}}
    assert corpus.train_tokens(cfg) == 50_000
    assert corpus.train_tokens({**BASE, "data": {"max_unique_tokens": 10**12}}) == corpus.train_tokens(BASE)
    runs = plan_sweep(cfg, SWEEP, corpus_tokens=corpus.train_tokens(cfg))
    assert any(r.skip and "50,000-token training split" in r.skip for r in runs)
    with pytest.raises(PlanError, match=r"data.max_unique_tokens must be a positive integer \(got 0\)"):
        corpus.train_tokens({**BASE, "data": {"max_unique_tokens": 0}})


@pytest.mark.parametrize(
    "change, corpus_tokens, msg",
    [
        ({"unique_tokens": []}, None, "sweep.unique_tokens is empty"),
        ({"unique_tokens": [1e5, -1]}, None, r"sweep.unique_tokens\[\] must be a positive number"),
        ({"unique_tokens": [1e5, 1e5]}, None, "sweep.unique_tokens has repeated entries"),
        ({"unique_tokens": [1e5, 500]}, None, r"500 is smaller than one batch of tokens .* = 520"),
        ({"unique_tokens": [2e6]}, 10**6, "2,000,000 is more than the 1,000,000-token training split"),
        ({"epochs": []}, None, "sweep.epochs is empty"),
        ({"epochs": [1, 0]}, None, r"sweep.epochs\[\] must be a positive number"),
        ({"epochs": [2, 2]}, None, "sweep.epochs has repeated entries"),
    ],
)
def test_data_limited_errors_are_one_line(change, corpus_tokens, msg):
    with pytest.raises(PlanError, match=msg) as info:
        plan_sweep(BASE, {**DATA_LIMITED, **change}, corpus_tokens=corpus_tokens)
    assert "\n" not in str(info.value)


def test_data_limited_wants_no_cap_in_the_base_config():
    base = {**BASE, "data": {"source": "auto", "max_unique_tokens": 1000}}
    with pytest.raises(PlanError, match="sets data.max_unique_tokens per run"):
        plan_sweep(base, DATA_LIMITED)


def test_run_id_leaves_out_a_null_cap_only():
    assert run_id(BASE) == run_id({**BASE, "data": {**BASE["data"], "max_unique_tokens": None}})
    assert run_id(BASE) != run_id({**BASE, "data": {**BASE["data"], "max_unique_tokens": 1000}})
