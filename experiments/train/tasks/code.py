"""Downstream tasks on Python source (the default corpus: the standard library's `.py` files).

Both read only the held-out split (files the corpus put in validation by path hash), and draw
their examples from `task_rng(eval.seed, name)`, so a run's examples depend on nothing else.

* `py_continuation` (multiple choice, 4 candidates): the context is the `seq_len + 1 - C` bytes
  before a cut inside a line of a function body (at least 4 bytes into its code, at least 8
  before its end); the candidates are the rest of that line (to its newline included) and the
  rests of three other cut held-out lines, in a random order. C = min(48, (seq_len + 1) // 2)
  bounds a candidate's length. The prediction is the candidate with the highest log-likelihood
  *per byte* (candidates differ in length; a total log-likelihood favours short ones). Chance =
  0.25. (Cutting at the line start instead, i.e. choosing among whole next lines, left the
  1M-token tiny model at chance: 0.27-0.29 on 256 examples, against 0.48 with the cut.)
* `py_identifier` (exact match): the context ends two bytes into an identifier of >= 6 bytes
  (not a keyword) that already occurs earlier in the context; the answer is the rest of the
  identifier plus the byte after it. It measures in-context copying, which small models learn
  late. Chance = 0.
"""

from __future__ import annotations

import keyword
import re

import numpy as np

from experiments.train.tasks.base import (
    BuildContext,
    TaskSet,
    TaskSpec,
    assemble_rows,
    register_task,
    task_rng,
)
from models.base.errors import ConfigError

MIN_SEQ_LEN = 32  # shorter windows leave too little context to mean anything
N_CHOICES = 4
MIN_HEAD = 4  # py_continuation: code bytes of the line left in the context
MIN_REST = 8  # ... and bytes of the line in the candidate (before its newline)
PREFIX = 2  # identifier bytes given in the context
MIN_IDENT = 6
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = {k.encode() for k in keyword.kwlist + keyword.softkwlist}


def continuation_budget(seq_len: int) -> int:
    """Longest candidate line (bytes, newline included) that `py_continuation` uses."""
    return min(48, (seq_len + 1) // 2)


def answer_budget(seq_len: int) -> int:
    """Longest `py_identifier` answer (bytes)."""
    return min(16, (seq_len + 1) // 3)


def function_body_lines(text: bytes) -> list[tuple[int, bytes]]:
    """(offset, line without its newline) of every non-blank line inside a `def`'s body.

    A stack of the open defs' indentations: a line indented no deeper than the innermost def
    closes it. Lines indented with tabs are skipped (the standard library uses spaces)."""
    out: list[tuple[int, bytes]] = []
    stack: list[int] = []
    offset = 0
    for raw in text.split(b"\n")[:-1]:  # the last piece has no newline: never a candidate
        start, offset = offset, offset + len(raw) + 1
        body = raw.lstrip(b" ")
        if not body or body.startswith(b"\t"):
            continue
        indent = len(raw) - len(body)
        while stack and indent <= stack[-1]:
            stack.pop()
        if body.startswith((b"def ", b"async def ")):
            stack.append(indent)
        elif stack:
            out.append((start, raw))
    return out


def _continuation_candidates(text: bytes, seq_len: int, rng: np.random.Generator) -> list[tuple[int, bytes]]:
    """(split offset, rest of the line with its newline) for function-body lines: each line is
    cut at a point drawn from `rng`, at least MIN_HEAD bytes into its code and MIN_REST bytes
    before its end; kept if the rest fits the candidate budget and a full context precedes it."""
    budget = continuation_budget(seq_len)
    ctx_len = seq_len + 1 - budget
    out = []
    for offset, line in function_body_lines(text):
        code = line.lstrip(b" ")
        if code.startswith(b"#"):
            continue
        lo, hi = len(line) - len(code) + MIN_HEAD, len(line) - MIN_REST
        if hi < lo:
            continue
        cut = int(rng.integers(lo, hi + 1))
        if len(line) - cut + 1 <= budget and offset + cut >= ctx_len:
            out.append((offset + cut, line[cut:] + b"\n"))
    return out


def build_continuation(ctx: BuildContext) -> TaskSet:
    text = bytes(ctx.val)
    rng = task_rng(ctx.seed, "py_continuation")
    cands = _continuation_candidates(text, ctx.seq_len, rng)
    if len(cands) < ctx.examples:
        raise ConfigError(
            f"eval.tasks: py_continuation found {len(cands)} held-out function-body lines, "
            f"fewer than eval.examples={ctx.examples} (is the corpus Python source?)"
        )
    rests = sorted({rest for _, rest in cands})
    ctx_len = ctx.seq_len + 1 - continuation_budget(ctx.seq_len)
    contexts, answers, answer_E = [], [], []
    for i in rng.choice(len(cands), size=ctx.examples, replace=False):
        split, rest = cands[i]
        others = [r for r in rests if r != rest]
        options = [others[j] for j in rng.choice(len(others), size=N_CHOICES - 1, replace=False)]
        k = int(rng.integers(N_CHOICES))
        options.insert(k, rest)
        contexts += [text[split - ctx_len : split]] * N_CHOICES
        answers += options
        answer_E.append(k)
    tokens, mask = assemble_rows(contexts, answers, ctx.seq_len)
    return TaskSet(
        "py_continuation",
        "choice",
        tokens,
        mask,
        N_CHOICES,
        np.array(answer_E),
        1.0 / N_CHOICES,
        f"{ctx.examples} x {N_CHOICES} choices",
    )


def _copied_identifier(text: bytes, start: int, word: bytes, ctx_len: int) -> bool:
    """Whether `word` occurs as a whole identifier in the context before position `start`."""
    window = text[start + PREFIX - ctx_len : start]
    return re.search(rb"(?<![A-Za-z0-9_])" + re.escape(word) + rb"(?![A-Za-z0-9_])", window) is not None


def build_identifier(ctx: BuildContext) -> TaskSet:
    text = bytes(ctx.val)
    budget = answer_budget(ctx.seq_len)
    ctx_len = ctx.seq_len + 1 - budget
    occ = [
        (m.start(), m.group())
        for m in _IDENT.finditer(text)
        if MIN_IDENT <= len(m.group()) <= budget + PREFIX - 1
        and m.group() not in _KEYWORDS
        and m.start() + PREFIX >= ctx_len
        and m.end() < len(text)
    ]
    rng = task_rng(ctx.seed, "py_identifier")
    picked: list[tuple[int, bytes]] = []
    for i in rng.permutation(len(occ)):
        if _copied_identifier(text, *occ[i], ctx_len):
            picked.append(occ[i])
            if len(picked) == ctx.examples:
                break
    if len(picked) < ctx.examples:
        raise ConfigError(
            f"eval.tasks: py_identifier found {len(picked)} held-out identifiers to complete, "
            f"fewer than eval.examples={ctx.examples}"
        )
    contexts = [text[s + PREFIX - ctx_len : s + PREFIX] for s, _ in picked]
    answers = [w[PREFIX:] + text[s + len(w) : s + len(w) + 1] for s, w in picked]
    tokens, mask = assemble_rows(contexts, answers, ctx.seq_len)
    return TaskSet(
        "py_identifier",
        "exact",
        tokens,
        mask,
        1,
        np.zeros(len(picked), np.int64),
        0.0,
        f"{len(picked)} identifiers",
    )


register_task(
    TaskSpec(
        "py_continuation",
        build_continuation,
        lambda cfg: MIN_SEQ_LEN,
        "pick a held-out function's next line among 4 (likelihood per byte)",
    )
)
register_task(
    TaskSpec(
        "py_identifier",
        build_identifier,
        lambda cfg: MIN_SEQ_LEN,
        "complete an identifier seen earlier in the context (greedy, exact match)",
    )
)
