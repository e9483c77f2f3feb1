"""The building blocks every family is made of."""

from aiayn.layers.attention import MultiHeadAttention, record_attention, scaled_dot_product_attention
from aiayn.layers.blocks import DecoderBlock, EncoderBlock, Stack
from aiayn.layers.embedding import Embedding, check_ids
from aiayn.layers.feedforward import FeedForward
from aiayn.layers.kv_cache import DecoderCache, KVCache, LayerCache
from aiayn.layers.masks import causal_mask, combine, padding_mask
from aiayn.layers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sine_encoding_2d,
    sinusoidal_encoding,
)

__all__ = [
    "MultiHeadAttention", "record_attention", "scaled_dot_product_attention", "DecoderBlock", "EncoderBlock",
    "Stack", "Embedding", "check_ids", "FeedForward", "DecoderCache", "KVCache", "LayerCache", "causal_mask",
    "combine", "padding_mask", "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "sinusoidal_encoding",
    "sine_encoding_2d",
]
