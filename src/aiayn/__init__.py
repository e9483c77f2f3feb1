"""aiayn: "Attention Is All You Need" and the models it started, in one readable PyTorch package.

    import aiayn
    cfg = aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000)
    model = aiayn.build(cfg)
    aiayn.count_parameters(model)
    aiayn.save(model, "runs/x"); model = aiayn.load("runs/x")
    model = aiayn.from_hf(hf_model_or_folder)          # a transformers model, a folder, or a model id ("gpt2")
    aiayn.to_hf(model_or_run, "out/")                  # back: transformers' from_pretrained("out/") opens it
    p = aiayn.pipeline("runs/dates", quantize="int8"); p.translate(["..."], beam=4)   # loaded once

The names below are imported on first use (PEP 562), so ``import aiayn`` and ``aiayn --help`` do not wait for
PyTorch; ``aiayn.layers``, ``aiayn.models`` and the other subpackages import as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aiayn.version import __version__

# public name -> the module that defines it
_LAZY = {
    "build": "aiayn.models",
    "preset": "aiayn.models",
    "presets": "aiayn.models",
    "count_parameters": "aiayn.analysis",
    "save": "aiayn.models.checkpoint",
    "load": "aiayn.models.checkpoint",
    "pipeline": "aiayn.pipelines",
    "Pipeline": "aiayn.pipelines",
    "tokenizer": "aiayn.pipelines",
    "GenerationConfig": "aiayn.decoding.config",
    "AutoModel": "aiayn.models.pretrained",
}

if TYPE_CHECKING:  # what type checkers and editors see
    from aiayn.analysis import count_parameters
    from aiayn.decoding.config import GenerationConfig
    from aiayn.models import build, preset, presets
    from aiayn.models.checkpoint import load, save
    from aiayn.models.pretrained import AutoModel
    from aiayn.pipelines import Pipeline, pipeline, tokenizer


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'aiayn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def from_hf(source: Any, revision: str | None = None) -> Any:
    """An aiayn model computing what a Hugging Face model (a local folder, or a model id such as ``"gpt2"``
    fetched into the Hugging Face cache) computes; see :func:`aiayn.convert.from_hf`."""
    from aiayn.convert import from_hf as convert

    return convert(source, revision)


def to_hf(model_or_run: Any, folder: Any) -> Any:
    """Write a model (or a run folder, with its tokenizer and a model card) as a Hugging Face folder that
    ``transformers``' ``from_pretrained`` opens; see :func:`aiayn.convert.to_hf.to_hf` and
    :func:`aiayn.convert.folder.export`. Returns the folder."""
    import os

    if isinstance(model_or_run, (str, os.PathLike)):
        from aiayn.convert.folder import export

        return export(model_or_run, folder, "hf")
    from aiayn.convert.to_hf import to_hf as write

    return write(model_or_run, folder)


def embed(folder_or_run: Any, texts: list[str]) -> Any:
    """``(N, C)`` L2-normalised sentence embeddings from a BERT folder or run (:func:`aiayn.pipelines.embed.embed`)."""
    from aiayn.pipelines.embed import embed as run

    return run(folder_or_run, texts)


__all__ = ["AutoModel", "GenerationConfig", "Pipeline", "__version__", "build", "count_parameters", "embed", "from_hf",
           "load", "pipeline", "preset", "presets", "save", "to_hf", "tokenizer"]
