"""The typed config of an RL run: the `rl.*` keys (conf/rl.yaml + conf/rl/{task,algo}/).

Every `rl.*` key's type and default lives in a dataclass here (`TaskConfig` in
experiments/rl/tasks.py); `register_configs()` stores them in Hydra's ConfigStore next to the
training schemas (experiments/train/config.py), so conf/rl/task/*.yaml and conf/rl/algo/*.yaml
start from `base_task` / `base_algo` and hold only what differs. All validation happens here,
before any compile, and bad values raise `ConfigError` naming the key as typed on the command
line (`rl.group_size=...`). Importing this module does not import JAX.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore

from experiments.rl.tasks import TaskConfig
from experiments.rundir import without_moe_keys
from experiments.train.config import register_configs as register_training_configs
from experiments.train.config import schema_node
from models.base.configs import check_bool, check_choice, check_float, check_int, config_from_mapping
from models.base.errors import ConfigError
from models.base.fingerprint import fingerprint as _fingerprint


class Advantage(enum.StrEnum):
    """`rl.algo.advantage`: how a completion's reward becomes its advantage (experiments/rl/algo.py)."""

    GROUP = "group"  # GRPO: (r - group mean) / group std
    BATCH = "batch"  # ScaleRL: group-centred, divided by the batch's reward std
    NONE = "none"  # Dr. GRPO: group-centred only


class PolicyLoss(enum.StrEnum):
    """`rl.algo.loss`: the per-token policy-gradient surrogate."""

    PPO_CLIP = "ppo_clip"  # PPO/GRPO clipped ratio (DAPO clip-higher)
    CISPO = "cispo"  # MiniMax-M1: stop-gradient clipped importance weight


class Aggregation(enum.StrEnum):
    """`rl.algo.aggregation`: how token losses are averaged into one number."""

    SAMPLE = "sample"  # mean over rows of each row's token mean
    PROMPT = "prompt"  # mean over prompts of each prompt's token mean (ScaleRL)
    TOKEN = "token"  # mean over every kept token of the batch


class KLEstimator(enum.StrEnum):
    """`rl.algo.kl_estimator`: the per-token estimate of KL(pi || ref)."""

    K1 = "k1"  # log pi - log ref
    K3 = "k3"  # Schulman's low-variance, non-negative estimator


# The same sets as tuples of the strings configs hold.
ADVANTAGES = tuple(a.value for a in Advantage)
LOSSES = tuple(x.value for x in PolicyLoss)
AGGREGATIONS = tuple(a.value for a in Aggregation)
KL_ESTIMATORS = tuple(k.value for k in KLEstimator)


@dataclasses.dataclass(frozen=True)
class AlgoConfig:
    """`rl.algo.*`: the GRPO-family switches (what each does: experiments/rl/algo.py)."""

    name: str = "grpo"
    advantage: str = "group"  # group | batch | none
    loss: str = "ppo_clip"  # ppo_clip | cispo
    aggregation: str = "token"  # sample | prompt | token
    eps_low: float = 0.2
    eps_high: float = 0.28
    zero_variance_filter: bool = True
    kl_beta: float = 0.0  # KL-to-reference coefficient (0 = off)
    kl_estimator: str = "k3"  # k1 | k3
    epochs: int = 1

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "AlgoConfig":
        return config_from_mapping(cls, m, "rl.algo")

    def validate(self) -> None:
        for key, allowed in (
            ("advantage", Advantage),
            ("loss", PolicyLoss),
            ("aggregation", Aggregation),
            ("kl_estimator", KLEstimator),
        ):
            check_choice(f"rl.algo.{key}", getattr(self, key), allowed)
        for key in ("eps_low", "eps_high", "kl_beta"):
            check_float(f"rl.algo.{key}", getattr(self, key), 0)
        check_int("rl.algo.epochs", self.epochs, 1)
        check_bool("rl.algo.zero_variance_filter", self.zero_variance_filter)


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm start on the task format, stopped once the pass rate reaches `target`.

    RL from a policy that never succeeds has no signal (every group has zero reward variance),
    so the warm start trains on (prompt, answer) pairs until the sampled pass rate on a dev set
    (disjoint from the eval set) reaches `target_pass_rate`, checking every `check_every` steps.
    The result is cached under `cache_dir` keyed by everything that determines it (conf/rl.yaml
    sets `cache_dir` under `$SCALELAB_CACHE` when that is set).
    """

    target_pass_rate: float = 0.05
    max_steps: int = 3000
    check_every: int = 25
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 20
    dev_size: int = 256
    seed: int = 0
    cache_dir: str = "~/.cache/scalelab/rl_warmstart"

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "WarmStartConfig":
        return config_from_mapping(cls, m, "rl.warm_start")

    def validate(self) -> None:
        p = "rl.warm_start."
        check_float(p + "target_pass_rate", self.target_pass_rate, 0.0, 1.0, lo_open=True)
        for k in ("max_steps", "check_every", "batch_size", "dev_size"):
            check_int(p + k, getattr(self, k), 1)
        check_int(p + "warmup_steps", self.warmup_steps, 0)
        check_int(p + "seed", self.seed, 0)
        check_float(p + "lr", self.lr, 0.0, lo_open=True)


@dataclasses.dataclass(frozen=True)
class StartCheckConfig:
    """Refuse to start RL from a policy too weak to learn from (see experiments/rl/warmstart.py)."""

    min_pass_rate: float = 0.01
    max_zero_var_frac: float = 0.95
    probe_prompts: int = 128

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "StartCheckConfig":
        return config_from_mapping(cls, m, "rl.start_check")

    def validate(self) -> None:
        check_float("rl.start_check.min_pass_rate", self.min_pass_rate, 0.0, 1.0)
        check_float("rl.start_check.max_zero_var_frac", self.max_zero_var_frac, 0.0, 1.0)
        check_int("rl.start_check.probe_prompts", self.probe_prompts, 1)


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """`rl.*`: the RL run's length, batch, sampling and cadences, plus its four sub-configs."""

    steps: int = 1500
    prompts_per_step: int = 32
    group_size: int = 8
    eval_every: int = 50
    eval_samples: int = 4  # k samples per held-out prompt: pass@1 = their mean
    temperature: float = 1.0
    seed: int = 0
    init: str | None = None  # training / RL run dir or checkpoints/<step>; None = cached warm start
    ckpt_every: int = 50
    keep_checkpoints: int = 2
    progress_every_s: float = 5.0
    task: TaskConfig = TaskConfig()
    algo: AlgoConfig = AlgoConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    start_check: StartCheckConfig = StartCheckConfig()

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "RLConfig":
        m = dict(m or {})
        sub = {
            "task": TaskConfig.from_mapping(m.pop("task", {}) or {}),
            "algo": AlgoConfig.from_mapping(m.pop("algo", {}) or {}),
            "warm_start": WarmStartConfig.from_mapping(m.pop("warm_start", {}) or {}),
            "start_check": StartCheckConfig.from_mapping(m.pop("start_check", {}) or {}),
        }
        return config_from_mapping(cls, {**m, **sub}, "rl")

    def validate(self) -> None:
        for key, lo in (
            ("steps", 1),
            ("prompts_per_step", 1),
            ("group_size", 2),
            ("eval_every", 1),
            ("eval_samples", 1),
            ("seed", 0),
            ("ckpt_every", 0),
            ("keep_checkpoints", 1),
        ):
            check_int(f"rl.{key}", getattr(self, key), lo)
        check_float("rl.temperature", self.temperature, 0.0, lo_open=True)
        check_float("rl.progress_every_s", self.progress_every_s, 0.0)
        if self.init is not None and not isinstance(self.init, str):
            raise ConfigError(f"rl.init must be a path or null (got {self.init!r})")
        self.task.validate()
        self.algo.validate()
        self.warm_start.validate()
        self.start_check.validate()


def register_configs() -> None:
    """Store the RL schemas (and the training ones conf/rl.yaml also uses): `base_rl`, which
    conf/rl.yaml puts at `rl`, and `base_task` / `base_algo`, the first defaults entry of
    conf/rl/task/*.yaml and conf/rl/algo/*.yaml. Idempotent."""
    register_training_configs()
    store = ConfigStore.instance()
    store.store(name="base_rl", node=schema_node(RLConfig), package="rl")
    store.store(group="rl/task", name="base_task", node=schema_node(TaskConfig))
    store.store(group="rl/algo", name="base_algo", node=schema_node(AlgoConfig))


# At import, so whatever composes conf/rl.yaml (the command line, tests) has the schema.
register_configs()


# Keys that make a run a different experiment (resume refuses a mismatch). Cadence keys
# (eval_every, ckpt_every, progress) and the cache location are left out.
_CADENCE = ("eval_every", "ckpt_every", "keep_checkpoints", "progress_every_s")


def fingerprint_fields(
    model: Mapping[str, Any], optim: Mapping[str, Any], rl: Mapping[str, Any]
) -> dict[str, Any]:
    rl = {k: v for k, v in dict(rl).items() if k not in _CADENCE}
    ws = dict(rl.get("warm_start") or {})
    ws.pop("cache_dir", None)
    rl["warm_start"] = ws
    # a dense policy (RL trains no mixture of experts) without the MoE-only keys: its fingerprint
    # is the one it had before they existed
    return without_moe_keys({"model": dict(model), "optim": dict(optim), "rl": rl})


def fingerprint(fields: Mapping[str, Any]) -> str:
    return _fingerprint(fields)
