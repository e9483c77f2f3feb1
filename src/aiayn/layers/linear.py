"""``nn.Linear`` whose product takes the CPU fast path for the few rows of decoding.

``linear(x, W, b)`` is ``F.linear``: ``x W^T + b``. With :data:`aiayn.layers.fast.ENABLED` (the default), a
CPU product that needs no gradient by a matrix of at least ``ONEDNN_MIN`` weights goes to oneDNN's inner product
(:func:`aiayn.layers.fast.linear_onednn`; on AVX2 one row only), and on AVX2 a product of at most ``FEW_ROWS``
rows to :func:`aiayn.layers.fast.linear_few_rows`: the same values, computed the way the CPU does it fastest.

Shapes: N rows (every leading dimension of ``x`` together), K in, O out.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import fast
from aiayn.layers.fast import FEW_ROWS, ONEDNN_MIN


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``.

    Args:
        x: ``(..., K)``.
        weight: ``(O, K)``.
        bias: ``(O,)`` or ``None``.

    Returns:
        ``(..., O)``, contiguous.
    """
    if fast.ENABLED:  # on the CPU the same product, faster where one of these applies
        if fast.onednn_suits(x, weight, bias):
            return fast.linear_onednn(x, weight, bias)
        if fast.linear_suits(x, weight):
            return fast.linear_few_rows(x, weight, bias)
    return F.linear(x, weight, bias)  # x W^T + b


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state dict) computed by :func:`linear`."""

    def forward(self, x: Tensor) -> Tensor:  # (..., K) -> (..., O)
        return linear(x, self.weight, self.bias)

    def rows(self, x: Tensor, rows: slice) -> Tensor:
        """``x`` through the output rows ``rows`` alone (attention's query or key/value rows): ``(..., K)`` ->
        ``(..., len(rows))``; :class:`aiayn.layers.int8.Int8Linear` answers the same call."""
        return linear(x, self.weight[rows], None if self.bias is None else self.bias[rows])


__all__ = ["FEW_ROWS", "ONEDNN_MIN", "Linear", "linear"]
