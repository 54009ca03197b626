"""Shape rules shared by the two descriptions of a model: the trainer's `models.config.ModelConfig`
and the cost model's `sharding.costmodel.ModelShape`.

Both derive the SwiGLU hidden width from d_model when it is not given. They round it to different
multiples (small CPU models vs Llama-sized shapes), so the multiple is an argument with a name,
and the rule itself is written once.
"""

from __future__ import annotations

# The trainer's small models (conf/model/*.yaml, CPU-sized): a multiple of 64 keeps d_ff close to
# 8/3 * d_model for widths of a few hundred (tests/config_golden.py holds the resulting widths).
TRAINER_D_FF_MULTIPLE = 64
# Llama 1/2's `multiple_of` (Touvron et al. 2023; their model.py): the planner's shapes use it, so
# that d_model=5120 gives Llama 13B's 13824 and d_model=4096 Llama 7B's 11008.
LLAMA_MULTIPLE_OF = 256


def swiglu_d_ff(d_model: int, multiple_of: int) -> int:
    """SwiGLU hidden width that keeps the MLP at ~8*d^2 parameters (three d x d_ff matrices):
    8/3 * d_model rounded up to a multiple of `multiple_of`, and at least one multiple.

    multiple_of: the rounding granularity of the width, `TRAINER_D_FF_MULTIPLE` (64) for the
    trainer's models, `LLAMA_MULTIPLE_OF` (256) for the planner's. Llama's own code rounds
    floor(8d/3) up, this rounds ceil(8d/3) up; for any multiple of 8 the two agree at every
    d_model (floor(8d/3) = k*multiple_of with 8d/3 not whole would need 8d = 3*k*multiple_of + 1
    or + 2, which a multiple of 8 cannot be).
    """
    hidden = -(-8 * d_model // 3)  # ceil(8/3 * d_model)
    return max(multiple_of, multiple_of * -(-hidden // multiple_of))
