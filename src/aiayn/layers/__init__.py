"""The building blocks every family is made of."""

from aiayn.layers.attention import MultiHeadAttention, record_attention
from aiayn.layers.blocks import NORMS, DecoderBlock, EncoderBlock, Stack, norm_layer
from aiayn.layers.embedding import Embedding, check_ids, tied_linear
from aiayn.layers.feedforward import FeedForward
from aiayn.layers.functional import scaled_dot_product_attention
from aiayn.layers.kv_cache import DecoderCache, KVCache, LayerCache
from aiayn.layers.masks import causal_mask, combine, padding_mask
from aiayn.layers.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    sine_encoding_2d,
    sinusoidal_encoding,
)
from aiayn.layers.scoring import (
    SCORINGS,
    AdditiveScore,
    BilinearScore,
    DotScore,
    ScaledDotScore,
    Scorer,
    make_scorer,
    record_samples,
    reinforce_loss,
)

__all__ = [
    "NORMS",
    "SCORINGS",
    "AdditiveScore",
    "BilinearScore",
    "DecoderBlock",
    "DecoderCache",
    "DotScore",
    "Embedding",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "ScaledDotScore",
    "Scorer",
    "SinusoidalPositionalEncoding",
    "Stack",
    "apply_rotary",
    "causal_mask",
    "check_ids",
    "combine",
    "make_scorer",
    "norm_layer",
    "padding_mask",
    "record_attention",
    "record_samples",
    "reinforce_loss",
    "scaled_dot_product_attention",
    "sine_encoding_2d",
    "sinusoidal_encoding",
    "tied_linear",
]
