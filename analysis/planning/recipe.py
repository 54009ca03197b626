"""The training recipe of a planned run: learning rate, batch size, warm-up and schedule.

A plan's model shape and layout are only half of a run: trained at an untuned learning rate and
batch, the recommended run misses the loss its law predicts (Porian et al. 2024 trace most of the
Kaplan-Chinchilla disagreement to exactly that). `plan --hparams HP.json` takes the fitted laws
of `python -m analysis fit-hparams` (`analysis.hparams.load_hparams`) and states, for the run it
recommends:

* the learning rate: the `optim.lr` law's optimum at the run's (N, D), with its 90% prediction
  interval (bootstrap over rungs plus the rungs' scatter around the law);
* the batch: the `train.batch_size` law's optimum in sequences (the config key's unit), which the
  planner then searches layouts for (`plan`: global batches inside the law's 90% interval, the
  nearest multiple of data-parallel x micro-batch); without a batch law, or with an explicit
  `--batch-tokens`, the plan's own batch, said so;
* warm-up and schedule: what `python -m experiments.train` does when the overrides leave them
  unset: the `optim.*` defaults of `experiments.train.config.OptimConfig` (conf/optim/adamw.yaml,
  the default optimizer group), read from the schema so the plan follows them if they change.
  They are not fitted: the laws hold for the schedule the swept runs were trained with.

Without `--hparams` the recipe is `untuned`: one line saying so, and no `optim.lr` override.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
from typing import Any, Mapping

LR_KEY = "optim.lr"
BATCH_KEY = "train.batch_size"
# optim.warmup_tokens = null warms up over 5% of the run's steps (experiments/train/config.py,
# `_warmup_steps`; the schema has no named constant for it)
DEFAULT_WARMUP_FRACTION = 0.05
UNTUNED_NOTE = (
    "no --hparams HP.json, so the run keeps the trainer's default learning rate "
    "(optim.lr={lr:g}) at every size and the plan's --batch-tokens; fit the laws with "
    "`python -m analysis fit-hparams` and pass --hparams"
)

BATCH_UNIT_NOTE = (
    "the batch law counts sequences (train.batch_size) of the runs it was fitted on; if their "
    "model.seq_len differs from this plan's {seq_len}, scale the batch to keep its tokens"
)

# A law evaluated this many decades (or more) beyond its largest fitted rung gets a note (x1.26:
# less is within the spread of the rungs themselves)
EXTRAPOLATION_NOTED = 0.1


class BatchSource(str, enum.Enum):
    """Where a recipe's batch size comes from (JSON: recipe.batch_size.source)."""

    LAW = "law"  # the batch law's optimum, rounded to the layout
    PLAN = "plan"  # the plan's own --batch-tokens: the laws have no train.batch_size
    FLAG = "flag"  # --batch-tokens given explicitly: it wins over the batch law
    FALLBACK = "fallback"  # no layout inside the batch law's interval fits: the plan's own


@dataclasses.dataclass(frozen=True)
class TrainerDefaults:
    """The trainer's `optim.*` defaults the recipe states (experiments.train.config.OptimConfig)."""

    lr: float  # optim.lr, the untuned learning rate
    schedule: str  # optim.schedule after the linear warm-up
    min_lr_ratio: float  # final lr / peak lr of the decay
    decay_fraction: float  # wsd only: last fraction of the run spent decaying
    warmup_fraction: float | None  # optim.warmup_tokens = null: this fraction of the run
    warmup_tokens: float | None  # a fixed optim.warmup_tokens default instead (None: the fraction)
    source: str  # where these come from, for the text

    def warmup(self, tokens: float) -> int:
        """Warm-up tokens of a run of `tokens`."""
        if self.warmup_tokens is not None:
            return int(self.warmup_tokens)
        return int(round(self.warmup_fraction * tokens))

    def warmup_text(self, tokens: float) -> str:
        how = (
            "optim.warmup_tokens default"
            if self.warmup_tokens is not None
            else f"{100 * self.warmup_fraction:g}% of the run"
        )
        return f"{_tokens(self.warmup(tokens))} tokens ({how})"


@functools.lru_cache(maxsize=1)
def trainer_defaults() -> TrainerDefaults:
    """The `optim.*` defaults of the trainer's schema."""
    from experiments.train.config import OptimConfig  # deferred: Hydra, only when a plan is made

    d = {f.name: f.default for f in dataclasses.fields(OptimConfig)}
    fixed = d["warmup_tokens"]
    return TrainerDefaults(
        lr=float(d["lr"]),
        schedule=str(d["schedule"]),
        min_lr_ratio=float(d["min_lr_ratio"]),
        decay_fraction=float(d["decay_fraction"]),
        warmup_fraction=DEFAULT_WARMUP_FRACTION if fixed is None else None,
        warmup_tokens=None if fixed is None else float(fixed),
        source="the trainer's defaults (experiments/train/config.py OptimConfig, conf/optim/adamw.yaml)",
    )


def swept_settings(context: dict) -> TrainerDefaults:
    """The schedule and warm-up the laws were fitted under (HP.json `context`: the settings every
    swept run shared), falling back to the trainer's defaults for what the file does not record."""
    d = trainer_defaults()
    if not context:
        return d
    frac = context.get("warmup_fraction")
    return dataclasses.replace(
        d,
        schedule=str(context.get("optim.schedule", d.schedule)),
        min_lr_ratio=float(context.get("optim.min_lr_ratio", d.min_lr_ratio)),
        decay_fraction=float(context.get("optim.decay_fraction", d.decay_fraction)),
        warmup_fraction=d.warmup_fraction if frac is None else float(frac),
        warmup_tokens=d.warmup_tokens if frac is None else None,
        source="the swept runs' own settings (HP.json context; the laws hold under them)",
    )


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One law's optimum at the planned run, with its 90% prediction interval."""

    value: float
    lo: float
    hi: float
    law: str  # the law as text, e.g. "lr* = 0.55 · N^-0.293"

    def interval(self) -> list[float]:
        return [self.lo, self.hi]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Learning rate, batch, warm-up and schedule of one planned run (`Plan.recipe`).

    `tuned` is False without hyperparameter laws (then only `note` means anything). `lr` and
    `batch` are the laws' optima at (`n_params`, `tokens`); `batch_sequences` is the global batch
    the planned layout runs (the law's rounded to the layout, or the plan's own: `batch_source`)."""

    tuned: bool
    n_params: float  # N the laws were evaluated at
    tokens: float  # D: the run's training tokens
    seq_len: int
    batch_sequences: int  # the planned layout's global batch, sequences
    batch_source: BatchSource
    defaults: TrainerDefaults
    source: str | None = None  # the HP.json path
    lr: Prediction | None = None
    batch: Prediction | None = None  # the batch law's optimum, sequences (None: no batch law)
    others: Mapping[str, Prediction] = dataclasses.field(default_factory=dict)  # further optim.* laws
    notes: tuple[str, ...] = ()

    @property
    def batch_tokens(self) -> int:
        return self.batch_sequences * self.seq_len

    @property
    def warmup_tokens(self) -> int:
        return self.defaults.warmup(self.tokens)

    def untuned_note(self) -> str:
        return "recipe untuned: " + UNTUNED_NOTE.format(lr=self.defaults.lr)

    def schedule_text(self) -> str:
        d = self.defaults
        shape = {
            "cosine": f"cosine decay to {d.min_lr_ratio:g} x peak",
            "linear": f"linear decay to {d.min_lr_ratio:g} x peak",
            "wsd": f"constant, then decay to {d.min_lr_ratio:g} x peak over the last {d.decay_fraction:g}",
            "constant": "constant",
        }.get(d.schedule, d.schedule)
        return f"{d.schedule} ({shape})"

    def batch_text(self) -> str:
        """Why the batch is what it is, in words."""
        if self.batch_source == BatchSource.LAW:
            return "the batch law's optimum, rounded to the layout's data-parallel x micro-batch"
        if self.batch_source == BatchSource.FLAG:
            return "--batch-tokens, given explicitly (it wins over the batch law)"
        if self.batch_source == BatchSource.FALLBACK:
            return "the plan's own --batch-tokens: no layout inside the batch law's interval fits"
        return "the plan's own --batch-tokens; the laws have no train.batch_size"

    def overrides(self) -> list[str]:
        """The `python -m experiments.train` overrides the laws add (the batch is the layout's)."""
        if not self.tuned:
            return []
        out = [f"{LR_KEY}={_num(self.lr.value)}"] if self.lr is not None else []
        return out + [f"{k}={_num(p.value)}" for k, p in self.others.items()]

    def as_dict(self) -> dict[str, Any]:
        if not self.tuned:
            return {"tuned": False, "note": self.untuned_note()}
        d = self.defaults
        return {
            "tuned": True,
            "source": self.source,
            "N": self.n_params,
            "D": self.tokens,
            "lr": _pred_dict(
                self.lr, f"the trainer's default optim.lr={d.lr:g}: HP.json has no optim.lr law"
            ),
            "batch_size": {
                "sequences": self.batch_sequences,
                "tokens": self.batch_tokens,
                "seq_len": self.seq_len,
                "interval": self.batch.interval() if self.batch else None,
                "interval_tokens": [v * self.seq_len for v in self.batch.interval()] if self.batch else None,
                "law_value": self.batch.value if self.batch else None,
                "law": self.batch.law if self.batch else None,
                "source": self.batch_source.value,
                "note": self.batch_text(),
            },
            "warmup_tokens": self.warmup_tokens,
            "warmup_fraction": d.warmup_fraction,
            "schedule": d.schedule,
            "min_lr_ratio": d.min_lr_ratio,
            "decay_fraction": d.decay_fraction if d.schedule == "wsd" else None,
            "schedule_source": d.source,
            "others": {k: _pred_dict(p, "") for k, p in self.others.items()},
            "notes": list(self.notes),
        }

    def text_lines(self) -> list[str]:
        """The plan's recipe lines (one line when untuned)."""
        if not self.tuned:
            return [self.untuned_note()]
        lr = (
            f"lr {_num(self.lr.value)} [{_num(self.lr.lo)}, {_num(self.lr.hi)}] ({self.lr.law})"
            if self.lr
            else f"lr {self.defaults.lr:g} (trainer default: no optim.lr law)"
        )
        law_b = (
            f"; law {self.batch.value:.4g} [{self.batch.lo:.4g}, {self.batch.hi:.4g}] sequences "
            f"({self.batch.law})"
            if self.batch
            else ""
        )
        out = [
            f"recipe (tuned, {self.source}; 90% prediction intervals): {lr}",
            f"recipe: batch {self.batch_sequences} sequences = {_tokens(self.batch_tokens)} tokens "
            f"({self.batch_text()}{law_b})",
            f"recipe: warm-up {self.defaults.warmup_text(self.tokens)}, schedule {self.schedule_text()}: "
            f"{self.defaults.source}, not fitted",
        ]
        out += [
            f"recipe: {k} {_num(p.value)} [{_num(p.lo)}, {_num(p.hi)}] ({p.law})"
            for k, p in self.others.items()
        ]
        return out + [f"note: {n}" for n in self.notes]

    def markdown(self) -> list[str]:
        """The planning section's recipe: a table (tuned) or the untuned line."""
        if not self.tuned:
            return [f"**Recipe untuned**: {UNTUNED_NOTE.format(lr=self.defaults.lr)}."]
        rows = [
            ["learning rate (optim.lr)", *_pred_cells(self.lr, f"{self.defaults.lr:g}", "trainer default")],
            [
                "batch (train.batch_size)",
                f"{self.batch_sequences} sequences",
                _iv(self.batch, "{:.4g}") + (" sequences" if self.batch else ""),
                self.batch_text() + (f"; {self.batch.law}" if self.batch else ""),
            ],
            [
                "batch, tokens",
                _tokens(self.batch_tokens),
                "[" + ", ".join(_tokens(v * self.seq_len) for v in self.batch.interval()) + "]"
                if self.batch
                else "–",
                f"sequences x seq_len {self.seq_len}",
            ],
            ["warm-up", self.defaults.warmup_text(self.tokens), "–", self.defaults.source],
            ["schedule", self.schedule_text(), "–", self.defaults.source],
        ]
        rows += [[k, *_pred_cells(p, "", "")] for k, p in self.others.items()]
        out = [
            f"Recipe (tuned by the hyperparameter laws `{self.source}`, at N = {self.n_params:.3g}, "
            f"D = {self.tokens:.3g}; 90% prediction intervals):",
            "",
            "| | value | 90% interval | from |",
            "|---|---|---|---|",
        ]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return out + [""] + [f"- {n}" for n in self.notes]


def _num(v: float) -> str:
    """A hyperparameter value for an override or a line: 4 significant digits."""
    return f"{v:.4g}"


def _tokens(v: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def _iv(p: Prediction | None, fmt: str) -> str:
    return "–" if p is None else f"[{fmt.format(p.lo)}, {fmt.format(p.hi)}]"


def _pred_cells(p: Prediction | None, fallback: str, why: str) -> list[str]:
    if p is None:
        return [fallback, "–", why]
    return [_num(p.value), f"[{_num(p.lo)}, {_num(p.hi)}]", p.law]


def _pred_dict(p: Prediction | None, missing: str) -> dict[str, Any]:
    if p is None:
        return {"value": None, "interval": None, "law": None, "note": missing}
    return {"value": p.value, "interval": p.interval(), "law": p.law}


def predict(laws, param: str, n_params: float, tokens: float) -> Prediction | None:
    """`param`'s optimum at (N, D) from `laws` (an `analysis.hparams.HparamLaws`), None without a
    law for it. C is left to the laws (their own C / 6ND ratio, the convention they were fitted in)."""
    if laws is None or param not in laws.params:
        return None
    v, lo, hi = laws.predict(param, float(n_params), float(tokens))
    return Prediction(v, lo, hi, laws.describe(param))


def extrapolation_notes(
    ranges: Mapping[str, tuple[float, float]], n_params: float, tokens: float
) -> list[str]:
    """One note per law evaluated beyond its fitted rungs: `ranges` maps a param to the largest
    (N, D) it was fitted on (from HP.json's `rungs`)."""
    out = []
    for param, (n_max, d_max) in ranges.items():
        far = [
            f"{name} = {v:.3g} is {math.log10(v / top):.1f} decades beyond its largest rung ({top:.3g})"
            for name, v, top in (("N", n_params, n_max), ("D", tokens, d_max))
            if top > 0 and math.log10(v / top) >= EXTRAPOLATION_NOTED
        ]
        if far:
            out.append(
                f"{param} law extrapolated: "
                + "; ".join(far)
                + " (its 90% interval widens by the measured drift; the form is unchecked there)"
            )
    return out


def fitted_ranges(raw: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """{param: (largest N, largest D)} of the rungs each law was fitted on (HP.json `rungs`, those
    without an edge/flat flag); {} when the JSON has no usable rungs."""
    out: dict[str, tuple[float, float]] = {}
    for r in raw.get("rungs") or []:
        try:
            p, n, d = str(r["param"]), float(r["N"]), float(r["D"])
        except (KeyError, TypeError, ValueError):
            continue
        if r.get("flag"):
            continue
        n0, d0 = out.get(p, (0.0, 0.0))
        out[p] = (max(n0, n), max(d0, d))
    return out


def untuned(n_params: float, tokens: float, seq_len: int, batch_sequences: int) -> Recipe:
    """The recipe of a plan without hyperparameter laws."""
    return Recipe(False, n_params, tokens, seq_len, batch_sequences, BatchSource.PLAN, trainer_defaults())


@dataclasses.dataclass(frozen=True)
class HparamSet:
    """Hyperparameter laws read for planning: the laws, the file they came from, their rungs' reach."""

    laws: Any  # analysis.hparams.HparamLaws
    source: str  # the HP.json path, as given
    ranges: Mapping[str, tuple[float, float]]  # param -> (largest N, largest D) fitted

    @property
    def has_batch(self) -> bool:
        return BATCH_KEY in self.laws.params

    def batch(self, n_params: float, tokens: float) -> Prediction | None:
        return predict(self.laws, BATCH_KEY, n_params, tokens)


def load_hparam_set(path) -> HparamSet:
    """An HP.json for planning; one-line AnalysisError for a missing or malformed file
    (`analysis.hparams.load_hparams`)."""
    from analysis.hparams import load_hparams  # deferred: pandas only when an HP.json is read

    laws = load_hparams(path)
    with open(path) as f:  # readable: load_hparams just parsed it
        raw = json.load(f)
    return HparamSet(laws, str(path), fitted_ranges(raw))


def tuned(
    hp: HparamSet,
    n_params: float,
    tokens: float,
    seq_len: int,
    batch_sequences: int,
    batch_source: BatchSource,
    notes: tuple[str, ...] = (),
) -> Recipe:
    """The recipe of a run of `n_params` on `tokens` whose layout runs `batch_sequences`: every
    law's optimum there. optim.* laws other than the learning rate are emitted too; laws of other
    keys are named in a note (the plan does not set them)."""
    others = {
        p: predict(hp.laws, p, n_params, tokens)
        for p in hp.laws.params
        if p.startswith("optim.") and p != LR_KEY
    }
    said = list(notes) + extrapolation_notes(hp.ranges, n_params, tokens)
    swept_len = hp.laws.context.get("model.seq_len")
    if hp.has_batch and (swept_len is None or int(swept_len) != seq_len):
        # the batch law counts sequences of the swept runs' length (unknown, or not this plan's)
        said.append(BATCH_UNIT_NOTE.format(seq_len=seq_len))
    unused = [p for p in hp.laws.params if not p.startswith("optim.") and p != BATCH_KEY]
    if unused:
        said.append(
            f"laws of {', '.join(unused)} are not used by the plan (it sets optim.* and train.batch_size)"
        )
    return Recipe(
        tuned=True,
        n_params=n_params,
        tokens=tokens,
        seq_len=seq_len,
        batch_sequences=batch_sequences,
        batch_source=batch_source,
        defaults=swept_settings(hp.laws.context),
        source=hp.source,
        lr=predict(hp.laws, LR_KEY, n_params, tokens),
        batch=hp.batch(n_params, tokens),
        others=others,
        notes=tuple(said),
    )
