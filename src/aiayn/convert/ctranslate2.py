"""Hugging Face folders -> CTranslate2 models (``aiayn export RUN --to ctranslate2 OUT``), through CTranslate2's
own converter, ``ctranslate2.converters.TransformersConverter``. :func:`aiayn.convert.folder.export` writes the
run's Hugging Face folder (what ``--to hf`` writes) into a temporary folder and calls :func:`to_ctranslate2`:

    HF/config.json + model.safetensors --TransformersConverter: load, validate, optimize(quantization), save-->
        OUT/model.bin + config.json (CTranslate2's own: the end, start and unknown tokens by name)
            + vocabulary.json (a decoder), shared_vocabulary.json (an encoder-decoder), or source_ and
              target_vocabulary.json (separate vocabularies)
    HF/tokenizer.json, tokenizer_config.json, source.spm, vocab.json, ... -> OUT/the same files, copied: the
        folder is whole (``AutoTokenizer.from_pretrained(OUT)`` reads what it read in HF)

    model_type        CTranslate2 loader                                     runs in
    gpt2              its GPT2Loader                                         ctranslate2.Generator
    llama, mistral    its LlamaLoader, MistralLoader                         ctranslate2.Generator
    marian, bart      :class:`EncoderDecoderLoader` (its BartLoader, told    ctranslate2.Translator
                      the model's shape)

The encoder-decoders go through our loader rather than CTranslate2's own, for three reasons:

- its Marian loader assumes OPUS-MT's layout: ``<pad>`` the last id (dropped from the vocabulary) and the decoder
  started from a zero vector. Ours pad with any id and start from ``<s>``'s embedding, as
  ``MarianMTModel.generate`` does; so does its BART loader, which, told Marian's shape (post-norm, no norm after
  the embeddings), converts any Marian, OPUS-MT's included.
- its BART loader reads ``normalize_before`` and ``normalize_embedding`` off the config, which transformers'
  ``BartConfig`` does not hold: ours says them (post-norm, a norm after the embeddings).
- ``<pad>`` gets the output bias -inf, so it is never generated: our decoders (greedy, beam search) set its logit
  to -inf before choosing, and CTranslate2's Marian loader keeps it out by leaving it out of the vocabulary.

Token names. CTranslate2 takes and gives tokens as strings (a ``Generator`` also gives ids). Where the folder has a
tokenizer that transformers reads (``tokenizer.json``; a Marian's ``vocab.json`` and SentencePiece files), ids are
named as that tokenizer names them; otherwise (no tokenizer, a translation run's character tokenizers, source and
target vocabularies of different sizes) every id is named by its number: give CTranslate2 ``[str(i) for i in
ids]`` and read ``int(token)`` back. The end token is the config's ``eos_token_id`` and an encoder-decoder's start
token its ``decoder_start_token_id``, whatever the tokenizer calls them. A GPT with more end tokens
(``stop_ids``) has the first in the model; pass the others as ``end_token=`` to ``generate_batch``. One with none
(``eos_id=None``) still needs one named (its tokenizer's ``</s>``, else id 0): pass ``end_token=[]`` to generate
to the length, as ours does.

Two differences in decoding remain, both CTranslate2's own. ``Translator.translate_batch`` makes one token at
least unless given ``min_decoding_length=0`` (ours may end at once). A Mistral's sliding window: CTranslate2
attends over the whole prompt in its first step and applies the window to the steps after it, so tokens are ours
for prompts of at most ``attention_window`` tokens (generation may run past the window).

:class:`Vocabulary` and :class:`EncoderDecoderLoader` also make the CTranslate2 peers of ``aiayn bench``, from
models in memory (:mod:`aiayn.benchmark.peers.ct2`). CTranslate2 is an optional dependency (``pip install
"aiayn[ctranslate2]"``), imported when a conversion starts.

Shapes: B batch, T tokens, V vocabulary.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.convert.common import read_config
from aiayn.io import read_json

INSTALL = 'pip install "aiayn[ctranslate2]"'
# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES), named here so that the command
# line can offer them without importing CTranslate2
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# what a family's pipeline does (aiayn.models.family.TASKS) -> what runs its CTranslate2 model
RUNS_IN = {"generate": "ctranslate2.Generator", "translate": "ctranslate2.Translator"}
# Hugging Face model_type -> the encoder-decoder shape our loader gives CTranslate2's BART loader; None: a decoder,
# converted by CTranslate2's own loader for its config
MODEL_TYPES: dict[str, str | None] = {"gpt2": None, "llama": None, "mistral": None, "marian": "marian", "bart": "bart"}
# the files of a Hugging Face folder that make its tokenizer (aiayn.convert.folder._copy_tokenizers writes them)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "source.spm", "target.spm", "vocab.json",
                   "target_vocab.json", "src_tokenizer.json", "tgt_tokenizer.json", "aiayn_tokenizer.json")


def require() -> Any:
    """The ``ctranslate2`` module, once it and ``transformers`` (its converter loads the model with it) are known
    to be installed.

    Raises:
        ImportError: one is not installed (the message says how to install it).
    """
    for name in ("transformers", "ctranslate2"):
        try:
            __import__(name) if name == "transformers" else _import_own_openmp()
        except ImportError as e:
            raise ImportError(f"CTranslate2 export needs {name}, an optional dependency: {INSTALL}") from e
    import ctranslate2

    return ctranslate2


def _import_own_openmp() -> None:
    """Import ``ctranslate2`` so that it calls the OpenMP runtime it ships, not torch's.

    torch loads its ``libgomp`` into the process' global symbol scope, so a library loaded after it binds its
    OpenMP calls there: CTranslate2's worker thread then keeps a second team of threads in torch's runtime, which
    counts more threads than cores and from then on sleeps instead of spinning between parallel regions, every
    small torch operation paying a wake-up (``benchmarks/ct2_interference.py`` measured 3-7x slower torch work after
    one CTranslate2 call on a 2-core VM). ``RTLD_DEEPBIND`` makes CTranslate2's library look in its own
    dependencies first, as it does in a process of its own. Only where the platform has the flag (glibc), and only
    at the first import."""
    import sys

    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if "ctranslate2" in sys.modules or not deepbind:
        __import__("ctranslate2")
        return
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | deepbind)
    try:
        __import__("ctranslate2")
    finally:
        sys.setdlopenflags(flags)


def check_convertible(model: nn.Module, quantization: str | None = None) -> None:
    """Refuse, before anything is written, what :func:`to_ctranslate2` cannot make of ``model``.

    Raises:
        ImportError: CTranslate2 is not installed.
        ValueError: ``quantization`` is not one of :data:`QUANTIZATIONS`; ``model`` is of a family that does not
            generate text (naming it), or a GPT with a classification head.
    """
    from aiayn.models import family_of

    require()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: expected one of {', '.join(QUANTIZATIONS)}")
    cfg = getattr(model, "cfg", None)
    try:
        family = family_of(cfg)
    except TypeError as e:
        raise ValueError(f"CTranslate2 export takes an aiayn model, got {type(model).__name__}") from e
    if family.task not in RUNS_IN:
        raise ValueError(f"CTranslate2 runs models that generate text (a GPT: GPT-2, Llama, Mistral; or an "
                         f"encoder-decoder Transformer: Marian, BART); a {family.model.__name__} (family "
                         f"{family.name!r}, task {family.task!r}) cannot be exported to it")
    if (head := getattr(cfg, "head", "lm")) != "lm":
        raise ValueError(f"CTranslate2 runs language models; this {family.model.__name__} has head={head!r}, not "
                         f"'lm' (export it with --to hf or --to onnx)")


class Vocabulary:
    """Token names for CTranslate2: id ``i`` is ``names[i]``, or ``str(i)`` where ``names`` does not name it.

    Answers what CTranslate2's loaders ask of a tokenizer (``get_vocab``, ``convert_ids_to_tokens`` and the
    ``bos``/``eos``/``unk`` tokens). CTranslate2 needs an unknown token named and uses it only to disable or replace
    unknown words; without ``unk`` it is the end token.

    Args:
        size: the vocabulary size ``V``.
        names: names of ids, e.g. the specials ``{0: "<pad>", 1: "<s>", 2: "</s>"}`` or a tokenizer's every token.
        bos: the start token's id; ``eos``: the end token's id; ``unk``: the unknown token's id.

    Raises:
        ValueError: a named or special id outside ``[0, size)``; two ids of one name.
    """

    def __init__(self, size: int, names: Mapping[int, str], bos: int, eos: int, unk: int | None = None) -> None:
        for i in (*names, bos, eos, *([] if unk is None else [unk])):
            if not 0 <= i < size:
                raise ValueError(f"special id {i} is outside the vocabulary [0, {size})")
        self.names = [names.get(i, str(i)) for i in range(size)]
        if len(set(self.names)) != size:
            raise ValueError(f"specials {dict(names)} repeat a name of another id")
        self._index = {name: i for i, name in enumerate(self.names)}
        self.bos_token, self.eos_token = self.names[bos], self.names[eos]
        self.unk_token = self.names[eos if unk is None else unk]

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


@contextlib.contextmanager
def _attributes(obj: Any, **values: Any) -> Iterator[None]:
    """``obj`` with ``values`` set as attributes inside the block, and as it was after it."""
    before = {k: getattr(obj, k) for k in values if hasattr(obj, k)}
    for k, v in values.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k in values:
            if k in before:
                setattr(obj, k, before[k])
            else:
                delattr(obj, k)


class EncoderDecoderLoader:
    """CTranslate2's BART loader for a ``MarianMTModel`` or ``BartForConditionalGeneration``, told the model's
    shape (post-norm; a LayerNorm after the embeddings for BART, none for Marian) and keeping ``<pad>`` from
    being generated (its output bias is -inf, as our decoders set its logit). The decoder starts from the
    embedding of ``decoder_start_token_id``, as ``generate`` and our decoders do.

    Args:
        model_type: ``"marian"`` or ``"bart"``.
    """

    def __init__(self, model_type: str) -> None:
        if model_type not in ("marian", "bart"):
            raise ValueError(f"model_type={model_type!r}: expected 'marian' or 'bart'")
        self.model_type = model_type

    @property
    def architecture_name(self) -> str:
        """The ``transformers`` class the model is loaded as."""
        return "MarianMTModel" if self.model_type == "marian" else "BartForConditionalGeneration"

    def __call__(self, model: Any, target: Vocabulary, source: Vocabulary | None = None) -> Any:
        """The ``ctranslate2.specs.TransformerSpec`` of ``model`` (which is left as it was).

        Args:
            model: the ``transformers`` model, a ``MarianMTModel`` or ``BartForConditionalGeneration``.
            target: names of the decoder's ids (of both sides' when ``source`` is ``None``).
            source: names of the encoder's ids, where its vocabulary is another.
        """
        require()
        from ctranslate2.converters.transformers import BartLoader

        loader = BartLoader()
        config = model.config
        with _attributes(config, normalize_before=False, normalize_embedding=self.model_type == "bart"), \
                torch.no_grad():
            spec = loader.get_model_spec(model)
        loader.set_config(spec.config, model, target)
        spec.register_source_vocabulary((source or target).names)
        spec.register_target_vocabulary(target.names)
        projection = spec.decoder.projection
        if config.pad_token_id is not None:
            weight = projection.weight  # (V, C)
            # (V,) a copy: the model's final_logits_bias stays as it was
            bias = projection.bias.clone() if projection.has_bias() else weight.new_zeros(weight.shape[0])
            bias[config.pad_token_id] = float("-inf")
            projection.bias = bias
        return spec


def _first(ids: Any) -> int | None:
    """A config's ``eos_token_id``: one id, a list of them (the first), or ``None``."""
    return ids[0] if isinstance(ids, list) else ids


def _tokenizer_names(hf: Path) -> tuple[dict[int, str], str | None] | None:
    """``({id: name}, unknown token or None)`` of the tokenizer of ``hf`` that transformers reads: its
    ``tokenizer.json`` (Hugging Face's ``tokenizers`` format), else a Marian's ``vocab.json`` (which
    ``MarianTokenizer`` names ids by); ``None`` where it has neither."""
    config = read_json(hf / "tokenizer_config.json", "a tokenizer config") if (hf / "tokenizer_config.json").is_file() \
        else {}
    if (hf / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(hf / "tokenizer.json"))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        unk = config.get("unk_token") or read_json(hf / "tokenizer.json", "a tokenizer")["model"].get("unk_token")
    elif (hf / "vocab.json").is_file() and (hf / "source.spm").is_file():
        vocab = read_json(hf / "vocab.json", "a Marian vocabulary")
        unk = config.get("unk_token", "<unk>")  # MarianTokenizer's default
    else:
        return None
    if isinstance(unk, dict):  # a token saved with its settings ({"content": "<unk>", ...})
        unk = unk.get("content")
    return {i: name for name, i in vocab.items()}, unk if unk in vocab else None


def vocabularies(hf: str | os.PathLike) -> tuple[Vocabulary, Vocabulary | None]:
    """The names CTranslate2 gets for the ids of the model in the Hugging Face folder ``hf`` (see the module
    docstring): the decoder's (both sides' of an encoder-decoder with one vocabulary), and the encoder's where it
    is another.

    Raises:
        ValueError: a tokenizer naming ids beyond the model's vocabulary.
    """
    hf = Path(hf)
    config = read_config(hf)
    size = config["vocab_size"]
    target_size = config.get("decoder_vocab_size") or size  # a Marian's target vocabulary may be another
    eos = _first(config.get("eos_token_id"))
    separate = target_size != size or (hf / "target_vocab.json").is_file()
    named = None if separate else _tokenizer_names(hf)
    names, unk_name = named or ({}, None)
    if names and max(names) >= size:
        raise ValueError(f"{hf}: the tokenizer names ids up to {max(names)}, beyond the model's vocabulary of {size}")
    if names:  # ids the tokenizer leaves unnamed (a vocabulary padded past it) get names of their own
        names = {i: names.get(i, f"<unused{i}>") for i in range(size)}
    if eos is None:  # no end token (a GPT with eos_id=None): CTranslate2 needs one named
        eos = next((i for i, name in names.items() if name == "</s>"), 0)
    unk = next((i for i, name in names.items() if name == unk_name), None) if unk_name else None
    if config.get("is_encoder_decoder"):
        bos = config["decoder_start_token_id"]
        target = Vocabulary(target_size, names, bos=bos, eos=eos, unk=unk)
        return target, Vocabulary(size, names, bos=bos, eos=eos, unk=unk) if separate else None
    bos = config.get("bos_token_id")
    return Vocabulary(size, names, bos=eos if bos is None else bos, eos=eos, unk=unk), None


def _converter(hf: Path, target: Vocabulary, source: Vocabulary | None, shape: str | None) -> Any:
    """CTranslate2's ``TransformersConverter`` of the folder ``hf``, given ``target`` for the tokenizer it asks
    for (names of ids, the special tokens); an encoder-decoder (``shape``: ``"marian"`` or ``"bart"``) is made by
    :class:`EncoderDecoderLoader` (with ``source``, the encoder's names where they are others), not by
    CTranslate2's loader for its config."""
    import transformers
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class: Any, model_name_or_path: str, **kwargs: Any) -> Vocabulary:
            return target

        def _load(self) -> Any:
            if shape is None:  # a decoder: CTranslate2's own loader for the folder's config
                return super()._load()
            loader = EncoderDecoderLoader(shape)
            model = self.load_model(getattr(transformers, loader.architecture_name), self._model_name_or_path)
            return loader(model, target, source)

    return Converter(str(hf))


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """transformers' progress bar off while the converter loads the model (a tiny one too draws it)."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def to_ctranslate2(hf: str | os.PathLike, out: str | os.PathLike, quantization: str | None = None) -> Path:
    """Convert the Hugging Face folder ``hf`` (a GPT-2, Llama, Mistral, Marian or BART, with its tokenizer files)
    into the CTranslate2 model folder ``out``, with CTranslate2's ``TransformersConverter``.

    Args:
        out: a new folder or an empty one (CTranslate2 writes it anew).
        quantization: the type of the weights, one of :data:`QUANTIZATIONS`; ``None`` keeps the folder's
            (float32 for ours). The compute type is chosen when the model is loaded
            (``ctranslate2.Generator(out, compute_type=...)``).

    Returns:
        ``out``, holding ``model.bin``, CTranslate2's ``config.json``, its vocabularies and ``hf``'s tokenizer
        files; ``ctranslate2.Generator(out)`` (a decoder) or ``ctranslate2.Translator(out)`` (an encoder-decoder)
        loads it.

    Raises:
        ImportError: CTranslate2 is not installed.
        ValueError: a ``model_type`` not in :data:`MODEL_TYPES` (naming it); ``quantization`` not one of
            :data:`QUANTIZATIONS`; an ``out`` that holds files; a tokenizer naming ids beyond the vocabulary; a
            model CTranslate2 cannot convert (its reason).
    """
    require()
    hf, out = Path(hf), Path(out)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}: expected one of {', '.join(QUANTIZATIONS)}")
    model_type = read_config(hf).get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{hf} holds a {model_type!r} model; CTranslate2 export takes {', '.join(MODEL_TYPES)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} is not an empty folder; choose another")
    target, source = vocabularies(hf)
    converter = _converter(hf, target, source, MODEL_TYPES[model_type])
    try:
        with _quiet_loading():
            converter.convert(str(out), quantization=quantization, force=True)  # force: out may exist, empty
    except NotImplementedError as e:  # a RoPE scaling or quantized checkpoint CTranslate2 does not take
        raise ValueError(f"CTranslate2 cannot convert {hf}: {e}") from e
    for name in TOKENIZER_FILES:
        if (hf / name).is_file():
            shutil.copyfile(hf / name, out / name)
    return out


__all__ = ["INSTALL", "MODEL_TYPES", "QUANTIZATIONS", "RUNS_IN", "TOKENIZER_FILES", "EncoderDecoderLoader",
           "Vocabulary", "check_convertible", "require", "to_ctranslate2", "vocabularies"]
