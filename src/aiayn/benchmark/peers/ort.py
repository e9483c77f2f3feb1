"""onnxruntime, the peer of the ``*-ort`` benchmark cases: our own model exported to ONNX (the same weights) and
decoded greedily through onnxruntime.

    ours (float32) --aiayn.convert.onnx.to_onnx--> temporary folder --> onnxruntime.InferenceSession
                   (CPU execution provider, intra_op_num_threads = torch's threads, one inter-op thread, sequential,
                   onnxruntime's default graph optimizations) --> OnnxSeq2Seq.greedy / OnnxGPT.generate

Each side decodes in a Python loop around one call per step: ours around a forward with its preallocated cache
written in place, onnxruntime's around a session run that takes the cache in and gives it back one position longer
(``past_*`` -> ``present_*``, concatenated inside the graph). The sessions hold the graphs in memory, so the folder is
gone once they are made.

onnxruntime, onnx and onnxscript are optional dependencies (``pip install "aiayn[bench]"``), imported when asked for.
"""

from __future__ import annotations

import tempfile
from typing import Any

from torch import nn

from aiayn.benchmark.harness import Unavailable

NEEDS = ("onnxruntime", "onnx", "onnxscript")


def require() -> Any:
    """The ``onnxruntime`` module, once it and the exporter's onnx and onnxscript are known to be installed.

    Raises:
        Unavailable: one of them is not (the message says how to install them).
    """
    modules = {}
    for name in NEEDS:
        try:
            modules[name] = __import__(name)
        except ImportError as e:
            raise Unavailable(f'needs {name}, an optional dependency: pip install "aiayn[bench]"') from e
    return modules["onnxruntime"]


def version() -> str:
    """The installed onnxruntime's version."""
    return str(require().__version__)


def seq2seq(model: nn.Module, threads: int | None = None) -> Any:
    """An :class:`~aiayn.convert.onnx.OnnxSeq2Seq` holding ``model``'s weights (a Transformer, BART or Marian).

    Args:
        threads: onnxruntime's threads inside an operation; default torch's.
    """
    require()
    from aiayn.convert.onnx import OnnxSeq2Seq, to_onnx

    with tempfile.TemporaryDirectory(prefix="aiayn-ort-") as folder:
        return OnnxSeq2Seq(to_onnx(model, folder), threads)


def gpt(model: nn.Module, threads: int | None = None) -> Any:
    """An :class:`~aiayn.convert.onnx.OnnxGPT` holding ``model``'s weights (a GPT).

    Args:
        threads: onnxruntime's threads inside an operation; default torch's.
    """
    require()
    from aiayn.convert.onnx import OnnxGPT, to_onnx

    with tempfile.TemporaryDirectory(prefix="aiayn-ort-") as folder:
        return OnnxGPT(to_onnx(model, folder), threads)


__all__ = ["NEEDS", "gpt", "require", "seq2seq", "version"]
