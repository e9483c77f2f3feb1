"""llama.cpp running our Llama's weights (through ``llama-cpp-python``), the peer of the ``-llamacpp`` cases.

llama.cpp reads GGUF files, which its own converter (``convert_hf_to_gguf.py``, in llama.cpp's source tree) makes
from a Hugging Face folder that holds a tokenizer. Ours is exported with :func:`aiayn.convert.to_hf.to_hf`, and a
Llama-style tokenizer naming every id (:func:`write_tokenizer`: byte fallback, the pieces ``▁t<id>``) goes beside
it; the converter then writes float32 or its 8-bit ``q8_0`` (blocks of 32 weights, an fp16 scale each: 34 bytes
per 32 weights):

    ours --to_hf--> folder + tokenizer.json --convert_hf_to_gguf.py --outtype f32 | q8_0--> model.gguf
         --> llama_cpp.Llama (CPU, n_threads = torch's) --> greedy ids

``llama-cpp-python`` builds llama.cpp from source with the machine's native instructions (about ten minutes on
two cores) and its wheel holds no converter, so both come from one source release: ``benchmarks/llamacpp.sh``
downloads it, builds it into the environment and prints the ``LLAMA_CPP_DIR`` (its ``vendor/llama.cpp``) to
export. Without either, the cases raise :class:`~aiayn.benchmark.harness.Unavailable` and ``aiayn bench`` skips
them, saying why.

Shapes: B batch, T prompt length, N new tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aiayn.benchmark.harness import Unavailable

OUTTYPES = ("f32", "q8_0")  # the converter's --outtype: float32, or 8-bit blocks (34 bytes per 32 weights)
Q8_0_BYTES_PER_WEIGHT = 34 / 32
HOW = "run benchmarks/llamacpp.sh (builds llama-cpp-python, about ten minutes) and export the LLAMA_CPP_DIR it prints"


def require() -> Any:
    """The ``llama_cpp`` module.

    Raises:
        Unavailable: it is not installed (the message says how to install it).
    """
    try:
        import llama_cpp
    except ImportError as e:
        raise Unavailable(f"needs llama-cpp-python: {HOW}") from e
    return llama_cpp


def converter() -> Path:
    """llama.cpp's ``convert_hf_to_gguf.py`` in the source tree ``$LLAMA_CPP_DIR``.

    Raises:
        Unavailable: ``LLAMA_CPP_DIR`` is unset or holds no converter.
    """
    where = os.environ.get("LLAMA_CPP_DIR")
    script = Path(where or ".") / "convert_hf_to_gguf.py"
    if not where or not script.is_file():
        raise Unavailable(f"needs llama.cpp's converter: LLAMA_CPP_DIR={where or '(unset)'} holds no "
                          f"convert_hf_to_gguf.py; {HOW}")
    return script


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A Llama-style tokenizer of ``vocab_size`` ids into ``folder`` (``tokenizer.json``, ``tokenizer_config.json``):
    ``<unk> <s> </s>``, the 256 byte pieces ``<0x00>`` .. ``<0xFF>`` (where they fit), then ``▁t<id>`` for every
    other id. The benchmark feeds and reads ids, never text; the converter only needs every id named, as a Llama
    tokenizer names them (a BPE with byte fallback)."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if vocab_size < len(vocab):
        raise ValueError(f"vocab_size={vocab_size}: a Llama tokenizer names at least {len(vocab)} ids")
    if vocab_size >= len(vocab) + 256:
        vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    vocab.update({f"\u2581t{i}": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def to_gguf(model: nn.Module, folder: Path, outtype: str) -> Path:
    """``model`` (ours, a Llama) as ``folder/model-<outtype>.gguf``, written by llama.cpp's own converter from
    the :func:`~aiayn.convert.to_hf.to_hf` folder."""
    from aiayn.convert.to_hf import to_hf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype={outtype!r} must be one of {OUTTYPES}")
    script = converter()
    hf = folder / "hf"
    if not (hf / "config.json").is_file():
        to_hf(model, hf)
        write_tokenizer(hf, model.cfg.vocab_size)  # type: ignore[union-attr, arg-type]  # a GPT's config
    out = folder / f"model-{outtype}.gguf"
    done = subprocess.run([sys.executable, str(script), str(hf), "--outfile", str(out), "--outtype", outtype],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed ({script}):\n{done.stderr[-2000:]}")
    return out


class Generator:
    """A GGUF model in ``llama_cpp.Llama`` (the CPU, ``threads`` threads, a context of ``context`` positions)
    decoding greedily from token ids."""

    def __init__(self, path: Path, threads: int, context: int) -> None:
        llama_cpp = require()
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=context, n_batch=context, n_threads=threads,
                                   n_threads_batch=threads, n_gpu_layers=0, verbose=False)

    def generate(self, prompt: torch.Tensor, new: int) -> torch.Tensor:
        """The ``new`` greedy ids ``(1, N)`` after ``prompt`` ``(1, T)``: the prompt evaluated afresh every call
        (``reset``: nothing of an earlier call's cache reused), no end token, no penalty."""
        if prompt.size(0) != 1:
            raise ValueError(f"llama.cpp decodes one sequence here; got a batch of {prompt.size(0)}")
        self.llm.reset()
        out: list[int] = []
        for token in self.llm.generate(prompt[0].tolist(), top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                       repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if len(out) == new:
                break
        return torch.tensor([out])


def version() -> str:
    return str(require().__version__)


__all__ = ["OUTTYPES", "Q8_0_BYTES_PER_WEIGHT", "Generator", "converter", "require", "to_gguf", "version",
           "write_tokenizer"]
