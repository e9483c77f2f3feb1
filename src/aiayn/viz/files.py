"""The pictures of :mod:`aiayn.viz`, written as PNG files (what ``aiayn viz`` makes).

    positional   sinusoidal encodings (both layouts) and their dot products      positional.png
    masks        padding, causal, combined, Swin's shifted windows                masks.png
    schedule     section 5.3's learning rate for a few d_model / warm-up          schedule.png
    smoothing    section 5.4's label-smoothed target                              smoothing.png
    complexity   global vs window attention, measured and by formula              complexity.png
    attention    a translation run's three kinds of attention for a sentence      attention-{encoder,decoder,cross}.png
    history      a run's loss, learning rate, speed and validation numbers         history.png
    all          all of the above (attention only when a run is given)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

WHATS = ("positional", "masks", "schedule", "smoothing", "complexity", "attention", "history", "all")


def attention_pictures(run: str | os.PathLike, text: str, out: str | os.PathLike,
                       target: str | None = None, *, device: str | torch.device | None = None) -> list[Path]:
    """Every layer and head of encoder self-, decoder self- and encoder-decoder attention of the model in ``run``
    (a folder of ``aiayn train``) reading ``text`` and producing ``target`` (default: its own greedy
    translation); the tokens on the axes.

    Args:
        device: where the model runs (:func:`aiayn.training.device.resolve`; default: a GPU if any).

    Raises:
        ValueError: ``device`` names no device of this machine.
    """
    from aiayn.data import seq2seq_batch
    from aiayn.recipes.translation import load_run, translate_texts
    from aiayn.training import device as devices
    from aiayn.viz import plot_model_attention

    model, src_tok, tgt_tok = load_run(run, device=device)
    hyp = translate_texts(model, src_tok, tgt_tok, [text])[0] if target is None else target
    src, tgt_in, _ = devices.move(seq2seq_batch([(text, hyp)], src_tok, tgt_tok), devices.of(model))  # (1, S), (1, T)
    keys = src_tok.tokens(text) + ["</s>"]
    queries = ["<s>"] + tgt_tok.tokens(hyp)
    return plot_model_attention(model, src, tgt_in, keys, queries, out, title=f"{text!r} -> {hyp!r}")


def attention_page(run: str | os.PathLike, text: str, path: str | os.PathLike, target: str | None = None, *,
                   device: str | torch.device | None = None) -> Path:
    """The interactive viewer (:func:`aiayn.viz.attention_html`) of the same three kinds of attention as
    :func:`attention_pictures`, as one self-contained HTML file.

    Args:
        device: where the model runs, as :func:`attention_pictures`'s (``None``: a GPU when there is one, else
            the CPU).
    """
    from aiayn.data import seq2seq_batch
    from aiayn.recipes.translation import load_run, translate_texts
    from aiayn.training import device as devices
    from aiayn.viz import attention_weights
    from aiayn.viz.html import attention_html

    model, src_tok, tgt_tok = load_run(run, device=device)
    hyp = translate_texts(model, src_tok, tgt_tok, [text])[0] if target is None else target
    src, tgt_in, _ = devices.move(seq2seq_batch([(text, hyp)], src_tok, tgt_tok), devices.of(model))  # (1, S), (1, T)
    keys = src_tok.tokens(text) + ["</s>"]
    queries = ["<s>"] + tgt_tok.tokens(hyp)
    axes = {"encoder self-attention": (keys, keys), "decoder self-attention": (queries, queries),
            "encoder-decoder attention": (queries, keys)}
    kinds = devices.move(attention_weights(model, lambda: model(src, tgt_in)), "cpu")  # read number by number
    return attention_html(kinds, {k: axes[k] for k in kinds}, path, title=f"{text} -> {hyp}")


def viz(what: str, out: str | os.PathLike = "viz", run: str | os.PathLike | None = None, text: str | None = None,
        d_model: int = 128, positions: int = 100, sides: Sequence[int] = (14, 28, 42, 56), channels: int = 96,
        heads: int = 3, window: int = 7, repeats: int = 3, target: str | None = None,
        html: str | os.PathLike | None = None, device: str | torch.device | None = None) -> list[Path]:
    """Write the pictures ``what`` asks for (module docstring) into the folder ``out``; return their paths.

    Args:
        what: one of :data:`WHATS`.
        out: the folder for the PNG files; for one picture, a path ending in ``.png`` is the file itself.
        run: a translation run folder (``attention``), any run folder (``history``).
        text: the source sentence whose attention to draw (``attention``).
        target: the translation to draw it for (``attention``; default the model's greedy one).
        html: also write the interactive viewer of that attention to this HTML file (``attention``).
        device: where the run's model runs (``attention``): ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, or
            ``None`` / ``"auto"`` (a GPU when there is one, else the CPU).
        d_model, positions: size of the positional-encoding picture.
        sides, channels, heads, window, repeats: the maps, layer and timing of ``complexity``.
    """
    from aiayn import viz as pictures

    if what not in WHATS:
        raise ValueError(f"what={what!r} must be one of {WHATS}")
    if what == "attention" and (run is None or text is None):
        raise ValueError("viz attention needs --run (a folder of `aiayn train`) and --text (a sentence)")
    if what == "history" and run is None:
        raise ValueError("viz history needs --run (a folder of `aiayn train`)")
    for flag, value in (("--d-model", d_model), ("--positions", positions), ("--channels", channels),
                        ("--heads", heads), ("--window", window), ("--repeats", repeats)):
        if value <= 0:
            raise ValueError(f"{flag} must be positive, got {value}")
    out = Path(out)
    file = out if out.suffix.lower() == ".png" else None  # one picture: the file itself
    if file is not None and what in ("attention", "all"):
        raise ValueError(f"viz {what} writes several pictures: --out must be a folder, got {out}")
    if file is not None:
        out = file.parent
    wanted = WHATS[:5] if what == "all" else (what,)
    name = {w: file or out / f"{w}.png" for w in wanted}
    paths = []
    if "positional" in wanted:
        paths.append(pictures.plot_positional(name["positional"], d_model, positions))
    if "masks" in wanted:
        paths.append(pictures.plot_masks(name["masks"]))
    if "schedule" in wanted:
        paths.append(pictures.plot_schedule(name["schedule"]))
    if "smoothing" in wanted:
        paths.append(pictures.plot_label_smoothing(name["smoothing"]))
    if "complexity" in wanted:
        from aiayn.analysis.complexity import attention_costs

        rows = attention_costs(sides, channels, heads, window, repeats)
        paths.append(pictures.plot_complexity(rows, name["complexity"]))
    if what == "history":
        from aiayn.viz.history import plot_history

        assert run is not None  # refused above otherwise
        paths.append(plot_history(run, name["history"]))
    if what == "attention" or (what == "all" and run is not None and text is not None):
        assert run is not None and text is not None  # refused above otherwise
        paths.extend(attention_pictures(run, text, out, target, device=device))
        if html is not None:
            paths.append(attention_page(run, text, html, target, device=device))
    return paths


__all__ = ["WHATS", "attention_pictures", "viz"]
