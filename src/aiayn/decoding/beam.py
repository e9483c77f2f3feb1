"""Beam search with the GNMT length penalty, as the paper decodes (section 6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [...]. We set the maximum
output length during inference to input length + 50, but terminate early when possible."

Every sentence keeps ``K`` live hypotheses (none ends with ``</s>``) and a set of ``K`` finished ones;
all sentences and beams run through the model as one batch of ``B*K`` rows. Each step:

    live (B, K) --expand by every token--> (B, K*V) --top 2K--> candidates (B, 2K), best first
        candidates ending in </s> among the top K  -> merged into the finished set (best K kept)
        the first K candidates not ending in </s>  -> the new live beams (cache rows reordered to match)

Taking 2K candidates guarantees K live ones survive: at most K candidates (one per beam) end in ``</s>``. With
E end tokens (Llama 3's chat models have three) up to E K can end, so (1 + E) K are taken, as Hugging Face does.
A finished hypothesis is ranked by the length penalty of GNMT (Wu et al., 2016, section 7):

    score = logprob_sum / lp(len),   lp(len) = ((5 + len) / 6) ** alpha

with ``len`` the generated tokens, ``</s>`` included. ``normalize="length"`` uses ``lp(len) = len ** alpha``
instead, the length normalisation of fairseq and Hugging Face (``alpha = 1``: the mean log-probability). A
sentence is done when its worst finished score beats anything a live beam could still reach (its log-prob can
only fall, its ``lp`` is at most the one of the longest length still possible). Hypotheses still live at
``max_len`` are scored as they stand.

The ranking after the model (:func:`_rank`) is a function of tensors of fixed shapes: the hypotheses' ids live in
a buffer of ``max_len + 1`` columns written at a position held in a tensor, so with ``compile=True`` it runs
through ``torch.compile`` as one graph beside the compiled step, instead of several dozen small operations,
where :data:`COMPILE_RANK` says so. Its top-k of the ``K*V`` candidates looks at blocks of tokens first
(:func:`_best`, :data:`BLOCK`).

Shapes: B batch, K beams, V target vocabulary, S source length, C d_model, t tokens generated so far.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from torch import Tensor, nn

from aiayn.decoding.greedy import check_src, target_len
from aiayn.decoding.loops import Ends, check_every, end_ids, ends, in_eval_mode, trim
from aiayn.decoding.processing import Processing
from aiayn.decoding.sampling import check_left_padded, check_prompts
from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.layers.session import Session


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


class Finished(NamedTuple):
    """Each sentence's finished hypotheses, best first."""

    ids: Tensor  # (A, K, L) without the first id, padded
    sums: Tensor  # (A, K) summed log-probs
    scores: Tensor  # (A, K) length-normalised: what ranks them


class Settled(NamedTuple):
    """The ``n`` best hypotheses of each sentence settled (final), best first; nothing yet for the others."""

    ids: Tensor  # (A, n, L)
    sums: Tensor  # (A, n)


class Ranked(NamedTuple):
    """What a step of the search leaves (:func:`_rank`)."""

    live_sum: Tensor  # (A, K) the live beams' summed log-probs, best first
    seqs: Tensor  # (A, K, L+1) their ids: the first id, the tokens so far, padding
    fin: Finished
    out: Settled
    stopped: Tensor  # (A,) the sentences settled
    rows: Tensor  # (A, K) the row each live beam extends (the model's rows are reordered to them)


def log_probs(logits: Tensor, never: tuple[int, ...]) -> Tensor:
    """The log-probabilities ``(A*K, V)`` of the model's ``logits``, in float32, the tokens ``never`` ranked out
    (an encoder-decoder's padding is not a word; a pad inside a prefix would be masked out)."""
    logp = logits.float().log_softmax(-1)
    if never:
        logp[:, list(never)] = float("-inf")
    return logp


def _rank(logp: Tensor, live_sum: Tensor, seqs: Tensor, column: Tensor, columns: Tensor, lp: Tensor, bound: Tensor,
          fin: Finished, out: Settled, stopped: Tensor, eos: tuple[int, ...], early_stopping: bool | str,
          never: tuple[int, ...] | None = None) -> Ranked:
    """One step of the search after the model, a function of tensors of the same shapes at every step (so that
    ``torch.compile`` compiles it once): the log-probabilities ``logp`` ``(A*K, V)`` of the live hypotheses (or,
    with ``never`` given, the model's logits, :func:`log_probs` taken here: in the compiled graph too), whose
    summed log-probs are ``live_sum`` ``(A, K)`` and whose ids ``seqs`` ``(A, K, L+1)`` hold the first id and then
    the tokens chosen so far, up to ``column`` (a 0-dim tensor, t; ``columns`` ``(L+1,)`` their indices), padded
    after. ``lp``: the length penalty at t; ``bound``: the one :func:`_stops` divides by (0-dim tensors: the same
    graph at every step). ``fin``: the finished hypotheses; ``out``: the results of the sentences settled
    (``stopped`` ``(A,)``), final."""
    neg_inf = float("-inf")
    if never is not None:
        logp = log_probs(logp, never)
    A, K = live_sum.shape
    V = logp.size(-1)
    top_sum, top_idx = _best(logp, live_sum, min(max(2, 1 + len(eos)) * K, K * V))  # (A, 2K) best first
    top_beam, top_tok = top_idx // V, top_idx % V  # (A, 2K)
    top_seq = torch.where(columns == column, top_tok[..., None], _take(seqs, top_beam))  # (A, 2K, L+1)
    is_eos = ends(top_tok, eos)  # (A, 2K)

    # Finished: candidates ending in </s> among the top K join the finished set, which keeps its best K.
    # (Only the top K, as fairseq does: an </s> that would not have made the beam is not a hypothesis.)
    settled = stopped[:, None]  # (A, 1) their finished set is final
    new_score = (top_sum / lp).masked_fill(~is_eos, neg_inf)[:, :K]  # (A, K)
    best_score, keep = torch.cat([fin.scores, new_score], dim=1).topk(K, dim=1)  # (A, K)
    fin = Finished(
        torch.where(settled[..., None], fin.ids, _take(torch.cat([fin.ids, top_seq[:, :K, 1:]], dim=1), keep)),
        torch.where(settled, fin.sums, _take(torch.cat([fin.sums, top_sum[:, :K]], dim=1), keep)),
        torch.where(settled, fin.scores, best_score))

    # Live: the first K candidates that do not end in </s> (a stable sort moves them to the front).
    pick = torch.sort(is_eos.long(), dim=1, stable=True).indices[:, :K]  # (A, K)
    live_sum = top_sum.gather(1, pick)  # (A, K) still best first
    rows = torch.arange(A, device=logp.device)[:, None] * K + top_beam.gather(1, pick)  # (A, K) rows extended

    # Sentences that stop: their n best are final now (computed for every sentence, nothing read back).
    done = _stops(fin.scores, live_sum, bound, early_stopping) & ~stopped  # (A,)
    best = fin.scores.topk(out.sums.size(1), dim=1).indices  # (A, n) best first
    out = Settled(torch.where(done[:, None, None], _take(fin.ids, best), out.ids),
                  torch.where(done[:, None], fin.sums.gather(1, best), out.sums))
    return Ranked(live_sum, _take(top_seq, pick), fin, out, stopped | done, rows)


# The candidates' top-k looks at the blocks of BLOCK tokens first (:func:`_best`); None: the top-k of all K*V.
# 64: the compiled Marian-shaped beam-4 decoding (16 sentences, V = 8,000) ran 1.13x faster (lower quartile 1.12;
# AMD EPYC with AVX-512, benchmarks/compiled_step_switches.py --switch block, the same tokens); by hand, eagerly, the
# top-k took 0.20 ms against 0.36 there and 0.42 against 2.3 for GPT-2's V = 50,257.
BLOCK: int | None = 64


def _best(logp: Tensor, live_sum: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The ``n`` best candidates of each sentence, best first: their summed log-probs ``(A, n)`` and their
    indices ``(A, n)`` into the ``K*V`` candidates (beam ``i // V``, token ``i % V``), those of ``topk`` over all
    of them (the same values; the same indices but among equal scores).

    With :data:`BLOCK`, each row's tokens are cut into blocks of ``BLOCK`` (the last may be shorter), the ``n``
    blocks with the highest best candidate are taken, and the top-k is over their ``n * BLOCK`` candidates
    only: each of the ``n`` best candidates is at most the best of its block, so its block is among those ``n``.
    One pass of maxima over the log-probs and two top-k of a few hundred, instead of a top-k of ``K*V`` (which
    sorts a copy of them)."""
    A, K = live_sum.shape
    R, V = logp.shape  # R = A*K rows
    b = BLOCK
    if b is None or 2 * b >= V:  # (at least two blocks and a part)
        return (live_sum.view(R, 1) + logp).view(A, K * V).topk(n, dim=1)
    whole = V // b * b
    best = logp[:, :whole].view(R, V // b, b).amax(-1)  # (R, M) each block's best log-prob
    if whole < V:
        best = torch.cat([best, logp[:, whole:].amax(-1, keepdim=True)], dim=1)
    M = best.size(1)
    blocks = (best + live_sum.view(R, 1)).view(A, K * M).topk(n, dim=1).indices  # (A, n) block i of (A, K*M)
    rows = torch.arange(A, device=logp.device)[:, None] * K + blocks // M  # (A, n) rows of logp
    tokens = (blocks % M)[..., None] * b + torch.arange(b, device=logp.device)  # (A, n, b)
    flat = (rows[..., None] * V + tokens.clamp(max=V - 1)).view(A, n * b)  # (A, n*b) into logp.view(-1)
    sums = logp.reshape(-1)[flat] + live_sum.view(-1)[rows].repeat_interleave(b, dim=1)  # (A, n*b)
    if whole < V:  # the last block's columns past V
        sums = sums.masked_fill(tokens.view(A, n * b) >= V, float("-inf"))
    top_sum, pick = sums.topk(n, dim=1)  # (A, n)
    return top_sum, flat.gather(1, pick) - torch.arange(A, device=logp.device)[:, None] * (K * V)


# With compile=True the ranking goes through torch.compile too (the log-softmax and the blocks' top-k with it;
# dynamic in the sentences searched from its first call, so one that leaves does not compile it again); False: it
# runs eagerly beside the compiled step. On: the Marian-shaped beam-4 decoding ran 1.05x faster (lower quartile 1.02;
# AMD EPYC with AVX-512, benchmarks/compiled_step_switches.py --switch rank), its several dozen calls a step one.
COMPILE_RANK = True


@functools.cache
def _compiled_rank() -> Callable[..., Ranked]:
    """``torch.compile(_rank)``, once per process."""
    return torch.compile(_rank)


def _dynamic(*tensors: Tensor) -> None:
    """Mark dim 0 of each of ``tensors`` (the sentences searched, or their rows) dynamic to ``torch.compile``."""
    for x in tensors:
        torch._dynamo.maybe_mark_dynamic(x, 0)


def search(
    session: Session,
    ids: Tensor,
    mask: Tensor | None,
    beam: int,
    eos: tuple[int, ...],
    pad_id: int,
    max_len: int,
    length_penalty: float,
    penalty: Callable[[int, float], float],
    early_stopping: bool | str,
    processing: Processing | None = None,
    n_best: int = 1,
    compile: bool = False,
) -> tuple[Tensor, Tensor]:
    """The search itself, over any model's decode session (:mod:`aiayn.layers.session`): ``ids`` ``(B, T)`` (and
    ``mask``) are the inputs its prefill reads, each giving ``beam`` rows; each step feeds the live hypotheses'
    last tokens, the session's rows reordered to the surviving beams (``session.reorder``) and, once sentences
    settle, to those of the sentences not done (``session.keep``), so a finished sentence is not computed any
    further. ``processing`` changes the log-probabilities ``(A*K, V)`` before they are ranked (a repetition
    penalty, ...), reading the prefix and the hypothesis; ``compile``: the ranking (:func:`_rank`) through
    ``torch.compile``. Returns ``(ids (B*n, L), sums (B*n,))``, the ``n_best`` best hypotheses of each sentence,
    best first (rows ``b*n .. b*n + n - 1`` are sentence ``b``'s), and their summed log-probabilities."""
    batch, device, first_id = ids.size(0), ids.device, 0  # the first id of a hypothesis: a placeholder, never fed
    K, n, L = beam, n_best, max_len
    neg_inf = float("-inf")
    rank = _compiled_rank() if compile and COMPILE_RANK else _rank
    active = torch.arange(batch, device=device)  # (A,) the sentences still searched
    result_ids = torch.full((batch, n, L), pad_id, dtype=torch.long, device=device)  # (B, n, L)
    result_sum = torch.full((batch, n), neg_inf, device=device)  # (B, n)
    seqs = torch.full((batch, K, L + 1), pad_id, dtype=torch.long, device=device)  # (A, K, L+1)
    seqs[:, :, 0] = first_id
    columns = torch.arange(L + 1, device=device)  # (L+1,)
    # Only beam 0 is live at the start, so step 1 does not fill the beam with K copies of one hypothesis.
    live_sum = torch.full((batch, K), neg_inf, device=device)  # (A, K) summed log-probs
    live_sum[:, 0] = 0.0
    fin = Finished(torch.full((batch, K, L), pad_id, dtype=torch.long, device=device),
                   torch.full((batch, K), neg_inf, device=device), torch.full((batch, K), neg_inf, device=device))
    out = Settled(result_ids.clone(), result_sum.clone())  # the sentences still searched, as they are active
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)  # (A,) settled, searched until the next check
    every = check_every(device)

    def bound(t: int) -> float:
        """The length penalty :func:`_stops` scores the best live beam with after step ``t``."""
        if early_stopping == "never":  # lp is largest at one end of the lengths still possible, t + 1 .. L
            return max(penalty(t + 1, length_penalty), penalty(L, length_penalty))
        return penalty(t, length_penalty)

    def scalar(x: float) -> Tensor:
        """``x`` as a 0-dim CPU tensor: an input of the compiled rank, not a constant of it (one graph for every
        step); on a GPU a CPU scalar is read as a number, no copy to the device and no wait for it."""
        return torch.tensor(x)

    prefix, prefix_mask = ids, mask  # (A*K, P) what each hypothesis follows, once the session has read it
    for t in range(1, L + 1):  # t: tokens generated after this step
        A = active.numel()
        if t == 1:
            logits = session.prefill(ids, mask, new_tokens=L, repeat=K)  # (A*K, V)
            prefix, prefix_mask = session.prefix, session.prefix_mask
        else:
            logits = session.step(seqs.view(A * K, L + 1)[:, t - 1])
        never: tuple[int, ...] | None = tuple(session.never)  # the log-probabilities taken in the ranking
        if processing is not None and processing.active:  # what the row holds: its prefix, then what it made
            seen = torch.cat([prefix, seqs.view(A * K, L + 1)[:, 1:t]], dim=1)
            real = None if prefix_mask is None else torch.cat([prefix_mask, prefix_mask.new_ones(A * K, t - 1)], 1)
            logits, never = processing(log_probs(logits, session.never), seen, t - 1, real), None  # (A*K, V)
        if t == 1 and rank is not _rank:  # compiled for any number of sentences at once
            _dynamic(logits, live_sum, seqs, stopped, *fin, *out)
        ranked = rank(logits, live_sum, seqs, scalar(t), columns, scalar(penalty(t, length_penalty)),
                      scalar(bound(t)), fin, out, stopped, eos, early_stopping, never)
        live_sum, seqs, fin, rows = ranked.live_sum, ranked.seqs, ranked.fin, ranked.rows
        if t == L:  # no sentence settles at the last step: all compete below with their live beams
            break
        out, stopped = ranked.out, ranked.stopped
        if t % every or not bool(stopped.any()):  # the one read back from the device, every `every` steps
            session.reorder(rows.view(-1))
            continue
        # The others go on without them; the results of those stopped are final.
        result_ids[active], result_sum[active] = out
        go = (~stopped).nonzero()[:, 0]  # (A',)
        if go.numel() == 0:
            return trim(result_ids.view(batch * n, -1), eos), result_sum.view(-1)
        active, live_sum, seqs, stopped = (x[go] for x in (active, live_sum, seqs, stopped))
        fin, out = Finished(*(x[go] for x in fin)), Settled(*(x[go] for x in out))
        kept = rows[go].view(-1)
        session.keep(kept)
        prefix = prefix.index_select(0, kept)
        prefix_mask = None if prefix_mask is None else prefix_mask.index_select(0, kept)

    # Cut by L: live hypotheses of the sentences not settled compete as they stand.
    score = torch.cat([fin.scores, live_sum / penalty(L, length_penalty)], dim=1)  # (A, 2K)
    sums = torch.cat([fin.sums, live_sum], dim=1)
    best = score.topk(n, dim=1).indices  # (A, n) best first
    ids = _take(torch.cat([fin.ids, seqs[:, :, 1:]], dim=1), best)  # (A, n, L)
    result_ids[active] = torch.where(stopped[:, None, None], out.ids, ids)
    result_sum[active] = torch.where(stopped[:, None], out.sums, sums.gather(1, best))
    return trim(result_ids.view(batch * n, -1), eos), result_sum.view(-1)


def _stops(fin_score: Tensor, live_sum: Tensor, bound: Tensor, early_stopping: bool | str) -> Tensor:
    """``(B,)`` whether each sentence may stop (Hugging Face's ``early_stopping``), ``bound`` the length penalty
    a live beam is scored with: ``"never"`` when no live beam can still beat the worst finished one (its log-prob
    only falls, and ``bound`` is the largest ``lp`` of the lengths still possible, ``t + 1 .. L``: an exact
    bound); ``False`` when the best live beam scored at its current length (``bound`` is ``lp(t)``) does not
    beat it (a heuristic); ``True`` as soon as ``K`` hypotheses have finished."""
    worst = fin_score[:, -1]  # (B,) -inf until K have finished
    if early_stopping is True:
        return worst > float("-inf")
    return worst >= live_sum[:, 0] / bound


@torch.no_grad()
@in_eval_mode
def beam_search(
    model: nn.Module,
    src: Tensor,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_len: int | None = None,
    use_cache: bool = True,
    return_scores: bool = False,
    normalize: str = "gnmt",
    early_stopping: bool | str = "never",
    num_return_sequences: int = 1,
    processing: Processing | None = None,
    compile: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Decode ``(B, S)`` source ids with beam search; the best hypothesis per sentence (or the ``n`` best).

    Args:
        beam: hypotheses kept per sentence, ``K`` (4 in section 6.1); ``beam=1`` with ``length_penalty=0``
            is greedy decoding.
        length_penalty: GNMT's ``alpha`` (0.6 in section 6.1); 0 ranks by summed log-probability.
        max_len: most tokens to produce; default ``S + 50`` (section 6.1).
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).
        return_scores: also return the summed log-probabilities (not length-normalised) of the hypotheses.
        normalize: ``"gnmt"`` (``((5 + len) / 6) ** alpha``, the paper's choice) or ``"length"``
            (``len ** alpha``, Hugging Face's ``length_penalty``).
        early_stopping: when a sentence stops, as Hugging Face's argument of that name: ``"never"`` (the
            default: when nothing left could beat what has finished, so the search loses nothing),
            ``False`` (Hugging Face's default heuristic) or ``True`` (as soon as ``beam`` hypotheses end).
        num_return_sequences: the ``n <= beam`` best hypotheses of each sentence, best first (n-best lists).
        processing: changes the log-probabilities before they are ranked
            (:class:`~aiayn.decoding.processing.Processing`: repetition penalty, n-gram bans, a minimum length).
        compile: the steps over a static cache whose rows are reordered in place, the one-token step through
            ``torch.compile`` (the model's static session; the ranking too with
            :data:`COMPILE_RANK`): the same hypotheses.

    Returns:
        ``(B * n, L)`` ids after ``<s>`` (rows ``b * n`` to ``b * n + n - 1`` are sentence ``b``'s), each row
        ending at its ``</s>`` (unless cut by ``max_len``) and padded with ``pad_id`` after it, as
        :func:`~aiayn.decoding.greedy.greedy` returns; with ``return_scores``, ``(ids, scores)`` with ``scores``
        of shape ``(B * n,)``.

    Raises:
        ValueError: a bad ``beam``, ``normalize``, ``early_stopping`` or ``max_len``; ``src`` not ``(B, S)``,
            or holding an id outside the source vocabulary.
    """
    penalty = _check(beam, normalize, early_stopping, num_return_sequences)
    check_src(model, src)
    max_len = target_len(model, src, max_len)
    cfg: Any = cast(Any, model).cfg
    # Every beam of a sentence reads the same source: rows b*K .. b*K+K-1 belong to sentence b.
    session = model.session(use_cache=use_cache, compile=compile, beams=True)  # type: ignore[operator]
    ids, sums = search(session, src, None, beam, (cfg.eos_id,), cfg.pad_id, max_len, length_penalty, penalty,
                       early_stopping, processing, num_return_sequences, compile)
    return (ids, sums) if return_scores else ids


@torch.no_grad()
@in_eval_mode
def beam_search_lm(
    model: nn.Module,
    prompt: Tensor,
    max_new_tokens: int,
    beam: int = 4,
    length_penalty: float = 1.0,
    eos_id: Ends = None,
    attention_mask: Tensor | None = None,
    use_cache: bool = True,
    return_scores: bool = False,
    normalize: str = "length",
    early_stopping: bool | str = False,
    num_return_sequences: int = 1,
    processing: Processing | None = None,
    compile: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Beam search from a language model's prompts ``(B, T)`` (padded on the left, with ``attention_mask``
    ``(B, T)``, ``True`` for real tokens, as :func:`~aiayn.decoding.sampling.stream` pads them).

    The same search as :func:`beam_search`, with defaults as Hugging Face's ``generate`` sets them
    (``length_penalty=1.0`` on ``len ** alpha``, the ``early_stopping=False`` heuristic); ``len`` counts the
    generated tokens only, ``eos_id`` included; ``num_return_sequences`` and ``processing`` as there (the
    processing reads the prompt as well as what was generated); ``compile`` over a static cache, as
    :func:`beam_search`'s (the model's static session).

    Returns:
        ``(B * n, L)`` generated ids (the prompt not included), each row cut after its ``eos_id`` (or any of
        several) and padded with ``eos_id`` (the first of several) after it (``L <= max_new_tokens``); with
        ``return_scores`` also the summed log-probabilities ``(B * n,)``.

    Raises:
        ValueError: a bad ``beam``, ``normalize``, ``early_stopping`` or ``max_new_tokens``; a prompt or
            mask of the wrong shape, or an id outside ``model.cfg.vocab_size``.
    """
    penalty = _check(beam, normalize, early_stopping, num_return_sequences)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    check_ids(prompt, 0, "prompt", values=False)
    check_prompts(model, prompt.tolist(), "prompt")
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(prompt.shape):
        raise ValueError(f"attention_mask must be (batch, prompt length) = {tuple(prompt.shape)}, got "
                         f"{tuple(attention_mask.shape)}")
    check_left_padded(attention_mask)
    session = model.session(use_cache=use_cache, compile=compile, beams=True)  # type: ignore[operator]
    eos = end_ids(eos_id)
    pad = eos[0] if eos else 0
    ids, sums = search(session, prompt, attention_mask, beam, eos, pad, max_new_tokens, length_penalty, penalty,
                       early_stopping, processing, num_return_sequences, compile)
    return (ids, sums) if return_scores else ids


def _check(beam: int, normalize: str, early_stopping: bool | str, n_best: int) -> Callable[[int, float], float]:
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if not 1 <= n_best <= beam:
        raise ValueError(f"num_return_sequences={n_best} must be between 1 and the beam size {beam}")
    if normalize not in PENALTIES:
        raise ValueError(f"normalize={normalize!r} must be one of {sorted(PENALTIES)}")
    if not (early_stopping is True or early_stopping is False or early_stopping == "never"):  # not 0 or 1
        raise ValueError(f"early_stopping={early_stopping!r} must be True, False or 'never'")
    return PENALTIES[normalize]


__all__ = ["beam_search", "beam_search_lm", "gnmt_penalty", "length_power"]
