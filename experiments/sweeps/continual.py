"""The `cpt` sweep: continual pre-training, planned (pure: no Hydra, no JAX).

For every shape (largest first, so the longest runs start first):

* `base_<shape>`: trained from scratch on the old corpus (`sweep.old_corpus`, stdlib) for
  `sweep.base_tokens` tokens (D_A), scored on the new one too (`data.eval_corpora`);
* `scratch_<shape>`: the retraining reference, from scratch on the union, D_A + max(D_B) tokens in
  the proportions of the two corpora's tokens (`data.mixture`);
* `cpt_<shape>_r<r>_D<D_B>`: the base continued (`train.init_from=<its run directory>`) on the
  mixture {new: 1 - r, old: r} for D_B tokens, for every replay ratio r of `sweep.replay` and every
  D_B of `sweep.new_tokens`, re-warmed (`sweep.rewarm_fraction` of the run, from the base's final
  learning rate, `optim.warmup_init`) to the first peak of `sweep.peaks` (a multiple of the base's
  `optim.lr`) and re-decayed by the base's schedule;
* `..._p<peak>`: the other peaks of `sweep.peaks`, at the replay ratios of `sweep.peak_probe`
  and the largest D_B only (how far to re-warm: the report's forgetting against the peak).

A continued run names its parent's directory, `<sweep.dir>/<label>_<id>`, so its own id includes
its parent's. The id is the sweeper's (experiments/sweeps/runs.py: run_id of the composed config):
the parent's overrides are merged into the base config here as Hydra merges them (numbers, null,
quoted strings and `{k: v}` mappings spelled so that both read them alike), and a child that does
not find its parent ends in one error line rather than training from nothing. Runs are launched
in plan order (bases first); a child whose parent is still training waits for it
(experiments/train/init.py).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any, Mapping

from omegaconf import OmegaConf

from experiments.sweeps.ladder import LadderError, shapes_from_config
from experiments.sweeps.runs import run_dirname, run_id


class CptPlanError(LadderError):
    """A bad `sweep.*` key of the cpt preset (the message names it)."""


def _number(name: str, v: Any, lo: float = 0.0, lo_open: bool = True, hi: float | None = None) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise CptPlanError(f"{name} must be a number (got {v!r})") from None
    bad = not math.isfinite(x) or (x <= lo if lo_open else x < lo) or (hi is not None and x >= hi)
    if bad:
        where = f"> {lo:g}" if lo_open else f">= {lo:g}"
        raise CptPlanError(f"{name} must be {where}{f' and < {hi:g}' if hi is not None else ''} (got {v!r})")
    return x


def _numbers(sweep: Mapping[str, Any], key: str, **kw: Any) -> list[float]:
    values = sweep.get(key)
    if not values:
        raise CptPlanError(f"sweep.{key} is empty")
    out = [_number(f"sweep.{key}[]", v, **kw) for v in values]
    if len(set(out)) != len(out):
        raise CptPlanError(f"sweep.{key} has repeated entries: {list(values)}")
    return out


def tokens_label(d: float) -> str:
    """2e5 -> `2e5`, 1.5e6 -> `1.5e6` (path-safe)."""
    exp = int(math.floor(math.log10(d)))
    mant = round(d / 10**exp, 3)
    return f"{mant:g}e{exp}"


def mixture_override(weights: Mapping[str, float]) -> str:
    """`data.mixture={cpp: 0.95, stdlib: 0.05}`: spaces after ':' so YAML and Hydra both read a
    mapping of floats."""
    return "data.mixture={" + ", ".join(f"{k}: {float(v)!r}" for k, v in weights.items()) + "}"


def job_config(base: Mapping[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The config a job of `overrides` composes to, from the resolved base config."""
    dotlist = [o.lstrip("+") for o in overrides if not o.lstrip("+").startswith("sweep.")]
    tree = {k: v for k, v in base.items() if k != "sweep"}  # not part of a run id
    merged = OmegaConf.merge(OmegaConf.create(tree), OmegaConf.from_dotlist(dotlist))
    return OmegaConf.to_container(merged, resolve=True)


@dataclasses.dataclass(frozen=True)
class Grid:
    """The `sweep.*` numbers of the cpt preset, checked."""

    base_tokens: float
    new_tokens: list[float]
    replay: list[float]
    peaks: list[float]
    probe_replay: list[float]
    rewarm_fraction: float
    old: str
    new: str
    sweep_dir: pathlib.Path

    @classmethod
    def of(cls, sweep: Mapping[str, Any]) -> "Grid":
        if not sweep.get("dir"):
            raise CptPlanError(
                "sweep.dir must name the sweep directory (the cpt preset sets ${hydra.sweep.dir})"
            )
        probe = sweep.get("peak_probe") or {}
        peaks = _numbers(sweep, "peaks")
        return cls(
            base_tokens=_number("sweep.base_tokens", sweep.get("base_tokens")),
            new_tokens=sorted(_numbers(sweep, "new_tokens")),
            replay=sorted(_numbers(sweep, "replay", lo_open=False, hi=1.0)),
            peaks=peaks,
            probe_replay=sorted(
                _number("sweep.peak_probe.replay[]", r, lo_open=False, hi=1.0)
                for r in probe.get("replay") or []
            )
            if len(peaks) > 1
            else [],
            rewarm_fraction=_number("sweep.rewarm_fraction", sweep.get("rewarm_fraction", 0.05), hi=1.0),
            old=str(sweep.get("old_corpus", "stdlib")),
            new=str(sweep.get("new_corpus", "cpp")),
            sweep_dir=pathlib.Path(str(sweep["dir"])).expanduser().resolve(),
        )


def plan_cpt(s: Any) -> list[Any]:
    """The planned runs (grid._Sweep `s` in, grid.PlannedRun out; module docstring)."""
    g = Grid.of(s.sweep)
    optim = dict(s.base.get("optim") or {})
    lr, floor = float(optim.get("lr", 3e-3)), float(optim.get("min_lr_ratio", 0.1))
    ignore = list(s.sweep.get("id_ignore") or [])
    shapes = sorted(shapes_from_config(s.sweep), key=lambda sh: -s.counts(sh.apply(s.model))[1])
    rewarm = dataclasses.replace(s, sweep={**s.sweep, "warmup_fraction": g.rewarm_fraction})
    bases, scratch, children = [], [], []
    d_max = max(g.new_tokens)
    for shape in shapes:
        model = shape.apply(s.model)
        base = s.run(
            f"base_{shape.label}",
            model,
            shape.overrides() + [f"data.eval_corpora=[{g.new}]"],
            lambda n, f: g.base_tokens,
        )
        bases.append(base)
        parent = g.sweep_dir / run_dirname(
            base.label, run_id(job_config(s.base, list(base.overrides)), ignore)
        )
        union = {g.new: d_max / (d_max + base.tokens), g.old: base.tokens / (d_max + base.tokens)}
        scratch.append(
            s.run(
                f"scratch_{shape.label}",
                model,
                shape.overrides() + [mixture_override(union)],
                lambda n, f: base.tokens + d_max,
            )
        )
        for k, peak in enumerate(g.peaks):
            replay, new_tokens = (g.replay, g.new_tokens) if k == 0 else (g.probe_replay, [d_max])
            for r in replay:
                for d in new_tokens:
                    ov = shape.overrides() + [
                        mixture_override({g.new: 1.0 - r, g.old: r}),
                        f"train.init_from='{parent}'",
                        f"optim.lr={float(f'{peak * lr:.6g}')!r}",
                        f"optim.warmup_init={float(f'{min(1.0, floor / peak):.6g}')!r}",
                    ]
                    label = f"cpt_{shape.label}_r{r:g}_D{tokens_label(d)}" + (f"_p{peak:g}" if k else "")
                    children.append(rewarm.run(label, model, ov, lambda n, f, d=d: d))
    return bases + scratch + children
