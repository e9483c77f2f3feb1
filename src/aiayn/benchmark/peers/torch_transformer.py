"""``torch.nn.Transformer`` dressed as the paper's model: the peer of the ``train-*`` cases (and of
``benchmarks/gpu.py``'s transformer-base training), with our weights copied in.

Shapes: B batch, S source length, T target length, C d_model, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.models.transformer import Transformer, TransformerConfig


def _interleaved_sinusoids(n: int, d: int) -> Tensor:
    """Section 3.5's table, written out here rather than taken from aiayn: PE(p, 2i) = sin(p / 10000^(2i/d)),
    PE(p, 2i+1) = cos(...)."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (n, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1).float()  # (n, d)


class TorchTransformer(nn.Module):
    """The paper's model around ``torch.nn.Transformer``: token embeddings x sqrt(C) + sinusoidal positions,
    dropout, post-norm ReLU layers, a pre-softmax projection tied to the (shared) embeddings.

    Two edits make it compute what ours computes: the extra final LayerNorm ``nn.Transformer`` puts after each
    post-norm stack is left out, and the dropouts ours does not have (on the attention weights, inside the
    feed-forward network) are off; ``dropout`` acts on every sub-layer output and on the embedding sums.
    """

    pe: Tensor  # (max_len, C) the sinusoid table, a buffer

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        c = cfg.d_model
        self.scale = math.sqrt(c)
        self.embed = nn.Embedding(cfg.src_vocab_size, c, padding_idx=cfg.pad_id)
        self.register_buffer("pe", _interleaved_sinusoids(cfg.max_len, c), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        layer: dict[str, Any] = {"d_model": c, "nhead": cfg.n_heads, "dim_feedforward": cfg.d_ff,
                                 "dropout": cfg.dropout, "batch_first": True}
        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), cfg.n_encoder_layers,
                                        enable_nested_tensor=False)
        decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), cfg.n_decoder_layers)
        self.transformer = nn.Transformer(c, cfg.n_heads, custom_encoder=encoder, custom_decoder=decoder,
                                          batch_first=True)
        for block in [*encoder.layers, *decoder.layers]:
            block.dropout = nn.Identity()  # inside the feed-forward network
            for attention in (block.self_attn, getattr(block, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = 0.0
        self.generator = nn.Linear(c, cfg.tgt_vocab_size)
        self.generator.weight = self.embed.weight
        self.pad_id = cfg.pad_id

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Logits ``(B, T, V)``; padding masked as a training loop masks it."""
        x = self.drop(self.embed(src) * self.scale + self.pe[: src.size(1)])  # (B, S, C)
        y = self.drop(self.embed(tgt) * self.scale + self.pe[: tgt.size(1)])  # (B, T, C)
        t = tgt.size(1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)  # (T, T) True = masked, as padding
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id
        h = self.transformer(x, y, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=src_pad,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.generator(h)

    def load_ours(self, model: Transformer) -> None:
        """Copy the weights of our :class:`~aiayn.models.transformer.Transformer` (shared, tied embeddings)."""
        table = model.src_embed.tokens.weight
        sd = {"embed.weight": table, "generator.weight": table, "generator.bias": model.generator.bias}
        for side in ("encoder", "decoder"):
            for name, p in getattr(model, side).state_dict().items():
                name = (name.replace("self_attn.in_proj.", "self_attn.in_proj_")
                        .replace("cross_attn.in_proj.", "multihead_attn.in_proj_")
                        .replace("cross_attn.", "multihead_attn.")
                        .replace("ff.fc1", "linear1").replace("ff.fc2", "linear2"))
                sd[f"transformer.{side}.{name}"] = p
        self.load_state_dict(sd, strict=True)  # any name that does not map fails here


__all__ = ["TorchTransformer"]
