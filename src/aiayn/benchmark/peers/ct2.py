"""CTranslate2 models made in memory from Hugging Face ones, the peers of the ``*-ct2`` benchmark cases.

CTranslate2 (OpenNMT's C++ inference engine) converts a checkpoint folder that holds a tokenizer; the cases have
neither, only a randomly initialised ``transformers`` model. Its converters' loaders take the model and any
object that answers the few questions they ask a tokenizer, so :class:`Vocabulary` answers them for ids named
by their number, and the converted model goes through a temporary folder:

    hf model --loader(hf, Vocabulary)--> spec --validate, optimize("float32" | "int8")--> folder
             --> ctranslate2.Generator / ctranslate2.Translator (CPU, intra_threads = torch's threads)

CTranslate2 takes and returns string tokens: :meth:`Vocabulary.tokens` and :meth:`Vocabulary.ids` map them to
and from our ids. It is an optional dependency (``pip install "aiayn[bench]"``), imported inside the functions.

Shapes: B batch, T tokens.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.benchmark.harness import Unavailable

PRECISIONS = ("float32", "int8")  # CTranslate2's weight quantization and compute type, by the same name


def require() -> Any:
    """The ``ctranslate2`` module.

    Raises:
        Unavailable: it is not installed (the message says how to install it).
    """
    try:
        import ctranslate2
    except ImportError as e:
        raise Unavailable('needs CTranslate2, an optional dependency: pip install "aiayn[bench]"') from e
    return ctranslate2


def version() -> str:
    """The installed CTranslate2's version."""
    return str(require().__version__)


class Vocabulary:
    """Token names for a model without a tokenizer: id ``i`` is ``str(i)`` unless ``specials`` names it.

    Answers what CTranslate2's loaders ask of a tokenizer (``get_vocab``, ``convert_ids_to_tokens`` and the
    ``bos``/``eos``/``unk`` tokens). The cases' models have no unknown token; CTranslate2 needs one named and
    uses it only to disable or replace unknown words, which the cases do not ask for, so it is the end token.

    Args:
        size: the vocabulary size ``V``.
        specials: names of the special ids, e.g. ``{0: "<pad>", 1: "<s>", 2: "</s>"}``.
        bos: the start token's id; ``eos``: the end token's id.
    """

    def __init__(self, size: int, specials: dict[int, str], bos: int, eos: int) -> None:
        for i in (*specials, bos, eos):
            if not 0 <= i < size:
                raise ValueError(f"special id {i} is outside the vocabulary [0, {size})")
        self.names = [specials.get(i, str(i)) for i in range(size)]
        if len(set(self.names)) != size:
            raise ValueError(f"specials {specials} repeat a name of another id")
        self._index = {name: i for i, name in enumerate(self.names)}
        self.bos_token, self.eos_token = self.names[bos], self.names[eos]
        self.unk_token = self.eos_token

    def get_vocab(self) -> dict[str, int]:
        return dict(self._index)

    def convert_ids_to_tokens(self, i: int) -> str:
        return self.names[i]

    def tokens(self, ids: Tensor) -> list[list[str]]:
        """``(B, T)`` ids -> ``B`` lists of ``T`` token names, as CTranslate2 takes a batch."""
        return [[self.names[i] for i in row] for row in ids.tolist()]

    def ids(self, tokens: Sequence[Sequence[str]]) -> Tensor:
        """``B`` lists of ``T`` token names -> ``(B, T)`` ids (every row the same length)."""
        return torch.tensor([[self._index[t] for t in row] for row in tokens], dtype=torch.long)


def _check(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def _load(spec: Any, precision: str, kind: str) -> Any:
    """``spec`` saved with weights in ``precision`` to a temporary folder and loaded as a ``kind``
    (``"Generator"`` or ``"Translator"``) on the CPU, with torch's thread count; the folder is gone after (the
    model is read into memory)."""
    ct2 = require()
    spec.validate()
    spec.optimize(quantization=precision)
    with tempfile.TemporaryDirectory(prefix="aiayn-ct2-") as folder:
        spec.save(folder)
        return getattr(ct2, kind)(folder, device="cpu", compute_type=precision,
                                  intra_threads=torch.get_num_threads(), inter_threads=1)


def generator(hf: nn.Module, vocab: Vocabulary, precision: str = "float32") -> Any:
    """A ``ctranslate2.Generator`` holding the weights of ``hf``, a ``transformers.GPT2LMHeadModel`` or
    ``LlamaForCausalLM``.

    Args:
        hf: the model (its weights are copied; it is left as it was).
        vocab: names for its ids.
        precision: ``"float32"`` or ``"int8"`` (weights in int8, one scale per row, float32 elsewhere).
    """
    _check(precision)
    require()
    from ctranslate2.converters import transformers as loaders

    loader = {"GPT2LMHeadModel": loaders.GPT2Loader, "LlamaForCausalLM": loaders.LlamaLoader}.get(type(hf).__name__)
    if loader is None:
        raise TypeError(f"generator takes a GPT2LMHeadModel or LlamaForCausalLM, got {type(hf).__name__}")
    if loader is loaders.LlamaLoader:  # it deletes each layer's self_attn and mlp once copied: give it a copy
        hf = copy.deepcopy(hf)
    with torch.no_grad():
        spec = loader()(hf, vocab)
    return _load(spec, precision, "Generator")


def translator(hf: Any, vocab: Vocabulary, precision: str = "float32") -> Any:
    """A ``ctranslate2.Translator`` holding the weights of ``hf``, a ``transformers.MarianMTModel``.

    CTranslate2's own Marian loader assumes the layout of the Marian checkpoints (padding the last id, the
    decoder starting from it as a zero vector); the cases' model pads with id 0 and starts from ``<s>``, so
    this takes the BART loader it builds on, told what Marian is (post-norm, no norm after the embeddings):
    the decoder then starts from the embedding of ``decoder_start_token_id``, as ``MarianMTModel.generate``
    does, and ``final_logits_bias`` becomes the output projection's bias.

    Args:
        hf: the model (its weights are copied; its config gets two attributes for the loader, then loses them).
        vocab: names for its ids.
        precision: ``"float32"`` or ``"int8"``.
    """
    _check(precision)
    require()
    from ctranslate2.converters.transformers import BartLoader

    config = hf.config
    config.normalize_before, config.normalize_embedding = False, False  # what BartLoader reads off a BART config
    try:
        with torch.no_grad():
            spec = BartLoader()(hf, vocab)
    finally:
        del config.normalize_before, config.normalize_embedding
    return _load(spec, precision, "Translator")


__all__ = ["PRECISIONS", "Vocabulary", "generator", "require", "translator", "version"]
