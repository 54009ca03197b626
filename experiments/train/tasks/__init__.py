"""Downstream tasks the trainer measures at every eval (`eval.tasks`): per-task loss (bits per
byte of the correct answer) and accuracy, into metrics.jsonl and summary.json's `task_metrics`.

`base` holds the config, the example-set type and the registry; `code` the Python-source tasks
(`py_continuation`, `py_identifier`); `probes` the RL tasks as few-shot probes (`rl_<name>`);
`scoring` (JAX) the one jitted scorer and the reduction to per-task metrics. Importing this
package does not import JAX. A new task: a builder `BuildContext -> TaskSet` registered with
`register_task(TaskSpec(name, build, min_seq_len, description))`.
"""

from experiments.train.tasks import code, probes  # noqa: F401 - registers the shipped tasks
from experiments.train.tasks.base import (
    BuildContext,
    EvalConfig,
    TaskSet,
    TaskSpec,
    get_task,
    register_task,
    task_names,
)

__all__ = ["BuildContext", "EvalConfig", "TaskSet", "TaskSpec", "get_task", "register_task", "task_names"]
