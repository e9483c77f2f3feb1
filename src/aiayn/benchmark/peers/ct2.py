"""CTranslate2 models made in memory from Hugging Face ones, the peers of the ``*-ct2`` benchmark cases.

CTranslate2 (OpenNMT's C++ inference engine) converts a checkpoint folder that holds a tokenizer; the cases have
neither, only a randomly initialised ``transformers`` model. Its converters' loaders take the model and any
object that answers the few questions they ask a tokenizer, so :class:`~aiayn.convert.ctranslate2.Vocabulary`
(shared with ``aiayn export --to ctranslate2``, as the encoder-decoders' loader is) answers them for ids named
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
from typing import Any

import torch
from torch import nn

from aiayn.benchmark.harness import Unavailable
from aiayn.convert.ctranslate2 import EncoderDecoderLoader, Vocabulary
from aiayn.convert.ctranslate2 import require as export_require

PRECISIONS = ("float32", "int8")  # CTranslate2's weight quantization and compute type, by the same name


def require() -> Any:
    """The ``ctranslate2`` module.

    Raises:
        Unavailable: it is not installed (the message says how to install it).
    """
    try:
        return export_require()  # imported to call its own OpenMP runtime, not torch's
    except ImportError as e:
        raise Unavailable('needs CTranslate2, an optional dependency: pip install "aiayn[bench]"') from e


def version() -> str:
    """The installed CTranslate2's version."""
    return str(require().__version__)


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
    decoder starting from it as a zero vector); the cases' model pads with id 0 and starts from ``<s>``, so this
    takes :class:`aiayn.convert.ctranslate2.EncoderDecoderLoader`, as ``aiayn export --to ctranslate2`` does: the
    decoder starts from the embedding of ``decoder_start_token_id``, as ``MarianMTModel.generate`` does,
    ``final_logits_bias`` becomes the output projection's bias, and ``<pad>`` is never generated, as in ours.

    Args:
        hf: the model (its weights are copied; it is left as it was).
        vocab: names for its ids.
        precision: ``"float32"`` or ``"int8"``.
    """
    _check(precision)
    require()
    return _load(EncoderDecoderLoader("marian")(hf, vocab), precision, "Translator")


__all__ = ["PRECISIONS", "Vocabulary", "generator", "require", "translator", "version"]
