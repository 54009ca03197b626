"""`ModelConfig`: the frozen description of one decoder-only transformer.

Everything derived from the raw sizes (head width, default MLP width, KV heads) lives here so
that the model, the FLOP/parameter counters, the sharding validator and the sweep planner all
agree on one definition. `validate()` raises `ConfigError` with a message that names the
offending config keys (as the user typed them on the Hydra command line: `model.n_heads=...`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from models.base.configs import config_from_mapping
from models.base.errors import ConfigError

_DTYPES = ("float32", "bfloat16")


def default_d_ff(d_model: int) -> int:
    """SwiGLU width that keeps the MLP at ~8*d^2 params: 8/3*d rounded up to a multiple of 64."""
    return max(64, -(-(8 * d_model) // 3 // 64) * 64)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and numerics of the decoder-only LM (see models/transformer.py).

    `n_kv_heads=None` means standard multi-head attention (= n_heads); a smaller value gives
    grouped-query attention. `d_ff=None` picks `default_d_ff(d_model)`. Parameters are always
    float32; `dtype` is the compute dtype of the matmuls (softmax, norms and logits stay f32).
    The defaults are conf/model/tiny.yaml; this class is also the Hydra schema of `model.*`
    (registered by experiments/train/config.py).
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None   # None = n_heads (plain MHA); smaller = grouped-query attention
    d_ff: int | None = None         # None = 8/3 * d_model rounded up to a multiple of 64 (SwiGLU)
    seq_len: int = 128
    tie_embeddings: bool = False
    remat: bool = False             # rematerialize each block in the backward pass
    dtype: str = "float32"          # compute dtype: float32 | bfloat16 (params, softmax, logits stay f32)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.02

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else int(self.n_kv_heads)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff(self) -> int:
        return default_d_ff(self.d_model) if self.d_ff is None else int(self.d_ff)

    # ---- construction / validation -------------------------------------------------------
    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "ModelConfig":
        """Build from a (Hydra) mapping; unknown keys are an error naming the key."""
        return config_from_mapping(cls, m, "model")

    def validate(self) -> "ModelConfig":
        def pos_int(name: str, v: Any) -> None:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"model.{name} must be a positive integer (got {v!r})")

        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "seq_len"):
            pos_int(name, getattr(self, name))
        if self.n_kv_heads is not None:
            pos_int("n_kv_heads", self.n_kv_heads)
        if self.d_ff is not None:
            pos_int("d_ff", self.d_ff)
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}; "
                "choose d_model as a multiple of n_heads")
        if self.d_head % 2:
            raise ConfigError(
                f"head width model.d_model/model.n_heads={self.d_head} must be even for RoPE")
        if self.n_heads % self.kv_heads:
            raise ConfigError(
                f"model.n_kv_heads={self.kv_heads} does not divide model.n_heads={self.n_heads} "
                "(grouped-query attention needs whole groups)")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"model.dtype must be one of {_DTYPES} (got {self.dtype!r})")
        for name in ("rope_theta", "norm_eps", "init_std"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"model.{name} must be a positive number (got {v!r})")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
