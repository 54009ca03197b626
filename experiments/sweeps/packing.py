"""Which runs of a sweep share a program (packs), and WSD trunks with cooldown branches.

Pure planning (no JAX), used by the sweeper (hydra_plugins/scalelab_sweeps/sweeper.py)
and the packing launcher:

* `pack_groups(jobs, k)`: runs whose resolved configs are equal once the train step's inputs
  are set aside (`PACKABLE_KEYS`: the optimizer scalars, the seed and the run length) compile
  to one program; each group is cut into packs of at most `k` runs. A run alone in its group is
  not packed (logged by the caller), never an error.
* `plan_branches(runs, decay_fraction)`: for the runs of one shape at several budgets under
  `optim.schedule=wsd`, one trunk at constant LR (same warmup in tokens for all) trained to the
  latest decay start, and each budget's run branching off it there: a WSD run of length T decays
  over its last round(decay_fraction * T) steps (experiments/train/optimizer.py), so its steps
  before that are the trunk's own. FLOPs: the trunk plus every branch's decay, against every run
  trained alone (3 doubling budgets at decay_fraction 0.2: (0.8*4 + 0.2*7) / 7 = 0.66).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Mapping, Sequence

from experiments.train.config import PACKABLE_OPTIM_KEYS
from experiments.train.config import wsd_decay_steps as decay_steps

# Config keys the train step takes as inputs, and the seed and run length: runs that differ only
# in them compile to one program.
PACKABLE_KEYS = tuple(f"optim.{k}" for k in PACKABLE_OPTIM_KEYS) + (
    "train.seed",
    "train.tokens",
    "train.steps",
    "train.branch_from",
    "train.branch_step",
    "train.branch_points",
)
# Keys that do not change the program either: where a run's outputs go and how often it reports.
_BOOKKEEPING = ("sweep", "hydra", "tracker")


def _without(cfg: Mapping[str, Any], dotted: Sequence[str]) -> dict[str, Any]:
    tree = copy.deepcopy(dict(cfg))
    for key in _BOOKKEEPING:
        tree.pop(key, None)
    for d in dotted:
        node: Any = tree
        *parents, last = d.split(".")
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return tree


def program_group(cfg: Mapping[str, Any]) -> str:
    """The key of the compiled program a run config needs: equal keys can pack."""
    return json.dumps(_without(cfg, PACKABLE_KEYS), sort_keys=True, default=str)


def pack_groups(configs: Sequence[Mapping[str, Any]], k: int) -> list[list[int]]:
    """Indices of `configs` in packs of at most `k` runs of one program (in first-seen order);
    runs with no partner come back as packs of one."""
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(program_group(cfg), []).append(i)
    out: list[list[int]] = []
    for idx in groups.values():
        out += [idx[j : j + k] for j in range(0, len(idx), k)]
    return out


@dataclasses.dataclass(frozen=True)
class BranchPlan:
    """One shape's trunk and branches: indices into the runs given to `plan_branches`."""

    members: tuple[int, ...]  # the runs (their indices), shortest first
    branch_steps: tuple[int, ...]  # each run's decay start = its branch point on the trunk
    trunk_steps: int  # the trunk's length: the latest branch point
    warmup_tokens: int  # the common warmup of the trunk and every branch


def plan_branches(
    steps: Sequence[int], tokens_per_step: int, decay_fraction: float, warmup_fraction: float | None
) -> BranchPlan | None:
    """The trunk of runs of one shape with `steps` steps each (None when fewer than two runs, or
    when a branch point would fall inside the common warmup). The warmup is `warmup_fraction`
    of the shortest run (default 5%, as a single run's)."""
    if len(steps) < 2:
        return None
    order = sorted(range(len(steps)), key=lambda i: steps[i])
    shortest = steps[order[0]]
    frac = 0.05 if warmup_fraction is None else float(warmup_fraction)
    warmup_tokens = int(round(frac * shortest * tokens_per_step))
    warmup_steps = -(-warmup_tokens // tokens_per_step)
    points = tuple(steps[i] - decay_steps(steps[i], decay_fraction) for i in order)
    if min(points) <= warmup_steps:
        return None
    return BranchPlan(tuple(order), points, max(points), warmup_tokens)


def flops_of(steps: int, tokens_per_step: int, flops_per_token: float) -> float:
    return float(steps) * tokens_per_step * flops_per_token
