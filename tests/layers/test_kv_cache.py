"""The preallocated key/value cache: appending and reordering rows, against plain concatenation."""

import pytest
import torch

from aiayn.layers.kv_cache import KVCache


def test_reordered_cache_equals_reordering_the_concatenated_keys():
    torch.manual_seed(0)
    cache, keys, values = KVCache(max_len=6), [], []
    for step, index in enumerate([None, [1, 1, 0], [2, 0, 1], [0, 0, 0], None]):
        k, v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 5)
        keys, values = keys + [k], values + [v]
        got_k, got_v = cache.append(k, v)
        assert torch.equal(got_k, torch.cat(keys, 2)) and torch.equal(got_v, torch.cat(values, 2))
        if index is not None:
            index = torch.tensor(index)
            cache.reorder(index)
            keys, values = [t[index] for t in keys], [t[index] for t in values]
            k_now, v_now = cache.k[:, :, : step + 1], cache.v[:, :, : step + 1]
            assert torch.equal(k_now, torch.cat(keys, 2)) and torch.equal(v_now, torch.cat(values, 2))


def test_a_reorder_that_changes_the_batch_size_makes_new_buffers():
    cache = KVCache(max_len=4)
    k = torch.arange(2 * 3, dtype=torch.float).view(2, 1, 3, 1)
    cache.append(k, k)
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.k.shape == (3, 1, 4, 1)
    assert torch.equal(cache.k[:, :, :3], k[[1, 1, 0]])


def test_a_windowed_cache_keeps_what_a_new_position_can_see_in_order_and_at_most_twice_the_window():
    torch.manual_seed(0)
    window, cache, keys = 3, KVCache(max_len=40, window=3), []
    for t in [2, 1, 1, 1, 1, 4, 1, 1, 9, 1, 1, 1, 1, 1, 1, 1]:  # steps, chunks, and a prompt longer than 2W
        k = torch.randn(2, 1, t, 4)
        first = cache.first_visible(t)
        got_k, got_v = cache.append(k, -k)
        keys.append(k)
        every = torch.cat(keys, 2)  # (2, 1, positions so far, 4)
        # what the new positions may still see is there: the W - 1 positions before the first new one
        assert first <= max(0, every.size(2) - t - (window - 1))
        assert torch.equal(got_k, every[:, :, first:]) and torch.equal(got_v, -every[:, :, first:])
        assert cache.k.size(2) <= max(2 * window, window - 1 + 9)  # only the 9-position chunk grew it
    assert cache.length == every.size(2) == 28 and cache.start > 0
    cache.reorder(torch.tensor([1, 0]))  # beam search after a roll: the kept positions follow the rows
    assert torch.equal(cache.k[:, :, : cache.length - cache.start], every[[1, 0], :, cache.start :])


def test_without_a_window_nothing_is_dropped_and_max_len_is_enforced():
    cache = KVCache(max_len=5)
    cache.append(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    assert cache.first_visible(2) == 0 and cache.k.size(2) == 5
    with pytest.raises(ValueError, match="holds 5 positions; cannot add 3 to 3"):
        cache.append(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))


def test_a_cache_given_another_batch_is_refused_by_name():
    import aiayn

    model = aiayn.build("gpt-tiny", vocab_size=20, n_layers=1).eval()
    cache = model.new_cache(16)
    model(torch.randint(0, 20, (3, 4)), cache=cache)
    with pytest.raises(ValueError, match=r"holds a batch of 3 rows x 4 heads; the input has 2 x 4 .*new_cache"):
        model(torch.randint(0, 20, (2, 1)), cache=cache)
