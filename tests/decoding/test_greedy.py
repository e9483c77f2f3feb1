import torch

import aiayn
from aiayn.decoding import greedy


def model_and_src():
    model = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    return model, src


def naive_greedy(model, src_row, max_len):
    """Argmax of the full model on the growing prefix, one sentence at a time."""
    ys = [model.cfg.bos_id]
    for _ in range(max_len):
        nxt = int(model(src_row[None], torch.tensor([ys]))[0, -1].argmax())
        ys.append(nxt)
        if nxt == model.cfg.eos_id:
            break
    return ys[1:]


def test_greedy_with_cache_equals_recompute_and_a_naive_loop():
    model, src = model_and_src()
    cached = greedy(model, src, max_len=12)
    recomputed = greedy(model, src, max_len=12, use_cache=False)
    assert torch.equal(cached, recomputed)
    for row, s in zip(cached.tolist(), [src[0], src[1, :3]]):
        expected = naive_greedy(model, s, 12)
        assert row[: len(expected)] == expected
        assert all(t == model.cfg.pad_id for t in row[len(expected):])


def test_cached_logits_equal_full_recompute_at_every_step():
    model, src = model_and_src()
    tgt = torch.tensor([[1, 4, 9, 12, 3], [1, 7, 7, 8, 5]])
    full = model(src, tgt)
    memory = model.encode(src)
    cache = model.new_cache(8)
    steps = [model.decode(tgt[:, t : t + 1], memory, src, cache=cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # several positions at once through the cache (a prompt) agree too
    cache = model.new_cache(8)
    first = model.decode(tgt[:, :3], memory, src, cache=cache)
    rest = model.decode(tgt[:, 3:], memory, src, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)
