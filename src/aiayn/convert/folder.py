"""Hugging Face model folders <-> aiayn run folders.

:func:`convert`: a Hugging Face folder (or model id) -> a run folder that ``aiayn generate`` (GPT-2) or
``aiayn translate`` (Marian) can use.

    FOLDER/config.json + model.safetensors (or pytorch_model.bin) [+ tokenizer.json]
      -> OUT/model.safetensors (weights + config) [+ tokenizer.json]
    FOLDER/chat_template.jinja or tokenizer_config.json's chat_template -> OUT/chat_template.jinja
    a Marian's  FOLDER/source.spm, target.spm, vocab.json [, target_vocab.json, tokenizer_config.json]
      -> OUT/source.spm, target.spm, vocab.json [, target_vocab.json]
         + src_tokenizer.json, tgt_tokenizer.json ({"type": "sentencepiece", ...}: which files, which specials)

:func:`export`: a run folder -> a Hugging Face folder (``aiayn export RUN --to hf OUT``) that
``transformers``' ``from_pretrained`` opens, or ONNX graphs with the same tokenizer files (``--to onnx``,
:func:`aiayn.convert.onnx.to_onnx`), or a CTranslate2 model made by CTranslate2's own converter from the Hugging
Face folder, written into a temporary folder first, with the same tokenizer files (``--to ctranslate2``,
:func:`aiayn.convert.ctranslate2.to_ctranslate2`; a GPT or an encoder-decoder Transformer):

    RUN/model.safetensors      -> OUT/config.json + model.safetensors   (:func:`aiayn.convert.to_hf.to_hf`)
    RUN/tokenizer.json         -> OUT/tokenizer.json + tokenizer_config.json (its special tokens; a language
                                  model's pads on the left, as batched generation wants)
                                  (lm, mlm, denoise, textclass runs; a character tokenizer is rewritten in
                                  tokenizers' own format, :meth:`aiayn.data.CharTokenizer.to_tokenizers`;
                                  another that transformers cannot read goes as aiayn_tokenizer.json)
    RUN/src_, tgt_tokenizer.json -> OUT/tokenizer.json when one joint BPE serves both sides; else both, as they are
    RUN/source.spm, target.spm, vocab.json -> the same (a converted Marian: MarianTokenizer reads them)
    RUN/classes.json           -> config.json's id2label / label2id     (textclass)
    RUN/run.json               -> OUT/README.md, a model card: data, updates, scores, how to load it
    RUN/chat_template.jinja    -> tokenizer_config.json's chat_template (a language model's; a run aiayn trained
                                  gets aiayn.data.chat.DEFAULT_CHAT_TEMPLATE, the one aiayn serve uses)

Both write into a temporary folder beside ``OUT`` and rename it into place once everything is written, so a
failure leaves nothing half-written; an ``OUT`` that already holds files is refused unless ``force=True``
(``--force``), which replaces it whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.convert import CONVERTERS, from_hf, hf_folder
from aiayn.convert.common import read_config
from aiayn.convert.to_hf import to_hf
from aiayn.data.chat import TEMPLATE_FILE, chat_template, own_template
from aiayn.io import read_json, write_json, write_text
from aiayn.models import checkpoint

if TYPE_CHECKING:
    from torch import nn

    from aiayn.data.sentencepiece import SentencePieceTokenizer

KINDS = {"hf": None, **{f"hf-{k}": k for k in CONVERTERS}}


def convert(folder: str | os.PathLike, out: str | os.PathLike, kind: str = "hf", revision: str | None = None,
            force: bool = False) -> Path:
    """Convert the Hugging Face model in ``folder`` (or the model id ``folder``) into the run folder ``out``.

    Everything is written into a temporary folder beside ``out`` and renamed to ``out`` when all of it is
    written (:func:`_new_folder`): a conversion that fails leaves nothing behind.

    Args:
        kind: ``"hf"`` takes the folder's own ``model_type``; ``"hf-gpt2"``, ``"hf-marian"`` also check it.
        revision: of a model id (:func:`aiayn.convert.hf_folder`).
        force: replace an ``out`` that already holds files (the old folder goes only once the new one is in).

    Returns:
        ``out``; with a Marian's SentencePiece files it is a translation run (``aiayn translate --run out``).

    Raises:
        ValueError: an ``out`` that holds files (without ``force``), is a file or a dangling link; a
            ``config.json`` or ``tokenizer.json`` that is not what it should be (naming it); a Marian's
            vocabulary that does not fit its model (ids beyond it, other ``</s>`` or ``<pad>``).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    folder, out = hf_folder(folder, revision), Path(out)
    _check_out(out, force, source=folder)
    model_type = read_config(folder).get("model_type")
    if KINDS[kind] is not None and model_type != KINDS[kind]:
        raise ValueError(f"{folder} holds a {model_type!r} model, not {KINDS[kind]!r} as {kind} says")
    model = from_hf(folder)
    marian = model_type == "marian" and (folder / "source.spm").is_file()
    spm = _checked_marian_tokenizers(folder, model.cfg) if marian else ()
    if (folder / "tokenizer.json").is_file():  # read before anything is written: a garbage file is refused
        _check_tokenizer(folder / "tokenizer.json")
    with _new_folder(out, force) as tmp:
        checkpoint.save(model, tmp)
        if (folder / "tokenizer.json").is_file():
            shutil.copyfile(folder / "tokenizer.json", tmp / "tokenizer.json")
        elif (folder / "vocab.txt").is_file():  # a WordPiece vocab.txt and do_lower_case, as one file
            from aiayn.data.wordpiece import bert_tokenizer

            bert_tokenizer(folder).save(tmp / "tokenizer.json")
        for kept in ("sentence_bert_config.json", "preprocessor_config.json"):  # the length limit of aiayn embed;
            if (folder / kept).is_file():  # the image normalisation of aiayn classify (pipelines.image.pixel_norm)
                shutil.copyfile(folder / kept, tmp / kept)
        for tok, name in zip(spm, ("src_tokenizer.json", "tgt_tokenizer.json")):  # as a translation run keeps them
            tok.save(tmp / name)
        if (template := _own_chat_template(folder)) is not None:  # what aiayn serve's chat lays messages out with
            write_text(tmp / TEMPLATE_FILE, template)
    return out


def _own_chat_template(folder: Path) -> str | None:
    """The chat template a Hugging Face folder holds (its ``chat_template.jinja`` or its tokenizer config's)."""
    if (folder / TEMPLATE_FILE).is_file():
        return (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    return own_template(folder)


def _check_tokenizer(path: Path) -> None:
    """Refuse, naming ``path``, a ``tokenizer.json`` that Hugging Face's ``tokenizers`` cannot read."""
    from tokenizers import Tokenizer

    read_json(path, "a tokenizer")  # not UTF-8, not JSON, not an object: named
    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own Exception type
        raise ValueError(f"{path} is not a tokenizer that Hugging Face's tokenizers reads: {e}") from e


def _check_out(out: Path, force: bool, source: Path | None = None, outside: bool = False) -> None:
    """Refuse an ``out`` that a conversion or export would write over: a folder holding files (unless
    ``force``), a file, a dangling link, the ``source`` folder read from (or a folder holding it, which
    ``force`` would delete), or with ``outside`` (an export, which must not land in the run it reads) a folder
    inside it."""
    if out.is_symlink() and not out.exists():
        raise ValueError(f"{out} is a link to {os.readlink(out)}, which does not exist; choose another folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file, not a folder; choose another folder")
    if source is not None and source.resolve().is_relative_to(out.resolve()):
        raise ValueError(f"{out} holds {source}, which is read from; choose another folder")
    if outside and source is not None and out.resolve().is_relative_to(source.resolve()):
        raise ValueError(f"{out} is inside {source}, which is read from (the run would hold its own export); "
                         f"choose a folder outside it")
    if out.is_dir() and not force and (names := sorted(p.name for p in out.iterdir())):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise ValueError(f"{out} already holds {shown}; choose another folder or pass --force to replace it")


@contextmanager
def _new_folder(out: Path, force: bool) -> Iterator[Path]:
    """A new, empty folder beside ``out`` (``.NAME.tmp-PID-XXXX``, on the same file system, so renames are
    atomic) to write into; renamed to ``out`` when the block ends without an error, removed when it raises.

    An empty ``out`` is removed first. One that holds files (``force``) is moved aside, the new folder renamed
    in, and only then the old one removed: a crash at any moment leaves the old folder or the new one whole,
    never both gone. A link to a folder is followed: the folder it leads to is the one replaced.
    """
    target = out.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    suffix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = target.with_name(f".{target.name}.tmp-{suffix}")
    tmp.mkdir()  # (not mkdtemp, whose folders are 0700: this one gets the mode any new folder gets)
    try:
        yield tmp
        _check_out(out, force)  # again: something may have been put there while this folder was written
        if target.is_dir() and not force:
            target.rmdir()  # empty, as checked; and rmdir refuses a folder that is not
        if not target.exists():
            os.replace(tmp, target)
            return
        old = target.with_name(f".{target.name}.old-{suffix}")
        os.replace(target, old)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(old, target)  # the old folder back where it was
            raise
        shutil.rmtree(old, ignore_errors=True)  # the new folder is in: an old one left behind is litter, not a failure
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _checked_marian_tokenizers(folder: Path, cfg) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """A Marian's ``(source, target)`` SentencePiece tokenizers, checked against its model's ``cfg``: ids within
    its vocabularies, the same ``</s>`` and ``<pad>``."""
    from aiayn.data.sentencepiece import marian_tokenizers

    src_tok, tgt_tok = marian_tokenizers(folder)
    for side, tok, size in (("source", src_tok, cfg.src_vocab_size), ("target", tgt_tok, cfg.tgt_vocab_size)):
        if max(tok.itos) >= size:
            raise ValueError(f"{tok.vocab_file} gives ids up to {max(tok.itos)}, beyond the model's {side} "
                             f"vocabulary of {size}")
        if (tok.eos_id, tok.pad_id) != (cfg.eos_id, cfg.pad_id):
            raise ValueError(f"{tok.vocab_file} gives {tok.specials['eos']} and {tok.specials['pad']} the ids "
                             f"{tok.eos_id} and {tok.pad_id}; the model's config {cfg.eos_id} and {cfg.pad_id}")
    return src_tok, tgt_tok


TARGETS = ("hf", "onnx", "ctranslate2")
SPM_FILES = ("source.spm", "target.spm", "vocab.json", "target_vocab.json")


def export(run: str | os.PathLike, out: str | os.PathLike, to: str = "hf", force: bool = False,
           quantization: str | None = None) -> Path:
    """Write the run folder (or checkpoint) ``run`` as a Hugging Face folder (``to="hf"``: weights, config,
    tokenizer files, a model card), as ONNX graphs (``to="onnx"``, :func:`aiayn.convert.onnx.to_onnx`) or as a
    CTranslate2 model (``to="ctranslate2"``, :func:`aiayn.convert.ctranslate2.to_ctranslate2` of the Hugging Face
    folder, which is written into a temporary folder beside ``out`` and removed after).

    Everything is written into a temporary folder beside ``out`` and renamed to ``out`` when all of it is
    written (:func:`_new_folder`): an export that fails leaves nothing behind.

    Args:
        force: replace an ``out`` that already holds files (the old folder goes only once the new one is in).
        quantization: ``to="ctranslate2"`` only: the weights' type, one of
            :data:`aiayn.convert.ctranslate2.QUANTIZATIONS` (``"int8"``, ``"float16"``, ...); ``None`` keeps
            float32.

    Raises:
        ValueError: an unknown ``to``; a ``quantization`` with another ``to`` or not one CTranslate2 takes; an
            ``out`` that holds files (without ``force``), is a file or a dangling link; a ``run.json`` or
            ``classes.json`` that is not JSON; a model whose config Hugging Face cannot express (naming the field);
            for CTranslate2, a model of a family that does not generate text (naming it), checked before anything
            is written.
        ImportError: ``to="onnx"`` or ``"ctranslate2"`` without its optional dependency (naming the extra).
    """
    if to not in TARGETS:
        raise ValueError(f"to={to!r}: expected one of {TARGETS}")
    if quantization is not None and to != "ctranslate2":
        raise ValueError(f"quantization={quantization!r} is for to='ctranslate2'; to={to!r} writes the weights as "
                         f"they are")
    run, out = Path(run), Path(out)
    folder = run.parent if run.suffix == ".safetensors" else run
    _check_out(out, force, source=folder, outside=True)
    model = checkpoint.load(run)
    if to == "ctranslate2":
        from aiayn.convert.ctranslate2 import check_convertible

        check_convertible(model, quantization)
    with _new_folder(out, force) as tmp:
        if to == "onnx":
            from aiayn.convert.onnx import to_onnx

            to_onnx(model, tmp)
            _copy_tokenizers(folder, tmp, left=_generates(model))
        elif to == "ctranslate2":
            from aiayn.convert.ctranslate2 import to_ctranslate2

            # beside the new folder (one file system; on failure _new_folder's clean-up and this one remove both)
            with tempfile.TemporaryDirectory(prefix=f"{tmp.name}.hf-", dir=tmp.parent) as hf:
                _to_hf_folder(model, folder, Path(hf))
                to_ctranslate2(hf, tmp, quantization)
        else:
            _to_hf_folder(model, folder, tmp)
    return out


def _generates(model: nn.Module) -> bool:
    """Whether ``model`` is a decoder-only language model, whose exported tokenizer pads on the left: batched
    ``generate`` appends each row's next token at the end, so every row's prompt must end there."""
    from aiayn.models import family_of

    cfg = getattr(model, "cfg", None)
    return family_of(cfg).task == "generate" and getattr(cfg, "head", "lm") == "lm"


def _to_hf_folder(model: nn.Module, folder: Path, out: Path) -> None:
    """The Hugging Face folder of ``model`` (of the run ``folder``) in ``out``: weights, config (with a text
    classifier's class names), tokenizer files and a model card."""
    to_hf(model, out)
    add_run_files(model, folder, out)


def run_to_hf(model: nn.Module, run: str | os.PathLike, out: str | os.PathLike) -> Path:
    """``model`` (loaded from the run folder ``run``, perhaps changed since) as a Hugging Face folder ``out``: its
    weights and config (:func:`aiayn.convert.to_hf.to_hf`), and the run's tokenizer files, class names and model
    card (``save_pretrained`` of a model loaded from a run)."""
    _to_hf_folder(model, Path(run), Path(out))
    return Path(out)


def add_run_files(model: nn.Module, folder: Path, out: Path) -> None:
    """Beside ``model``'s Hugging Face weights in ``out``: the run ``folder``'s tokenizer files, a text classifier's
    class names (into ``config.json``) and a model card from its ``run.json``."""
    tokenizers = _copy_tokenizers(folder, out, left=_generates(model))
    if _generates(model) and "tokenizer_config.json" in tokenizers:  # the chat template aiayn serve uses, so
        config = read_json(out / "tokenizer_config.json", "a tokenizer config")  # apply_chat_template lays out
        write_json(out / "tokenizer_config.json", {**config, "chat_template": chat_template(folder)})  # the same
    if (folder / "classes.json").is_file():  # a textclass run's class names
        classes = read_json(folder / "classes.json", "a list of class names", list)
        config = json.loads((out / "config.json").read_text())
        config["id2label"] = {str(i): c for i, c in enumerate(classes)}
        config["label2id"] = {c: i for i, c in enumerate(classes)}
        write_json(out / "config.json", config)
    info = read_json(folder / "run.json", "a run's record") if (folder / "run.json").is_file() else {}
    write_text(out / "README.md", model_card(info, json.loads((out / "config.json").read_text()), tokenizers))


def _copy_tokenizers(folder: Path, out: Path, left: bool = False) -> list[str]:
    """Copy what the run's tokenizers are into ``out``; the names written.

    Args:
        left: the tokenizer pads on the left (``padding_side`` in ``tokenizer_config.json``), for a language model.

    Raises:
        ValueError: naming it, a run's ``tokenizer.json`` that is not JSON, or says it is a character tokenizer
            and is not one.
    """
    written = []
    run_tokenizer = folder / "tokenizer.json"
    if run_tokenizer.is_file():
        if _is_tokenizers_json(run_tokenizer):  # copied as it is: PreTrainedTokenizerFast reads it
            shutil.copyfile(run_tokenizer, out / "tokenizer.json")
            written.append("tokenizer.json")
            if _tokenizer_config(out / "tokenizer.json", out, left=left):
                written.append("tokenizer_config.json")
        elif read_json(run_tokenizer, "a tokenizer").get("type") == "char":
            # transformers cannot read our character tokenizer's JSON: the same ids in tokenizers' format
            from aiayn.data.tokenizer import CharTokenizer

            char = CharTokenizer.load(run_tokenizer)
            write_text(out / "tokenizer.json", char.to_tokenizers().to_str(pretty=True))
            # text spelling "<s>" is three characters, as CharTokenizer.encode reads it (to_tokenizers' flag,
            # which tokenizer.json does not keep); no clean-up of spaces, which are characters like any other
            _tokenizer_config(out / "tokenizer.json", out, left=left, split_special_tokens=True,
                              clean_up_tokenization_spaces=False)
            written += ["tokenizer.json", "tokenizer_config.json"]
        else:  # another tokenizer of ours that transformers does not read: kept, under a name it does not open
            shutil.copyfile(run_tokenizer, out / "aiayn_tokenizer.json")
            written.append("aiayn_tokenizer.json")
    pair = [folder / "src_tokenizer.json", folder / "tgt_tokenizer.json"]
    if all(p.is_file() for p in pair):
        if any((folder / f).is_file() for f in SPM_FILES):  # a converted Marian: MarianTokenizer's own files
            for name in SPM_FILES:
                if (folder / name).is_file():
                    shutil.copyfile(folder / name, out / name)
                    written.append(name)
        elif pair[0].read_bytes() == pair[1].read_bytes() and _is_tokenizers_json(pair[0]):
            shutil.copyfile(pair[0], out / "tokenizer.json")  # one joint BPE: PreTrainedTokenizerFast reads it
            written.append("tokenizer.json")
            if _tokenizer_config(out / "tokenizer.json", out):
                written.append("tokenizer_config.json")
        else:
            for p in pair:
                shutil.copyfile(p, out / p.name)
                written.append(p.name)
    return written


# the special tokens of our tokenizers, by the role transformers gives them
SPECIAL_ROLES = {"[PAD]": "pad_token", "[UNK]": "unk_token", "[CLS]": "cls_token", "[SEP]": "sep_token",
                 "[MASK]": "mask_token", "<pad>": "pad_token", "<unk>": "unk_token", "<s>": "bos_token",
                 "</s>": "eos_token"}


def _tokenizer_config(path: Path, out: Path, left: bool = False, **settings: bool) -> bool:
    """Write ``tokenizer_config.json`` naming the special tokens ``tokenizer.json`` holds, so that
    ``AutoTokenizer.from_pretrained`` pads and adds them as we do; whether it was written.

    Args:
        left: ``"padding_side": "left"`` (a language model's); else transformers' default, the right.
        settings: other keys of ``tokenizer_config.json`` (``split_special_tokens=True``).
    """
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"].get("vocab", {})
    roles = {role: token for token, role in SPECIAL_ROLES.items() if token in vocab}
    if not roles:
        return False
    side = {"padding_side": "left"} if left else {}
    write_json(out / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", **roles, **side,
                                               **settings})
    return True


def _is_tokenizers_json(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face ``tokenizers`` JSON (which ``PreTrainedTokenizerFast`` reads)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(data, dict) and isinstance(data.get("model"), dict)


def model_card(info: dict, config: dict, tokenizers: list[str]) -> str:
    """A short README.md for an exported run: what it is, what it was trained on, its scores, how to load it."""
    architecture = config.get("architectures", ["AutoModel"])[0]
    scores = {k: v for k, v in info.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
              and k not in ("steps", "seconds", "final_loss")}
    lines = ["---", "library_name: transformers", "tags: [aiayn]", "---", "",
             f"# {info.get('data', 'an aiayn model')}", "",
             f"A `{architecture}` trained with [aiayn](https://pypi.org/project/aiayn/) and exported by "
             f"`aiayn export --to hf`.", ""]
    if info:
        settings = info.get("settings", {})
        lines += [f"- task: `{settings.get('recipe', '?')}`, data: `{info.get('data', '?')}`",
                  f"- updates: {info.get('steps', '?')}, training time: {info.get('seconds', '?')} s",
                  *(f"- {k}: {v:.4g}" for k, v in scores.items()), ""]
    lines += ["```python", f"from transformers import {architecture}",
              f'model = {architecture}.from_pretrained("path/to/this/folder")', "```", ""]
    if tokenizers:
        lines += [f"Tokenizer files: {', '.join(f'`{t}`' for t in tokenizers)}.", ""]
    return "\n".join(lines)
