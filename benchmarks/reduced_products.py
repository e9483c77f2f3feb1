"""One row in a compiled step: inductor's own multiply-and-sum (``aiayn.layers.fast.linear_reduced``) against the
products the rules gave before it (oneDNN's op for float32, fbgemm's ``aiayn::int8_rows`` for int8), on the
Llama-shaped 124M's and GPT-2 124M's shapes (random weights).

    python benchmarks/reduced_products.py           # 7 rounds (about ten minutes on 2 cores)
    python benchmarks/reduced_products.py --quick   # llama-tiny and gpt-tiny, 2 rounds, into a temporary folder

``products``: the products of one decode step (61 for the Llama, 49 for GPT-2) (every ``Linear``'s, and the output
layer tied to the token table), each on its own input row, as one compiled function per way, 1 and 2 rows.
``rules``: each layer as the compiled step calls it with :data:`~aiayn.layers.fast.REDUCE_ONE_ROW` off (float32:
oneDNN's op, or on AVX2 the swapped product for two rows; int8: fbgemm's op); ``reduced``:
:func:`~aiayn.layers.fast.linear_reduced` on the same weights (int8: the plain int8 rows and their scales).
``generation``: greedy generation of ``--new`` tokens at batch 1 through the compiled step, the switch off and on.
The ways run in turn in each round (what else the machine does weighs on both alike); each figure is the median
round, in milliseconds a call (a step's products, or a token), and ``ratio`` is rules / reduced. Writes
``benchmarks/results/reduced_products.json`` (the AMD EPYC with AVX-512's: ``--out
benchmarks/results/amd-epyc-avx512``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.benchmark.cases.generation import LLAMA_124M
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import median_times, script_args, write_results
from aiayn.decoding import sample
from aiayn.layers import fast, int8, kernels
from aiayn.models import build
from aiayn.models.gpt import PRESETS

RESULTS = Path(__file__).parent / "results"


def products(model: nn.Module) -> list[tuple[nn.Module, int]]:
    """Every product of a decode step: ``(layer, K)``, the output layer tied to the token table last."""
    found = [(m, m.in_features) for name, m in model.named_modules()
             if isinstance(m, (nn.Linear, int8.Int8Linear)) and not name.endswith("_product")]  # not a table's own
    return found + [(m, m.embedding_dim) for m in model.modules() if isinstance(m, int8.Int8Embedding)]


def _plain(layer: nn.Module) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(weight, bias, scale)`` of a float or int8 layer, as :func:`fast.linear_reduced` takes them."""
    if isinstance(layer, nn.Linear):
        return layer.weight, layer.bias, None
    if isinstance(layer, int8.Int8Embedding):
        return layer.q, None, layer.scale
    assert layer.plain_q is not None  # int8.opaque kept it
    return layer.plain_q, layer._bias, layer.plain_scale


def ways(model: nn.Module, rows: int) -> dict[str, Callable[[], object]]:
    """``{"rules": call, "reduced": call}``: the step's products on ``rows`` rows each, compiled."""
    layers = products(model)
    xs = [torch.randn(rows, k) for _, k in layers]

    def rules(xs: list[Tensor]) -> list[Tensor]:
        return [layer.linear(x) if isinstance(layer, int8.Int8Embedding) else layer(x)
                for (layer, _), x in zip(layers, xs)]

    def reduced(xs: list[Tensor]) -> list[Tensor]:
        return [fast.linear_reduced(x, *_plain(layer)) for (layer, _), x in zip(layers, xs)]

    compiled = {name: torch.compile(f, dynamic=False) for name, f in (("rules", rules), ("reduced", reduced))}
    return {name: (lambda f=f: f(xs)) for name, f in compiled.items()}


def generation(model: Any, new: int, n: int) -> dict[str, float]:
    """Median milliseconds per token of greedy generation at batch 1, the switch off and on in turn."""
    prompt = torch.randint(0, model.cfg.vocab_size, (1, 16))
    seen: dict[str, list[float]] = {"rules": [], "reduced": []}
    tokens = {}
    for r in range(n + 1):  # the first round compiles each
        for w in seen:
            fast.REDUCE_ONE_ROW = w == "reduced"
            start = time.perf_counter()
            tokens[w] = sample(model, prompt, new, temperature=0, compile=True)
            if r:
                seen[w].append((time.perf_counter() - start) / new * 1e3)
    fast.REDUCE_ONE_ROW = False
    out = {w: round(statistics.median(t), 3) for w, t in seen.items()}
    out["same_tokens"] = bool(torch.equal(tokens["rules"], tokens["reduced"]))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeat", type=int, default=5, help="calls of each way a round (default 5)")
    p.add_argument("--new", type=int, default=64, help="tokens generated a round (default 64)")
    p.add_argument("--threads", type=int, default=2)
    args = script_args(p, argv, {"rounds": 2, "repeat": 1, "new": 4}, "reduced-products", results=RESULTS)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = {"Llama-shaped 124M": PRESETS["llama-tiny"] if args.quick else LLAMA_124M,
              "GPT-2 124M": PRESETS["gpt-tiny" if args.quick else "gpt2"]}
    kernels.use("rules")  # the switch as generation() sets it: a session does not measure it anew
    fast.REDUCE_ONE_ROW = False  # the rules' way traces with the switch off; reduced calls linear_reduced itself
    results: dict[str, dict] = {}
    counted: dict[str, int] = {}
    with torch.inference_mode():
        for shape, cfg in shapes.items():
            f32 = build(cfg).eval()
            models = {"float32": f32, "int8": int8.opaque(int8.quantize(f32))}
            for m in models["int8"].modules():
                if isinstance(m, int8.Int8Linear):
                    m.keep_plain()  # what opaque() does with the switch on
            counted[shape] = len(products(models["int8"]))
            for precision, model in models.items():
                for rows in (1, 2):
                    us = median_times(ways(model, rows), args.rounds, args.repeat)
                    got: dict[str, float] = {w: round(t / 1e3, 3) for w, t in us.items()}
                    got["ratio"] = round(got["rules"] / got["reduced"], 3)
                    results[f"{shape}, {precision}, products, {rows} row{'s' if rows > 1 else ''}"] = got
                    print(shape, precision, rows, got, flush=True)
                step = generation(model, args.new, args.rounds)
                step["ratio"] = round(step["rules"] / step["reduced"], 3)
                results[f"{shape}, {precision}, generation, ms per token"] = step
                print(shape, precision, "generation", step, flush=True)
    write_results(args.out, "reduced_products", {
        "what": __doc__.split("\n\n")[0], "machine": machine(),
        "models": "llama-tiny, gpt-tiny" if args.quick else "LLAMA_124M, gpt2 (random weights)",
        "products": counted, "settings": {k: v for k, v in vars(args).items() if k != "out"}, "ms": results})


if __name__ == "__main__":
    main()
