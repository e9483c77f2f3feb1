"""A Hugging Face model folder -> an aiayn run folder that ``aiayn generate`` (GPT-2)
or ``aiayn translate`` (Marian) can use.

    FOLDER/config.json + model.safetensors (or pytorch_model.bin) [+ tokenizer.json]
      -> OUT/model.safetensors (weights + config) [+ tokenizer.json]
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import aiayn
from aiayn.convert import CONVERTERS

KINDS = {"hf": None, **{f"hf-{k}": k for k in CONVERTERS}}


def convert(folder: str | os.PathLike, out: str | os.PathLike, kind: str = "hf") -> Path:
    """Convert the Hugging Face model in ``folder`` into the run folder ``out``.

    Args:
        kind: ``"hf"`` takes the folder's own ``model_type``; ``"hf-gpt2"``, ``"hf-marian"`` also check it.

    Returns:
        ``out``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    folder, out = Path(folder), Path(out)
    config = folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{folder} holds no config.json; expected a Hugging Face model folder")
    model_type = json.loads(config.read_text()).get("model_type")
    if KINDS[kind] is not None and model_type != KINDS[kind]:
        raise ValueError(f"{folder} holds a {model_type!r} model, not {KINDS[kind]!r} as {kind} says")
    model = aiayn.from_hf(folder)
    out.mkdir(parents=True, exist_ok=True)
    aiayn.save(model, out)
    if (folder / "tokenizer.json").is_file():
        shutil.copyfile(folder / "tokenizer.json", out / "tokenizer.json")
    return out
