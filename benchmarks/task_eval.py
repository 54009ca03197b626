"""What `eval.tasks` costs a training run: per task, building its examples from the held-out
split, compiling the scorer, and one evaluation (median of `--repeats`), on a model preset with
freshly initialised parameters (the cost does not depend on the weights).

    python benchmarks/task_eval.py [--model tiny] [--tasks py_continuation,rl_add] [--repeats 5]

Each task is timed on its own (its own scorer compile, as a run with only that task would pay),
then all of them together (one compile: every task's rows share one batch shape).
"""

from __future__ import annotations

import argparse
import statistics
import time

from hydra import compose, initialize_config_dir

from experiments.train.config import resolve_config
from experiments.train.corpus import load_corpus
from experiments.train.optimizer import make_optimizer, make_schedule
from experiments.train.steps import build_train_setup
from experiments.train.tasks import EvalConfig, task_names
from experiments.train.tasks.scoring import TaskSuite, build_task_sets
from sharding.mesh import make_mesh

CONF = __import__("pathlib").Path(__file__).resolve().parents[1] / "conf"


def time_tasks(spec, ts, params, val, names: list[str], repeats: int) -> dict[str, float]:
    """Seconds to build, compile and evaluate (median) the tasks `names` as one suite."""
    t0 = time.perf_counter()
    sets = build_task_sets(
        EvalConfig(tasks=names, examples=spec.eval.examples, shots=spec.eval.shots, seed=spec.eval.seed),
        val,
        spec.model.seq_len,
    )
    suite = TaskSuite(sets, ts.graphdef, ts.param_shardings, ts.eval_batch_sharding, spec.eval_batch_size)
    t1 = time.perf_counter()
    suite.compile(params)
    t2 = time.perf_counter()
    evals = []
    for _ in range(repeats):
        t = time.perf_counter()
        suite.evaluate(params)
        evals.append(time.perf_counter() - t)
    return {
        "build_s": t1 - t0,
        "compile_s": t2 - t1,
        "eval_s": statistics.median(evals),
        "rows": suite.n_rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tasks", default=",".join(task_names()))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[f"model={args.model}"])
    spec = resolve_config(cfg)
    tx = make_optimizer(spec.optim, make_schedule(spec.optim, spec.steps, spec.warmup_steps))
    ts = build_train_setup(spec.model, tx, make_mesh(spec.mesh_shape), n_micro=spec.n_micro)
    params, _ = ts.init(0)
    val = load_corpus(spec.data).val
    names = args.tasks.split(",")
    print(
        f"model={args.model} (d={spec.model.d_model} L={spec.model.n_layers} T={spec.model.seq_len}), "
        f"{spec.eval.examples} examples per task, eval batch {spec.eval_batch_size}"
    )
    print(f"{'task':<16} {'rows':>5} {'build s':>8} {'compile s':>10} {'eval s':>8}")
    for group in [[n] for n in names] + ([names] if len(names) > 1 else []):
        r = time_tasks(spec, ts, params, val, group, args.repeats)
        label = group[0] if len(group) == 1 else "all together"
        print(f"{label:<16} {r['rows']:>5} {r['build_s']:>8.3f} {r['compile_s']:>10.3f} {r['eval_s']:>8.3f}")


if __name__ == "__main__":
    main()
