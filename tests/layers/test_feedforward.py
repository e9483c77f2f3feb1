import pytest
import torch
import torch.nn.functional as F

from aiayn.layers import FeedForward

REFERENCE = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


@pytest.mark.parametrize("activation", sorted(REFERENCE))
@pytest.mark.parametrize("chunk", [None, 3])
def test_the_in_place_activation_without_gradients_equals_the_usual_one(activation, chunk, monkeypatch):
    if chunk:  # 10 positions in groups of 3, 3, 3, 1
        monkeypatch.setattr("aiayn.layers.feedforward.CHUNK_ROWS", chunk)
    torch.manual_seed(0)
    ff = FeedForward(8, 32, activation=activation)
    x = torch.randn(2, 5, 8)
    before = x.clone()
    expected = F.linear(REFERENCE[activation](F.linear(x, ff.fc1.weight, ff.fc1.bias)), ff.fc2.weight, ff.fc2.bias)
    with torch.no_grad():
        torch.testing.assert_close(ff(x), expected)
    torch.testing.assert_close(x, before)  # the input is never overwritten
    ff(x).sum().backward()  # with gradients the activation keeps its input for the backward pass
    assert ff.fc1.weight.grad.abs().sum() > 0
