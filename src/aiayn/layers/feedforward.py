"""Position-wise feed-forward network (section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers.linear import Linear

ACTIVATIONS = {
    "relu": F.relu,  # the paper
    "gelu": F.gelu,  # BERT, ViT, Swin (erf form)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2
    "silu": F.silu,  # Marian (OPUS-MT), which calls it "swish"
}
# the same, overwriting their input: the hidden layer is the widest activation, and when no gradient needs
# it, writing the activation over it saves allocating (and first touching) as much memory again
IN_PLACE = {
    "relu": F.relu_,
    "gelu": torch.ops.aten.gelu_,
    "gelu_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "silu": lambda x: F.silu(x, inplace=True),
}


class FeedForward(nn.Module):
    """Linear(C, d_ff) -> activation -> dropout -> Linear(d_ff, C), the same at every position.

    The inner ``dropout`` is not in the paper (section 5.4 drops sub-layer outputs and embedding sums);
    tensor2tensor calls it ``relu_dropout``, fairseq and Marian ``activation_dropout``; 0 by default.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} must be one of {sorted(ACTIVATIONS)}")
        self.fc1 = Linear(d_model, d_ff)
        self.fc2 = Linear(d_ff, d_model)
        self.activation, self.activation_ = ACTIVATIONS[activation], IN_PLACE[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, T, C)
        h = self.fc1(x)  # (B, T, d_ff)
        h = self.activation(h) if torch.is_grad_enabled() and h.requires_grad else self.activation_(h)
        return self.fc2(self.dropout(h))
