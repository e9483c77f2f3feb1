"""Which kernel computes a CPU product fastest, chosen by measuring on the machine that runs it.

A matrix product ``x W^T + b`` has three ways to be computed on a CPU here (:mod:`aiayn.layers.fast`): ``F.linear``
(the BLAS's product: MKL's or OpenBLAS's), the swapped product ``(W x^T)^T`` (:func:`~aiayn.layers.fast.
linear_few_rows`) and oneDNN's inner product (:func:`~aiayn.layers.fast.linear_onednn`). Which one wins depends on
the CPU (AVX2 or AVX-512, Intel or AMD), the number of rows, the matrix and the threads: a choice tuned on one
machine lost 2.3x on another. So each product's kernel is chosen by timing the candidates the first time a shape
is seen (fresh random operands of that shape: rows rounded to a bucket of 1, 2-3, 4-15, 16-255 or 256+), and the
choice is kept in memory and in a file per CPU and torch version, read back by every later process:

    $AIAYN_CACHE_DIR (default $XDG_CACHE_HOME/aiayn, or ~/.cache/aiayn) / kernels / <cpu>-torch<version>.json
        {"1|768|50257|bias|float32|2t": "onednn", "4-15|768|2304|bias|float32|2t": "linear", ...}

How to choose, :func:`mode` (the environment variable ``AIAYN_KERNELS``, or :func:`use` in code):

    measure    (the default) time the candidates once per shape, keep the fastest
    rules      the fixed rules measured on two machines (:mod:`aiayn.layers.fast`'s, before this module)
    linear, swapped, onednn     force one kernel wherever it applies (F.linear where it does not)

Only products worth timing are measured (a matrix of at least :data:`MEASURE_MIN` weights, float32, no gradient,
on the CPU, outside ``torch.compile``'s tracing); the rest keep the rules. A compiled decode step reads the choices
made before it is traced: :func:`prepare` times every ``Linear`` of a model for the rows it will step with.
Each candidate computes the same product, to float rounding (``tests/layers/test_kernels.py``).

Shapes: N rows (every leading dimension of ``x`` together), K in, O out.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import fast

MODES = ("measure", "rules", "linear", "swapped", "onednn")
MEASURE_MIN = 1 << 16  # weights: smaller products are cheap whichever kernel runs them, and too quick to time well
ROUNDS = 5  # timings of each candidate, interleaved; the median is compared
BUCKETS = ((1, "1"), (3, "2-3"), (15, "4-15"), (255, "16-255"))  # (most rows, name); more: "256+"
ROWS = {"1": 1, "2-3": 2, "4-15": 8, "16-255": 64, "256+": 512}  # the rows a bucket is timed with

_forced: str | None = None  # use()'s choice, over the environment's
_table: dict[str, str] | None = None  # the choices, read from the file at the first need
_lock = threading.Lock()


def mode() -> str:
    """How kernels are chosen now: :func:`use`'s, else ``AIAYN_KERNELS``, else ``"measure"``.

    Raises:
        ValueError: ``AIAYN_KERNELS`` names no mode of :data:`MODES`.
    """
    chosen = _forced or os.environ.get("AIAYN_KERNELS", "measure")
    if chosen not in MODES:
        raise ValueError(f"AIAYN_KERNELS={chosen!r}: expected one of {', '.join(MODES)}")
    return chosen


def use(how: str | None) -> None:
    """Choose kernels ``how`` (one of :data:`MODES`) in this process; ``None`` goes back to ``AIAYN_KERNELS``."""
    global _forced
    if how is not None and how not in MODES:
        raise ValueError(f"use({how!r}): expected one of {', '.join(MODES)}")
    _forced = how


def cache_file() -> Path:
    """Where this CPU's and torch version's choices are kept."""
    root = os.environ.get("AIAYN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "aiayn")
    cpu = f"{_cpu_name()}|{torch.backends.cpu.get_cpu_capability()}"
    tag = hashlib.sha1(cpu.encode()).hexdigest()[:12]
    return Path(root) / "kernels" / f"{tag}-torch{torch.__version__.replace('+', '_')}.json"


def _cpu_name() -> str:
    import platform

    return fast.cpuinfo("model name") or platform.processor() or platform.machine()


def bucket(rows: int) -> str:
    return next((name for most, name in BUCKETS if rows <= most), "256+")


def key(rows: int, weight: Tensor, bias: Tensor | None) -> str:
    o, k = weight.shape
    return (f"{bucket(rows)}|{k}|{o}|{'bias' if bias is not None else 'nobias'}|{str(weight.dtype)[6:]}|"
            f"{torch.get_num_threads()}t")


def rules(x: Tensor, weight: Tensor, bias: Tensor | None) -> str:
    """The fixed rules' kernel (:mod:`aiayn.layers.fast`): oneDNN where it suits, the swapped product for few rows on
    AVX2, else ``F.linear``."""
    if fast.onednn_suits(x, weight, bias):
        return "onednn"
    if fast.linear_suits(x, weight):
        return "swapped"
    return "linear"


def applies(name: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """Whether kernel ``name`` can compute this product (each has its own conditions: oneDNN's op has no backward
    and takes float32; the swapped product takes few rows, outside a trace)."""
    if name == "linear":
        return True
    cpu = x.device.type == "cpu" and x.dtype == weight.dtype
    if name == "swapped":
        return cpu and 0 < fast._rows(x) <= fast.FEW_ROWS and not fast._compiling()
    return (cpu and fast._ONEDNN and x.dtype == torch.float32 and not fast.needs_grad(x, weight, bias)
            and not torch.is_autocast_enabled("cpu"))


def choose(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> str:
    """The kernel that computes ``x W^T + b``: ``"linear"``, ``"swapped"`` or ``"onednn"`` (see the module
    docstring for how)."""
    how = mode()
    if how == "rules":
        return rules(x, weight, bias)
    if how != "measure":
        return how if applies(how, x, weight, bias) else "linear"
    if (x.device.type != "cpu" or weight.dtype != torch.float32 or weight.numel() < MEASURE_MIN
            or fast.needs_grad(x, weight, bias)):
        return rules(x, weight, bias)
    rows = fast._rows(x)
    found = table().get(key(rows, weight, bias))
    if found is None:
        if fast._compiling():  # no timing inside a trace: prepare() times a compiled step's products first
            return rules(x, weight, bias)
        found = measure(rows, weight, bias)
    return found if applies(found, x, weight, bias) else rules(x, weight, bias)


def table() -> dict[str, str]:
    """The choices made on this machine so far (read from :func:`cache_file` once)."""
    global _table
    if _table is None:
        path = cache_file()
        try:
            read = json.loads(path.read_text())
            _table = {k: v for k, v in read.items() if v in CANDIDATES} if isinstance(read, dict) else {}
        except (OSError, ValueError):
            _table = {}
    return _table


def forget() -> None:
    """Drop the choices held in memory (the file is read again at the next need)."""
    global _table
    _table = None


CANDIDATES: dict[str, Callable[[Tensor, Tensor, Tensor | None], Tensor]] = {
    "linear": F.linear, "swapped": fast.linear_few_rows, "onednn": fast.linear_onednn}


def timings(rows: int, weight: Tensor, bias: Tensor | None) -> dict[str, float]:
    """Seconds per call of each candidate that applies, on random rows ``(rows, K)`` and ``weight``'s shape (the
    median of :data:`ROUNDS` rounds, the candidates interleaved in each)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(bucket_rows(rows), weight.size(1), generator=gen)
    w = torch.randn(weight.shape, generator=gen) / weight.size(1) ** 0.5  # a copy: the model's may be a view
    b = None if bias is None else torch.randn(bias.shape, generator=gen)
    with torch.no_grad():
        names = [n for n in CANDIDATES if applies(n, x, w, b)]
        calls = max(1, min(20, int(2e8 // max(1, 2 * x.size(0) * w.numel()))))  # about 0.1 s a candidate at most
        seen: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            CANDIDATES[n](x, w, b)  # warm: first-call costs (oneDNN's primitive, pages)
        for _ in range(ROUNDS):
            for n in names:
                start = time.perf_counter()
                for _ in range(calls):
                    CANDIDATES[n](x, w, b)
                seen[n].append((time.perf_counter() - start) / calls)
    return {n: statistics.median(t) for n, t in seen.items()}


def bucket_rows(rows: int) -> int:
    """The rows a product of ``rows`` rows is timed with: its bucket's."""
    return ROWS[bucket(rows)]


def measure(rows: int, weight: Tensor, bias: Tensor | None) -> str:
    """Time the candidates for this shape (:func:`timings`), keep the fastest in memory and in the file."""
    times = timings(rows, weight, bias)
    best = min(times, key=times.__getitem__)
    with _lock:
        table()[key(rows, weight, bias)] = best
        _save()
    return best


def _save() -> None:
    """The table into :func:`cache_file`, atomically (a crash leaves the old file or the new one); a cache folder
    that cannot be written is not an error (the choices stay in memory)."""
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(sorted(table().items())), indent=0) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def prepare(model: nn.Module, rows: int) -> dict[str, str]:
    """Measure, before a compiled step is traced, the kernel of every ``Linear`` of ``model`` for products of
    ``rows`` rows (a decode step's batch); returns the choices by key. Nothing is timed unless :func:`mode` is
    ``"measure"``."""
    if mode() != "measure":
        return {}
    made = {}
    for module in model.modules():
        weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
        if not isinstance(module, nn.Linear) or not isinstance(weight, Tensor) or weight.device.type != "cpu":
            continue
        if weight.dtype != torch.float32 or weight.numel() < MEASURE_MIN:
            continue
        k = key(rows, weight, bias)
        made[k] = table().get(k) or measure(rows, weight, bias)
    return made


__all__ = ["CANDIDATES", "MEASURE_MIN", "MODES", "applies", "bucket", "cache_file", "choose", "forget", "key",
           "measure", "mode", "prepare", "rules", "table", "timings", "use"]
