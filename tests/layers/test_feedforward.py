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


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_is_shazeers_formula_written_out_with_the_modules_own_weights(bias):
    # Shazeer (2020), eq. 6: FFN_SwiGLU(x) = (Swish_1(x W) * x V) W_2; Llama's MLP names W gate_proj, V up_proj and
    # W_2 down_proj: down_proj(silu(gate_proj(x)) * up_proj(x)). Here gate = W (gate_proj), fc1 = V (up_proj),
    # fc2 = W_2 (down_proj), as aiayn.models.gpt.llama maps them.
    torch.manual_seed(0)
    ff = FeedForward(8, 24, activation="swiglu", bias=bias)
    assert ff.gate is not None and ff.gate.weight.shape == ff.fc1.weight.shape == (24, 8)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    w, v, w2 = (m.weight.double() for m in (ff.gate, ff.fc1, ff.fc2))
    gate, up = x @ w.T, x @ v.T
    if bias:
        gate, up = gate + ff.gate.bias.double(), up + ff.fc1.bias.double()
    swish = gate * (1 / (1 + torch.exp(-gate)))  # Swish_1(z) = z * sigmoid(z), written out
    expected = (swish * up) @ w2.T + (ff.fc2.bias.double() if bias else 0)
    with torch.no_grad():
        got = ff(x.float())
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)
    # the gate and the up projection play different parts: swapping their weights changes the output
    with torch.no_grad():
        swapped = FeedForward(8, 24, activation="swiglu", bias=bias)
        swapped.load_state_dict(ff.state_dict())
        swapped.gate.weight.copy_(ff.fc1.weight)
        swapped.fc1.weight.copy_(ff.gate.weight)
        assert not torch.allclose(swapped(x.float()), got, atol=1e-3)
