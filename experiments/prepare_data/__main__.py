"""`python -m experiments.prepare_data INPUT... --out DIR [--tokenizer tokenizer.json | --vocab-size V]`

Tokenizes text into DIR for `python -m experiments.train data.dir=DIR`. Without --tokenizer a
byte-level BPE of --vocab-size tokens is trained on the input first. Bad input ends with one
`error: ...` line and exit 2; Ctrl-C exits 130 and the same command started again resumes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.prepare_data.build import DEFAULT_VOCAB, PrepareOptions, prepare
from models.base.errors import ScalelabError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every scalelab command
        print(f"error: {message} (see --help)", file=sys.stderr, flush=True)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m experiments.prepare_data",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="text files (one document each), .jsonl/.parquet/.arrow files (one document per "
        "row), directories (walked) or quoted globs",
    )
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--tokenizer", type=Path, help="an existing Hugging Face tokenizer.json (not trained)")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help=f"BPE vocabulary to train (default {DEFAULT_VOCAB}); with --tokenizer, a check",
    )
    p.add_argument(
        "--text-column", default="text", help="field / column holding the text in JSONL, Parquet, Arrow"
    )
    p.add_argument(
        "--val-fraction", type=float, default=0.05, help="share of documents held out for validation"
    )
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="training tokens per shard (about)")
    p.add_argument("--workers", type=int, default=0, help="tokenizer processes (0: one per CPU)")
    p.add_argument(
        "--tokenizer-train-chars",
        type=float,
        default=1e9,
        help="train the BPE on the first this many characters of the input",
    )
    p.add_argument(
        "--eot-token", default=None, help="end-of-text token of --tokenizer (default: found by name)"
    )
    p.add_argument(
        "--pad-vocab-multiple",
        type=int,
        default=1,
        help="round meta.json's vocab_size (the model's embedding rows) up to a multiple of this",
    )
    p.add_argument("--overwrite", action="store_true", help="replace what DIR holds from another preparation")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.inputs:
        print("error: no input files given", file=sys.stderr, flush=True)
        return 2
    opts = PrepareOptions(
        inputs=tuple(args.inputs),
        out=args.out,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        text_column=args.text_column,
        val_fraction=args.val_fraction,
        shard_tokens=args.shard_tokens,
        workers=args.workers,
        tokenizer_train_chars=int(args.tokenizer_train_chars) or None,
        eot_token=args.eot_token,
        pad_vocab_multiple=args.pad_vocab_multiple,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    try:
        prepare(opts)
    except ScalelabError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(
            f"error: interrupted; start the same command again to resume ({args.out / 'progress.json'} "
            "records the finished shards)",
            file=sys.stderr,
            flush=True,
        )
        return 130
    except OSError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
