"""Sized for inference: the model that reaches a target loss with the least training plus inference
compute (Sardana, Portes, Doubov and Frankle 2024, "Beyond Chinchilla-Optimal: Accounting for
Inference in Language Model Scaling Laws", ICML; arXiv:2401.00448).

A model of N parameters trained on D tokens costs k·N·D training FLOPs (k: the law's FLOPs per
parameter-token, 6) and serves T inference tokens at 2N FLOPs each, plus 2·n_layers·c·d_model for
attention over a context of c tokens (Kaplan et al. 2020, Table 1; n_layers and d_model from the
planner's shape family, aspect ratio d_model / n_layers = 128 and N = 12·n_layers·d_model²).
Under the law L(N, D) = E + A/N^α + B/D^β the tokens that reach the target loss L* at size N are

    D(N) = (B / (L* − E − A/N^α))^(1/β),   defined for N > N_min = (A / (L* − E))^(1/α),

and the plan minimises w_train·k·N·D(N) + w_inf·T·flops_per_token(N) over log N (a bracketing
grid, then golden-section search; the total is smooth with one minimum). With T = 0 the answer is
the Chinchilla-optimal model for L* (the compute-optimal allocation, seen from the loss side).
The weights are 1 for a compute objective; for dollars they are the cost of a FLOP in each phase
(1 / (training MFU x goodput) and 1 / inference MFU on the same hardware at the same price).

The target loss defaults to the Chinchilla-optimal loss at a budget C: the model it compares with
is then exactly the budget's compute-optimal N*, D*. `saving` is the fraction of total compute
(training + inference) saved against that model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from analysis.laws.allocation import ScalingLaw
from models.base.errors import AnalysisError

# the planner's shape family (analysis/planning/planner.py: ASPECT_TARGET): d_model = 128 n_layers
ASPECT = 128.0
GOLDEN = (math.sqrt(5) - 1) / 2


def shape_of(n: float) -> tuple[float, float]:
    """(n_layers, d_model) of an N-parameter model of the shape family: N = 12 L d², d = 128 L."""
    layers = (n / (12 * ASPECT**2)) ** (1 / 3)
    return layers, ASPECT * layers


def flops_per_token(n: float, context: float = 0.0) -> float:
    """Forward FLOPs per inference token: 2N plus attention over `context` tokens."""
    layers, d = shape_of(n)
    return 2 * n + 2 * layers * context * d


def min_size(law: ScalingLaw, target: float) -> float:
    """The smallest N that reaches `target` with unlimited data (the law's A/N^α term alone)."""
    return (law.A / (target - law.E)) ** (1 / law.alpha)


def tokens_for(law: ScalingLaw, n: float, target: float) -> float:
    """Tokens an N-parameter model needs to reach `target` (inf if it never does)."""
    r = target - law.E - law.A / n**law.alpha
    return (law.B / r) ** (1 / law.beta) if r > 0 else math.inf


@dataclasses.dataclass(frozen=True)
class Point:
    """One model: size, tokens and its lifetime compute (training + inference)."""

    n: float
    d: float
    train_flops: float
    inference_flops: float

    @property
    def total_flops(self) -> float:
        return self.train_flops + self.inference_flops

    def as_dict(self) -> dict[str, float]:
        return {
            "N": self.n,
            "D": self.d,
            "tokens_per_param": self.d / self.n,
            "train_flops": self.train_flops,
            "inference_flops": self.inference_flops,
            "total_flops": self.total_flops,
        }

    def text(self) -> str:
        return (
            f"{self.n / 1e9:.3g}B params on {self.d / 1e12:.3g}T tokens "
            f"({self.d / self.n:.0f} tokens/param): "
            f"training {self.train_flops:.3g} + inference {self.inference_flops:.3g} = "
            f"{self.total_flops:.3g} FLOPs"
        )


@dataclasses.dataclass(frozen=True)
class InferencePlan:
    """The inference-aware size for a target loss, against the Chinchilla-optimal model (and the
    user's own model, `reference`, when one was given)."""

    law: ScalingLaw
    target_loss: float
    target_from: str  # how the target was set, in words
    inference_tokens: float
    context: float
    optimum: Point
    chinchilla: Point
    reference: Point | None = None
    objective: str = "compute"  # compute | cost
    weights: tuple[float, float] = (1.0, 1.0)  # (training, inference) cost of a FLOP
    notes: tuple[str, ...] = ()

    @property
    def saving(self) -> float:
        """Fraction of total compute saved against the Chinchilla-optimal model."""
        return 1 - self.optimum.total_flops / self.chinchilla.total_flops

    def weighted(self, p: Point) -> float:
        return self.weights[0] * p.train_flops + self.weights[1] * p.inference_flops

    def as_dict(self) -> dict[str, Any]:
        o = self.optimum
        out: dict[str, Any] = {
            **o.as_dict(),
            "saving": self.saving,
            "target_loss": self.target_loss,
            "target_from": self.target_from,
            "inference_tokens": self.inference_tokens,
            "inference_context": self.context,
            "inference_flops_per_token": flops_per_token(o.n, self.context),
            "objective": self.objective,
            "chinchilla": self.chinchilla.as_dict(),
            "reference": None,
            "notes": list(self.notes),
        }
        if self.objective == "cost":
            out["cost_weights"] = {"train": self.weights[0], "inference": self.weights[1]}
            out["cost_saving"] = 1 - self.weighted(o) / self.weighted(self.chinchilla)
        if self.reference is not None:
            out["reference"] = {
                **self.reference.as_dict(),
                "saving": 1 - o.total_flops / self.reference.total_flops,
            }
        return out

    def text_lines(self) -> list[str]:
        ctx = f" + attention over {self.context:g} tokens" if self.context else ""
        what = "compute" if self.objective == "compute" else "cost"
        out = [
            f"inference-aware size (Sardana et al. 2024): loss {self.target_loss:.4g} ({self.target_from}), "
            f"{self.inference_tokens:.3g} inference tokens at 2N FLOPs each{ctx}, minimising "
            f"training + inference {what}",
            f"  best: {self.optimum.text()}",
            f"  Chinchilla-optimal: {self.chinchilla.text()}",
            f"  saving: {100 * self.saving:.1f}% of the lifetime compute against the Chinchilla-optimal "
            "model",
        ]
        if self.reference is not None:
            s = 1 - self.optimum.total_flops / self.reference.total_flops
            out.append(f"  your model: {self.reference.text()}; the best saves {100 * s:.1f}% of it")
        out += [f"  note: {n}" for n in self.notes]
        return out

    def markdown(self) -> list[str]:
        return ["### Sized for inference", "", *[ln.strip() for ln in self.text_lines()]]


def _point(law: ScalingLaw, n: float, target: float, t: float, context: float) -> Point:
    d = tokens_for(law, n, target)
    return Point(n, d, law.flops_per_param_token * n * d, t * flops_per_token(n, context))


def optimal_size(
    law: ScalingLaw,
    target: float,
    inference_tokens: float,
    context: float = 0.0,
    weights: tuple[float, float] = (1.0, 1.0),
) -> float:
    """The N minimising weights[0]·k·N·D(N) + weights[1]·T·flops_per_token(N) at loss `target`."""
    n_min = min_size(law, target)
    k = law.flops_per_param_token

    def total(log_n: float) -> float:
        n = math.exp(log_n)
        return weights[0] * k * n * tokens_for(law, n, target) + weights[
            1
        ] * inference_tokens * flops_per_token(n, context)

    # bracket on a grid from just above N_min to 10^8 x N_min (the optimum's D/N is then far
    # outside any sensible range), then golden-section search inside the bracket
    grid = math.log(n_min) + np.geomspace(1e-6, 8 * math.log(10), 600)
    vals = np.array([total(g) for g in grid])
    i = int(np.argmin(vals))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = total(c), total(d)
    for _ in range(200):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = total(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = total(d)
        if b - a < 1e-12:
            break
    return math.exp((a + b) / 2)


def check_target(law: ScalingLaw, target: float) -> None:
    """A target the law can reach: above its irreducible loss E (one error line otherwise)."""
    if not (math.isfinite(target) and target > law.E):
        raise AnalysisError(
            f"--target-loss {target:g} is at or below the law's irreducible loss E = {law.E:.4g}: no model "
            "reaches it; give a larger target"
        )


def plan_inference(
    law: ScalingLaw,
    inference_tokens: float,
    *,
    budget_flops: float | None = None,
    target_loss: float | None = None,
    reference: tuple[float, float] | None = None,
    context: float = 0.0,
    weights: tuple[float, float] = (1.0, 1.0),
    objective: str = "compute",
    notes: tuple[str, ...] = (),
) -> InferencePlan:
    """The inference-aware size. The target: `target_loss`, else the loss of the `reference`
    model (N, D), else the Chinchilla-optimal loss at `budget_flops`."""
    if not (math.isfinite(inference_tokens) and inference_tokens >= 0):
        raise AnalysisError(f"--inference-tokens must be >= 0 (got {inference_tokens:g})")
    if not (math.isfinite(context) and context >= 0):
        raise AnalysisError(f"--inference-context must be >= 0 tokens (got {context:g})")
    if target_loss is not None:
        target, source = float(target_loss), "--target-loss"
    elif reference is not None:
        target, source = law.loss(*reference), f"the loss of your {reference[0] / 1e9:.3g}B model"
    elif budget_flops is not None:
        n_c, d_c = law.optimal(budget_flops)
        target, source = law.loss(n_c, d_c), f"the Chinchilla-optimal loss at {budget_flops:.3g} FLOPs"
    else:
        raise AnalysisError(
            "--inference-tokens needs the quality to reach: --budget C (its Chinchilla-optimal loss), "
            "--target-loss L or a model --params N --tokens D"
        )
    check_target(law, target)
    t = float(inference_tokens)
    if target_loss is None and reference is None:
        n_c = law.optimal(budget_flops)[0]  # the budget's N*: exactly the Chinchilla model
    else:
        n_c = optimal_size(law, target, 0.0)
    n = optimal_size(law, target, t, context, weights)
    return InferencePlan(
        law=law,
        target_loss=target,
        target_from=source,
        inference_tokens=t,
        context=float(context),
        optimum=_point(law, n, target, t, context),
        chinchilla=_point(law, n_c, target, t, context),
        reference=None if reference is None else _reference(law, reference, t, context),
        objective=objective,
        weights=weights,
        notes=notes,
    )


def _reference(law: ScalingLaw, ref: tuple[float, float], t: float, context: float) -> Point:
    n, d = ref
    return Point(n, d, law.flops_per_param_token * n * d, t * flops_per_token(n, context))
