"""RL compute accounting: the C of the compute-performance laws.

Convention (documented because the fitted C_mid depends on it): every pass counts what the code
actually executes, at the training core's per-token rates (models/flops.py, causal attention,
with the model's `seq_len` set to the tokens one forward pass sees, T = prompt + completion - 1):
    fwd = forward_flops_per_token(cfg),  train = flops_per_token(cfg) = 3 fwd.
Per RL step with P prompts x G completions (R = P*G rows), K = completion tokens:
- sample:     R * K * T * fwd   (K decoding steps, each re-running the T-token window: static
                                 shapes and no KV cache, so that is the work done);
- train:      epochs * R * T * train;
- reference:  R * T * fwd when the KL coefficient beta > 0, else 0;
- old-policy: R * T * fwd when epochs > 1 (the importance-ratio denominator), else 0 (with one
              epoch the sampling policy *is* the current policy and the ratio is exactly 1).
C = sample + train + reference + old-policy. Evaluation (N prompts x k samples: decoding plus
one reference pass for the KL metric) is counted separately and never enters C.
"""

from __future__ import annotations

import dataclasses

from models.config import ModelConfig
from models.flops import flops_per_token, forward_flops_per_token


@dataclasses.dataclass(frozen=True)
class StepFlops:
    """FLOPs of one RL step, split by pass."""

    sample: float
    train: float
    reference: float
    old_policy: float

    @property
    def total(self) -> float:
        return self.sample + self.train + self.reference + self.old_policy


def window_config(cfg: ModelConfig, window: int) -> ModelConfig:
    """The model config with seq_len = the tokens each forward pass sees (for the attention term)."""
    return dataclasses.replace(cfg, seq_len=int(window))


def rl_step_flops(
    cfg: ModelConfig,
    window: int,
    completion_len: int,
    prompts: int,
    group_size: int,
    epochs: int,
    kl_beta: float,
) -> StepFlops:
    c = window_config(cfg, window)
    fwd, train = forward_flops_per_token(c), flops_per_token(c)
    rows = prompts * group_size
    return StepFlops(
        sample=float(rows * completion_len * window * fwd),
        train=float(epochs * rows * window * train),
        reference=float(rows * window * fwd) if kl_beta > 0 else 0.0,
        old_policy=float(rows * window * fwd) if epochs > 1 else 0.0,
    )


def eval_flops(cfg: ModelConfig, window: int, completion_len: int, n_prompts: int, samples: int) -> float:
    """One evaluation: decode k samples per prompt, plus one reference forward for the KL."""
    fwd = forward_flops_per_token(window_config(cfg, window))
    rows = n_prompts * samples
    return float(rows * completion_len * window * fwd + rows * window * fwd)
