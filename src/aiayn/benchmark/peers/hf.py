"""Hugging Face models with our presets' sizes and random weights (no downloads): the peers of most cases, and
the models ours is converted from (``aiayn.from_hf``) so both sides run the same weights. ``transformers`` is
imported inside the functions (the ``hf`` extra)."""

from __future__ import annotations

import torch
from torch import nn

from aiayn.models import preset
from aiayn.models.transformer import TransformerConfig


def marian(cfg: TransformerConfig, final_bias: dict[int, float] | None = None) -> nn.Module:
    """A randomly initialised ``MarianMTModel`` with the sizes of ``cfg`` (ReLU, shared and tied embeddings);
    ``final_bias`` sets entries of its logits bias."""
    import transformers

    hf = transformers.MarianMTModel(transformers.MarianConfig(
        vocab_size=cfg.src_vocab_size, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=cfg.activation,
        max_position_embeddings=cfg.max_len, scale_embedding=cfg.scale_embedding, dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout, pad_token_id=cfg.pad_id,
        decoder_start_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, forced_eos_token_id=None))
    with torch.no_grad():
        for token, value in (final_bias or {}).items():
            hf.final_logits_bias[0, token] = value
    return hf


def gpt2_hf(quick: bool) -> nn.Module:
    """``GPT2LMHeadModel`` of the 124M config (quick: a tiny one), random weights."""
    import transformers

    if quick:
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=500, n_positions=64,
                                      bos_token_id=499, eos_token_id=499)
    else:
        cfg = transformers.GPT2Config()
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def vision_hf(name: str) -> nn.Module:
    """The Hugging Face image classifier with the sizes of our preset ``name`` (random weights)."""
    import transformers

    cfg = preset(name)
    if name.startswith("swin"):
        return transformers.SwinForImageClassification(transformers.SwinConfig(
            image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=cfg.in_channels, embed_dim=cfg.d_model,
            depths=list(cfg.n_layers), num_heads=list(cfg.n_heads), window_size=cfg.window_size,
            mlp_ratio=cfg.mlp_ratio, num_labels=cfg.num_classes))
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=cfg.in_channels, hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_ff,
        num_labels=cfg.num_classes))


__all__ = ["gpt2_hf", "marian", "vision_hf"]
