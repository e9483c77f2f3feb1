"""``nn.Linear`` whose product takes the CPU fast path for the few rows of decoding.

``linear(x, W, b)`` is ``F.linear``: ``x W^T + b``. With :data:`aiayn.layers.fast.ENABLED` (the default), a
CPU product may go to oneDNN's inner product (:func:`aiayn.layers.fast.linear_onednn`, or
:func:`aiayn.layers.fast.linear_packed` over a blocked copy of the weight) or be computed swapped
(:func:`aiayn.layers.fast.linear_few_rows`): the same values, by the kernel that :mod:`aiayn.layers.kernels`
measured fastest on this machine for that shape (or by its fixed rules, ``AIAYN_KERNELS=rules``).

Shapes: N rows (every leading dimension of ``x`` together), K in, O out.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import fast, kernels
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
    if fast.ENABLED and x.device.type == "cpu":  # the same product, by the kernel this machine runs fastest
        kernel = kernels.choose(x, weight, bias)
        if kernel == "onednn":
            return fast.linear_onednn(x, weight, bias)
        if kernel == "swapped":
            return fast.linear_few_rows(x, weight, bias)
        if kernel == "packed":
            return fast.linear_packed(x, weight, bias)
        if kernel == "reduced":
            return fast.linear_reduced(x, weight, bias)
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
