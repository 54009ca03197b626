"""How many training tokens the run's corpus holds, for the sweep's epoch limit.

Uses the training core's own corpus loader (experiments/train/corpus.py), so the figure is exactly
the training split a run would sample from; the loader caches byte corpora, so after the
first call this costs a stat per source file. With `data.max_unique_tokens` set it is the capped
size (the first that many tokens of the split are all a run samples from), so `sweep.max_epochs`
counts passes over what the runs actually repeat.
"""

from __future__ import annotations

from typing import Any, Mapping

from experiments.sweeps.grid import PlanError
from experiments.train.corpus import DataConfig, load_corpus
from models.base.errors import ConfigError


def train_tokens(run_cfg: Mapping[str, Any]) -> int:
    """Tokens a run of `run_cfg["data"]` samples from: the training split, or its first
    `data.max_unique_tokens` (raises PlanError on bad data config)."""
    try:
        corpus = load_corpus(DataConfig.from_mapping(dict(run_cfg.get("data") or {})))
    except ConfigError as e:
        raise PlanError(str(e)) from None
    return corpus.unique_tokens
