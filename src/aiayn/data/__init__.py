"""Data: tokenizers, synthetic tasks, batching. Imports no model code."""

from aiayn.data.batching import collate, encode_pairs, length_batches, pad, seq2seq_batch, token_batches
from aiayn.data.synthetic import make_pairs
from aiayn.data.tokenizer import CharTokenizer

__all__ = ["collate", "encode_pairs", "length_batches", "pad", "seq2seq_batch", "token_batches", "make_pairs", "CharTokenizer"]
