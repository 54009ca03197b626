"""`run(cfg, run_dir) -> summary`: one RL fine-tuning run, resumable, in plain Python.

Order of work: completed-run check -> distributed init (experiments/loop_core.py: run_resumable)
-> validate everything -> mesh -> initial policy (rl.init or the cached warm start) -> restore
the latest checkpoint, or check the start and evaluate step 0 -> RL steps (loop_core.run_steps)
with their periodic actions: evaluation, preemption check, checkpoint -> atomic summary.json
(loop_core.write_summary).

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

import jax
import numpy as np

from experiments import loop_core
from experiments.loop_core import Diverged, StepState
from experiments.preemption import PreemptionGuard
from experiments.rl.config import RLConfig, fingerprint, fingerprint_fields
from experiments.rl.evaluate import Evaluator
from experiments.rl.flops import StepFlops, eval_flops, rl_step_flops
from experiments.rl.step import RLSetup, TaskShape, build_rl_setup
from experiments.rl.tasks import Task
from experiments.rl.warmstart import check_start, init_model_config, load_init, warm_start
from experiments.rundir import completed_summary
from experiments.train.checkpoint import Checkpointer
from experiments.train.config import OptimConfig
from experiments.train.metrics import MetricsLog
from experiments.train.optimizer import make_optimizer, make_schedule
from experiments.train.tracking import RL_NAMES, TrackerConfig, make_tracker
from models.base.configs import to_plain
from models.base.errors import ConfigError
from models.base.rundir import METRICS_FILE, REFERENCE_DIR, RunStatus, RunSummary, read_metrics
from models.config import ModelConfig
from models.flops import non_embedding_param_count, param_count
from sharding.layouts import resolve_axis_sizes
from sharding.mesh import make_mesh

RL_PASSES = ("sample", "train", "reference", "old_policy")  # the passes that make up C
STEP_METRICS = ("train_reward", "zero_var_frac", "entropy", "clip_frac", "loss", "grad_norm", "kl_train")


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
    tracker: TrackerConfig = dataclasses.field(default_factory=TrackerConfig)


def _configs(raw: dict[str, Any]) -> tuple[RLConfig, Any, ModelConfig, dict[str, Any]]:
    """(rl, optim, model configs, the fingerprint fields: summary.json `config_fields`) of a raw
    config, without devices. Raises ConfigError naming the bad key."""
    rl = RLConfig.from_mapping(raw.get("rl") or {})
    optim = OptimConfig.from_mapping(raw.get("optim") or {})
    task = Task(rl.task)
    if rl.init:
        model, _, _ = init_model_config(rl.init)
    else:
        model = ModelConfig.from_mapping(raw.get("model") or {})
    # seq_len is only the attention context of the FLOP formula: the window the model sees.
    model = dataclasses.replace(model, seq_len=task.seq_len - 1)
    fields = fingerprint_fields(model.to_dict(), dataclasses.asdict(optim), to_plain(raw.get("rl") or {}))
    return rl, optim, model, fields


def resolve(raw: dict[str, Any], n_devices: int) -> RLSpec:
    """Validate the whole config (no compile). Raises ConfigError naming the bad key."""
    rl, optim, model, fields = _configs(raw)
    if model.vocab_size < 128:
        raise ConfigError(
            f"model.vocab_size={model.vocab_size}: RL tasks use ASCII byte tokens, "
            "need vocab_size >= 128 (256 for byte-level models)"
        )
    sh = raw.get("sharding") or {}
    if model.moe is not None or sh.get("expert", 1) != 1:
        raise ConfigError(
            "model.moe / sharding.expert: mixture-of-experts policies are not implemented for RL "
            "runs (experiments.train only)"
        )
    if sh.get("context", 1) != 1 or sh.get("sequence_parallel", False) or sh.get("pipeline", 1) != 1:
        raise ConfigError(
            "sharding.context / sharding.sequence_parallel / sharding.pipeline: not implemented "
            "yet for RL runs (experiments.train only)"
        )
    sizes = resolve_axis_sizes([sh.get("data", 1), sh.get("fsdp", 1), sh.get("tensor", 1)], n_devices)
    _check_batch_shards(rl, sizes[0] * sizes[1])
    return RLSpec(
        model,
        rl,
        optim,
        sizes,
        fingerprint(fields),
        fields,
        TrackerConfig.from_mapping(raw.get("tracker") or {}),
    )


def _check_batch_shards(rl: RLConfig, batch_shards: int) -> None:
    """Every batch of rows the run builds must split evenly over the batch shards."""
    for name, rows in (
        ("rl.prompts_per_step * rl.group_size", rl.prompts_per_step * rl.group_size),
        ("rl.task.eval_size * rl.eval_samples", rl.task.eval_size * rl.eval_samples),
        ("rl.start_check.probe_prompts * rl.group_size", rl.start_check.probe_prompts * rl.group_size),
        ("rl.warm_start.batch_size", rl.warm_start.batch_size),
        ("rl.warm_start.dev_size", rl.warm_start.dev_size),
    ):
        if rows % batch_shards:
            raise ConfigError(
                f"{name} = {rows} rows is not divisible by the {batch_shards} batch "
                "shards (sharding.data x sharding.fsdp)"
            )


@dataclasses.dataclass
class RLState:
    """What the run has done so far: the counters checkpoints store and the summary reports, kept
    current so that a failure at any point still writes a `failed` summary."""

    summary_base: RunSummary = dataclasses.field(default_factory=RunSummary)  # fields known so far
    wall_prev: float = 0.0  # wall time of earlier sessions (from the checkpoint)
    wall0: float = 0.0  # time.time() at which this run's wall clock reads 0
    prompts_seen: int = 0
    flops: dict[str, float] = dataclasses.field(
        default_factory=lambda: {k: 0.0 for k in (*RL_PASSES, "eval")}
    )
    start_check: dict[str, float] | None = None
    start_pass_rate: float | None = None
    last_eval: dict[str, Any] | None = None
    step_metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # since last eval
    t_last_print: float = 0.0

    def wall(self) -> float:
        return time.time() - self.wall0


@dataclasses.dataclass
class RLLoop:
    """The compiled run and its moving parts: what the step loop advances."""

    spec: RLSpec
    task: Task
    setup: RLSetup
    state: RLState
    ckpt: Checkpointer
    metrics: MetricsLog
    evaluator: Evaluator
    step_flops: StepFlops
    eval_flops: float
    params: Any = None
    opt_state: Any = None
    ref_params: Any = None
    init_info: dict[str, Any] | None = None
    start: int = 0
    resumed: bool = False
    guard: PreemptionGuard | None = None  # preemption signals: stop at a step boundary
    stopped_at: int | None = None  # the step a preempted run saved and stopped after


def run(cfg: Any, run_dir: Path) -> RunSummary:
    """Run (or resume, or skip if completed) the RL run described by `cfg` in `run_dir`; a
    completed run of another config there is a ConfigError (the trainer's check)."""
    run_dir, state = Path(run_dir), RLState()
    return loop_core.run_resumable(
        run_dir,
        cfg,
        lambda raw, guard, t_start: _run(raw, run_dir, state, guard),
        completed=lambda: completed_summary(run_dir, lambda: _configs(to_plain(cfg))[3]),
        done_line=lambda done: (
            f"RL run in {run_dir} already completed (final pass rate {done.final_pass_rate}); nothing to do"
        ),
        known_so_far=lambda: (state.summary_base, state.wall_prev),
        vote_lag=0,  # the RL step is synchronous: the stop vote is read at once
    )


def _run(raw: dict[str, Any], run_dir: Path, state: RLState, guard: PreemptionGuard) -> RunSummary:
    """Validate, build, start (restore or initial policy), train, summarise."""
    spec = resolve(raw, len(jax.devices()))
    loop = _build_loop(spec, run_dir, state)
    loop.guard = guard
    _start(loop, run_dir)
    state.summary_base = state.summary_base.replace(init=loop.init_info, start_check=state.start_check)
    _log_header(loop)
    state.wall0 = time.time() - state.wall_prev
    if loop.start == 0:
        row0 = _evaluate(loop, 0)
        state.start_pass_rate = row0["pass_rate"]
        _log(f"step 0: held-out pass@1 {row0['pass_rate']:.3f} ± {row0['pass_rate_stderr']:.3f}")
    status = _rl_steps(loop)
    return _write_summary(loop, run_dir, status)


def _build_loop(spec: RLSpec, run_dir: Path, state: RLState) -> RLLoop:
    """FLOP counts, mesh, compiled RL functions, checkpointers, metrics log and evaluator."""
    rl, task = spec.rl, Task(spec.rl.task)
    window = task.seq_len - 1
    sf = rl_step_flops(
        spec.model,
        window,
        task.completion_len,
        rl.prompts_per_step,
        rl.group_size,
        rl.algo.epochs,
        rl.algo.kl_beta,
    )
    ef = eval_flops(spec.model, window, task.completion_len, rl.task.eval_size, rl.eval_samples)
    state.summary_base = _summary_base(spec, sf, ef)
    tx = make_optimizer(spec.optim, make_schedule(spec.optim, rl.steps, 0), spec.model)
    setup = build_rl_setup(
        spec.model,
        tx,
        make_mesh(spec.mesh_sizes),
        TaskShape(task.prompt_len, task.completion_len),
        rl.algo,
        rl.group_size,
        rl.temperature,
    )
    evaluator = Evaluator(
        setup.rollout, task.eval_set(), rl.eval_samples, task.difficulty_names, seed=rl.seed + 1
    )
    return RLLoop(
        spec=spec,
        task=task,
        setup=setup,
        state=state,
        ckpt=Checkpointer(run_dir, keep=rl.keep_checkpoints),
        metrics=MetricsLog(
            run_dir / METRICS_FILE,
            tracker=make_tracker(spec.tracker, run_dir, RL_NAMES, spec.fields, jax.process_index() == 0),
        ),
        evaluator=evaluator,
        step_flops=sf,
        eval_flops=ef,
    )


def _summary_base(spec: RLSpec, sf: StepFlops, ef: float) -> RunSummary:
    """summary.json's fields known before the run starts (each one written, null included)."""
    rl, model = spec.rl, spec.model
    return RunSummary.of(
        status=None,
        n_params=param_count(model),
        n_params_non_embedding=non_embedding_param_count(model),
        model=model.to_dict(),
        task=dataclasses.asdict(rl.task),
        algo=dataclasses.asdict(rl.algo),
        steps=rl.steps,
        prompts_per_step=rl.prompts_per_step,
        group_size=rl.group_size,
        seed=rl.seed,
        prompts_per_pass=rl.task.train_pool or None,
        flops_per_step=dataclasses.asdict(sf) | {"total": sf.total},
        flops_per_eval=ef,
        config_fingerprint=spec.fingerprint,
        config_fields=spec.fields,
        mesh={
            "data": spec.mesh_sizes[0],
            "fsdp": spec.mesh_sizes[1],
            "tensor": spec.mesh_sizes[2],
            "devices": int(np.prod(spec.mesh_sizes)),
            "platform": jax.devices()[0].platform,
        },
    )


def _start(loop: RLLoop, run_dir: Path) -> None:
    """Policy, optimizer state and reference: the latest checkpoint, or the initial policy."""
    ref_ckpt = Checkpointer(run_dir / REFERENCE_DIR, keep=1)
    try:
        if not _restore(loop, ref_ckpt, run_dir):
            _init_policy(loop, ref_ckpt)
    finally:
        ref_ckpt.close()


def _restore(loop: RLLoop, ref_ckpt: Checkpointer, run_dir: Path) -> bool:
    """Resume from the newest readable checkpoint of this same config (unreadable newer ones are
    set aside with a warning; another config's is refused); False when there is none."""
    state, setup = loop.state, loop.setup

    def same_config(meta: dict[str, Any]) -> None:
        if meta.get("config_fingerprint") != loop.spec.fingerprint:
            raise ConfigError(
                f"{run_dir} holds checkpoints of another RL config; choose another hydra.run.dir"
            )

    got = loop.ckpt.restore_newest(setup.abstract_params(), setup.abstract_opt_state(), check=same_config)
    if got is None:
        return False
    loop.params, loop.opt_state, meta = got.params, got.opt_state, got.meta
    loop.ref_params, _, _ = ref_ckpt.restore(0, setup.abstract_params(), {})
    loop.start, loop.init_info, loop.resumed = int(meta["step"]), meta["init"], True
    state.flops.update(meta["flops"])
    state.wall_prev, state.prompts_seen = float(meta["wall_time_s"]), int(meta["prompts_seen"])
    state.start_check, state.start_pass_rate = meta.get("start_check"), meta.get("start_pass_rate")
    loop.metrics.truncate_after(loop.start)
    if (run_dir / METRICS_FILE).exists():
        rows = read_metrics(run_dir / METRICS_FILE)
        state.last_eval = rows[-1] if rows else None
    _log(f"resuming RL from checkpoint at step {loop.start}/{loop.spec.rl.steps}")
    return True


def _init_policy(loop: RLLoop, ref_ckpt: Checkpointer) -> None:
    """The initial policy (rl.init or the cached warm start), checked strong enough for RL; it
    is also the KL reference, saved in the run directory."""
    spec, setup = loop.spec, loop.setup
    if spec.rl.init:
        ref_params, loop.init_info = load_init(spec.rl.init, setup)
    else:
        ref_params, loop.init_info = warm_start(spec.model, loop.task, spec.rl, setup, log=_log)
    loop.ref_params = setup.place(ref_params)
    loop.state.start_check = check_start(loop.ref_params, loop.task, spec.rl, setup)
    loop.params = jax.tree.map(lambda x: x.copy(), loop.ref_params)
    loop.opt_state = setup.init_opt(loop.params)
    ref_ckpt.save(0, loop.ref_params, {}, {"model": spec.model.to_dict(), "init": loop.init_info})
    loop.metrics.reset()


def _log_header(loop: RLLoop) -> None:
    """One line: model, task, run length, algorithm and FLOPs per step."""
    rl, task = loop.spec.rl, loop.task
    _log(
        f"RL: {loop.state.summary_base.n_params:,} params | task {rl.task.name} (prompt "
        f"{task.prompt_len} + completion {task.completion_len} tokens) | {rl.steps} steps x "
        f"{rl.prompts_per_step} prompts x {rl.group_size} samples | algo {rl.algo.name} "
        f"({rl.algo.advantage} adv, {rl.algo.loss}, {rl.algo.aggregation} agg, "
        f"beta={rl.algo.kl_beta:g}, epochs={rl.algo.epochs}) | {loop.step_flops.total:.3g} FLOPs/step"
    )


def _evaluate(loop: RLLoop, step: int) -> dict[str, Any]:
    """Held-out evaluation after `step` steps: one metrics.jsonl row with the compute so far and
    the means of the step metrics since the previous evaluation."""
    state = loop.state
    res = loop.evaluator(loop.params, loop.ref_params, step)
    state.flops["eval"] += loop.eval_flops
    f = state.flops
    row = {
        "step": step,
        "prompts_seen": state.prompts_seen,
        "flops_rl": sum(f[k] for k in RL_PASSES),
        "flops_sample": f["sample"],
        "flops_train": f["train"],
        "flops_reference": f["reference"],
        "flops_old_policy": f["old_policy"],
        "flops_eval": f["eval"],
        "wall_s": state.wall(),
        **res.as_metrics(),
    }
    for k in STEP_METRICS:
        v = state.step_metrics.get(k)
        row[k] = float(np.mean(v)) if v else None
    state.step_metrics.clear()
    loop.metrics.write(row)
    loop.metrics.flush()
    state.last_eval = row
    return row


def _checkpoint(loop: RLLoop, step: int) -> None:
    """Save (params, opt_state) of `step` with the counters a resumed run continues from."""
    state, spec = loop.state, loop.spec
    loop.ckpt.save(
        step,
        loop.params,
        loop.opt_state,
        {
            "step": step,
            "prompts_seen": state.prompts_seen,
            "flops": dict(state.flops),
            "wall_time_s": state.wall(),
            "config_fingerprint": spec.fingerprint,
            "init": loop.init_info,
            "model": spec.model.to_dict(),
            "start_check": state.start_check,
            "start_pass_rate": state.start_pass_rate,
        },
    )


def _log_progress(loop: RLLoop, row: dict[str, Any], force: bool) -> None:
    """The console line of an evaluation, at most every `rl.progress_every_s` (and the last)."""
    state, rl = loop.state, loop.spec.rl
    if time.time() - state.t_last_print < rl.progress_every_s and not force:
        return
    state.t_last_print = time.time()
    _log(
        f"step {row['step']}/{rl.steps} | pass@1 {row['pass_rate']:.3f} ± "
        f"{row['pass_rate_stderr']:.3f} | train reward {row['train_reward']:.3f} "
        f"| zero-var {row['zero_var_frac']:.2f} | KL {row['kl']:.3f} | entropy "
        f"{row['entropy']:.3f} | C {row['flops_rl']:.3g} | {row['wall_s']:.0f}s"
    )


def _rl_step(loop: RLLoop, i: int, key: jax.Array) -> dict[str, float]:
    """Step i (prompts and sampling key are functions of (seed, i)); its metrics as floats."""
    rl = loop.spec.rl
    b = loop.task.train_batch(rl.seed, i, rl.prompts_per_step)
    loop.params, loop.opt_state, m = loop.setup.rl_step(
        loop.params, loop.opt_state, loop.ref_params, b.prompts, b.answers, jax.random.fold_in(key, i)
    )
    return {k: float(v) for k, v in jax.device_get(m).items()}


class _RLSteps:
    """The RL step for `run_steps`: synchronous (its metrics are fetched at once), so nothing is
    in flight between steps."""

    def __init__(self, loop: RLLoop):
        self.loop = loop
        self.key = jax.random.PRNGKey(loop.spec.rl.seed)

    def step(self, i: int) -> None:
        """Step i; its metrics kept for the next evaluation row, its compute counted."""
        loop, state, rl = self.loop, self.loop.state, self.loop.spec.rl
        m = _rl_step(loop, i, self.key)
        for k, v in m.items():
            state.step_metrics.setdefault(k, []).append(v)
        if not math.isfinite(m["loss"]):
            raise Diverged(f"non-finite loss at step {i + 1}")
        for k in RL_PASSES:
            state.flops[k] += getattr(loop.step_flops, k)
        state.prompts_seen += rl.prompts_per_step

    def drain(self) -> None:
        pass

    def close(self) -> None:
        self.loop.metrics.close()
        self.loop.ckpt.close()

    # ---- periodic actions ----
    def evaluate(self, s: StepState) -> None:
        _log_progress(self.loop, _evaluate(self.loop, s.done), force=s.last)

    def checkpoint(self, s: StepState) -> None:
        _checkpoint(self.loop, s.done)
        if s.stop:
            self.loop.stopped_at = s.done


def _rl_steps(loop: RLLoop) -> RunStatus:
    """The steps from `loop.start` (experiments/loop_core.py: run_steps). Each step: on
    `rl.eval_every` steps the evaluation, then the preemption check, then on `rl.ckpt_every`
    steps the checkpoint (both after the last step; the checkpoint also after a preempted one)."""
    body, rl = _RLSteps(loop), loop.spec.rl
    hooks = loop_core.Hooks()
    hooks.add_hook(body.evaluate, every=rl.eval_every)
    hooks.add_hook(loop_core.preemption_check(loop.guard), every=1)
    hooks.add_hook(body.checkpoint, every=rl.ckpt_every, on_stop=True)
    return loop_core.run_steps(body, hooks, StepState(start=loop.start, total=rl.steps), loop.guard, _log)


def _write_summary(loop: RLLoop, run_dir: Path, status: RunStatus) -> RunSummary:
    """summary.json (one atomic write) from the last evaluation and the counters, and the
    closing console line."""
    state = loop.state
    last = state.last_eval or {}
    steps_done = loop.stopped_at if loop.stopped_at is not None else last.get("step", loop.start)
    summary = state.summary_base.replace(
        status=status,
        steps_done=steps_done,
        prompts_seen=state.prompts_seen,
        flops=last.get("flops_rl"),
        flops_split={k: state.flops[k] for k in RL_PASSES},
        flops_eval=state.flops["eval"],
        start_pass_rate=state.start_pass_rate,
        final_pass_rate=last.get("pass_rate"),
        final_pass_rate_stderr=last.get("pass_rate_stderr"),
        final_pass_rate_by_difficulty=last.get("pass_rate_by_difficulty"),
        final_kl=last.get("kl"),
        wall_time_s=state.wall(),
    )

    def line(s: RunSummary) -> str:
        return (
            f"{status}: final held-out pass@1 {s.final_pass_rate} after {s.steps_done} "
            f"steps, {s.flops or 0:.3g} RL FLOPs, {s.wall_time_s:.0f}s"
        )

    return loop_core.write_summary(
        run_dir, summary, loop.start if loop.resumed else None, loop.guard, line, loop.metrics
    )
