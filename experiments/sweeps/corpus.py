"""How many training tokens the run's corpus holds, for the sweep's epoch limit.

Uses the training core's own corpus loader (experiments/train/corpus.py), so the figure is exactly
the training split a run would sample from; the loader caches byte corpora, so after the
first call this costs a stat per source file.
"""

from __future__ import annotations

from typing import Any, Mapping

from experiments.sweeps.grid import PlanError
from experiments.train.corpus import DataConfig, load_corpus
from models.base.errors import ConfigError


def train_tokens(run_cfg: Mapping[str, Any]) -> int:
    """Tokens in the training split of `run_cfg["data"]` (raises PlanError on bad data config)."""
    try:
        corpus = load_corpus(DataConfig.from_mapping(dict(run_cfg.get("data") or {})))
    except ConfigError as e:
        raise PlanError(str(e)) from None
    return int(corpus.train.size)
