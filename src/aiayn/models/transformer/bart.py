"""BART (Lewis et al., 2020): the Transformer encoder-decoder, pre-trained to reconstruct corrupted text.

Architecturally BART is the paper's Transformer with a few of its switches set differently, so it is
:class:`~aiayn.models.transformer.Transformer` with these presets, not another model class:

    learned positions (Hugging Face keeps 2 unused rows first: ``positional_offset=2``),
    LayerNorm on the embedding sums (``embed_norm``), no sqrt(d_model) scaling, GELU,
    post-norm blocks, one token table for both sides tied to the output, no output bias,
    decoding starts with ``</s>`` (``bos_id == eos_id == 2``), padding is id 1.

Its pre-training corruptions (token masking, deletion, text infilling, sentence permutation, document
rotation) are in :mod:`aiayn.data.noising`.
"""

from __future__ import annotations

from aiayn.models.transformer.model import TransformerConfig


def _bart(d_model: int, n_layers: int, n_heads: int, vocab_size: int = 50265, max_len: int = 1024,
          **kw) -> TransformerConfig:
    return TransformerConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=d_model, n_heads=n_heads,
        n_encoder_layers=n_layers, n_decoder_layers=n_layers, d_ff=4 * d_model, dropout=0.1, attention_dropout=0.0,
        activation="gelu", positional="learned", max_len=max_len, positional_offset=2, embed_norm=True,
        scale_embedding=False, norm_first=False, share_embeddings=True, tie_output=True, output_bias=False,
        pad_id=1, bos_id=2, eos_id=2, **kw,
    )


PRESETS = {
    "bart-base": _bart(768, 6, 12),  # 139,420,416 parameters
    "bart-large": _bart(1024, 12, 16),  # 406,291,456 parameters
    # For tests and the default denoising job on a laptop CPU; the vocabulary comes from the tokenizer
    # (aiayn's specials: <pad> 0, <s> 1, </s> 2).
    "bart-tiny": TransformerConfig(
        src_vocab_size=1000, tgt_vocab_size=1000, d_model=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=512, activation="gelu", positional="learned", max_len=256, positional_offset=2, embed_norm=True,
        scale_embedding=False, output_bias=False, pad_id=0, bos_id=2, eos_id=2,
    ),
}

__all__ = ["PRESETS"]
