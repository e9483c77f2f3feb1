"""The attention-cost measurements: the memory tracker against allocations of known size, and the trend; Table 1's
layers: the blocked restricted attention against a dense band mask, the formulas against the modules."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from aiayn.analysis import formulas
from aiayn.analysis.complexity import (
    LAYERS,
    attention_costs,
    band_mask,
    crossing,
    layer_costs,
    layer_formulas,
    local_attention,
    peak_memory,
)
from aiayn.layers import MultiHeadAttention

ROOT = Path(__file__).resolve().parents[2]


def test_peak_memory_counts_live_tensors_and_frees_them():
    def two_then_one():
        a = torch.ones(1000)  # 4,000 bytes
        b = torch.ones(500, dtype=torch.float64)  # 4,000 bytes, both alive: 8,000
        del a, b
        c = torch.ones(100)  # 400 bytes after both are gone
        return c.view(10, 10)  # a view: no new storage

    out, peak = peak_memory(two_then_one)
    assert out.shape == (10, 10) and peak == 8000


def test_window_attention_is_linear_and_global_quadratic_in_memory():
    rows = attention_costs(sides=(7, 14, 28), channels=16, heads=2, window=7, repeats=1)
    assert [r["tokens"] for r in rows] == [49, 196, 784]
    small, big = rows[0], rows[-1]
    # At 7 x 7 the map is one window: the same computation.
    assert small["global_macs"] == small["window_macs"] and small["global_score_bytes"] == small["window_score_bytes"]
    # 16 times the patches: window cost x 16, global scores x 256.
    assert big["window_score_bytes"] == 16 * small["window_score_bytes"]
    assert big["global_score_bytes"] == 256 * small["global_score_bytes"]
    # Measured: global attention holds at least its score matrix; windows hold far less.
    assert big["global_bytes"] >= big["global_score_bytes"] > 4 * big["window_bytes"]
    assert all(r[k] > 0 for r in rows for k in ("global_seconds", "window_seconds"))


# --- Table 1 of Vaswani et al. 2017: one layer of each kind ------------------------------------------------

def test_band_mask_by_hand():
    assert band_mask(5, 3).int().tolist() == [[1, 1, 0, 0, 0],
                                              [1, 1, 1, 0, 0],
                                              [0, 1, 1, 1, 0],
                                              [0, 0, 1, 1, 1],
                                              [0, 0, 0, 1, 1]]
    assert band_mask(4, 2).sum(dim=1).tolist() == [1, 2, 2, 2]  # keys i-1 and i
    with pytest.raises(ValueError, match="r=0"):
        band_mask(4, 0)


@pytest.mark.parametrize("n,r", [(13, 4), (16, 4), (7, 5), (5, 16), (9, 1)])
def test_local_attention_is_the_band_masked_attention(n, r):
    """The blocked O(n r d) computation against the whole attention with a dense band mask: values and grads."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(2, n, 16, requires_grad=True)
    out = local_attention(mha, x, r)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    ref = mha(x, mask=band_mask(n, r))[0]
    (gref,) = torch.autograd.grad(ref.square().sum(), x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, gref)


def _lstm_by_hand(lstm, x):
    """nn.LSTM's equations step by step (its CPU kernel is opaque to FlopCounterMode): the four gates from
    x_t W_ih^T + h W_hh^T + biases, i f g o in PyTorch's order."""
    h = c = x.new_zeros(x.size(0), lstm.hidden_size)
    outs = []
    for t in range(x.size(1)):
        i, f, g, o = (x[:, t] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T
                      + lstm.bias_hh_l0).chunk(4, dim=-1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        outs.append(h)
    return torch.stack(outs, dim=1)


def test_layer_formulas_match_the_modules():
    """Parameters of nn.LSTM / nn.Conv1d, and the multiply-adds FlopCounterMode counts in their forward."""
    torch.manual_seed(0)
    n, d, k = 12, 8, 3
    lstm, conv = nn.LSTM(d, d, batch_first=True), nn.Conv1d(d, d, k, padding="same")
    x = torch.randn(1, n, d)
    torch.testing.assert_close(_lstm_by_hand(lstm, x), lstm(x)[0])
    for module, counts, run in ((lstm, formulas.lstm(n, d, d), lambda: _lstm_by_hand(lstm, x)),
                                (conv, formulas.conv1d(n, d, d, k), lambda: conv(x.transpose(1, 2)))):
        assert sum(p.numel() for p in module.parameters()) == counts.total_parameters
        with FlopCounterMode(display=False) as fc:
            run()
        assert fc.get_total_flops() == 2 * counts.total_macs, module
    at = layer_formulas(n, d, k, r=4)
    assert at["self-attention"]["macs"] == formulas.attention(n, n, d).total_macs == at["fused-attention"]["macs"]
    assert at["restricted"]["macs"] == 4 * n * d * d + 2 * n * 4 * d
    assert [at[kind]["sequential"] for kind in LAYERS] == [1, 1, n, 1, 1]
    assert [at[kind]["path"] for kind in LAYERS] == [1, 1, n, 3, 3]  # ceil(log_3 12), 12 / 4


def test_crossing_interpolates_on_log_axes():
    xs = [1, 2, 4, 8]
    quadratic, linear = [x * x for x in xs], [4 * x for x in xs]  # equal at x = 4
    assert crossing(xs, quadratic, linear) == pytest.approx(4)
    assert crossing(xs, [x * x for x in xs], [3 * x for x in xs]) == pytest.approx(3)  # between 2 and 4
    assert crossing(xs, linear, [x / 2 for x in xs]) is None


def test_layer_costs_memory_grows_as_the_formulas_say():
    rows = layer_costs(lengths=(32, 128), d_model=16, heads=2, kernel=3, r=8, repeats=1)
    small, big = rows
    assert [r["n"] for r in rows] == [32, 128] and all(r[f"{k}_seconds"] > 0 for r in rows for k in LAYERS)
    # explicit attention holds (H, n, n) scores: 4 x the positions, about 16 x the bytes; the rest are linear
    assert big["self-attention_bytes"] >= 4 * 2 * 128 * 128  # at least the float32 scores of 2 heads
    assert big["self-attention_bytes"] / small["self-attention_bytes"] > 8
    for kind in ("fused-attention", "recurrent", "convolutional", "restricted"):
        assert big[f"{kind}_bytes"] / small[f"{kind}_bytes"] < 6, kind
    with pytest.raises(ValueError, match="lengths"):
        layer_costs(lengths=(0,))
    with pytest.raises(ValueError, match="heads"):
        layer_costs(lengths=(8,), d_model=10, heads=3)


def test_layer_complexity_script_quick(tmp_path):
    spec = importlib.util.spec_from_file_location("layer_complexity", ROOT / "benchmarks" / "layer_complexity.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--quick", "--lengths", "8", "16", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "layer_complexity.json").read_text())
    assert [r["n"] for r in result["rows"]] == [8, 16] and result["summary"]["formula_crossing_n"] == 64
    png = (tmp_path / "layer_complexity.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_resnet_classifier_against_hugging_face():
    """ResNet-50 (the Swin comparison of docs/numbers.md): parameters of a random-weight Hugging Face ResNet
    built from a config, and the multiply-adds FlopCounterMode counts at 64 x 64; ResNet-101 against
    torchvision's published count."""
    transformers = pytest.importorskip("transformers")
    config = transformers.ResNetConfig(depths=[3, 4, 6, 3], num_labels=1000)
    model = transformers.ResNetForImageClassification(config).eval()
    ours = formulas.resnet_classifier((3, 4, 6, 3), image_size=64)
    assert sum(p.numel() for p in model.parameters()) == ours.total_parameters
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    assert fc.get_total_flops() == 2 * ours.total_macs
    assert formulas.resnet_classifier((3, 4, 6, 3)).total_parameters == 25_557_032
    assert formulas.resnet_classifier((3, 4, 23, 3)).total_parameters == 44_549_160
