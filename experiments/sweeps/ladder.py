"""Model-shape ladders for sweeps: one rule turns a list of depths into sensible shapes.

Why a rule and not a hand-written list: scaling-law fits assume the shapes differ in size, not
in kind. Keeping the head width fixed and the aspect ratio (d_model / n_layers) constant means
every rung is the same architecture scaled up, so N is the only thing that changes (Kaplan et
al. 2020 find loss nearly flat in aspect ratio over a wide range, so one fixed ratio is safe).

The rule (config node `sweep.ladder`):

* `d_model = round_up(aspect_ratio * n_layers, head_dim)` -- width grows linearly with depth,
  rounded up to whole heads;
* `n_heads = d_model / head_dim` -- the head width `head_dim` is the same on every rung;
* `n_kv_heads = n_heads / kv_groups` (1 = ordinary multi-head attention; >1 = GQA);
* `d_ff` = the model's default SwiGLU width (8/3 d_model rounded, see models/config.py) unless
  `ffn_mult` is given (d_ff = ffn_mult * d_model rounded up to a multiple of 16).

An explicit `sweep.shapes` list (each {n_layers, d_model, n_heads[, n_kv_heads, d_ff]}) replaces
the rule when a study needs shapes the rule cannot express.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping


class LadderError(ValueError):
    """Bad ladder / shape configuration; the message names the `sweep.*` key to fix."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """One rung of the ladder: the `model.*` keys a sweep overrides."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None

    @property
    def label(self) -> str:
        """Short, path-safe name, e.g. `L2-d64`."""
        return f"L{self.n_layers}-d{self.d_model}"

    def overrides(self) -> list[str]:
        """Hydra overrides setting this shape (null keeps the model's own default rule)."""

        def fmt(v: int | None) -> str:
            return "null" if v is None else str(int(v))

        return [
            f"model.n_layers={self.n_layers}",
            f"model.d_model={self.d_model}",
            f"model.n_heads={self.n_heads}",
            f"model.n_kv_heads={fmt(self.n_kv_heads)}",
            f"model.d_ff={fmt(self.d_ff)}",
        ]

    def apply(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """The model config dict with this shape's keys substituted."""
        out = dict(model)
        out.update(
            n_layers=self.n_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            d_ff=self.d_ff,
        )
        return out


def _pos_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 or int(v) != v:
        raise LadderError(f"{name} must be a positive integer (got {v!r})")
    return int(v)


def ladder(
    depths: Iterable[int],
    head_dim: int = 16,
    aspect_ratio: float = 32.0,
    kv_groups: int = 1,
    ffn_mult: float | None = None,
) -> list[Shape]:
    """Shapes for `depths` under the fixed-head-width, fixed-aspect-ratio rule (module doc)."""
    head_dim = _pos_int("sweep.ladder.head_dim", head_dim)
    if head_dim % 2:
        raise LadderError(f"sweep.ladder.head_dim={head_dim} must be even (RoPE rotates pairs)")
    kv_groups = _pos_int("sweep.ladder.kv_groups", kv_groups)
    if not isinstance(aspect_ratio, (int, float)) or aspect_ratio <= 0:
        raise LadderError(f"sweep.ladder.aspect_ratio must be > 0 (got {aspect_ratio!r})")
    depths = [_pos_int("sweep.ladder.depths[]", d) for d in depths]
    if not depths:
        raise LadderError("sweep.ladder.depths is empty; give at least one depth, e.g. [1,2,3,4]")
    if len(set(depths)) != len(depths):
        raise LadderError(f"sweep.ladder.depths has repeated entries: {depths}")
    shapes = []
    for L in sorted(depths):
        d_model = head_dim * max(1, math.ceil(aspect_ratio * L / head_dim))
        n_heads = d_model // head_dim
        if n_heads % kv_groups:
            raise LadderError(
                f"sweep.ladder.kv_groups={kv_groups} does not divide n_heads={n_heads} of the "
                f"depth-{L} rung; pick kv_groups dividing every rung's head count"
            )
        d_ff = None if ffn_mult is None else 16 * math.ceil(ffn_mult * d_model / 16)
        shapes.append(Shape(L, d_model, n_heads, None if kv_groups == 1 else n_heads // kv_groups, d_ff))
    return shapes


def shapes_from_config(sweep: Mapping[str, Any]) -> list[Shape]:
    """The shapes a sweep config asks for: explicit `sweep.shapes` or the `sweep.ladder` rule."""
    explicit = sweep.get("shapes")
    if explicit:
        shapes = []
        for i, s in enumerate(explicit):
            try:
                shapes.append(
                    Shape(
                        _pos_int(f"sweep.shapes[{i}].n_layers", s["n_layers"]),
                        _pos_int(f"sweep.shapes[{i}].d_model", s["d_model"]),
                        _pos_int(f"sweep.shapes[{i}].n_heads", s["n_heads"]),
                        None
                        if s.get("n_kv_heads") is None
                        else _pos_int(f"sweep.shapes[{i}].n_kv_heads", s["n_kv_heads"]),
                        None if s.get("d_ff") is None else _pos_int(f"sweep.shapes[{i}].d_ff", s["d_ff"]),
                    )
                )
            except (KeyError, TypeError) as e:
                raise LadderError(f"sweep.shapes[{i}] needs n_layers, d_model, n_heads (got {s!r})") from e
        return shapes
    lad = sweep.get("ladder")
    if not lad:
        raise LadderError("the sweep needs model shapes: set sweep.ladder.depths or sweep.shapes")
    return ladder(
        lad.get("depths") or [],
        head_dim=lad.get("head_dim", 16),
        aspect_ratio=lad.get("aspect_ratio", 32.0),
        kv_groups=lad.get("kv_groups", 1),
        ffn_mult=lad.get("ffn_mult"),
    )
