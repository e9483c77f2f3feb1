import pytest
import torch

import aiayn
from aiayn.decoding import filter_logits, next_token, sample


def test_top_k_never_returns_a_token_outside_the_k_most_likely():
    torch.manual_seed(0)
    logits = torch.randn(4, 30)
    allowed = logits.topk(5, dim=-1).indices
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        tok = next_token(logits, temperature=1.5, top_k=5, generator=gen)
        assert (allowed == tok[:, None]).any(dim=1).all()


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert torch.isfinite(filter_logits(logits, top_p=0.75)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.4)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(filter_logits(logits, top_p=1.0)).all()
    shuffled = logits[:, [2, 0, 3, 1]]  # the nucleus follows the tokens, not their positions
    assert torch.isfinite(filter_logits(shuffled, top_p=0.75)).tolist() == [[False, True, False, True]]
    gen = torch.Generator().manual_seed(1)
    seen = {int(next_token(shuffled, top_p=0.75, generator=gen)) for _ in range(300)}
    assert seen == {1, 3}


def model():
    torch.manual_seed(0)
    return aiayn.build("gpt-tiny", vocab_size=40, d_model=32, n_heads=2, n_layers=2, d_ff=64, eos_id=3).eval()


def test_the_same_seed_gives_the_same_text_and_the_cache_changes_nothing():
    m = model()
    prompts = [[5, 6, 7], [8]]
    runs = [sample(m, prompts, 15, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(s),
                   use_cache=c) for s, c in ((7, True), (7, False), (8, True))]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert [r[:len(p)] for r, p in zip(runs[0], prompts)] == prompts


def test_greedy_is_argmax_and_rows_stop_at_eos():
    m = model()
    prompt = torch.tensor([[5, 6, 7]])
    out = sample(m, prompt, 6, temperature=0)
    with torch.no_grad():
        for t in range(3, out.size(1)):
            assert out[0, t] == m(out[:, :t])[0, -1].argmax()
    eos = int(out[0, 4])  # pretend the second new token is the end of text
    m.cfg = aiayn.models.config.override(m.cfg, eos_id=eos)
    stopped = sample(m, [[5, 6, 7]], 6, temperature=0, eos_id=eos)
    first = out[0].tolist().index(eos, 3)  # the first new token equal to it
    assert stopped == [out[0, : first + 1].tolist()]
    with pytest.raises(ValueError, match="temperature must be in"):
        sample(m, prompt, 3, temperature=-1)


def test_several_end_ids_stop_each_row_at_the_first_it_produces():
    m = model()
    prompts = [[5, 6, 7], [8, 9]]
    free = sample(m, prompts, 8, temperature=0)
    a, b = free[0][3 + 5], free[1][2 + 2]  # row 0's sixth new token, row 1's third: both rows end early
    cut = [row[: next(i for i in range(len(p), len(row)) if row[i] in (a, b)) + 1] for row, p in zip(free, prompts)]
    assert sample(m, prompts, 8, temperature=0, eos_id=[a, b]) == cut
    tensor = sample(m, torch.tensor([[5, 6, 7]]), 8, temperature=0, eos_id=(a, b))
    assert tensor[0, : len(cut[0])].tolist() == cut[0] and set(tensor[0, len(cut[0]):].tolist()) <= {a}
