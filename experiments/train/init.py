"""`train.init_from=RUN_DIR`: start a run from another run's weights (continual pre-training).

A continued run starts at its own step 0 (its own data, schedule and length: a re-warm and a
re-decay, experiments/train/optimizer.py) from its parent's parameters at the parent's final
checkpoint, or at `train.init_step` (a checkpoint the parent kept, under `checkpoints/` or a WSD
trunk's `branch_points/`). The optimizer state comes along only with `train.init_optimizer=true`,
its schedule counter reset so the learning rate still follows this run's schedule. Once the run
has a checkpoint of its own it resumes from that, like any run; its fingerprint (and a sweep's
run id) includes `train.init_from`, the parent's directory, whose name carries the parent's id.

In a sweep a parent and its children are siblings launched in order; a child whose parent is
still training (it holds the parent's `.run.lock`) waits for it, and one whose sibling parent has
not started yet waits up to SIBLING_GRACE_S for it to start. A parent that ended diverged or
failed, or one that is neither complete nor training, ends the child with one `error:` line, as
does a parent whose weights do not fit this run's model.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import jax
import optax
from flax import nnx

from experiments.train.checkpoint import Checkpointer
from models.base.errors import ConfigError
from models.base.portable import lock_file, unlock_file
from models.base.rundir import BRANCH_POINTS_DIR, CHECKPOINTS_DIR, LOCK_FILE, RunDir, RunStatus
from models.config import ModelConfig
from models.flops import flops_per_token
from models.transformer import Transformer, split_params

POLL_S = 1.0
SIBLING_GRACE_S = 600.0  # a sweep's parent queued before its child starts within this long
SHAPE_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "tie_embeddings")


@dataclasses.dataclass(frozen=True)
class Parent:
    """Where a continued run started: summary.json's `init_from*` fields."""

    run: str  # the parent's directory name
    step: int
    tokens: int  # tokens the parent had trained on at that step (D_A of a continual law)
    flops: float
    fingerprint: str | None
    optimizer: bool

    def summary_fields(self) -> dict[str, Any]:
        return {
            "init_from": self.run,
            "init_from_step": self.step,
            "init_from_tokens": self.tokens,
            "init_from_flops": self.flops,
            "init_from_fingerprint": self.fingerprint,
            "init_from_optimizer": self.optimizer,
        }

    @classmethod
    def from_fields(cls, d: dict[str, Any] | None) -> "Parent | None":
        if not d:
            return None
        return cls(
            d["init_from"],
            int(d["init_from_step"]),
            int(d["init_from_tokens"]),
            float(d["init_from_flops"]),
            d.get("init_from_fingerprint"),
            bool(d.get("init_from_optimizer")),
        )


def _running(parent: Path) -> bool:
    """Whether a live process holds the parent's run lock (it is training right now)."""
    path = parent / LOCK_FILE
    if not path.is_file():
        return False
    with open(path, "a") as f:
        if lock_file(f, blocking=False):
            unlock_file(f)
            return False
    return True


def wait_for_parent(
    parent: Path, run_dir: Path, log: Callable[[str], None], grace_s: float = SIBLING_GRACE_S
) -> None:
    """Return once the parent is not training (see the module docstring); ConfigError when it
    ended diverged or failed."""
    sibling = parent.resolve().parent == Path(run_dir).resolve().parent
    t0, told = time.monotonic(), False
    while True:
        summary = RunDir(parent).read_summary()
        if summary is not None and summary.completed:
            return
        running = parent.is_dir() and _running(parent)
        if (
            summary is not None
            and not running
            and summary.run_status in (RunStatus.DIVERGED, RunStatus.FAILED)
        ):
            raise ConfigError(
                f"train.init_from={parent} ended {summary.status}; there are no weights to start from"
            )
        queued = sibling and summary is None and not running and time.monotonic() - t0 < grace_s
        if not (running or queued):
            return
        if not told:
            log(f"waiting for train.init_from={parent.name} to finish training")
            told = True
        time.sleep(POLL_S)


def _checkpoint_step(parent: Path, step: int | None) -> tuple[Path, int]:
    """(the checkpoint directory holding the parent's `step`, the step): its final checkpoint
    when `step` is None (the parent must have completed)."""
    if step is None:
        summary = RunDir(parent).read_summary()
        if summary is None or not summary.completed:
            status = "no summary.json" if summary is None else f"status {summary.status}"
            raise ConfigError(
                f"train.init_from={parent} has not completed ({status}); train it first, or give "
                "train.init_step=<a step it saved>"
            )
    for sub in (CHECKPOINTS_DIR, BRANCH_POINTS_DIR):
        d = parent / sub
        if not d.is_dir():
            continue
        ck = Checkpointer(parent, keep=None, subdir=sub)
        try:
            steps = ck.all_steps()
        finally:
            ck.close()
        if step is None and steps:
            return d, steps[-1]
        if step in steps:
            return d, step
    what = "no checkpoint" if step is None else f"no checkpoint at step {step}"
    raise ConfigError(f"train.init_from={parent} has {what} (train.init_step)")


def _param_shapes(model: ModelConfig) -> dict[str, tuple[int, ...]]:
    tree = jax.eval_shape(lambda: split_params(Transformer(model, rngs=nnx.Rngs(0)))[1])
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): tuple(x.shape) for p, x in leaves}


def check_shapes(parent: Path, parent_model: ModelConfig, model: ModelConfig) -> None:
    """One line naming the first parameter whose shape differs between the parent and this run."""
    a, b = _param_shapes(parent_model), _param_shapes(model)
    diff = next(
        (
            f"{k}: {a.get(k, 'absent')} in the parent, {b.get(k, 'absent')} here"
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ),
        None,
    )
    if diff is None:
        return
    sizes = lambda m: ", ".join(
        f"{k}={getattr(m, k)}"
        for k in SHAPE_KEYS
        if getattr(m, k) != getattr(model if m is parent_model else parent_model, k)
    )  # noqa: E731
    raise ConfigError(
        f"train.init_from={parent}: its weights do not fit this model ({diff}; parent {sizes(parent_model)} "
        f"vs here {sizes(model)}); use the parent's model.* sizes"
    )


def restart_schedule(opt_state: Any) -> Any:
    """`opt_state` with every optax schedule counter at 0 (Adam's moments and their own count
    kept): the learning rate follows this run's schedule from its step 0."""

    def visit(x: Any) -> Any:
        if isinstance(x, optax.ScaleByScheduleState):
            return x._replace(count=x.count * 0)
        if hasattr(x, "_fields"):
            return type(x)(*(visit(v) for v in x))
        if isinstance(x, (tuple, list)):
            return type(x)(visit(v) for v in x)
        if isinstance(x, dict):
            return {k: visit(v) for k, v in x.items()}
        return x

    return visit(opt_state)


def start_from_parent(
    spec: Any, ts: Any, run_dir: Path, log: Callable[[str], None]
) -> tuple[Any, Any, Parent]:
    """(params, opt_state, Parent) of a continued run's first session (module docstring)."""
    train = spec.train
    parent = Path(train.init_from).expanduser()
    if not parent.is_dir() and parent.resolve().parent != Path(run_dir).resolve().parent:
        raise ConfigError(f"train.init_from={parent}: no such run directory")
    wait_for_parent(parent, run_dir, log)
    if not parent.is_dir():
        raise ConfigError(f"train.init_from={parent}: no such run directory")
    ck_dir, step = _checkpoint_step(parent, train.init_step)
    ck = Checkpointer(parent, keep=None, subdir=ck_dir.name)
    try:
        meta = ck.read_meta(step)
        parent_model = ModelConfig(**meta["model"])
        check_shapes(parent, parent_model, spec.model)
        abstract_params, abstract_opt = ts.abstract_state()
        params, opt_state = ts.init(train.seed)
        if train.init_optimizer:
            try:
                params, opt_state, _ = ck.restore(step, abstract_params, abstract_opt)
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError(
                    f"train.init_from={parent}: its optimizer state does not fit this run's optimizer "
                    f"({str(e).splitlines()[0][:160]}); drop train.init_optimizer"
                ) from None
            opt_state = restart_schedule(opt_state)
        else:
            params = ck.restore_params(step, abstract_params)
    finally:
        ck.close()
    tokens = int(meta.get("tokens", 0))
    info = Parent(
        run=parent.resolve().name,
        step=int(step),
        tokens=tokens,
        flops=float(tokens * flops_per_token(parent_model)),
        fingerprint=meta.get("config_fingerprint"),
        optimizer=bool(train.init_optimizer),
    )
    log(
        f"continued from {info.run} at its step {step} ({tokens:,} tokens; weights"
        f"{' and optimizer state' if train.init_optimizer else ''})"
    )
    return params, opt_state, info
