"""Position-wise feed-forward network (section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2.

Gated variants (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6; Llama's MLP) multiply the activated
hidden layer by a second, linear one: FFN_SwiGLU(x) = (Swish(x W_gate) * x W1) W2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import fast
from aiayn.layers.linear import Linear

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,  # the paper
    "gelu": F.gelu,  # BERT, ViT, Swin (erf form)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2
    "silu": F.silu,  # Marian (OPUS-MT), which calls it "swish"
}
GATED: dict[str, str] = {"swiglu": "silu"}  # gated activation -> the activation of its gate (Llama, Mistral)
CHUNK_ROWS = 4096  # positions per group of the fast path without gradients (aiayn.layers.fast.feedforward_no_grad)


class FeedForward(nn.Module):
    """Linear(C, d_ff) -> activation -> dropout -> Linear(d_ff, C), the same at every position.

    The inner ``dropout`` is not in the paper (section 5.4 drops sub-layer outputs and embedding sums);
    tensor2tensor calls it ``relu_dropout``, fairseq and Marian ``activation_dropout``; 0 by default.

    A gated ``activation`` (a key of ``GATED``: ``"swiglu"``) adds ``gate``, Linear(C, d_ff), and computes
    ``fc2(dropout(act(gate(x)) * fc1(x)))``: Hugging Face's ``LlamaMLP`` with ``gate_proj`` = gate,
    ``up_proj`` = fc1, ``down_proj`` = fc2.

    Args:
        d_model: C, the width of the input and output.
        d_ff: the width of the hidden layer.
        dropout: the inner dropout rate.
        activation: a key of ``ACTIVATIONS`` or of ``GATED``.
        bias: give the linear layers biases (Llama has none).
    """

    gate: Linear | None

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS and activation not in GATED:
            raise ValueError(f"activation={activation!r} must be one of {sorted(ACTIVATIONS) + sorted(GATED)}")
        self.gate = Linear(d_model, d_ff, bias=bias) if activation in GATED else None
        self.fc1 = Linear(d_model, d_ff, bias=bias)
        self.fc2 = Linear(d_ff, d_model, bias=bias)
        self.activation, self.activation_name = ACTIVATIONS[GATED.get(activation, activation)], activation
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, T, C)
        if self.gate is not None:  # SwiGLU: the activated gate scales the hidden layer, position by position
            return self.fc2(self.dropout(self.activation(self.gate(x)) * self.fc1(x)))  # (B, T, C)
        if fast.ENABLED and x.device.type == "cpu" and not fast.needs_grad(x, *self.parameters()):  # less memory
            return fast.feedforward_no_grad(x, self.fc1, self.activation_name, self._output, chunk_rows=CHUNK_ROWS)
        return self.fc2(self.dropout(self.activation(self.fc1(x))))  # eq. 2

    def _output(self, hidden: Tensor) -> Tensor:  # the fast path's second half: dropout, then W2
        return self.fc2(self.dropout(hidden))
