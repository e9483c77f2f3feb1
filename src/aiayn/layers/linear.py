"""``nn.Linear`` with one speed-up for the few-rows products of decoding.

Decoding multiplies a handful of rows (one position per sentence, per beam) by wide weight matrices. On the
CPU, PyTorch's ``F.linear`` hands ``x W^T`` to the BLAS with the large matrix as the transposed right
operand, and for few rows that is far from the best the BLAS can do. The same product computed the other
way round, ``(W x^T)^T``, was 1.3-3.8x faster on this project's machine (2-core AMD EPYC, PyTorch's MKL
build) for 4 to 64 rows, and still 1.05-1.5x at 256; from about 1,000 rows (training) the usual way is
faster. ``benchmarks/results/decode-*.json`` show what it does for a whole decode. Values agree with
``F.linear`` to float rounding.

Shapes: N rows (every leading dimension of ``x`` together), K in, M out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = 256  # at most this many rows take the swapped product (measured on the CPU; GPUs keep F.linear)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: ``x`` ``(..., K)``, ``weight`` ``(M, K)`` -> ``(..., M)``."""
    rows = x.numel() // max(x.size(-1), 1)
    if x.device.type != "cpu" or rows > FEW_ROWS or rows == 0 or x.dtype != weight.dtype:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.size(-1)).t()  # (K, N)
    out = weight @ flat if bias is None else torch.addmm(bias[:, None], weight, flat)  # (M, N)
    return out.t().contiguous().view(*x.shape[:-1], weight.size(0))  # contiguous, as F.linear's (fused attention needs it)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


__all__ = ["FEW_ROWS", "Linear", "linear"]
