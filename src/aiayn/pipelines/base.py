"""A model loaded once and kept, ready to answer: ``aiayn.pipeline(run_or_folder, device=None, quantize=None)``.

    p = aiayn.pipeline("runs/dates")                   # a translation run
    p.translate(["2019-03-07"], beam=4)
    p = aiayn.pipeline("runs/lm", quantize="int8")     # int8 weights on the CPU
    p.generate(["Once upon a time"], max_new_tokens=50, temperature=0.8, top_p=0.9)   # transformers' names
    p.generate("Once upon a time", do_sample=False, num_beams=4, num_return_sequences=2)
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

from aiayn.convert import from_hf
from aiayn.models.registry import family_of, family_of_hf

if TYPE_CHECKING:
    from aiayn.data.callable import CallableTokenizer
    from aiayn.models.bert import BERT


METHODS = {"translation": "translate", "text-generation": "generate", "feature-extraction": "embed",
           "text-classification": "classify", "image-classification": "classify", "object-detection": "detect"}
"""Each task, as ``transformers`` names it (``p.task``), and the pipeline's method that does it."""


class Pipeline:
    """A loaded model and what it needs to read and write text or images; made by :func:`pipeline`.

    ``task`` is ``transformers``' name of what it does (a key of :data:`METHODS`); calling the pipeline answers
    as a ``transformers`` pipeline of that task does (:meth:`__call__`), its methods as the commands do.
    """

    def __init__(self, task: str, model: nn.Module, source: Path, *, compile: bool = False, **parts: Any) -> None:
        if task not in METHODS:
            raise ValueError(f"task must be one of {sorted(METHODS)}, got {task!r}")
        if compile and task not in ("text-generation", "translation"):
            raise ValueError(f"compile=True compiles decoding (text-generation, translation); {source} holds a "
                             f"{task} model")
        self.task, self.model, self.source, self._parts, self._compile = task, model, source, parts, compile

    @property
    def compile(self) -> bool:
        """Decoding (a language model's or a translation model's) runs over a static cache with a compiled step
        (:mod:`aiayn.layers.session`): chosen once, ``pipeline(..., compile=True)``, and handed to each decode
        session."""
        return self._compile

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
        return _callable(METHODS[self.task], self._parts, self.source, getattr(self.model, "cfg", None))

    def _need(self, method: str) -> None:
        if METHODS[self.task] != method:
            raise ValueError(f"{self.source} holds a {type(self.model).__name__}, a {self.task} model that can "
                             f"{METHODS[self.task]}, not {method}")

    def __call__(self, inputs: Any, **kwargs: Any) -> Any:
        """Answer as a ``transformers`` pipeline of :attr:`task` answers (one input or a list; ``kwargs`` as the
        method takes them):

        * ``translation``: ``[{"translation_text"}]`` per text (:meth:`translate`; ``num_beams`` is ``beam``);
        * ``text-generation``: ``[{"generated_text"}]`` per prompt, the prompt included unless
          ``return_full_text=False`` (:meth:`generate`, ``num_return_sequences`` texts each);
        * ``text-classification``: ``{"label", "score"}`` per text, or the ``top_k`` best as a list;
        * ``image-classification``: the ``top_k`` (5) best ``{"label", "score"}`` per image;
        * ``object-detection``: ``[{"score", "label", "box": {"xmin", "ymin", "xmax", "ymax"}}]`` per image
          (``threshold`` 0.5, as ``transformers``' default);
        * ``feature-extraction``: the sentence vectors (:meth:`embed`, as ``sentence-transformers``' ``encode``
          gives them, not ``transformers``' per-token features), as nested lists.
        """
        one = isinstance(inputs, (str, os.PathLike, Tensor))
        many = [inputs] if one else list(inputs)
        if self.task == "translation":
            beam, n = kwargs.pop("num_beams", kwargs.pop("beam", 1)), kwargs.get("num_return_sequences", 1)
            out: list[Any] = [[{"translation_text": t} for t in (texts if n > 1 else [texts])]
                              for texts in self.translate(many, beam=beam, **kwargs)]
            return out[0] if one else out if n > 1 else [o[0] for o in out]
        if self.task == "text-generation":
            full = kwargs.pop("return_full_text", True)
            n = kwargs.get("num_return_sequences", 1)
            made = self.generate(many, **kwargs)
            out = [[{"generated_text": (p if full else "") + t} for t in (texts if n > 1 else [texts])]
                   for p, texts in zip(many, cast(list, made))]
            return out[0] if one else out
        if self.task == "feature-extraction":
            vectors = self.embed([str(x) for x in many], **kwargs).tolist()
            return vectors[0] if one else vectors
        if self.task == "object-detection":
            threshold = kwargs.pop("threshold", 0.5)
            out = [[{"score": d["score"], "label": d["name"],
                     "box": dict(zip(("xmin", "ymin", "xmax", "ymax"), d["box"]))} for d in objects]
                   for objects in self.detect(many, threshold=threshold, **kwargs)]
            return out[0] if one else out
        top_k = kwargs.pop("top_k", 5 if self.task == "image-classification" else None)
        answers = cast(list, self.classify(many, top=top_k or 1, **kwargs))
        out = [[{"label": c["class"], "score": c["probability"]} for c in r["top"]] if top_k
               else {"label": r["label"], "score": r["score"]} for r in answers]
        return out[0] if one else out

    def translate(self, texts: str | list[str], beam: int = 1, num_return_sequences: int = 1, *,
                  max_new_tokens: int | None = None,
                  max_length: int | None = None) -> str | list[str] | list[list[str]]:
        """Translations of ``texts`` (greedy, or beam search for ``beam > 1``), as ``aiayn translate`` gives;
        one text gives one translation, a list a list. ``num_return_sequences`` (at most ``beam``): the best beams
        of each text, best first, as a list per text (``aiayn translate --n-best``). ``max_new_tokens`` (or
        ``max_length``, which counts the start token too, as ``generate``'s): the most target tokens (default the
        source's length + 50, section 6.1)."""
        from aiayn.decoding.config import GenerationConfig
        from aiayn.decoding.settings import check
        from aiayn.pipelines.translation import n_best

        self._need("translate")
        check(num_beams=beam, num_return_sequences=num_return_sequences)
        if not 1 <= num_return_sequences <= beam:
            raise ValueError(f"num_return_sequences must be between 1 and beam={beam}, got {num_return_sequences}")
        if max_new_tokens is None and max_length is not None:  # transformers': max_new_tokens wins when both are
            GenerationConfig(max_length=max_length)  # an integer >= 1, or refused by name
            if max_length < 2:
                raise ValueError(f"max_length={max_length} counts the start token: no room for a new one")
            max_new_tokens = max_length - 1
        out = n_best(self.model, self._parts["src_tok"], self._parts["tgt_tok"],
                     [texts] if isinstance(texts, str) else list(texts), beam, num_return_sequences,
                     compile=self.compile, max_new_tokens=max_new_tokens)
        if num_return_sequences > 1:
            return out[0] if isinstance(texts, str) else out
        return out[0][0] if isinstance(texts, str) else [best[0] for best in out]

    def generate(self, prompts: str | list[str], *, stop: list[str] | None = None, seed: int | None = None,
                 stream: bool = False, num_return_sequences: int | None = None, num_beams: int | None = None,
                 **options: Any) -> str | list[str] | list[list[str]] | Iterator[str]:
        """The continuation of each prompt (not the prompt), as ``aiayn generate`` prints it.

        Args:
            prompts: one prompt (its continuation is returned) or a list of them (a list is).
            options: ``generate``'s, by ``transformers``' names (:func:`aiayn.pipelines.lm.continuations`): a
                ``generation_config`` and any of its fields, over its text-generation pipeline's defaults
                (:data:`aiayn.pipelines.lm.DEFAULTS`): ``max_new_tokens`` (256), ``do_sample`` (``True``;
                ``False`` is greedy decoding), ``temperature`` (0.7), ``top_k`` (50), ``top_p``,
                ``repetition_penalty``, ``no_repeat_ngram_size``, ``min_new_tokens``; ``max_length``,
                ``length_penalty``, ``early_stopping``, ... (streaming takes the defaults' names and
                ``max_length``).
            num_return_sequences, num_beams: several texts per prompt (draws, or the best beams), and beam search;
                with ``n > 1`` each prompt gives a list of ``n`` texts.
            stop: strings that end the text (cut from it, as OpenAI's API does).
            seed: makes sampling repeatable (each prompt is seeded with it, so its text does not depend on the
                others).
            stream: yield the text of one prompt piece by piece as it is made (``prompts`` must be one; no beams).
        """
        from aiayn.pipelines.lm import continuations, stream_text

        self._need("generate")
        tok = self._parts["tok"]
        if stream:
            if not isinstance(prompts, str):
                raise ValueError("stream=True takes one prompt (a string)")
            if num_beams not in (None, 1) or num_return_sequences not in (None, 1):
                raise ValueError("stream=True makes one text: it takes no num_beams or num_return_sequences")
            return stream_text(self.model, tok, prompts, stop=stop, seed=seed, compile=self.compile, **options)
        texts = continuations(self.model, tok, [prompts] if isinstance(prompts, str) else list(prompts), stop=stop,
                              seed=seed, num_return_sequences=num_return_sequences, num_beams=num_beams,
                              compile=self.compile, **options)
        config = options.get("generation_config")
        several = (num_return_sequences or (config.num_return_sequences if config is not None else 1)) > 1
        each: list[Any] = texts if several else [t[0] for t in texts]
        return each[0] if isinstance(prompts, str) else each

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


def pipeline(source: str | os.PathLike | None = None, device: str | torch.device | None = None,
             quantize: str | None = None, weights: str | os.PathLike | None = None, *, task: str | None = None,
             model: str | os.PathLike | None = None, compile: bool = False,
             dtype: str | torch.dtype | None = None) -> Pipeline:
    """Load the model of a run folder (``aiayn train``, ``aiayn convert``) or of a Hugging Face folder or model id
    (a GPT-2 with its ``tokenizer.json``, a Marian with its SentencePiece files, a BERT) once, for many calls.

    ``pipeline("runs/dates")`` or, as ``transformers`` spells it, ``pipeline("translation", model="runs/dates")``:
    what the folder holds decides the task; a task named (first, or as ``task=``) must be the one it holds.

    Args:
        device: where the model runs (:func:`aiayn.training.device.resolve`; default: a GPU if any).
        quantize: ``"int8"`` for int8 weights on the CPU (:mod:`aiayn.layers.int8`); ``None``: as saved.
        weights: a translation run's other weights (``average.safetensors``, ``best.safetensors``).
        task: ``transformers``' task name (a key of :data:`METHODS`), checked against the folder's.
        model: the folder or model id, when the first argument names the task.
        compile: a language model or a translation model decodes over a static cache with a compiled step
            (greedy, sampling and beams; the same text, faster once compiled: :mod:`aiayn.layers.session`).
        dtype: the weights' dtype (``"bfloat16"``, ``"float16"``, ``"float32"``; default as saved), for a
            language model or a translation model (:func:`aiayn.pipelines.loading.to_dtype`): on a GPU half
            precision runs flash attention; on a CPU it pays only where the CPU has bfloat16 units.

    Raises:
        FileNotFoundError: ``source`` holds no model.
        ValueError: a bad ``device`` or ``quantize``; a model no pipeline runs; a task it does not do.
    """
    if model is not None:
        if task is not None and source is not None:
            raise ValueError("name the task once: pipeline(task, model=...) or pipeline(model, task=...)")
        task, source = str(source) if source is not None else task, model
    if source is None:
        raise ValueError("pipeline needs a model: pipeline(folder) or pipeline(task, model=folder)")
    if task is not None and task not in METHODS:
        raise ValueError(f"task must be one of {sorted(METHODS)}, got {task!r}")
    if task is None and str(source) in METHODS:
        raise ValueError(f"{str(source)!r} is a task: name the model too, pipeline({str(source)!r}, model=...)")
    p = _load(source, device, quantize, weights)
    if task is not None and task != p.task:
        raise ValueError(f"task={task!r}, but {p.source} holds a {type(p.model).__name__}, a {p.task} model")
    from aiayn.pipelines.loading import DTYPE_TASKS, to_dtype

    if dtype is not None and p.task not in DTYPE_TASKS:
        raise ValueError(f"dtype={dtype!r} is for {' and '.join(DTYPE_TASKS)} models; {p.source} holds a {p.task} "
                         f"model, which runs as saved")
    to_dtype(p.model, dtype, quantize)
    return Pipeline(p.task, p.model, p.source, compile=True, **p.parts) if compile else p


def _load(source: str | os.PathLike, device: str | torch.device | None, quantize: str | None,
          weights: str | os.PathLike | None) -> Pipeline:
    from aiayn.models.checkpoint import saved_config
    from aiayn.pipelines.detect import load_detector
    from aiayn.pipelines.embed import load_bert
    from aiayn.pipelines.lm import load_lm_run
    from aiayn.pipelines.loading import check_tokenizer, load_model, special_ids
    from aiayn.pipelines.translation import load_run

    folder = Path(source)
    if not folder.exists():  # a Hugging Face model id, fetched into (or read offline from) its cache
        from aiayn.convert import hf_folder

        folder = hf_folder(source)
    run_on: dict[str, Any] = {"device": device, "quantize": quantize}
    if weights is not None and not (folder / "src_tokenizer.json").is_file():
        raise ValueError("weights= is for translation runs")
    if (folder / "src_tokenizer.json").is_file():
        model, src_tok, tgt_tok = load_run(folder, weights, **run_on)
        return Pipeline("translation", model, folder, src_tok=src_tok, tgt_tok=tgt_tok)
    if (folder / "config.json").is_file():
        return _hf_pipeline(folder, run_on)
    family = family_of(saved_config(folder))
    if family.inputs == "text" and (folder / "classes.json").is_file():  # a textclass run (a BERT's, a GPT's)
        from aiayn.pipelines.textclass import load_classifier, text_length

        model, tok, classes = load_classifier(folder, **run_on)
        return Pipeline("text-classification", model, folder, tok=tok, classes=classes,
                        max_len=text_length(folder, model))
    if family.task == "generate":
        model, tok = load_lm_run(folder, **run_on)
        return Pipeline("text-generation", model, folder, tok=tok)
    if family.task == "embed":
        model, tok, max_len = load_bert(folder, **run_on)
        return Pipeline("feature-extraction", model, folder, tok=tok, max_len=max_len)
    if family.task == "translate":  # a denoising run: a BART with one tokenizer for both sides
        from aiayn.data import load_tokenizer

        one = load_tokenizer(folder / "tokenizer.json")
        model = load_model(folder, device, quantize)
        cfg = cast(Any, model).cfg
        check_tokenizer(one, folder / "tokenizer.json", cfg.tgt_vocab_size, special_ids(cfg),
                        exact=(folder / "args.json").is_file())
        return Pipeline("translation", model, folder, src_tok=one, tgt_tok=one)
    if family.task == "classify":  # an image classifier
        return Pipeline("image-classification", load_model(folder, device, quantize), folder)
    detector = load_detector(folder, **run_on)
    return Pipeline("object-detection", detector[0], folder, detector=detector)


def _hf_pipeline(folder: Path, run_on: dict[str, Any]) -> Pipeline:
    """A Hugging Face folder's pipeline: a GPT-2 or Llama (with ``tokenizer.json``) generates, a Marian (with its
    SentencePiece files) translates, a BERT embeds; converted in memory, as ``aiayn convert`` would."""
    from aiayn.pipelines.embed import load_bert
    from aiayn.pipelines.loading import ready

    task = _hf_task(folder)
    if task == "generate" and (folder / "tokenizer.json").is_file():
        from aiayn.data import load_tokenizer

        model = ready(from_hf(folder), **run_on)
        return Pipeline("text-generation", model, folder, tok=load_tokenizer(folder / "tokenizer.json"))
    if task == "translate" and (folder / "source.spm").is_file():  # a Marian's SentencePiece files
        from aiayn.data.sentencepiece import marian_tokenizers

        src_tok, tgt_tok = marian_tokenizers(folder)
        return Pipeline("translation", ready(from_hf(folder), **run_on), folder, src_tok=src_tok,
                        tgt_tok=tgt_tok)
    model, tok, max_len = load_bert(folder, **run_on)  # anything else: refused unless a BERT
    return Pipeline("feature-extraction", model, folder, tok=tok, max_len=max_len)


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
    from aiayn.models.checkpoint import saved_config
    from aiayn.pipelines.embed import text_tokenizer

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
        return _callable("embed", {"tok": text_tokenizer(folder)}, folder)
    cfg = saved_config(folder)
    family = family_of(cfg)
    if family.inputs == "text" and (folder / "classes.json").is_file():
        from aiayn.pipelines.textclass import load_text_tokenizer

        return _callable("classify", {"tok": load_text_tokenizer(folder / "tokenizer.json"), "classes": []},
                         folder, cfg)
    if family.task == "generate":
        return _callable("generate", {"tok": load_tokenizer(folder / "tokenizer.json")}, folder, cfg)
    if family.task == "embed":
        return _callable("embed", {"tok": text_tokenizer(folder)}, folder, cfg)
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
    from aiayn.data.xlnet_tokenizer import XLNetTokenizer

    longest = getattr(cfg, "max_len", None)
    if task == "translate":
        return CallableTokenizer(parts["src_tok"], "eos", decoder=parts["tgt_tok"], max_length=longest)
    if task == "generate":
        return CallableTokenizer(parts["tok"], "none", padding_side="left", max_length=longest)
    if "tok" in parts:  # a BERT, or a GPT classifier
        bert = isinstance(parts["tok"], (WordPieceTokenizer, XLNetTokenizer))
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

    from aiayn.pipelines.lm import reach

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    if top_k < 1 or (sentences is not None and sentences < 1):
        raise ValueError(f"top_k and sentences must be >= 1, got top_k={top_k}, sentences={sentences}")
    p = source if isinstance(source, Pipeline) else pipeline(source)
    if p.task != "text-generation":
        raise ValueError(f"source: {p.source} holds a {type(p.model).__name__}, a {p.task} model; a TL;DR "
                         f"summary needs a language model")
    prompt = text.rstrip() + TLDR
    room = reach(p.model) - len(p.parts["tok"].encode(prompt))  # fewer drawn where less fits
    out = cast(str, p.generate(prompt, max_new_tokens=max(1, min(max_new_tokens, room)), temperature=1.0,
                               top_k=top_k, seed=seed))
    if sentences is not None:
        out = "".join(re.split(r"(?<=[.!?])(?=\s)", out)[:sentences])
    return out.strip()


__all__ = ["METHODS", "TLDR", "Pipeline", "pipeline", "tldr", "tokenizer"]
