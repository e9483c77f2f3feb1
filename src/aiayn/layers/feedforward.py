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
# The hidden layer is the widest activation. When no gradient needs it, the activation overwrites it
# (IN_PLACE), and more than CHUNK_ROWS positions go through in groups of that many: buffers that size are
# reused from one call to the next, where glibc's malloc maps larger ones fresh from the system every time
# (page faults; at batch 8, swin-t's first stage has a 38.5 MB hidden layer).
CHUNK_ROWS = 4096
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
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            return self.fc2(self.dropout(self.activation(self.fc1(x))))
        rows = x.numel() // x.size(-1)
        if rows <= CHUNK_ROWS:
            return self.fc2(self.dropout(self.activation_(self.fc1(x))))
        flat = x.reshape(rows, -1)
        out = x.new_empty(rows, self.fc2.out_features)
        for i in range(0, rows, CHUNK_ROWS):
            out[i : i + CHUNK_ROWS] = self.fc2(self.dropout(self.activation_(self.fc1(flat[i : i + CHUNK_ROWS]))))
        return out.view(*x.shape[:-1], -1)
