"""Config defaults in one place: the dataclasses are Hydra's schema, the YAML files only override.

The golden configs (tests/config_golden.py) were captured before the schema existed, so these
tests fail if a default moved between a dataclass and a YAML file changes what a run composes to.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml
from config_golden import GOLDEN, RUN_IDS
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from experiments.cli import one_line
from experiments.rl.config import AlgoConfig, RLConfig
from experiments.rl.tasks import TaskConfig
from experiments.sweeps.grid import plan_sweep
from experiments.sweeps.runs import run_id
from experiments.train.config import GROUP_SCHEMAS, DistributedConfig, OptimConfig
from sharding.layouts import LAYOUTS

REPO = pathlib.Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SCHEMAS = {**GROUP_SCHEMAS, "rl/task": TaskConfig, "rl/algo": AlgoConfig}


def _compose(config: str, overrides=()):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config, overrides=list(overrides))


def _plain(cfg, resolve=False):
    d = OmegaConf.to_container(cfg, resolve=resolve)
    d.pop("hydra", None)
    return d


def _canonical(obj) -> str:
    """JSON as a fingerprint sees it: 262144 and 262144.0 differ."""
    return json.dumps(obj, sort_keys=True)


@pytest.mark.parametrize("case", list(GOLDEN))
def test_composed_config_is_unchanged(case):
    config, *overrides = case.split(" ")
    got = _plain(_compose(config, overrides))
    assert got == GOLDEN[case]
    assert _canonical(got) == _canonical(GOLDEN[case])


PER_PRESET = 12  # runs composed per preset: a Hydra compose costs ~0.4 s and the demo plans 78


def test_sweep_run_ids_are_unchanged():
    """Relaunching a sweep started before the schema finds its runs: same resolved configs. Every
    preset's plan is checked whole (labels), and up to PER_PRESET of its runs, spread evenly over
    the plan (every budget, shape and probe learning rate of the demo), are composed and hashed."""
    got, want = {}, {}
    for preset in {key.split("/")[0] for key in RUN_IDS}:
        base = _plain(_compose("config", [f"+sweep={preset}"]), resolve=True)
        plan = plan_sweep(base, base["sweep"])
        assert {f"{preset}/{p.label}" for p in plan} == {k for k in RUN_IDS if k.startswith(f"{preset}/")}
        for p in plan[:: -(-len(plan) // PER_PRESET)]:
            job = _plain(_compose("config", [f"+sweep={preset}", *p.overrides]), resolve=True)
            key = f"{preset}/{p.label}"
            got[key], want[key] = run_id(job, base["sweep"]["id_ignore"]), RUN_IDS[key]
    assert got == want and len(got) >= 30


def test_dataclass_defaults_are_the_default_presets():
    train = _plain(_compose("config"))
    for group, cls in GROUP_SCHEMAS.items():
        assert train[group] == dataclasses.asdict(cls()), group
    assert train["distributed"] == dataclasses.asdict(DistributedConfig())
    rl = _plain(_compose("rl"))["rl"]
    assert rl["task"] == dataclasses.asdict(TaskConfig()) and rl["algo"] == dataclasses.asdict(AlgoConfig())
    defaults = dataclasses.asdict(RLConfig())
    del rl["warm_start"]["cache_dir"], defaults["warm_start"]["cache_dir"]  # $SCALELAB_CACHE-based in rl.yaml
    assert rl == defaults


@pytest.mark.parametrize(
    "path", sorted(p.relative_to(CONF) for group in SCHEMAS for p in (CONF / group).glob("*.yaml")), ids=str
)
def test_presets_hold_only_what_differs_from_the_schema(path):
    raw = yaml.safe_load((CONF / path).read_text()) or {}
    defaults = raw.pop("defaults")
    schema = SCHEMAS[str(path.parent)]
    assert defaults[0] in (f"base_{path.parent.name}", "adamw"), defaults
    same = [k for k, v in raw.items() if getattr(schema(), k) == v]
    assert not same, f"{path} repeats the defaults of {schema.__name__}: {same}"


def test_wsd_is_adamw_with_one_key_changed():
    wsd = (CONF / "optim" / "wsd.yaml").read_text()
    assert [ln for ln in wsd.splitlines() if not ln.startswith("#")] == [
        "defaults: [adamw, _self_]",
        "schedule: wsd",
    ]
    adamw, wsd = (_plain(_compose("config", [f"optim={o}"]))["optim"] for o in ("adamw", "wsd"))
    assert wsd == {**adamw, "schedule": "wsd"} and adamw == dataclasses.asdict(OptimConfig())


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_table_is_the_sharding_presets(name):
    composed = _plain(_compose("config", [f"sharding={name}"]))["sharding"]
    assert tuple(composed[a] for a in ("data", "fsdp", "tensor")) == LAYOUTS[name]
    assert set(LAYOUTS) == {p.stem for p in (CONF / "sharding").glob("*.yaml")}


@pytest.mark.parametrize(
    "config,override,msg",
    [
        (
            "config",
            "model.bogus=1",
            "unknown model key(s) ['bogus']; known: ['attention', 'd_ff', 'd_model',",
        ),
        (
            "config",
            "sharding.pipe=2",
            "unknown sharding key(s) ['pipe']; known: ['context', 'data', 'expert', 'fsdp', 'pipeline',",
        ),
        ("rl", "rl.algo.lossy=1", "unknown rl.algo key(s) ['lossy']; known: ['advantage', 'aggregation',"),
        (
            "config",
            "train.steps=abc",
            "train.steps: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        ("config", "model=huge", "Could not find 'model/huge'; Available options in 'model': "),
    ],
)
def test_schema_rejects_at_compose_time_in_one_line(config, override, msg):
    with pytest.raises(Exception) as info:
        _compose(config, [override])
    line = one_line(info.value)
    assert msg in line and "\n" not in line


def test_types_come_from_the_dataclasses():
    cfg = _plain(_compose("config", ["train.tokens=300000", "optim.warmup_tokens=1000", "optim.lr=1"]))
    assert cfg["train"]["tokens"] == 300000 and isinstance(cfg["train"]["tokens"], int)  # Any: stays int
    assert isinstance(cfg["optim"]["warmup_tokens"], int)
    assert cfg["optim"]["lr"] == 1.0 and isinstance(cfg["optim"]["lr"], float)


def test_cli_compose_errors_are_one_line_exit_2(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("HYDRA_FULL_ERROR", None)
    for module, override, msg in (
        ("experiments.train", "model.bogus=1", "error: unknown model key(s) ['bogus']"),
        ("experiments.rl", "rl.steps=many", "error: rl.steps: Value 'many'"),
    ):
        p = subprocess.run(
            [sys.executable, "-m", module, override, f"hydra.run.dir={tmp_path / 'r'}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith(msg), p.stderr
