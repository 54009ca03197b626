"""`plan --moe`: what routed experts buy at a compute budget, and the routed recipe to train.

For each expert count E of the list (`--experts`, default 1, 2, 4, ..., 64; E = 1 is the dense
model), at the budget C:

1. the active size: with a fitted MoE law that has tokens (`moe_joint`, `moe_*_d`), the N that
   minimises L(N, E, D = C / (k N)) for that E (a scan of N over `SIZE_GRID` around the dense
   law's N*, then refined); with a fixed-token law (`moe_bilinear`, `moe_clark`, `moe_joint_n`,
   Clark et al.'s setting) or no law, the dense law's compute-optimal N* (`--law`, default
   Chinchilla's constants) for every E: active parameters, hence FLOPs per token, held fixed;
2. the loss at (N, E[, D]) from the MoE law with its 90% prediction interval (no law: not
   predicted, the dense law's loss is shown for E = 1 only);
3. the planner's search (`analysis.planning.planner.plan`) for that routed shape: real shapes whose
   active parameters are near N, every layout with expert parallelism (the cost model's all-to-all,
   expert memory and expert-data-parallel gradients: docs/costmodel.md, "Mixture of experts"), the
   trainer's layout and overrides.

The recommended E is the one with the lowest predicted loss among those with a layout that fits,
except that a larger E must buy at least `MIN_GAIN` (0.2%) lower loss than the best smaller one
(experts cost memory and all-to-all time the budget does not count); without a law it is the
largest E of the list (the user's `--experts 8` to plan one). Its plan is the plan printed, and its
`--emit overrides` line carries `model.moe={experts:..,top_k:..}` and `sharding.expert=`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from analysis.core.validation import PREDICTION_LEVEL
from analysis.laws.allocation import ScalingLaw
from analysis.laws.moe import MoeLaw
from analysis.planning.planner import Plan, plan
from models.base.errors import AnalysisError
from models.config import MoEConfig

DEFAULT_EXPERTS = (1, 2, 4, 8, 16, 32, 64)
MIN_GAIN = 0.002  # a larger expert count must lower the predicted loss by this fraction
SIZE_GRID = np.geomspace(0.1, 10.0, 41)  # N / N* scanned for a law with tokens


@dataclasses.dataclass(frozen=True)
class ExpertOption:
    """One expert count at the budget: its size, predicted loss and the plan of its routed shape."""

    experts: int
    n_target: float  # the active size aimed at
    loss: float | None  # the MoE law's loss at (N, E[, D]); None without a law
    loss_interval: tuple[float, float] | None
    plan: Plan | None  # None: no layout fits (`reason`)
    reason: str = ""

    @property
    def fits(self) -> bool:
        return self.plan is not None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "experts": self.experts,
            "n_target_active": self.n_target,
            "loss": self.loss,
            "loss_interval": list(self.loss_interval) if self.loss_interval else None,
            "fits": self.fits,
            "reason": self.reason or None,
        }
        if self.plan is not None:
            b = self.plan.best
            out.update(
                n_params=b.shape.n_params,
                n_params_active=b.shape.n_params_active,
                tokens=b.tokens,
                layout=b.as_dict()["layout"],
                mem_gb_per_device=b.mem_gb_per_device,
                days=b.days,
                mfu=b.mfu,
            )
        return out


@dataclasses.dataclass(frozen=True)
class MoePlan:
    """`plan --moe`'s answer: every expert count at the budget and the chosen one's full plan."""

    budget_flops: float
    options: tuple[ExpertOption, ...]
    chosen: ExpertOption
    top_k: int
    capacity_factor: float | None
    moe_law: MoeLaw | None
    notes: tuple[str, ...]

    @property
    def plan(self) -> Plan:
        return self.chosen.plan

    def as_dict(self) -> dict[str, Any]:
        return {
            "budget_flops": self.budget_flops,
            "experts": self.chosen.experts,
            "top_k": self.top_k,
            "capacity_factor": self.capacity_factor,
            "options": [o.as_dict() for o in self.options],
            "law": None if self.moe_law is None else self.moe_law.as_dict(),
            "min_gain": MIN_GAIN,
            "notes": list(self.notes),
        }

    def text_lines(self) -> list[str]:
        dense = next((o for o in self.options if o.experts == 1 and o.loss is not None), None)
        out = [
            f"mixture of experts at {self.budget_flops:.3g} FLOPs (top_k {self.top_k}, capacity factor "
            f"{self.capacity_factor if self.capacity_factor else 'dropless'}); loss from "
            f"{self.moe_law.source if self.moe_law else 'no MoE law (pass --moe-law FIT.json)'}:",
            f"  {'experts':>7} {'active':>8} {'total':>8} {'tokens':>8} {'loss':>7}  "
            f"{f'{100 * PREDICTION_LEVEL:g}% interval':18} {'vs dense':>8}  layout, memory, days",
        ]
        for o in self.options:
            loss = "—" if o.loss is None else f"{o.loss:.4f}"
            band = "" if o.loss_interval is None else f"[{o.loss_interval[0]:.4f}, {o.loss_interval[1]:.4f}]"
            gain = "" if (dense is None or o.loss is None) else f"{100 * (o.loss / dense.loss - 1):+.2f}%"
            mark = " <-" if o is self.chosen else ""
            if o.plan is None:
                out.append(
                    f"  {o.experts:>7} {o.n_target / 1e9:7.2f}B {'':>8} {'':>8} {loss:>7}  {band:18} "
                    f"{gain:>8}  no layout fits: {o.reason}{mark}"
                )
                continue
            b = o.plan.best
            lo = b.layout
            out.append(
                f"  {o.experts:>7} {b.shape.n_params_active / 1e9:7.2f}B {b.shape.n_params / 1e9:7.2f}B "
                f"{b.tokens / 1e12:7.2f}T {loss:>7}  {band:18} {gain:>8}  dp{lo.dp} ep{lo.ep} tp{lo.tp} "
                f"pp{lo.pp} z{lo.zero_stage} {lo.act_ckpt}, {b.mem_gb_per_device:.1f} GB, "
                f"{b.days:.1f} d{mark}"
            )
        out.append(
            f"routed recipe: experts {self.chosen.experts}, top_k {self.top_k}"
            + ("" if self.chosen.plan is None else f", ep {self.chosen.plan.best.layout.ep}")
        )
        out += [f"note: {n}" for n in self.notes]
        return out


def _size(budget: float, experts: int, law: ScalingLaw, moe_law: MoeLaw | None) -> float:
    """The active size for `experts` at the budget (module docstring, step 1)."""
    n_dense, _ = law.optimal(budget)
    if moe_law is None or not moe_law.needs_tokens:
        return n_dense
    k = law.flops_per_param_token
    grid = n_dense * SIZE_GRID
    losses = moe_law.loss(grid, experts, budget / (k * grid))
    i = int(np.nanargmin(losses))
    fine = grid[i] * np.geomspace(SIZE_GRID[0] / SIZE_GRID[1], SIZE_GRID[1] / SIZE_GRID[0], 21)
    fine_losses = moe_law.loss(fine, experts, budget / (k * fine))
    return float(fine[int(np.nanargmin(fine_losses))])


def _choose(options: Sequence[ExpertOption], has_law: bool) -> ExpertOption:
    """The lowest predicted loss among the options that fit, a larger E only for MIN_GAIN more;
    without a law the largest E that fits."""
    fitting = [o for o in options if o.fits]
    if not fitting:
        raise AnalysisError(
            "plan --moe: no expert count fits the cluster: "
            + "; ".join(f"{o.experts} experts: {o.reason}" for o in options)
        )
    if not has_law:
        return fitting[-1]
    best = fitting[0]
    for o in fitting[1:]:
        if o.loss < best.loss * (1 - MIN_GAIN):
            best = o
    return best


def plan_moe(
    budget_flops: float,
    n_devices: int,
    hardware: str,
    *,
    law: ScalingLaw,
    moe_law: MoeLaw | None = None,
    experts: Sequence[int] = DEFAULT_EXPERTS,
    top_k: int = 2,
    capacity_factor: float | None = 1.25,
    **plan_kwargs: Any,
) -> MoePlan:
    """Plan a routed model at `budget_flops` (module docstring). `plan_kwargs` go to `plan`."""
    if budget_flops is None:
        raise AnalysisError("plan --moe plans a FLOP budget: give --budget FLOPS")
    experts = sorted({int(e) for e in experts})
    if not experts or experts[0] < 1:
        raise AnalysisError(f"--experts must be whole numbers >= 1 (got {list(experts)})")
    routed = [e for e in experts if e > 1]
    if routed and top_k > routed[0]:
        raise AnalysisError(f"--top-k {top_k} exceeds the smallest routed expert count {routed[0]}")
    notes = []
    if moe_law is not None:
        lo, hi = moe_law.fitted_experts
        beyond = [e for e in experts if e > hi * (1 + 1e-9)]
        if beyond:
            notes.append(
                f"expert counts {beyond} lie beyond the law's fitted {lo:g}-{hi:g}: their losses "
                "extrapolate the law in E (its intervals grow only with N)"
            )
        if not moe_law.needs_tokens:
            notes.append(
                f"{moe_law.law} is a fixed-token law: every E is planned at the dense law's N* (the "
                "same active parameters and tokens), its loss at the token count the law was fitted at; "
                "the gain against dense is what the experts buy"
            )
    else:
        notes.append(
            "no MoE law (--moe-law): losses are not predicted; the largest expert count that fits is planned"
        )
    options = []
    for e in experts:
        n = _size(budget_flops, e, law, moe_law)
        shape = None if e == 1 else MoEConfig(experts=e, top_k=top_k, capacity_factor=capacity_factor)
        loss = band = None
        if moe_law is not None:
            tokens = budget_flops / (law.flops_per_param_token * n)
            loss = float(moe_law.loss(n, e, tokens)[0])
            iv = moe_law.loss_interval(n, e, tokens)
            band = None if iv is None else (float(iv[0][0]), float(iv[1][0]))
        try:
            p = plan(
                budget_flops,
                n_devices,
                hardware,
                law=law,
                moe=shape,
                moe_law=moe_law,
                size_target=n,
                **plan_kwargs,
            )
            options.append(ExpertOption(e, n, loss, band, p))
        except AnalysisError as err:
            options.append(ExpertOption(e, n, loss, band, None, str(err)))
    chosen = _choose(options, moe_law is not None)
    notes.append(
        f"capacity factor {capacity_factor if capacity_factor else 'dropless'}: every expert computes "
        "its capacity's token slots (the all-to-alls send them), which the budget's 6·N_active·D does "
        "not count"
    )
    if moe_law is not None:
        notes.append(f"a larger expert count is chosen only for {100 * MIN_GAIN:g}% lower predicted loss")
    return MoePlan(budget_flops, tuple(options), chosen, top_k, capacity_factor, moe_law, tuple(notes))
