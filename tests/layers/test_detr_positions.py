"""DETR's additions to the shared layers: the 2-D sine encoding, positions on queries and keys (never values),
and every decoder layer's output through the final LayerNorm."""

import math

import torch
from torch import nn

from aiayn.layers import DecoderBlock, EncoderBlock, MultiHeadAttention, Stack, sine_encoding_2d


def test_2d_sine_encoding_against_hand_computed_values():
    # d_model 8: y takes channels 0-3, x channels 4-7; frequencies 1 and 1/10000^(2/4) = 1/100 each.
    mask = torch.ones(1, 2, 3, dtype=torch.bool)
    pe = sine_encoding_2d(mask, 8, normalize=False)
    assert pe.shape == (1, 2, 3, 8)
    y, x = 2.0, 3.0  # row 1, column 2: 1-based coordinates 2 and 3
    expected = [math.sin(y), math.cos(y), math.sin(y / 100), math.cos(y / 100),
                math.sin(x), math.cos(x), math.sin(x / 100), math.cos(x / 100)]
    torch.testing.assert_close(pe[0, 1, 2], torch.tensor(expected))
    normalized = sine_encoding_2d(mask, 8)  # the last real row and column sit at 2 pi (up to 1e-6)
    torch.testing.assert_close(normalized[0, 1, 2, [0, 4]], torch.tensor([0.0, 0.0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalized[0, 0, 0, 0], torch.tensor(math.sin(2 * math.pi / 2)), atol=1e-5, rtol=0)


def test_2d_sine_encoding_counts_only_real_pixels():
    # A 2x2 image padded to 3x4 gets, on its real pixels, the encoding of the 2x2 image alone.
    mask = torch.zeros(1, 3, 4, dtype=torch.bool)
    mask[0, :2, :2] = True
    padded, alone = sine_encoding_2d(mask, 16), sine_encoding_2d(torch.ones(1, 2, 2, dtype=torch.bool), 16)
    torch.testing.assert_close(padded[0, :2, :2], alone[0])


def test_positions_go_to_queries_and_keys_not_values_as_torch_multihead_attention_computes():
    torch.manual_seed(0)
    ours, ref = MultiHeadAttention(16, 4), nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x, pos = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    memory, memory_pos = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, pos=pos)[0], ref(x + pos, x + pos, x)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours(x, memory, pos=pos, memory_pos=memory_pos)[0],
                                   ref(x + pos, memory + memory_pos, memory)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours(x)[0], ref(x, x, x)[0], atol=1e-5, rtol=1e-5)  # no pos: unchanged
        k, v = ours.project_kv(memory, memory_pos)  # the cached path agrees with the direct one
        torch.testing.assert_close(ours(x, memory, pos=pos, kv=(k, v))[0], ours(x, memory, pos=pos,
                                                                             memory_pos=memory_pos)[0])


def test_blocks_pass_positions_to_every_attention():
    torch.manual_seed(0)
    enc, dec = EncoderBlock(16, 4, 32, dropout=0.0).eval(), DecoderBlock(16, 4, 32, dropout=0.0).eval()
    x, pos = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    memory, memory_pos = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        h = enc.norm1(x + enc.self_attn(x, pos=pos)[0])
        torch.testing.assert_close(enc(x, pos=pos), enc.norm2(h + enc.ff(h)))
        h = dec.norm1(x + dec.self_attn(x, pos=pos)[0])
        h = dec.norm2(h + dec.cross_attn(h, memory, pos=pos, memory_pos=memory_pos)[0])
        torch.testing.assert_close(dec(x, memory=memory, pos=pos, memory_pos=memory_pos), dec.norm3(h + dec.ff(h)))
        assert not torch.allclose(dec(x, memory=memory, pos=pos, memory_pos=memory_pos), dec(x, memory=memory, pos=pos))


def test_layer_outputs_are_each_layer_through_the_final_norm_and_the_last_is_forward():
    torch.manual_seed(0)
    stack = Stack([DecoderBlock(16, 4, 32, dropout=0.0) for _ in range(3)], 16, final_norm=True).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        outs = stack.layer_outputs(x, memory=memory)
        h = x
        for layer, out in zip(stack.layers, outs):
            h = layer(h, memory=memory)  # the next layer sees the un-normalised state
            torch.testing.assert_close(out, stack.norm(h))
        torch.testing.assert_close(outs[-1], stack(x, memory=memory))
    assert len(outs) == 3
