"""Persistent XLA compilation cache for the analysis CLI and the training/RL runs.

A fit compiles a few optimiser programs (seconds on CPU) that are identical from one invocation
to the next, because data and start counts are padded to a short ladder of shapes. A sweep's
runs share model shapes across budgets, so their train and eval steps are the same programs
too. Caching them on disk makes a repeated `python -m analysis fit` start in a fraction of that
time, and halves a small training run (13.1 s -> 6.6 s, compile 4.6 s -> 1.2 s, tiny model,
30 steps, 2-core CPU). Only the CLI and the run loops turn this on (a library should not change
a notebook's global JAX configuration).

Where it lives (first that is set wins):
  SCALELAB_JAX_CACHE=DIR   this directory (`=0` turns the cache off);
  SCALELAB_CACHE=ROOT      ROOT/jax, next to scalelab's other caches under the same root
                           (corpora, CPU peak FLOP/s, RL warm starts);
  neither                  ~/.cache/scalelab/jax.
On a cluster, point SCALELAB_CACHE at a shared filesystem so every node reuses one cache.
"""

from __future__ import annotations

import os
import pathlib
from typing import Mapping

DIR_ENV = "SCALELAB_JAX_CACHE"  # the cache directory itself, or 0 = off
ROOT_ENV = "SCALELAB_CACHE"  # root of all scalelab caches; the JAX cache is ROOT/jax
# Every program is cached, however fast it compiles and however small its entry: a CLI fit's
# dozen programs each compile in 0.03-0.5 s, and JAX's defaults (1 s; an entry-size floor chosen
# for the filesystem) would recompile every one of them in every process.
MIN_COMPILE_SECS = 0.0
NO_MIN_ENTRY_SIZE = -1  # JAX's value for "no size floor, and never override it"


def compile_cache_dir(env: Mapping[str, str] | None = None) -> pathlib.Path | None:
    """The cache directory the environment asks for, or None when it is turned off."""
    env = os.environ if env is None else env
    setting = env.get(DIR_ENV, "")
    if setting == "0":
        return None
    if setting:
        return pathlib.Path(setting).expanduser()
    root = env.get(ROOT_ENV, "") or "~/.cache/scalelab"
    return pathlib.Path(root).expanduser() / "jax"


def enable_compile_cache() -> None:
    """Turn the persistent cache on for this process (before its first compile), caching every
    program (`MIN_COMPILE_SECS`, `NO_MIN_ENTRY_SIZE`); a failure leaves it off, never raises."""
    path = compile_cache_dir()
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        import jax  # lazy: callers enable the cache before their first compile, not at import

        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", NO_MIN_ENTRY_SIZE)
    except (OSError, AttributeError, ValueError):  # the cache is an optimisation only
        pass
