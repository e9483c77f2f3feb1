"""Where decoding time goes: ours against CTranslate2, one profiled call per case (issue 22).

    python benchmarks/decode_profile.py [--threads 2]     # the six cases at full size, several minutes
    python benchmarks/decode_profile.py --quick            # toy sizes, seconds, into a temporary folder
    python benchmarks/decode_profile.py --compile          # the float32 cases compiled (issue 39)

The cases are ``aiayn bench``'s CTranslate2 cases (:mod:`aiayn.benchmark.cases` builds the models, checks them
against each other and hands over the sides): ``gpt2-generate-ct2`` (gpt2, greedy, batch 1),
``decode-greedy-ct2`` (the Marian-shaped Transformer, greedy, batch 16), ``decode-beam-ct2`` (beam 4), each at
float32 and in int8 (``-int8``: ours :func:`aiayn.layers.int8.quantize`, CTranslate2 compute type int8). Per case:

    wall time    each side's call, best of 3, alternating, no profiler
    ours         torch.profiler (CPU) around one call; each op's self time goes to the category of the op
                 Python called (``aten::linear``, and the ``aten::addmm`` inside it: matrix products), or of
                 the scope it ran in: this script opens profiler scopes around ``Int8Linear.rows`` (the fbgemm
                 product: matrix products; every other op: int8 input handling), ``fast.linear_few_rows``
                 (matrix products) and the KV cache's ``append`` and ``reorder`` (cache writes and beam
                 reordering); "Python and dispatch" is the profiled call's time outside every op
    CTranslate2  ``perf record`` sampling the process's threads, with their native stacks, during one call;
                 each sample goes to the innermost ``ctranslate2::ops::*`` frame on its stack, the ops
                 CTranslate2's own profiler times

Shares are of the profiled call; milliseconds are those shares of the unprofiled best. "Python and dispatch"
is an estimate on the high side (the profiler's own bookkeeping falls there too); the unprofiled wall time less
the ops' self time, the estimate on the low side, is in the results too, and is often below zero, as the
profiler slows the ops by more than run-to-run noise allows to tell apart.

CTranslate2's own profiler (``init_profiling``/``dump_profiling``) is in its C++ API only when built with
``-DENABLE_PROFILING=ON``; the PyPI wheels are built without it and the Python module does not expose it, so
this samples with ``perf`` instead (where ``perf`` is missing, or not allowed, the CTranslate2 profile is left
out and says why). Samples in oneDNN's JIT-compiled GEMM kernels carry no symbols and no callers, and samples in
MKL's (which CTranslate2 calls on Intel CPUs) no callers: both are counted as matrix products, though a few
belong to attention's batched products. Only the threads that run
in turn (Python's, then CTranslate2's worker) stand for wall time; OpenMP helpers that run beside the worker
are counted apart. Results go to ``<out>/decode_profile.json`` and the page ``docs/decode_profile.md``.

``--compile`` profiles the float32 cases' compiled variants (``CASE-compiled``: our decoding over a static cache,
the step compiled by ``torch.compile``) into ``decode_profile_compiled.json`` and
``docs/decode_profile_compiled.md``. Inductor is told to name its C++ kernels to the profiler
(``config.cpp.enable_kernel_profile``: the script runs itself again with it on and an inductor cache of its
own), so each fused kernel counts by the ops in its name
(:func:`kernel_category`: ``cpp_fused_add_native_layer_norm_3`` is norms and activations); the products it leaves
to a library (``aten::addmm``, ``aiayn::linear_onednn``, ``aiayn::linear_packed``) and the attention kernel count as
in the eager profile, and the compiled region's own wrappers (guards, the call of the compiled graph) as Python and
dispatch.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import os
import platform
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from aiayn.benchmark import cases
from aiayn.benchmark.harness import CPU, Case, Side, Unavailable
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.layers import fast
from aiayn.layers.int8 import Int8Linear
from aiayn.layers.kv_cache import KVCache, LayerCache

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"  # a full run writes here unless --out says
CASES = ("gpt2-generate-ct2", "gpt2-generate-ct2-int8", "decode-greedy-ct2", "decode-greedy-ct2-int8",
         "decode-beam-ct2", "decode-beam-ct2-int8")
ROUNDS = 3  # timed calls per side; the best counts
SAMPLES = 4000  # about this many perf samples a call (at most 2,000 a second): enough for shares to 1-2%
MIN_SAMPLES = 20  # fewer and CTranslate2's shares are not reported

MATMUL, ATTENTION, CACHE, SEARCH, INT8, NORMS, OTHER, PYTHON = (
    "matrix products", "attention", "cache writes and beam reordering", "search bookkeeping",
    "int8 input handling", "norms and activations", "everything else", "Python and dispatch")
CATEGORIES = (MATMUL, ATTENTION, CACHE, SEARCH, INT8, NORMS, OTHER, PYTHON)

# ours: the op called from Python -> its category (an op missing here is "everything else")
OURS = {
    **dict.fromkeys(["aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul",
                     "mkldnn::_linear_pointwise", "quantized::linear_dynamic", "aiayn::linear_onednn",
                     "aiayn::linear_packed"], MATMUL),
    **dict.fromkeys(["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"],
                    ATTENTION),
    **dict.fromkeys(["aten::index_select", "aten::index_copy", "aten::index_copy_"], CACHE),
    **dict.fromkeys(["aten::topk", "aten::sort", "aten::log_softmax", "aten::gather", "aten::cat", "aten::argmax"],
                    SEARCH),
    **dict.fromkeys(["aten::layer_norm", "aten::gelu", "aten::gelu_", "aten::relu", "aten::relu_", "aten::add",
                     "aten::add_"], NORMS),
}
# profiler scopes this script opens around functions of ours, so their ops can be told from the same ops elsewhere
INT8_SCOPE = "decode_profile:Int8Linear.rows"  # the int8 product and the handling of its input
INT8_PRODUCTS = {"quantized::linear_dynamic", "aten::addmm_", "aten::addmm"}  # in that scope: the products
FEW_ROWS_SCOPE = "decode_profile:fast.linear_few_rows"  # the swapped float product, its transposes and copy
CACHE_SCOPE = "decode_profile:kv_cache"  # KVCache.append and the caches' reorder: writes, beam reordering
SCOPES = (INT8_SCOPE, FEW_ROWS_SCOPE, CACHE_SCOPE)

# CTranslate2: the op a sample is in -> its category; the frames around it decide for the ones listed in ct2_category
CT2 = {
    **dict.fromkeys(["Gemm", "BiasAdd"], MATMUL),
    **dict.fromkeys(["MatMul"], ATTENTION),
    **dict.fromkeys(["Concat", "Gather", "Slide"], CACHE),
    **dict.fromkeys(["TopK", "LogSoftMax", "SoftMax", "ArgMax", "Multinomial", "Min", "Max"], SEARCH),
    **dict.fromkeys(["Quantize", "Dequantize"], INT8),
    **dict.fromkeys(["LayerNorm", "RMSNorm", "Add", "Mul", "ReLU", "GELU", "GELUTanh", "GELUSigmoid", "Swish",
                     "Tanh"], NORMS),
}
JIT = "GEMM kernels (oneDNN JIT code, unattributed)"
MKL = "GEMM kernels (MKL, unattributed)"  # CTranslate2's products on Intel CPUs: its stacks stop in MKL's code

# --compile: the float32 cases' compiled variants; inductor's own scopes (their self time is the wrapper's, Python
# and dispatch) and its C++ kernels, sorted by the first of these ops their names hold
COMPILED_CASES = ("gpt2-generate-ct2", "decode-greedy-ct2", "decode-beam-ct2")
KERNEL_PROFILE = "TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE"  # inductor's config.cpp.enable_kernel_profile
PROFILE_CACHE = Path(tempfile.gettempdir()) / "aiayn-decode-profile-inductor"  # compiled with kernels named
WRAPPERS = re.compile(r"^(Torch-Compiled Region|## |TorchDynamo|Pregraph bytecode|AOTDispatcher|"
                      r"CompiledFunction|autograd::engine)")
KERNEL = re.compile(r"^(graph_\d+_)?cpp_fused_")
KERNEL_OPS = ((OTHER, ("embedding",)),  # the token lookup and its scaling, as in the eager profile
              (SEARCH, ("argmax", "topk", "sort", "log_softmax")),
              (ATTENTION, ("softmax", "bmm", "scaled_dot_product")),  # with the cache write it fuses: attention
              (CACHE, ("index_put", "index_copy", "scatter")),
              (MATMUL, ("addmm", "_mm_", "mm_")),
              (NORMS, ("layer_norm", "rms", "gelu", "relu", "silu", "tanh", "add", "mul", "rsqrt", "mean", "pow")))


def kernel_category(name: str) -> str:
    """The category of inductor's C++ kernel ``name`` (``graph_0_cpp_fused_add_native_layer_norm_view_3``): the
    first category of :data:`KERNEL_OPS` one of whose ops the name holds; else everything else."""
    ops = KERNEL.sub("", name)
    return next((c for c, words in KERNEL_OPS if any(w in ops for w in words)), OTHER)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2, help="torch's threads and CTranslate2's intra_threads")
    p.add_argument("--cases", help=f"comma-separated, from {','.join(CASES)} (default: all; with --compile "
                                   f"the float32 ones, {','.join(COMPILED_CASES)})")
    p.add_argument("--compile", action="store_true",
                   help="profile each case's compiled variant (CASE-compiled) into decode_profile_compiled.json "
                        "and docs/decode_profile_compiled.md")
    p.add_argument("--docs", help="the page written (default docs/decode_profile[_compiled].md; --quick: in --out)")
    args = script_args(p, argv, {}, "decode-profile", results=RESULTS)
    stem = "decode_profile_compiled" if args.compile else "decode_profile"
    docs = Path(args.docs or (Path(args.out) / f"{stem}.md" if args.quick else ROOT / "docs" / f"{stem}.md"))
    torch.set_num_threads(args.threads)  # before the cases build CTranslate2's models: they take this count
    allowed = COMPILED_CASES if args.compile else CASES
    names = args.cases.split(",") if args.cases else list(allowed)
    for name in names:
        if name not in allowed:
            raise SystemExit(f"--cases: unknown case {name!r}{' for --compile' if args.compile else ''}; choose "
                             f"from {', '.join(allowed)}")
    if args.compile and os.environ.get(KERNEL_PROFILE) != "1":
        # inductor names its kernels to the profiler only when the variable is set as it is imported, and its
        # caches do not key on it: run again with it set and a cache of its own (never the user's)
        env = {**os.environ, KERNEL_PROFILE: "1", "TORCHINDUCTOR_CACHE_DIR": str(PROFILE_CACHE)}
        os.execve(sys.executable, [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env)

    load = os.getloadavg()
    results: dict[str, Any] = {
        "name": stem, "quick": args.quick, "threads": args.threads, "compiled": args.compile,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_average_at_start": [round(x, 2) for x in load],
        "command": "python benchmarks/decode_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__,
                    "platform": platform.platform()},
        "cases": {}}
    for name in names:
        print(f"{name}: building (and checking) the models ...", flush=True)
        try:
            case = cases.CASES[name + "-compiled" if args.compile else name](args.quick, CPU)
        except Unavailable as e:
            print(f"{name}: skipped: {e}")
            results["cases"][name] = {"skipped": str(e)}
            continue
        row = profile_case(case)
        results["cases"][name] = row
        print(summary(name, row), flush=True)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["ctranslate2"] = next((r["ctranslate2_version"] for r in results["cases"].values()
                                   if "ctranslate2_version" in r), None)
    write_results(args.out, stem, results)
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(page(results))
    print(f"wrote {docs}")


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# --- one case ------------------------------------------------------------------------------------------------

def profile_case(case: Case) -> dict[str, Any]:
    """Best-of-3 wall times of ours and CTranslate2 (alternating), then one profiled call of each."""
    ours = case.sides[0]
    ct2 = next(s for s in case.sides if s.name.startswith("ctranslate2."))
    batch, steps = case.extra.get("batch", 1), case.extra["new_tokens"]
    walls: dict[str, list[float]] = {ours.name: [], ct2.name: []}
    for side in (ours, ct2):
        side.run()  # warm-up (the case's checks ran each side once already)
    for _ in range(ROUNDS):
        for side in (ours, ct2):
            start = time.perf_counter()
            side.run()
            walls[side.name].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in walls.items()}
    return {
        "what": case.what, "precision": case.extra["precision"], "batch": batch, "beam": case.extra.get("beam", 1),
        "steps": steps, "tokens": case.units, "checks_ok": all(c["ok"] for c in case.checks.values()),
        "ctranslate2_version": case.extra.get("ctranslate2"),
        "wall_s": {"aiayn": best[ours.name], "ctranslate2": best[ct2.name]},
        "wall_s_rounds": walls,
        "ratio_ct2_over_ours": best[ct2.name] / best[ours.name],  # as the harness: > 1 ours is faster
        "ours": profile_ours(ours, best[ours.name], steps),
        "ctranslate2": profile_ct2(ct2, best[ct2.name], steps),
    }


def shares(ms: dict[str, float], wall_s: float, steps: int) -> dict[str, dict[str, float]]:
    """Milliseconds of one call per category -> ``{category: {"ms_per_step", "share"}}`` of ``wall_s``."""
    return {k: {"ms_per_step": ms.get(k, 0.0) / steps, "share": ms.get(k, 0.0) / (wall_s * 1e3)}
            for k in CATEGORIES}


# --- ours: torch.profiler -------------------------------------------------------------------------------------

@contextlib.contextmanager
def scoped(owner: Any, attribute: str, scope: str) -> Iterator[None]:
    """``owner.attribute`` (a function) runs inside the profiler scope ``scope`` until the block ends."""
    function = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with record_function(scope):
            return function(*args, **kwargs)

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        setattr(owner, attribute, function)


def ours_category(chain: list[Any]) -> str:
    """The category of the op ``chain[-1]``, given its ancestors ``chain`` (``chain[0]`` called from Python, or
    from the compiled graph's wrapper: inductor's scopes are left out of ``chain``)."""
    if KERNEL.match(chain[0].name):
        return kernel_category(chain[0].name)
    names = {e.name for e in chain}
    if INT8_SCOPE in names:  # Int8Linear.forward goes through rows, and attention calls rows itself
        return MATMUL if chain[-1].name in INT8_PRODUCTS else INT8
    if FEW_ROWS_SCOPE in names:
        return MATMUL
    if CACHE_SCOPE in names:
        return CACHE
    return OURS.get(chain[0].name, OTHER)


def profile_ours(side: Side, wall_s: float, steps: int) -> dict[str, Any]:
    """One call of ``side`` under torch.profiler: self time by category, and the rest of ``wall_s`` (the best
    unprofiled time) as Python and dispatch."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(Int8Linear, "rows", INT8_SCOPE))
        stack.enter_context(scoped(fast, "linear_few_rows", FEW_ROWS_SCOPE))
        for owner, method in ((KVCache, "append"), (KVCache, "reorder"), (LayerCache, "reorder")):
            stack.enter_context(scoped(owner, method, CACHE_SCOPE))
        prof = stack.enter_context(profile(activities=[ProfilerActivity.CPU]))
        start = time.perf_counter()
        side.run()
        profiled_s = time.perf_counter() - start
    ms: dict[str, float] = collections.defaultdict(float)
    tops: dict[str, float] = collections.defaultdict(float)
    calls = kernels = 0  # ops called from Python; inductor's C++ kernels among them
    for event in prof.events():
        if event.name in SCOPES or WRAPPERS.match(event.name):  # a scope's own time is the profiler's or Python's
            continue
        chain = [event]
        while chain[0].cpu_parent is not None:
            chain.insert(0, chain[0].cpu_parent)
        chain = [e for e in chain if not WRAPPERS.match(e.name)]  # the compiled graph calls its ops as Python does
        calls += all(e.name in SCOPES for e in chain[:-1])
        kernels += bool(KERNEL.match(event.name))
        category = ours_category(chain)
        ms[category] += event.self_cpu_time_total / 1e3
        tops[f"{next(e.name for e in chain if e.name not in SCOPES)} [{category}]"] += event.self_cpu_time_total / 1e3
    ops_ms = sum(ms.values())
    # Python and dispatch: the profiled call's time outside every op, the profiler's bookkeeping included.
    # Shares are of the profiled call, scaled to the unprofiled wall_s. The unprofiled wall less the ops'
    # self time (inflated by the profiler) is kept too: it is smaller than the run-to-run noise here and
    # came out below zero in 4 of 6 cases on a busy 2-core machine.
    ms[PYTHON] = profiled_s * 1e3 - ops_ms
    scale = wall_s / profiled_s
    return {"profiler": "torch.profiler, CPU, self time of every op, by the op called from Python",
            "profiled_wall_s": profiled_s, "ops_self_s": ops_ms / 1e3, "calls_from_python_per_step": calls / steps,
            "inductor_kernels_per_step": kernels / steps,
            "python_and_dispatch_wall_minus_ops_ms_per_step": (wall_s * 1e3 - ops_ms) / steps,
            "categories": shares({k: v * scale for k, v in ms.items()}, wall_s, steps),
            "top_ops": [{"op": k, "ms_per_step": v * scale / steps, "share": v / (profiled_s * 1e3)}
                        for k, v in sorted(tops.items(), key=lambda kv: -kv[1])[:12]]}


# --- CTranslate2: perf --------------------------------------------------------------------------------------

def profile_ct2(side: Side, wall_s: float, steps: int) -> dict[str, Any]:
    """One call of ``side`` sampled by ``perf``: samples by operation and by category, scaled to ``wall_s``."""
    if shutil.which("perf") is None:
        return {"skipped": "perf is not installed (CTranslate2's PyPI build has no profiler of its own)"}
    with tempfile.TemporaryDirectory(prefix="decode-profile-") as folder:
        data = Path(folder) / "perf.data"
        hz = int(min(2000, max(100, SAMPLES / wall_s)))
        try:
            with perf_recording(data, Path(folder), hz):
                side.run()
        except RuntimeError as e:
            return {"skipped": str(e)}
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym,dso", "--no-inline"],
                                capture_output=True, text=True, check=False)
    if script.returncode != 0:
        return {"skipped": f"perf script failed: {script.stderr.strip()[-300:]}"}
    return {"profiler": f"perf record -e cpu-clock -F {hz} --call-graph dwarf (CTranslate2's own profiler is not "
                        "built into its PyPI wheels); samples of Python's thread and CTranslate2's worker, by the "
                        "innermost ctranslate2::ops frame", "hz": hz,
            **summarise_samples(parse_perf_script(script.stdout), wall_s, steps)}


@contextlib.contextmanager
def perf_recording(data: Path, folder: Path, hz: int) -> Iterator[None]:
    """``perf record`` on this process (every thread, native stacks, ``hz`` samples a second), sampling only
    inside the block.

    perf starts disabled and is switched on and off through its control fifo, so the samples cover the block
    alone; raises RuntimeError (with perf's words) if perf cannot attach."""
    ctl, ack = folder / "ctl", folder / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz), "--call-graph", "dwarf,8192",
                             "-p", str(os.getpid()), "-o", str(data), "-D", "-1",
                             "--control", f"fifo:{ctl},{ack}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
    ctl_fd = -1
    try:
        deadline = time.monotonic() + 30
        while ctl_fd < 0:  # the fifo opens for writing once perf holds it open
            if perf.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"perf record did not start: {perf_error(perf)}")
            try:
                ctl_fd = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        command(ctl_fd, ack_fd, "enable", perf)
        yield
        command(ctl_fd, ack_fd, "disable", perf)
    finally:
        if ctl_fd >= 0:
            os.close(ctl_fd)
        os.close(ack_fd)
        if perf.poll() is None:
            perf.send_signal(signal.SIGINT)
        try:
            perf.wait(timeout=120)
        except subprocess.TimeoutExpired:
            perf.kill()
            perf.wait()


def perf_error(perf: subprocess.Popen) -> str:
    if perf.poll() is None:
        perf.kill()
        perf.wait()
    return (perf.stderr.read() if perf.stderr else "").strip()[-300:] or f"exit status {perf.returncode}"


def command(ctl_fd: int, ack_fd: int, what: str, perf: subprocess.Popen) -> None:
    """Tell perf ``what`` (``enable``/``disable``) and wait for its acknowledgement."""
    os.write(ctl_fd, f"{what}\n".encode())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([ack_fd], [], [], 0.1)
        if ready and b"ack" in os.read(ack_fd, 64):
            return
        if perf.poll() is not None:
            break
    raise RuntimeError(f"perf did not acknowledge {what!r}: {perf_error(perf)}")


def parse_perf_script(text: str) -> list[tuple[int, list[tuple[str, str]]]]:
    """``perf script -F tid,ip,sym,dso`` -> ``(tid, [(symbol, dso), ...])`` per sample, the leaf first."""
    samples = []
    for block in text.split("\n\n"):
        lines = [line for line in block.strip("\n").splitlines() if line.strip()]
        if not lines or not lines[0].strip().isdigit():
            continue
        frames = []
        for line in lines[1:]:
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\(([^()]*)\)\s*$", line)
            if m:
                frames.append((m.group(1), m.group(2)))
        samples.append((int(lines[0].strip()), frames))
    return samples


def ct2_operation(frames: list[tuple[str, str]]) -> str:
    """The operation a sample is in: the innermost ``ctranslate2::ops::X`` on its stack (``X``); else the
    innermost ctranslate2 function and the layer or search around it (``cpu::softmax in BeamSearch::search``:
    an op the compiler inlined); else what its leaf is (oneDNN's JIT code, OpenMP, the kernel, Python)."""
    if not frames:
        return "(no stack)"
    names = [re.match(r"ctranslate2::((?:\w+::)*\w+)", symbol) for symbol, _ in frames]
    for m in names:
        if m and m.group(1).startswith("ops::"):
            return m.group(1).split("::")[1]
    symbol, dso = frames[0]
    library = Path(dso).name
    if dso.startswith("/tmp/perf-") or (symbol == "[unknown]" and library.endswith(".map")):
        return JIT
    if re.match(r"mkl_blas_\w*(gemm|gemv)", symbol):
        return MKL
    if library.startswith("libgomp"):
        return "OpenMP runtime (libgomp)"
    if "kernel" in library:
        return "kernel (page faults, scheduling)"
    if library.startswith(("libpython", "python")):
        return "Python"
    found = [m.group(1) for m in names if m]
    if not found:
        return f"{symbol[:60]} ({library})"
    around = next((f for f in found[1:] if f.startswith("layers::") or "Search::" in f or f == "decode"), None)
    return found[0] if around is None or around == found[0] else f"{found[0]} in {around}"


def ct2_category(op: str, frames: list[tuple[str, str]]) -> str:
    """Our categories for a CTranslate2 sample in ``op`` with stack ``frames``."""
    symbols = " ".join(s for s, _ in frames)
    if op in (JIT, MKL):
        return MATMUL
    if op == "Python":
        return PYTHON
    if "dot_product_attention" in symbols:
        return ATTENTION
    if op == "Gather" and "Embeddings" in symbols:
        return OTHER
    if op in CT2:
        return CT2[op]
    if "ctranslate2::layers::" not in symbols and re.search(r"ctranslate2::\w*Search", symbols):
        return SEARCH  # the search's own code, with its softmax inlined
    return OTHER


def summarise_samples(samples: list[tuple[int, list[tuple[str, str]]]], wall_s: float,
                      steps: int) -> dict[str, Any]:
    """Shares of the samples of the threads that run in turn (Python's and CTranslate2's worker): by operation
    and by category, each also as milliseconds per step of ``wall_s``."""
    pid = os.getpid()
    by_tid: collections.Counter[int] = collections.Counter(tid for tid, _ in samples)
    worker_hits: collections.Counter[int] = collections.Counter(
        tid for tid, frames in samples if any("ctranslate2::Worker::run" in s or "ctranslate2::models::" in s
                                              for s, _ in frames))
    worker = max(worker_hits, key=lambda t: worker_hits[t], default=None)
    if worker is None and by_tid:  # no stack unwound to the worker: the busiest thread that is not Python's
        worker = max((t for t in by_tid if t != pid), key=lambda t: by_tid[t], default=None)
    timeline = [(tid, frames) for tid, frames in samples if tid in (pid, worker)]
    base = {"samples": len(timeline), "helper_thread_samples": len(samples) - len(timeline),
            "threads_sampled": len(by_tid)}
    if len(timeline) < MIN_SAMPLES:
        return {**base, "categories": {}, "top_operations": [],
                "note": f"{len(timeline)} samples, too few for shares (the call is too short)"}
    ops: collections.Counter[str] = collections.Counter()
    ms: dict[str, float] = collections.defaultdict(float)
    per_sample = wall_s * 1e3 / len(timeline)  # the samples stand for the wall time, in proportion
    for tid, frames in timeline:
        op = "Python" if tid == pid and not any("ctranslate2" in s for s, _ in frames) else ct2_operation(frames)
        ops[op] += 1
        ms[ct2_category(op, frames)] += per_sample
    top = [{"op": k, "samples": v, "share": v / len(timeline), "ms_per_step": v * per_sample / steps}
           for k, v in ops.most_common(8)]
    return {**base, "categories": shares(ms, wall_s, steps), "top_operations": top}


# --- the page -------------------------------------------------------------------------------------------------

def summary(name: str, row: dict[str, Any]) -> str:
    wall = row["wall_s"]
    return (f"{name}: ours {wall['aiayn'] * 1e3:.1f} ms, CTranslate2 {wall['ctranslate2'] * 1e3:.1f} ms "
            f"(t_ct2 / t_ours {row['ratio_ct2_over_ours']:.2f})")


def gap_sentence(name: str, row: dict[str, Any]) -> str:
    """One sentence from the numbers: where the difference per step between the two sides lies."""
    steps = row["steps"]
    ours_ms, ct2_ms = row["wall_s"]["aiayn"] * 1e3 / steps, row["wall_s"]["ctranslate2"] * 1e3 / steps
    ours, theirs = row["ours"]["categories"], row["ctranslate2"].get("categories") or {}
    if not theirs:
        return (f"`{name}`: ours {ours_ms:.2f} ms a step against CTranslate2's {ct2_ms:.2f}; CTranslate2 was not "
                f"profiled ({row['ctranslate2'].get('skipped') or row['ctranslate2'].get('note')}).")
    diffs = sorted(((ours[c]["ms_per_step"] - theirs[c]["ms_per_step"], c) for c in CATEGORIES), reverse=True)
    words = "slower" if ours_ms > ct2_ms else "faster"
    parts = [f"{c} {ours[c]['ms_per_step']:.2f} against {theirs[c]['ms_per_step']:.2f}"
             for d, c in diffs[:3] if d > 0]
    return (f"`{name}`: ours is {abs(ours_ms - ct2_ms):.2f} ms a step {words} ({ours_ms:.2f} against "
            f"{ct2_ms:.2f}); where ours spends more: " + ("; ".join(parts) or "nowhere") + ".")


def overall(rows: dict[str, dict[str, Any]]) -> str:
    """A sentence over the cases profiled on both sides: per category, ours' ms a step less CTranslate2's, summed."""
    both = [r for r in rows.values() if r["ctranslate2"].get("categories")]
    if not both:
        return "CTranslate2 was not profiled: no comparison by category."
    total = {c: sum(r["ours"]["categories"][c]["ms_per_step"] - r["ctranslate2"]["categories"][c]["ms_per_step"]
                    for r in both) for c in CATEGORIES}
    more = sorted((c for c in CATEGORIES if total[c] > 0), key=lambda c: -total[c])
    less = sorted((c for c in CATEGORIES if total[c] < 0), key=lambda c: total[c])
    words = f"Summed over the {len(both)} cases, ours spends more a step than CTranslate2 on " + ", ".join(
        f"{c} ({total[c]:+.2f} ms)" for c in more)
    if less:
        words += "; less on " + ", ".join(f"{c} ({total[c]:+.2f} ms)" for c in less)
    return words + "."


def page(results: dict[str, Any]) -> str:
    """``docs/decode_profile.md``: per case the categories side by side and CTranslate2's top operations."""
    machine = results["machine"]
    compiled = results.get("compiled", False)
    lines = [
        "# Where " + ("compiled " if compiled else "") + "decoding time goes: ours against CTranslate2",
        "",
        "Written by `benchmarks/decode_profile.py` ("
        + ("quick toy sizes: the numbers mean nothing, " if results["quick"] else "") +
        f"{results['date']}, {machine['cpu']}, {machine['cores']} cores, {results['threads']} "
        f"thread{'s' if results['threads'] != 1 else ''} on each side, CTranslate2 {results['ctranslate2']}, "
        f"torch {machine['torch']}; load average {results['load_average_at_start'][0]:.2f} at the start, "
        f"{results['load_average_at_end'][0]:.2f} at the end). Rerun: `{results['command']}`.",
        "",
        "Each case is `aiayn bench`'s case of that name: the same models, inputs and calls. Wall times are each "
        "side's best of 3 calls without a profiler; milliseconds are per decoding step (one new token per "
        "sequence). **Ours** is one call under `torch.profiler`: each op's self time goes to the category of the op "
        "Python called (`aten::linear`, and the `aten::addmm` inside it: matrix products), or of a scope the script "
        "opens around a function of ours: in `Int8Linear.rows` the fbgemm product is a matrix product and every "
        "other op (abs, amax, the outlier test, the row scaling, the bias) int8 input handling; "
        "`fast.linear_few_rows` (the swapped float product and its transposing copy) is matrix products; the KV "
        "cache's `append` and `reorder` are cache writes and beam reordering. Other ops are sorted by name "
        "(`index_select`: reordering; `topk`, `log_softmax`, `cat`, `gather`: search; `add`, `layer_norm`, `relu`, "
        "`gelu`: norms and activations). Shares are of the profiled call, and the milliseconds those shares of the "
        "unprofiled time. \"Python and dispatch\" is the profiled call's time outside every op: an estimate on the "
        "high side, as the profiler's bookkeeping falls there too; each case also gives the estimate on the low "
        "side (the unprofiled time less the ops' self time, which the profiler inflates). **CTranslate2** is one "
        "call sampled by `perf` with native stacks: its own profiler (`init_profiling`) is compiled out of the PyPI "
        "wheels and not exposed to Python, so each sample goes to the innermost `ctranslate2::ops` frame of its "
        "stack, the ops that profiler would time, and the shares are of the samples of the threads that run in "
        "turn (Python's, then the worker's). Samples in oneDNN's JIT-compiled GEMM code have no symbol and no "
        "caller, and samples in MKL's GEMM code (CTranslate2's products on Intel CPUs) no caller: they count as "
        "matrix products, though a few are attention's batched products. CTranslate2's int8 "
        "`Quantize` and `Dequantize` count as int8 input handling; in ours the same work is inside fbgemm's product.",
        "",
    ]
    if compiled:
        lines += [
            "**Compiled**: each case is the `-compiled` variant, ours decoding over a static cache with its step "
            "compiled by `torch.compile` (`compile=True`). Inductor names its C++ kernels to the profiler "
            "(`config.cpp.enable_kernel_profile`) and each fused kernel counts by the ops its name holds (the first "
            "of: `argmax`/`topk`/`sort`/`log_softmax` search; `softmax`/`bmm` attention, with the cache write it "
            "fuses; `index_put`/`index_copy` cache writes; `addmm`/`mm` products; `layer_norm`/`gelu`/`add`/`mul`... "
            "norms and activations). The "
            "products inductor leaves to a library (`aten::addmm`, oneDNN's as `aiayn::linear_onednn` and "
            "`aiayn::linear_packed`) and the "
            "attention kernel count as above; the compiled region's own wrappers (dynamo's guards, the call of the "
            "compiled graph) are Python and dispatch, and \"ops from Python\" includes the kernels the compiled "
            "graph's Python wrapper calls. The eager profile is [decode_profile.md](decode_profile.md).",
            "",
        ]
    for name, row in results["cases"].items():
        lines += [f"## `{name}`", ""]
        if "skipped" in row:
            lines += [f"Skipped: {row['skipped']}", ""]
            continue
        wall = row["wall_s"]
        lines += [f"{row['what']}.", "",
                  f"Wall time: ours {wall['aiayn'] * 1e3:,.1f} ms, CTranslate2 {wall['ctranslate2'] * 1e3:,.1f} ms "
                  f"for {row['steps']} steps (t_ct2 / t_ours = {row['ratio_ct2_over_ours']:.2f}; > 1: ours is "
                  f"faster)." + ("" if row["checks_ok"] else " **The case's checks failed.**"), ""]
        ours, ct2 = row["ours"]["categories"], row["ctranslate2"]
        theirs = ct2.get("categories") or {}
        lines += ["| category | ours ms/step | ours share | CTranslate2 ms/step | CTranslate2 share |",
                  "|---|---:|---:|---:|---:|"]
        for c in CATEGORIES:
            t = theirs.get(c)
            lines.append(f"| {c} | {ours[c]['ms_per_step']:.3f} | {ours[c]['share']:.0%} | "
                         + (f"{t['ms_per_step']:.3f} | {t['share']:.0%} |" if t else "n/a | n/a |"))
        calls = row["ours"]["calls_from_python_per_step"]
        low = row["ours"]["python_and_dispatch_wall_minus_ops_ms_per_step"]
        each = ours[PYTHON]["ms_per_step"] * 1e3 / calls
        fused = row["ours"].get("inductor_kernels_per_step", 0)
        lines += ["", f"Ours calls {calls:,.0f} ops from Python a step"
                  + (f" ({fused:,.0f} of them inductor's fused C++ kernels)" if fused else "")
                  + f", {each:.1f} us each outside the ops; the low estimate of Python and dispatch is {low:.3f} ms "
                    "a step."]
        other = [o for o in row["ours"]["top_ops"] if o["op"].endswith(f"[{OTHER}]") and o["share"] >= 0.005][:3]
        if other:
            lines += ["", "Ours' largest \"everything else\": " + ", ".join(
                f"`{o['op'].rsplit(' [', 1)[0]}` {o['share']:.0%}" for o in other) + "."]
        if ct2.get("top_operations"):
            lines += ["", f"CTranslate2's top operations ({ct2['samples']} samples; helper threads "
                          f"{ct2['helper_thread_samples']} more):", "",
                      "| operation | share | ms/step |", "|---|---:|---:|"]
            lines += [f"| {o['op']} | {o['share']:.0%} | {o['ms_per_step']:.3f} |" for o in ct2["top_operations"]]
        elif "skipped" in ct2 or "note" in ct2:
            lines += ["", f"CTranslate2 not profiled: {ct2.get('skipped') or ct2.get('note')}."]
        lines.append("")
    rows = {k: v for k, v in results["cases"].items() if "skipped" not in v}
    if rows:
        lines += ["## Reading", "", "Generated from the tables above: per case, the difference per step and the "
                  "categories where ours spends the most more than CTranslate2.", ""]
        lines += [f"- {gap_sentence(name, row)}" for name, row in rows.items()]
        lines += ["", overall(rows), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
