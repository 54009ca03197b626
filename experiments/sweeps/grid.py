"""Turn a sweep preset (`sweep.*`) plus the base run config into a list of planned runs.

Pure planning, no Hydra and no JAX: `plan_sweep` returns one `PlannedRun` per run, the list of
Hydra overrides that makes it plus the figures that justify it (budget, N, FLOPs/token, tokens,
steps) and, for runs that must not be trained, the reason they are skipped. The Hydra sweeper
(hydra_plugins/scalelab_sweeps) launches the runs; tests check the plan directly.

Sweep kinds (`sweep.kind`):

* `isoflop`     -- every budget C in `sweep.budgets` x every ladder shape: D = C / F(shape), where
                   F is the training FLOPs per token from models/flops.py (attention included, so
                   not 6N). The run length is rounded to whole steps of `train.batch_size` x
                   `model.seq_len` tokens and the warmup is `sweep.warmup_fraction` of the run, so
                   the LR schedule (which decays over `train.tokens`) is stretched to each run.
                   `sweep.lr_probe` ({lrs, budgets}) adds every shape at other learning rates at
                   some budgets (an LR sweep per rung; the best run of each rung is fitted).

`sweep.hparams: HP.json` (every kind but layouts) sets each run's `optim.*` values and
`train.batch_size` from the laws `python -m analysis fit-hparams` fitted (experiments/sweeps/
hparams.py), at the run's N, D and C; runs that set the key themselves (the LR probe) keep theirs.
With `sweep.branches` a shape's runs share one value (their trunk's), taken at the geometric mean
D of its trained runs.
* `model_ladder` -- every ladder shape at a fixed `sweep.tokens_per_param` (D = r * N).
* `data_ladder`  -- the config's model at each token count in `sweep.tokens`.
* `layouts`      -- the config's model, unchanged length, over each mesh in `sweep.meshes`
                   (`{data, fsdp, tensor}`), to compare layout throughput.
* `data_limited` -- repeated data (Muennighoff et al. 2023): every ladder shape x every unique-
                   token count U in `sweep.unique_tokens` (absolute token counts) x every epoch
                   count e in `sweep.epochs`: `data.max_unique_tokens=U` (the first U tokens of
                   the training split) and D = e x U in whole steps, label `U<U>_ep<e>_<shape>`.
                   Repeating is the point, so `sweep.max_epochs` is null in its preset (if set,
                   it counts passes over each run's own U).
* `moe`          -- mixture of experts: every budget C in `sweep.budgets` x every ladder shape x
                   every expert count E in `sweep.experts` (E = 1: the dense shape, model.moe=null;
                   E > 1: `model.moe={experts: E, **sweep.moe}`, top-1 routing by default, so the
                   active size is the dense shape's): D = C / F, F the active training FLOPs per
                   token (router included, models/flops.py), label `C<C>_<shape>_E<E>`. The loss
                   against E per size and `fit --law moe` are the report's MoE section.
* `cpt`          -- continual pre-training (experiments/sweeps/continual.py): every shape
                   trained on the old corpus (`base_<shape>`), continued on the new one
                   (`train.init_from`) over replay ratios x new-token counts x re-warm peaks
                   (`cpt_<shape>_r<r>_D<D>[_p<peak>]`), and trained from scratch on the union
                   (`scratch_<shape>`): the `fit --law cpt` and `plan --continue-from` ladder.

Skip rules (logged with the reason, never silently dropped): fewer than `sweep.min_steps`
optimizer steps, or more training tokens than `sweep.max_epochs` passes over the corpus's
training split (the first `data.max_unique_tokens` tokens of it when that is set: the
sweeper's corpus size is the capped one, experiments/sweeps/corpus.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from experiments.sweeps import hparams as hp
from experiments.sweeps.continual import plan_cpt
from experiments.sweeps.ladder import LadderError, shapes_from_config
from models.base.errors import ConfigError
from models.config import ModelConfig, MoEConfig
from models.flops import flops_per_token, param_count
from sharding.costmodel.spec import moe_override
from sharding.layouts import ShardingConfig

# why an over-epoch run is excluded rather than trained: the IsoFLOP fit is Chinchilla's law on fresh data
REPEATED_NOTE = (
    "a repeated-data run needs the data-constrained law (the data_limited preset, fit --law "
    "data_constrained; docs/analysis.md, 'Repeated data')"
)
KINDS = ("isoflop", "model_ladder", "data_ladder", "layouts", "data_limited", "moe", "cpt")
CAP_KEY = "data.max_unique_tokens"  # the trainer's unique-token cap (experiments/train/corpus.py)


class PlanError(LadderError):
    """Bad sweep configuration (message names the `sweep.*` key)."""


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its overrides and the numbers behind them."""

    label: str  # human-readable part of the run directory name
    overrides: tuple[str, ...]  # Hydra overrides (model/train/optim/sharding/sweep.*)
    budget: float | None  # target compute C (isoflop) or None
    n_params: int
    flops_per_token: int
    tokens: int  # training tokens after rounding to whole steps
    steps: int
    skip: str | None = None  # why this run is not trained (None = train it)

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


def model_counts(model: Mapping[str, Any]) -> tuple[int, int]:
    """(total params, training FLOPs per token) of a model config mapping (models/flops.py)."""
    try:
        cfg = ModelConfig.from_mapping(model)
    except ConfigError as e:
        raise PlanError(str(e)) from None
    return param_count(cfg), flops_per_token(cfg)


def _length_overrides(tokens: int, sweep: Mapping[str, Any]) -> list[str]:
    out = [f"train.tokens={tokens}", "train.steps=null"]
    frac = sweep.get("warmup_fraction")
    if frac is not None:
        frac = float(frac)
        if not 0 <= frac < 1:
            raise PlanError(f"sweep.warmup_fraction must be in [0, 1) (got {frac})")
        out.append(f"optim.warmup_tokens={int(round(frac * tokens))}")
    return out


@dataclasses.dataclass(frozen=True)
class _Sweep:
    """What every kind of sweep plans from: the base config's model and batch, the `sweep` node,
    the corpus size for the epoch limit and the (params, FLOPs/token) counter."""

    model: dict[str, Any]
    train: Mapping[str, Any]
    sweep: Mapping[str, Any]
    corpus_tokens: int | None
    counts: Callable[[Mapping[str, Any]], tuple[int, int]]
    laws: Mapping[str, hp.PointLaw] = dataclasses.field(default_factory=dict)  # sweep.hparams
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the base config's `data` node
    data_parallel: int = 1  # the batch is a multiple of this
    base: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the whole base run config

    @property
    def tokens_per_step(self) -> int:
        return int(self.train["batch_size"]) * int(self.model["seq_len"])

    def length(self, tokens_wanted: float, batch: int | None = None) -> tuple[int, int]:
        """(steps, tokens) of a run of about `tokens_wanted` tokens, in whole steps."""
        tps = self.tokens_per_step if batch is None else batch * int(self.model["seq_len"])
        steps = max(0, int(round(tokens_wanted / tps)))
        return steps, steps * tps

    def skip_reason(self, steps: int, tokens: int, unique: int | None = None) -> str | None:
        """Why a run of this length is not worth training, or None. `unique`: the run's own
        `data.max_unique_tokens` (its epochs count passes over that prefix of the split)."""
        min_steps = int(self.sweep.get("min_steps", 20))
        if steps < min_steps:
            return (
                f"only {steps} steps of {tokens // max(steps, 1):,} tokens (< sweep.min_steps={min_steps}); "
                "the budget is too small for this shape"
            )
        max_epochs = self.sweep.get("max_epochs")
        if unique:  # passes over the run's own prefix of the split (all of it when the cap is larger)
            pool = min(unique, self.corpus_tokens) if self.corpus_tokens else unique
            of = f"{pool:,} unique tokens (data.max_unique_tokens)"
        else:
            pool, of = self.corpus_tokens, f"the {self.corpus_tokens or 0:,}-token training split"
        if max_epochs is not None and pool:
            epochs = tokens / pool
            if epochs > float(max_epochs):
                return (
                    f"{tokens:,} tokens = {epochs:.2f} epochs of {of} (> sweep.max_epochs={max_epochs}); "
                    f"{REPEATED_NOTE}"
                )
        return None

    def run(
        self,
        label: str,
        model: Mapping[str, Any],
        overrides: list[str],
        tokens_for: Callable[[int, int], float],
        budget: float | None = None,
        at: float | None = None,
        unique: int | None = None,
    ) -> PlannedRun:
        """A run of `model` for about `tokens_for(n_params, flops_per_token)` tokens: its shape
        overrides, its hyperparameters from `sweep.hparams` (evaluated at `at` tokens when given:
        one value for every branch of a trunk), then its length overrides (and the budget it
        belongs to), and the skip rule (epochs over `unique` tokens when the run has a cap)."""
        n, fpt = self.counts(model)
        wanted = tokens_for(n, fpt)
        d = wanted if at is None else at
        batch = None
        overrides = list(overrides)
        law = self.laws.get(hp.BATCH_KEY)
        if law is not None:
            batch = hp.round_batch(law(n, d, d * fpt), self.data_parallel)
            overrides.append(f"{hp.BATCH_KEY}={batch}")
        steps, tokens = self.length(wanted, batch)
        for key, law in self.laws.items():
            if key != hp.BATCH_KEY and not any(o.startswith(key + "=") for o in overrides):
                overrides.append(hp.value_override(key, law(n, d, d * fpt)))
        overrides = overrides + _length_overrides(tokens, self.sweep)
        if budget is not None:
            overrides.append(f"sweep.budget={budget:g}")
        return PlannedRun(
            label=label,
            overrides=tuple(overrides),
            budget=budget,
            n_params=n,
            flops_per_token=fpt,
            tokens=tokens,
            steps=steps,
            skip=self.skip_reason(steps, tokens, unique),
        )


def _budgets(sweep: Mapping[str, Any]) -> list[float]:
    budgets = sweep.get("budgets")
    if not budgets:
        raise PlanError("sweep.budgets is empty; give FLOP budgets, e.g. 'sweep.budgets=[1e11,3e11]'")
    budgets = [_positive("sweep.budgets[]", c) for c in budgets]
    if len(set(budgets)) != len(budgets):
        raise PlanError(f"sweep.budgets has repeated entries: {budgets}")
    return budgets


def _plan_isoflop(s: _Sweep) -> list[PlannedRun]:
    """Every budget x every ladder shape, D = C / F(shape)."""
    budgets = _budgets(s.sweep)
    shapes = shapes_from_config(s.sweep)
    at = _trunk_points(s, shapes, budgets) if s.laws and s.sweep.get("branches") else {}
    runs = [
        s.run(
            f"C{format_budget(c)}_{shape.label}",
            shape.apply(s.model),
            shape.overrides(),
            lambda n, fpt, c=c: c / fpt,
            budget=c,
            at=at.get(shape.label),
        )
        for c in sorted(budgets)
        for shape in shapes
    ]
    probe_budgets, lrs = _lr_probe(s.sweep, budgets)
    runs += [
        s.run(
            f"C{format_budget(c)}_{shape.label}_lr{lr:g}",
            shape.apply(s.model),
            shape.overrides() + [f"optim.lr={lr:g}"],
            lambda n, fpt, c=c: c / fpt,
            budget=c,
            at=at.get(shape.label),
        )
        for c in probe_budgets
        for shape in shapes
        for lr in lrs
    ]
    return runs


def _trunk_points(s: _Sweep, shapes: list, budgets: list[float]) -> dict[str, float]:
    """With `sweep.branches`, the token count each shape's hyperparameters are evaluated at: a
    trunk has one learning rate and batch for all its branches, so the laws are evaluated at the
    geometric mean D of the shape's runs that are trained (not skipped)."""
    out = {}
    for shape in shapes:
        model = shape.apply(s.model)
        d = [r.tokens for c in budgets if not (r := s.run("", model, [], lambda n, f, c=c: c / f)).skip]
        if d:
            out[shape.label] = math.exp(sum(math.log(t) for t in d) / len(d))
    return out


def _lr_probe(sweep: Mapping[str, Any], budgets: list[float]) -> tuple[list[float], list[float]]:
    """(budgets, learning rates) of `sweep.lr_probe`: every shape at each of those budgets is
    also trained at each of those learning rates (`optim.lr`), so each rung's run at the base
    learning rate has neighbours to be compared with; `collect` / `fit` / the report take the
    best run of each rung (analysis.core.best_runs) and show the LR sensitivity. `budgets`
    null = the smallest budget of the sweep (the cheapest runs)."""
    probe = sweep.get("lr_probe")
    if not probe:
        return [], []
    if not isinstance(probe, Mapping) or not probe.get("lrs"):
        raise PlanError("sweep.lr_probe needs `lrs`, e.g. 'sweep.lr_probe={lrs:[3e-3,3e-2]}'")
    lrs = [_positive("sweep.lr_probe.lrs[]", lr) for lr in probe["lrs"]]
    chosen = probe.get("budgets")
    if chosen is None:
        return [min(budgets)], lrs
    chosen = [_positive("sweep.lr_probe.budgets[]", c) for c in chosen]
    missing = [c for c in chosen if c not in budgets]
    if missing:
        raise PlanError(f"sweep.lr_probe.budgets {missing} are not in sweep.budgets {budgets}")
    return sorted(set(chosen)), lrs


MOE_KEYS = tuple(f.name for f in dataclasses.fields(MoEConfig) if f.name != "experts")


def _routed(experts: int, moe: Mapping[str, Any]) -> MoEConfig | None:
    """The routed layer of a run with `experts` experts and `sweep.moe`'s other keys (None at one
    expert: the dense model)."""
    if experts == 1:
        return None
    try:
        return MoEConfig.from_mapping({**moe, "experts": experts}).validate()
    except ConfigError as e:
        raise PlanError(f"sweep.moe at experts={experts}: {e}") from None


def _plan_moe(s: _Sweep) -> list[PlannedRun]:
    """Every budget x every ladder shape x every expert count of `sweep.experts`, D = C / F_active."""
    budgets = _budgets(s.sweep)
    experts = s.sweep.get("experts")
    if not experts:
        raise PlanError("sweep.experts is empty; give expert counts, e.g. 'sweep.experts=[1,2,4,8]'")
    whole = all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in experts)
    if not whole or len(set(experts)) != len(experts):
        raise PlanError(
            f"sweep.experts must be distinct whole numbers >= 1 (1: the dense model), got {list(experts)}"
        )
    moe = dict(s.sweep.get("moe") or {})
    unknown = sorted(set(moe) - set(MOE_KEYS))
    if unknown:
        raise PlanError(
            f"sweep.moe has unknown keys {unknown}: it sets the routed layer's {', '.join(MOE_KEYS)} "
            "(sweep.experts sets the experts)"
        )
    runs = []
    for c in budgets:
        for shape in shapes_from_config(s.sweep):
            for e in sorted(experts):
                routed = _routed(e, moe)
                model = shape.apply(s.model)
                model["moe"] = None if routed is None else dataclasses.asdict(routed)
                override = "model.moe=" + ("null" if routed is None else moe_override(routed))
                runs.append(
                    s.run(
                        f"C{format_budget(c)}_{shape.label}_E{e}",
                        model,
                        shape.overrides() + [override],
                        lambda n, fpt, c=c: c / fpt,
                        budget=c,
                    )
                )
    return runs


def _plan_model_ladder(s: _Sweep) -> list[PlannedRun]:
    """Every ladder shape at D = tokens_per_param * N."""
    r = _positive("sweep.tokens_per_param", s.sweep.get("tokens_per_param"))
    return [
        s.run(f"{shape.label}_r{r:g}", shape.apply(s.model), shape.overrides(), lambda n, fpt: r * n)
        for shape in shapes_from_config(s.sweep)
    ]


def _plan_data_ladder(s: _Sweep) -> list[PlannedRun]:
    """The config's model at each token count of `sweep.tokens`."""
    token_list = s.sweep.get("tokens")
    if not token_list:
        raise PlanError("sweep.tokens is empty; give token counts, e.g. 'sweep.tokens=[1e5,3e5,1e6]'")
    wanted = sorted(_positive("sweep.tokens[]", t) for t in token_list)
    return [s.run(f"D{format_budget(want)}", s.model, [], lambda n, fpt, w=want: w) for want in wanted]


def _unique_counts(s: _Sweep) -> list[int]:
    """`sweep.unique_tokens` as whole token counts, largest first; each must hold one batch of
    windows and fit in the training split (when its size is known)."""
    values = s.sweep.get("unique_tokens")
    if not values:
        raise PlanError(
            "sweep.unique_tokens is empty; give unique-token counts, "
            "e.g. 'sweep.unique_tokens=[1.6e6,4e5,1e5]'"
        )
    counts = sorted({int(round(_positive("sweep.unique_tokens[]", u))) for u in values}, reverse=True)
    if len(counts) != len(values) or len({format_budget(u) for u in counts}) != len(counts):
        raise PlanError(
            "sweep.unique_tokens has repeated entries (to 4 significant digits, as in the run labels): "
            f"{list(values)}"
        )
    batch = int(s.train["batch_size"]) * (int(s.model["seq_len"]) + 1)
    if counts[-1] < batch:
        raise PlanError(
            f"sweep.unique_tokens: {counts[-1]:,} is smaller than one batch of tokens (train.batch_size x "
            f"(model.seq_len+1) = {batch:,}); use at least {batch}"
        )
    if s.corpus_tokens and counts[0] > s.corpus_tokens:
        raise PlanError(
            f"sweep.unique_tokens: {counts[0]:,} is more than the {s.corpus_tokens:,}-token training split "
            "(it would train on the whole split); use smaller counts or a larger corpus"
        )
    return counts


def _plan_data_limited(s: _Sweep) -> list[PlannedRun]:
    """Every shape x every U of `sweep.unique_tokens` x every e of `sweep.epochs`: the run trains
    on the first U tokens of the split (`data.max_unique_tokens=U`) for e x U tokens. Largest
    first (shapes by FLOPs per token, then U, then e): runs of one (U, shape) pack together and
    the parallel launcher takes jobs in order, so the longest packs start first."""
    if (s.data or {}).get("max_unique_tokens") is not None:
        raise PlanError(
            f"the data_limited sweep sets {CAP_KEY} per run (sweep.unique_tokens); "
            f"leave {CAP_KEY} unset (got {s.data['max_unique_tokens']})"
        )
    epochs = s.sweep.get("epochs")
    if not epochs:
        raise PlanError("sweep.epochs is empty; give epoch counts, e.g. 'sweep.epochs=[1,2,4,8,16]'")
    epochs = sorted(_positive("sweep.epochs[]", e) for e in epochs)
    if len(set(epochs)) != len(epochs):
        raise PlanError(f"sweep.epochs has repeated entries: {epochs}")
    counts = _unique_counts(s)
    shapes = sorted(shapes_from_config(s.sweep), key=lambda sh: -s.counts(sh.apply(s.model))[1])
    return [
        s.run(
            f"U{format_budget(u)}_ep{e:g}_{shape.label}",
            shape.apply(s.model),
            shape.overrides() + [f"{CAP_KEY}={u}"],
            lambda n, fpt, w=e * u: w,
            unique=u,
        )
        for shape in shapes
        for u in counts
        for e in reversed(epochs)
    ]


def _plan_layouts(s: _Sweep) -> list[PlannedRun]:
    """The config's model and run length over each mesh of `sweep.meshes` (never skipped)."""
    meshes = s.sweep.get("meshes")
    if not meshes:
        raise PlanError(
            "sweep.meshes is empty; give meshes, e.g. [{data: 8}, {fsdp: 8}, {data: 2, tensor: 4}]"
        )
    n, fpt = s.counts(s.model)
    if s.train.get("steps"):
        steps = int(s.train["steps"])
        tokens = steps * s.tokens_per_step
    elif s.train.get("tokens"):
        steps, tokens = s.length(float(s.train["tokens"]))
    else:
        raise PlanError("the layouts sweep needs train.steps or train.tokens for its runs")
    runs = []
    default = dataclasses.asdict(ShardingConfig())
    for i, mesh in enumerate(meshes):
        unknown = set(mesh) - set(default) - {"micro_batches"}
        if unknown:
            raise PlanError(
                f"sweep.meshes[{i}] has unknown keys {sorted(unknown)}; use the sharding keys "
                f"({', '.join(default)}) and micro_batches (pipeline micro-batches)"
            )
        full = {k: type(default[k])(mesh.get(k, default[k])) for k in default}
        # data/fsdp/tensor always (stable run labels); newer keys only when not at their default
        axes = {k: v for k, v in full.items() if k in ("data", "fsdp", "tensor") or v != default[k]}
        overrides = [f"sharding.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in axes.items()]
        label = "-".join(_label(k, v) for k, v in axes.items())
        if mesh.get("micro_batches") is not None:
            overrides.append(f"train.micro_batches={int(mesh['micro_batches'])}")
            label += f"-mb{int(mesh['micro_batches'])}"
        runs.append(
            PlannedRun(
                label="mesh-" + label,
                overrides=tuple(overrides),
                budget=None,
                n_params=n,
                flops_per_token=fpt,
                tokens=tokens,
                steps=steps,
            )
        )
    return runs


# run-label spelling of the sharding keys added after the first layouts (their labels stay as they were)
_SHORT = {
    "context": "cp",
    "pipeline": "pp",
    "virtual_stages": "v",
    "sequence_parallel": "sp",
    "pipeline_schedule": "",
}


def _label(key: str, value: object) -> str:
    if isinstance(value, bool):
        return _SHORT.get(key, key) if value else f"no{_SHORT.get(key, key)}"
    return f"{_SHORT.get(key, key)}{value}"


_PLANNERS: dict[str, Callable[[_Sweep], list[PlannedRun]]] = {
    "isoflop": _plan_isoflop,
    "model_ladder": _plan_model_ladder,
    "data_ladder": _plan_data_ladder,
    "layouts": _plan_layouts,
    "data_limited": _plan_data_limited,
    "moe": _plan_moe,
    "cpt": plan_cpt,
}


def plan_sweep(
    run_cfg: Mapping[str, Any],
    sweep: Mapping[str, Any],
    corpus_tokens: int | None = None,
    counts: Callable[[Mapping[str, Any]], tuple[int, int]] = model_counts,
) -> list[PlannedRun]:
    """Planned runs for `sweep` (the `sweep` node) over the resolved base config `run_cfg`.

    `corpus_tokens` is the size of the training split (for the epoch limit; None = unknown, no
    limit applied). `counts(model_mapping) -> (n_params, flops_per_token)` defaults to
    models/flops.py.
    """
    kind = sweep.get("kind", "isoflop")
    if kind not in KINDS:
        raise PlanError(f"sweep.kind={kind!r} is not one of {list(KINDS)}")
    laws = {}
    # `probe` is resolved by the sweeper into two stages (probe budgets, then the rest at a file)
    if sweep.get("hparams") and sweep["hparams"] != hp.PROBE and kind != "layouts":
        try:
            laws = hp.read_laws(sweep["hparams"])
        except hp.HparamsError as e:
            raise PlanError(str(e)) from None
    return _PLANNERS[kind](
        _Sweep(
            model=dict(run_cfg["model"]),
            train=run_cfg["train"],
            sweep=sweep,
            corpus_tokens=corpus_tokens,
            counts=counts,
            laws=laws,
            data=dict(run_cfg.get("data") or {}),
            data_parallel=hp.data_parallel(run_cfg),
            base=run_cfg,
        )
    )
