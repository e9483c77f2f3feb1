"""The decoding targets of issue 58, one column per CPU family measured, from the ``aiayn bench`` results files of
each: the README's table between ``<!-- cpu-table -->`` and ``<!-- /cpu-table -->``.

    python benchmarks/cpu_table.py              # print the table
    python benchmarks/cpu_table.py --readme     # write it into README.md
    python benchmarks/cpu_table.py --check      # exit 1 if README.md's table is not what this script writes

Each folder of :data:`FOLDERS` holds one machine's results (``aiayn bench --out FOLDER ...``); a cell is the ratio
t_peer / t_ours, median of the rounds and in brackets their lower quartile, which decides the target (met when it
clears it); "not run" where the folder has no such case. The column names the CPU, its vector instructions and the
date, as its results files recorded them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FOLDERS = [RESULTS, RESULTS / "amd-epyc", RESULTS / "amd-epyc-avx512"]  # Intel Xeon (Sapphire Rapids, AVX-512 and
# AMX), AMD EPYC with AVX2 alone, AMD EPYC with AVX-512 (Zen 4): each a column
README = ROOT / "README.md"
BEGIN, END = "<!-- cpu-table -->", "<!-- /cpu-table -->"

ROWS = [  # (what, case, peer, target: the lower quartile of t_peer / t_ours must reach it)
    ("Marian-shaped greedy, 16 x 24, 64 new: compiled f32 / CTranslate2 f32", "decode-greedy-ct2-compiled",
     "ctranslate2.Translator", 1.0),
    ("the same, beam 4: compiled f32 / CTranslate2 f32", "decode-beam-ct2-compiled", "ctranslate2.Translator", 1.0),
    ("GPT-2 124M greedy, batch 1, 256 new: compiled f32 / CTranslate2 f32", "gpt2-generate-ct2-compiled",
     "ctranslate2.Generator", 1.0),
    ("Marian-shaped greedy: compiled int8 / CTranslate2 int8", "decode-greedy-ct2-int8-compiled",
     "ctranslate2.Translator", 1.0),
    ("the same, beam 4: compiled int8 / CTranslate2 int8", "decode-beam-ct2-int8-compiled", "ctranslate2.Translator",
     1.0),
    ("GPT-2 124M greedy: compiled int8 / CTranslate2 int8", "gpt2-generate-ct2-int8-compiled", "ctranslate2.Generator",
     1.0),
    ("Llama-shaped 124M, batch 1: compiled f32 / llama.cpp f32", "llama-124m-generate-llamacpp-compiled",
     "llama.cpp f32", 0.8),
    ("the same: compiled int8 / llama.cpp q8_0", "llama-124m-generate-llamacpp-int8-compiled", "llama.cpp q8_0", 0.6),
    ("GPT-2 124M greedy: compiled / transformers static cache + compiled", "gpt2-generate-compiled",
     "GPT2LMHeadModel static+compiled", 1.2),
]


def column(folder: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """The folder's machine as a column heading, and its results files by case."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("kind") == "comparison" and not result.get("quick"):
            found[result["case"]] = result
    dates = sorted(r["machine"]["date"][:10] for c, r in found.items() if c in {row[1] for row in ROWS})
    machine = next((r["machine"] for c, r in found.items() if c in {row[1] for row in ROWS}), None)
    if machine is None:
        return f"{folder.name}: nothing run", found
    flags = machine.get("cpu_flags") or [machine.get("cpu_capability", "")]
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return f"{machine['cpu']} ({', '.join(flags)}; {span})", found


def cell(found: dict[str, dict[str, Any]], case: str, peer: str, target: float) -> str:
    result = found.get(case)
    if result is None or peer not in result["peers"]:
        return "not run"
    p = result["peers"][peer]
    said = "met" if p["ratio_q1"] >= target and p["check"]["ok"] else "missed"
    return f"{p['ratio']:.2f}x ({p['ratio_q1']:.2f}), {said}"


def table(folders: list[Path]) -> str:
    columns = [column(f) for f in folders]
    lines = ["| target (their time over ours) | " + " | ".join(name for name, _ in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for what, case, peer, target in ROWS:
        cells = [cell(found, case, peer, target) for _, found in columns]
        lines.append(f"| {what} >= {target:.1f}x | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def with_table(text: str, made: str) -> str:
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + made + "\n" + text[stop:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--readme", action="store_true", help="write the table into README.md")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md's table differs from this one")
    args = p.parse_args(argv)
    made = table(FOLDERS)
    if args.check:
        text = README.read_text()
        if with_table(text, made) != text:
            print("README.md's per-CPU table is stale: run python benchmarks/cpu_table.py --readme", file=sys.stderr)
            return 1
        return 0
    if args.readme:
        README.write_text(with_table(README.read_text(), made))
        return 0
    print(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
