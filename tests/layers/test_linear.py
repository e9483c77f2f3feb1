"""The few-rows (AVX2) and oneDNN products of ``aiayn.layers.linear`` against ``F.linear``."""

import pytest
import torch
import torch.nn.functional as F

from aiayn.layers.linear import FEW_ROWS, ONEDNN_MIN, Linear, linear


@pytest.mark.parametrize("shape", [(1, 24), (3, 1, 24), (2, 5, 24), (FEW_ROWS + 1, 24), (0, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_f_linear_for_few_and_many_rows(shape, bias):
    x, w, b = torch.randn(*shape), torch.randn(40, 24), torch.randn(40) if bias else None
    got = linear(x, w, b)
    assert got.shape == (*shape[:-1], 40) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_one_row_of_a_wider_tensor_and_a_slice_of_the_weight():
    # generation feeds the last column of (B, T, C) and attention a row slice of its fused projection
    assert ONEDNN_MIN <= 1024 * 1024  # so the one row takes oneDNN's product (on any CPU)
    x, w, b = torch.randn(1, 5, 1024)[:, -1:], torch.randn(3072, 1024)[1024:2048], torch.randn(3072)[1024:2048]
    with torch.no_grad():  # outputs of size ~32 (sums of 1024 products): float rounding reaches 2e-5
        torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-4)


def test_one_row_under_autocast_is_computed_in_its_precision():
    x, w = torch.randn(1, 1024), torch.randn(1024, 1024)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, expected = linear(x, w), F.linear(x, w)
    assert got.dtype == expected.dtype == torch.bfloat16


@pytest.mark.parametrize(("rows", "d"), [(3, 8), (1, 1024), (8, 1024)])  # a large matrix: oneDNN's when no gradient
def test_gradients_flow_as_through_nn_linear(rows, d):
    torch.manual_seed(0)
    ours, ref = Linear(d, d), torch.nn.Linear(d, d)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(rows, d, requires_grad=True)
    ours(x).square().sum().backward()
    x2 = x.detach().requires_grad_()
    ref(x2).square().sum().backward()
    for a, b in [(x.grad, x2.grad), (ours.weight.grad, ref.weight.grad), (ours.bias.grad, ref.bias.grad)]:
        torch.testing.assert_close(a, b)
    assert list(ours.state_dict()) == ["weight", "bias"]
