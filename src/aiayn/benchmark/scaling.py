"""How time and memory grow: one attention layer with the sequence, and the small Transformer with batch and length.

Attention: our :class:`~aiayn.layers.MultiHeadAttention` (d_model 256, 4 heads), forward and backward, on one
sequence of T = 128, 256, ..., 8192 positions, two ways:

    full        every position attends to all T:              O(T^2) time
    windowed    1-D windows of W = 64 positions (Swin's        O(T W) time
                window partition along one axis): the sequence
                is cut into T/W rows of W, attended separately
                |--- W ---|--- W ---|--- W ---| ...

Memory is what one pass allocates. The fused CPU kernel never materialises the (T, T) weights, so full
attention's memory grows like T, not T^2; its time still grows like T^2.

Transformer: one forward and backward (label-smoothed loss, no optimizer) of the small Transformer of
``train-small``, as the batch grows at 32 tokens a sentence and as the length grows at 8 sentences; plotted
against tokens per batch, so the two lines part where attention's T^2 begins to show.

No peer and no target. Writes ``scaling.png`` beside the results.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.harness import Settings, count_flops, peak_memory, timed
from aiayn.layers import MultiHeadAttention
from aiayn.models import build
from aiayn.training.losses import label_smoothed_loss

WHAT = ("time and peak memory as sizes grow: one attention layer (forward + backward), full vs 1-D windows, "
        "T = 128 ... 8192; the small Transformer's forward + backward as batch and length grow")


def _median_time(fns: dict[str, Any], settings: Settings) -> dict[str, float]:
    """Median seconds of each function, warmed up, then alternating over ``settings.rounds`` rounds."""
    for fn in fns.values():
        for _ in range(settings.warmup):
            fn()
    seconds: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(settings.rounds):
        for k, fn in fns.items():
            seconds[k].append(timed(fn, settings.device, settings.clock))
    return {k: statistics.median(v) for k, v in seconds.items()}


def attention_sweep(settings: Settings) -> dict[str, Any]:
    """Full against windowed attention as the sequence grows."""
    quick, device = settings.quick, settings.device
    d_model, heads, window = (32, 2, 16) if quick else (256, 4, 64)
    lengths = [32, 64, 128] if quick else [128 * 2**i for i in range(7)]  # 128 ... 8192
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, heads).to(device)
    points = []
    for t in lengths:
        x = torch.randn(1, t, d_model, device=device, requires_grad=True)  # (1, T, C)
        fns: dict[str, Callable[..., None]] = {  # called with no arguments; the defaults bind x and t
            "full": lambda x=x: mha(x)[0].sum().backward(),
            # (T/W, W, C): each window a row of the batch
            "windowed": lambda x=x, t=t: mha(x.view(t // window, window, d_model))[0].sum().backward()}
        seconds = _median_time(fns, settings)
        point: dict[str, Any] = {"length": t}
        for k, fn in fns.items():
            point[f"{k}_s"] = seconds[k]
            point[f"{k}_peak_bytes"] = peak_memory(fn, device)
            point[f"{k}_flops"] = count_flops(fn)
        points.append(point)
    return {"d_model": d_model, "heads": heads, "window": window, "batch": 1, "points": points,
            "what": "MultiHeadAttention forward + backward of one sequence; windowed: 1-D windows as batch rows"}


def transformer_sweep(settings: Settings) -> dict[str, Any]:
    """The small Transformer's forward + backward as batch and length grow."""
    quick, device = settings.quick, settings.device
    cfg = small_transformer(quick)
    torch.manual_seed(0)
    model = build(cfg).to(device).train()
    base_batch, base_length = (2, 8) if quick else (8, 32)
    grid = ([("batch", b, base_length) for b in ((2, 4) if quick else (8, 16, 32, 64, 128))]
            + [("length", base_batch, t) for t in ((8, 16) if quick else (32, 64, 128, 256, 512))])
    points = []
    for sweep, batch, length in grid:
        ids = torch.randint(3, cfg.src_vocab_size, (batch, length), device=device)  # (B, T) source = target

        def step(ids=ids) -> None:
            loss, _, n = label_smoothed_loss(model(ids, ids), ids, cfg.pad_id)
            (loss / n).backward()
            model.zero_grad(set_to_none=True)

        seconds = _median_time({"step": step}, settings)["step"]
        points.append({"sweep": sweep, "batch": batch, "length": length, "tokens": 2 * batch * length,
                       "seconds": seconds, "tokens_per_s": 2 * batch * length / seconds,
                       "peak_bytes": peak_memory(step, device)})
    return {"config": {"d_model": cfg.d_model, "d_ff": cfg.d_ff, "n_heads": cfg.n_heads,
                       "n_layers": [cfg.n_encoder_layers, cfg.n_decoder_layers], "vocabulary": cfg.src_vocab_size},
            "points": points, "what": "forward + backward of the small Transformer (source and target of the same "
                                      "length); tokens count source and target"}


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """Four panels: attention time and memory against T; the Transformer's time and memory against tokens."""
    from matplotlib.figure import Figure  # lazy: only this case draws
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(11, 8), layout="constrained")
    (a_time, a_mem), (t_time, t_mem) = fig.subplots(2, 2)
    att = result["attention"]
    lengths = [p["length"] for p in att["points"]]
    for k, label in (("full", "full"), ("windowed", f"windows of {att['window']}")):
        a_time.plot(lengths, [p[f"{k}_s"] * 1e3 for p in att["points"]], "o-", label=label)
        a_mem.plot(lengths, [p[f"{k}_peak_bytes"] / 2**20 for p in att["points"]], "o-", label=label)
    for ax, title, unit in ((a_time, "attention layer, forward + backward", "ms"),
                            (a_mem, "attention layer, peak memory", "MiB")):
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel=unit, title=title)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(lengths, [str(t) for t in lengths])
        ax.legend()
    trf = result["transformer"]
    ticks = sorted({p["tokens"] for p in trf["points"]})
    for sweep, label in (("batch", "batch grows"), ("length", "length grows")):
        pts = [p for p in trf["points"] if p["sweep"] == sweep]
        tokens = [p["tokens"] for p in pts]
        t_time.plot(tokens, [p["seconds"] * 1e3 for p in pts], "o-", label=label)
        t_mem.plot(tokens, [p["peak_bytes"] / 2**20 for p in pts], "o-", label=label)
    for ax, title, unit in ((t_time, "small Transformer, forward + backward", "ms"),
                            (t_mem, "small Transformer, peak memory", "MiB")):
        ax.set(xscale="log", yscale="log", xlabel="tokens per batch (source + target)", ylabel=unit, title=title)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def run(settings: Settings, out: str | Path) -> dict[str, Any]:
    """Both sweeps; draws ``out/scaling.png``. Returns the results (without the machine)."""
    result = {"case": "scaling", "kind": "scaling", "what": WHAT, "rounds": settings.rounds,
              "attention": attention_sweep(settings), "transformer": transformer_sweep(settings)}
    result["plot"] = plot(result, Path(out) / "scaling.png").name
    return result


__all__ = ["attention_sweep", "plot", "run", "transformer_sweep"]
