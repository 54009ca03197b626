"""Named corpora and training mixtures: what continual pre-training trains and evaluates on.

A run's corpora have names: the one `data.*` describes is named after its source (`stdlib`,
`cpp`, `text`, `tokens`, `prepared`), the two embedded byte corpora are always there as `stdlib`
(the running Python's standard library) and `cpp` (pyarrow's C++ headers; experiments/data/
SOURCE.md), and `data.corpora: {name: {data.* keys}}` adds others.

* `data.mixture: {name: weight}` trains on those corpora in those proportions (weights >= 0 that
  sum to 1; a weight of 0 keeps the corpus in the run's evaluations only). Which corpus row j of
  batch i comes from is a pure function of the row's global index g = i * batch_size + j: the
  golden-ratio (Weyl) sequence u_g = frac((g + 1) / phi) falls in corpus k's share of [0, 1), so
  every stretch of rows holds each corpus in its proportion to within a few rows (a 1% replay
  stream gets one row in every ~100, not a random count), with no state: resuming at step i
  replays nothing. The window inside the corpus comes from rng(seed, i), as a one-corpus run's.
* `data.eval_corpora: [name, ...]` evaluates the run on more corpora than it trains on (a base
  model is scored on the corpus it will be continued on).

Every corpus trained on or named in `data.eval_corpora` is evaluated on its own validation split
at each eval: `eval_loss/<name>` in metrics.jsonl and summary.json. `eval_loss` and
`final_eval_loss` keep their meaning: the held-out loss of what the run trains on, here the
mixture's, sum_k weight_k * eval_loss/<k> (a one-corpus run's is that corpus's, as before).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from experiments.train.corpus import (
    BatchSampler,
    Corpus,
    DataConfig,
    check_paths,
    data_vocab_size,
    load_corpus,
)
from models.base.errors import ConfigError

BUILTIN = ("stdlib", "cpp")  # corpora every run can name without defining them
_RUN_KEYS = ("mixture", "eval_corpora", "corpora")  # a run's keys, not a corpus's
_PHI = (math.sqrt(5.0) - 1.0) / 2.0  # the Weyl step: the most evenly spread sequence there is
WEIGHT_TOLERANCE = 1e-6


def is_multi(cfg: DataConfig) -> bool:
    """Whether the run trains on a mixture or is evaluated on more than its own corpus."""
    return cfg.mixture is not None or bool(cfg.eval_corpora)


def primary_name(cfg: DataConfig) -> str:
    """The name of the corpus `data.*` itself describes: its source."""
    return cfg.resolved_source()


def named_configs(cfg: DataConfig) -> dict[str, DataConfig]:
    """Every corpus a run may name: `data.*`'s own, the built-in ones, `data.corpora`'s."""
    own = dataclasses.replace(cfg, mixture=None, eval_corpora=None, corpora=None)
    out = {primary_name(cfg): own}
    for name in BUILTIN:
        out.setdefault(name, DataConfig(source=name, val_fraction=cfg.val_fraction, cache_dir=cfg.cache_dir))
    extra = cfg.corpora or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(
            f"data.corpora must map names to corpus settings, e.g. {{web: {{path: ...}}}} (got {extra!r})"
        )
    for name, m in extra.items():
        if name in out:
            raise ConfigError(
                f"data.corpora.{name}: {name!r} already names a corpus ({', '.join(out)}); pick another name"
            )
        if not isinstance(m, Mapping):
            raise ConfigError(f"data.corpora.{name} must be a mapping of data.* keys (got {m!r})")
        nested = sorted(set(m) & set(_RUN_KEYS))
        if nested:
            raise ConfigError(f"data.corpora.{name}: {nested[0]} is a run's setting, not a corpus's")
        try:
            out[str(name)] = DataConfig.from_mapping(
                {"cache_dir": cfg.cache_dir, "val_fraction": cfg.val_fraction, **m}
            )
        except ConfigError as e:
            raise ConfigError(f"data.corpora.{name}: {e}") from None
    return out


def training_weights(cfg: DataConfig) -> dict[str, float]:
    """{name: weight} of the corpora the run trains on (data.* alone: {its name: 1})."""
    if cfg.mixture is None:
        return {primary_name(cfg): 1.0}
    return {str(k): float(v) for k, v in cfg.mixture.items()}


def eval_names(cfg: DataConfig) -> list[str]:
    """The corpora the run is evaluated on: those of its mixture, then `data.eval_corpora`."""
    names = list(training_weights(cfg))
    for n in cfg.eval_corpora or []:
        if str(n) not in names:
            names.append(str(n))
    return names


def check_corpora(cfg: DataConfig, vocab_size: int | None = None) -> None:
    """One-line errors for a bad mixture, unknown names or corpora of different vocabularies
    (no token data is read)."""
    if not is_multi(cfg) and cfg.corpora is None:
        return
    known = named_configs(cfg)
    mix = cfg.mixture
    if mix is not None:
        if not isinstance(mix, Mapping) or not mix:
            raise ConfigError(
                f"data.mixture must map names to weights, e.g. {{cpp: 0.95, stdlib: 0.05}} (got {mix!r})"
            )
        for name, w in mix.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise ConfigError(f"data.mixture.{name} must be a weight >= 0 (got {w!r})")
        total = float(sum(mix.values()))
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ConfigError(f"data.mixture weights must sum to 1 (they sum to {total:.6g}): {dict(mix)}")
    evals = cfg.eval_corpora
    if evals is not None and (isinstance(evals, (str, Mapping)) or not isinstance(evals, Sequence)):
        raise ConfigError(f"data.eval_corpora must be a list of corpus names (got {evals!r})")
    for name in eval_names(cfg):
        if name not in known:
            raise ConfigError(
                f"unknown corpus {name!r} in data.mixture / data.eval_corpora; known: {', '.join(known)}"
            )
    used = {n: known[n] for n in eval_names(cfg)}
    for name, c in used.items():
        if name != primary_name(cfg):
            check_paths(c)
    vocabs = {n: data_vocab_size(c) for n, c in used.items()}
    if len(set(vocabs.values())) > 1:
        raise ConfigError(
            "the corpora of one run must share a vocabulary: "
            + ", ".join(f"{n} has {v}" for n, v in vocabs.items())
        )
    if vocab_size is not None and max(vocabs.values()) > vocab_size:
        raise ConfigError(
            f"model.vocab_size={vocab_size} is smaller than the corpora's vocabulary ({max(vocabs.values())})"
        )


def load_named(cfg: DataConfig, names: Sequence[str]) -> dict[str, Corpus]:
    """The corpora `names` (data.* itself with its `max_unique_tokens` cap, the others whole)."""
    known = named_configs(cfg)
    out = {n: load_corpus(known[n]) for n in names}
    shas = {c.identity.get("tokenizer_sha256") for c in out.values()} - {None}
    if len(shas) > 1:
        raise ConfigError(
            f"the prepared corpora {', '.join(names)} use different tokenizers: they cannot be mixed"
        )
    return out


class MixtureSampler:
    """Batch i of a mixture: row j from corpus k(g), g = i * batch_size + j (the module docstring's
    Weyl sequence), at an offset of that corpus drawn from rng(seed, i). The interface of
    corpus.BatchSampler (`rows`, `batch`, `seq_len`)."""

    def __init__(self, corpora: Sequence[tuple[str, Any, float]], seq_len: int, batch_size: int, seed: int):
        weights = np.array([w for _, _, w in corpora], float)
        if not (weights >= 0).all() or weights.sum() <= 0:
            raise ConfigError("data.mixture needs at least one corpus of weight > 0")
        self.names = [n for n, _, _ in corpora]
        self.weights = weights / weights.sum()
        self.cum = np.cumsum(self.weights)
        self.last = int(np.flatnonzero(self.weights > 0)[-1])
        self.samplers = [
            BatchSampler(tokens, seq_len, batch_size, seed, what=f"{name} training") if w > 0 else None
            for (name, tokens, _), w in zip(corpora, self.weights)
        ]
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed

    def sources(self, i: int) -> np.ndarray:
        """The corpus index of each row of batch i, shape (batch_size,)."""
        g = np.arange(i * self.batch_size, (i + 1) * self.batch_size, dtype=np.float64)
        u = np.mod((g + 1.0) * _PHI, 1.0)
        return np.minimum(np.searchsorted(self.cum, u, side="right"), self.last)

    def rows(self, i: int, rows: Sequence[int] | np.ndarray | slice | None = None) -> np.ndarray:
        src = self.sources(i)
        frac = np.random.default_rng([self.seed, i]).random(self.batch_size)
        sel = np.arange(self.batch_size)[rows] if rows is not None else np.arange(self.batch_size)
        L1 = self.seq_len + 1
        out = np.empty((len(sel), L1), dtype=np.int32)
        for j, r in enumerate(sel):
            s = self.samplers[src[r]]
            o = int(frac[r] * s.n_starts)
            out[j] = s.tokens[o : o + L1]
        return out

    def batch(self, i: int) -> np.ndarray:
        return self.rows(i)

    def shares(self, steps: int) -> dict[str, float]:
        """Each corpus's share of the rows of batches 0 .. steps-1 (what the run trained on)."""
        counts = np.bincount(
            np.concatenate([self.sources(i) for i in range(steps)]) if steps else np.zeros(0, int),
            minlength=len(self.names),
        )
        return {n: float(c) / max(1, counts.sum()) for n, c in zip(self.names, counts)}
