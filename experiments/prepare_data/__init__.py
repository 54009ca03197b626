"""Tokenized training corpora: `python -m experiments.prepare_data INPUT... --out DIR`.

sources.py reads documents (text, JSONL, Parquet, Arrow), tokenizer.py trains or loads the
Hugging Face tokenizer, build.py tokenizes in worker processes into resumable shards, and
format.py is the directory layout that the trainer reads with `data.dir=DIR`. Importing this
package (or format.py, as the trainer does) needs neither `tokenizers` nor pyarrow.
"""
