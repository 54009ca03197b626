"""`plan`'s options, typed (`PlanOptions`), and its `--law` argument type."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from analysis.commands._options import CommandOptions
from analysis.planning.moe import DEFAULT_EXPERTS
from analysis.planning.planner import DEFAULT_BATCH_TOKENS
from sharding.costmodel.frameworks import Framework


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanOptions(CommandOptions):
    budget: list[float] | None  # FLOPs, one plan each
    law: pathlib.Path | None  # fit JSON (None: Chinchilla's published constants)
    hardware: str | None  # a catalogue name or YAML, or a mixed cluster NAME:COUNT,...
    gpus: int | None
    max_days: float | None
    gpu_hours: float | None
    seq_len: int
    vocab: int
    batch_tokens: int | None
    hparams: pathlib.Path | None  # HP.json
    unique_tokens: float | None
    top: int
    markdown: pathlib.Path | None
    efficiency: pathlib.Path | None
    framework: Framework
    calibrate: pathlib.Path | None  # MEASURED.csv or SWEEP_DIR
    offload: bool
    emit: str | None
    moe: bool = False
    moe_law: pathlib.Path | None = None
    experts: tuple[int, ...] = DEFAULT_EXPERTS
    top_k: int = 2
    capacity_factor: float = 1.25
    params: float | None = None  # a fixed model: N parameters
    tokens: float | None = None  # ... trained on D tokens
    objective: str = "time"  # what picks the hardware: time | cost | energy | carbon
    max_cost: float | None = None  # USD
    goodput: float | None = None
    pue: float | None = None
    watts: str | None = None  # W, or NAME=W,...
    price: str | None = None  # USD per device-hour, or NAME=USD,...
    region: str | None = None
    grid_intensity: float | None = None  # kg CO2e per kWh
    inference_tokens: float | None = None
    inference_context: float = 0.0
    inference_mfu: float | None = None
    target_loss: float | None = None
    continue_from: pathlib.Path | None = None  # a `fit --law cpt` JSON: continue or retrain
    base_model: str | None = None
    target_loss_new: float | None = None
    max_forgetting: str | None = None

    @property
    def sizing(self) -> bool:
        """Whether the model is sized for a target loss (and inference) rather than planned as asked."""
        return self.inference_tokens is not None or self.target_loss is not None

    @property
    def batch_or_default(self) -> int:
        return DEFAULT_BATCH_TOKENS if self.batch_tokens is None else self.batch_tokens


def plan_law(value: str) -> pathlib.Path | None:
    """`--law`: a fit's JSON, or `chinchilla` (Hoffmann et al.'s published constants: None)."""
    if value.lower() in ("chinchilla", "hoffmann"):
        return None
    if value.lower().endswith(".json") or pathlib.Path(value).exists():
        return pathlib.Path(value)
    raise argparse.ArgumentTypeError(
        f"{value!r}: plan takes a fit's JSON (`scalelab fit RUNS --json FIT.json`) or chinchilla"
    )
