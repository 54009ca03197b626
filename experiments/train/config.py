"""The typed config of a training run, and the one validator: raw Hydra config -> `RunSpec`.

Every config key's type and default lives in a dataclass: `ModelConfig` (models/config.py),
`DataConfig` (experiments/train/corpus.py), `ShardingConfig` (sharding/layouts.py), `EvalConfig`
(experiments/train/tasks/base.py: downstream tasks), `TrackerConfig` (experiments/train/tracking.py:
`tracker=`) and `TrainConfig`, `OptimConfig`,
`DistributedConfig` here. `register_configs()` stores them in Hydra's
ConfigStore as `base_<group>`; each conf/<group>/*.yaml starts from its schema (`defaults:
[base_<group>, _self_]`) and holds only what differs from it, and Hydra refuses an unknown key or
a value of the wrong type while composing (experiments/cli.py turns that into one error line).

`resolve_config` derives and checks everything a run needs (model sizes, step counts,
micro-batching, warmup steps, mesh axis sizes, eval batches, divergence ceiling) before any JAX
compile, so that bad input ends with one `ConfigError` line naming the key.
Importing this module does not import JAX: the command line registers the schema with it before
composing, and a completed run exits without JAX.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from experiments.rundir import config_fingerprint, fingerprint_fields
from experiments.train.corpus import DataConfig, check_paths, check_unique_tokens, data_vocab_size
from experiments.train.mixture import check_corpora
from experiments.train.profiling import check_profile_steps
from experiments.train.tasks import EvalConfig
from experiments.train.tasks.base import check_tasks
from experiments.train.tracking import TrackerConfig
from models.base.configs import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    config_from_mapping,
    is_int,
    to_plain,
)
from models.base.errors import ConfigError
from models.config import ModelConfig
from models.flops import active_param_count, flops_per_token, non_embedding_param_count, param_count
from sharding.layouts import ShardingConfig, resolve_axis_sizes
from sharding.validate import PipelineSpec, check_pipeline, check_sequence_layout, validate_mesh


class Schedule(enum.StrEnum):
    """`optim.schedule`: the learning-rate shape after linear warmup (experiments/train/optimizer.py)."""

    COSINE = "cosine"
    LINEAR = "linear"
    WSD = "wsd"  # warmup-stable-decay: peak until the last `decay_fraction` of the run
    CONSTANT = "constant"


SCHEDULES = tuple(s.value for s in Schedule)

# The `optim.*` keys that only set the train step's scalar inputs (experiments/train/optimizer.py
# hyperparams): runs that differ only in them (and seed, length) share one compiled program.
PACKABLE_OPTIM_KEYS = (
    "lr",
    "weight_decay",
    "min_lr_ratio",
    "warmup_tokens",
    "decay_fraction",
    "schedule",
    "warmup_init",
)


def wsd_decay_steps(steps: int, decay_fraction: float) -> int:
    """The steps a WSD run of `steps` steps decays over: its last round(decay_fraction * steps),
    at least one (the optimizer's schedule and the sweeper's branch points both use this)."""
    return max(int(round(decay_fraction * steps)), 1)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """`train.*`: batch, run length, cadences and seed of a training run."""

    batch_size: int = 16  # global batch, sequences
    micro_batch_size: int | None = None  # None = batch_size; smaller = gradient accumulation
    micro_batches: int = 1  # pipeline micro-batches each micro-batch is split into
    # (sharding.pipeline > 1; sharding/pipeline.py)
    tokens: Any = 262144  # run length in tokens, rounded up to whole steps (int or
    # float such as 2e6: typed Any so an int stays an int)
    steps: int | None = None  # run length in steps: when set, wins over tokens
    eval_every: int = 50  # steps between evals (0 = only at the end)
    eval_tokens: int = 16384  # validation tokens per eval (same batches for every seed)
    ckpt_every: int = 50  # steps between checkpoints (0 = only at the end)
    ckpt_every_s: float | None = None  # also checkpoint when this many seconds passed since the
    # last one (None = by steps only), Levanter/MaxText style: long runs save by time, short ones rarely
    async_checkpoints: bool = True  # Orbax async saves: the step goes on while the files are written
    branch_points: list[int] | None = None  # WSD trunk: steps whose checkpoints are kept for
    # branches (<run dir>/branch_points/, never rotated away)
    branch_from: str | None = None  # WSD branch: the trunk's run directory; a run with no
    # checkpoint of its own starts from the trunk's branch point `branch_step`
    branch_step: int | None = None
    seed: int = 0  # parameter init and batch order (batch i = f(seed, i))
    log_every: int = 1  # steps between metrics.jsonl records
    loss_ceiling: float | None = None  # loss above this stops the run (None = 2 ln(vocab) + 1)
    keep_checkpoints: int = 2
    progress_every_s: float = 2.0  # console progress line period
    profile_steps: list[int] | None = None  # [first, last]: JAX profiler trace of those steps
    # (1-based) in <run dir>/profile (experiments/train/profiling.py)
    # continual pre-training (experiments/train/init.py; docs/train.md): start from another run's
    # weights, the run directory `init_from` at its final checkpoint (or at step `init_step`);
    # its optimizer state too with `init_optimizer` (the schedule still starts at this run's step 0)
    init_from: str | None = None
    init_step: int | None = None
    init_optimizer: bool = False

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "TrainConfig":
        return config_from_mapping(cls, m, "train")


# (key, lo, hi, lo_open) of each number `optim.*` must be in.
_OPTIM_RANGES = (
    ("lr", 0.0, None, True),
    ("min_lr_ratio", 0.0, 1.0, False),
    ("decay_fraction", 0.0, 1.0, True),
    ("weight_decay", 0.0, None, False),
    ("b1", 0.0, 1.0, False),
    ("b2", 0.0, 1.0, False),
    ("eps", 0.0, None, True),
    ("clip", 0.0, None, False),
    ("warmup_tokens", 0.0, None, False),
    ("warmup_init", 0.0, 1.0, False),
    ("moe_aux_weight", 0.0, None, False),
    ("moe_z_weight", 0.0, None, False),
)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """`optim.*`: AdamW with linear warmup, then the `schedule` shape (experiments/train/optimizer.py)."""

    name: str = "adamw"
    lr: float = 3e-3
    schedule: str = "cosine"  # cosine | linear | wsd | constant (after linear warmup)
    warmup_tokens: Any = None  # None = 5% of the run (Any: an int stays an int)
    # lr of the first warmup step as a fraction of the peak: 0 = from zero; a continued run
    # (train.init_from) re-warming from its parent's final lr sets parent min_lr * parent lr / lr
    warmup_init: float = 0.0
    min_lr_ratio: float = 0.1  # final lr / peak lr for cosine / linear / wsd
    decay_fraction: float = 0.2  # wsd: last fraction of the run spent decaying
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    clip: float | None = 1.0  # global gradient-norm clip; None or 0 disables
    decay_norms: bool = False  # weight decay on norm scales / biases
    decay_embeddings: bool = False  # weight decay on the embedding and output head
    moe_aux_weight: float = 0.01  # model.moe: weight of the load-balancing loss (summed over the
    # routed layers) in the objective (Switch Transformer's alpha)
    moe_z_weight: float = 0.001  # model.moe: weight of the router z-loss (summed over the routed
    # layers; ST-MoE's 1e-3)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "OptimConfig":
        return config_from_mapping(cls, m, "optim")

    def validate(self) -> None:
        if self.name != "adamw":
            raise ConfigError(f"optim.name must be adamw (got {self.name!r})")
        check_choice("optim.schedule", self.schedule, Schedule)
        for name, lo, hi, lo_open in _OPTIM_RANGES:
            v = getattr(self, name)
            if v is not None or name not in ("clip", "warmup_tokens"):  # clip, warmup_tokens: null = off / 5%
                check_float(f"optim.{name}", v, lo, hi, lo_open=lo_open)


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """`distributed.*`: multi-host start-up (sharding/distributed.py). All None: taken from
    SCALELAB_COORDINATOR / SCALELAB_NUM_PROCESSES / SCALELAB_PROCESS_ID or SLURM_* variables; a
    single process if none."""

    coordinator_address: str | None = None  # host:port of process 0
    num_processes: int | None = None
    process_id: int | None = None
    local_device_ids: Any = None  # list of this process's device ids
    port: int | None = None  # coordinator port when derived from SLURM (default 12355)
    cpu_collectives: str = "gloo"  # CPU backend collectives between processes


# ---- Hydra schema ---------------------------------------------------------------------------

GROUP_SCHEMAS: dict[str, type] = {
    "model": ModelConfig,
    "train": TrainConfig,
    "optim": OptimConfig,
    "data": DataConfig,
    "sharding": ShardingConfig,
    "eval": EvalConfig,
    "tracker": TrackerConfig,
}


def schema_node(cls: type) -> DictConfig:
    """`cls` as a Hydra schema: typed like the dataclass but writable. OmegaConf makes the node of
    a frozen dataclass read-only (nested ones too), which would refuse every YAML value and
    command-line override merged into it."""
    node = OmegaConf.structured(cls)
    _make_writable(node)
    return node


def _make_writable(node: DictConfig) -> None:
    OmegaConf.set_readonly(node, None)
    for key in node:
        child = node[key]
        if isinstance(child, DictConfig):
            _make_writable(child)


def register_configs() -> None:
    """Store the training schemas: `base_<group>` in each config group of GROUP_SCHEMAS (the
    first entry of the defaults list of conf/<group>/*.yaml) and `base_distributed`, which
    conf/config.yaml and conf/rl.yaml put at `distributed`. Idempotent."""
    store = ConfigStore.instance()
    for group, cls in GROUP_SCHEMAS.items():
        store.store(group=group, name=f"base_{group}", node=schema_node(cls))
    store.store(name="base_distributed", node=schema_node(DistributedConfig), package="distributed")


# At import, so whatever composes conf/ (the command line, tests, notebooks) has the schema.
register_configs()


# ---- the validator --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A validated run: the typed configs plus every derived number the trainer uses."""

    model: ModelConfig
    train: TrainConfig
    optim: OptimConfig
    data: DataConfig
    eval: EvalConfig  # downstream tasks (`eval.*`; absent from the config = none)
    tracker: TrackerConfig  # `tracker.*` (absent from the config = none)
    mesh_shape: tuple[int, int, int]  # resolved (data, fsdp, tensor)
    distributed: dict[str, Any]
    steps: int
    tokens_per_step: int
    total_tokens: int
    micro_batch_size: int
    n_micro: int
    warmup_steps: int
    eval_batch_size: int
    eval_batches: int
    loss_ceiling: float
    n_params: int
    n_params_non_embedding: int
    flops_per_token: int  # active FLOPs for a mixture of experts (models/flops.py)
    fingerprint: str
    fingerprint_fields: dict[str, Any]
    raw: dict[str, Any]
    pipeline: PipelineSpec = PipelineSpec()  # sharding.pipeline stages (the `stage` mesh axis)
    context: int = 1  # sharding.context: sequence shards (the `context` mesh axis)
    sequence_parallel: bool = False  # sharding.sequence_parallel (Megatron SP over `tensor`)
    expert: int = 1  # sharding.expert: expert-parallel ranks (the `expert` mesh axis)
    n_params_active: int | None = None  # model.moe: parameters one token uses (else None)

    @property
    def n_devices(self) -> int:
        return math.prod(self.mesh_shape) * self.pipeline.stages * self.context * self.expert


@dataclasses.dataclass(frozen=True)
class _Length:
    """How long a run is and how its batch is split."""

    micro_batch_size: int
    n_micro: int
    tokens_per_step: int
    steps: int
    total_tokens: int


def _int(name: str, v: Any, lo: int = 1) -> int:
    """`check_int`, also taking a whole float (`2e3` typed on the command line)."""
    return check_int(name, int(v) if isinstance(v, float) and v.is_integer() else v, lo)


def _raw_groups(cfg: Any) -> dict[str, Any]:
    """The plain config dict, after checking every group a training run needs is there."""
    raw = to_plain(cfg)
    if not isinstance(raw, dict):
        raise ConfigError("config must be a mapping")
    for group in ("model", "train", "optim", "data", "sharding"):
        if not isinstance(raw.get(group), dict):
            raise ConfigError(f"config group {group!r} is missing")
    return raw


def _check_vocab(model: ModelConfig, data: DataConfig) -> ModelConfig:
    """The model, with a prepared corpus's vocabulary (`data.dir`'s meta.json) when
    model.vocab_size is left at its byte-level default; any other value must equal it."""
    dvocab = data_vocab_size(data)
    if data.resolved_source() == "prepared":
        if model.vocab_size == ModelConfig.__dataclass_fields__["vocab_size"].default:
            return dataclasses.replace(model, vocab_size=dvocab)
        if model.vocab_size != dvocab:
            raise ConfigError(
                f"model.vocab_size={model.vocab_size} does not match data.dir's vocabulary "
                f"({dvocab}, {data.dir}/meta.json); leave model.vocab_size unset to take it "
                "from meta.json"
            )
        return model
    if model.vocab_size < dvocab:
        raise ConfigError(
            f"model.vocab_size={model.vocab_size} is smaller than the data's vocabulary "
            f"({dvocab}); set model.vocab_size >= {dvocab}"
        )
    return model


def _run_length(train: TrainConfig, model: ModelConfig) -> _Length:
    """Micro-batching and run length in steps (`train.steps` wins over `train.tokens`)."""
    batch = _int("train.batch_size", train.batch_size)
    micro = (
        batch if train.micro_batch_size is None else _int("train.micro_batch_size", train.micro_batch_size)
    )
    if batch % micro:
        raise ConfigError(f"train.micro_batch_size={micro} does not divide train.batch_size={batch}")
    tokens_per_step = batch * model.seq_len
    if train.steps is not None:
        steps = _int("train.steps", train.steps)
    elif train.tokens is not None:
        tok = check_float("train.tokens", train.tokens, 0, lo_open=True, what="a positive number")
        steps = max(1, math.ceil(tok / tokens_per_step))
    else:
        raise ConfigError("give train.steps or train.tokens")
    return _Length(micro, batch // micro, tokens_per_step, steps, steps * tokens_per_step)


def _check_cadences(train: TrainConfig, steps: int) -> None:
    _int("train.eval_every", train.eval_every, lo=0)
    _int("train.ckpt_every", train.ckpt_every, lo=0)
    if train.ckpt_every_s is not None:
        check_float("train.ckpt_every_s", train.ckpt_every_s, 0, lo_open=True, what="a positive number")
    check_bool("train.async_checkpoints", train.async_checkpoints)
    for k in train.branch_points or []:
        _int("train.branch_points[]", k)
    if (train.branch_from is None) != (train.branch_step is None):
        raise ConfigError("train.branch_from and train.branch_step go together: give both or neither")
    if train.branch_step is not None and not 0 < _int("train.branch_step", train.branch_step) < steps:
        raise ConfigError(f"train.branch_step={train.branch_step} must be inside the run (1 .. {steps - 1})")
    _int("train.eval_tokens", train.eval_tokens)
    _int("train.seed", train.seed, lo=0)
    _int("train.log_every", train.log_every)
    _int("train.keep_checkpoints", train.keep_checkpoints)
    _check_init(train)


def _check_init(train: TrainConfig) -> None:
    """`train.init_from` / `init_step` / `init_optimizer` (the directory is read at the run's start)."""
    check_bool("train.init_optimizer", train.init_optimizer)
    if train.init_from is not None and (not isinstance(train.init_from, str) or not train.init_from.strip()):
        raise ConfigError(f"train.init_from must be a run directory (got {train.init_from!r})")
    if train.init_from is None and (train.init_step is not None or train.init_optimizer):
        raise ConfigError(
            "train.init_step / train.init_optimizer need train.init_from (the run to start from)"
        )
    if train.init_step is not None:
        _int("train.init_step", train.init_step)


def _warmup_steps(optim: OptimConfig, length: _Length) -> int:
    """`optim.warmup_tokens` in steps; None = 5% of the run."""
    if optim.warmup_tokens is None:
        return int(round(0.05 * length.steps))
    if optim.warmup_tokens >= length.total_tokens and optim.warmup_tokens > 0:
        raise ConfigError(
            f"optim.warmup_tokens={optim.warmup_tokens:g} is not smaller than the run's "
            f"{length.total_tokens} tokens"
        )
    return int(math.ceil(optim.warmup_tokens / length.tokens_per_step))


def _loss_ceiling(train: TrainConfig, model: ModelConfig) -> float:
    """Divergence threshold: `train.loss_ceiling`, or 2 ln(vocab) + 1 (twice a uniform guess)."""
    ceiling = train.loss_ceiling
    if ceiling is None:
        return 2.0 * math.log(model.vocab_size) + 1.0
    return float(check_float("train.loss_ceiling", ceiling, 0, lo_open=True, what="a positive number"))


def _devices_per_stage(sharding: ShardingConfig, n_devices: int) -> int:
    """The devices left for the other axes once `sharding.pipeline` stages take theirs."""
    p = check_int("sharding.pipeline", sharding.pipeline, 1, what="a positive integer")
    if n_devices % p:
        raise ConfigError(f"sharding.pipeline={p} does not divide the {n_devices} available devices")
    return n_devices // p


def _pipeline(
    sharding: ShardingConfig, train: TrainConfig, model: ModelConfig, micro: int, mesh_shape: tuple[int, ...]
) -> PipelineSpec:
    """The validated pipeline (train.micro_batches only means something with stages)."""
    if sharding.pipeline == 1 and train.micro_batches == 1 and sharding.virtual_stages == 1:
        return PipelineSpec(
            schedule=check_pipeline(model.n_layers, 1, sharding.pipeline_schedule, 1, 1, micro).schedule
        )
    if sharding.pipeline == 1:
        raise ConfigError("train.micro_batches / sharding.virtual_stages need sharding.pipeline > 1")
    return check_pipeline(
        model.n_layers,
        sharding.pipeline,
        sharding.pipeline_schedule,
        sharding.virtual_stages,
        train.micro_batches,
        micro,
        batch_shards=mesh_shape[0] * mesh_shape[1],
    )


def _check_moe_layout(sharding: ShardingConfig, model: ModelConfig) -> int:
    """`sharding.expert`, checked; a mixture of experts refuses the layouts it does not run with
    (one line): a pipeline (its stages stack identical blocks) and a split sequence (a routing
    group is one whole sequence)."""
    expert = check_int("sharding.expert", sharding.expert, lo=1, what="a positive integer")
    if model.moe is not None and sharding.pipeline != 1:
        raise ConfigError(
            "model.moe does not run with sharding.pipeline > 1 (a pipeline stacks identical "
            "blocks); use sharding.expert / data / fsdp / tensor"
        )
    if model.moe is not None and sharding.context != 1:
        raise ConfigError(
            "model.moe does not run with sharding.context > 1: a routing group is one whole "
            "sequence; use sharding.expert / data / fsdp / tensor"
        )
    return expert


def _mesh_shape(
    sharding: ShardingConfig, model: ModelConfig, micro: int, n_devices: int | None
) -> tuple[int, int, int]:
    """Resolved (data, fsdp, tensor) sizes that divide the model and the batch (`sharding.expert`
    and `sharding.context` take their shares of the devices first)."""
    expert = _check_moe_layout(sharding, model)
    # Divisibility by the axes given explicitly first (the clearer message), then the device count.
    fixed = sharding.sizes
    if all(is_int(v) and (v >= 1 or v == -1) for v in fixed):
        validate_mesh(
            model, *[max(v, 1) for v in fixed], micro_batch_size=micro, eval_batch_size=micro, expert=expert
        )
    if n_devices is None:
        import jax  # only to count devices: importing this module stays JAX-free (see the docstring)

        n_devices = jax.device_count()
    n_devices = _devices_per_stage(sharding, n_devices)
    check_sequence_layout(model, None, sharding.context, sharding.sequence_parallel)
    if n_devices % sharding.context:
        raise ConfigError(
            f"sharding.context={sharding.context} does not divide the {n_devices} available devices"
        )
    n_devices //= sharding.context  # the `context` mesh axis takes its share (sharding/context.py)
    if n_devices % expert:
        raise ConfigError(f"sharding.expert={expert} does not divide the {n_devices} available devices")
    n_devices //= expert  # ... and the `expert` one (sharding/rules.py)
    mesh_shape = resolve_axis_sizes(list(fixed), n_devices)
    validate_mesh(model, *mesh_shape, micro_batch_size=micro, eval_batch_size=micro, expert=expert)
    check_sequence_layout(model, mesh_shape[2], sharding.context, sharding.sequence_parallel)
    return mesh_shape


def resolve_config(cfg: Any, n_devices: int | None = None) -> RunSpec:
    """Validate the whole config and derive the run's numbers (raises ConfigError)."""
    raw = _raw_groups(cfg)
    data = DataConfig.from_mapping(raw["data"])
    check_paths(data)
    model = ModelConfig.from_mapping(raw["model"])
    optim = OptimConfig.from_mapping(raw["optim"])
    train = TrainConfig.from_mapping(raw["train"])
    model = _check_vocab(model, data)
    check_corpora(data, model.vocab_size)
    evalc = EvalConfig.from_mapping(raw.get("eval") or {})
    check_tasks(evalc, model.seq_len, byte_level=data.resolved_source() not in ("tokens", "prepared"))
    length = _run_length(train, model)
    check_unique_tokens(data, train.batch_size, model.seq_len)
    _check_cadences(train, length.steps)
    check_profile_steps(train.profile_steps, length.steps)
    tracker = TrackerConfig.from_mapping(raw.get("tracker") or {})
    warmup_steps = _warmup_steps(optim, length)
    eval_batches = max(1, math.ceil(train.eval_tokens / (length.micro_batch_size * model.seq_len)))
    ceiling = _loss_ceiling(train, model)
    sharding = ShardingConfig.from_mapping(raw["sharding"])
    mesh_shape = _mesh_shape(sharding, model, length.micro_batch_size, n_devices)
    pipeline = _pipeline(sharding, train, model, length.micro_batch_size, mesh_shape)
    return RunSpec(
        model=model,
        train=train,
        optim=optim,
        data=data,
        eval=evalc,
        tracker=tracker,
        mesh_shape=mesh_shape,
        distributed=dict(raw.get("distributed") or {}),
        steps=length.steps,
        tokens_per_step=length.tokens_per_step,
        total_tokens=length.total_tokens,
        micro_batch_size=length.micro_batch_size,
        n_micro=length.n_micro,
        warmup_steps=warmup_steps,
        eval_batch_size=length.micro_batch_size,
        eval_batches=eval_batches,
        loss_ceiling=ceiling,
        n_params=param_count(model),
        n_params_non_embedding=non_embedding_param_count(model),
        flops_per_token=flops_per_token(model),
        fingerprint=config_fingerprint(raw),
        fingerprint_fields=fingerprint_fields(raw),
        raw=raw,
        pipeline=pipeline,
        context=sharding.context,
        sequence_parallel=sharding.sequence_parallel,
        expert=sharding.expert,
        n_params_active=None if model.moe is None else active_param_count(model),
    )
