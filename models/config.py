"""`ModelConfig`: the frozen description of one decoder-only transformer.

Everything derived from the raw sizes (head width, default MLP width, KV heads) lives here so
that the model, the FLOP/parameter counters, the sharding validator and the sweep planner all
agree on one definition. `validate()` raises `ConfigError` with a message that names the
offending config keys (as the user typed them on the Hydra command line: `model.n_heads=...`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping

from models.base.configs import check_choice, check_float, check_int, config_from_mapping
from models.base.errors import ConfigError
from models.shapes import TRAINER_D_FF_MULTIPLE, swiglu_d_ff


class Dtype(enum.StrEnum):
    """`model.dtype`: the compute dtype of the matmuls (AUTO: resolved per platform)."""

    AUTO = "auto"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class Parametrization(enum.StrEnum):
    """`model.parametrization`: standard, or maximal-update (µP, see `ModelConfig.width_mult`)."""

    SP = "sp"
    MUP = "mup"


class AttentionKernel(enum.StrEnum):
    """`model.attention`: the attention implementation (see `resolve_attention`)."""

    AUTO = "auto"
    XLA = "xla"
    CUDNN = "cudnn"
    BLOCKED = "blocked"


class Remat(enum.StrEnum):
    """`model.remat`: activation checkpointing of each block (models/transformer.py:
    REMAT_POLICIES), named as in the cost model (sharding/costmodel: Layout.act_ckpt)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


# The same sets as tuples of the strings configs hold (error messages print them as such).
_DTYPES = tuple(d.value for d in Dtype)
PARAMETRIZATIONS = tuple(p.value for p in Parametrization)
ATTENTION_KERNELS = tuple(a.value for a in AttentionKernel)
REMAT = tuple(r.value for r in Remat)
ACCELERATORS = ("gpu", "rocm", "tpu")  # platforms where "auto" means bfloat16 compute
_REMAT_ALIASES = {"false": Remat.NONE.value, "true": Remat.FULL.value}  # booleans: the old spelling


def default_d_ff(d_model: int) -> int:
    """SwiGLU width that keeps the MLP at ~8*d^2 params: 8/3*d rounded up to a multiple of 64."""
    return swiglu_d_ff(d_model, multiple_of=TRAINER_D_FF_MULTIPLE)


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """`model.moe`: the routed (mixture-of-experts) MLP of every `every`-th layer
    (models/transformer.py: `MoEMLP`; docs/train.md, "Mixture of experts").

    `experts` and `top_k` are counted at granularity 1, in experts of the dense MLP's width
    `model.d_ff`. Fine-grained experts (Krajewski et al. 2024, "Scaling laws for fine-grained
    mixture of experts") split each of them into `granularity` experts of width
    d_ff / granularity: the layer then routes among experts * granularity experts and each token
    picks top_k * granularity of them, so total and active parameters stay what they are at
    granularity 1 (router aside) and only the size of the pieces changes. `shared_experts`
    always-on experts of that same (fine) width are added to every token's routed output
    (DeepSeekMoE's shared experts).

    Routing is per group of tokens, a group being one sequence (`model.seq_len` tokens): each
    routed expert takes at most C = min(S, ceil(capacity_factor * S * k / E)) tokens of a group of
    S (E routed experts, k picks), the first choices of a group's tokens first, then the second,
    ... (GShard's priority), and a token choice past the capacity is dropped (that expert adds
    nothing for it; the residual stream carries the token on). `capacity_factor` null or 0 is
    dropless: C = S, which no group can overflow (a token picks an expert at most once).
    """

    experts: int = 8  # routed experts at granularity 1
    top_k: int = 2  # experts each token is sent to (at granularity 1)
    capacity_factor: float | None = 1.25  # expert capacity / even share; null or 0 = dropless
    every: int = 1  # layers i with (i + 1) % every == 0 are routed (1: all, 2: every other)
    shared_experts: int = 0  # always-on experts of the routed experts' width
    granularity: int = 1  # fine-grained experts: each expert split into this many

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "MoEConfig":
        return config_from_mapping(cls, m, "model.moe")

    def validate(self) -> "MoEConfig":
        """One ConfigError line naming the key (the checks that need the rest of the model,
        `every` against n_layers and `granularity` against d_ff, are ModelConfig.validate's)."""
        for name in ("experts", "top_k", "every", "granularity"):
            check_int(f"model.moe.{name}", getattr(self, name), lo=1, what="a positive integer")
        check_int("model.moe.shared_experts", self.shared_experts, lo=0, what="an integer >= 0")
        if self.top_k > self.experts:
            raise ConfigError(
                f"model.moe.top_k={self.top_k} is larger than model.moe.experts={self.experts}: "
                "a token cannot be sent to more experts than there are"
            )
        if self.capacity_factor is not None:
            check_float(
                "model.moe.capacity_factor",
                self.capacity_factor,
                0.0,
                what="a number >= 0 (0 or null: dropless)",
            )
        return self

    # ---- derived sizes (what the layer is built with) ---------------------------------------
    @property
    def routed_experts(self) -> int:
        """Experts the router chooses among: experts x granularity."""
        return self.experts * self.granularity

    @property
    def routed_top_k(self) -> int:
        """Experts each token is sent to: top_k x granularity."""
        return self.top_k * self.granularity

    @property
    def dropless(self) -> bool:
        return not self.capacity_factor

    def expert_d_ff(self, d_ff: int) -> int:
        """Hidden width of one routed (and one shared) expert: d_ff / granularity."""
        return d_ff // self.granularity

    def capacity(self, group_size: int) -> int:
        """Token slots of each routed expert per group of `group_size` tokens (see the class
        docstring): all of them when dropless, else ceil(capacity_factor * S * k / E), at
        least 1 and at most S."""
        if self.dropless:
            return group_size
        even_share = group_size * self.routed_top_k / self.routed_experts
        return max(1, min(group_size, math.ceil(self.capacity_factor * even_share)))

    def routed_layers(self, n_layers: int) -> tuple[int, ...]:
        """The (0-based) layers whose MLP is routed: i with (i + 1) % every == 0."""
        return tuple(i for i in range(n_layers) if (i + 1) % self.every == 0)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and numerics of the decoder-only LM (see models/transformer.py).

    `n_kv_heads=None` means standard multi-head attention (= n_heads); a smaller value gives
    grouped-query attention. `d_ff=None` picks `default_d_ff(d_model)`. Parameters are always
    float32; `dtype` is the compute dtype of the matmuls (softmax, norms and logits stay f32).
    `dtype` and `attention` may be "auto": they depend on the platform the model runs on, so the
    model resolves them when it is built (`resolved()`), not when the config is parsed (a sweep
    planner must not start a GPU backend just to read a config).
    The defaults are conf/model/tiny.yaml; this class is also the Hydra schema of `model.*`
    (registered by experiments/train/config.py).
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None = n_heads (plain MHA); smaller = grouped-query attention
    d_ff: int | None = None  # None = 8/3 * d_model rounded up to a multiple of 64 (SwiGLU)
    seq_len: int = 128
    tie_embeddings: bool = False
    remat: str = "none"  # activation checkpointing of each block: none | selective (keep
    # matmul outputs, recompute attention and elementwise) | full
    # (keep only the block input); true/false = full/none
    dtype: str = "auto"  # compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32
    # | bfloat16; params, softmax, norms and logits stay f32
    attention: str = "auto"  # auto | xla | cudnn | blocked: the attention kernel (see resolved())
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    init_std: float = 0.02
    parametrization: str = "sp"  # sp (standard) | mup: maximal-update parametrisation (Yang et al.
    # 2022), one learning rate for every width (see width_mult)
    mup_base_d_model: int | None = None  # mup: the width the hyper-parameters were tuned at
    # (None = this model's d_model, i.e. width multiplier 1)
    moe: Any = None  # MoEConfig | None: mixture of experts ({experts, top_k, capacity_factor,
    # every, shared_experts, granularity}, unset ones at MoEConfig's defaults); null = the dense
    # model. Typed Any for Hydra: OmegaConf cannot merge `model.moe={experts:4}` into a null node
    # typed as a dataclass; __post_init__ makes the mapping a MoEConfig (unknown keys refused).

    def __post_init__(self) -> None:
        # true/false (a YAML boolean, or its string once Hydra has typed it as str) mean full/none,
        # so configs written before the named policies keep their meaning.
        alias = _REMAT_ALIASES.get(str(self.remat).lower()) if isinstance(self.remat, (bool, str)) else None
        if alias is not None:
            object.__setattr__(self, "remat", alias)
        # `model.moe` arrives as a mapping (Hydra, a summary's `model`, a sweep): the typed config.
        if isinstance(self.moe, Mapping):
            object.__setattr__(self, "moe", MoEConfig.from_mapping(self.moe))
        elif self.moe is not None and not isinstance(self.moe, MoEConfig):
            raise ConfigError(
                f"model.moe must be a mapping such as {{experts: 8, top_k: 2}} or null (got {self.moe!r})"
            )

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else int(self.n_kv_heads)

    @property
    def width_mult(self) -> float:
        """d_model / mup_base_d_model under µP (1.0 otherwise). µP (Tensor Programs V, Table 3,
        Adam): hidden matrices' learning rate is divided by it (experiments/train/optimizer.py)
        and the logits are divided by it (models/transformer.py); embeddings, norms and the
        output head keep the base learning rate; initialisation stays 1/sqrt(fan_in). Widths
        grow by adding heads of a fixed width, so attention keeps its 1/sqrt(d_head) scale."""
        if self.parametrization != Parametrization.MUP or self.mup_base_d_model is None:
            return 1.0
        return self.d_model / self.mup_base_d_model

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff(self) -> int:
        return default_d_ff(self.d_model) if self.d_ff is None else int(self.d_ff)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """The layers whose MLP is routed (models/transformer.py: MoEMLP); () for a dense model."""
        return () if self.moe is None else self.moe.routed_layers(self.n_layers)

    # ---- construction / validation -------------------------------------------------------
    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "ModelConfig":
        """Build from a (Hydra) mapping; unknown keys are an error naming the key."""
        return config_from_mapping(cls, m, "model")

    def validate(self) -> "ModelConfig":
        sizes = ["vocab_size", "d_model", "n_layers", "n_heads", "seq_len"]
        sizes += [name for name in ("n_kv_heads", "d_ff") if getattr(self, name) is not None]  # None: derived
        for name in sizes:
            check_int(f"model.{name}", getattr(self, name), lo=1, what="a positive integer")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}; "
                "choose d_model as a multiple of n_heads"
            )
        if self.d_head % 2:
            raise ConfigError(f"head width model.d_model/model.n_heads={self.d_head} must be even for RoPE")
        if self.n_heads % self.kv_heads:
            raise ConfigError(
                f"model.n_kv_heads={self.kv_heads} does not divide model.n_heads={self.n_heads} "
                "(grouped-query attention needs whole groups)"
            )
        check_choice("model.dtype", self.dtype, Dtype)
        if self.remat not in REMAT:
            raise ConfigError(
                f"model.remat must be one of {REMAT} (or true/false for full/none; got {self.remat!r})"
            )
        check_choice("model.attention", self.attention, AttentionKernel)
        check_choice("model.parametrization", self.parametrization, Parametrization)
        if self.mup_base_d_model is not None:
            check_int("model.mup_base_d_model", self.mup_base_d_model, 1, what="a positive integer or null")
            if self.parametrization != Parametrization.MUP:
                raise ConfigError("model.mup_base_d_model needs model.parametrization=mup")
        for name in ("rope_theta", "norm_eps", "init_std"):
            check_float(f"model.{name}", getattr(self, name), 0, lo_open=True, what="a positive number")
        if self.moe is not None:
            self._validate_moe()
        return self

    def _validate_moe(self) -> None:
        moe = self.moe.validate()
        if moe.every > self.n_layers:
            raise ConfigError(
                f"model.moe.every={moe.every} is larger than model.n_layers={self.n_layers}: "
                "no layer would be routed"
            )
        if self.ff % moe.granularity:
            raise ConfigError(
                f"model.moe.granularity={moe.granularity} does not divide the MLP width "
                f"model.d_ff={self.ff}: fine-grained experts are d_ff / granularity wide"
            )

    def resolved(self, platform: str | None = None) -> "ModelConfig":
        """This config with `dtype` and `attention` made concrete for `platform` ("cpu", "gpu"
        (CUDA), "rocm", "tpu"; default: `current_platform()`). Raises ConfigError for a kernel the
        platform cannot run (one line naming the key)."""
        platform = current_platform() if platform is None else platform
        dtype = resolve_dtype(self.dtype, platform)
        return dataclasses.replace(
            self, dtype=dtype, attention=resolve_attention(self.attention, platform, dtype, self.d_head)
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def current_platform() -> str:
    """JAX's default backend as "cpu", "gpu" (CUDA), "rocm" or "tpu": JAX calls both GPU
    backends "gpu", but only CUDA has cuDNN."""
    import jax  # lazy: parsing and validating a config never needs JAX

    platform = jax.default_backend()
    if platform == "gpu":
        try:
            if "rocm" in jax.devices()[0].client.platform_version.lower():
                return "rocm"
        except (AttributeError, IndexError, RuntimeError):
            pass
    return platform


def resolve_dtype(dtype: str, platform: str) -> str:
    """Concrete compute dtype: "auto" is bfloat16 on accelerators (their matmul peak is bf16's;
    f32 runs at the TF32 rate or below) and float32 on CPU (XLA:CPU has no fast bf16 matmul, and
    float32 keeps CPU results and the goldens as they were)."""
    if dtype != Dtype.AUTO:
        return dtype
    return Dtype.BFLOAT16.value if platform in ACCELERATORS else Dtype.FLOAT32.value


def cudnn_supports(dtype: str, d_head: int) -> bool:
    """Whether cuDNN flash attention takes these inputs on every supported GPU: bfloat16 q/k/v
    (it has no float32 kernel) and a head width that is a multiple of 8 and at most 128 (256 from
    Hopper on)."""
    return dtype == Dtype.BFLOAT16 and d_head % 8 == 0 and d_head <= 128


def resolve_attention(attention: str, platform: str, dtype: str, d_head: int) -> str:
    """Concrete attention kernel (models/transformer.py: ATTENTION):

    * blocked: `causal_attention`, block-causal einsums tuned for XLA:CPU (any platform);
    * xla: `jax.nn.dot_product_attention(implementation="xla")`, the full masked score matrix,
      which XLA fuses on GPU and TPU;
    * cudnn: `jax.nn.dot_product_attention(implementation="cudnn")`, cuDNN flash attention
      (GPU only, bfloat16 compute, d_head a multiple of 8, <= 128);
    * auto: blocked on CPU, cudnn on an NVIDIA GPU when it supports the shapes (else xla), xla on
      TPU and ROCm.
    """
    if attention == AttentionKernel.AUTO:
        if platform == "gpu":
            return (AttentionKernel.CUDNN if cudnn_supports(dtype, d_head) else AttentionKernel.XLA).value
        return (AttentionKernel.XLA if platform in ACCELERATORS else AttentionKernel.BLOCKED).value
    if attention == AttentionKernel.CUDNN:
        if platform != "gpu":
            raise ConfigError(
                f"model.attention=cudnn needs an NVIDIA GPU (JAX backend here: {platform}); "
                "use model.attention=auto, xla or blocked"
            )
        if not cudnn_supports(dtype, d_head):
            raise ConfigError(
                f"model.attention=cudnn needs model.dtype=bfloat16 (or auto) and a head "
                f"width d_model/n_heads that is a multiple of 8 and <= 128 "
                f"(got dtype {dtype}, head width {d_head}); use model.attention=auto or xla"
            )
    return attention
