"""Data: tokenizers, corpora, synthetic tasks, batching. Imports no model code."""

from aiayn.data.batching import collate, encode_pairs, length_batches, pad, seq2seq_batch, token_batches
from aiayn.data.bpe import BPETokenizer, PretrainedTokenizer, load_tokenizer, train_tokenizers
from aiayn.data.callable import CallableTokenizer
from aiayn.data.corpus import held_out_split, multi30k, read_corpus, read_parallel, read_text, read_tsv
from aiayn.data.lm import lm_batches, lm_blocks, lm_stream_pass, lm_streams
from aiayn.data.synthetic import date_lines, make_pairs
from aiayn.data.tokenizer import CharTokenizer

__all__ = [
    "BPETokenizer",
    "CallableTokenizer",
    "CharTokenizer",
    "PretrainedTokenizer",
    "collate",
    "date_lines",
    "encode_pairs",
    "held_out_split",
    "length_batches",
    "lm_batches",
    "lm_blocks",
    "lm_stream_pass",
    "lm_streams",
    "load_tokenizer",
    "make_pairs",
    "multi30k",
    "pad",
    "read_corpus",
    "read_parallel",
    "read_text",
    "read_tsv",
    "seq2seq_batch",
    "token_batches",
    "train_tokenizers",
]
