"""``nn.Linear`` with two speed-ups for the few-rows products of decoding.

Decoding multiplies a handful of rows (one position per sentence, per beam) by wide weight matrices. On the
CPU, PyTorch's ``F.linear`` hands ``x W^T`` to the BLAS with the large matrix as the transposed right
operand, and for few rows that is far from the best the BLAS can do. The same product computed the other
way round, ``(W x^T)^T``, is faster on the CPUs this project runs on (PyTorch's MKL build) for a few dozen
rows, and slower from about 1,000 rows (training), where the usual way stays; ``FEW_ROWS`` draws the line.
``docs/benchmarks.md`` (the ``decode-*`` cases) shows what it does for a whole decode.

A single row (generation with batch 1) by a large weight matrix goes to oneDNN's inner product instead, when
no gradient is needed: it streams the weights from memory faster than the BLAS's matrix-vector product
(``docs/benchmarks.md``, the ``gpt2-generate`` case). Each call has a fixed cost of its own, so matrices under
``ONEDNN_MIN`` elements (768 x 768 included) keep the BLAS. Values agree with ``F.linear`` to float rounding.

Shapes: N rows (every leading dimension of ``x`` together), K in, M out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = 256  # at most this many rows take the swapped product (measured on the CPU; GPUs keep F.linear)
ONEDNN_MIN = 1 << 20  # from this many weights a single row takes oneDNN's inner product (CPU, no gradient)
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: ``x`` ``(..., K)``, ``weight`` ``(M, K)`` -> ``(..., M)``."""
    rows = x.numel() // max(x.size(-1), 1)
    if x.device.type != "cpu" or rows > FEW_ROWS or rows == 0 or x.dtype != weight.dtype:
        return F.linear(x, weight, bias)
    if rows == 1 and _onednn_suits(x, weight, bias):
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(1, -1), weight.contiguous(), bias, "none", [], "")
        return out.view(*x.shape[:-1], weight.size(0))
    flat = x.reshape(rows, x.size(-1)).t()  # (K, N)
    out = weight @ flat if bias is None else torch.addmm(bias[:, None], weight, flat)  # (M, N)
    return out.t().contiguous().view(*x.shape[:-1], weight.size(0))  # contiguous, as F.linear's (fused attention needs it)


def _onednn_suits(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """A float32 product by a large matrix that needs no gradient (oneDNN's op has no backward) and that
    autocast would not have run in a lower precision."""
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    return (_ONEDNN and weight.numel() >= ONEDNN_MIN and x.dtype == torch.float32 and not needs_grad
            and not torch.is_autocast_enabled("cpu"))


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


__all__ = ["FEW_ROWS", "ONEDNN_MIN", "Linear", "linear"]
