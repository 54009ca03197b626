"""Held-out evaluation of a policy: pass@1 as the mean over k samples per prompt, its standard
error, per-difficulty pass rates, KL to the reference, and the zero-variance group fraction.

Standard error: the k samples of one prompt are not independent draws of the population mean,
so the stderr is that of the per-prompt pass rates across the N prompts, std(p_i) / sqrt(N) —
which includes both the sampling noise and the prompt-to-prompt spread of a finite eval set.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from experiments.rl.tasks import Batch


@dataclasses.dataclass(frozen=True)
class EvalResult:
    pass_rate: float
    stderr: float
    by_difficulty: dict[str, float]
    kl: float
    zero_var_frac: float  # fraction of prompts whose k samples all got the same reward
    n_prompts: int
    samples: int

    def as_metrics(self) -> dict[str, Any]:
        return {
            "pass_rate": self.pass_rate,
            "pass_rate_stderr": self.stderr,
            "pass_rate_by_difficulty": self.by_difficulty,
            "kl": self.kl,
            "eval_zero_var_frac": self.zero_var_frac,
        }


class Evaluator:
    """Runs `rollout` on a fixed prompt set repeated k times (rows = prompt-major, k per prompt)."""

    def __init__(self, rollout, batch: Batch, samples: int, difficulty_names: list[str], seed: int):
        self.rollout, self.batch, self.k = rollout, batch, samples
        self.names = difficulty_names
        self.prompts = np.repeat(batch.prompts, samples, axis=0)
        self.answers = np.repeat(batch.answers, samples, axis=0)
        self.key = jax.random.PRNGKey(seed)

    def __call__(self, params: Any, ref_params: Any, index: int) -> EvalResult:
        """`index` varies the sampling noise between evaluations of one run (deterministically)."""
        r, kl = self.rollout(
            params, ref_params, self.prompts, self.answers, jax.random.fold_in(self.key, index)
        )
        r_NxK = np.asarray(r, np.float64).reshape(-1, self.k)
        p_N = r_NxK.mean(axis=1)
        n = p_N.size
        stderr = float(p_N.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        by = {}
        for i, name in enumerate(self.names):
            sel = self.batch.difficulty == i
            if sel.any():
                by[name] = float(p_N[sel].mean())
        zero_var = float(np.mean(r_NxK.max(1) == r_NxK.min(1))) if self.k > 1 else float("nan")
        return EvalResult(float(p_N.mean()), stderr, by, float(np.asarray(kl).mean()), zero_var, n, self.k)
