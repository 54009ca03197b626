"""Where an RL run's initial (and reference) policy comes from, and the check that it can learn.

* `rl.init=PATH`: a training-core run directory (`python -m experiments.train`), an RL run
  directory, or one checkpoint directory `<run>/checkpoints/<step>`; loaded with the training
  core's `experiments.train.checkpoint.load_params`.
* otherwise a supervised warm start on the task format (`rl.warm_start.*`): trained until the
  sampled pass rate on a dev set reaches the target, then cached (Orbax, via the training core's
  `Checkpointer`) under `rl.warm_start.cache_dir/<task>-<hash>` so every later run — other seeds,
  other recipes, a resumed run — starts from the very same policy. A file lock makes concurrent
  runs train it once.
* `start_check`: RL learns only from groups whose completions disagree. Before step 0 the policy
  is probed with G samples on `probe_prompts` training prompts; if its pass rate is below
  `min_pass_rate`, or more than `max_zero_var_frac` of the groups have zero reward variance, the
  run refuses to start with a message saying what to change.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

import jax
import numpy as np

from experiments.rl.config import RLConfig
from experiments.rl.evaluate import Evaluator
from experiments.rl.step import RLSetup, build_sft_step
from experiments.rl.tasks import Task
from experiments.train.checkpoint import Checkpointer, load_params
from experiments.train.optimizer import OptimConfig, make_optimizer, make_schedule
from models.base.errors import ConfigError
from models.base.fingerprint import fingerprint
from models.base.jsonio import read_json, write_json_atomic
from models.base.portable import lock_file
from models.base.rundir import CHECKPOINTS_DIR
from models.config import ModelConfig
from models.transformer import init_params

WARM_VERSION = 1  # bump when the warm-start procedure changes (invalidates the cache)


class StartTooWeak(ConfigError):
    """The initial policy gives RL (almost) no learning signal."""


def init_model_config(init: str) -> tuple[ModelConfig, pathlib.Path, int | None]:
    """Model config stored with the checkpoint that `rl.init` points to."""
    run_dir, step = _resolve_init(init)
    ck = Checkpointer(run_dir)
    try:
        step = ck.latest_step() if step is None else step
        if step is None:
            raise ConfigError(f"rl.init={init}: no checkpoint under {run_dir / 'checkpoints'}")
        meta = ck.read_meta(step)
    finally:
        ck.close()
    if "model" not in meta:
        raise ConfigError(f"rl.init={init}: checkpoint has no model config in its metadata")
    return ModelConfig(**meta["model"]), run_dir, step


def _resolve_init(init: str) -> tuple[pathlib.Path, int | None]:
    p = pathlib.Path(init).expanduser().resolve()
    if not p.exists():
        raise ConfigError(f"rl.init={init}: no such directory")
    if p.parent.name == CHECKPOINTS_DIR and p.name.isdigit():
        return p.parent.parent, int(p.name)
    if (p / CHECKPOINTS_DIR).is_dir():
        return p, None
    raise ConfigError(
        f"rl.init={init}: expected a run directory with checkpoints/ or a checkpoints/<step> directory"
    )


def load_init(init: str, setup: RLSetup) -> tuple[Any, dict[str, Any]]:
    run_dir, step = _resolve_init(init)
    _, _, params = load_params(run_dir, step)
    return setup.place(params), {"source": "init", "path": str(run_dir), "step": step}


# ---- warm start ----------------------------------------------------------------------------


def _cache_key(model: ModelConfig, task: Task, cfg: RLConfig) -> str:
    ws = dict(vars(cfg.warm_start))
    ws.pop("cache_dir")
    blob = {
        "v": WARM_VERSION,
        "model": model.to_dict(),
        "task": vars(task.cfg),
        "ws": ws,
        "temperature": cfg.temperature,
    }
    return fingerprint(blob)


def warm_start(
    model: ModelConfig, task: Task, cfg: RLConfig, setup: RLSetup, log=print
) -> tuple[Any, dict[str, Any]]:
    """Cached supervised warm start (trains it on a cache miss). Returns (params, info)."""
    ws = cfg.warm_start
    root = pathlib.Path(os.path.expandvars(ws.cache_dir)).expanduser()
    path = root / f"{task.cfg.name}-{_cache_key(model, task, cfg)}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{path.name}.lock", "w") as lockf:
        lock_file(lockf)  # flock, or msvcrt on Windows; released when the file closes
        info = read_json(path / "warm_start.json")
        if info is not None:
            ck = Checkpointer(path)
            try:
                params, _, _ = ck.restore(int(info["steps"]), setup.abstract_params(), {})
            finally:
                ck.close()
            log(
                f"warm start: reusing {path} (pass rate {info['pass_rate']:.3f} after "
                f"{info['steps']} supervised steps)"
            )
            return params, dict(info, source="warm_start", path=str(path))
        params, info = _train(model, task, cfg, setup, log)
        ck = Checkpointer(path)
        try:
            ck.save(int(info["steps"]), params, {}, {"model": model.to_dict(), **info})
        finally:
            ck.close()
        write_json_atomic(path / "warm_start.json", info)
        return params, dict(info, source="warm_start", path=str(path))


def _train(model: ModelConfig, task: Task, cfg: RLConfig, setup: RLSetup, log):
    ws = cfg.warm_start
    ocfg = OptimConfig(lr=ws.lr, schedule="constant", warmup_tokens=0.0, weight_decay=0.0)
    tx = make_optimizer(ocfg, make_schedule(ocfg, ws.max_steps, ws.warmup_steps), model)
    init_opt, step = build_sft_step(setup, tx, task.prompt_len)
    params = setup.place(init_params(model, ws.seed)[1])
    opt_state = init_opt(params)
    dev = task.draw(np.random.default_rng([task.cfg.eval_seed, 99]), ws.dev_size)
    evaluate = Evaluator(setup.rollout, dev, 1, task.difficulty_names, seed=ws.seed + 5)
    t0 = time.time()
    rate, loss, n = 0.0, float("nan"), 0
    for n in range(1, ws.max_steps + 1):
        b = task.train_batch(10_000 + ws.seed, n, ws.batch_size)  # a stream RL never sees
        params, opt_state, loss = step(params, opt_state, b.prompts, b.answers)
        if n % ws.check_every == 0 or n == ws.max_steps:
            rate = evaluate(params, params, n).pass_rate
            log(
                f"warm start: step {n}, loss {float(loss):.3f}, dev pass rate {rate:.3f} "
                f"(target {ws.target_pass_rate:g})"
            )
            if rate >= ws.target_pass_rate:
                break
    info = {
        "steps": n,
        "pass_rate": rate,
        "loss": float(loss),
        "wall_s": time.time() - t0,
        "target_pass_rate": ws.target_pass_rate,
        "reached": rate >= ws.target_pass_rate,
    }
    return jax.block_until_ready(params), info


# ---- is the start strong enough? ---------------------------------------------------------------


def check_start(params: Any, task: Task, cfg: RLConfig, setup: RLSetup) -> dict[str, float]:
    """Probe G samples on training-distribution prompts; raise StartTooWeak if RL would stall."""
    sc = cfg.start_check
    probe = task.draw(np.random.default_rng([cfg.seed, 17]), sc.probe_prompts)
    res = Evaluator(setup.rollout, probe, cfg.group_size, task.difficulty_names, seed=cfg.seed + 3)(
        params, params, 0
    )
    out = {"pass_rate": res.pass_rate, "zero_var_frac": res.zero_var_frac}
    if res.pass_rate < sc.min_pass_rate or res.zero_var_frac > sc.max_zero_var_frac:
        raise StartTooWeak(
            f"start too weak for RL: pass rate {res.pass_rate:.3f} (min "
            f"{sc.min_pass_rate:g}), {100 * res.zero_var_frac:.0f}% of groups of "
            f"{cfg.group_size} have zero reward variance (max "
            f"{100 * sc.max_zero_var_frac:.0f}%); raise rl.warm_start.target_pass_rate, "
            "use a stronger rl.init, or a larger rl.group_size"
        )
    return out
