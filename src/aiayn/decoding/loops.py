"""The token loop of greedy decoding and sampling, written once against a decode session
(:mod:`aiayn.layers.session`): a language model's prompts and an encoder-decoder's sources alike.

    logits = session.prefill(inputs)                    the prompt read (or the source, and the start token)
    repeat:  logits -> processing -> choose a token     (greedy: the most likely; sampling: drawn)
             logits = session.step(token)

Every decoding loop here (this one, beam search) reads nothing back from the device per step but whether it may
stop, and that only every :func:`check_every` steps: on an accelerator each read makes the host wait until the
device has run every kernel queued so far, so the next step cannot be queued ahead. Rows that end in between are
computed a few steps more and their extra tokens are padding, trimmed off: the results are those of checking
every step. In greedy decoding, at each read the rows that have ended leave the session
(:meth:`~aiayn.layers.session.Session.keep`) and are not computed further, unless every row's scores are recorded
(``transformers`` records a finished row's too); sampling keeps every row, so the draws do not depend on when the
reads fall (a row that left would change which random numbers the others get).

Shapes: B rows, A rows still decoding (<= B), P prefix (the prompt; the start token), N new tokens, V vocabulary.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from aiayn.decoding.processing import Processing
    from aiayn.layers.session import Session


# Steps between reads of "has every row ended?" on an accelerator: rows that ended are computed for at
# most CHECK_EVERY - 1 steps more. The CPU queues nothing ahead, so a read costs it nothing while the
# extra steps cost compute: there it reads every step (ON_CPU).
CHECK_EVERY = 8
ON_CPU = 1

Ends = int | Sequence[int] | None  # the token, or tokens, that end a row (Llama 3's chat models have three)
Choose = Callable[[Tensor], tuple[Tensor, Tensor]]  # logits (A, V) -> (scores (A, V), tokens (A,))


def check_every(device: torch.device) -> int:
    """How many steps decoding on ``device`` runs between reads of whether it may stop."""
    return ON_CPU if device.type == "cpu" else CHECK_EVERY


def end_ids(eos: Ends) -> tuple[int, ...]:
    """``eos`` as a tuple of ids: ``()`` for ``None``, ``(id,)`` for one id; the first is what pads a row."""
    if eos is None:
        return ()
    return tuple(int(e) for e in eos) if isinstance(eos, Sequence) else (int(eos),)


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
    ended = is_eos.cumsum(1) - is_eos > 0  # (B, L) after the row's end
    return ids[:, : int((~ended).sum(1).max())]


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


def greedy_choice(logits: Tensor) -> tuple[Tensor, Tensor]:
    """The most likely token, the scores being the logits as they are."""
    return logits, logits.argmax(-1)


def tokens(session: Session, ids: Tensor, mask: Tensor | None, new_tokens: int, choose: Choose, *,
           eos: tuple[int, ...], pad: int, repeat: int = 1, processing: Processing | None = None,
           scores: list[Tensor] | None = None, drawn: bool = False,
           stop: Callable[[Tensor, Tensor | None], Tensor] | None = None) -> Iterator[Tensor]:
    """Yield every row's next token ``(B,)``, one step at a time, until ``new_tokens`` or every row has produced
    an end token (one of ``eos``); a row that has ended yields ``pad``.

    Args:
        session: a fresh decode session of the model.
        ids, mask: ``(B0, T)`` the inputs :meth:`~aiayn.layers.session.Session.prefill` reads, each giving
            ``repeat`` rows (so ``B = B0 * repeat``).
        choose: the scores and the token of each row from its logits (after the processing and the tokens the
            model never outputs, :attr:`~aiayn.layers.session.Session.never`, masked out).
        processing: changes the logits first (:class:`~aiayn.decoding.processing.Processing`), reading the prefix
            and the tokens made so far.
        scores: a list that receives each step's scores ``(B, V)`` (rows then stay in the session to the end).
        drawn: ``choose`` draws at random (rows then stay in the session to the end).
        stop: ends rows as an end token does, the token kept (:class:`~aiayn.decoding.stopping.StopStrings`):
            ``stop(seqs (A, L), real (A, L) or None) -> (A,) bool``, given each row's tokens so far; whether to
            stop is then read back every step.
    """
    logits = session.prefill(ids, mask, new_tokens=new_tokens, repeat=repeat)  # (B, V)
    prefix = session.prefix  # (B, P)
    b, p = prefix.shape
    device = prefix.device
    seqs = prefix.new_zeros(b, p + new_tokens)  # (A, P + N) what the rows still decoding hold
    seqs[:, :p] = prefix
    real = None
    if session.prefix_mask is not None:
        real = torch.ones(b, p + new_tokens, dtype=torch.bool, device=device)
        real[:, :p] = session.prefix_mask
    out = torch.full((b, new_tokens), pad, dtype=torch.long, device=device)  # (B, N)
    alive = torch.arange(b, device=device)  # (A,) the rows still decoding, among the B
    done = torch.zeros(b, dtype=torch.bool, device=device)  # (A,) those that have produced an end token
    leave = scores is None and not drawn
    every = 1 if stop is not None else check_every(device)  # (stop reads the rows back anyway)
    left = False  # whether any row has left
    nxt = out[:, 0]  # (A,) each row's last token (chosen below before it is fed)
    for step in range(new_tokens):
        if step:
            logits = session.step(nxt)
        for token in session.never:  # (an encoder-decoder's padding: it would read as the end of the row)
            logits[:, token] = float("-inf")
        end = p + step
        if processing is not None and processing.active:
            logits = processing(logits, seqs[:, :end], step, None if real is None else real[:, :end])
        chosen, nxt = choose(logits)  # (A, V), (A,)
        if scores is not None:
            scores.append(chosen)
        if eos or stop is not None:
            nxt = nxt.masked_fill(done, pad)  # a row that ended pads until it leaves
            done |= ends(nxt, eos)
        seqs[:, end] = nxt
        if stop is not None:
            done |= stop(seqs[:, : end + 1], None if real is None else real[:, : end + 1])
        if left:
            out[alive, step] = nxt
        else:
            out[:, step] = nxt
        yield out[:, step]
        if not (eos or stop) or (step + 1) % every or step + 1 == new_tokens or not bool(done.any()):  # read back
            continue
        if not leave:
            if bool(done.all()):
                return
            continue
        keep = (~done).nonzero()[:, 0]  # (A',)
        if keep.numel() == 0:
            return
        alive, seqs, done, nxt = alive[keep], seqs[keep], done[keep], nxt[keep]
        real = None if real is None else real[keep]
        session.keep(keep)
        left = True


def generated(steps: Iterator[Tensor], eos: tuple[int, ...], scores: list[Tensor] | None = None) -> Tensor:
    """The new tokens ``(B, n)`` of a :func:`tokens` loop, without the steps run past every row's end (and
    ``scores`` cut to match)."""
    made = list(steps)
    new = trim(torch.stack(made, dim=1), eos)  # (B, n)
    if scores is not None:
        del scores[new.size(1):]
    return new


__all__ = ["CHECK_EVERY", "ON_CPU", "Choose", "Ends", "check_every", "end_ids", "ends", "evaluating", "generated",
           "greedy_choice", "in_eval_mode", "tokens", "trim"]
