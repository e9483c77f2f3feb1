"""Comparing two paths that round differently (compiled against eager, one CPU's kernels against another's) on
what they decode: the tokens are compared only where the eager path's choice has a margin larger than any rounding,
a margin the test measures itself; the scores are compared within a tolerance everywhere. A barely trained model
has near-ties (two n-best hypotheses of almost the same score), and which of them comes first is decided by the
last bits of a sum: a CPU with other kernels can flip it, so such a tie is never compared token for token."""

import torch

from aiayn.decoding import beam_search, greedy

MARGIN = 1e-3  # larger than any float32 rounding of these tiny models' log-probabilities (about 1e-6)


def greedy_margins(model, src: torch.Tensor) -> torch.Tensor:
    """``(B,)`` for each source row, the smallest gap between the best and the second log-probability over the
    steps of its eager greedy decoding (to its end token): how far each choice was from a tie."""
    with torch.no_grad():
        ids = greedy(model, src)  # (B, T), the start token first
        logits = model(src, ids[:, :-1])  # (B, T - 1, V): each step's, teacher-forced
        top2 = logits.log_softmax(-1).topk(2, dim=-1).values  # (B, T - 1, 2)
        gaps = top2[..., 0] - top2[..., 1]
        eos, pad = model.cfg.eos_id, model.cfg.pad_id
        done = (ids[:, :-1] == eos).cumsum(-1) > 0  # steps after the end token chose nothing
        gaps = gaps.masked_fill(done | (ids[:, :-1] == pad), float("inf"))
    return gaps.min(-1).values


def clear(ranked: torch.Tensor, n: int) -> torch.Tensor:
    """``(B * n,)`` bool: whether each hypothesis' score (``ranked``, ``(B * n,)``, each sentence's n together,
    best first) is more than :data:`MARGIN` from every other hypothesis of its sentence. The last of each
    sentence is never clear: the hypothesis that ranked after it, its nearest rival, is not among those returned."""
    scores = ranked.view(-1, n)
    gaps = (scores[:, :, None] - scores[:, None, :]).abs() + torch.eye(n) * 1e9  # (B, n, n), itself excluded
    ok = gaps.min(-1).values > MARGIN
    ok[:, -1] = False
    return ok.flatten()


def assert_beams_agree(model, src: torch.Tensor, beam: int, n: int, **options) -> int:
    """Beam search with ``options`` (``compile=True``, say) against the eager path: the ``n`` best scores within
    float32 rounding, and the tokens of each hypothesis whose score stands clear of its sentence's others.
    Returns how many hypotheses were compared token for token."""
    want_ids, want = beam_search(model, src, beam=beam, num_return_sequences=n, return_scores=True)
    got_ids, got = beam_search(model, src, beam=beam, num_return_sequences=n, return_scores=True, **options)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    compared = clear(want, n)
    width = min(want_ids.size(1), got_ids.size(1))
    for i in compared.nonzero().flatten().tolist():
        assert torch.equal(got_ids[i, :width], want_ids[i, :width]), (i, got_ids[i], want_ids[i])
    return int(compared.sum())
