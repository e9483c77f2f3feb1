"""Write docs/numbers.md: the papers' parameter and compute figures beside ours, for every paper preset.

    python scripts/make_numbers.py           # rewrite docs/numbers.md
    python scripts/make_numbers.py --check   # exit 1 if docs/numbers.md is not what this script writes

Ours come from the closed-form formulas of ``aiayn.analysis.formulas`` (no weights are built), which the tests
hold equal, part by part, to the parameters of the built models and to the multiply-adds ``FlopCounterMode``
measures on small ones. A preset the papers describe but the registry does not have yet reads "not built yet".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import aiayn
from aiayn.analysis.complexity import layer_formulas
from aiayn.analysis.formulas import counts, resnet_classifier
from aiayn.analysis.published import PUBLISHED, ours

DOC = Path(__file__).resolve().parents[1] / "docs" / "numbers.md"


def _n(x: float, compute: bool = False, printed: bool = False) -> str:
    """``4.49e9`` -> ``"4.49G"`` (``compute``) or ``"4.49B"``; ``printed``: as a paper prints it (``"175B"``)."""
    if x >= 1e15:
        return f"{x:.3g}".replace("e+", "e")
    for factor, suffix in ((1e12, "T"), (1e9, "G" if compute else "B"), (1e6, "M")):
        if x >= factor:
            text = f"{x / factor:.{1 if x / factor >= 10 else 2}f}"
            return (text.rstrip("0").rstrip(".") if printed else text) + suffix
    return f"{x:,.0f}"


def _size(size) -> str:
    return "" if size is None else f"{size} x {size}" if isinstance(size, int) else f"{size[0]} x {size[1]}"


def _diff(mine: float, paper: float) -> str:
    return f"{(mine - paper) / paper:+.1%}"


def comparison_rows(names: list[str]) -> list[str]:
    rows = []
    for name in PUBLISHED:
        pub = PUBLISHED[name]
        paper_compute = "" if pub.compute is None else f"{_n(pub.compute, True, True)} {pub.unit}"
        if pub.size is not None:
            paper_compute += f" at {_size(pub.size)}"
        if name not in names:
            rows.append(f"| {name} | {_n(pub.parameters, printed=True)} | not built yet | | {paper_compute} "
                        f"| not built yet | | {pub.source} |")
            continue
        params, compute = ours(name)
        mine = "" if compute is None else f"{compute / 1e9:.2f}G" if compute < 1e15 else _n(compute, True)
        if pub.unit == "GPU FLOPs":
            mine = "(GPU time, not comparable)"
        diff = "" if compute is None or pub.compute is None else _diff(compute, pub.compute)
        note = f"{pub.source}{'; ' + pub.note if pub.note else ''}"
        rows.append(f"| {name} | {_n(pub.parameters, printed=True)} | {params:,} | {_diff(params, pub.parameters)} | "
                    f"{paper_compute} | {mine} | {diff} | {note} |")
    return rows


def ours_rows(names: list[str]) -> list[str]:
    rows = []
    for name in PUBLISHED:
        if name not in names:
            continue
        pub = PUBLISHED[name]
        c = counts(name, image_size=pub.size) if pub.size is not None else counts(name)
        cfg = aiayn.preset(name)
        size = _size(pub.size or getattr(cfg, "image_size", None)) or f"{cfg.max_len} tokens"
        scores = c.macs["attention scores"] / c.total_macs
        rows.append(f"| {name} | {size} | {c.total_parameters:,} | {c.total_macs:,} | {_n(c.flops, True)} | "
                    f"{scores:.1%} |")
    return rows


# Table 1 of Vaswani et al. 2017, with the sizes of benchmarks/layer_complexity.py
TABLE1 = {"self-attention": ("self-attention", "O(n^2 d)", "O(1)", "O(1)", "4nd^2 + 2n^2 d"),
          "recurrent": ("recurrent (LSTM)", "O(n d^2)", "O(n)", "O(n)", "8nd^2"),
          "convolutional": ("convolutional", "O(k n d^2)", "O(1)", "O(log_k(n))", "k n d^2"),
          "restricted": ("self-attention (restricted)", "O(r n d)", "O(1)", "O(n/r)", "4nd^2 + 2nrd")}
TABLE1_D, TABLE1_K, TABLE1_R, TABLE1_N = 256, 3, 64, (256, 512, 4096)


def measured(layer: str) -> str:
    """Where ``layer``'s measured time crosses the LSTM's, from ``benchmarks/results/layer_complexity.json``
    (rounded to 10), or "(not measured)"."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "layer_complexity.json"
    if not path.is_file():
        return "(not measured)"
    n = json.loads(path.read_text())["summary"].get(f"measured_seconds_crossing_n_{layer}_vs_lstm")
    return "(no crossing measured)" if n is None else f"{round(n, -1):.0f}"


def layer_rows() -> list[str]:
    rows = []
    at = {n: layer_formulas(n, TABLE1_D, TABLE1_K, TABLE1_R) for n in TABLE1_N}
    for kind in TABLE1:
        name, order, sequential, path, ours_formula = TABLE1[kind]
        macs = " | ".join(_n(at[n][kind]["macs"], True) for n in TABLE1_N)
        steps = " / ".join(f"{at[n][kind]['sequential']:,}" for n in TABLE1_N)
        paths = " / ".join(f"{at[n][kind]['path']:,}" for n in TABLE1_N)
        rows.append(f"| {name} | {order} | {sequential} | {path} | {ours_formula} | {macs} | {steps} | {paths} |")
    return rows


# torchvision's model cards (ResNet50_Weights / ResNet101_Weights.IMAGENET1K_V1): parameters, GFLOPS (which
# are multiply-adds) at 224 x 224. The Swin paper (section 3.3) says Swin-T and Swin-S have "complexity
# similar to" ResNet-50 and ResNet-101; its Table 1 prints no ResNet.
RESNETS = {"ResNet-50": ((3, 4, 6, 3), 25_557_032, 4.09e9), "ResNet-101": ((3, 4, 23, 3), 44_549_160, 7.80e9)}
SWIN_CLAIM = {"swin-t": "0.25x", "swin-s": "0.5x", "swin-b": "1x", "swin-l": "2x"}


def swin_rows(names: list[str]) -> tuple[list[str], list[str]]:
    """Swin-T/S/L against Swin-B, and Swin-T/S against ResNet-50/101: parameters and multiply-adds at 224."""
    if "swin-b" not in names:
        return [], []
    ref_p, ref_m = ours("swin-b")
    pub_b = PUBLISHED["swin-b"]
    assert ref_m is not None and pub_b.compute is not None  # Swin's Table 1 gives both
    sizes = []
    for name, claim in SWIN_CLAIM.items():
        if name not in names:
            continue
        p, m = ours(name)
        pub = PUBLISHED[name]
        assert m is not None and pub.compute is not None
        sizes.append(f"| {name} | {claim} | {p / 1e6:.1f}M | {p / ref_p:.2f}x | "
                     f"{pub.parameters / pub_b.parameters:.2f}x | {m / 1e9:.2f}G | {m / ref_m:.2f}x | "
                     f"{pub.compute / pub_b.compute:.2f}x |")
    pairs = []
    for swin_name, resnet_name in (("swin-t", "ResNet-50"), ("swin-s", "ResNet-101")):
        if swin_name not in names:
            continue
        p, m = ours(swin_name)
        assert m is not None
        depths, paper_p, paper_m = RESNETS[resnet_name]
        c = resnet_classifier(depths, 224)
        pairs.append(f"| {swin_name} / {resnet_name} | {p:,} / {c.total_parameters:,} (card: {paper_p:,}) | "
                     f"{p / c.total_parameters:.2f}x | {m / 1e9:.2f}G / {c.total_macs / 1e9:.2f}G (card: "
                     f"{paper_m / 1e9:.2f}G) | {m / c.total_macs:.2f}x |")
    return sizes, pairs


def render() -> str:
    """The text of docs/numbers.md."""
    names = aiayn.presets()
    lines = [
        "# Parameters and compute: the papers beside aiayn",
        "",
        ("Generated by `python scripts/make_numbers.py` from `aiayn.analysis` (the formulas, no weights built); do "
         "not edit by hand. `aiayn count PRESET` prints any row by part."),
        "",
        ("Units. A multiply-add (MAC) is 2 FLOPs. Ours count the matmuls and convolutions of one forward pass "
         "(`FlopCounterMode` counts the same ops; the tests hold formulas and measurement equal on small models of "
         "every family). Papers mix units: Swin's \"FLOPs\" and DeiT's figure for ViT-B are multiply-adds; DETR's "
         "\"GFLOPs\" come from Detectron2's counter (fvcore), which counts a multiply-add as one flop, on COCO "
         "images (ours at 800 x 1066); GPT-3's Table D.1 is training FLOPs, 6 per parameter per token over 300B "
         "tokens (ours: 3 x our forward FLOPs per token, attention scores included, x 300B); the Transformer's "
         "Table 2 estimates training FLOPs from GPU time, nothing a formula can match."),
        "",
        "## The papers' figures and ours",
        "",
        "| preset | parameters (paper) | ours | diff | compute (paper) | ours | diff | source |",
        "|---|---:|---:|---:|---|---:|---:|---|",
        *comparison_rows(names),
        "",
        "## Ours at the reference input",
        "",
        "One example; text models at their context (`max_len`), image models at the papers' size.",
        "",
        "| preset | input | parameters | forward multiply-adds | forward FLOPs | attention scores |",
        "|---|---|---:|---:|---:|---:|",
        *ours_rows(names),
        "",
    ]
    n_cols = " | ".join(f"n = {n}" for n in TABLE1_N)
    lines += [
        "## Why self-attention: one layer of each kind (Vaswani et al. 2017, Table 1)",
        "",
        ("The paper's orders (complexity per layer, sequential operations, maximum path length between two "
         "positions) beside the forward multiply-adds of our layers (`aiayn.analysis.complexity.layer_formulas`: "
         f"`MultiHeadAttention`, `nn.LSTM`, `nn.Conv1d`, attention over a band of r keys) at d = {TABLE1_D}, "
         f"k = {TABLE1_K}, r = {TABLE1_R}. Path lengths: a stack of dilated convolutions reaches n positions in "
         "ceil(log_k n) layers, restricted attention in n/r."),
        "",
        f"| layer type | complexity per layer | sequential operations | maximum path length | ours, forward MACs | "
        f"{n_cols} | sequential ops ({' / '.join(map(str, TABLE1_N))}) | max path ({' / '.join(map(str, TABLE1_N))}) |",
        "|---|---|---|---|---|" + "---:|" * len(TABLE1_N) + "---:|---:|",
        *layer_rows(),
        "",
        ("Where the curves cross. Self-attention costs less than the recurrence while 4nd^2 + 2n^2 d < 8nd^2, "
         f"that is n < 2d ({2 * TABLE1_D} here); the paper's \"n smaller than d\" compares n^2 d with n d^2 and "
         "leaves the projections out. The k = 3 convolution's k n d^2 is below attention's 4nd^2 projections at "
         f"every n; restricted attention (r = {TABLE1_R} < 2d) is below the recurrence at every n and equals full "
         "attention while n <= r. These are multiply-adds. `python benchmarks/layer_complexity.py` measures all "
         "four (forward + backward time, peak memory; `benchmarks/results/layer_complexity.png`): on one CPU "
         f"thread the explicit attention overtakes the LSTM at n of about {measured('self-attention')} and the "
         f"fused kernel at about {measured('fused-attention')}, either side of 2d. The recurrence's n steps wait "
         "for each other, which costs little on one thread "
         "(which runs everything in turn anyway) and would cost more on parallel hardware; the explicit "
         "attention's (H, n, n) scores make its memory grow 4x per doubling of n, which the fused kernel avoids."),
        "",
    ]
    sizes, pairs = swin_rows(names)
    if sizes:
        lines += [
            "## Swin's sizes: against Swin-B, and against ResNet",
            "",
            ("Liu et al. 2021 (section 3.3) build Swin-T, Swin-S and Swin-L at \"about 0.25x, 0.5x and 2x the model "
             "size and computational complexity\" of Swin-B, and say Swin-T and Swin-S have complexity similar to "
             "ResNet-50 and ResNet-101. Ours from the formulas at 224 x 224; the paper's ratios from its Table 1 "
             "(28M/50M/88M/197M, 4.5G/8.7G/15.4G/34.5G). ResNets: ours from `aiayn.analysis.formulas."
             "resnet_classifier`, beside the figures of torchvision's model cards (ResNet50_Weights / "
             "ResNet101_Weights; their \"GFLOPS\" are multiply-adds); Swin's Table 1 lists no ResNet."),
            "",
            "| model | claimed | parameters | / Swin-B | paper / Swin-B | multiply-adds | / Swin-B | paper / Swin-B |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *sizes,
            "",
            ("The claim is loose at the small end: Swin-T is nearer a third of Swin-B than a quarter (C = 96 against "
             "128, and 6 blocks in stage 3 against 18), in the paper's figures as in ours. Swin-T and Swin-S are "
             "about 1.1x ResNet-50 and ResNet-101 in both parameters and multiply-adds."),
            "",
            "| pair | parameters | ratio | multiply-adds at 224 | ratio |",
            "|---|---:|---:|---:|---:|",
            *pairs,
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/numbers.md is out of date")
    p.add_argument("--out", type=Path, default=DOC)
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date: run python scripts/make_numbers.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
