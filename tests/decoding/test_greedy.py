import pytest
import torch
import torch.nn.functional as F

import aiayn
from aiayn.decoding import greedy

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

PAD, BOS, EOS = 0, 1, 2
# Two sentences of 4 and 2 tokens, the second padded: a model that copies ends them at different steps.
SRC = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]])


def model_and_src():
    model = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4).eval()
    return model, SRC


def train_copier(d_model: int = 32, d_ff: int = 64, lr: float = 1e-2):
    """A narrowed transformer-tiny taught for a few seconds (150 updates, one thread) to copy its source."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the one_thread fixture; see conftest.py
    torch.manual_seed(0)
    model = aiayn.build("transformer-tiny", src_vocab_size=30, tgt_vocab_size=30, d_model=d_model, n_heads=4,
                        d_ff=d_ff, dropout=0.0)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(150):
        src, body = copy_batch(32, gen)
        tgt = torch.cat([torch.full((32, 1), BOS), body], dim=1)  # shifted right: <s>, tokens, padding
        loss = F.cross_entropy(model(src, tgt).flatten(0, 1), src.flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    return model.eval()


def copy_batch(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src (n, 8), body (n, 7))``: 1 to 6 tokens, ``</s>``, padding; the body is the tokens alone."""
    lengths = torch.randint(1, 7, (n,), generator=gen)
    body = torch.randint(3, 30, (n, 7), generator=gen).masked_fill(torch.arange(7) >= lengths[:, None], PAD)
    src = torch.cat([body, torch.full((n, 1), PAD)], dim=1)
    src[torch.arange(n), lengths] = EOS
    return src, body


@pytest.fixture(scope="module")
def copier():
    """A tiny model taught for a few seconds to copy its source, so greedy decoding is not degenerate: the
    outputs depend on the source and end at ``</s>`` at different steps. An untrained model repeats one
    token until ``max_len`` and never shows whether finished rows are stopped and padded."""
    return train_copier()


@torch.no_grad()
def naive_greedy(model, src_row, max_len):
    """Argmax of the full model on the growing prefix, one unpadded sentence at a time; padding is never an
    output (greedy's contract)."""
    ys = [model.cfg.bos_id]
    for _ in range(max_len):
        logits = model(src_row[None], torch.tensor([ys]))[0, -1]
        logits[model.cfg.pad_id] = float("-inf")
        ys.append(int(logits.argmax()))
        if ys[-1] == model.cfg.eos_id:
            break
    return ys[1:]


def test_greedy_with_cache_equals_recompute_and_a_naive_loop(copier):
    model, max_len = copier, 12
    cached = greedy(model, SRC, max_len=max_len)
    recomputed = greedy(model, SRC, max_len=max_len, use_cache=False)
    assert torch.equal(cached, recomputed)
    ends = [row.index(EOS) if EOS in row else None for row in cached.tolist()]
    # not vacuous: both rows end before max_len, at different steps, so one is padded while the other goes on
    assert None not in ends and ends[0] != ends[1], f"rows should end at different steps: {cached.tolist()}"
    assert cached.size(1) == max(ends) + 1, "decoding stops as soon as every row has ended"
    for row, s, end in zip(cached.tolist(), [SRC[0], SRC[1, :3]], ends):
        assert row[: end + 1] == naive_greedy(model, s, max_len)
        assert row[end + 1 :] == [PAD] * (len(row) - end - 1), f"only padding after </s>: {row}"


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
