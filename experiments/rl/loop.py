"""`run(cfg, run_dir) -> summary`: one RL fine-tuning run, resumable, in plain Python.

Order of work: completed-run check -> validate everything -> mesh -> initial policy (rl.init or
the cached warm start) -> restore the latest checkpoint, or check the start and evaluate step 0
-> RL steps with evaluations / checkpoints -> atomic summary.json.

Run directory (same conventions as training): Hydra's `.hydra/`, `metrics.jsonl` (one object per
evaluation, step 0 included), `checkpoints/<step>` (Orbax: params, optimizer state, counters),
`reference/` (the initial policy, so a resumed run has its KL reference even if the warm-start
cache is gone), and `summary.json` (status, sizes, compute, start / final pass rate, ...).
Prompts of step i and the sampling key of step i are pure functions of (seed, i), so a resumed
run continues exactly where an uninterrupted one would be.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from experiments.rl.config import RLConfig, fingerprint, fingerprint_fields
from experiments.rundir import write_failed_summary
from models.base.configs import to_plain
from models.base.jsonio import read_json, write_json_atomic
from models.config import ModelConfig
from models.base.errors import ConfigError


def _log(msg: str) -> None:
    print(msg, flush=True)


@dataclasses.dataclass(frozen=True)
class RLSpec:
    model: ModelConfig
    rl: RLConfig
    optim: Any
    mesh_sizes: tuple[int, ...]
    fingerprint: str
    fields: dict[str, Any]


def resolve(raw: dict[str, Any], n_devices: int) -> RLSpec:
    """Validate the whole config (no compile). Raises ConfigError naming the bad key."""
    from experiments.train.optimizer import OptimConfig
    from experiments.rl.tasks import Task
    from experiments.rl.warmstart import init_model_config
    from sharding.mesh import resolve_axis_sizes

    rl = RLConfig.from_mapping(raw.get("rl") or {})
    optim = OptimConfig.from_mapping(raw.get("optim") or {})
    task = Task(rl.task)
    if rl.init:
        model, _, _ = init_model_config(rl.init)
    else:
        model = ModelConfig.from_mapping(raw.get("model") or {})
    # seq_len is only the attention context of the FLOP formula: the window the model sees.
    model = dataclasses.replace(model, seq_len=task.seq_len - 1)
    if model.vocab_size < 128:
        raise ConfigError(f"model.vocab_size={model.vocab_size}: RL tasks use ASCII byte tokens, "
                          "need vocab_size >= 128 (256 for byte-level models)")
    sh = raw.get("sharding") or {}
    sizes = resolve_axis_sizes([sh.get("data", 1), sh.get("fsdp", 1), sh.get("tensor", 1)], n_devices)
    batch_shards = sizes[0] * sizes[1]
    for name, rows in (("rl.prompts_per_step * rl.group_size", rl.prompts_per_step * rl.group_size),
                       ("rl.task.eval_size * rl.eval_samples", rl.task.eval_size * rl.eval_samples),
                       ("rl.start_check.probe_prompts * rl.group_size",
                        rl.start_check.probe_prompts * rl.group_size),
                       ("rl.warm_start.batch_size", rl.warm_start.batch_size),
                       ("rl.warm_start.dev_size", rl.warm_start.dev_size)):
        if rows % batch_shards:
            raise ConfigError(f"{name} = {rows} rows is not divisible by the {batch_shards} batch "
                              "shards (sharding.data x sharding.fsdp)")
    fields = fingerprint_fields(model.to_dict(), dataclasses.asdict(optim),
                                to_plain(raw.get("rl") or {}))
    return RLSpec(model, rl, optim, sizes, fingerprint(fields), fields)


def run(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Run (or resume, or skip if completed) the RL run described by `cfg` in `run_dir`."""
    run_dir = Path(run_dir)
    t_start = time.time()
    done = read_json(run_dir / "summary.json")
    if done and done.get("status") == "completed":
        _log(f"RL run in {run_dir} already completed (final pass rate "
             f"{done.get('final_pass_rate')}); nothing to do")
        return dict(done, already_completed=True)
    from experiments.train.loop import quiet_library_logs
    from sharding import distributed

    quiet_library_logs()
    raw = to_plain(cfg)
    state: dict[str, Any] = {}
    try:
        distributed.initialize((raw or {}).get("distributed"))
        return _run(raw, run_dir, t_start, state)
    except Exception as e:
        write_failed_summary(run_dir, state.get("summary_base", {}), e,
                             state.get("wall_prev", 0.0) + time.time() - t_start)
        raise


def _run(raw: dict[str, Any], run_dir: Path, t_start: float, state: dict[str, Any]) -> dict[str, Any]:
    import jax
    import numpy as np

    from experiments.train.checkpoint import Checkpointer
    from experiments.train.metrics import MetricsLog
    from experiments.train.optimizer import make_optimizer, make_schedule
    from experiments.rl.evaluate import Evaluator
    from experiments.rl.flops import eval_flops, rl_step_flops
    from experiments.rl.step import TaskShape, build_rl_setup
    from experiments.rl.tasks import Task
    from experiments.rl.warmstart import check_start, load_init, warm_start
    from models.flops import non_embedding_param_count, param_count
    from sharding.mesh import make_mesh

    spec = resolve(raw, len(jax.devices()))
    rl, model = spec.rl, spec.model
    task = Task(rl.task)
    window = task.seq_len - 1
    sf = rl_step_flops(model, window, task.completion_len, rl.prompts_per_step, rl.group_size,
                       rl.algo.epochs, rl.algo.kl_beta)
    ef = eval_flops(model, window, task.completion_len, rl.task.eval_size, rl.eval_samples)
    mesh = make_mesh(spec.mesh_sizes)
    base = {"status": None, "n_params": param_count(model),
            "n_params_non_embedding": non_embedding_param_count(model), "model": model.to_dict(),
            "task": dataclasses.asdict(rl.task), "algo": dataclasses.asdict(rl.algo),
            "steps": rl.steps, "prompts_per_step": rl.prompts_per_step,
            "group_size": rl.group_size, "seed": rl.seed,
            "prompts_per_pass": rl.task.train_pool or None,
            "flops_per_step": dataclasses.asdict(sf) | {"total": sf.total},
            "flops_per_eval": ef, "config_fingerprint": spec.fingerprint,
            "config_fields": spec.fields,
            "mesh": {"data": spec.mesh_sizes[0], "fsdp": spec.mesh_sizes[1],
                     "tensor": spec.mesh_sizes[2], "devices": int(np.prod(spec.mesh_sizes)),
                     "platform": jax.devices()[0].platform}}
    state["summary_base"] = base

    schedule = make_schedule(spec.optim, rl.steps, 0)
    tx = make_optimizer(spec.optim, schedule)
    setup = build_rl_setup(model, tx, mesh, TaskShape(task.prompt_len, task.completion_len),
                           rl.algo, rl.group_size, rl.temperature)

    ckpt = Checkpointer(run_dir, keep=rl.keep_checkpoints)
    ref_ckpt = Checkpointer(run_dir / "reference", keep=1)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    evaluator = Evaluator(setup.rollout, task.eval_set(), rl.eval_samples, task.difficulty_names,
                          seed=rl.seed + 1)
    latest = ckpt.latest_step()
    counters = {"sample": 0.0, "train": 0.0, "reference": 0.0, "old_policy": 0.0, "eval": 0.0}
    if latest is not None:
        meta = ckpt.read_meta(latest)
        if meta.get("config_fingerprint") != spec.fingerprint:
            raise ConfigError(f"{run_dir} holds checkpoints of another RL config; choose another "
                              "hydra.run.dir")
        params, opt_state, meta = ckpt.restore(latest, setup.abstract_params(),
                                               setup.abstract_opt_state())
        ref_params, _, _ = ref_ckpt.restore(0, setup.abstract_params(), {})
        start, init_info = int(meta["step"]), meta["init"]
        counters.update(meta["flops"])
        state.update(wall_prev=float(meta["wall_time_s"]), prompts_seen=int(meta["prompts_seen"]),
                     start_check=meta.get("start_check"), start_pass_rate=meta.get("start_pass_rate"))
        metrics.truncate_after(start)
        if (run_dir / "metrics.jsonl").exists():
            from experiments.train.metrics import read_metrics
            rows = read_metrics(run_dir / "metrics.jsonl")
            state["last_eval"] = rows[-1] if rows else None
        _log(f"resuming RL from checkpoint at step {start}/{rl.steps}")
    else:
        if rl.init:
            ref_params, init_info = load_init(rl.init, setup)
        else:
            ref_params, init_info = warm_start(model, task, rl, setup, log=_log)
        ref_params = setup.place(ref_params)
        state["start_check"] = check_start(ref_params, task, rl, setup)
        params = jax.tree.map(lambda x: x.copy(), ref_params)
        opt_state = setup.init_opt(params)
        ref_ckpt.save(0, ref_params, {}, {"model": model.to_dict(), "init": init_info})
        start = 0
        state.update(wall_prev=0.0, prompts_seen=0)
        metrics.reset()
    ref_ckpt.close()
    base.update(init=init_info, start_check=state.get("start_check"))
    _log(f"RL: {base['n_params']:,} params | task {rl.task.name} (prompt {task.prompt_len} + "
         f"completion {task.completion_len} tokens) | {rl.steps} steps x {rl.prompts_per_step} "
         f"prompts x {rl.group_size} samples | algo {rl.algo.name} ({rl.algo.advantage} adv, "
         f"{rl.algo.loss}, {rl.algo.aggregation} agg, beta={rl.algo.kl_beta:g}, "
         f"epochs={rl.algo.epochs}) | {sf.total:.3g} FLOPs/step")

    wall0 = time.time() - state["wall_prev"]
    acc: dict[str, list[float]] = {}

    def wall() -> float:
        return time.time() - wall0

    def evaluate(step: int) -> dict[str, Any]:
        res = evaluator(params, ref_params, step)
        counters["eval"] += ef
        row = {"step": step, "prompts_seen": state["prompts_seen"],
               "flops_rl": sum(counters[k] for k in ("sample", "train", "reference", "old_policy")),
               "flops_sample": counters["sample"], "flops_train": counters["train"],
               "flops_reference": counters["reference"], "flops_old_policy": counters["old_policy"],
               "flops_eval": counters["eval"], "wall_s": wall(), **res.as_metrics()}
        for k in ("train_reward", "zero_var_frac", "entropy", "clip_frac", "loss", "grad_norm",
                  "kl_train"):
            v = acc.get(k)
            row[k] = float(np.mean(v)) if v else None
        acc.clear()
        metrics.write(row)
        metrics.flush()
        state["last_eval"] = row
        return row

    def save(step: int) -> None:
        ckpt.save(step, params, opt_state, {
            "step": step, "prompts_seen": state["prompts_seen"], "flops": dict(counters),
            "wall_time_s": wall(), "config_fingerprint": spec.fingerprint, "init": init_info,
            "model": model.to_dict(), "start_check": state.get("start_check"),
            "start_pass_rate": state.get("start_pass_rate")})

    if start == 0:
        row0 = evaluate(0)
        state["start_pass_rate"] = row0["pass_rate"]
        _log(f"step 0: held-out pass@1 {row0['pass_rate']:.3f} ± {row0['pass_rate_stderr']:.3f}")
    key = jax.random.PRNGKey(rl.seed)
    t_last_print = 0.0
    status = "completed"
    try:
        for i in range(start, rl.steps):
            b = task.train_batch(rl.seed, i, rl.prompts_per_step)
            params, opt_state, m = setup.rl_step(params, opt_state, ref_params, b.prompts,
                                                 b.answers, jax.random.fold_in(key, i))
            m = {k: float(v) for k, v in jax.device_get(m).items()}
            for k, v in m.items():
                acc.setdefault(k, []).append(v)
            if not math.isfinite(m["loss"]):
                status = "diverged"
                _log(f"diverged: non-finite loss at step {i + 1}")
                break
            for k in ("sample", "train", "reference", "old_policy"):
                counters[k] += getattr(sf, k)
            state["prompts_seen"] += rl.prompts_per_step
            n = i + 1
            if n % rl.eval_every == 0 or n == rl.steps:
                row = evaluate(n)
                if time.time() - t_last_print >= rl.progress_every_s or n == rl.steps:
                    t_last_print = time.time()
                    _log(f"step {n}/{rl.steps} | pass@1 {row['pass_rate']:.3f} ± "
                         f"{row['pass_rate_stderr']:.3f} | train reward {row['train_reward']:.3f} "
                         f"| zero-var {row['zero_var_frac']:.2f} | KL {row['kl']:.3f} | entropy "
                         f"{row['entropy']:.3f} | C {row['flops_rl']:.3g} | {row['wall_s']:.0f}s")
            if n == rl.steps or (rl.ckpt_every and n % rl.ckpt_every == 0):
                save(n)
    finally:
        metrics.close()
        ckpt.close()
    last = state.get("last_eval") or {}
    summary = dict(base, status=status, steps_done=last.get("step", start),
                   prompts_seen=state["prompts_seen"], flops=last.get("flops_rl"),
                   flops_split={k: counters[k] for k in ("sample", "train", "reference", "old_policy")},
                   flops_eval=counters["eval"], start_pass_rate=state.get("start_pass_rate"),
                   final_pass_rate=last.get("pass_rate"),
                   final_pass_rate_stderr=last.get("pass_rate_stderr"),
                   final_pass_rate_by_difficulty=last.get("pass_rate_by_difficulty"),
                   final_kl=last.get("kl"), wall_time_s=wall(),
                   resumed_from_step=start if latest is not None else None)
    write_json_atomic(run_dir / "summary.json", summary)
    _log(f"{status}: final held-out pass@1 {summary['final_pass_rate']} after {summary['steps_done']} "
         f"steps, {summary['flops'] or 0:.3g} RL FLOPs, {summary['wall_time_s']:.0f}s")
    return summary
