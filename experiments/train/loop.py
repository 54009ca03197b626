"""`run(cfg, run_dir) -> summary`: one training run, resumable, in plain Python.

Used by `python -m experiments.train` (Hydra) and callable from sweeps / notebooks:

    from experiments.train.loop import run
    summary = run(cfg, Path("runs/x"))      # cfg: DictConfig or dict with model/train/optim/data/sharding

Order of work: completed-run check -> distributed init -> validate the whole config (no compile)
-> corpus -> mesh + compiled steps -> restore latest checkpoint (if any) -> train loop with
eval / checkpoints / metrics -> final eval + checkpoint -> atomic summary.json.
Exit status lives in summary["status"]: completed | diverged | failed.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.rundir import completed_summary, write_failed_summary
from models.base.jsonio import write_json_atomic
from models.base.errors import ConfigError


class Diverged(RuntimeError):
    pass


def quiet_library_logs() -> None:
    """Hydra's console logging is INFO; keep JAX/Orbax/absl chatter out of the run's output."""
    import logging

    for name in ("absl", "jax", "orbax", "jax._src.xla_bridge"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _log(msg: str, enabled: bool = True) -> None:
    if enabled:
        print(msg, flush=True)


# ---- batches --------------------------------------------------------------------------------

def make_train_batch(sampler, step: int, n_micro: int, micro: int, sharding) -> Any:
    """Global (n_micro, micro, L+1) int32 array of batch `step`; each process reads only the rows
    its devices hold (global row = k * micro + r for micro-batch k, row r)."""
    import jax

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


def make_eval_batch(sampler, j: int, sharding) -> Any:
    import jax

    L1 = sampler.seq_len + 1
    return jax.make_array_from_callback(
        (sampler.batch_size, L1), sharding,
        lambda idx: sampler.rows(j, np.arange(sampler.batch_size)[idx[0]])[:, idx[1]])


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

    def close(self) -> None:
        for f in self.futs.values():
            f.cancel()
        self.pool.shutdown(wait=True)


class HostSchedule:
    """Learning rate of step i as a Python float, without running a JAX op every step.

    Calling an optax schedule eagerly runs a small XLA computation. On CPU that computation
    queues behind the train step in flight, so logging step i-1's lr stalled the loop until step
    i ended, and the device idled until step i+1 was dispatched. Values come `chunk` steps at a
    time instead.
    """

    def __init__(self, schedule: Callable[[Any], Any], chunk: int = 4096):
        import jax

        self.values_at = jax.jit(jax.vmap(schedule))  # compiled once, evaluated once per chunk
        self.chunk = chunk
        self._c, self._vals = -1, np.empty(0)

    def __call__(self, i: int) -> float:
        c = i // self.chunk
        if c != self._c:
            steps = np.arange(c * self.chunk, (c + 1) * self.chunk, dtype=np.int32)
            self._c, self._vals = c, np.asarray(self.values_at(steps))
        return float(self._vals[i - c * self.chunk])


# ---- the run --------------------------------------------------------------------------------

def run(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Train (or resume, or skip if completed) the run described by `cfg` in `run_dir`.

    Returns the summary dict (also written to run_dir/summary.json). Raises ConfigError for bad
    configuration (after writing a `failed` summary), and re-raises unexpected errors likewise.
    """
    run_dir = Path(run_dir)
    t_start = time.time()
    done = completed_summary(run_dir, cfg)
    if done is not None:
        _log(f"run in {run_dir} already completed ({done.get('tokens')} tokens, final eval loss "
             f"{done.get('final_eval_loss')}); nothing to do")
        return dict(done, already_completed=True)

    from models.base.configs import to_plain
    from sharding import distributed

    quiet_library_logs()
    raw = to_plain(cfg)
    state: dict[str, Any] = {"spec": None, "is_main": True}
    try:
        distributed.initialize((raw or {}).get("distributed"))
        return _run(raw, run_dir, t_start, state)
    except Exception as e:  # write a failed summary, then let the caller report
        if state["is_main"]:
            write_failed_summary(run_dir, _summary_base(state.get("spec"), state), e,
                                 state.get("wall_prev", 0.0) + time.time() - t_start)
        raise


def _summary_base(spec, state: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {
        "status": None, "n_params": None, "n_params_non_embedding": None, "tokens": state.get("tokens", 0),
        "flops": state.get("flops", 0.0), "final_train_loss": state.get("train_loss"),
        "final_eval_loss": state.get("eval_loss"), "tokens_per_s": state.get("tokens_per_s"),
        "mfu": state.get("mfu"), "peak_flops_per_device": state.get("peak"),
        "peak_flops_source": state.get("peak_source"), "mesh": state.get("mesh"),
        "corpus": state.get("corpus"), "wall_time_s": None, "steps_done": state.get("step", 0),
    }
    if spec is not None:
        s.update(n_params=spec.n_params, n_params_non_embedding=spec.n_params_non_embedding,
                 steps=spec.steps, total_tokens=spec.total_tokens, tokens_per_step=spec.tokens_per_step,
                 flops_per_token=spec.flops_per_token, config_fingerprint=spec.fingerprint,
                 config_fields=spec.fingerprint_fields, model=spec.model.to_dict())
    return s


def _run(raw: dict[str, Any], run_dir: Path, t_start: float, state: dict[str, Any]) -> dict[str, Any]:
    import jax

    from experiments.train.config import resolve_config

    spec = resolve_config(raw)                         # all validation, before any compile
    state["spec"] = spec
    is_main = jax.process_index() == 0
    state["is_main"] = is_main

    from experiments.train.checkpoint import Checkpointer
    from experiments.train.corpus import BatchSampler, eval_sampler, load_corpus
    from experiments.train.metrics import MetricsLog, Progress
    from experiments.train.optimizer import make_optimizer, make_schedule
    from experiments.train.peak_flops import peak_flops_per_device
    from experiments.train.steps import build_train_setup
    from sharding.mesh import make_mesh

    corpus = load_corpus(spec.data)
    state["corpus"] = corpus.identity
    train_sampler = BatchSampler(corpus.train, spec.model.seq_len, spec.train.batch_size, spec.train.seed)
    val_sampler = eval_sampler(corpus.val, spec.model.seq_len, spec.eval_batch_size)

    mesh = make_mesh(spec.mesh_shape)
    devices = list(mesh.devices.flat)
    on_host = sum(1 for d in devices if d.process_index == jax.process_index())
    peak, peak_src = peak_flops_per_device(devices[0], spec.model.dtype, devices_on_host=on_host)
    state.update(peak=peak, peak_source=peak_src, mesh={
        "data": spec.mesh_shape[0], "fsdp": spec.mesh_shape[1], "tensor": spec.mesh_shape[2],
        "devices": len(devices), "processes": jax.process_count(),
        "device_kind": devices[0].device_kind, "platform": devices[0].platform})

    schedule = make_schedule(spec.optim, spec.steps, spec.warmup_steps)
    tx = make_optimizer(spec.optim, schedule)
    lr_of_step = HostSchedule(schedule)
    ts = build_train_setup(spec.model, tx, mesh, n_micro=spec.n_micro)

    ckpt = Checkpointer(run_dir, keep=spec.train.keep_checkpoints)
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=is_main)
    latest = ckpt.latest_step()
    if latest is not None:
        meta = ckpt.read_meta(latest)
        if meta.get("config_fingerprint") != spec.fingerprint:
            from models.base.fingerprint import diff_fields
            diffs = diff_fields(meta.get("config_fields") or {}, spec.fingerprint_fields)
            raise ConfigError(f"{run_dir} holds checkpoints of another config ({'; '.join(diffs[:3])}); "
                              "choose another hydra.run.dir")
        abs_p, abs_o = ts.abstract_state()
        params, opt_state, meta = ckpt.restore(latest, abs_p, abs_o)
        start = int(meta["step"])
        state.update(wall_prev=float(meta.get("wall_time_s", 0.0)), train_loss=meta.get("train_loss"),
                     eval_loss=meta.get("eval_loss"))
        metrics.truncate_after(start)
        _log(f"resuming from checkpoint at step {start}/{spec.steps}", is_main)
    else:
        params, opt_state = ts.init(spec.train.seed)
        start = 0
        metrics.reset()
    state.update(step=start, tokens=start * spec.tokens_per_step,
                 flops=float(start * spec.tokens_per_step * spec.flops_per_token))
    fpt = spec.flops_per_token
    _log(f"model: {spec.n_params:,} params ({spec.n_params_non_embedding:,} non-embedding), "
         f"{fpt:,} FLOPs/token | run: {spec.steps} steps x {spec.tokens_per_step:,} tokens = "
         f"{spec.total_tokens:,} tokens | mesh data={spec.mesh_shape[0]} fsdp={spec.mesh_shape[1]} "
         f"tensor={spec.mesh_shape[2]} on {len(devices)} {devices[0].platform} device(s) | corpus "
         f"{corpus.identity['name']} ({corpus.identity['bytes']:,} bytes)", is_main)

    make_batch = lambda i: make_train_batch(train_sampler, i, spec.n_micro, spec.micro_batch_size,
                                            ts.batch_sharding)
    eval_set = [make_eval_batch(val_sampler, j, ts.eval_batch_sharding) for j in range(spec.eval_batches)]

    t_c = time.time()
    first = make_batch(start) if start < spec.steps else None
    step_fn = ts.train_step.lower(params, opt_state, first).compile() if first is not None else None
    eval_fn = ts.eval_step.lower(params, eval_set[0]).compile()
    compile_s = time.time() - t_c

    def evaluate(p) -> float:
        losses = [eval_fn(p, b) for b in eval_set]
        return float(np.mean([float(l) for l in losses]))

    def save(step: int) -> None:
        meta = {"step": step, "tokens": step * spec.tokens_per_step, "config_fingerprint": spec.fingerprint,
                "config_fields": spec.fingerprint_fields, "model": spec.model.to_dict(),
                "train_loss": state.get("train_loss"), "eval_loss": state.get("eval_loss"),
                "wall_time_s": state.get("wall_prev", 0.0) + time.time() - t_start}
        ckpt.save(step, params, opt_state, meta)

    n_dev = len(devices)
    progress = Progress(spec.steps, spec.tokens_per_step, spec.train.progress_every_s, enabled=is_main)
    prefetch = Prefetcher(make_batch, spec.steps)
    if first is not None:
        prefetch.futs[start] = cf.Future()
        prefetch.futs[start].set_result(first)
    session_tokens, session_time = 0, 0.0
    t_last = time.perf_counter()
    pause = 0.0
    pending: tuple[int, Any] | None = None
    status = "completed"

    def finish(step_i: int, m: Any, eval_params: Any = None) -> None:
        """Fetch step_i's metrics (blocks until it is done), evaluate if given the params after
        it, log, and raise Diverged on a non-finite loss or one above the ceiling."""
        nonlocal t_last, pause, session_tokens, session_time
        loss, gnorm = float(m["loss"]), float(m["grad_norm"])
        now = time.perf_counter()
        dt = max(now - t_last - pause, 1e-9)
        t_last, pause = now, 0.0
        n = step_i + 1
        tps = spec.tokens_per_step / dt
        mfu = tps * fpt / (n_dev * peak) if peak == peak else float("nan")
        if n > start + 1 or spec.steps - start == 1:  # the session's first step pays warm-up
            session_tokens += spec.tokens_per_step
            session_time += dt
        flops = float(n * spec.tokens_per_step * fpt)
        state.update(step=n, tokens=n * spec.tokens_per_step, flops=flops, train_loss=loss)
        rec = {"step": n, "tokens": n * spec.tokens_per_step, "flops": flops, "loss": loss,
               "lr": lr_of_step(step_i), "grad_norm": gnorm, "step_time_s": dt,
               "tokens_per_s": tps, "mfu": mfu}
        diverged = not math.isfinite(loss) or loss > spec.loss_ceiling
        if eval_params is not None and not diverged:
            t_e = time.perf_counter()
            state["eval_loss"] = rec["eval_loss"] = evaluate(eval_params)
            pause += time.perf_counter() - t_e
        if n % spec.train.log_every == 0 or "eval_loss" in rec or diverged or n == spec.steps:
            metrics.write(rec)
        progress.update(n, loss, tps, mfu, rec.get("eval_loss"), force=n == spec.steps or diverged)
        if diverged:
            raise Diverged(f"loss {loss} at step {n} is non-finite or above train.loss_ceiling="
                           f"{spec.loss_ceiling:g}")

    try:
        for i in range(start, spec.steps):
            batch = prefetch.get(i)
            params, opt_state, m = step_fn(params, opt_state, batch)   # async dispatch
            if pending is not None:
                finish(*pending)   # step i-1 finishes while step i runs
            pending = (i, m)
            n = i + 1
            need_ckpt = n == spec.steps or bool(spec.train.ckpt_every and n % spec.train.ckpt_every == 0)
            need_eval = n == spec.steps or bool(spec.train.eval_every and n % spec.train.eval_every == 0)
            if need_ckpt or need_eval:
                pending = None
                finish(i, m, eval_params=params if need_eval else None)
                if need_ckpt:
                    t_s = time.perf_counter()
                    metrics.flush()
                    save(n)
                    pause += time.perf_counter() - t_s
        if pending is not None:
            finish(*pending)
    except Diverged as e:
        status = "diverged"
        _log(f"diverged: {e}", is_main)
    finally:
        prefetch.close()
        metrics.close()

    if status == "completed" and start >= spec.steps and state.get("eval_loss") is None:
        state["eval_loss"] = evaluate(params)
    ckpt.close()
    tps = session_tokens / session_time if session_time > 0 else None
    state["tokens_per_s"] = tps
    state["mfu"] = (tps * fpt / (n_dev * peak)) if tps and peak == peak else None
    summary = _summary_base(spec, state)
    summary.update(status=status, wall_time_s=state.get("wall_prev", 0.0) + time.time() - t_start,
                   compile_time_s=compile_s, resumed_from_step=start if latest is not None else None)
    if is_main:
        write_json_atomic(run_dir / "summary.json", summary)
        _log(f"{status}: {summary['tokens']:,} tokens, final train loss {summary['final_train_loss']}, "
             f"eval loss {summary['final_eval_loss']}, {tps or 0:,.0f} tok/s, "
             f"mfu {summary['mfu'] or float('nan'):.3f}, {summary['wall_time_s']:.1f}s", is_main)
    return summary
