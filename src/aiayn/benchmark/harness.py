"""The benchmark harness: ours against one or more peers, side by side (in one process here; each side in a
process of its own by :mod:`aiayn.benchmark.apart`, which ``aiayn bench`` uses).

A :class:`Case` hands over *sides*, each a function of no arguments that does one unit of work (a training
step, a forward pass, a generation), ours first, with what the unit is worth (tokens, images) and the result
of its correctness check (ours and each peer must compute the same thing). :func:`measure` then

    FLOPs of one unit of ours  (FlopCounterMode)          -> model FLOPs per unit, the same for every side
    warm-up: every side, ``warmup`` units
    timing:  rounds alternate the sides, A B B A ...      (A B C, B C A, C A B with two peers)
    memory:  one profiled unit per side                   -> peak bytes allocated during the unit

and reports per side the median time, the throughput (units / median), the MFU (FLOPs / median / matmul
peak) and the peak memory; per peer the speed ratio ``t_peer / t_ours`` of every round, their median and
their interquartile range (> 1: ours is faster). Alternating puts any drift of the machine (another process,
the clock) on both sides; the ratio is taken round by round so a slow round slows both of its terms. Each round
starts one side later than the last, so each side follows each other side as often: a side whose threads spin
on after its call (onnxruntime's do, for tens of milliseconds) slows whichever side comes next, measured 12-15%
on 2 cores, and in a fixed order that was always the same side.

A target is met only when the *lower quartile* of the per-round ratios clears it (and the lower quartile of
ours' per-round MFU clears an MFU target, and ours computes what the peer computes): about three rounds in
four beat it, so a claim survives a rerun on a noisy machine, where a median that barely clears it would not.
Quartiles need rounds: :data:`MIN_ROUNDS` (7) is the least a reported figure should rest on.

The machine's ceilings are measured here too: :func:`matmul_peak` (float32 ``torch.mm`` of large squares)
and :func:`memory_bandwidth` (a large tensor copy). Peak memory is what one unit allocates on top of what was
already there (weights, optimizer state from the warm-up): ``torch.cuda.max_memory_allocated`` on a GPU, and
on the CPU the running sum of the profiler's allocation events, at its highest.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count

from aiayn.analysis.flops import KERNEL_FLOPS

CPU = torch.device("cpu")
# Every results file the harness writes carries SCHEMA; the report reads those and the older READABLE ones.
# 2: per-round quartiles (``ratio_q1``/``ratio_q3`` per peer, ``mfu_q1``/``mfu_q3`` per side) and ``met``
# decided by the lower quartile; 1 had only the per-round ratios, and ``met`` decided by their median.
SCHEMA = "aiayn-bench/2"
READABLE = ("aiayn-bench/1", SCHEMA)
# The fewest timed rounds a reported figure should rest on: with 7 the lower quartile lies between the second
# and third lowest ratios, so no single slow or fast round decides a target.
MIN_ROUNDS = 7

_CPU_SDPA_BACKWARD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of the CPU fused attention's backward, PyTorch's formula for its CUDA kernels (five matmuls)."""
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# FlopCounterMode counts the CPU attention kernel, forward and backward, as 0 out of the box (PyTorch 2.13).
KERNELS = {**KERNEL_FLOPS, **({_CPU_SDPA_BACKWARD: _sdpa_backward_flops} if _CPU_SDPA_BACKWARD is not None else {})}


class Unavailable(RuntimeError):
    """A case that cannot run here: a peer that is not installed, a device its peer does not run on. The message
    says why (and what to install); :func:`~aiayn.benchmark.run.run_bench` skips the case with it."""


@dataclass
class Side:
    """One contender: ``run()`` does one unit of work. ``torch_memory=False`` marks a side that allocates
    outside PyTorch (a C++ engine): the profiler does not see its memory, and the page reports none for it."""

    name: str
    run: Callable[[], Any]
    torch_memory: bool = True


@dataclass(frozen=True)
class Target:
    """What ours should reach: ``ratio`` (t_peer / t_ours) against every peer, and ``mfu`` if given."""

    ratio: float
    mfu: float | None = None


@dataclass
class Case:
    """A benchmark: the sides (ours first), what a unit is worth, the correctness checks and the target.

    Attributes:
        name: the case's name, also the stem of its results file.
        what: one line saying what it measures.
        sides: ours first, then the peers.
        units: tokens or images one unit of work handles (throughput = units / median seconds).
        unit: what ``units`` counts, e.g. ``"tokens"``.
        checks: per peer name, ``{"what": ..., "ok": bool, ...}``: did ours compute what the peer computes?
        target: what ours should reach, or ``None``.
        flops: FLOPs of one unit; ``None`` counts them on ours.
        extra: anything else the results file should hold (sizes, ceilings).
    """

    name: str
    what: str
    sides: list[Side]
    units: float
    unit: str
    checks: dict[str, dict[str, Any]]
    target: Target | None = None
    flops: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [s.name for s in self.sides]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"case {self.name!r}: sides need distinct names, got {names}")

    def about(self) -> dict[str, Any]:
        """What :func:`summarize` reads of the case, as JSON (a worker process hands it to the parent: the sides'
        names and memory kinds, the checks, the target, and the rest)."""
        return {"name": self.name, "what": self.what, "units": self.units, "unit": self.unit,
                "sides": [{"name": s.name, "torch_memory": s.torch_memory} for s in self.sides],
                "checks": self.checks, "extra": self.extra,
                "target": None if self.target is None else {"ratio": self.target.ratio, "mfu": self.target.mfu}}


@dataclass(frozen=True)
class Settings:
    """How to measure: ``rounds`` timed units per side (alternating) after ``warmup`` each; ``peak_flops`` for
    MFU; ``clock`` is replaceable so tests can check the arithmetic without timing anything."""

    peak_flops: float
    rounds: int = MIN_ROUNDS
    warmup: int = 1
    device: torch.device = CPU
    quick: bool = False
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds={self.rounds} must be >= 1")
        if self.warmup < 0:
            raise ValueError(f"warmup={self.warmup} must be >= 0")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device = CPU,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds ``fn()`` takes (waiting for the device to finish)."""
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def matmul_peak(n: int = 3072, repeats: int = 5, device: torch.device = CPU) -> float:
    """Float32 ``torch.mm`` FLOP/s of ``n x n`` squares, the best of ``repeats`` (after one warm-up)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    torch.mm(a, b)
    best = min(timed(lambda: torch.mm(a, b), device) for _ in range(repeats))
    return 2 * n**3 / best


def memory_bandwidth(mib: int = 512, repeats: int = 5, device: torch.device = CPU) -> float:
    """Bytes/s of copying a ``mib`` MiB float32 tensor (each byte read once and written once), best of
    ``repeats``; choose ``mib`` well above the caches."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(timed(lambda: dst.copy_(src), device) for _ in range(repeats))
    return 2 * src.numel() * src.element_size() / best


class _GlobalOnly(contextlib.nullcontext):
    """Stands in for FlopCounterMode's module tracker, so every op counts towards "Global" only. The real
    tracker hooks the gradient of each module's output, which fails under ``no_grad`` on a slice of a
    parameter (learned positions, as decoding runs them); the harness only needs the total."""

    parents = ("Global",)


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the matmuls, convolutions and attention kernels ``fn()`` runs, backward passes included."""
    counter = FlopCounterMode(display=False, custom_mapping=KERNELS)
    counter.mod_tracker = _GlobalOnly()  # type: ignore[assignment]  # a stand-in, not a ModuleTracker
    with counter:
        fn()
    return counter.get_total_flops()


@contextlib.contextmanager
def _c_stderr_quiet() -> Any:
    """Keep what C++ writes to the process's stderr (file descriptor 2) off the terminal: the profiler's kineto
    prints "USDT: ... profiler_start" lines there at every start and stop, whatever its log level. Python's
    own ``sys.stderr`` is untouched (an exception raised inside still reaches it, after)."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn: Callable[[], Any], device: torch.device = CPU) -> int:
    """Most bytes allocated at once during ``fn()``, above what was allocated before it.

    On the CPU the profiler sees only blocks allocated while it runs: a free of an older block is not
    counted, so a unit should release what it allocates (a training step drops its gradients at its end).
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with _c_stderr_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # "[memory]" events: +bytes for an allocation, -bytes for a free, in the order they happened.
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    running = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        running += e.nbytes()
        peak = max(peak, running)
    return peak


def quartiles(values: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of ``values``: ``statistics.quantiles(values, n=4, method="inclusive")``,
    i.e. linear interpolation between the order statistics with the smallest and largest value as the 0th and
    100th percentile (numpy's default); one value is both its quartiles."""
    if len(values) == 1:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def meets(target: dict[str, Any] | None, ratio_q1: float, mfu_q1: float, check_ok: bool) -> bool | None:
    """Whether ours meets ``target`` (``{"ratio", "mfu"}``) against one peer: the lower quartile of the
    per-round ratios reaches the ratio, the lower quartile of ours' per-round MFU reaches the MFU (if one is
    set), and ours computes what the peer computes. ``None`` without a target."""
    if target is None:
        return None
    mfu_ok = target.get("mfu") is None or mfu_q1 >= target["mfu"]
    return bool(ratio_q1 >= target["ratio"] and mfu_ok and check_ok)


def verdict(met: bool | None, rounds: int) -> str | None:
    """What a result says of its target: ``"met"``, ``"missed"``, ``"too few rounds to judge"`` (fewer than
    :data:`MIN_ROUNDS`: a lower quartile of so few rounds says little either way), or ``None`` without a target."""
    if met is None:
        return None
    if rounds < MIN_ROUNDS:
        return "too few rounds to judge"
    return "met" if met else "missed"


def measure(case: Case, settings: Settings) -> dict[str, Any]:
    """Time, count and profile every side of ``case`` (see the module docstring).

    Returns:
        ``{"case", "what", "unit", "units", "flops", "rounds", "sides": {name: {"seconds", "median_s",
        "throughput", "mfu", "mfu_q1", "mfu_q3", "peak_memory_bytes", "torch_memory"}}, "peers": {name: {"ratios",
        "ratio", "ratio_q1", "ratio_q3", "check", "met"}}, "target", "extra"}``. ``ratio`` is the median of the
        per-round ratios ``ratios`` and ``ratio_q1``/``ratio_q3`` their quartiles (:func:`quartiles`); ``mfu`` is at
        the median time and ``mfu_q1``/``mfu_q3`` are the quartiles of the per-round MFU. ``met`` is ``None``
        without a target, else :func:`meets`: decided by the lower quartiles, not the medians. A side with
        ``torch_memory`` false has its ``peak_memory_bytes`` measured all the same, but they count only what
        PyTorch allocated for it (the tensor it hands back), not its own.
    """
    device, ours = settings.device, case.sides[0]
    flops = case.flops if case.flops is not None else count_flops(ours.run)
    for side in case.sides:
        for _ in range(settings.warmup):
            side.run()
    seconds: dict[str, list[float]] = {s.name: [] for s in case.sides}
    n = len(case.sides)
    for r in range(settings.rounds):
        for side in case.sides[r % n:] + case.sides[: r % n]:  # A B, B A, ...: each side follows each other alike
            seconds[side.name].append(timed(side.run, device, settings.clock))
    memory = {s.name: peak_memory(s.run, device) for s in case.sides}
    return summarize(case.about(), flops, seconds, memory, settings)


def summarize(case: dict[str, Any], flops: float, seconds: dict[str, list[float]], memory: dict[str, int],
              settings: Settings) -> dict[str, Any]:
    """:func:`measure`'s dictionary from a case's :meth:`Case.about`, its FLOPs per unit, each side's seconds per
    round and peak memory (also what :func:`aiayn.benchmark.apart.measure_apart` measured in worker processes)."""
    names = [s["name"] for s in case["sides"]]
    ours = names[0]
    sides: dict[str, dict[str, Any]] = {}
    for s in case["sides"]:
        median = statistics.median(seconds[s["name"]])
        mfu_q1, mfu_q3 = quartiles([flops / t / settings.peak_flops for t in seconds[s["name"]]])
        sides[s["name"]] = {"seconds": seconds[s["name"]], "median_s": median, "throughput": case["units"] / median,
                            "mfu": flops / median / settings.peak_flops, "mfu_q1": mfu_q1, "mfu_q3": mfu_q3,
                            "peak_memory_bytes": memory[s["name"]], "torch_memory": s["torch_memory"]}
    target = case["target"]
    peers = {}
    for name in names[1:]:
        ratios = [peer / mine for mine, peer in zip(seconds[ours], seconds[name])]
        q1, q3 = quartiles(ratios)
        check = case["checks"].get(name, {"what": "not checked", "ok": False})
        peers[name] = {"ratios": ratios, "ratio": statistics.median(ratios), "ratio_q1": q1, "ratio_q3": q3,
                       "check": check, "met": meets(target, q1, sides[ours]["mfu_q1"], check["ok"])}
    return {"case": case["name"], "kind": "comparison", "what": case["what"], "ours": ours, "unit": case["unit"],
            "units": case["units"], "flops": flops, "rounds": settings.rounds, "warmup": settings.warmup,
            "sides": sides, "peers": peers, "target": target, "extra": case["extra"]}


VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                "amx_bf16")  # the instruction sets the kernels' speed turns on (/proc/cpuinfo's names)


def machine(device: torch.device = CPU) -> dict[str, Any]:
    """The CPU (model, cores, the vector instructions torch's kernels use: ``AVX512``, ``AVX2``, ..., and which of
    :data:`VECTOR_FLAGS` it has: AVX2, AVX-512, VNNI, AMX), the threads torch uses, the device, the library versions
    and the date."""
    cpu, flags = platform.processor() or platform.machine(), []
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    named = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    have = next((set(line.split(":", 1)[1].split()) for line in lines if line.startswith("flags")), set())
    cpu, flags = (named[0] if named else cpu), [f for f in VECTOR_FLAGS if f in have]
    try:
        import transformers

        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    return {"cpu": cpu, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu_flags": flags,
            "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "python": platform.python_version(), "torch": torch.__version__, "transformers": hf_version,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


def write_result(result: dict[str, Any], out: str | Path) -> Path:
    """``result`` as ``out/<case>.json`` (the folder is made if needed); returns the path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result['case']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, **result}, indent=2) + "\n")
    tmp.replace(path)
    return path


__all__ = [
    "CPU",
    "KERNELS",
    "MIN_ROUNDS",
    "READABLE",
    "SCHEMA",
    "Case",
    "Settings",
    "Side",
    "Target",
    "Unavailable",
    "count_flops",
    "machine",
    "matmul_peak",
    "measure",
    "meets",
    "memory_bandwidth",
    "peak_memory",
    "quartiles",
    "summarize",
    "synchronize",
    "timed",
    "verdict",
    "write_result",
]
