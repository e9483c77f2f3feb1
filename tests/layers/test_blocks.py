"""The shared blocks and their stack take every argument past the input by name, and the stack hands each to
every block."""

import pytest
import torch

from aiayn.layers import DecoderBlock, EncoderBlock, MultiHeadAttention, Stack, padding_mask


def test_arguments_past_the_input_are_keyword_only():
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    decoder = Stack([DecoderBlock(16, 4, 32, dropout=0.0) for _ in range(2)], 16, final_norm=False)
    with pytest.raises(TypeError):
        EncoderBlock(16, 4, 32)(x, None)
    with pytest.raises(TypeError):
        decoder.layers[0](x, memory)
    with pytest.raises(TypeError):
        decoder(x, memory)
    with pytest.raises(TypeError):
        decoder.layer_outputs(x, memory)
    with pytest.raises(TypeError):
        MultiHeadAttention(16, 4)(x, memory, None)  # memory may go by position, nothing after it


def test_the_stack_passes_its_keywords_to_every_block():
    torch.manual_seed(0)
    decoder = Stack([DecoderBlock(16, 4, 32, dropout=0.0) for _ in range(3)], 16, final_norm=False).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    memory_mask = padding_mask(torch.tensor([[1] * 5 + [0] * 2, [1] * 7]), 0)  # (B, 1, 1, S)
    with torch.no_grad():
        h = x
        for layer in decoder.layers:
            h = layer(h, memory=memory, memory_mask=memory_mask, is_causal=True)
        torch.testing.assert_close(decoder(x, memory=memory, memory_mask=memory_mask, is_causal=True), h)
        assert not torch.allclose(decoder(x, memory=memory, is_causal=True), h)  # the mask reached the blocks
