"""The few-rows product of ``aiayn.layers.linear`` against ``F.linear``."""

import pytest
import torch
import torch.nn.functional as F

from aiayn.layers.linear import FEW_ROWS, Linear, linear


@pytest.mark.parametrize("shape", [(1, 24), (3, 1, 24), (2, 5, 24), (FEW_ROWS + 1, 24), (0, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_f_linear_for_few_and_many_rows(shape, bias):
    x, w, b = torch.randn(*shape), torch.randn(40, 24), torch.randn(40) if bias else None
    got = linear(x, w, b)
    assert got.shape == (*shape[:-1], 40) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_gradients_flow_as_through_nn_linear():
    torch.manual_seed(0)
    ours, ref = Linear(8, 6), torch.nn.Linear(8, 6)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 8, requires_grad=True)
    ours(x).square().sum().backward()
    x2 = x.detach().requires_grad_()
    ref(x2).square().sum().backward()
    for a, b in [(x.grad, x2.grad), (ours.weight.grad, ref.weight.grad), (ours.bias.grad, ref.bias.grad)]:
        torch.testing.assert_close(a, b)
    assert list(ours.state_dict()) == ["weight", "bias"]
