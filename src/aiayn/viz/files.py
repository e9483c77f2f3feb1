"""The pictures of :mod:`aiayn.viz`, written as PNG files (what ``aiayn viz`` makes).

    positional   sinusoidal encodings (both layouts) and their dot products      positional.png
    masks        padding, causal, combined, Swin's shifted windows                masks.png
    lookahead    the 5 x 5 look-ahead mask on "<Begin> I have a cat" (or --text)   lookahead.png
    swin-windows Swin's windows: 81 vs 9 patches, 4 -> 9 -> 4 windows, regions    swin-windows.png
    schedule     section 5.3's learning rate for a few d_model / warm-up          schedule.png
    smoothing    section 5.4's label-smoothed target                              smoothing.png
    complexity   global vs window attention, measured and by formula              complexity.png
    attention    every kind of attention a model has, reading a sentence          attention-{encoder,decoder,cross}.png
                 (with a token: where that token looks)                           attention-{...}-from.png
    history      a run's loss, learning rate, speed and validation numbers         history.png
    relative     a Transformer-XL's mean attention by relative distance, per head  relative.png
    all          all of the above (attention only when a run is given)

``attention`` reads any text model: a run folder of ``aiayn train`` (translation, denoise: the three kinds of an
encoder-decoder; lm: a GPT's decoder self-attention; mlm, textclass: a BERT's encoder self-attention) or of
``aiayn convert``, or a Hugging Face folder (a BERT, a GPT-2 with its ``tokenizer.json``, a Marian), loaded as
:func:`aiayn.pipeline` loads it. The tokens are the model's own: BERT's ``[CLS] ... [SEP]``, a translation's
source with its ``</s>`` and the target after ``<s>``, a GPT's prompt as ``aiayn generate`` encodes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch
    from torch import Tensor

WHATS = ("positional", "masks", "lookahead", "swin-windows", "schedule", "smoothing", "complexity", "attention",
         "history", "relative", "all")


@dataclass(frozen=True)
class Reading:
    """What a model attended to while reading one text (:func:`read_attention`).

    Attributes:
        weights: ``{kind: [(H, T, S) per layer]}`` on the CPU, kinds of :data:`aiayn.viz.attention.KINDS`.
        tokens: ``{kind: (queries, keys)}``, the T and S token strings of each kind.
        title: the text (and its translation), for the pictures' titles.
    """

    weights: dict[str, list[Tensor]]
    tokens: dict[str, tuple[list[str], list[str]]]
    title: str


def _pieces(tok: Any, text: str) -> list[str]:
    """The piece of ``text`` each token of ``tok.encode(text)`` stands for (no specials added)."""
    if hasattr(tok, "tokens"):
        return list(tok.tokens(text))
    # a tokenizer that came with pretrained weights (GPT-2's): the text from the end of the token before, so
    # that a token keeps the space in front of its word, as GPT-2's "Ġit" does
    offsets = tok.tokenizer.encode(text, add_special_tokens=False).offsets
    return [text[(offsets[i - 1][1] if i else 0) : b] for i, (_, b) in enumerate(offsets)]


def _labels(tok: Any, text: str, ids: list[int]) -> list[str]:
    """:func:`_pieces`, or, where they do not match ``ids`` one to one, each id decoded alone."""
    pieces = _pieces(tok, text)
    return pieces if len(pieces) == len(ids) else [tok.decode([i]) or f"#{i}" for i in ids]


def read_attention(source: str | os.PathLike, text: str, target: str | None = None, *,
                   device: str | torch.device | None = None) -> Reading:
    """The attention weights of the model in ``source`` reading ``text``: every kind, layer and head.

    Args:
        source: a run folder (translation, denoise, lm, mlm, textclass; or ``aiayn convert``'s) or a Hugging Face
            folder or model id (a BERT, a GPT-2 with ``tokenizer.json``, a Marian).
        text: the sentence the model reads (an encoder-decoder's source).
        target: an encoder-decoder's target (default: its own greedy translation of ``text``); only for those.
        device: where the model runs (:func:`aiayn.training.device.resolve`; default: a GPU if any).

    Raises:
        ValueError: an empty ``text`` or one longer than the model reads; ``target`` for a model without a
            decoder reading a source; a model that reads no text (ViT, Swin, DETR); a bad ``device``.
        FileNotFoundError: ``source`` holds no model.
    """
    import torch

    from aiayn.pipelines import pipeline
    from aiayn.training import device as devices
    from aiayn.viz.attention import attention_weights

    if not text.strip():
        raise ValueError("--text is empty: expected a sentence for the model to read")
    p = pipeline(source, device=device)
    model, parts = p.model, p.parts
    where = devices.of(model)
    if p.task == "translation":  # an encoder-decoder: a translation run, a denoising run (BART), a Marian
        from aiayn.data import seq2seq_batch
        src_tok, tgt_tok = parts["src_tok"], parts["tgt_tok"]
        hyp = str(p.translate(text)) if target is None else target
        src, tgt_in, _ = devices.move(seq2seq_batch([(text, hyp)], src_tok, tgt_tok), where)  # (1, S), (1, T)
        keys = _labels(src_tok, text, src[0, :-1].tolist()) + ["</s>"]
        queries = ["<s>"] + _labels(tgt_tok, hyp, tgt_in[0, 1:].tolist())
        tokens = {"encoder self-attention": (keys, keys), "decoder self-attention": (queries, queries),
                  "encoder-decoder attention": (queries, keys)}
        weights = attention_weights(model, lambda: model(src, tgt_in))
        title = f"{text!r} -> {hyp!r}"
    elif target is not None:
        raise ValueError(f"--target is for encoder-decoders (translation, denoise); {source} holds a "
                         f"{type(model).__name__}")
    elif p.task in ("text-generation", "feature-extraction", "text-classification"):
        tok = parts["tok"]
        if p.task == "text-generation":  # a GPT: the text as `aiayn generate` reads a prompt
            ids = tok.encode(text)
            labels, kind = _labels(tok, text, ids), "decoder self-attention"
            types = None
        else:  # a BERT: [CLS] text [SEP]
            enc = tok.tokenizer.encode(text)
            ids, labels, kind = enc.ids, list(enc.tokens), "encoder self-attention"
            types = torch.tensor([enc.type_ids], device=where)
        if not ids:
            raise ValueError(f"--text {text!r} gives no tokens")
        max_len = cast(Any, model).cfg.max_len  # a GPT's or a BERT's config
        if len(ids) > max_len:
            raise ValueError(f"--text is {len(ids)} tokens; the model reads at most {max_len}")
        x = torch.tensor([ids], device=where)  # (1, T)
        weights = attention_weights(model, lambda: model(x) if types is None else model(x, types))
        tokens, title = {kind: (labels, labels)}, repr(text)
    else:
        raise ValueError(f"{source} holds a {type(model).__name__}, which reads no text: viz attention draws "
                         f"text models (translation, denoise, lm, mlm, textclass runs; Hugging Face BERT, GPT-2, "
                         f"Marian folders)")
    weights = devices.move(weights, "cpu")
    return Reading({k: list(w) for k, w in weights.items()}, {k: tokens[k] for k in weights}, title)


def _row_label(reading: Reading, kind: str) -> str:
    return "layer" if len(reading.weights) == 1 else kind.split()[0].replace("encoder-decoder", "decoder") + " layer"


def _from_index(reading: Reading, from_token: str) -> dict[str, int]:
    """``{kind: index of from_token among its queries}`` for the kinds whose queries hold it (at least one)."""
    from aiayn.viz.attention import find_token

    found, error = {}, None
    for kind, (queries, _) in reading.tokens.items():
        try:
            found[kind] = find_token(queries, from_token, "--from-token")
        except ValueError as e:
            error = error or e
    if not found:
        assert error is not None
        if len({tuple(q) for q, _ in reading.tokens.values()}) > 1:  # several texts: name them all
            texts = "; ".join(f"{k}: {q}" for k, (q, _) in reading.tokens.items())
            raise ValueError(f"--from-token {from_token!r} is a word of no text the model reads ({texts})")
        raise error
    return found


def _selection(reading: Reading, layer: int | None, head: int | None) -> dict[str, tuple[list[int], list[int]]]:
    """``{kind: (layers, heads)}`` to draw: every kind that has ``layer`` (all when ``None``).

    Raises:
        ValueError: no kind has ``layer``; ``head`` is not a head of the model (naming ``--layer``, ``--head``).
    """
    from aiayn.viz.attention import pick

    most = max(len(w) for w in reading.weights.values())
    pick(most, layer, "--layer", "layers" if len(reading.weights) == 1 else "layers in its deepest stack")
    out = {}
    for kind, layers in reading.weights.items():
        if layer is None or layer < len(layers):
            out[kind] = (pick(len(layers), layer, "--layer", "layers"),
                         pick(layers[0].size(0), head, "--head", "heads"))
    return out


def draw_attention(reading: Reading, out: str | os.PathLike, *, layer: int | None = None, head: int | None = None,
                   from_token: str | None = None) -> list[Path]:
    """The PNG files of ``reading`` in the folder ``out``: a grid of heat maps per kind (rows layers, columns
    heads; :data:`aiayn.viz.attention.FILES`), or with ``from_token`` the lines from that token to every
    token, per kind whose queries hold it (:data:`aiayn.viz.attention.FROM_FILES`).

    Args:
        layer, head: draw that layer (row) and that head (column) only; a kind without ``layer`` (a shallower
            decoder) is left out.
        from_token: a word of the text (of the target, for the decoder's kinds): its first occurrence, its first
            piece when it is cut into several (:func:`aiayn.viz.find_token`).

    Raises:
        ValueError: ``layer`` or ``head`` beyond the model's; ``from_token`` a word of no text the model reads.
    """
    from aiayn.viz.attention import FILES, FROM_FILES, plot_attention_grid, plot_from_token

    chosen = _selection(reading, layer, head)
    index = _from_index(reading, from_token) if from_token is not None else {}
    if from_token is not None and not set(index) & set(chosen):
        raise ValueError(f"--from-token {from_token!r} is a query only of {sorted(index)}, which have no "
                         f"--layer {layer}")
    paths = []
    for kind, (layers, heads) in chosen.items():
        queries, keys = reading.tokens[kind]
        title = f"{kind}: {reading.title}"
        if from_token is None:
            paths.append(plot_attention_grid(reading.weights[kind], queries, keys, Path(out) / FILES[kind], title,
                                             _row_label(reading, kind), layers=layers, heads=heads))
        elif kind in index:
            paths.append(plot_from_token(reading.weights[kind], queries, keys, index[kind],
                                         Path(out) / FROM_FILES[kind], f"{title}, from {queries[index[kind]]!r}",
                                         _row_label(reading, kind), layers=layers, heads=heads))
    return paths


def attention_pictures(run: str | os.PathLike, text: str, out: str | os.PathLike,
                       target: str | None = None, *, device: str | torch.device | None = None,
                       layer: int | None = None, head: int | None = None, from_token: str | None = None) -> list[Path]:
    """Every kind of attention of the model in ``run`` (:func:`read_attention`: any text run or Hugging Face
    folder) reading ``text`` (and producing ``target``, for an encoder-decoder: default its own greedy
    translation), drawn by :func:`draw_attention` into the folder ``out``.

    Args:
        device: where the model runs (:func:`aiayn.training.device.resolve`; default: a GPU if any).
        layer, head, from_token: as :func:`draw_attention`'s.

    Raises:
        ValueError: ``device`` names no device of this machine; as :func:`read_attention` and
            :func:`draw_attention`.
    """
    reading = read_attention(run, text, target, device=device)
    return draw_attention(reading, out, layer=layer, head=head, from_token=from_token)


def write_attention_page(reading: Reading, path: str | os.PathLike, *, layer: int | None = None,
                         head: int | None = None, from_token: str | None = None) -> Path:
    """The interactive viewer (:func:`aiayn.viz.attention_html`) of every kind, layer and head of ``reading``,
    opened at ``layer``, ``head`` and hovering ``from_token`` (on the first kind whose queries hold it)."""
    from aiayn.viz.html import attention_html

    chosen = _selection(reading, layer, head)
    kinds = list(reading.weights)
    view: dict[str, int] = {}
    if from_token is not None:
        index = _from_index(reading, from_token)
        shown = [k for k in kinds if k in index and k in chosen]
        if not shown:
            raise ValueError(f"--from-token {from_token!r} is a query only of {sorted(index)}, which have no "
                             f"--layer {layer}")
        view = {"kind": kinds.index(shown[0]), "hover": index[shown[0]]}
    elif layer is not None:
        view = {"kind": kinds.index(next(iter(chosen)))}
    if layer is not None:
        view["layer"] = layer
    if head is not None:
        view["head"] = head
    return attention_html(reading.weights, reading.tokens, path, title=reading.title, view=view or None)


def attention_page(run: str | os.PathLike, text: str, path: str | os.PathLike, target: str | None = None, *,
                   device: str | torch.device | None = None, layer: int | None = None, head: int | None = None,
                   from_token: str | None = None) -> Path:
    """The interactive viewer (:func:`aiayn.viz.attention_html`) of the same attention as
    :func:`attention_pictures`, as one self-contained HTML file (:func:`write_attention_page`).

    Args:
        device: where the model runs, as :func:`attention_pictures`'s (``None``: a GPU when there is one, else
            the CPU).
        layer, head, from_token: the view the page opens at.
    """
    reading = read_attention(run, text, target, device=device)
    return write_attention_page(reading, path, layer=layer, head=head, from_token=from_token)


def viz(what: str, out: str | os.PathLike = "viz", run: str | os.PathLike | None = None, text: str | None = None,
        d_model: int = 512, positions: int = 20, sides: Sequence[int] = (14, 28, 42, 56), channels: int = 96,
        heads: int = 3, window: int = 7, repeats: int = 3, target: str | None = None,
        html: str | os.PathLike | None = None, device: str | torch.device | None = None, *,
        layer: int | None = None, head: int | None = None, from_token: str | None = None) -> list[Path]:
    """Write the pictures ``what`` asks for (module docstring) into the folder ``out``; return their paths.

    Args:
        what: one of :data:`WHATS`.
        out: the folder for the PNG files; for one picture, a path ending in ``.png`` is the file itself.
        run: a text model (``attention``: a run folder or a Hugging Face folder, :func:`read_attention`), any run
            folder (``history``).
        text: the sentence whose attention to draw (``attention``; an encoder-decoder's source); the tokens of
            ``lookahead``, split at spaces (default ``<Begin> I have a cat``).
        target: the translation to draw it for (``attention``, encoder-decoders; default the model's greedy one).
        html: also write the interactive viewer of that attention to this HTML file (``attention``).
        device: where the run's model runs (``attention``): ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``, or
            ``None`` / ``"auto"`` (a GPU when there is one, else the CPU).
        layer, head: draw only that layer, only that head (``attention``).
        from_token: draw the lines from this word to every token instead of the heat maps (``attention``;
            :func:`draw_attention`).
        d_model, positions: size of the positional-encoding picture (default 20 positions of 512 dimensions).
        sides, channels, heads, window, repeats: the maps, layer and timing of ``complexity``.
    """
    from aiayn import viz as pictures

    if what not in WHATS:
        raise ValueError(f"what={what!r} must be one of {WHATS}")
    if what == "attention" and (run is None or text is None):
        raise ValueError("viz attention needs --run (a run folder of `aiayn train` or a Hugging Face folder) and "
                         "--text (a sentence)")
    if what == "history" and run is None:
        raise ValueError("viz history needs --run (a folder of `aiayn train`)")
    if what == "relative" and (run is None or text is None):
        raise ValueError("viz relative needs --run (a Transformer-XL run of `aiayn train lm`) and --text (a text "
                         "file, or text, long enough to fill its memory)")
    for flag, value in (("--d-model", d_model), ("--positions", positions), ("--channels", channels),
                        ("--heads", heads), ("--window", window), ("--repeats", repeats)):
        if value <= 0:
            raise ValueError(f"{flag} must be positive, got {value}")
    for flag, chosen in (("--layer", layer), ("--head", head)):
        if chosen is not None and chosen < 0:
            raise ValueError(f"{flag} must be >= 0, got {chosen}")
    out = Path(out)
    file = out if out.suffix.lower() == ".png" else None  # one picture: the file itself
    if file is not None and what == "all":
        raise ValueError(f"viz {what} writes several pictures: --out must be a folder, got {out}")
    if file is not None:
        out = file.parent
    wanted = WHATS[:7] if what == "all" else (what,)
    name = {w: file or out / f"{w}.png" for w in wanted}
    paths = []
    if "positional" in wanted:
        paths.append(pictures.plot_positional(name["positional"], d_model, positions))
    if "masks" in wanted:
        paths.append(pictures.plot_masks(name["masks"]))
    if "lookahead" in wanted:
        tokens = {"tokens": text.split()} if text else {}  # default: <Begin> I have a cat
        paths.append(pictures.plot_lookahead(name["lookahead"], **tokens))
    if "swin-windows" in wanted:
        paths.append(pictures.plot_swin_windows(name["swin-windows"]))
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
    if what == "relative":
        assert run is not None and text is not None  # refused above otherwise
        paths.append(draw_relative(run, text, name["relative"], device=device))
    if what == "attention" or (what == "all" and run is not None and text is not None):
        assert run is not None and text is not None  # refused above otherwise
        reading = read_attention(run, text, target, device=device)  # the model runs once for both
        if file is not None and what == "attention":  # one picture asked for: drawn aside, then named file
            paths.append(_one_picture(file, lambda folder: draw_attention(reading, folder, layer=layer, head=head,
                                                                          from_token=from_token)))
        else:
            paths.extend(draw_attention(reading, out, layer=layer, head=head, from_token=from_token))
        if html is not None:
            paths.append(write_attention_page(reading, html, layer=layer, head=head, from_token=from_token))
    return paths


def draw_relative(run: str | os.PathLike, text: str, path: str | os.PathLike, *,
                  device: str | torch.device | None = None) -> Path:
    """:func:`aiayn.viz.relative.plot_relative` of the Transformer-XL in ``run`` reading ``text`` (a file's path,
    or the text itself) in the segments it trained on (its ``args.json``'s ``block``, default 128)."""
    import json

    import torch

    from aiayn.pipelines import pipeline
    from aiayn.viz.relative import attention_by_distance, plot_relative

    p = pipeline(run, device=device)
    model, tok = cast(Any, p.model), p.parts["tok"]
    if not hasattr(model, "new_memory"):
        raise ValueError(f"{run} holds a {type(model).__name__}: viz relative draws a model with a memory "
                         f"(Transformer-XL, `aiayn train lm --preset transfo-xl-char`)")
    try:
        is_file = Path(text).is_file()
    except (OSError, ValueError):  # text too long for a file name, or holding a NUL: the text itself
        is_file = False
    if is_file:
        text = Path(text).read_text(encoding="utf-8")
    args = Path(run) / "args.json"
    block = int(json.loads(args.read_text()).get("block", 128)) if args.is_file() else 128
    ids = torch.tensor([tok.encode(text)], device=next(model.parameters()).device)
    weights = attention_by_distance(model, ids, block)
    return plot_relative(weights.cpu(), path, f"{Path(run).name}: mean attention by distance back "
                                              f"(segments of {block}, memory of {model.new_memory().mem_len})")


def _one_picture(file: Path, draw: Any) -> Path:
    """``file``, holding the one picture ``draw(folder)`` writes into a scratch folder beside it.

    Raises:
        ValueError: ``draw`` wrote several pictures (an encoder-decoder's three kinds of attention, every layer
            or head), naming them: ``--out`` must then be a folder.
    """
    import tempfile

    file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=file.parent, prefix=f".{file.name}.") as scratch:
        drawn = draw(scratch)
        if len(drawn) != 1:
            raise ValueError(f"this asks for {len(drawn)} pictures ({', '.join(p.name for p in drawn)}), so --out "
                             f"must be a folder, got {file}; one layer and one head of a model with one kind of "
                             f"attention make one picture")
        os.replace(drawn[0], file)
    return file


__all__ = ["WHATS", "Reading", "attention_page", "attention_pictures", "draw_attention", "draw_relative",
           "read_attention", "viz", "write_attention_page"]
