"""``from_pretrained`` / ``save_pretrained`` on every model class, the two calls a ``transformers`` user types first.

    model = GPT.from_pretrained("runs/lm-dates")     # an aiayn run folder (or its .safetensors file)
    model = GPT.from_pretrained("path/to/hf/gpt2")   # a Hugging Face folder, through aiayn.from_hf
    model = GPT.from_pretrained("gpt2")              # a model id, read from the Hugging Face cache
    model.save_pretrained("out")                     # a Hugging Face folder (aiayn.convert.to_hf.to_hf)
    model.save_pretrained("out", format="aiayn")     # our own model.safetensors with its config (aiayn.save)

They are doors into what exists (:func:`aiayn.load`, :func:`aiayn.from_hf`, :func:`aiayn.save`,
:func:`aiayn.convert.to_hf.to_hf`), mixed into each model class in one line, with the keyword call, ``config`` and
``device`` (:class:`~aiayn.models.outputs.OutputsMixin`). Saved models are read and written here in ``models``
(:mod:`aiayn.models.checkpoint`). The model code still never imports conversion code: these methods import it when
they are called (:func:`_convert`), as :class:`GenerationMixin`'s ``generate`` imports decoding: the two doors from
``models`` up.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from aiayn.models.outputs import OutputsMixin

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from aiayn.decoding.generate import GenerateOutput

ModelT = TypeVar("ModelT", bound="PretrainedMixin")
FORMATS = ("hf", "aiayn")


class PretrainedMixin(OutputsMixin):
    """``from_pretrained`` and ``save_pretrained`` for a model class of ours (an ``nn.Module`` with a ``cfg``), and
    what :class:`~aiayn.models.outputs.OutputsMixin` adds."""

    @classmethod
    def from_pretrained(cls: type[ModelT], source: str | os.PathLike, revision: str | None = None,
                        device: str | torch.device | None = None) -> ModelT:
        """The model saved at ``source``, which must be one of this class, in evaluation mode.

        Args:
            source: an aiayn run folder or checkpoint file (``model.safetensors`` holding its config, as
                :func:`aiayn.save` and the recipes write it); a Hugging Face folder (``config.json`` and weights),
                converted by :func:`aiayn.from_hf`; or a Hugging Face model id (``"gpt2"``, ``"org/name"``), read
                from the Hugging Face cache (:func:`aiayn.convert.hf_folder`: fetched first where the hub can
                be reached).
            revision: a branch, tag or commit of a model id.
            device: where the model goes (default: the CPU).

        Returns:
            An instance of this class (``GPT.from_pretrained`` gives a ``GPT``), in ``eval()`` mode, as
            ``transformers``' ``from_pretrained`` returns it.

        Raises:
            FileNotFoundError: ``source`` is a folder holding neither ``config.json`` nor ``model.safetensors``,
                or a model id that is not in the cache and cannot be fetched.
            ValueError: ``source`` holds a model of another class (the message names ``source``, what it holds
                and the class asked for); a ``model_type`` we do not convert; weights that do not fit the config.
        """
        convert = _convert()
        path = Path(source)
        if not path.exists():  # not a file or folder here: a model id
            path = convert.hf_folder(source, revision)
        elif revision is not None:
            raise ValueError(f"revision={revision!r} names a version of a hub model, but {source} is a local path")
        if path.is_dir() and (path / "config.json").is_file():
            model = convert.from_hf(path)
            held = f"a Hugging Face {_model_type(path)!r} model, which converts to our {type(model).__name__}"
        else:
            model = _load_run(path, cls)
            held = f"an aiayn {type(model).__name__}"
        if not isinstance(model, cls):
            raise ValueError(f"{source} holds {held}, not a {cls.__name__}; load it with "
                             f"{type(model).__name__}.from_pretrained or aiayn.load")
        if device is not None:
            cast("nn.Module", model).to(device)
        cast("nn.Module", model).eval()
        return model

    def save_pretrained(self, folder: str | os.PathLike, format: str = "hf") -> Path:
        """Write this model into ``folder``.

        Args:
            folder: created if missing; the files written replace theirs atomically (each whole, old or new).
            format: ``"hf"``: a Hugging Face folder (``config.json`` + ``model.safetensors``) that
                ``transformers``' ``AutoModel...from_pretrained`` and :meth:`from_pretrained` open
                (:func:`aiayn.convert.to_hf.to_hf`); ``"aiayn"``: our own ``model.safetensors`` with the config
                in it (:func:`aiayn.save`), which keeps any config, also one Hugging Face cannot express.

        Returns:
            ``folder``.

        Raises:
            ValueError: an unknown ``format``; with ``"hf"``, a config Hugging Face cannot express (the message
                names the field and its value; ``format="aiayn"`` saves such a model).
        """
        if format not in FORMATS:
            raise ValueError(f"format={format!r}: expected one of {FORMATS}")
        model = cast("nn.Module", self)
        if format == "aiayn":
            from aiayn.models.checkpoint import save

            save(model, Path(folder) / "model.safetensors")
            return Path(folder)
        run = getattr(model, "run_folder", None)  # loaded from a run: its tokenizer goes beside the weights
        return _convert().to_hf.to_hf(model, folder) if run is None else _convert().folder.run_to_hf(model, run, folder)


class AutoModel:
    """``transformers``' ``AutoModel``: :meth:`from_pretrained` gives the model of whatever family ``source`` holds
    (the run's saved config, or the Hugging Face config's ``model_type``), beside the per-family classes
    (``GPT.from_pretrained``), which refuse another family's folder."""

    def __init__(self) -> None:
        raise TypeError("AutoModel is not built: use AutoModel.from_pretrained(path_or_id), or aiayn.build(preset)")

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, revision: str | None = None,
                        device: str | torch.device | None = None) -> Any:
        """The model saved at ``source``, of its own family, in evaluation mode: as
        :meth:`PretrainedMixin.from_pretrained` takes ``source``, ``revision`` and ``device``."""
        return PretrainedMixin.from_pretrained(source, revision, device)  # PretrainedMixin: any family


class GenerationMixin:
    """``generate`` for the model classes that decode (as ``transformers``' models inherit ``GenerationMixin``)."""

    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                 **kwargs: Any) -> Tensor | GenerateOutput:
        """Decode as ``transformers``' ``generate`` does, with its argument names (``max_new_tokens``,
        ``do_sample``, ``num_beams``, ``top_p``, ``generation_config``, ...):
        :func:`aiayn.decoding.generate.generate`."""
        from aiayn.decoding.generate import generate  # decoding builds on the models, so imported when called

        return generate(cast("nn.Module", self), input_ids, attention_mask, **kwargs)


def _convert() -> ModuleType:
    """:mod:`aiayn.convert` (with :mod:`aiayn.convert.folder` and the :mod:`aiayn.convert.to_hf` it reads), which
    builds on the models: imported when called."""
    import aiayn.convert.folder  # the package, its folder module and the to_hf module that imports

    return aiayn.convert


def _load_run(path: Path, asked: type) -> Any:
    """The aiayn model saved at ``path`` (a run folder or a ``.safetensors`` file), refused before its weights
    are read when its stored config is of another family than the class ``asked``."""
    from aiayn.models.checkpoint import load, saved_config, weights_path
    from aiayn.models.registry import FAMILIES

    if path.is_dir() and not weights_path(path).is_file():
        raise FileNotFoundError(f"{path} holds neither config.json (a Hugging Face folder) nor model.safetensors "
                                f"(an aiayn run)")
    config_type = type(saved_config(path))
    held = next(family.model for family in FAMILIES.values() if family.config is config_type)
    if not issubclass(held, asked):
        raise ValueError(f"{path} holds an aiayn {held.__name__}, not a {asked.__name__}; load it with "
                         f"{held.__name__}.from_pretrained or aiayn.load")
    return load(path)


def _model_type(folder: Path) -> str | None:
    """The ``model_type`` the Hugging Face folder's ``config.json`` names (for a message)."""
    from aiayn.io import read_json

    return read_json(folder / "config.json", "a Hugging Face config").get("model_type")


__all__ = ["FORMATS", "AutoModel", "GenerationMixin", "PretrainedMixin"]
