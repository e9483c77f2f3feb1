"""Greedy decoding: at each step take the most probable next token.

The model only needs the small protocol every encoder-decoder here has: ``encode(src)``,
``decode(tgt, memory, src, cache)``, ``new_cache(max_len)`` and a ``cfg`` with ``bos_id``, ``eos_id``,
``pad_id``.

Every decoding loop here (greedy, sampling, beam search) reads nothing back from the device per step
but whether it may stop, and that only every :func:`check_every` steps: on an accelerator each read makes
the host wait until the device has run every kernel queued so far, so the next step cannot be queued
ahead. Rows that end in between are computed a few steps more and their extra tokens are padding,
trimmed off: the results are those of checking every step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
from torch import Tensor, nn

from aiayn.decoding.static import StaticSeq2Seq, check_cache
from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.decoding.processing import Processing
    from aiayn.layers.kv_cache import DecoderCache


# Steps between reads of "has every row ended?" on an accelerator: rows that ended are computed for at
# most CHECK_EVERY - 1 steps more. The CPU queues nothing ahead, so a read costs it nothing while the
# extra steps cost compute: there it reads every step (ON_CPU).
CHECK_EVERY = 8
ON_CPU = 1


def check_every(device: torch.device) -> int:
    """How many steps decoding on ``device`` runs between reads of whether it may stop."""
    return ON_CPU if device.type == "cpu" else CHECK_EVERY


def ends(tokens: Tensor, eos: tuple[int, ...]) -> Tensor:
    """Bool, shaped as ``tokens``: where a token is one of the end ids ``eos`` (none when ``eos`` is empty)."""
    if len(eos) <= 1:
        return tokens == eos[0] if eos else torch.zeros_like(tokens, dtype=torch.bool)
    return torch.isin(tokens, torch.tensor(eos, device=tokens.device))


def trim(ids: Tensor, eos: tuple[int, ...]) -> Tensor:
    """``(B, L)`` ids without the columns that are padding in every row (after every row's end token); one
    read back from the device."""
    if not eos:
        return ids
    is_eos = ends(ids, eos).long()
    ended = is_eos.cumsum(1) - is_eos > 0  # (B, L) after the row's </s>
    return ids[:, : int((~ended).sum(1).max())]


class _Ids(Protocol):
    bos_id: int
    eos_id: int
    pad_id: int


class EncoderDecoder(Protocol):
    """What decoding calls on an encoder-decoder model besides ``nn.Module``'s own (for the type checker:
    ``nn.Module``'s stubs see no attributes of its subclasses)."""

    @property
    def cfg(self) -> _Ids: ...
    def encode(self, src: Tensor) -> Tensor: ...
    def decode(self, tgt: Tensor, memory: Tensor, src: Tensor, cache: DecoderCache | None = None) -> Tensor: ...
    def new_cache(self, max_len: int) -> DecoderCache: ...


def check_src(model: nn.Module, src: Tensor) -> None:
    """Refuse source ids that are not ``(B, S)`` integers within the model's source vocabulary
    (``cfg.src_vocab_size``, where the model has one).

    Called once at the entry of a decoding call: the range costs one read back from the device there,
    whereas the embedding, run every step, checks it on the CPU only (on an accelerator a bad id would
    otherwise surface as a device-side assert in the lookup).
    """
    vocab = getattr(getattr(model, "cfg", None), "src_vocab_size", None)
    check_ids(src, vocab if vocab is not None else 0, "src", values=vocab is not None)


def target_len(model: nn.Module, src: Tensor, max_len: int | None) -> int:
    """The most target tokens to decode: ``max_len``, by default ``S + 50`` (section 6.1) but no more than a
    decoder with learned positions has (BART's); an explicit ``max_len`` beyond those is refused now, not at
    whichever step reaches it."""
    cfg: Any = getattr(model, "cfg", None)
    learned = cfg.max_len if getattr(cfg, "positional", None) == "learned" else None
    if max_len is None:
        return src.size(1) + 50 if learned is None else min(src.size(1) + 50, learned)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if learned is not None and max_len > learned:
        raise ValueError(f"max_len={max_len} target tokens (generate: max_new_tokens) exceed the decoder's {learned} "
                         f"learned positions")
    return max_len


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, max_len: int | None = None, use_cache: bool = True,
           compile: bool = False) -> Tensor:
    """Decode ``(B, S)`` source ids greedily.

    Args:
        max_len: most tokens to produce; default ``S + 50`` (section 6.1), at most the decoder's learned
            positions where it has them.
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).
        compile: decode over a static cache, the one-token step through ``torch.compile``
            (:class:`~aiayn.decoding.static.StaticSeq2Seq`): the same tokens; the first call of a batch size
            and length waits for the compiler.

    Returns:
        ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.

    Raises:
        ValueError: ``src`` not ``(B, S)``, or holding an id outside the source vocabulary.
    """
    return decode_with(model, src, lambda logits: (logits, logits.argmax(-1)), max_len, use_cache, compile=compile)


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode inside the block (no dropout), and back in its own mode after it, even when the
    block raises: decoding in the middle of training leaves training as it was."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


Decode = TypeVar("Decode", bound=Callable[..., Any])


def in_eval_mode(decode: Decode) -> Decode:
    """``decode(model, ...)`` run with its model :func:`evaluating` (a decorator)."""

    @functools.wraps(decode)
    def run(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
        with evaluating(model):
            return decode(model, *args, **kwargs)

    return cast(Decode, run)


@torch.no_grad()
@in_eval_mode
def decode_with(model: nn.Module, src: Tensor, choose: Callable[[Tensor], tuple[Tensor, Tensor]],
                max_len: int | None = None, use_cache: bool = True, processing: Processing | None = None,
                scores: list[Tensor] | None = None, compile: bool = False) -> Tensor:
    """Decode token by token, ``choose`` giving the scores ``(A, V)`` and the next token ``(A,)`` from the logits
    ``(A, V)`` of the rows still decoding (padding already excluded; ``processing`` applied first): argmax is
    :func:`greedy`, a draw is :func:`~aiayn.decoding.sampling.sample_seq2seq`. A row that has produced ``</s>``
    leaves the batch (its cache rows and source with it) at the next read of :func:`check_every`, so it is not
    computed further. ``scores``, a list, receives each step's scores ``(B, V)`` (a row that has ended: 0 for its
    padding, ``-inf`` elsewhere). ``compile``: the steps over a static cache, compiled
    (:class:`~aiayn.decoding.static.StaticSeq2Seq`; rows that end stop being read, not computed)."""
    check_src(model, src)
    check_cache(compile, use_cache)
    net = cast(EncoderDecoder, model)
    cfg = net.cfg
    max_len = target_len(model, src, max_len)
    memory = net.encode(src)
    src_rows = src.size(0)
    out = torch.full((src_rows, max_len), cfg.pad_id, dtype=torch.long, device=src.device)  # (B, max_len)
    alive = torch.arange(src.size(0), device=src.device)  # (A,) the rows still decoding
    ys = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long, device=src.device)  # (A, t) their prefixes
    static = StaticSeq2Seq(model, memory, src, max_len, compile=True) if compile else None
    cache = net.new_cache(max_len) if use_cache and static is None else None
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (A,) rows that have produced </s>
    every = check_every(src.device)
    steps = 0
    for steps in range(1, max_len + 1):
        if static is not None:
            logits = static.step(ys[:, -1], steps - 1)  # (A, V)
        else:
            logits = net.decode(ys[:, -1:] if use_cache else ys, memory, src, cache=cache)[:, -1]  # (A, V)
        logits[:, cfg.pad_id] = float("-inf")  # padding is never an output (it would read as the end of the row)
        if processing is not None and processing.active:
            logits = processing(logits, ys, steps - 1)
        chosen, nxt = choose(logits)
        nxt = nxt.masked_fill(done, cfg.pad_id)  # (A,) a row that ended pads until it leaves
        if scores is not None:  # every row's, those that have ended padding for sure
            padding = torch.full((src_rows, chosen.size(-1)), float("-inf"), device=chosen.device, dtype=chosen.dtype)
            padding[:, cfg.pad_id] = 0.0
            padding[alive] = torch.where(done[:, None], padding[alive], chosen)
            scores.append(padding)
        out[alive, steps - 1] = nxt
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # ids only; the cache itself is preallocated
        done |= nxt == cfg.eos_id
        if steps % every or steps == max_len or not bool(done.any()):  # the one read back, every `every` steps
            continue
        keep = (~done).nonzero()[:, 0]  # (A',)
        if keep.numel() == 0:
            break
        alive, ys, memory, src, done = alive[keep], ys[keep], memory[keep], src[keep], done[keep]
        if cache is not None:
            cache.reorder(keep)
        if static is not None:
            static.reorder(keep)
    ids = trim(out[:, :steps], (cfg.eos_id,))  # the steps taken after the last row ended, if any
    if scores is not None:
        del scores[ids.size(1):]
    return ids
