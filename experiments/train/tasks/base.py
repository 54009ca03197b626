"""What every downstream task shares: the `eval.*` config, the example set a task builds, and the
registry that maps a task name to its builder. NumPy only (no JAX): the config validator
imports it before anything is compiled.

A task turns the held-out split into a `TaskSet`: token rows of the model's window
(`seq_len + 1`, like an eval batch) and a mask over the positions whose tokens are scored. The
trainer scores every row with one jitted function (experiments/train/tasks/scoring.py) and
reduces the rows to two numbers per task:

* loss: bits per byte of the correct answer, -log2 p(answer | context) / len(answer), averaged
  over examples (tokens are bytes for every shipped task, so bits per token = bits per byte);
* accuracy: `choice` tasks (k candidate rows per example) pick the candidate with the highest
  log-likelihood per byte; `exact` tasks count an example right when greedy decoding reproduces
  the answer byte for byte.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from models.base.configs import check_int, config_from_mapping
from models.base.errors import ConfigError

KINDS = ("choice", "exact")
MAX_EXAMPLES = 512  # per task: the eval must stay a small fraction of a CPU run
MAX_SHOTS = 64  # demonstrations per few-shot query (more would not fit any window in use)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """`eval.*`: downstream tasks measured at every eval step (in metrics.jsonl) and in
    summary.json's `task_metrics` (final eval)."""

    tasks: list[str] = dataclasses.field(default_factory=list)  # task names (see `task_names()`)
    examples: int = 32  # examples per task, from the held-out split
    shots: int = 3  # demonstrations before each few-shot probe query (fewer if the window is short)
    seed: int = 0  # which held-out examples (fixed for every run seed, so runs compare)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "EvalConfig":
        return config_from_mapping(cls, m, "eval")

    def validate(self) -> None:
        if isinstance(self.tasks, str) or not isinstance(self.tasks, Sequence):
            raise ConfigError(f"eval.tasks must be a list of task names (got {self.tasks!r})")
        known = task_names()
        for name in self.tasks:
            if name not in _REGISTRY:
                raise ConfigError(f"eval.tasks: unknown task {name!r}; known: {', '.join(known)}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"eval.tasks lists a task twice ({list(self.tasks)})")
        for key, lo, hi in (("examples", 1, MAX_EXAMPLES), ("shots", 0, MAX_SHOTS), ("seed", 0, None)):
            check_int(f"eval.{key}", getattr(self, key), lo, hi)


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What a task builder may use: the held-out tokens and the model's window."""

    val: np.ndarray  # the validation split (1-D uint8 bytes)
    seq_len: int  # model.seq_len: rows hold seq_len + 1 tokens
    examples: int
    shots: int
    seed: int


@dataclasses.dataclass(frozen=True)
class TaskSet:
    """A task's examples as rows. Rows are example-major: example e owns rows
    e * n_choices ... e * n_choices + n_choices - 1, the correct one at `answer_E[e]`."""

    name: str
    kind: str  # choice | exact
    tokens_RxL1: np.ndarray  # int32 rows, context then candidate/answer then padding (0)
    mask_RxL: np.ndarray  # float32; 1 where tokens_RxL1[:, 1:] is a scored answer token
    n_choices: int
    answer_E: np.ndarray  # int index of the correct row within each example
    chance: float  # accuracy of a random guess (1 / n_choices, or 0 for exact match)
    detail: str = ""  # one phrase for the run's log (e.g. "32 x 4 choices")

    @property
    def n_examples(self) -> int:
        return int(self.answer_E.size)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A registered task: its builder and the shortest model window it fits."""

    name: str
    build: Callable[[BuildContext], TaskSet]
    min_seq_len: Callable[["EvalConfig"], int]
    description: str


_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task (its name must not contain '/', which separates metric-key parts)."""
    if "/" in spec.name or not spec.name:
        raise ValueError(f"task name {spec.name!r} must be non-empty and contain no '/'")
    _REGISTRY[spec.name] = spec
    return spec


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def get_task(name: str) -> TaskSpec:
    if name not in _REGISTRY:
        raise ConfigError(f"eval.tasks: unknown task {name!r}; known: {', '.join(task_names())}")
    return _REGISTRY[name]


def check_tasks(cfg: EvalConfig, seq_len: int, byte_level: bool) -> None:
    """The configured tasks fit this run: a byte-level corpus (every shipped task is bytes) and
    a model window long enough for each (ConfigError naming the key otherwise)."""
    if cfg.tasks and not byte_level:
        raise ConfigError(
            f"eval.tasks {list(cfg.tasks)} need a byte-level corpus (data.source stdlib or "
            "text), not pre-tokenized files; set eval.tasks=[]"
        )
    for name in cfg.tasks:
        need = get_task(name).min_seq_len(cfg)
        if seq_len < need:
            raise ConfigError(f"eval.tasks: {name} needs model.seq_len >= {need} (got {seq_len})")


def task_rng(seed: int, name: str) -> np.random.Generator:
    """The task's own stream: examples depend on (eval.seed, task name) only."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def assemble_rows(
    contexts: Sequence[bytes], answers: Sequence[bytes], seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens_RxL1, mask_RxL): row r = contexts[r] + answers[r], zero-padded to seq_len + 1;
    the mask marks the answer's tokens as prediction targets (position t of the mask scores
    token t + 1 of the row). Padding comes after the answer, so a causal model never sees it."""
    L1 = seq_len + 1
    tokens = np.zeros((len(contexts), L1), np.int32)
    mask = np.zeros((len(contexts), seq_len), np.float32)
    for r, (c, a) in enumerate(zip(contexts, answers)):
        if not c or not a or len(c) + len(a) > L1:
            raise ValueError(
                f"row {r}: context {len(c)} + answer {len(a)} bytes must fit {L1} and be non-empty"
            )
        tokens[r, : len(c)] = np.frombuffer(c, np.uint8)
        tokens[r, len(c) : len(c) + len(a)] = np.frombuffer(a, np.uint8)
        mask[r, len(c) - 1 : len(c) + len(a) - 1] = 1.0
    return tokens, mask
