"""Data: tokenizers, corpora, synthetic tasks, batching. Imports no model code."""

from aiayn.data.batching import collate, encode_pairs, length_batches, pad, seq2seq_batch, token_batches
from aiayn.data.bpe import BPETokenizer, PretrainedTokenizer, load_tokenizer, train_tokenizers
from aiayn.data.corpus import held_out_split, multi30k, read_corpus, read_parallel, read_text, read_tsv
from aiayn.data.lm import lm_batches, lm_blocks
from aiayn.data.synthetic import date_lines, make_pairs
from aiayn.data.tokenizer import CharTokenizer

__all__ = [
    "collate", "encode_pairs", "length_batches", "pad", "seq2seq_batch", "token_batches", "BPETokenizer", "PretrainedTokenizer",
    "load_tokenizer", "train_tokenizers", "lm_batches", "lm_blocks", "multi30k", "read_parallel", "read_tsv", "make_pairs",
    "date_lines", "held_out_split", "read_corpus", "read_text", "CharTokenizer",
]
