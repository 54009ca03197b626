"""The RL package's verifiable tasks (experiments/rl/tasks.py) as few-shot probes: `rl_add`,
`rl_copy`, `rl_parity`, `rl_reverse`, `rl_sort`.

Each example is `shots` solved items ("prompt" + "answer" + "\\n", drawn per query) followed by
a query prompt; the answer is the query's answer plus its EOS ("\\n"), scored by exact match
under greedy decoding (the RL reward on one sample) and by its bits per byte. Items come from
the RL task's fixed held-out prompt set (`Task.eval_set()`, 512 prompts); queries and
demonstrations are disjoint. Shots are cut to what the model's window holds. A model trained
only on Python source scores about 0 on most of them: they are probes of what pretraining
gives an RL run to start from.
"""

from __future__ import annotations

import numpy as np

from experiments.rl.tasks import TASKS, Task, TaskConfig
from experiments.train.tasks.base import (
    BuildContext,
    TaskSet,
    TaskSpec,
    assemble_rows,
    register_task,
    task_rng,
)
from models.base.errors import ConfigError

# The item-length ranges of the RL presets conf/rl/task/<name>.yaml (tests check they agree).
PROBE_LENGTHS = {"add": (1, 3), "copy": (2, 5), "parity": (2, 8), "reverse": (2, 5), "sort": (2, 5)}


def rl_task(name: str) -> Task:
    lo, hi = PROBE_LENGTHS[name]
    return Task(TaskConfig(name=name, min_len=lo, max_len=hi))


def item_len(task: Task) -> int:
    """Bytes of one solved item: prompt, answer and EOS (every item of a task has this length)."""
    return task.prompt_len + task.completion_len


def shots_that_fit(task: Task, seq_len: int, shots: int) -> int:
    return max(0, min(shots, (seq_len + 1 - item_len(task)) // item_len(task)))


def build_probe(name: str, ctx: BuildContext) -> TaskSet:
    task = rl_task(name)
    items = task.eval_set()
    shots = shots_that_fit(task, ctx.seq_len, ctx.shots)
    if ctx.examples + shots > len(items):
        raise ConfigError(
            f"eval.examples={ctx.examples} + {shots} shots exceed rl_{name}'s {len(items)} held-out prompts"
        )
    solved = [
        bytes(p.astype(np.uint8)) + bytes(a.astype(np.uint8)) for p, a in zip(items.prompts, items.answers)
    ]
    rng = task_rng(ctx.seed, f"rl_{name}")
    order = rng.permutation(len(items))
    queries, demo_pool = order[: ctx.examples], order[ctx.examples :]
    contexts, answers = [], []
    for q in queries:
        demos = b"".join(solved[i] for i in rng.choice(demo_pool, size=shots, replace=False))
        contexts.append(demos + bytes(items.prompts[q].astype(np.uint8)))
        answers.append(bytes(items.answers[q].astype(np.uint8)))
    tokens, mask = assemble_rows(contexts, answers, ctx.seq_len)
    return TaskSet(
        f"rl_{name}",
        "exact",
        tokens,
        mask,
        1,
        np.zeros(len(queries), np.int64),
        0.0,
        f"{len(queries)} x {shots}-shot",
    )


def _register(name: str) -> None:
    task = rl_task(name)
    register_task(
        TaskSpec(
            f"rl_{name}",
            lambda ctx: build_probe(name, ctx),
            lambda cfg: item_len(task) - 1,
            f"few-shot RL task {name!r} (greedy, exact match with EOS)",
        )
    )


for _name in TASKS:
    _register(_name)
