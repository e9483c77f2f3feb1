"""A results page (``docs/benchmarks.md`` in this repository) from the results files: one table of every
comparison, the machine, what each case measures, and the scaling sweeps. It is regenerated from whatever results
are present, so a case run alone updates its row and keeps the others.

The page holds no absolute path, and names the command that regenerates it: the results folder and the page are
named from the repository root (the nearest folder above the page with a ``pyproject.toml``) when both are inside
it, else from the page's folder; the plot is linked relative to the page. Results files of the older schema
(``aiayn-bench/1``: per-round ratios, ``met`` by their median) are read too, their quartiles computed from the
rounds they kept and ``met`` decided again by the lower quartile, so the page has one rule."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aiayn.benchmark.cases import CASES
from aiayn.benchmark.harness import MIN_ROUNDS, READABLE, SCHEMA, meets, quartiles, verdict

ORDER = [*CASES, "scaling"]  # the table's order; other names after these, by name

HEADER = f"""# Benchmarks

Regenerated from `{{results}}/*.json` by `aiayn bench --out {{results}} --docs {{page}}`, run from
{{where}} (`--report-only` rewrites the page alone from the files there); do not edit by hand.
Every case runs ours and each peer in a process of its own (`aiayn.benchmark.apart`; results from before
2026-12-07, and `--together`, in one process), float32 unless its name ends in `-int8`, eager unless it ends
in `-compiled` (then ours decodes over a static cache with its step compiled, after a first call that compiles and
is not timed), alternating
(A B, then B A: each round starts one side later) after a warm-up, for {MIN_ROUNDS} or more timed rounds.
Times are medians. The ratio is t_peer / t_ours taken
round by round (> 1: ours is faster): the median of the per-round ratios, and in brackets their interquartile
range, the lower and upper quartile (`statistics.quantiles(ratios, n=4, method="inclusive")`). A target is met only
when the **lower quartile** of the per-round ratios clears it (and, for an MFU target, the lower quartile of ours'
per-round MFU), so that about three rounds in four beat it, not only the median: a claim that is met here should
hold on a rerun. MFU is the model's FLOPs per unit of work (counted on ours at float32, the same for every side)
over the median time and the machine's measured float32 matmul peak. Peak memory is what one unit allocates on top
of what was already allocated (weights, optimizer state), as PyTorch's profiler sees it: a C++ engine's own
(CTranslate2's) it does not see, so it shows as n/a. Ours and each peer must compute the same thing (logits within
1e-4, the same tokens) or the row says so; in int8, rounding may flip a close choice and the sequence goes its own
way from there, so the tokens need not agree, and the case's note gives each side's share of tokens equal to ours'
at float32.

What depends on the machine: the throughputs, the matmul peak and MFU, the memory-bandwidth ceiling, and the
ratios too. PyTorch chooses its CPU kernels (oneDNN, the BLAS, its own vectorised loops) by the instructions
the CPU has (the machine line says AVX2 or AVX512 where the results file recorded it), so two sides that lean
on different kernels (products of few rows in decoding, the layer norms and softmax between the matmuls) can
trade places between an AVX2 and an AVX-512 CPU. Large buffers depend on the allocator: glibc's `malloc` maps
buffers above its mmap threshold (at most 32 MiB) fresh from the system and unmaps them when freed, so every
unit pays page faults on them; a side that reuses its buffers (ours in `swin-forward`) gains most where page
faults are dear and nothing under an allocator that keeps freed memory (jemalloc, `MALLOC_MMAP_THRESHOLD_`).
CTranslate2 chooses its matrix products by the CPU's maker (Intel MKL on Intel CPUs, oneDNN on others unless
`CT2_USE_MKL=1`), so its rows can move between an Intel and an AMD CPU of the same instructions. Peak memory
depends on the machine least. Compare figures measured on one machine only.
"""

KINDS = ("comparison", "scaling")  # what the page shows; other files (gpu.py's ``gpu.json``) are left out


def read_results(folder: str | Path) -> list[dict[str, Any]]:
    """Every comparison and scaling sweep the harness wrote in ``folder`` (others are skipped), sorted by case
    name; an older file's comparison is brought up to the current schema (:func:`upgrade`)."""
    results = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("schema") in READABLE and data.get("kind") in KINDS:
            results.append(upgrade(data))
    return sorted(results, key=lambda r: (ORDER.index(r["case"]) if r["case"] in ORDER else len(ORDER), r["case"]))


def upgrade(r: dict[str, Any]) -> dict[str, Any]:
    """A comparison of schema ``aiayn-bench/1`` with the fields of the current one: the quartiles of the
    per-round ratios and of each side's per-round MFU (``mfu x median / seconds`` of each round), and ``met``
    decided by :func:`~aiayn.benchmark.harness.meets`. Anything else is returned as it is."""
    if r.get("schema") == SCHEMA or r.get("kind") != "comparison":
        return r
    r = json.loads(json.dumps(r))  # a copy
    for side in r["sides"].values():
        side["mfu_q1"], side["mfu_q3"] = quartiles([side["mfu"] * side["median_s"] / t for t in side["seconds"]])
    ours = r["sides"][r["ours"]]
    for peer in r["peers"].values():
        peer["ratio_q1"], peer["ratio_q3"] = quartiles(peer["ratios"])
        peer["met"] = meets(r["target"], peer["ratio_q1"], ours["mfu_q1"], peer["check"]["ok"])
    return r


def _rate(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}/s" if x >= 100 else f"{x:.3g} {unit}/s"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _memory(side: dict[str, Any]) -> str:
    """A side's peak memory, or n/a where PyTorch does not see it (a C++ engine's)."""
    return _mib(side["peak_memory_bytes"]) if side.get("torch_memory", True) else "n/a"


def _share(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def _ratio(peer: dict[str, Any]) -> str:
    """The median ratio and, in brackets, the lower and upper quartile of the rounds."""
    spread = f" ({peer['ratio_q1']:.2f}–{peer['ratio_q3']:.2f})" if len(peer["ratios"]) > 1 else ""
    return f"{peer['ratio']:.2f}x{spread}"


def _target(t: dict[str, Any] | None) -> str:
    if t is None:
        return "—"
    return f"≥ {t['ratio']:.2f}x" + (f", MFU ≥ {t['mfu']:.0%}" if t.get("mfu") is not None else "")


def _verdict(peer: dict[str, Any], rounds: int) -> str:
    if not peer["check"]["ok"]:
        return "**missed** (outputs differ)" if peer["met"] is not None else "outputs differ"
    said = verdict(peer["met"], rounds)
    return "—" if said is None else "**missed**" if said == "missed" else said


def _machine(r: dict[str, Any]) -> str:
    m = r["machine"]
    device = "" if m["device"] == "cpu" else f", {m['device']}"
    isa = f" ({m['cpu_capability']})" if m.get("cpu_capability") else ""
    hf = f", transformers {m['transformers']}" if m.get("transformers") else ""
    threads = f"{m['threads']} thread" + ("s" if m["threads"] != 1 else "")
    return (f"{m['cpu']}{isa}, {m['cores']} cores, {threads}{device}; torch {m['torch']}{hf}; "
            f"matmul peak {r['matmul_peak_flops'] / 1e9:,.0f} GFLOP/s")


def _few_rounds(r: dict[str, Any]) -> str:
    return f" ({r['rounds']} rounds)" if r["rounds"] < MIN_ROUNDS else ""


def comparison_rows(r: dict[str, Any]) -> list[str]:
    """One table row per peer of a comparison."""
    ours = r["sides"][r["ours"]]
    name = f"`{r['case']}`" + (" (quick)" if r.get("quick") else _few_rounds(r))
    rows = []
    for peer_name, peer in r["peers"].items():
        side = r["sides"][peer_name]
        rows.append(" | ".join([
            name, _rate(ours["throughput"], r["unit"]), f"{peer_name}: {_rate(side['throughput'], r['unit'])}",
            _ratio(peer), _target(r["target"]), _verdict(peer, r["rounds"]),
            f"{_share(ours['mfu'])} / {_share(side['mfu'])}",
            f"{_memory(ours)} / {_memory(side)}",
        ]))
    return [f"| {row} |" for row in rows]


def _ceiling(r: dict[str, Any], extra: dict[str, Any]) -> str:
    """The memory-bandwidth bound of a batch-1 generation case and the share of it each side reaches: one
    ceiling, or (``-llamacpp`` cases) one for each side by the bytes it reads per token (f32, int8, q8_0), a side
    not named reading what ours does."""
    ceiling, read = extra["ceiling_tokens_per_s"], extra["weight_bytes_per_token"]
    gbs = extra["memory_bandwidth_bytes_per_s"] / 1e9
    if not isinstance(ceiling, dict):
        shares = ", ".join(f"{k} {_share(v['throughput'] / ceiling)}" for k, v in r["sides"].items())
        return (f" Memory-bandwidth ceiling: {_mib(read)} of weights read per token at a measured {gbs:.1f} GB/s = "
                f"{ceiling:.1f} tokens/s; reached: {shares}.")
    bounds = "; ".join(f"{k} {_mib(read[k])} = {ceiling[k]:.1f} tokens/s" for k in ceiling)
    shares = ", ".join(f"{k} {_share(v['throughput'] / ceiling.get(k, ceiling['aiayn']))}"
                       for k, v in r["sides"].items())
    return (f" Memory-bandwidth ceilings at a measured {gbs:.1f} GB/s, by the weights each side reads per token: "
            f"{bounds}; reached: {shares}.")


def _notes(r: dict[str, Any]) -> str:
    """The case's line under "What each case measures"."""
    line = f"- `{r['case']}`: {r['what']}."
    extra = r.get("extra", {})
    if "ceiling_tokens_per_s" in extra:
        line += _ceiling(r, extra)
    if "agreement_with_float32" in extra:
        shares = ", ".join(f"{k} {v:.1%}" for k, v in extra["agreement_with_float32"].items())
        line += f" Tokens equal to ours' at float32, position by position: {shares}"
        if "agreeing_prefix_with_float32" in extra:
            prefix = ", ".join(f"{k} {v:.1f}" for k, v in extra["agreeing_prefix_with_float32"].items())
            line += f"; before the first difference, per sequence of {extra['new_tokens']}: {prefix}"
        line += "."
    failed = [f"{k} ({v['check']['what']})" for k, v in r["peers"].items() if not v["check"]["ok"]]
    if failed:
        line += f" **Outputs differ from** {', '.join(failed)}."
    return line


def scaling_section(r: dict[str, Any], plot: str) -> list[str]:
    att, trf = r["attention"], r["transformer"]
    lines = ["## Scaling" + (" (quick)" if r.get("quick") else ""), "", f"![scaling]({plot})", "",
             (f"One `MultiHeadAttention` (d_model {att['d_model']}, {att['heads']} heads), forward + backward of one "
              f"sequence; windowed = 1-D windows of {att['window']} positions attended separately (Swin's window "
              f"partition along one axis)."), "",
             "| T | full | windowed | full peak memory | windowed peak memory |", "|---:|---:|---:|---:|---:|"]
    for p in att["points"]:
        lines.append(f"| {p['length']} | {p['full_s'] * 1e3:,.2f} ms | {p['windowed_s'] * 1e3:,.2f} ms | "
                     f"{_mib(p['full_peak_bytes'])} | {_mib(p['windowed_peak_bytes'])} |")
    cfg = trf["config"]
    lines += ["", (f"The small Transformer (d_model {cfg['d_model']}, {cfg['n_layers'][0]}+{cfg['n_layers'][1]} "
                   f"layers), forward + backward with the label-smoothed loss; source and target of the same length."),
              "", "| grows | batch | length | time | tokens/s | peak memory |", "|---|---:|---:|---:|---:|---:|"]
    for p in trf["points"]:
        lines.append(f"| {p['sweep']} | {p['batch']} | {p['length']} | {p['seconds'] * 1e3:,.1f} ms | "
                     f"{p['tokens_per_s']:,.0f} | {_mib(p['peak_bytes'])} |")
    return lines


def names(results_dir: str | Path, docs: str | Path) -> dict[str, str]:
    """How the page at ``docs`` names, with no absolute path, the results folder and itself (``results``,
    ``page``: from the repository root when both are inside the repository of ``docs``, else from the page's
    folder; ``where`` says which), and the plot (``plot``, relative to the page). In this repository:
    ``benchmarks/results``, ``docs/benchmarks.md``, ``the repository root``, ``../benchmarks/results/scaling.png``."""
    docs, results_dir = Path(docs).resolve(), Path(results_dir).resolve()
    root = repository_root(docs.parent)
    plot = Path(os.path.relpath(results_dir / "scaling.png", docs.parent)).as_posix()
    if root is not None and results_dir.is_relative_to(root):
        return {"results": results_dir.relative_to(root).as_posix(), "page": docs.relative_to(root).as_posix(),
                "where": "the repository root", "plot": plot}
    return {"results": Path(os.path.relpath(results_dir, docs.parent)).as_posix(), "page": docs.name,
            "where": "the page's folder", "plot": plot}


def render(results: list[dict[str, Any]], results_dir: str | Path, docs: str | Path) -> str:
    """The markdown page for ``results`` (read from ``results_dir``) that will be written at ``docs``; the
    folder, the page and the plot are named as :func:`names` names them."""
    named = names(results_dir, docs)
    comparisons = [r for r in results if r.get("kind") == "comparison"]
    scaling = [r for r in results if r.get("kind") == "scaling"]
    lines = [HEADER.format(**named)]
    if not results:
        return lines[0] + f"\nNo results yet: run `aiayn bench --out {named['results']} --docs {named['page']}`.\n"
    machines = {_machine(r) for r in results}
    if len(machines) == 1:
        lines.append(f"Machine: {machines.pop()}.\n")
    else:
        lines += ["Machines:", ""] + [f"- `{r['case']}`: {_machine(r)}" for r in results] + [""]
    if any(r.get("quick") for r in results):
        lines.append("Rows marked (quick) ran at toy sizes (`--quick`): their numbers say nothing about speed.\n")
    if any(_few_rounds(r) and not r.get("quick") for r in comparisons):
        lines.append(f"Rows marked (N rounds) were measured with fewer than {MIN_ROUNDS} rounds: their quartiles rest "
                     f"on too few rounds to trust; rerun them with `--rounds {MIN_ROUNDS}` or more.\n")
    if comparisons:
        lines += ["| case | ours | peer | ratio (IQR) | target | result | MFU ours / peer | peak memory ours / peer |",
                  "|---|---:|---|---:|---|---|---:|---:|"]
        for r in comparisons:
            lines += comparison_rows(r)
        lines += ["", "## What each case measures", ""] + [_notes(r) for r in comparisons] + [""]
        dates = sorted(r["machine"]["date"][:10] for r in comparisons)
        lines += [f"Measured {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "") + ".", ""]
    for r in scaling:
        lines += scaling_section(r, named["plot"]) + [""]
    return "\n".join(lines).rstrip() + "\n"


def repository_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding a ``pyproject.toml``, or ``None``."""
    start = start.resolve()
    return next((p for p in (start, *start.parents) if (p / "pyproject.toml").is_file()), None)


def page(results_dir: str | Path, docs: str | Path) -> str:
    """The page ``docs`` should hold for the results in ``results_dir`` (:func:`render`)."""
    return render(read_results(results_dir), results_dir, docs)


def write_report(results_dir: str | Path, docs: str | Path) -> Path:
    """Regenerate ``docs`` (markdown) from every results file in ``results_dir`` (:func:`page`); returns its
    path."""
    docs = Path(docs)
    docs.parent.mkdir(parents=True, exist_ok=True)
    text = page(results_dir, docs)
    tmp = docs.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(docs)
    return docs


__all__ = ["names", "page", "read_results", "render", "repository_root", "upgrade", "write_report"]
