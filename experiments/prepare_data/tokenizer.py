"""The tokenizer of a prepared corpus: a byte-level BPE trained on the input (GPT-2's scheme:
every byte is a base token, so any text encodes without unknown tokens), or a Hugging Face
`tokenizer.json` the user brings. Needs the `tokenizers` package (`pip install tokenizers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

from experiments.prepare_data.sources import PrepareError

EOT = "<|endoftext|>"
# End-of-text spellings of common tokenizers (GPT-2/NeoX, Llama 3, Llama 2/T5, others), tried in order.
EOT_CANDIDATES = (EOT, "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[SEP]")
MIN_VOCAB = 257  # 256 byte tokens + the end-of-text token


def _tokenizers() -> Any:
    try:
        import tokenizers  # deferred: loaded when a tokenizer is built; missing, it is one error line
    except ImportError:
        raise PrepareError(
            "prepare_data needs the Hugging Face tokenizers package: pip install tokenizers"
        ) from None
    return tokenizers


def _capped(docs: Iterable[str], max_bytes: int | None) -> Iterator[str]:
    seen = 0
    for d in docs:
        yield d
        seen += len(d)
        if max_bytes is not None and seen >= max_bytes:
            return


def train_bpe(
    docs: Iterable[str], vocab_size: int, n_docs: int | None = None, max_bytes: int | None = None
) -> Any:
    """A byte-level BPE tokenizer of (at most) `vocab_size` tokens, `<|endoftext|>` included,
    trained on `docs` (the first `max_bytes` characters of them when given). The trainer stops
    early when the text has no pair left to merge, so a tiny input gives a smaller vocabulary."""
    if vocab_size < MIN_VOCAB:
        raise PrepareError(
            f"--vocab-size must be at least {MIN_VOCAB} (256 byte tokens + {EOT}); got {vocab_size}"
        )
    tk = _tokenizers()
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_capped(docs, max_bytes), trainer=trainer, length=n_docs)
    return tok


def load_tokenizer(path: Path) -> Any:
    tk = _tokenizers()
    if not path.is_file():
        raise PrepareError(f"--tokenizer: {path} not found")
    try:
        return tk.Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - the Rust side raises a plain Exception
        raise PrepareError(
            f"--tokenizer: {path} is not a Hugging Face tokenizer.json ({str(e).splitlines()[0]})"
        ) from None


def find_eot(tok: Any, name: str | None = None) -> tuple[int, str]:
    """(id, spelling) of the end-of-text token that separates documents."""
    for cand in [name] if name else EOT_CANDIDATES:
        i = tok.token_to_id(cand)
        if i is not None:
            return int(i), cand
    if name:
        raise PrepareError(f"--eot-token {name!r} is not in the tokenizer's vocabulary")
    raise PrepareError(
        f"the tokenizer has none of the end-of-text tokens {list(EOT_CANDIDATES)}; name one with --eot-token"
    )
