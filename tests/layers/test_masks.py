import torch

from aiayn.layers import causal_mask, combine, padding_mask


def test_causal_mask_by_hand():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # the last 2 queries of 4 positions (decoding with a cache)
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def test_padding_and_causal_combined():
    ids = torch.tensor([[7, 8, 0]])
    assert padding_mask(ids, 0).shape == (1, 1, 1, 3)
    both = combine(padding_mask(ids, 0), causal_mask(3), None)
    assert both[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine(None, None) is None
