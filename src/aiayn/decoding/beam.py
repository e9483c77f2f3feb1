"""Beam search with the GNMT length penalty, as the paper decodes (section 6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [...]. We set the maximum
output length during inference to input length + 50, but terminate early when possible."

Every sentence keeps ``K`` live hypotheses (none ends with ``</s>``) and a set of ``K`` finished ones;
all sentences and beams run through the model as one batch of ``B*K`` rows. Each step:

    live (B, K) --expand by every token--> (B, K*V) --top 2K--> candidates (B, 2K), best first
        candidates ending in </s> among the top K  -> merged into the finished set (best K kept)
        the first K candidates not ending in </s>  -> the new live beams (cache rows reordered to match)

Taking 2K candidates guarantees K live ones survive: at most K candidates (one per beam) end in ``</s>``.
A finished hypothesis is ranked by the length penalty of GNMT (Wu et al., 2016, section 7):

    score = logprob_sum / lp(len),   lp(len) = ((5 + len) / 6) ** alpha

with ``len`` the generated tokens, ``</s>`` included. ``normalize="length"`` uses ``lp(len) = len ** alpha``
instead, the length normalisation of fairseq and Hugging Face (``alpha = 1``: the mean log-probability). A
sentence is done when its worst finished score beats anything a live beam could still reach (its log-prob can
only fall, its ``lp`` is at most the one of the longest length still possible). Hypotheses still live at
``max_len`` are scored as they stand.

Shapes: B batch, K beams, V target vocabulary, S source length, C d_model, t tokens generated so far.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from aiayn.decoding.greedy import EncoderDecoder, check_src


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT's ``lp = ((5 + length) / 6) ** alpha``; ``alpha = 0`` ranks by plain log-probability."""
    return ((5 + length) / 6) ** alpha


def length_power(length: int, alpha: float) -> float:
    """``lp = length ** alpha``, as fairseq's ``lenpen`` and Hugging Face's ``length_penalty``."""
    return length**alpha


PENALTIES = {"gnmt": gnmt_penalty, "length": length_power}


def _take(x: Tensor, index: Tensor) -> Tensor:
    """Entries ``index`` ``(B, N)`` of ``x`` ``(B, M, ...)`` along dim 1 -> ``(B, N, ...)``."""
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    use_cache: bool = True,
    return_scores: bool = False,
    normalize: str = "gnmt",
) -> Tensor | tuple[Tensor, Tensor]:
    """Decode ``(B, S)`` source ids with beam search; the best hypothesis per sentence.

    Args:
        beam: hypotheses kept per sentence, ``K`` (4 in section 6.1); ``beam=1`` with ``length_penalty=0``
            is greedy decoding.
        length_penalty: GNMT's ``alpha`` (0.6 in section 6.1); 0 ranks by summed log-probability.
        max_len: most tokens to produce; default ``S + 50`` (section 6.1).
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).
        return_scores: also return the summed log-probabilities (not length-normalised) of the hypotheses.
        normalize: ``"gnmt"`` (``((5 + len) / 6) ** alpha``, the paper's choice) or ``"length"``
            (``len ** alpha``, Hugging Face's ``length_penalty`` with ``early_stopping="never"``).

    Returns:
        ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` (unless cut by ``max_len``) and padded
        with ``pad_id`` after it, as :func:`~aiayn.decoding.greedy.greedy` returns; with ``return_scores``,
        ``(ids, scores)`` with ``scores`` of shape ``(B,)``.

    Raises:
        ValueError: a bad ``beam``, ``normalize`` or ``max_len``; ``src`` not ``(B, S)``, or holding an id
            outside the source vocabulary.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if normalize not in PENALTIES:
        raise ValueError(f"normalize={normalize!r} must be one of {sorted(PENALTIES)}")
    penalty = PENALTIES[normalize]
    check_src(model, src)
    max_len = src.size(1) + 50 if max_len is None else max_len
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    net = cast(EncoderDecoder, model)
    cfg = net.cfg
    was_training = model.training
    model.eval()
    B, K, device = src.size(0), beam, src.device
    neg_inf = float("-inf")

    # Every beam of a sentence reads the same source: rows b*K .. b*K+K-1 belong to sentence b.
    src_k = src.repeat_interleave(K, dim=0)  # (B*K, S)
    memory = net.encode(src).repeat_interleave(K, dim=0)  # (B*K, S, C)
    cache = net.new_cache(max_len) if use_cache else None
    row0 = torch.arange(B, device=device)[:, None] * K  # (B, 1) first row of each sentence

    seqs = torch.full((B * K, 1), cfg.bos_id, dtype=torch.long, device=device)  # (B*K, t+1), <s> first
    # Only beam 0 is live at the start, so step 1 does not fill the beam with K copies of one hypothesis.
    live_sum = torch.full((B, K), neg_inf, device=device)  # (B, K) summed log-probs
    live_sum[:, 0] = 0.0
    fin_seq = torch.full((B, K, max_len), cfg.pad_id, dtype=torch.long, device=device)  # (B, K, max_len)
    fin_sum = torch.full((B, K), neg_inf, device=device)  # (B, K)
    fin_score = torch.full((B, K), neg_inf, device=device)  # (B, K) length-normalised, best first
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)

    for t in range(1, max_len + 1):  # t: tokens generated after this step
        logits = net.decode(seqs[:, -1:] if use_cache else seqs, memory, src_k, cache=cache)[:, -1]  # (B*K, V)
        logp = logits.float().log_softmax(-1)  # (B*K, V)
        # Padding is not a word: a pad inside a prefix would also be masked out when the prefix is recomputed.
        logp[:, cfg.pad_id] = neg_inf
        V = logp.size(-1)
        cand_sum = (live_sum.view(B * K, 1) + logp).view(B, K * V)  # (B, K*V)
        top_sum, top_idx = cand_sum.topk(min(2 * K, K * V), dim=1)  # (B, 2K) best first
        top_beam, top_tok = top_idx // V, top_idx % V  # (B, 2K)
        top_seq = torch.cat([_take(seqs.view(B, K, t), top_beam), top_tok[..., None]], dim=2)  # (B, 2K, t+1)
        is_eos = top_tok == cfg.eos_id  # (B, 2K)

        # Finished: candidates ending in </s> among the top K join the finished set, which keeps its best K.
        # (Only the top K, as fairseq does: an </s> that would not have made the beam is not a hypothesis.)
        new_score = (top_sum / penalty(t, length_penalty)).masked_fill(~is_eos, neg_inf)[:, :K]  # (B, K)
        new_seq = torch.nn.functional.pad(top_seq[:, :K, 1:], (0, max_len - t), value=cfg.pad_id)  # (B, K, max_len)
        fin_score, keep = torch.cat([fin_score, new_score], dim=1).topk(K, dim=1)  # (B, K)
        fin_sum = _take(torch.cat([fin_sum, top_sum[:, :K]], dim=1), keep)  # (B, K)
        fin_seq = _take(torch.cat([fin_seq, new_seq], dim=1), keep)  # (B, K, max_len)

        # Live: the first K candidates that do not end in </s> (a stable sort moves them to the front).
        pick = torch.sort(is_eos.long(), dim=1, stable=True).indices[:, :K]  # (B, K)
        live_sum = top_sum.gather(1, pick)  # (B, K) still best first
        seqs = _take(top_seq, pick).view(B * K, t + 1)  # (B*K, t+1)
        if cache is not None:
            # (B*K,) rows the new beams extend; always rows of the same sentence, so the same source
            cache.reorder((row0 + top_beam.gather(1, pick)).view(-1), cross=False)

        if t == max_len:
            break
        # The best a live beam can still reach: its log-prob only falls, and lp is largest at one end
        # of the lengths still possible (t+1 .. max_len).
        reachable = live_sum[:, 0] / max(penalty(t + 1, length_penalty), penalty(max_len, length_penalty))
        done |= fin_score[:, -1] >= reachable  # (B,)
        if bool(done.all()):
            break

    if not bool(done.all()):
        # Cut by max_len: live hypotheses of unfinished sentences compete as they stand.
        stand = (live_sum / penalty(max_len, length_penalty)).masked_fill(done[:, None], neg_inf)  # (B, K)
        live_seq = seqs.view(B, K, -1)[:, :, 1:]  # (B, K, max_len)
        fin_score = torch.cat([fin_score, stand], dim=1)  # (B, 2K)
        fin_sum = torch.cat([fin_sum, live_sum], dim=1)
        fin_seq = torch.cat([fin_seq, live_seq], dim=1)

    best = fin_score.argmax(dim=1, keepdim=True)  # (B, 1)
    ids = _take(fin_seq, best)[:, 0]  # (B, max_len)
    ids = ids[:, : int((ids != cfg.pad_id).sum(1).max())]  # (B, L): drop columns that are padding everywhere
    model.train(was_training)
    if return_scores:
        return ids, fin_sum.gather(1, best)[:, 0]
    return ids


__all__ = ["beam_search", "gnmt_penalty", "length_power"]
