"""A model loaded once and kept, ready to answer: ``aiayn.pipeline(run_or_folder, device=None, quantize=None)``.

    p = aiayn.pipeline("runs/dates")                   # a translation run
    p.translate(["2019-03-07"], beam=4)
    p = aiayn.pipeline("runs/lm", quantize="int8")     # int8 weights on the CPU
    p.generate(["Once upon a time"], max_new_tokens=50, temperature=0.8, top_p=0.9)
    for piece in p.generate("ROMEO:", stream=True): print(piece, end="")
    p = aiayn.pipeline("all-MiniLM-L6-v2")             # a Hugging Face BERT folder, or a BERT run
    p.embed(["A man is eating.", "Someone eats."])      # (2, 384), L2-normalised
    aiayn.pipeline("runs/image").classify(["digit.png"])
    aiayn.pipeline("runs/detect").detect(["photo.jpg"])

What a folder holds decides what its pipeline does (``p.task``): a translation run (``src_tokenizer.json``)
or a denoising run (a BART: one tokenizer for both sides) translates, a language model generates, a BERT
embeds, a ViT or Swin classifies images and a textclass run (BERT or GPT) texts, a DETR detects. Each method
computes what the command of the same name prints (``aiayn translate``, ``generate``, ``embed``, ``classify``,
``detect``): both call the same functions of the task's module here (:mod:`aiayn.pipelines.translation`, ...),
the pipeline with the model loaded once instead of at every call. :func:`tldr` asks a language model for a
zero-shot summary, as GPT-2 was asked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

import aiayn
from aiayn.models.registry import family_of, family_of_hf

if TYPE_CHECKING:
    from aiayn.data.callable import CallableTokenizer
    from aiayn.models.bert import BERT


class Pipeline:
    """A loaded model and what it needs to read and write text or images; made by :func:`pipeline`."""

    def __init__(self, task: str, model: nn.Module, source: Path, **parts: Any) -> None:
        self.task, self.model, self.source, self._parts = task, model, source, parts

    def __repr__(self) -> str:
        return f"Pipeline(task={self.task!r}, model={type(self.model).__name__}, source={str(self.source)!r})"

    @property
    def parts(self) -> dict[str, Any]:
        """What the model works with besides itself, by name: ``src_tok`` and ``tgt_tok`` (translate), ``tok``
        (generate, embed, a textclass run's classify), ``max_len`` (embed and textclass: the tokens a text is cut
        to), ``classes`` (textclass), ``detector`` (detect)."""
        return dict(self._parts)

    @property
    def tokenizer(self) -> CallableTokenizer:
        """The model's tokenizer, called as ``transformers``' are (:class:`aiayn.data.callable.CallableTokenizer`):
        ``p.tokenizer(texts, return_tensors="pt", padding=True)`` adds the specials this model reads and pads on
        its side; ``p.tokenizer.batch_decode(ids, skip_special_tokens=True)``.

        Raises:
            ValueError: an image model (a ViT, Swin or DETR), which reads no text.
        """
        return _callable(self.task, self._parts, self.source, getattr(self.model, "cfg", None))

    def _need(self, task: str) -> None:
        if task != self.task:
            raise ValueError(f"{self.source} holds a {type(self.model).__name__}, which can {self.task}, not {task}")

    def translate(self, texts: str | list[str], beam: int = 1) -> str | list[str]:
        """Translations of ``texts`` (greedy, or beam search for ``beam > 1``), as ``aiayn translate`` gives;
        one text gives one translation, a list a list."""
        from aiayn.pipelines.translation import translate_texts

        self._need("translate")
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        out = translate_texts(self.model, self._parts["src_tok"], self._parts["tgt_tok"],
                              [texts] if isinstance(texts, str) else list(texts), beam=beam)
        return out[0] if isinstance(texts, str) else out

    def generate(self, prompts: str | list[str], max_new_tokens: int = 200, temperature: float = 0.8,
                 top_k: int | None = None, top_p: float | None = None, stop: list[str] | None = None,
                 seed: int | None = None, stream: bool = False) -> str | list[str] | Iterator[str]:
        """The continuation of each prompt (not the prompt), as ``aiayn generate`` prints it.

        Args:
            prompts: one prompt (its continuation is returned) or a list of them (a list is).
            temperature: divides the logits; 0 is greedy decoding.
            stop: strings that end the text (not included).
            seed: makes sampling repeatable (each prompt is seeded with it).
            stream: yield the text of one prompt piece by piece as it is made (``prompts`` must be one).
        """
        from aiayn.pipelines.lm import stream_text

        self._need("generate")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        tok = self._parts["tok"]
        if stream:
            if not isinstance(prompts, str):
                raise ValueError("stream=True takes one prompt (a string)")
            return stream_text(self.model, tok, prompts, max_new_tokens, temperature, top_k, top_p, stop, seed)
        texts = ["".join(stream_text(self.model, tok, p, max_new_tokens, temperature, top_k, top_p, stop, seed))
                 for p in ([prompts] if isinstance(prompts, str) else prompts)]
        return texts[0] if isinstance(prompts, str) else texts

    def embed(self, texts: str | list[str], batch_size: int = 64) -> Tensor:
        """``(N, C)`` L2-normalised sentence embeddings (mean pooling), on the CPU, as ``aiayn embed`` gives;
        one text gives one ``(C,)`` vector."""
        from aiayn.pipelines.embed import embed_texts

        self._need("embed")
        out = embed_texts(cast("BERT", self.model), self._parts["tok"], self._parts["max_len"],
                          [texts] if isinstance(texts, str) else texts, batch_size)
        return out[0] if isinstance(texts, str) else out

    def classify(self, images: str | list[str | os.PathLike | Tensor] | list[str], top: int = 3,
                 invert: bool | None = None) -> dict[str, Any] | list[dict[str, Any]]:
        """The ``top`` classes of each image (a file, or a ``(C, H, W)`` tensor in [0, 1]), as ``aiayn classify``
        gives them: one ``{"label", "score", "top": [{"class", "probability"}, ...]}`` per image (and ``"path"``
        for a file), ``label`` and ``score`` the most likely class and its probability as ``transformers``'
        pipelines name them; for a textclass run, of each text (``{"text", "label", "score", "top"}``; ``top`` at
        most the number of classes), where one text (a string) gives one answer. An image run takes a list only
        (one string would be a file's name)."""
        from aiayn.pipelines.image import classify_images, pixel_norm, read_image_file

        self._need("classify")
        if "classes" in self._parts:  # a text classifier
            from aiayn.pipelines.textclass import classify_texts

            parts = self._parts
            found = classify_texts(cast("BERT", self.model), parts["tok"], parts["classes"],
                                   [images] if isinstance(images, str) else cast(list, images),
                                   min(top, len(parts["classes"])), parts["max_len"])
            return found[0] if isinstance(images, str) else found
        if isinstance(images, (str, os.PathLike)):  # one file would be read as a list of one-letter names
            raise TypeError("images must be a list (of files, tensors or texts), got one")
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        pictures = [x if isinstance(x, Tensor) else read_image_file(x) for x in images]
        found = classify_images(self.model, pictures, top, invert, self.source, pixel_norm(self.source))
        return [r if isinstance(x, Tensor) else {"path": str(x), **r} for x, r in zip(images, found)]

    def detect(self, images: list[str | os.PathLike], threshold: float = 0.7) -> list[list[dict[str, Any]]]:
        """The objects found in each image file above ``threshold``, as ``aiayn detect`` prints them:
        ``[{"label", "name", "score", "box": [x0, y0, x1, y1]}]`` per image, most likely first."""
        from aiayn.pipelines.detect import find_objects

        self._need("detect")
        if isinstance(images, (str, os.PathLike)):
            raise TypeError("images must be a list of files, got one")
        if not 0 <= threshold < 1:
            raise ValueError(f"threshold={threshold} must be in [0, 1)")
        return [find_objects(self._parts["detector"], image, threshold) for image in images]


def pipeline(source: str | os.PathLike, device: str | torch.device | None = None, quantize: str | None = None,
             weights: str | os.PathLike | None = None) -> Pipeline:
    """Load the model of a run folder (``aiayn train``, ``aiayn convert``) or of a Hugging Face folder or model id
    (a GPT-2 with its ``tokenizer.json``, a Marian with its SentencePiece files, a BERT) once, for many calls.

    Args:
        device: where the model runs (:func:`aiayn.training.device.resolve`; default: a GPU if any).
        quantize: ``"int8"`` for int8 weights on the CPU (:mod:`aiayn.layers.int8`); ``None``: as saved.
        weights: a translation run's other weights (``average.safetensors``, ``best.safetensors``).

    Raises:
        FileNotFoundError: ``source`` holds no model.
        ValueError: a bad ``device`` or ``quantize``; a model no pipeline runs.
    """
    from aiayn.pipelines.detect import load_detector
    from aiayn.pipelines.embed import load_bert
    from aiayn.pipelines.lm import load_lm_run
    from aiayn.pipelines.loading import check_tokenizer, load_model, special_ids
    from aiayn.pipelines.translation import load_run
    from aiayn.training.checkpoint import saved_config

    folder = Path(source)
    if not folder.exists():  # a Hugging Face model id, fetched into (or read offline from) its cache
        from aiayn.convert import hf_folder

        folder = hf_folder(source)
    run_on: dict[str, Any] = {"device": device, "quantize": quantize}
    if weights is not None and not (folder / "src_tokenizer.json").is_file():
        raise ValueError("weights= is for translation runs")
    if (folder / "src_tokenizer.json").is_file():
        model, src_tok, tgt_tok = load_run(folder, weights, **run_on)
        return Pipeline("translate", model, folder, src_tok=src_tok, tgt_tok=tgt_tok)
    if (folder / "config.json").is_file():
        return _hf_pipeline(folder, run_on)
    family = family_of(saved_config(folder))
    if family.inputs == "text" and (folder / "classes.json").is_file():  # a textclass run (a BERT's, a GPT's)
        from aiayn.pipelines.textclass import load_classifier, text_length

        model, tok, classes = load_classifier(folder, **run_on)
        return Pipeline("classify", model, folder, tok=tok, classes=classes, max_len=text_length(folder, model))
    if family.task == "generate":
        model, tok = load_lm_run(folder, **run_on)
        return Pipeline("generate", model, folder, tok=tok)
    if family.task == "embed":
        model, tok, max_len = load_bert(folder, **run_on)
        return Pipeline("embed", model, folder, tok=tok, max_len=max_len)
    if family.task == "translate":  # a denoising run: a BART with one tokenizer for both sides
        from aiayn.data import load_tokenizer

        one = load_tokenizer(folder / "tokenizer.json")
        model = load_model(folder, device, quantize)
        cfg = cast(Any, model).cfg
        check_tokenizer(one, folder / "tokenizer.json", cfg.tgt_vocab_size, special_ids(cfg),
                        exact=(folder / "args.json").is_file())
        return Pipeline("translate", model, folder, src_tok=one, tgt_tok=one)
    if family.task == "classify":  # an image classifier
        return Pipeline("classify", load_model(folder, device, quantize), folder)
    detector = load_detector(folder, **run_on)
    return Pipeline("detect", detector[0], folder, detector=detector)


def _hf_pipeline(folder: Path, run_on: dict[str, Any]) -> Pipeline:
    """A Hugging Face folder's pipeline: a GPT-2 or Llama (with ``tokenizer.json``) generates, a Marian (with its
    SentencePiece files) translates, a BERT embeds; converted in memory, as ``aiayn convert`` would."""
    from aiayn.pipelines.embed import load_bert
    from aiayn.pipelines.loading import ready

    task = _hf_task(folder)
    if task == "generate" and (folder / "tokenizer.json").is_file():
        from aiayn.data import load_tokenizer

        model = ready(aiayn.from_hf(folder), **run_on)
        return Pipeline("generate", model, folder, tok=load_tokenizer(folder / "tokenizer.json"))
    if task == "translate" and (folder / "source.spm").is_file():  # a Marian's SentencePiece files
        from aiayn.data.sentencepiece import marian_tokenizers

        src_tok, tgt_tok = marian_tokenizers(folder)
        return Pipeline("translate", ready(aiayn.from_hf(folder), **run_on), folder, src_tok=src_tok, tgt_tok=tgt_tok)
    model, tok, max_len = load_bert(folder, **run_on)  # anything else: refused unless a BERT
    return Pipeline("embed", model, folder, tok=tok, max_len=max_len)


def _hf_task(folder: Path) -> str | None:
    """The task of the family that converts the Hugging Face folder's ``model_type`` (``None``: no family does;
    the loader then names the folder and what it holds)."""
    from aiayn.convert.common import read_config

    try:
        return family_of_hf(read_config(folder).get("model_type"), str(folder)).task
    except ValueError:
        return None


def tokenizer(source: str | os.PathLike) -> CallableTokenizer:
    """The callable tokenizer of a run folder or a Hugging Face folder (or model id), as ``transformers``'
    ``AutoTokenizer.from_pretrained`` gives one, without reading the weights: what ``pipeline(source).tokenizer``
    is (:class:`aiayn.data.callable.CallableTokenizer`).

    Raises:
        FileNotFoundError: ``source`` holds no tokenizer.
        ValueError: ``source`` holds an image model, or a model no pipeline runs.
    """
    from aiayn.data import load_tokenizer
    from aiayn.pipelines.embed import bert_tokenizer
    from aiayn.training.checkpoint import saved_config

    folder = Path(source)
    if not folder.exists():
        from aiayn.convert import hf_folder

        folder = hf_folder(source)
    if (folder / "src_tokenizer.json").is_file():
        return _callable("translate", {"src_tok": load_tokenizer(folder / "src_tokenizer.json"),
                                       "tgt_tok": load_tokenizer(folder / "tgt_tokenizer.json")}, folder)
    if (folder / "config.json").is_file():
        task = _hf_task(folder)
        if task == "generate" and (folder / "tokenizer.json").is_file():
            return _callable("generate", {"tok": load_tokenizer(folder / "tokenizer.json")}, folder)
        if task == "translate" and (folder / "source.spm").is_file():
            from aiayn.data.sentencepiece import marian_tokenizers

            src_tok, tgt_tok = marian_tokenizers(folder)
            return _callable("translate", {"src_tok": src_tok, "tgt_tok": tgt_tok}, folder)
        return _callable("embed", {"tok": bert_tokenizer(folder)}, folder)
    cfg = saved_config(folder)
    family = family_of(cfg)
    if family.inputs == "text" and (folder / "classes.json").is_file():
        from aiayn.pipelines.textclass import load_text_tokenizer

        return _callable("classify", {"tok": load_text_tokenizer(folder / "tokenizer.json"), "classes": []},
                         folder, cfg)
    if family.task == "generate":
        return _callable("generate", {"tok": load_tokenizer(folder / "tokenizer.json")}, folder, cfg)
    if family.task == "embed":
        return _callable("embed", {"tok": bert_tokenizer(folder)}, folder, cfg)
    if family.task == "translate":  # a denoising run: one tokenizer for both sides
        one = load_tokenizer(folder / "tokenizer.json")
        return _callable("translate", {"src_tok": one, "tgt_tok": one}, folder, cfg)
    return _callable(family.task, {}, folder)


def _callable(task: str, parts: dict[str, Any], source: Path, cfg: Any = None) -> CallableTokenizer:
    """The callable tokenizer of a model that does ``task`` with ``parts``, adding the specials it was
    trained to read: a translation's source ``text </s>`` (:func:`aiayn.data.batching.encode_pairs`), a GPT's
    prompt as it is, padded on the left, a BERT's ``[CLS] text [SEP]``, a GPT classifier's ``text <end-of-text>``
    (:func:`aiayn.pipelines.textclass.encode`)."""
    from aiayn.data.callable import CallableTokenizer
    from aiayn.data.wordpiece import WordPieceTokenizer

    longest = getattr(cfg, "max_len", None)
    if task == "translate":
        return CallableTokenizer(parts["src_tok"], "eos", decoder=parts["tgt_tok"], max_length=longest)
    if task == "generate":
        return CallableTokenizer(parts["tok"], "none", padding_side="left", max_length=longest)
    if "tok" in parts:  # a BERT, or a GPT classifier
        bert = isinstance(parts["tok"], WordPieceTokenizer)
        return CallableTokenizer(parts["tok"], "bert" if bert else "eos", max_length=parts.get("max_len", longest))
    raise ValueError(f"{source} holds an image model ({task}), which reads no text: it has no tokenizer")


TLDR = "\nTL;DR:"  # Radford et al. 2019, section 3.6: the prompt that asks a language model for a summary


def tldr(source: Pipeline | str | os.PathLike, text: str, max_new_tokens: int = 100, top_k: int = 2,
         sentences: int | None = 3, seed: int | None = 0) -> str:
    """A zero-shot summary of ``text`` by a language model, as GPT-2 was asked for one (Radford et al. 2019,
    section 3.6): the text, then ``"\nTL;DR:"``, then ``max_new_tokens`` tokens each drawn from the ``top_k``
    most likely (k = 2 in the paper, temperature 1), of which the first ``sentences`` sentences are kept.

    Args:
        source: a generating :class:`Pipeline`, or what :func:`pipeline` loads one from (a converted GPT-2
            folder with its ``tokenizer.json``, an ``aiayn train lm`` run).
        text: the article; the model's context must hold it, the prompt and the new tokens (fewer are drawn
            when it does not).
        sentences: how many sentences of the continuation to keep (ended by ``.``, ``!`` or ``?``); ``None``:
            all of it.
        seed: seeds the sampling, so one seed gives one summary on one device.

    Returns:
        The continuation after the prompt (the prompt not included), stripped of surrounding spaces.

    Raises:
        ValueError: an empty ``text``, ``top_k`` or ``sentences`` below 1, or a source that does not generate.
    """
    import re

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    if top_k < 1 or (sentences is not None and sentences < 1):
        raise ValueError(f"top_k and sentences must be >= 1, got top_k={top_k}, sentences={sentences}")
    p = source if isinstance(source, Pipeline) else pipeline(source)
    if p.task != "generate":
        raise ValueError(f"source: {p.source} holds a {type(p.model).__name__}, which can {p.task}; a TL;DR "
                         f"summary needs a language model")
    out = cast(str, p.generate(text.rstrip() + TLDR, max_new_tokens=max_new_tokens, temperature=1.0, top_k=top_k,
                               seed=seed))
    if sentences is not None:
        out = "".join(re.split(r"(?<=[.!?])(?=\s)", out)[:sentences])
    return out.strip()


__all__ = ["TLDR", "Pipeline", "pipeline", "tldr", "tokenizer"]
