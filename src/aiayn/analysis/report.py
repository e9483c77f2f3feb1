"""Parameters and forward multiply-adds of any preset, by part (what ``aiayn count`` prints).

Parameters are counted module by module on the meta device (no weights: ``gpt3-175b`` counts on a laptop) and
the multiply-adds come from the closed-form formulas of :mod:`aiayn.analysis.formulas`, which the tests hold
equal to what ``FlopCounterMode`` measures on real small models.
"""

from __future__ import annotations

from typing import Any

from aiayn.analysis import MAC_PARTS, PARAMETER_PARTS, parameter_table
from aiayn.analysis.formulas import counts, default_size
from aiayn.analysis.published import PUBLISHED, ours
from aiayn.models import family_of, preset

UNITS = "multiply-adds (MACs) of the matmuls and convolutions of one forward pass; 1 MAC = 2 FLOPs"


def count(name: str, seq_len: int | None = None, image_size: int | tuple[int, int] | None = None,
          batch: int = 1) -> dict[str, Any]:
    """Parameters and forward multiply-adds of preset ``name``, by part.

    Args:
        name: a preset name (``aiayn.presets()``).
        seq_len: positions of a text model (encoder-decoder: source and target each); default its ``max_len``.
        image_size: a side or ``(height, width)`` of an image model; default its ``image_size`` (DETR 800 x 1066).
        batch: examples per forward pass.

    Returns:
        ``{"preset", "input", "batch", "parameters": {part: n, "total"}, "macs": {part: n, "total"}, "flops",
        "published"}``; ``input`` is ``{"seq_len": L}`` or ``{"image_size": [H, W]}``.
    """
    cfg = preset(name)
    image = family_of(cfg).inputs == "image"
    if image and seq_len is not None:
        raise ValueError(f"--seq-len is for text models; {name} is an image model, give --image-size")
    if not image and image_size is not None:
        raise ValueError(f"--image-size is for image models; {name} is a text model, give --seq-len")
    for flag, value in (("--seq-len", seq_len), ("--batch", batch)):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{flag} must be a positive integer, got {value!r}")
    c = counts(cfg, seq_len=seq_len, image_size=image_size, batch=batch)
    table = parameter_table(cfg)  # module by module; the formulas agree part by part (tests/analysis)
    size: int | tuple[int, int] | list[int] = (image_size if image else seq_len) or default_size(cfg)
    if image:
        size = [size, size] if isinstance(size, int) else list(size)
    report = {
        "preset": name, "input": {"image_size" if image else "seq_len": size}, "batch": batch,
        "parameters": table, "macs": {**c.macs, "total": c.total_macs}, "flops": c.flops, "units": UNITS,
        "published": None,
    }
    if name in PUBLISHED:
        pub = PUBLISHED[name]
        report["published"] = {"parameters": pub.parameters, "compute": pub.compute, "unit": pub.unit,
                               "source": pub.source, "ours": dict(zip(("parameters", "compute"), ours(name)))}
    return report


def human(n: float, compute: bool = False) -> str:
    """``174604259328`` -> ``"174.6B"`` (a count) or ``"174.6G"`` (``compute``); past 10^15, ``"3.14e+23"``."""
    if abs(n) >= 1e15:
        return f"{n:.3g}"
    units = ((1e12, "T"), (1e9, "G" if compute else "B"), (1e6, "M"), (1e3, "k"))
    for factor, suffix in units:
        if abs(n) >= factor:
            return f"{n / factor:.{1 if n / factor >= 10 else 2}f}{suffix}"
    return f"{n:.0f}"


def _printed(n: float, compute: bool = False) -> str:
    """As a paper prints it: ``"175B"``, ``"4.5G"``."""
    text = human(n, compute)
    number = text.rstrip("TGBMk")
    return (number.rstrip("0").rstrip(".") if "." in number else number) + text[len(number):]


def _precise(n: float) -> str:
    return f"{n / 1e9:.2f}G" if n < 1e15 else human(n, True)


def _published_lines(name: str, pub: dict[str, Any]) -> list[str]:
    mine = pub["ours"]
    diff = f"{(mine['parameters'] - pub['parameters']) / pub['parameters']:+.1%}"
    lines = [f"  published: {_printed(pub['parameters'])} parameters (ours {diff})  [{pub['source']}]"]
    if pub["compute"] is None:
        return lines
    if pub["unit"] == "GPU FLOPs":
        lines.append(f"  published: {human(pub['compute'], True)} training FLOPs, from GPU time x an assumed "
                     f"throughput (nothing to compare a formula with)")
    elif pub["unit"] == "training FLOPs":
        lines.append(f"  published: {human(pub['compute'], True)} training FLOPs (6 per parameter per token, 300B "
                     f"tokens); ours, 3 x forward x 300B tokens: {human(mine['compute'], True)} "
                     f"({(mine['compute'] - pub['compute']) / pub['compute']:+.1%})")
    else:
        size = PUBLISHED[name].size
        assert size is not None  # every entry with a figure in MACs gives the size it is for
        at = f"{size} x {size}" if isinstance(size, int) else f"{size[0]} x {size[1]}"
        lines.append(f"  published: {_printed(pub['compute'], True)} multiply-adds at {at}; ours there "
                     f"{_precise(mine['compute'])} ({(mine['compute'] - pub['compute']) / pub['compute']:+.1%})")
    return lines


def format_count(report: dict[str, Any]) -> str:
    """The report of :func:`count` as a table."""
    params, macs = report["parameters"], report["macs"]
    size = report["input"]
    what = (f"{report['batch']} x {size['seq_len']} tokens" if "seq_len" in size
            else f"{report['batch']} image{'s' if report['batch'] > 1 else ''} of {size['image_size'][0]} x "
                 f"{size['image_size'][1]}")
    lines = [f"{report['preset']}: parameters, and multiply-adds of a forward pass of {what}",
             f"  {'part':<16}{'parameters':>18}{'share':>8}{'multiply-adds':>22}{'share':>8}"]

    def row(label: str, p: int | None, m: int | None) -> str:
        ps = f"{p:>18,}{p / params['total']:>8.1%}" if p is not None else " " * 26
        ms = f"{m:>22,}{m / max(macs['total'], 1):>8.1%}" if m is not None else ""
        return f"  {label:<16}{ps}{ms}".rstrip()

    for part in PARAMETER_PARTS:
        if part == "attention":
            lines.append(row("attention", params[part], macs["attention projections"] + macs["attention scores"]))
            lines.append(row("  projections", None, macs["attention projections"]))
            lines.append(row("  scores", None, macs["attention scores"]))
        elif params[part] or (part in MAC_PARTS and macs[part]) or part in ("embeddings", "norms", "output"):
            lines.append(row(part, params[part], macs[part] if part in MAC_PARTS else None))
    lines.append(row("total", params["total"], macs["total"]))
    lines.append(f"  = {human(params['total'])} parameters; {human(macs['total'], True)} multiply-adds = "
                 f"{human(report['flops'], True)} FLOPs")
    if report["published"]:
        lines.extend(_published_lines(report["preset"], report["published"]))
    lines.append(f"  {UNITS}; Swin's and ViT's \"FLOPs\" and DETR's \"GFLOPs\" are multiply-adds")
    return "\n".join(lines)


__all__ = ["count", "format_count", "human"]
