"""Turn a sweep preset (`sweep.*`) plus the base run config into a list of planned runs.

Pure planning, no Hydra and no JAX: each `PlannedRun` is the list of Hydra overrides that makes
one run, plus the figures that justify it (budget, N, FLOPs/token, tokens, steps) and, for runs
that must not be trained, the reason they are skipped. The Hydra sweeper
(hydra_plugins/scalelab_sweeps) launches the runs; tests check the plan directly.

Sweep kinds (`sweep.kind`):

* `isoflop`     -- every budget C in `sweep.budgets` x every ladder shape: D = C / F(shape), where
                   F is the training FLOPs per token from models/flops.py (attention included, so
                   not 6N). The run length is rounded to whole steps of `train.batch_size` x
                   `model.seq_len` tokens and the warmup is `sweep.warmup_fraction` of the run, so
                   the LR schedule (which decays over `train.tokens`) is stretched to each run.
* `model_ladder` -- every ladder shape at a fixed `sweep.tokens_per_param` (D = r * N).
* `data_ladder`  -- the config's model at each token count in `sweep.tokens`.
* `layouts`      -- the config's model, unchanged length, over each mesh in `sweep.meshes`
                   (`{data, fsdp, tensor}`), to compare layout throughput.

Skip rules (logged with the reason, never silently dropped): fewer than `sweep.min_steps`
optimizer steps, or more training tokens than `sweep.max_epochs` passes over the corpus's
training split.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from experiments.sweeps.ladder import LadderError, Shape, shapes_from_config

KINDS = ("isoflop", "model_ladder", "data_ladder", "layouts")


class PlanError(LadderError):
    """Bad sweep configuration (message names the `sweep.*` key)."""


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its overrides and the numbers behind them."""

    label: str                      # human-readable part of the run directory name
    overrides: tuple[str, ...]      # Hydra overrides (model/train/optim/sharding/sweep.*)
    budget: float | None            # target compute C (isoflop) or None
    n_params: int
    flops_per_token: int
    tokens: int                     # training tokens after rounding to whole steps
    steps: int
    skip: str | None = None         # why this run is not trained (None = train it)

    @property
    def flops(self) -> float:
        return float(self.flops_per_token) * self.tokens


def format_budget(c: float) -> str:
    """Compact, path-safe budget label: 3e11 -> `3e11`, 1.5e12 -> `1.5e12`."""
    exp = int(math.floor(math.log10(c)))
    mant = round(c / 10**exp, 3)
    if mant >= 10:
        mant, exp = mant / 10, exp + 1
    m = f"{mant:g}"
    return f"{m}e{exp}"


def _positive(name: str, v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise PlanError(f"{name} must be a positive number (got {v!r})") from None
    if not math.isfinite(x) or x <= 0:
        raise PlanError(f"{name} must be a positive number (got {v!r})")
    return x


def _model_counts(model: Mapping[str, Any]) -> tuple[int, int]:
    """(total params, training FLOPs per token) of a model config mapping."""
    from models.config import ModelConfig
    from models.base.errors import ConfigError
    from models.flops import flops_per_token, param_count

    try:
        cfg = ModelConfig.from_mapping(model)
    except ConfigError as e:
        raise PlanError(str(e)) from None
    return param_count(cfg), flops_per_token(cfg)


def _length(tokens_wanted: float, tokens_per_step: int) -> tuple[int, int]:
    steps = max(0, int(round(tokens_wanted / tokens_per_step)))
    return steps, steps * tokens_per_step


def _skip_reason(steps: int, tokens: int, sweep: Mapping[str, Any],
                 corpus_tokens: int | None, tokens_per_step: int) -> str | None:
    min_steps = int(sweep.get("min_steps", 20))
    if steps < min_steps:
        return (f"only {steps} steps of {tokens_per_step} tokens (< sweep.min_steps={min_steps}); "
                "the budget is too small for this shape")
    max_epochs = sweep.get("max_epochs")
    if max_epochs is not None and corpus_tokens:
        epochs = tokens / corpus_tokens
        if epochs > float(max_epochs):
            return (f"{tokens:,} tokens = {epochs:.2f} epochs of the {corpus_tokens:,}-token "
                    f"training split (> sweep.max_epochs={max_epochs})")
    return None


def _length_overrides(tokens: int, sweep: Mapping[str, Any]) -> list[str]:
    out = [f"train.tokens={tokens}", "train.steps=null"]
    frac = sweep.get("warmup_fraction")
    if frac is not None:
        frac = float(frac)
        if not 0 <= frac < 1:
            raise PlanError(f"sweep.warmup_fraction must be in [0, 1) (got {frac})")
        out.append(f"optim.warmup_tokens={int(round(frac * tokens))}")
    return out


def plan(run_cfg: Mapping[str, Any], sweep: Mapping[str, Any],
         corpus_tokens: int | None = None,
         counts: Callable[[Mapping[str, Any]], tuple[int, int]] = _model_counts) -> list[PlannedRun]:
    """Planned runs for `sweep` (the `sweep` node) over the resolved base config `run_cfg`.

    `corpus_tokens` is the size of the training split (for the epoch limit; None = unknown, no
    limit applied). `counts(model_mapping) -> (n_params, flops_per_token)` defaults to
    models/flops.py.
    """
    kind = sweep.get("kind", "isoflop")
    if kind not in KINDS:
        raise PlanError(f"sweep.kind={kind!r} is not one of {list(KINDS)}")
    model = dict(run_cfg["model"])
    train = run_cfg["train"]
    batch = int(train["batch_size"])
    tokens_per_step = batch * int(model["seq_len"])
    runs: list[PlannedRun] = []

    if kind == "isoflop":
        budgets = sweep.get("budgets")
        if not budgets:
            raise PlanError("sweep.budgets is empty; give FLOP budgets, e.g. 'sweep.budgets=[1e11,3e11]'")
        budgets = [_positive("sweep.budgets[]", c) for c in budgets]
        if len(set(budgets)) != len(budgets):
            raise PlanError(f"sweep.budgets has repeated entries: {budgets}")
        shapes = shapes_from_config(sweep)
        for c in sorted(budgets):
            for shape in shapes:
                n, fpt = counts(shape.apply(model))
                steps, tokens = _length(c / fpt, tokens_per_step)
                runs.append(PlannedRun(
                    label=f"C{format_budget(c)}_{shape.label}",
                    overrides=tuple(shape.overrides() + _length_overrides(tokens, sweep)
                                    + [f"sweep.budget={c:g}"]),
                    budget=c, n_params=n, flops_per_token=fpt, tokens=tokens, steps=steps,
                    skip=_skip_reason(steps, tokens, sweep, corpus_tokens, tokens_per_step)))
    elif kind == "model_ladder":
        r = _positive("sweep.tokens_per_param", sweep.get("tokens_per_param"))
        for shape in shapes_from_config(sweep):
            n, fpt = counts(shape.apply(model))
            steps, tokens = _length(r * n, tokens_per_step)
            runs.append(PlannedRun(
                label=f"{shape.label}_r{r:g}",
                overrides=tuple(shape.overrides() + _length_overrides(tokens, sweep)),
                budget=None, n_params=n, flops_per_token=fpt, tokens=tokens, steps=steps,
                skip=_skip_reason(steps, tokens, sweep, corpus_tokens, tokens_per_step)))
    elif kind == "data_ladder":
        token_list = sweep.get("tokens")
        if not token_list:
            raise PlanError("sweep.tokens is empty; give token counts, e.g. 'sweep.tokens=[1e5,3e5,1e6]'")
        n, fpt = counts(model)
        for want in sorted(_positive("sweep.tokens[]", t) for t in token_list):
            steps, tokens = _length(want, tokens_per_step)
            runs.append(PlannedRun(
                label=f"D{format_budget(want)}",
                overrides=tuple(_length_overrides(tokens, sweep)),
                budget=None, n_params=n, flops_per_token=fpt, tokens=tokens, steps=steps,
                skip=_skip_reason(steps, tokens, sweep, corpus_tokens, tokens_per_step)))
    else:  # layouts
        meshes = sweep.get("meshes")
        if not meshes:
            raise PlanError("sweep.meshes is empty; give meshes, e.g. [{data: 8}, {fsdp: 8}, {data: 2, tensor: 4}]")
        n, fpt = counts(model)
        if train.get("steps"):
            steps = int(train["steps"])
            tokens = steps * tokens_per_step
        elif train.get("tokens"):
            steps, tokens = _length(float(train["tokens"]), tokens_per_step)
        else:
            raise PlanError("the layouts sweep needs train.steps or train.tokens for its runs")
        for i, mesh in enumerate(meshes):
            unknown = set(mesh) - {"data", "fsdp", "tensor"}
            if unknown:
                raise PlanError(f"sweep.meshes[{i}] has unknown axes {sorted(unknown)}; use data, fsdp, tensor")
            axes = {"data": 1, "fsdp": 1, "tensor": 1, **{k: int(v) for k, v in mesh.items()}}
            runs.append(PlannedRun(
                label="mesh-" + "-".join(f"{k}{v}" for k, v in axes.items()),
                overrides=tuple(f"sharding.{k}={v}" for k, v in axes.items()),
                budget=None, n_params=n, flops_per_token=fpt, tokens=tokens, steps=steps))
    return runs
