"""Scoring task rows with the model: one jitted function for every task, and the reduction of
row scores to per-task loss and accuracy.

Exact match without a decoding loop: greedy decoding reproduces an answer iff, at every answer
position, the argmax of the model's next-token distribution given the context and the answer's
earlier bytes is the answer's byte (by induction: while the greedy output agrees with the answer,
the model sees exactly the teacher-forced input). So one teacher-forced forward pass per row gives
both the answer's log-likelihood and whether greedy decoding gets it exactly right.

All tasks' rows go through the scorer in batches of one shape (`rows_per_call` x seq_len + 1),
so it compiles once per run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from experiments.train.tasks.base import BuildContext, EvalConfig, TaskSet, get_task
from models.axes import activation_sharding
from models.transformer import apply
from sharding.rules import activation_sharding_fn

ROWS_PER_CALL = 32  # rounded up to a multiple of the eval batch (which the mesh divides)


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """A task's score at one eval: loss (bits per byte of the correct answer, mean over
    examples), accuracy, and the accuracy of a random guess."""

    loss: float
    accuracy: float
    chance: float

    def as_dict(self) -> dict[str, float]:
        return {"loss": self.loss, "accuracy": self.accuracy, "chance": self.chance}


def row_scores(
    logits_BxLxV: jax.Array, tokens_BxL1: jax.Array, mask_BxL: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(sum of the answer tokens' log-probabilities (nats), greedy-exact flag) per row."""
    targets_BxL = tokens_BxL1[:, 1:]
    logits_BxLxV = logits_BxLxV.astype(jnp.float32)
    logz_BxL = jax.nn.logsumexp(logits_BxLxV, axis=-1)
    picked_BxL = jnp.take_along_axis(logits_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    logp_B = jnp.sum((picked_BxL - logz_BxL) * mask_BxL, axis=1)
    hit_BxL = jnp.argmax(logits_BxLxV, axis=-1) == targets_BxL
    exact_B = jnp.all(hit_BxL | (mask_BxL == 0), axis=1)
    return logp_B, exact_B


def make_scorer(graphdef: Any, param_shardings: Any, row_sharding: NamedSharding) -> Any:
    """jit(params, tokens_BxL1, mask_BxL) -> (logp_B, exact_B), sharded like the eval step."""
    mesh = row_sharding.mesh
    act_fn = activation_sharding_fn(mesh)

    def score(params: Any, tokens_BxL1: jax.Array, mask_BxL: jax.Array):
        with activation_sharding(act_fn):
            tokens_BxL1 = jax.lax.with_sharding_constraint(tokens_BxL1, row_sharding)
            logits_BxLxV = apply(graphdef, params, tokens_BxL1[:, :-1])
        return row_scores(logits_BxLxV, tokens_BxL1, mask_BxL)

    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.jit(
        score,
        in_shardings=(param_shardings, row_sharding, row_sharding),
        out_shardings=(replicated, replicated),
    )


def task_result(ts: TaskSet, logp_R: np.ndarray, exact_R: np.ndarray) -> TaskResult:
    """Reduce a task's row scores: bits per byte of each example's correct row (mean over
    examples); accuracy by highest log-likelihood per byte (choice) or greedy exact match."""
    n_bytes_R = ts.mask_RxL.sum(axis=1).astype(np.float64)
    rows_ExK = np.arange(ts.n_examples)[:, None] * ts.n_choices + np.arange(ts.n_choices)[None, :]
    true_E = rows_ExK[np.arange(ts.n_examples), ts.answer_E]
    bpb_E = -np.asarray(logp_R, np.float64)[true_E] / (math.log(2) * n_bytes_R[true_E])
    if ts.kind == "choice":
        per_byte_ExK = np.asarray(logp_R, np.float64)[rows_ExK] / n_bytes_R[rows_ExK]
        correct_E = np.argmax(per_byte_ExK, axis=1) == ts.answer_E
    else:
        correct_E = np.asarray(exact_R, bool)[true_E]
    return TaskResult(float(bpb_E.mean()), float(correct_E.mean()), ts.chance)


def build_task_sets(cfg: EvalConfig, val: np.ndarray, seq_len: int) -> list[TaskSet]:
    """The configured tasks' examples, from the held-out split `val`, in `cfg.tasks` order."""
    ctx = BuildContext(
        val=np.asarray(val), seq_len=seq_len, examples=cfg.examples, shots=cfg.shots, seed=cfg.seed
    )
    return [get_task(name).build(ctx) for name in cfg.tasks]


class TaskSuite:
    """The configured tasks of a run: their rows as device batches of one shape, the compiled
    scorer, and `evaluate(params) -> {task: TaskResult}`."""

    def __init__(
        self,
        task_sets: Sequence[TaskSet],
        graphdef: Any,
        param_shardings: Any,
        row_sharding: NamedSharding,
        batch_multiple: int,
    ):
        self.task_sets = list(task_sets)
        self.scorer = make_scorer(graphdef, param_shardings, row_sharding)
        rows = batch_multiple * math.ceil(ROWS_PER_CALL / batch_multiple)
        tokens = np.concatenate([t.tokens_RxL1 for t in self.task_sets])
        mask = np.concatenate([t.mask_RxL for t in self.task_sets])
        self.n_rows = tokens.shape[0]
        pad = -self.n_rows % rows
        tokens = np.pad(tokens, ((0, pad), (0, 0)))
        mask = np.pad(mask, ((0, pad), (0, 0)))
        self.batches = [
            (_put(tokens[i : i + rows], row_sharding), _put(mask[i : i + rows], row_sharding))
            for i in range(0, tokens.shape[0], rows)
        ]
        self.compiled: Any = None

    def compile(self, params: Any) -> None:
        """Compile the scorer ahead of time (its time then counts as compile time)."""
        self.compiled = self.scorer.lower(params, *self.batches[0]).compile()

    def evaluate(self, params: Any) -> dict[str, TaskResult]:
        fn = self.compiled if self.compiled is not None else self.scorer
        outs = [fn(params, t, m) for t, m in self.batches]
        logp_R = np.concatenate([np.asarray(o[0]) for o in outs])[: self.n_rows]
        exact_R = np.concatenate([np.asarray(o[1]) for o in outs])[: self.n_rows]
        results, start = {}, 0
        for ts in self.task_sets:
            stop = start + ts.tokens_RxL1.shape[0]
            results[ts.name] = task_result(ts, logp_R[start:stop], exact_R[start:stop])
            start = stop
        return results


def _put(host: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from host data every process holds; each process places its own rows."""
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def metrics_record(results: dict[str, TaskResult]) -> dict[str, float]:
    """metrics.jsonl fields: `task/<name>/loss`, `task/<name>/accuracy`."""
    out: dict[str, float] = {}
    for name, r in results.items():
        out[f"task/{name}/loss"] = r.loss
        out[f"task/{name}/accuracy"] = r.accuracy
    return out
