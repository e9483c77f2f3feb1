"""The parameter and compute figures the papers print, beside ours (``docs/numbers.md``, ``aiayn count``).

Compute figures come in three units, and each is compared with ours in its own:

    "MACs"            multiply-adds of one forward pass (Swin's and DeiT's "FLOPs"; DETR's "GFLOPs", counted
                      by Detectron2's fvcore, which counts one multiply-add as one flop)
    "training FLOPs"  GPT-3's Table D.1: 6 FLOPs per parameter per training token (2 forward, 4 backward),
                      300B tokens; ours is 3 x our forward FLOPs per token x 300B, attention scores included
    "GPU FLOPs"       the Transformer's Table 2: training time x GPUs x an assumed sustained throughput, a
                      hardware estimate with nothing to compare a formula with (shown, not compared)
"""

from __future__ import annotations

from dataclasses import dataclass

from aiayn.analysis.formulas import counts


@dataclass(frozen=True)
class Published:
    """One preset's figures as the paper prints them.

    Attributes:
        parameters: the parameter count as printed (65e6 for "65M").
        source: where it is printed.
        compute: the compute figure as printed, or ``None``.
        unit: ``"MACs"``, ``"training FLOPs"`` or ``"GPU FLOPs"`` (module docstring).
        size: the input the compute figure is for: an image side, ``(height, width)``, or ``None``.
        note: what to know when comparing.
    """

    parameters: float
    source: str
    compute: float | None = None
    unit: str = "MACs"
    size: int | tuple[int, int] | None = None
    note: str = ""


GPT3_TOKENS = 300e9  # Table D.1: every GPT-3 size was trained on 300B tokens

_T2 = "Vaswani et al. 2017, Table 3 (training cost: Table 2)"
_GPT2 = "Radford et al. 2019, Table 2"
_GPT2_NOTE = "the released checkpoint, which these presets are exactly, is larger than the paper's count"
_GPT3 = "Brown et al. 2020, Table 2.1"
_SWIN = "Liu et al. 2021, Table 1 (224 x 224)"

PUBLISHED: dict[str, Published] = {
    "transformer-base": Published(65e6, _T2, 3.3e18, "GPU FLOPs",
                                  note="the paper does not say what it counts; here one shared 37,000-token table, "
                                       "tied to the output"),
    "transformer-big": Published(213e6, _T2, 2.3e19, "GPU FLOPs"),
    "gpt2": Published(117e6, _GPT2, note=_GPT2_NOTE),
    "gpt2-medium": Published(345e6, _GPT2, note=_GPT2_NOTE),
    "gpt2-large": Published(762e6, _GPT2, note=_GPT2_NOTE),
    "gpt2-xl": Published(1542e6, _GPT2, note=_GPT2_NOTE),
    "gpt3-small": Published(125e6, _GPT3),
    "gpt3-medium": Published(350e6, _GPT3),
    "gpt3-large": Published(760e6, _GPT3),
    "gpt3-xl": Published(1.3e9, _GPT3, note="the table's 24 heads of 128 do not divide d_model 2048; 16 here"),
    "gpt3-2.7b": Published(2.7e9, _GPT3),
    "gpt3-6.7b": Published(6.7e9, _GPT3),
    "gpt3-13b": Published(13e9, _GPT3, note="d_model 5120 = 40 heads x 128 (the table prints 5140)"),
    "gpt3-175b": Published(175e9, _GPT3 + "; Table D.1", 3.14e23, "training FLOPs",
                           note="Table D.1 counts 174,600M parameters and 6ND, leaving attention scores out"),
    "llama2-7b": Published(7e9, "Touvron et al. 2023 (Llama 2), Table 1",
                           note="the paper's 7B is rounded: the released model has 6,738,415,616"),
    "llama3-8b": Published(8e9, "Meta's Llama 3 model card"),
    "mistral-7b": Published(7.3e9, "Mistral AI's release notes (\"a 7.3B parameter model\"); the paper's title "
                                   "rounds to 7B"),
    "bert-base": Published(110e6, "Devlin et al. 2019, section 3"),
    "bert-large": Published(340e6, "Devlin et al. 2019, section 3"),
    "bart-base": Published(140e6, "fairseq's BART README (the paper prints no count)"),
    "bart-large": Published(400e6, "fairseq's BART README (the paper prints no count)"),
    "vit-b16": Published(86e6, "Dosovitskiy et al. 2021, Table 1; multiply-adds: Touvron et al. 2021 (DeiT-B)",
                         17.6e9, "MACs", 224),
    "vit-l16": Published(307e6, "Dosovitskiy et al. 2021, Table 1"),
    "swin-t": Published(28e6, _SWIN, 4.5e9, "MACs", 224),
    "swin-s": Published(50e6, _SWIN, 8.7e9, "MACs", 224),
    "swin-b": Published(88e6, _SWIN, 15.4e9, "MACs", 224),
    "swin-l": Published(197e6, _SWIN, 34.5e9, "MACs", 224),
    "detr-r50": Published(41e6, "Carion et al. 2020, Table 1", 86e9, "MACs", (800, 1066),
                          note="the paper's GFLOPs are Detectron2's (fvcore: a multiply-add is one flop), on COCO "
                               "validation images; ours at 800 x 1066"),
}


def ours(name: str) -> tuple[int, float | None]:
    """``(parameters, compute)`` of preset ``name`` from the formulas, the compute in the unit and at the size
    of its published figure (``None`` where there is none to compare with)."""
    pub = PUBLISHED[name]
    c = counts(name, image_size=pub.size) if pub.size is not None else counts(name)
    if pub.compute is None or pub.unit == "GPU FLOPs":
        return c.total_parameters, None
    if pub.unit == "training FLOPs":  # 3 x forward (forward + backward) FLOPs per token, 300B tokens
        from aiayn.models import preset

        return c.total_parameters, 3 * c.flops / preset(name).max_len * GPT3_TOKENS
    return c.total_parameters, float(c.total_macs)


__all__ = ["GPT3_TOKENS", "PUBLISHED", "Published", "ours"]
