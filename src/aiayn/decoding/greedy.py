"""Greedy decoding: at each step take the most probable next token.

The model only needs the small protocol every encoder-decoder here has: ``encode(src)``,
``decode(tgt, memory, src, cache)``, ``new_cache(max_len)`` and a ``cfg`` with ``bos_id``, ``eos_id``,
``pad_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

import torch
from torch import Tensor, nn

from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.layers.kv_cache import DecoderCache


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


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, max_len: int | None = None, use_cache: bool = True) -> Tensor:
    """Decode ``(B, S)`` source ids greedily.

    Args:
        max_len: most tokens to produce; default ``S + 50`` (section 6.1).
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).

    Returns:
        ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.

    Raises:
        ValueError: ``src`` not ``(B, S)``, or holding an id outside the source vocabulary.
    """
    return decode_with(model, src, lambda logits: logits.argmax(-1), max_len, use_cache)


@torch.no_grad()
def decode_with(model: nn.Module, src: Tensor, choose: Callable[[Tensor], Tensor], max_len: int | None = None,
                use_cache: bool = True) -> Tensor:
    """Decode token by token, ``choose`` picking each next token ``(B,)`` from the logits ``(B, V)`` (padding
    already excluded): argmax is :func:`greedy`, a draw is :func:`~aiayn.decoding.sampling.sample_seq2seq`."""
    check_src(model, src)
    net = cast(EncoderDecoder, model)
    cfg = net.cfg
    was_training = model.training
    model.eval()
    max_len = src.size(1) + 50 if max_len is None else max_len
    memory = net.encode(src)
    ys = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    cache = net.new_cache(max_len) if use_cache else None
    for _ in range(max_len):
        logits = net.decode(ys[:, -1:] if use_cache else ys, memory, src, cache=cache)[:, -1]  # (B, V)
        logits[:, cfg.pad_id] = float("-inf")  # padding is never an output (it would read as the end of the row)
        nxt = choose(logits).masked_fill(done, cfg.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # ids only; the cache itself is preallocated
        done |= nxt == cfg.eos_id
        if bool(done.all()):
            break
    model.train(was_training)
    return ys[:, 1:]
