"""The preallocated key/value cache: appending and reordering rows, against plain concatenation."""

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
