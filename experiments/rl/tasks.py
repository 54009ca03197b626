"""Verifiable RL tasks with fixed-length prompts and answers and an exact-match reward.

Tokens are bytes (ASCII), so a task model has vocab 256 and any byte-level model from the
training core (`python -m experiments.train`) can be RL-fine-tuned on a task directly.

A completion is the answer followed by EOS ('\\n'), `answer_len + 1` tokens; the policy decodes
exactly that many tokens (static shapes) and whatever follows its first EOS is masked out.
Reward = 1 iff the completion up to and including its first EOS equals answer + EOS.

Tasks (all items drawn from a numpy Generator, so a prompt set is a pure function of its seed):
- add:     "{a:>n}+{b:>n}=" -> (a+b) as n+1 digits, zero-padded, digits *reversed* (least
           significant first, so the answer is computed in the order it is written). Operand
           lengths are drawn uniformly from [min_len, max_len]; difficulty = longer operand's
           digit count.
- reverse: "{s:_<n}>" -> reversed s padded with '_' to n;  s = lowercase letters.
- sort:    "{s:_<n}>" -> digits of s ascending, padded;     s = digits.
- copy:    "{s:_<n}>" -> s padded;                          s = lowercase letters.
- parity:  "{s:_<n}>" -> '1' if s has an odd number of '1's else '0';  s = bits.
For the last four, length k is drawn from [min_len, max_len] and difficulty = k.

The evaluation set is drawn once from `eval_seed` and never changes; training prompts for step i
are drawn from (seed, i), so resuming a run needs no replay. With `train_pool > 0`, training
prompts are instead drawn from a fixed pool of that size ("one pass over the prompts" is then
defined, and used by the fitter's burn-in).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping

import numpy as np

from models.base.configs import check_choice, check_int, config_from_mapping
from models.base.errors import ConfigError

EOS = ord("\n")


class TaskName(enum.StrEnum):
    """`rl.task.name`: what the policy is asked (a prompt and its one right answer)."""

    ADD = "add"  # two numbers of min_len..max_len digits: their sum, digits reversed
    REVERSE = "reverse"  # a string of letters, reversed
    SORT = "sort"  # a string of digits, sorted
    COPY = "copy"  # a string of letters, copied
    PARITY = "parity"  # a string of bits: 1 if it holds an odd number of ones


TASKS = tuple(t.value for t in TaskName)
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
_DIGITS = np.frombuffer(b"0123456789", np.uint8)
_BITS = np.frombuffer(b"01", np.uint8)
# The symbols of each string task's items.
_ALPHABETS = {
    TaskName.REVERSE: _LETTERS,
    TaskName.COPY: _LETTERS,
    TaskName.SORT: _DIGITS,
    TaskName.PARITY: _BITS,
}


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """One task: its name, the item-length range, the fixed eval set and the training stream."""

    name: str = "add"
    min_len: int = 1  # add: operand digits; others: string length
    max_len: int = 3
    eval_size: int = 512  # held-out prompts
    eval_seed: int = 1234  # the eval set is a pure function of this (and name/lengths)
    train_pool: int = 0  # 0 = fresh prompts every step; >0 = a fixed pool of this size

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> "TaskConfig":
        return config_from_mapping(cls, m, "rl.task")

    def validate(self) -> None:
        check_choice("rl.task.name", self.name, TaskName)
        for k in ("min_len", "max_len", "eval_size"):
            check_int(f"rl.task.{k}", getattr(self, k), 1, what="a positive integer")
        if self.min_len > self.max_len:
            raise ConfigError(f"rl.task.min_len={self.min_len} exceeds rl.task.max_len={self.max_len}")
        if self.name == TaskName.ADD and self.max_len > 9:
            raise ConfigError("rl.task.max_len must be <= 9 digits for add")
        check_int("rl.task.train_pool", self.train_pool, 0)


@dataclasses.dataclass(frozen=True)
class Batch:
    """prompts_NxP and answers_NxA as int32 byte tokens (answer includes the final EOS),
    difficulty_N as int labels (see `Task.difficulty_names`)."""

    prompts: np.ndarray
    answers: np.ndarray
    difficulty: np.ndarray

    def __len__(self) -> int:
        return int(self.prompts.shape[0])


class Task:
    """Prompt/answer generator for one TaskConfig (stateless: every draw is seeded)."""

    def __init__(self, cfg: TaskConfig):
        cfg.validate()
        self.cfg = cfg
        n = cfg.max_len
        if cfg.name == TaskName.ADD:
            self.prompt_len, self.answer_len = 2 * n + 2, n + 1
        elif cfg.name == TaskName.PARITY:
            self.prompt_len, self.answer_len = n + 1, 1
        else:
            self.prompt_len, self.answer_len = n + 1, n
        self._eval: Batch | None = None
        self._pool: Batch | None = None

    @property
    def completion_len(self) -> int:
        """Tokens the policy generates: the answer plus EOS."""
        return self.answer_len + 1

    @property
    def seq_len(self) -> int:
        """Prompt + completion tokens."""
        return self.prompt_len + self.completion_len

    @property
    def difficulty_names(self) -> list[str]:
        unit = "d" if self.cfg.name == TaskName.ADD else ""
        return [f"{k}{unit}" for k in range(self.cfg.min_len, self.cfg.max_len + 1)]

    # ---- drawing items ---------------------------------------------------------------------
    def draw(self, rng: np.random.Generator, n: int) -> Batch:
        cfg = self.cfg
        lens = rng.integers(cfg.min_len, cfg.max_len + 1, size=(n, 2 if cfg.name == TaskName.ADD else 1))
        prompts = np.empty((n, self.prompt_len), np.uint8)
        answers = np.empty((n, self.completion_len), np.uint8)
        for i in range(n):
            p, a = self._item(rng, lens[i])
            prompts[i] = np.frombuffer(p.encode(), np.uint8)
            answers[i, :-1] = np.frombuffer(a.encode(), np.uint8)
        answers[:, -1] = EOS
        diff = lens.max(axis=1) - cfg.min_len
        return Batch(prompts.astype(np.int32), answers.astype(np.int32), diff.astype(np.int32))

    def _item(self, rng: np.random.Generator, lens: np.ndarray) -> tuple[str, str]:
        n, name = self.cfg.max_len, self.cfg.name
        if name == TaskName.ADD:
            a, b = (int(rng.integers(10 ** (k - 1) if k > 1 else 0, 10**k)) for k in lens)
            return f"{a:>{n}}+{b:>{n}}=", str(a + b).zfill(n + 1)[::-1]
        k = int(lens[0])
        alphabet = {TaskName.REVERSE: _LETTERS, TaskName.COPY: _LETTERS, TaskName.SORT: _DIGITS}.get(
            name, _BITS
        )
        s = rng.choice(alphabet, size=k).tobytes().decode()
        prompt = f"{s:_<{n}}>"
        if name == TaskName.REVERSE:
            return prompt, f"{s[::-1]:_<{n}}"
        if name == TaskName.COPY:
            return prompt, f"{s:_<{n}}"
        if name == TaskName.SORT:
            return prompt, f"{''.join(sorted(s)):_<{n}}"
        return prompt, str(s.count("1") % 2)  # TaskName.PARITY

    def eval_set(self) -> Batch:
        """The fixed held-out set (same for every run with the same task config)."""
        if self._eval is None:
            self._eval = self.draw(np.random.default_rng([self.cfg.eval_seed, 7]), self.cfg.eval_size)
        return self._eval

    def train_batch(self, seed: int, step: int, n: int) -> Batch:
        """Training prompts of RL step `step` (pure function of seed and step)."""
        rng = np.random.default_rng([seed, step, 11])
        if self.cfg.train_pool:
            if self._pool is None:
                self._pool = self.draw(np.random.default_rng([seed, 13]), self.cfg.train_pool)
            idx = rng.integers(0, self.cfg.train_pool, size=n)
            return Batch(self._pool.prompts[idx], self._pool.answers[idx], self._pool.difficulty[idx])
        return self.draw(rng, n)

    def decode(self, tokens: np.ndarray) -> str:
        return bytes(np.asarray(tokens, np.uint8)).decode(errors="replace")


def rewards(completions_NxA: Any, answers_NxA: Any) -> Any:
    """Exact-match reward (works on numpy or jax arrays): 1.0 iff the completion up to and
    including its first EOS equals the answer (whose last token is EOS)."""
    xp = _xp(completions_NxA)
    is_eos = completions_NxA == EOS
    before_first_eos = xp.cumsum(is_eos, axis=1) - is_eos == 0  # tokens up to first EOS
    ok = (completions_NxA == answers_NxA) | ~before_first_eos
    return xp.all(ok, axis=1).astype(xp.float32) * xp.any(is_eos, axis=1)


def completion_mask(completions_NxA: Any) -> Any:
    """1.0 for tokens up to and including the first EOS (the tokens the policy 'said')."""
    xp = _xp(completions_NxA)
    is_eos = (completions_NxA == EOS).astype(xp.int32)
    return (xp.cumsum(is_eos, axis=1) - is_eos == 0).astype(xp.float32)


def _xp(a: Any):
    """numpy for numpy arrays, jax.numpy otherwise."""
    if isinstance(a, np.ndarray):
        return np
    # Imported here: TaskConfig is part of the RL config schema (experiments/rl/config.py), which
    # the command line registers before composing, so importing this module stays JAX-free.
    import jax.numpy as jnp

    return jnp
