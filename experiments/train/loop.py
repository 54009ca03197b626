"""`run(cfg, run_dir) -> summary`: one training run, resumable, in plain Python.

Used by `python -m experiments.train` (Hydra) and callable from sweeps / notebooks:

    from experiments.train.loop import run
    summary = run(cfg, Path("runs/x"))      # cfg: DictConfig or dict with model/train/optim/data/sharding

Order of work: completed-run check -> distributed init (experiments/loop_core.py: run_resumable)
-> validate the whole config (no compile) -> corpus (and the `eval.tasks` examples from its
held-out split) -> mesh + compiled steps -> restore latest checkpoint (if any) -> train steps
(loop_core.run_steps) with their periodic actions: preemption check, eval (loss and tasks),
checkpoint -> final eval + checkpoint -> atomic summary.json (loop_core.write_summary).
The summary is a models.base.rundir.RunSummary; its `status` (RunStatus): completed | diverged |
failed | preempted (SIGTERM, SIGUSR1 or SIGUSR2 reached the run: it saved a checkpoint after the
step in flight and stopped; experiments/preemption.py).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
from jax.experimental import multihost_utils

from experiments import early_stop, loop_core
from experiments.loop_core import Diverged, StepState
from experiments.preemption import PreemptionGuard
from experiments.rundir import completed_summary, console_log_error, fingerprint_fields
from experiments.train.checkpoint import Checkpointer
from experiments.train.config import RunSpec, resolve_config
from experiments.train.corpus import BatchSampler, eval_sampler, load_corpus
from experiments.train.init import Parent, start_from_parent
from experiments.train.metrics import MetricsLog, Progress
from experiments.train.mixture import (
    MixtureSampler,
    eval_names,
    is_multi,
    load_named,
    primary_name,
    training_weights,
)
from experiments.train.optimizer import RuntimeOptimizer, hyperparams, schedule_value
from experiments.train.peak_flops import Peak, checked_mfu, mark_cpu_peak_stale, peak_info, stale_peak_warning
from experiments.train.profiling import StepProfiler
from experiments.train.steps import TrainSetup, build_train_setup
from experiments.train.tasks.scoring import TaskSuite, build_task_sets, metrics_record
from experiments.train.tracking import TRAIN_NAMES, make_tracker
from models.base.diskspace import DiskFull, is_disk_full
from models.base.errors import ConfigError
from models.base.fingerprint import diff_fields
from models.base.portable import process_started_at
from models.base.rundir import (
    BRANCH_POINTS_DIR,
    METRICS_FILE,
    PROFILE_DIR,
    TIME_KINDS,
    RunRole,
    RunStatus,
    RunSummary,
    read_metrics,
)
from models.flops import MFU_CAUSAL, mfu_convention, mfu_label
from models.transformer import MOE_STATS
from sharding.mesh import make_mesh


def _log(msg: str, enabled: bool = True) -> None:
    if enabled:
        print(msg, flush=True)


# ---- batches --------------------------------------------------------------------------------


def make_train_batch(sampler, step: int, n_micro: int, micro: int, sharding) -> Any:
    """Global (n_micro, micro, L+1) int32 array of batch `step`; each process reads only the rows
    its devices hold (global row = k * micro + r for micro-batch k, row r)."""
    L1 = sampler.seq_len + 1
    cache: dict[tuple, np.ndarray] = {}

    def cb(index: tuple[slice, ...]) -> np.ndarray:
        key = tuple((s.start, s.stop, s.step) for s in index)
        if key not in cache:
            ks = range(*index[0].indices(n_micro))
            rs = range(*index[1].indices(micro))
            rows = np.array([k * micro + r for k in ks for r in rs], dtype=np.int64)
            cache[key] = sampler.rows(step, rows).reshape(len(ks), len(rs), L1)[..., index[2]]
        return cache[key]

    return jax.make_array_from_callback((n_micro, micro, L1), sharding, cb)


def make_eval_stack(sampler, k: int, sharding) -> Any:
    """Global (K, B, L+1) array of the first K batches of a fixed validation sampler (small:
    `train.eval_tokens` tokens), evaluated by one call of `TrainSetup.eval_all`."""
    host = np.stack([sampler.rows(j) for j in range(k)])
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


class Prefetcher:
    """Builds batch i+1.. on a background thread while step i runs."""

    def __init__(self, make: Callable[[int], Any], stop: int, depth: int = 2):
        self.make, self.stop, self.depth = make, stop, depth
        self.pool = cf.ThreadPoolExecutor(1, thread_name_prefix="batches")
        self.futs: dict[int, cf.Future] = {}

    def get(self, i: int) -> Any:
        for j in range(i, min(i + self.depth + 1, self.stop)):
            if j not in self.futs:
                self.futs[j] = self.pool.submit(self.make, j)
        return self.futs.pop(i).result()

    def put(self, i: int, batch: Any) -> None:
        """Hand over batch i, already built (the one the train step was compiled on)."""
        self.futs[i] = cf.Future()
        self.futs[i].set_result(batch)

    def close(self) -> None:
        for f in self.futs.values():
            f.cancel()
        self.pool.shutdown(wait=True)


class HostSchedule:
    """Learning rate of step i as a Python float, without running a JAX op every step.

    Calling an optax schedule eagerly runs a small XLA computation. On CPU that computation
    queues behind the train step in flight, so logging step i-1's lr stalled the loop until step
    i ended, and the device idled until step i+1 was dispatched. Values come `chunk` steps at a
    time instead, from the run's step scalars `hp` (optimizer.hyperparams) as an input of one
    program per process (a pack's runs, a sweep's in-process jobs compile it once).
    """

    values_at = jax.jit(jax.vmap(schedule_value, in_axes=(None, 0)))  # (hp, steps) -> lr per step

    def __init__(self, hp: dict[str, Any], chunk: int = 4096):
        self.hp = hp
        self.chunk = chunk
        self._c, self._vals = -1, np.empty(0)

    def __call__(self, i: int) -> float:
        c = i // self.chunk
        if c != self._c:
            steps = np.arange(c * self.chunk, (c + 1) * self.chunk, dtype=np.int32)
            self._c, self._vals = c, np.asarray(HostSchedule.values_at(self.hp, steps))
        return float(self._vals[i - c * self.chunk])


# ---- the run --------------------------------------------------------------------------------


@dataclasses.dataclass
class RunState:
    """What summary.json reports, kept current as the run goes, so that a failure at any point
    still writes a `failed` summary with everything known so far."""

    spec: RunSpec | None = None
    is_main: bool = True
    step: int = 0
    tokens: int = 0
    flops: float = 0.0
    train_loss: float | None = None
    eval_loss: float | None = None
    task_metrics: dict[str, dict[str, float]] | None = None  # {task: {loss, accuracy, chance}}, last eval
    moe: dict[str, Any] | None = None  # model.moe: the last step's routed-layer statistics (`_moe_fields`)
    tokens_per_s: float | None = None
    mfu: float | None = None
    mfu_raw: float | None = None  # an impossible MFU (> 1: a stale peak), kept apart from mfu
    peak: float | None = None
    peak_source: str | None = None
    peak_measured_at: str | None = None  # when a measured (CPU) peak was measured; None: catalogued
    mesh: dict[str, Any] | None = None
    corpus: dict[str, Any] | None = None
    unique_tokens: int | None = None  # tokens the run samples from (the split, or data.max_unique_tokens)
    wall_prev: float = 0.0  # wall time of earlier sessions of this run (from the checkpoint)
    time_prev: dict[str, float] | None = None  # time_s of earlier sessions (from the checkpoint)
    packed_with: list[str] | None = None  # the pack's run ids (experiments/train/pack.py), else None
    stopped: dict[str, Any] | None = None  # sweep.early_stop stopped it: stop_reason, forecast, frac_done
    # several corpora (experiments/train/mixture.py): the training weights, the last eval's loss
    # on each corpus (`eval_loss/<name>`) and each corpus's identity (summary.json `corpora`)
    weights: dict[str, float] | None = None
    eval_losses: dict[str, float] | None = None
    corpora: dict[str, Any] | None = None
    parent: Parent | None = None  # train.init_from: where the run started (experiments/train/init.py)


@dataclasses.dataclass
class Clock:
    """Step timing of this session: the time between two finished steps, less evaluation and
    checkpoint pauses, and the tokens / seconds that the summary's throughput averages."""

    t_last: float = dataclasses.field(default_factory=time.perf_counter)
    pause: float = 0.0
    session_tokens: int = 0
    session_time: float = 0.0
    steps_time: float = 0.0  # every step of this session, the first (warm-up) one included

    def lap(self) -> float:
        """Seconds since the previous lap, pauses excluded."""
        now = time.perf_counter()
        dt = max(now - self.t_last - self.pause, 1e-9)
        self.t_last, self.pause = now, 0.0
        self.steps_time += dt
        return dt

    def paused_since(self, t0: float) -> None:
        """Exclude the time since `t0` (a perf_counter reading) from the current step."""
        self.pause += time.perf_counter() - t0

    def tokens_per_s(self) -> float | None:
        return self.session_tokens / self.session_time if self.session_time > 0 else None


@dataclasses.dataclass
class Loop:
    """The compiled run and its moving parts: what the step loop advances."""

    spec: RunSpec
    state: RunState
    run_dir: Path
    t_start: float
    ts: TrainSetup
    params: Any
    opt_state: Any
    start: int
    resumed: bool
    ckpt: Checkpointer
    metrics: MetricsLog
    progress: Progress
    lr_of_step: HostSchedule
    n_dev: int
    sampler: BatchSampler  # train batches: batch i = f(train.seed, i)
    program: Program  # the compiled steps, eval batches and tasks (shared by a pack's runs)
    hp: Any  # this run's step scalars on the mesh (RuntimeOptimizer): lr, weight decay, schedule
    times: Times = dataclasses.field(default_factory=lambda: Times())
    branch_ckpt: Checkpointer | None = None  # WSD trunk: its kept branch-point checkpoints
    clock: Clock = dataclasses.field(default_factory=Clock)
    guard: PreemptionGuard | None = None  # preemption signals: stop at a step boundary
    warned_stale_peak: bool = False  # the MFU > 1 warning is printed once a run

    @property
    def tasks(self) -> TaskSuite | None:
        return self.program.tasks

    def time_split(self) -> dict[str, float]:
        """summary.json `time_s` as of now: this session's, process start-up included, plus
        earlier sessions' (from the checkpoint)."""
        wall = time.time() - self.t_start + self.times.startup
        return self.times.as_dict(wall, self.clock.steps_time, self.state.time_prev)

    def mfu(self, tokens_per_s: float) -> float:
        """The raw MFU of `tokens_per_s` (`checked_mfu` turns an impossible one into None)."""
        peak = self.state.peak
        return tokens_per_s * self.spec.flops_per_token / (self.n_dev * peak) if peak == peak else math.nan

    def checked_mfu(self, tokens_per_s: float) -> tuple[float | None, float | None]:
        """(mfu to record, raw figure when above 1): the first MFU above 1 prints one `warning:`
        line (the peak is stale) and marks a measured CPU peak for re-measuring."""
        mfu, raw = checked_mfu(self.mfu(tokens_per_s))
        if raw is not None and not self.warned_stale_peak:
            self.warned_stale_peak = True
            st = self.state
            peak = Peak(st.peak, st.peak_source or "", st.peak_measured_at, st.peak_measured_at is not None)
            _log(stale_peak_warning(raw, peak), st.is_main)
            if peak.measured:
                mark_cpu_peak_stale(self.spec.model.dtype)
        return mfu, raw


@dataclasses.dataclass
class Times:
    """Where this session's wall time went (summary.json `time_s`, models.base.rundir.TIME_KINDS):
    the pauses counted here; train steps are the step clock's (`Clock.steps_time`) and `other`
    is the rest of the wall time (building, restoring, summaries)."""

    compile: float = 0.0
    eval: float = 0.0
    checkpoint: float = 0.0
    startup: float = 0.0

    def as_dict(self, wall: float, train_steps: float, prev: dict[str, float] | None) -> dict[str, float]:
        """This session's split of `wall` seconds, plus earlier sessions' (`prev`)."""
        now = {k: getattr(self, k) for k in TIME_KINDS if k not in ("train_steps", "other")}
        now["train_steps"] = train_steps
        now["other"] = max(wall - sum(now.values()), 0.0)
        return {k: now[k] + float((prev or {}).get(k, 0.0)) for k in TIME_KINDS}


_STARTUP_CLAIMED = False  # the process start-up is the first run's (later runs of a pack start warm)


def _claim_startup(t_start: float) -> float:
    """Seconds from this process's start to `t_start`, for the process's first run; 0 after."""
    global _STARTUP_CLAIMED
    if _STARTUP_CLAIMED:
        return 0.0
    _STARTUP_CLAIMED = True
    return max(t_start - process_started_at(), 0.0)


@dataclasses.dataclass
class Program:
    """What runs of one compiled program share: the train setup, its compiled train step and
    eval, the eval batches and the task suite. Runs whose configs differ only in the step
    scalars (optimizer.HYPER_KEYS), the seed or the run length get the same Program (`_PROGRAMS`),
    so the second run of a pack compiles nothing."""

    ts: TrainSetup
    eval_stack: Any  # (K, B, L+1) validation batches
    tasks: TaskSuite | None
    eval_stacks: dict[str, Any] | None = None  # several corpora: each one's (K, B, L+1) batches
    step_fn: Any = None  # compiled train step (params, opt_state, batch, hp)
    eval_fn: Any = None  # compiled eval_all (params, eval_stack)
    lock: Any = dataclasses.field(default_factory=threading.Lock)  # compiling


# Programs of this process, newest last; a pack uses one at a time, so two is plenty and bounds memory.
_PROGRAMS: collections.OrderedDict[str, Program] = collections.OrderedDict()
_PROGRAMS_KEPT = 2
_CORPORA: dict[str, Any] = {}  # loaded corpora by data config (a pack's runs read one corpus)
_CACHE_LOCK = threading.RLock()  # a pack's members (threads) share both caches


def compiled_program(key: str) -> Program | None:
    """This process's Program of `program_key` `key` once its train step is compiled, else None
    (experiments/train/pack.py sizes a pack by it)."""
    with _CACHE_LOCK:
        prog = _PROGRAMS.get(key)
        return prog if prog is not None and prog.step_fn is not None else None


def program_key(spec: RunSpec) -> str:
    """Everything the compiled program depends on; the step scalars, seed and length are not in it."""
    runtime = RuntimeOptimizer(spec.optim, {}, spec.model)
    parts = [
        spec.model.to_dict(),
        runtime.static_key,
        spec.mesh_shape,
        spec.pipeline,
        spec.context,
        spec.sequence_parallel,
        spec.expert,
        spec.n_micro,
        spec.micro_batch_size,
        spec.eval_batches,
        spec.eval_batch_size,
        _data_key(spec),
        spec.raw.get("eval"),
        [d.id for d in jax.devices()],
    ]
    return json.dumps(parts, default=str, sort_keys=True)


def _data_key(spec: RunSpec) -> Any:
    """The data config as the program sees it: a mixture's weights change the batches, not the
    program (its eval batches are each evaluated corpus's), so runs of one model at several
    mixtures share one compiled program."""
    data = spec.raw.get("data")
    if not isinstance(data, dict) or data.get("mixture") is None:
        return data
    return {**data, "mixture": eval_names(spec.data)}


def _corpus(spec: RunSpec) -> Any:
    key = json.dumps(spec.raw.get("data"), default=str, sort_keys=True)
    with _CACHE_LOCK:
        if key not in _CORPORA:
            _CORPORA.clear()
            _CORPORA[key] = load_corpus(spec.data)
        return _CORPORA[key]


@dataclasses.dataclass
class RunData:
    """A run's corpora: the batches it trains on, the validation splits it is scored on (several
    corpora only) and the corpus its header, summary `corpus` and `eval.tasks` read."""

    corpus: Any  # Corpus
    sampler: Any  # BatchSampler | MixtureSampler
    evals: dict[str, Any] | None = None  # name -> validation split (several corpora)


def _run_data(spec: RunSpec, state: RunState) -> RunData:
    """The run's corpora (experiments/train/mixture.py), recorded in the run state."""
    L, B, seed = spec.model.seq_len, spec.train.batch_size, spec.train.seed
    if not is_multi(spec.data):
        corpus = _corpus(spec)
        state.corpus, state.unique_tokens = corpus.identity, corpus.unique_tokens
        return RunData(corpus, BatchSampler(corpus.train, L, B, seed))
    weights = training_weights(spec.data)
    names = eval_names(spec.data)
    own = primary_name(spec.data)
    key = json.dumps([spec.raw.get("data"), names], default=str, sort_keys=True)
    with _CACHE_LOCK:
        if key not in _CORPORA:
            _CORPORA.clear()
            _CORPORA[key] = load_named(
                spec.data, names + ([own] if spec.eval.tasks and own not in names else [])
            )
        named = _CORPORA[key]
    main = max(weights, key=lambda n: weights[n])
    trained = [n for n, w in weights.items() if w > 0]
    state.weights = weights
    state.corpus = named[main].identity
    state.unique_tokens = sum(named[n].unique_tokens for n in trained)
    state.corpora = {
        n: {
            "name": named[n].identity.get("name"),
            "sha256": named[n].identity.get("sha256"),
            "train_tokens": named[n].unique_tokens,
            "val_tokens": int(named[n].val.size),
            "weight": weights.get(n, 0.0),
        }
        for n in names
    }
    sampler = MixtureSampler([(n, named[n].train, w) for n, w in weights.items()], L, B, seed)
    task_corpus = named.get(own, named[main])
    return RunData(task_corpus, sampler, {n: named[n].val for n in names})


def run(
    cfg: Any,
    run_dir: Path,
    packed_with: list[str] | None = None,
    halt: Callable[[], BaseException | None] | None = None,
) -> RunSummary:
    """Train (or resume, or skip if completed) the run described by `cfg` in `run_dir`.

    Returns the summary (also written to run_dir/summary.json). Raises ConfigError for bad
    configuration (after writing a `failed` summary), and re-raises unexpected errors likewise.
    `packed_with`: the run ids of the pack this run trains in (summary.json `packed_with`).
    `halt()`, asked after every step, returns an error to stop the run with (raised as it is,
    the run resumable from its last checkpoint), or None: a pack stops its members by it when
    one of them found the disk full.
    """
    run_dir, state = Path(run_dir), RunState(packed_with=packed_with)
    return loop_core.run_resumable(
        run_dir,
        cfg,
        lambda raw, guard, t_start: _run(raw, run_dir, t_start, state, guard, halt),
        completed=lambda: completed_summary(run_dir, lambda: fingerprint_fields(cfg)),
        done_line=lambda done: (
            f"run in {run_dir} already completed ({done.tokens} tokens, final eval loss "
            f"{done.final_eval_loss}); nothing to do"
        ),
        known_so_far=lambda: (_summary_base(state), state.wall_prev) if state.is_main else None,
        vote_lag=1,  # the stop vote never stalls the step pipeline
    )


def _summary_base(state: RunState) -> RunSummary:
    """summary.json's fields known so far (status and wall time are set by the caller); each
    one written, null while unknown."""
    s = RunSummary.of(
        status=None,
        n_params=None,
        n_params_non_embedding=None,
        tokens=state.tokens,
        flops=state.flops,
        final_train_loss=state.train_loss,
        final_eval_loss=state.eval_loss,
        tokens_per_s=state.tokens_per_s,
        mfu=state.mfu,
        mfu_convention=MFU_CAUSAL if state.spec is None else mfu_convention(state.spec.model),
        peak_flops_per_device=state.peak,
        peak_flops_source=state.peak_source,
        peak_flops_measured_at=state.peak_measured_at,
        mesh=state.mesh,
        corpus=state.corpus,
        unique_tokens=state.unique_tokens,
        epochs=state.tokens / state.unique_tokens if state.unique_tokens else None,
        wall_time_s=None,
        steps_done=state.step,
        task_metrics=state.task_metrics or {},
    )
    if state.mfu_raw is not None:  # written only when mfu is null for being above 1
        s = s.replace(mfu_raw=state.mfu_raw)
    if state.packed_with:
        s = s.replace(packed_with=list(state.packed_with))
    if state.moe:
        s = s.replace(**state.moe)
    if state.stopped:
        s = s.replace(**state.stopped)
    if state.eval_losses:  # several corpora: eval_loss/<name> (the mixture's is final_eval_loss)
        s = s.replace(**{f"eval_loss/{n}": v for n, v in state.eval_losses.items()})
    if state.corpora:
        s = s.replace(corpora=state.corpora)
    if state.parent is not None:
        s = s.replace(**state.parent.summary_fields())
    spec = state.spec
    if spec is not None:
        s = s.replace(
            n_params=spec.n_params,
            n_params_non_embedding=spec.n_params_non_embedding,
            steps=spec.steps,
            total_tokens=spec.total_tokens,
            tokens_per_step=spec.tokens_per_step,
            flops_per_token=spec.flops_per_token,
            config_fingerprint=spec.fingerprint,
            config_fields=spec.fingerprint_fields,
            model=spec.model.to_dict(),
        )
        if spec.n_params_active is not None:
            s = s.replace(n_params_active=spec.n_params_active)
        train = spec.train
        if train.branch_points:
            s = s.replace(role=RunRole.TRUNK)
        if train.branch_from is not None:
            branch_tokens = (spec.steps - train.branch_step) * spec.tokens_per_step
            s = s.replace(
                trunk=Path(train.branch_from).name,
                branch_step=train.branch_step,
                marginal_flops=float(branch_tokens * spec.flops_per_token),
            )
    return s


def _run(
    raw: dict[str, Any],
    run_dir: Path,
    t_start: float,
    state: RunState,
    guard: PreemptionGuard,
    halt: Callable[[], BaseException | None] | None = None,
) -> RunSummary:
    """Validate, build, restore, train, summarise: the order of work in the module docstring."""
    startup = _claim_startup(t_start)
    spec = resolve_config(raw)  # all validation, before any compile
    state.spec, state.is_main = spec, jax.process_index() == 0
    data = _run_data(spec, state)
    program = _program(spec, data)
    devices = _describe_devices(spec, program.ts.mesh, state)
    loop = _build_loop(spec, state, run_dir, t_start, program, data.sampler)
    loop.times.startup = startup
    _log_header(spec, devices, data.corpus, state.is_main, state.corpora)
    if loop.tasks is not None:
        _log("tasks: " + ", ".join(f"{t.name} ({t.detail})" for t in loop.tasks.task_sets), state.is_main)
    first = _compile(loop)
    loop.guard = guard
    try:
        status = _train_steps(loop, first, halt)
        return _write_summary(loop, status)
    except BaseException as e:
        # No Orbax thread left writing after the run's error is reported (a full disk: once).
        # A full disk found by another write while a save was in flight is most likely that
        # save's doing: if it failed, it is the write named.
        try:
            if loop.ckpt.pending and is_disk_full(e):
                loop.ckpt.wait()
        except DiskFull as ck:
            raise ck from e
        finally:
            loop.ckpt.abandon()
            if loop.branch_ckpt is not None:
                loop.branch_ckpt.abandon()
        raise


def _describe_devices(spec: RunSpec, mesh: Any, state: RunState) -> list[Any]:
    """The mesh's devices; records their peak FLOP/s (for MFU) and the mesh in the run state."""
    devices = list(mesh.devices.flat)
    on_host = sum(1 for d in devices if d.process_index == jax.process_index())
    peak = peak_info(devices[0], spec.model.dtype, devices_on_host=on_host)
    state.peak, state.peak_source, state.peak_measured_at = peak.flops, peak.source, peak.measured_at
    state.mesh = {
        "data": spec.mesh_shape[0],
        "fsdp": spec.mesh_shape[1],
        "tensor": spec.mesh_shape[2],
        "stage": spec.pipeline.stages,
        "context": spec.context,
        "expert": spec.expert,
        "sequence_parallel": spec.sequence_parallel,
        "devices": len(devices),
        "processes": jax.process_count(),
        "device_kind": devices[0].device_kind,
        "platform": devices[0].platform,
    }
    return devices


def _program(spec: RunSpec, data: RunData) -> Program:
    """This process's Program for `spec` (program_key), built on first use: mesh, train setup
    with the step scalars as inputs, eval batches, task suite. Compiled in `_compile`."""
    key = program_key(spec)
    with _CACHE_LOCK:
        if key in _PROGRAMS:
            _PROGRAMS.move_to_end(key)
            return _PROGRAMS[key]
        program = _build_program(spec, data)
        _PROGRAMS[key] = program
        while len(_PROGRAMS) > _PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
        return program


def _build_program(spec: RunSpec, data: RunData) -> Program:
    mesh = make_mesh(spec.mesh_shape, stage=spec.pipeline.stages, context=spec.context, expert=spec.expert)
    ts = build_train_setup(
        spec.model,
        RuntimeOptimizer(spec.optim, hyperparams(spec.optim, spec.steps, spec.warmup_steps), spec.model),
        mesh,
        n_micro=spec.n_micro,
        pipeline=spec.pipeline,
        sequence_parallel=spec.sequence_parallel,
    )

    def stack(val: Any) -> Any:
        return make_eval_stack(
            eval_sampler(val, spec.model.seq_len, spec.eval_batch_size), spec.eval_batches, ts.batch_sharding
        )

    stacks = None if data.evals is None else {n: stack(v) for n, v in data.evals.items()}
    tasks = None
    if spec.eval.tasks:
        tasks = TaskSuite(
            build_task_sets(spec.eval, data.corpus.val, spec.model.seq_len),
            ts.graphdef,
            ts.param_shardings,
            ts.eval_batch_sharding,
            spec.eval_batch_size,
        )
    first = next(iter(stacks.values())) if stacks else stack(data.corpus.val)
    return Program(ts, first, tasks, eval_stacks=stacks)


def _build_loop(
    spec: RunSpec, state: RunState, run_dir: Path, t_start: float, program: Program, sampler: BatchSampler
) -> Loop:
    """Checkpointer and metrics log; params restored (own checkpoint, else a WSD trunk's branch
    point) or initialised; this run's step scalars on the mesh."""
    ts = program.ts
    train = spec.train
    # Orbax's async saves from several threads at once (a pack's members) collided on their
    # temporary directories (FileExistsError, 2 of 4 members): members in threads save synchronously.
    async_save = train.async_checkpoints and threading.current_thread() is threading.main_thread()
    ckpt = Checkpointer(run_dir, keep=train.keep_checkpoints, async_save=async_save)
    branch_ckpt = None
    if train.branch_points:
        branch_ckpt = Checkpointer(run_dir, keep=None, subdir=BRANCH_POINTS_DIR)
    metrics = MetricsLog(
        run_dir / METRICS_FILE,
        enabled=state.is_main,
        tracker=make_tracker(spec.tracker, run_dir, TRAIN_NAMES, spec.raw, state.is_main),
    )
    try:
        params, opt_state, start, resumed = _restore_or_init(spec, state, run_dir, ts, ckpt, metrics)
    except BaseException:
        ckpt.close()  # no Orbax thread left behind to write after the run's log is closed
        raise
    hp_host = hyperparams(spec.optim, spec.steps, spec.warmup_steps)
    replicated = jax.sharding.NamedSharding(ts.mesh, jax.sharding.PartitionSpec())
    hp = jax.tree.map(lambda v: jax.device_put(v, replicated), hp_host)
    progress = Progress(
        spec.steps,
        spec.tokens_per_step,
        train.progress_every_s,
        enabled=state.is_main,
        mfu_label=mfu_label(spec.model),
    )
    return Loop(
        spec=spec,
        state=state,
        run_dir=run_dir,
        t_start=t_start,
        ts=ts,
        params=params,
        opt_state=opt_state,
        start=start,
        resumed=resumed,
        ckpt=ckpt,
        metrics=metrics,
        progress=progress,
        lr_of_step=HostSchedule(hp_host),
        n_dev=ts.mesh.devices.size,
        sampler=sampler,
        program=program,
        hp=hp,
        branch_ckpt=branch_ckpt,
    )


def _restore_or_init(
    spec: RunSpec, state: RunState, run_dir: Path, ts: TrainSetup, ckpt: Checkpointer, metrics: MetricsLog
) -> tuple[Any, Any, int, bool]:
    """(params, opt_state, start step, resumed): the newest readable checkpoint of this same
    config (unreadable newer ones are set aside with a warning), or a fresh init. A checkpoint of
    another config is refused (it would mix two experiments)."""

    def same_config(meta: dict[str, Any]) -> None:
        if meta.get("config_fingerprint") != spec.fingerprint:
            diffs = diff_fields(meta.get("config_fields") or {}, spec.fingerprint_fields)
            raise ConfigError(
                f"{run_dir} holds checkpoints of another config ({'; '.join(diffs[:3])}); "
                "choose another hydra.run.dir"
            )

    got = ckpt.restore_newest(
        *ts.abstract_state(), check=same_config, warn=lambda msg: _log(msg, state.is_main)
    )
    if got is None and spec.train.branch_from is not None:
        return _start_branch(spec, state, ts, metrics)
    if got is None and spec.train.init_from is not None:  # continual pre-training: the parent's weights
        params, opt_state, state.parent = start_from_parent(
            spec, ts, run_dir, lambda m: _log(m, state.is_main)
        )
        metrics.reset()
        start = 0
    elif got is None:
        params, opt_state = ts.init(spec.train.seed)
        metrics.reset()
        start = 0
    else:
        params, opt_state, meta = got.params, got.opt_state, got.meta
        start = int(meta["step"])
        state.wall_prev = float(meta.get("wall_time_s", 0.0))
        state.time_prev = meta.get("time_s")
        state.train_loss, state.eval_loss = meta.get("train_loss"), meta.get("eval_loss")
        state.moe = meta.get("moe")
        state.task_metrics = meta.get("task_metrics")
        state.eval_losses = meta.get("eval_losses")
        state.parent = Parent.from_fields(meta.get("init"))
        metrics.truncate_after(start)
        _log(f"resuming from checkpoint at step {start}/{spec.steps}", state.is_main)
    state.step, state.tokens = start, start * spec.tokens_per_step
    state.flops = float(start * spec.tokens_per_step * spec.flops_per_token)
    return params, opt_state, start, got is not None


def _start_branch(
    spec: RunSpec, state: RunState, ts: TrainSetup, metrics: MetricsLog
) -> tuple[Any, Any, int, bool]:
    """A WSD branch's first session: (params, opt_state) of its trunk at `train.branch_step`
    (the trunk trained this run's own steps up to there: same seed, batches and lr), and the
    trunk's metrics.jsonl records up to that step as this run's own, so its curve is whole."""
    trunk, step = Path(spec.train.branch_from), int(spec.train.branch_step)
    bck = Checkpointer(trunk, keep=None, subdir=BRANCH_POINTS_DIR)
    try:
        if step not in bck._mngr.all_steps():
            raise ConfigError(
                f"train.branch_from={trunk} has no branch point at step {step} "
                f"(has {sorted(bck._mngr.all_steps())}); train the trunk first"
            )
        params, opt_state, meta = bck.restore(step, *ts.abstract_state())
    finally:
        bck.close()
    state.parent = Parent.from_fields(meta.get("init"))  # a continued trunk's base model, carried on
    metrics.reset()
    for rec in read_metrics(trunk / METRICS_FILE):
        if rec.get("step", 0) <= step:
            metrics.write(rec)
    _log(f"branch of trunk {trunk.name}: starting from its step {step}/{spec.steps}", state.is_main)
    state.step, state.tokens = step, step * spec.tokens_per_step
    state.flops = float(step * spec.tokens_per_step * spec.flops_per_token)
    return params, opt_state, step, False


def _log_header(
    spec: RunSpec, devices: list[Any], corpus: Any, enabled: bool, corpora: dict[str, Any] | None = None
) -> None:
    """One line: model size, run length, mesh and corpus (several: the mixture and what is evaluated)."""
    moe = spec.model.moe
    routed = ""
    if moe is not None:
        routed = (
            f", {spec.n_params_active:,} active; {len(spec.model.moe_layers)} routed layer(s) of "
            f"{moe.routed_experts} experts, top-{moe.routed_top_k}, capacity "
            f"{moe.capacity(spec.model.seq_len)}/{spec.model.seq_len} tokens"
        )
    _log(
        f"model: {spec.n_params:,} params ({spec.n_params_non_embedding:,} non-embedding{routed}), "
        f"{spec.flops_per_token:,} FLOPs/token (mfu: {mfu_label(spec.model)}) | run: {spec.steps} steps x "
        f"{spec.tokens_per_step:,} tokens = {spec.total_tokens:,} tokens | "
        f"mesh data={spec.mesh_shape[0]} fsdp="
        f"{spec.mesh_shape[1]} tensor={spec.mesh_shape[2]}{'+sp' if spec.sequence_parallel else ''}"
        f"{f' context={spec.context}' if spec.context > 1 else ''}"
        f"{f' expert={spec.expert}' if spec.expert > 1 else ''} on {len(devices)} {devices[0].platform} "
        f"device(s) | "
        + (
            f"corpus {corpus.identity['name']} ({corpus.identity['bytes']:,} bytes), {corpus.unique_line()}"
            if not corpora
            else "trains on "
            + ", ".join(f"{n} {c['weight']:g}" for n, c in corpora.items() if c["weight"] > 0)
            + f" (evaluated on {', '.join(corpora)})"
        ),
        enabled,
    )


def _make_batch(loop: Loop, i: int) -> Any:
    """Train batch i, sharded as the train step takes it."""
    spec = loop.spec
    return make_train_batch(loop.sampler, i, spec.n_micro, spec.micro_batch_size, loop.ts.batch_sharding)


def _compile(loop: Loop) -> Any:
    """Compile the train step (on the first batch, returned for reuse), the eval and the task
    scorer ahead of time, so the compile time is measured apart from the steps; a Program
    another run of this process compiled already is reused as it is."""
    t_c = time.perf_counter()
    first, prog = None, loop.program
    if loop.start < loop.spec.steps:
        first = _make_batch(loop, loop.start)
    with prog.lock:  # a pack's members: the first compiles, the others wait and reuse
        if first is not None and prog.step_fn is None:
            prog.step_fn = loop.ts.train_step.lower(loop.params, loop.opt_state, first, loop.hp).compile()
        if prog.eval_fn is None:
            prog.eval_fn = loop.ts.eval_all.lower(loop.params, prog.eval_stack).compile()
        if loop.tasks is not None and loop.tasks.compiled is None:
            loop.tasks.compile(loop.params)
    loop.times.compile = time.perf_counter() - t_c
    return first


def _evaluate(loop: Loop, params: Any) -> float:
    """Mean validation loss over the fixed eval batches (one call); with several corpora each
    one's (kept in the run state: `eval_loss/<name>`) and their mean weighted by the training
    mixture (the run's eval loss: the held-out loss of what it trains on)."""
    prog = loop.program
    if not prog.eval_stacks:
        return float(prog.eval_fn(params, prog.eval_stack))
    losses = {n: float(prog.eval_fn(params, s)) for n, s in prog.eval_stacks.items()}
    loop.state.eval_losses = losses
    weights = loop.state.weights or {}
    return float(sum(w * losses[n] for n, w in weights.items() if w > 0))


def _evaluate_tasks(loop: Loop, params: Any) -> dict[str, float]:
    """Score `eval.tasks` on `params`: kept in the run state (summary, checkpoint record) and
    returned as metrics.jsonl fields (`task/<name>/loss`, `task/<name>/accuracy`)."""
    if loop.tasks is None:
        return {}
    results = loop.tasks.evaluate(params)
    loop.state.task_metrics = {name: r.as_dict() for name, r in results.items()}
    return metrics_record(results)


def _checkpoint(loop: Loop, step: int, branch_point: bool = False) -> None:
    """Save (params, opt_state) of `step` with the record that resume and analysis read (also
    under branch_points/ when `step` is a WSD branch point: synchronous, kept for good)."""
    t_s = time.perf_counter()
    loop.metrics.flush()
    spec, state = loop.spec, loop.state
    meta = {
        "step": step,
        "tokens": step * spec.tokens_per_step,
        "config_fingerprint": spec.fingerprint,
        "config_fields": spec.fingerprint_fields,
        "model": spec.model.to_dict(),
        "train_loss": state.train_loss,
        "moe": state.moe,
        "eval_loss": state.eval_loss,
        "task_metrics": state.task_metrics,
        "eval_losses": state.eval_losses,
        "init": None if state.parent is None else state.parent.summary_fields(),
        "wall_time_s": state.wall_prev + time.time() - loop.t_start,
    }
    meta["time_s"] = loop.time_split()  # as of this save, for a resumed run
    loop.ckpt.save(step, loop.params, loop.opt_state, meta)
    if branch_point and loop.branch_ckpt is not None:
        loop.branch_ckpt.save(step, loop.params, loop.opt_state, meta)
    loop.times.checkpoint += time.perf_counter() - t_s
    loop.clock.paused_since(t_s)


class _TrainSteps:
    """The train step for `run_steps`, pipelined: step i is dispatched before step i-1's metrics
    are fetched, so the host never waits on the device except on eval / checkpoint steps (which
    need the params after the step). The step not yet finished is `pending`."""

    def __init__(self, loop: Loop, first: Any):
        self.loop = loop
        self.prefetch = Prefetcher(lambda i: _make_batch(loop, i), loop.spec.steps)
        if first is not None:
            self.prefetch.put(loop.start, first)
        loop.clock = Clock()
        self.profiler = StepProfiler(
            loop.spec.train.profile_steps,
            loop.run_dir / PROFILE_DIR,
            loop.start,
            loop.state.is_main,
            loop.clock.paused_since,
            lambda msg: _log(msg, loop.state.is_main),
        )
        self.pending: tuple[int, Any] | None = None
        self.saved_at = -1  # the step of this session's last checkpoint
        self.last_ckpt = time.perf_counter()
        self.branch_points = frozenset(loop.spec.train.branch_points or ())

    def step(self, i: int) -> None:
        loop = self.loop
        self.profiler.before(i + 1)
        with self.profiler.annotate(i + 1):
            loop.params, loop.opt_state, m = loop.program.step_fn(
                loop.params, loop.opt_state, self.prefetch.get(i), loop.hp
            )
        self.profiler.after(i + 1, loop.params)
        self.drain()  # step i-1 finishes while step i runs
        self.pending = (i, m)

    def drain(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            _finish_step(self.loop, *pending)

    def close(self) -> None:
        self.profiler.close()
        self.prefetch.close()
        self.loop.metrics.close()

    # ---- periodic actions (need the params after the step: finish it now) ----
    def evaluate(self, s: StepState) -> None:
        """Finish the step with the validation loss (and tasks) of the params after it."""
        pending, self.pending = self.pending, None
        _finish_step(self.loop, *pending, eval_params=self.loop.params)

    def checkpoint(self, s: StepState) -> None:
        self.drain()
        _checkpoint(self.loop, s.done, branch_point=s.done in self.branch_points)
        self.last_ckpt = time.perf_counter()
        self.saved_at = s.done

    def early_stop(self, s: StepState, stopper: early_stop.Stopper) -> None:
        """`sweep.early_stop` at its steps: the held-out loss at this step, then the run's own
        decision (process 0 asks the forecast; every process gets its answer); to stop, a
        checkpoint, then Stopped (experiments/early_stop.py)."""
        if s.done not in stopper.steps or s.stop:
            return
        if self.pending is not None and s.done == self.pending[0] + 1:  # not evaluated at this step yet
            self.evaluate(s)
        decision = stopper.decide(s.done) if self.loop.state.is_main else None
        if not _vote(decision is not None and decision.stop):
            return
        self.loop.state.stopped = decision.summary_fields() if decision is not None else None
        if self.saved_at != s.done:
            self.checkpoint(s)
        raise loop_core.Stopped(decision.reason if decision is not None else "process 0 decided to stop")

    def checkpoint_if_due(self, s: StepState) -> None:
        """`train.ckpt_every_s`: checkpoint when that long has passed since the last save, and
        at every WSD branch point; the other cadences (steps, end, stop) are `checkpoint`'s. In
        a multi-process run process 0's clock decides, every TIME_VOTE_EVERY steps."""
        every_s = self.loop.spec.train.ckpt_every_s
        due = s.done in self.branch_points
        if every_s is not None and not due and _time_vote(s.done, self.last_ckpt, every_s):
            due = True
        on_cadence = bool(self.loop.spec.train.ckpt_every) and s.done % self.loop.spec.train.ckpt_every == 0
        if due and not (on_cadence or s.last or s.stop):  # those save in `checkpoint` anyway
            self.checkpoint(s)


def _train_steps(loop: Loop, first: Any, halt: Callable[[], BaseException | None] | None = None) -> RunStatus:
    """Run the steps from `loop.start` (experiments/loop_core.py: run_steps). Each step: the
    preemption check, then on `train.eval_every` steps the eval and on `train.ckpt_every` steps
    the checkpoint (both after the last step; the checkpoint also after a preempted one). Every
    step also asks whether an asynchronous save failed (a full disk stops the run at once, not
    at the next save) and `halt()` (a pack's stop)."""
    body, train = _TrainSteps(loop, first), loop.spec.train
    hooks = loop_core.Hooks()
    hooks.add_hook(_write_checks(loop, halt), every=1, at_end=False)
    hooks.add_hook(loop_core.preemption_check(loop.guard), every=1)
    hooks.add_hook(body.evaluate, every=train.eval_every)
    hooks.add_hook(body.checkpoint, every=train.ckpt_every, on_stop=True)
    if train.ckpt_every_s is not None or train.branch_points:
        hooks.add_hook(body.checkpoint_if_due, every=1, at_end=False)
    log = lambda msg: _log(msg, loop.state.is_main)  # noqa: E731
    stopper = early_stop.Stopper.of(loop.spec.raw, loop.run_dir, loop.spec.steps, log)
    if stopper is not None:
        hooks.add_hook(lambda s: body.early_stop(s, stopper), every=1, at_end=False)
    steps = StepState(start=loop.start, total=loop.spec.steps)
    return loop_core.run_steps(body, hooks, steps, loop.guard, log)


def _write_checks(loop: Loop, halt: Callable[[], BaseException | None] | None) -> Callable[[StepState], None]:
    """The per-step action that stops the run at the first failed write: an asynchronous save
    that ended in an error raises it (single-process runs: processes of a multi-process run
    learn of it together, at the next save), and so do a console log that could not be written
    and `halt()`."""
    poll = loop.ckpt.async_save and jax.process_count() == 1

    def check(s: StepState) -> None:
        if poll:
            loop.ckpt.poll()
        err = console_log_error() or (halt() if halt is not None else None)
        if err is not None:
            raise err

    return check


TIME_VOTE_EVERY = 10  # multi-process: how often process 0's clock is asked (one broadcast each)


def _vote(yes: bool) -> bool:
    """Process 0's answer, on every process (one broadcast in a multi-process run)."""
    if jax.process_count() == 1:
        return yes
    return bool(multihost_utils.broadcast_one_to_all(np.int32(yes)))


def _time_vote(step: int, since: float, every_s: float) -> bool:
    """Whether `every_s` seconds passed since perf_counter() reading `since`; every process
    gets the same answer (process 0's, broadcast on every TIME_VOTE_EVERY-th step)."""
    if jax.process_count() == 1:
        return time.perf_counter() - since >= every_s
    if step % TIME_VOTE_EVERY:
        return False
    due = np.int32(time.perf_counter() - since >= every_s)
    return bool(multihost_utils.broadcast_one_to_all(due))


def _finish_step(loop: Loop, step_i: int, m: Any, eval_params: Any = None) -> None:
    """Fetch step_i's metrics (blocks until it is done), evaluate if given the params after it,
    log, and raise Diverged on a non-finite loss or one above the ceiling."""
    rec = _step_record(loop, step_i, m)
    loss = rec["loss"]
    diverged = not math.isfinite(loss) or loss > loop.spec.loss_ceiling
    if eval_params is not None and not diverged:
        t_e = time.perf_counter()
        loop.state.eval_loss = rec["eval_loss"] = _evaluate(loop, eval_params)
        rec.update({f"eval_loss/{n}": v for n, v in (loop.state.eval_losses or {}).items()})
        rec.update(_evaluate_tasks(loop, eval_params))
        loop.times.eval += time.perf_counter() - t_e
        loop.clock.paused_since(t_e)
    _log_progress(loop, rec, force=diverged)
    if diverged:
        raise Diverged(
            f"loss {loss} at step {rec['step']} is non-finite or above train.loss_ceiling="
            f"{loop.spec.loss_ceiling:g}"
        )


def _step_record(loop: Loop, step_i: int, m: Any) -> dict[str, Any]:
    """The metrics.jsonl record of step_i; advances the clock and the run state."""
    spec, state, clock = loop.spec, loop.state, loop.clock
    loss, gnorm = float(m["loss"]), float(m["grad_norm"])
    dt = clock.lap()
    n = step_i + 1
    tps = spec.tokens_per_step / dt
    if n > loop.start + 1 or spec.steps - loop.start == 1:  # the session's first step pays warm-up
        clock.session_tokens += spec.tokens_per_step
        clock.session_time += dt
    flops = float(n * spec.tokens_per_step * spec.flops_per_token)
    state.step, state.tokens, state.flops, state.train_loss = n, n * spec.tokens_per_step, flops, loss
    rec = {
        "step": n,
        "tokens": n * spec.tokens_per_step,
        "flops": flops,
        "loss": loss,
        "lr": loop.lr_of_step(step_i),
        "grad_norm": gnorm,
        "step_time_s": dt,
        "tokens_per_s": tps,
    }
    rec["mfu"], raw = loop.checked_mfu(tps)
    if raw is not None:
        rec["mfu_raw"] = raw
    if spec.model.moe is not None:
        state.moe = _moe_fields(spec.model.moe_layers, m)
        rec.update(_moe_record(state.moe))
    return rec


def _moe_fields(layers: tuple[int, ...], m: Any) -> dict[str, Any]:
    """summary.json's mixture-of-experts fields from a step's metrics (steps.moe_metrics: one
    value per routed layer): `moe_<stat>` the mean over the routed layers, and `moe_layers`
    {layer index: {stat: value}} (MOE_STATS: aux_loss, z_loss, dropped_fraction)."""
    per_stat = {k: np.asarray(m[f"moe_{k}"], np.float64) for k in MOE_STATS}
    fields: dict[str, Any] = {f"moe_{k}": float(v.mean()) for k, v in per_stat.items()}
    fields["moe_layers"] = {
        str(i): {k: float(per_stat[k][j]) for k in MOE_STATS} for j, i in enumerate(layers)
    }
    return fields


def _moe_record(fields: dict[str, Any]) -> dict[str, float]:
    """metrics.jsonl's mixture-of-experts values: the means `moe_<stat>` and each routed layer's
    `moe/layer_<i>/<stat>`."""
    rec = {k: v for k, v in fields.items() if k != "moe_layers"}
    for i, stats in fields["moe_layers"].items():
        rec.update({f"moe/layer_{i}/{k}": v for k, v in stats.items()})
    return rec


def _log_progress(loop: Loop, rec: dict[str, Any], force: bool) -> None:
    """metrics.jsonl every `train.log_every` steps (eval, diverged and last steps always), and
    the console progress line at most every `train.progress_every_s`."""
    n, spec = rec["step"], loop.spec
    last = n == spec.steps
    if n % spec.train.log_every == 0 or "eval_loss" in rec or force or last:
        loop.metrics.write(rec)
    loop.progress.update(
        n,
        rec["loss"],
        rec["tokens_per_s"],
        math.nan if rec["mfu"] is None else rec["mfu"],
        rec.get("eval_loss"),
        force=last or force,
    )


def _write_summary(loop: Loop, status: RunStatus) -> RunSummary:
    """Final throughput and MFU of this session, then summary.json (one atomic write, process 0)
    and the closing console line."""
    spec, state = loop.spec, loop.state
    t_e = time.perf_counter()
    if status == RunStatus.COMPLETED and loop.start >= spec.steps and state.eval_loss is None:
        state.eval_loss = _evaluate(loop, loop.params)  # resumed after the final checkpoint
    if status == RunStatus.COMPLETED and loop.start >= spec.steps and state.task_metrics is None:
        _evaluate_tasks(loop, loop.params)
    loop.times.eval += time.perf_counter() - t_e
    t_c = time.perf_counter()
    loop.ckpt.close()  # waits for an asynchronous save in flight
    if loop.branch_ckpt is not None:
        loop.branch_ckpt.close()
    loop.times.checkpoint += time.perf_counter() - t_c
    tps = loop.clock.tokens_per_s()
    state.tokens_per_s = tps
    state.mfu, state.mfu_raw = loop.checked_mfu(tps) if tps else (None, None)
    summary = _summary_base(state).replace(
        status=status,
        wall_time_s=state.wall_prev + time.time() - loop.t_start,
        compile_time_s=loop.times.compile,
        time_s=loop.time_split(),
    )

    def line(s: RunSummary) -> str:
        return (
            f"{status}: {s.tokens:,} tokens, final train loss {s.final_train_loss}, "
            f"eval loss {s.final_eval_loss}, {tps or 0:,.0f} tok/s, "
            f"mfu {s.mfu or float('nan'):.3f} ({mfu_label(spec.model)}), {s.wall_time_s:.1f}s"
        )

    resumed_from = loop.start if loop.resumed else None
    return loop_core.write_summary(
        loop.run_dir, summary, resumed_from, loop.guard, line, loop.metrics, state.is_main
    )
