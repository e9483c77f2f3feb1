"""Positions matter, and how they are made matters little: three measurements on small Transformers.

    python benchmarks/positions.py                  # all three parts: ~15 CPU-minutes of one thread (see below)
    python benchmarks/positions.py --parts ambiguous  # one part (dates, multi30k, ambiguous); the others' results kept
    python benchmarks/positions.py --quick          # toy sizes, seconds: a smoke test that measures nothing

writes ``benchmarks/results/positions.json`` and ``positions.png``. The recorded results ran as five processes
of one thread each on a busy shared 2-core machine (about 14 CPU-minutes in all, 30 minutes of wall clock),
and were merged:

    python benchmarks/positions.py --parts dates --seeds 1 --seed-offset 0 --out /tmp/p-dates-0  # and offset 1
    python benchmarks/positions.py --parts multi30k --seeds 1 --seed-offset 0 --out /tmp/p-m30k-0  # and offset 1
    python benchmarks/positions.py --parts ambiguous --out /tmp/p-ambiguous
    python benchmarks/positions.py --merge /tmp/p-*/positions.json       # -> benchmarks/results/positions.*

(a) Learned vs sinusoidal positions, trained the same way (the paper's Table 3, row E: 25.7 vs 25.8 BLEU):
    the default made-up dates task (``aiayn train``, free English dates -> ISO, characters; exact match on the
    recipe's 500 held-out pairs) and a short Multi30k de -> en run (joint BPE of 2,000; BLEU with sacrebleu,
    greedy). Both shrunk to fit the budget: d_model 64, 4 heads, d_ff 256, 2 + 2 layers (the tiny preset is
    128 wide); dates 1,000 updates (the recipe's), Multi30k 400 updates of <= 2,048 tokens (the preset's 1,433
    updates of a 7.6M model are an hour). Multi30k's BLEU is therefore far below a real run's: only the gap
    between the two ways of making positions is the result.
(b) No positions on a task only order can solve: ``ambiguous-dates`` ("05.03.2019" -> "2019-03-05", day
    first, day and month both in 1..12). With a byte-level BPE every source is exactly five tokens
    (day . month . year), so without positions the encoder sees a bag {05, 03, ., ., 2019}: the same for
    05.03 and 03.05. Whatever it outputs is right for at most one of the two, so on the 11 in 12 pairs whose
    day differs from the month it can reach 50% at most, and overall 1/12 + 11/24 = 54.2%, in expectation;
    on the held-out pairs with day != month together with their swaps it is 50% at most, exactly. (A swap
    may be a training pair; that can only help the model with positions.) 20,000 training pairs, 300 updates.
(c) Adding vs concatenating at equal width C = 64: the package adds (``positional="sinusoidal"``; its
    ``"sinusoidal-concat"`` is tensor2tensor's layout of sin and cos halves, still added). Here a small module
    concatenates C - P = 32 token dimensions with P = 32 sinusoidal ones, trained like (a)'s dates runs (the
    output projection is untied, as a (V, 32) table cannot be tied to a 64-wide output: 1,504 parameters
    fewer in all).
    Beside it: the cosine between the sinusoidal encodings and the trained token embeddings of (a)'s dates
    and Multi30k models (random vectors in C dimensions: E|cos| ~ sqrt(2 / (pi C))), and what concatenation
    would cost the base model (``aiayn.analysis.counts``): widening every layer to C + P, or narrowing tokens.

Chosen on validation, before these runs (pilot runs with data seed 100, whose held-out pairs are not these
seeds' held-out pairs; Multi30k's val split), within the time budget rather than tuned: the model size and
updates above. Pilots: sinusoidal dates 95.2% exact match at 1,000 updates, learned 54.6% (88.8% at 2,000:
learned positions start as N(0, 0.02^2) beside token embeddings scaled to unit variance, so they must grow
before they carry the order); ambiguous dates 92% at 100 updates and 100% at 400 with sinusoidal positions;
Multi30k 6.2 validation BLEU at 300 updates (peak rate 2e-3, linear decay; not tuned further). Reported: the
held-out pairs of seeds 0, 1 (dates) and 0, 1, 2 (ambiguous dates), and Multi30k's test_2016_flickr, each
scored once, at the last update; no choice reads them. The recipes also log a loss on their held-out split at
the last update; nothing is chosen from it.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import aiayn
from aiayn import recipes
from aiayn.analysis import counts
from aiayn.benchmark.scripts import script_args
from aiayn.data import load_tokenizer, read_corpus
from aiayn.evaluation import corpus_scores
from aiayn.layers.positional import sinusoidal_encoding
from aiayn.pipelines.translation import translate_texts
from aiayn.recipes import base
from aiayn.recipes.translation import Translation

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
DATA_DIR = HERE.parent.parent / "shared" / "data" / "multi30k"
PARTS = ("dates", "multi30k", "ambiguous")
SMALL = {"d_model": 64, "n_heads": 4, "d_ff": 256, "n_encoder_layers": 2, "n_decoder_layers": 2}
QUICK = {"seeds": 1, "dates_steps": 8, "multi30k_steps": 4, "ambiguous_steps": 8, "n_train": 400,
         "ambiguous_n_train": 400, "n_test": 16, "m30k_pairs": 400}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--seeds", type=int, default=None, help="seeds per arm (default: 2 dates and Multi30k, 3 "
                                                           "ambiguous dates)")
    p.add_argument("--seed-offset", type=int, default=0, help="the first seed (seeds run apart, then --merge)")
    p.add_argument("--dates-steps", type=int, default=1000)
    p.add_argument("--multi30k-steps", type=int, default=400)
    p.add_argument("--ambiguous-steps", type=int, default=300)
    p.add_argument("--n-train", type=int, default=50_000, help="made-up training pairs (the recipe's)")
    p.add_argument("--ambiguous-n-train", type=int, default=20_000, help="(b)'s training pairs (its pilots')")
    p.add_argument("--n-test", type=int, default=500, help="made-up held-out pairs (the recipe's)")
    p.add_argument("--concat-dims", type=int, default=32, help="P of (c): positional dimensions concatenated")
    p.add_argument("--data-dir", default=str(DATA_DIR))
    p.add_argument("--m30k-pairs", type=int, default=None, help=argparse.SUPPRESS)  # --quick: a slice, as a TSV
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--merge", nargs="+", metavar="JSON", help="train nothing: merge the parts of these results "
                                                              "files (parts run apart) into --out, and redraw")
    args = script_args(p, argv, QUICK, "positions", results=RESULTS)
    if args.merge:
        merged: dict[str, Any] = {}
        for name in args.merge:
            merge_into(merged, json.loads(Path(name).read_text()))
        summarize(merged)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "positions.json").write_text(json.dumps(merged, indent=2) + "\n")
        plot(merged, Path(args.out) / "positions.png")
        print(markdown(merged))
        return
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise ValueError(f"--parts={args.parts!r}: expected a comma-separated list of {list(PARTS)}")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    path = out / "positions.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    work = Path(tempfile.mkdtemp(prefix="positions-"))
    t0 = time.perf_counter()
    for part in parts:
        started, cpu = time.perf_counter(), time.process_time()
        if part == "dates":
            results["dates"], results["add_vs_concat"] = dates_part(args, work)
        elif part == "multi30k":
            if not Path(args.data_dir).is_dir():
                print(f"skipping multi30k: no {args.data_dir}")
                continue
            results["multi30k"] = multi30k_part(args, work)
        else:
            results["ambiguous"] = ambiguous_part(args, work)
        results.setdefault("minutes", {})[part] = round((time.perf_counter() - started) / 60, 1)
        results.setdefault("cpu_minutes", {})[part] = round((time.process_time() - cpu) / 60, 1)
        summarize(results)
        results.update(name="positions", args=vars(args), model=SMALL,
                       machine={"cpu": platform.processor() or platform.machine(),
                                "threads": torch.get_num_threads(), "torch": torch.__version__})
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")  # after every part: a crash keeps what was done
    print(f"wrote {path} ({(time.perf_counter() - t0) / 60:.1f} minutes)")
    plot(results, out / "positions.png")
    print(f"wrote {out / 'positions.png'}")
    print(markdown(results))


def merge_into(merged: dict[str, Any], other: dict[str, Any]) -> None:
    """Join ``other``'s parts into ``merged``: runs (and cosines) of the same part are pooled, one per
    (arm, seed) (``other``'s wins); minutes of the same part add up."""
    for key, value in other.items():
        if key in ("dates", "add_vs_concat", "multi30k", "ambiguous") and key in merged:
            for field in ("runs", "cosines"):
                if field in value:
                    mine = {(x.get("positional", x.get("model")), x["seed"]): x for x in merged[key].get(field, [])}
                    mine.update({(x.get("positional", x.get("model")), x["seed"]): x for x in value[field]})
                    value = {**value, field: sorted(mine.values(), key=lambda x: (x["seed"], str(x)))}
            merged[key] = {**merged[key], **value}
        elif key in ("minutes", "cpu_minutes"):  # parts run apart: their processes' minutes add up
            for part, m in value.items():
                merged.setdefault(key, {})[part] = round(merged.get(key, {}).get(part, 0) + m, 1)
        elif key == "args":  # each process's flags
            merged["args"] = [*(merged.get("args") or []), *(value if isinstance(value, list) else [value])]
        else:
            merged[key] = value


# --- (a) and (c): the dates task ---------------------------------------------------------------------------


def seeds_of(args: argparse.Namespace, default: int) -> list[int]:
    n = args.seeds if args.seeds is not None else default
    return list(range(args.seed_offset, args.seed_offset + n))


def dates_part(args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a) on dates: sinusoidal vs learned; (c): concatenated positions, and the cosines of the added ones."""
    runs: list[dict[str, Any]] = []
    cosines: list[dict[str, Any]] = []
    for seed in seeds_of(args, 2):
        for arm in ("sinusoidal", "learned", "concat"):
            cfg = recipes.config("dates", steps=args.dates_steps, n_train=args.n_train, n_test=args.n_test,
                                 seed=seed, device=args.device, out=str(work), name=f"dates-{arm}-{seed}",
                                 model={**SMALL, "positional": "sinusoidal" if arm == "concat" else arm,
                                        **({"tie_output": False} if arm == "concat" else {})})
            if arm == "concat":
                recipe: type[Translation] = concat_recipe(args.concat_dims)
                done = base.run(cfg, recipe, progress=False, verbose=False)
            else:
                done = recipes.train(cfg, progress=False, verbose=False)
            model = aiayn.load(done["run"]) if arm != "concat" else None
            params = aiayn.count_parameters(model) if model is not None else done["params"]
            runs.append({"positional": arm, "seed": seed, "exact_match": round(done["exact_match"], 4),
                         "val_loss": round(done["val_loss"], 4), "params": params,
                         "train_seconds": round(done["history"][-1]["seconds"], 1)})
            print(f"dates {arm:>10} seed {seed}: exact match {done['exact_match']:.1%}", flush=True)
            if model is not None:
                ids = source_ids(done["run"], args.n_test)
                cosines.append({"model": f"dates-{arm}", "seed": seed, **token_position_cosines(model, ids)})
    dates = {"task": "dates (free English -> ISO), characters", "metric": "exact match on held-out pairs",
             "steps": args.dates_steps, "runs": [r for r in runs if r["positional"] != "concat"],
             }
    concat = {"concat_dims": args.concat_dims, "d_model": SMALL["d_model"],
              "runs": [r for r in runs if r["positional"] in ("sinusoidal", "concat")],
              "cosines": cosines, "random_mean_abs_cos": round(random_abs_cos(SMALL["d_model"]), 4),
              "base_model_costs": concat_costs()}
    return dates, concat


class ConcatEmbedding(nn.Module):
    """``dropout([tokens(ids) * sqrt(C) | PE(pos)])``: C - P token dimensions, P sinusoidal ones, concatenated.

    The same call as :class:`aiayn.layers.Embedding` (``ids (B, T)``, ``start``) -> ``(B, T, C)``, so the
    Transformer takes it in place of its own; tokens start as N(0, 1/C) like the package's, so that times
    sqrt(C) they have unit variance.
    """

    table: Tensor  # (max_len, P), a buffer

    def __init__(self, vocab_size: int, d_model: int, d_pos: int, max_len: int, dropout: float, pad_id: int):
        super().__init__()
        if not 0 < d_pos < d_model or d_pos % 2:
            raise ValueError(f"d_pos={d_pos} must be even and in (0, d_model={d_model})")
        self.tokens = nn.Embedding(vocab_size, d_model - d_pos, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=d_model**-0.5)
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        self.scale = math.sqrt(d_model)
        self.register_buffer("table", sinusoidal_encoding(max_len, d_pos), persistent=False)  # (max_len, P)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:
        b, t = ids.shape
        positions = self.table[start : start + t].expand(b, t, -1)  # (B, T, P)
        return self.dropout(torch.cat([self.tokens(ids) * self.scale, positions], dim=-1))  # (B, T, C)


def concat_recipe(d_pos: int) -> type[Translation]:
    class ConcatTranslation(Translation):
        """The translation recipe with both embeddings replaced by :class:`ConcatEmbedding`."""

        def __init__(self, cfg, folder, say) -> None:
            super().__init__(cfg, folder, say)
            m = self.mcfg
            for side, vocab in (("src_embed", m.src_vocab_size), ("tgt_embed", m.tgt_vocab_size)):
                setattr(self.model, side, ConcatEmbedding(vocab, m.d_model, d_pos, m.max_len, m.dropout, m.pad_id))

        def finish(self, model, folder, validation):
            return {**super().finish(model, folder, validation), "params": aiayn.count_parameters(model)}

    return ConcatTranslation


def source_ids(run: Path, n: int) -> Tensor:
    """The distinct source-token ids of the first ``n`` held-out pairs of a run (``run.json``'s samples)."""
    tok = load_tokenizer(Path(run) / "src_tokenizer.json")
    samples = json.loads((Path(run) / "run.json").read_text())["samples"][:n]
    return torch.tensor(sorted({i for s in samples for i in tok.encode(s["source"])}))


@torch.no_grad()
def token_position_cosines(model: nn.Module, ids: Tensor, n_positions: int = 32) -> dict[str, float]:
    """|cos| between the source embedding table's rows ``ids`` (times the embedding scale) and the position
    vectors of positions 0 .. ``n_positions`` - 1 that the encoder adds to them; and their norms."""
    emb: Any = model.src_embed  # aiayn.layers.Embedding
    tokens = emb.tokens.weight[ids].float() * emb.scale  # (N, C)
    pos = emb.positions(n_positions)  # (P, C)
    cos = nn.functional.normalize(tokens, dim=-1) @ nn.functional.normalize(pos, dim=-1).T  # (N, P)
    a = cos.abs().flatten()
    return {"tokens": len(ids), "positions": n_positions, "mean_abs_cos": round(a.mean().item(), 4),
            "p95_abs_cos": round(a.quantile(0.95).item(), 4), "max_abs_cos": round(a.max().item(), 4),
            "token_norm": round(tokens.norm(dim=-1).mean().item(), 2),
            "position_norm": round(pos.norm(dim=-1).mean().item(), 2)}


def random_abs_cos(c: int) -> float:
    """E|cos| of two independent random directions in ``c`` dimensions: Gamma(c/2) / (sqrt(pi) Gamma((c+1)/2))."""
    return math.exp(math.lgamma(c / 2) - math.lgamma((c + 1) / 2)) / math.sqrt(math.pi)


def concat_costs(p_dims: tuple[int, ...] = (64, 128, 256)) -> list[dict[str, Any]]:
    """What concatenating P positional dimensions would cost the base model (source and target of 64 tokens),
    from the closed-form counts: widening d_model to C + P (d_ff kept), or keeping C with C - P token dims."""
    seq = 64
    cfg = aiayn.preset("transformer-base")
    ref = counts(cfg, seq_len=seq)
    rows = []
    for p in p_dims:
        wide = counts(aiayn.preset("transformer-base", d_model=cfg.d_model + p), seq_len=seq)
        rows.append({"P": p, "seq_len": seq, "added_params": ref.total_parameters, "added_macs": ref.total_macs,
                     "wide_d_model": cfg.d_model + p,
                     "wide_extra_params": wide.total_parameters - ref.total_parameters,
                     "wide_params_ratio": round(wide.total_parameters / ref.total_parameters, 3),
                     "wide_macs_ratio": round(wide.total_macs / ref.total_macs, 3),
                     "narrow_token_dims": cfg.d_model - p,
                     "narrow_token_params_saved": cfg.src_vocab_size * p})
    return rows


# --- (a) on Multi30k ---------------------------------------------------------------------------------------


def multi30k_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    langs = {"src_lang": "de", "tgt_lang": "en"}
    test = read_corpus("multi30k", args.data_dir, "test_2016_flickr", **langs)
    data: dict[str, Any] = {"data": ["multi30k"], "data_dir": args.data_dir}
    if args.m30k_pairs:  # --quick: a slice of the training pairs as a TSV, the recipe holding out n_test of it
        train = read_corpus("multi30k", args.data_dir, "train", **langs)[: args.m30k_pairs]
        tsv = work / "train.tsv"
        tsv.write_text("".join(f"{s}\t{t}\n" for s, t in train), encoding="utf-8")
        data, test = {"data": [str(tsv)], "n_test": args.n_test}, test[: args.n_test]
    runs, cosines = [], []
    for seed in seeds_of(args, 2):
        for positional in ("sinusoidal", "learned"):
            cfg = recipes.config("multi30k-de-en", **data, **langs, steps=args.multi30k_steps, warmup=100,
                                 schedule="linear", lr_factor=0.16, average=0, eval_every=0, vocab_size=2000,
                                 max_tokens=2048, seed=seed, device=args.device, out=str(work),
                                 name=f"m30k-{positional}-{seed}", model={**SMALL, "positional": positional})
            done = recipes.train(cfg, progress=False, verbose=False)
            task_model = aiayn.load(done["run"])
            src_tok = load_tokenizer(Path(done["run"]) / "src_tokenizer.json")
            tgt_tok = load_tokenizer(Path(done["run"]) / "tgt_tokenizer.json")
            hyps = translate_texts(task_model, src_tok, tgt_tok, [s for s, _ in test])
            scores = corpus_scores(hyps, [t for _, t in test], "en")  # the test split, once
            runs.append({"positional": positional, "seed": seed, "val_bleu": round(done["bleu"], 2),
                         "test_bleu": round(scores["bleu"], 2), "test_chrf": round(scores["chrf"], 2),
                         "val_loss": round(done["val_loss"], 4), "params": aiayn.count_parameters(task_model),
                         "train_seconds": round(done["history"][-1]["seconds"], 1)})
            print(f"multi30k {positional:>10} seed {seed}: val BLEU {done['bleu']:.2f}, test BLEU "
                  f"{scores['bleu']:.2f}", flush=True)
            ids = torch.tensor(sorted({i for s, _ in test for i in src_tok.encode(s)}))
            cosines.append({"model": f"multi30k-{positional}", "seed": seed,
                            **token_position_cosines(task_model, ids)})
    return {"task": "Multi30k de -> en, joint BPE 2,000", "metric": "BLEU (sacrebleu, greedy)",
            "test": "test_2016_flickr", "steps": args.multi30k_steps, "max_tokens": 2048, "runs": runs,
            "signature": scores["signature"], "cosines": cosines}


# --- (b) no positions ----------------------------------------------------------------------------------------


def ambiguous_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    runs = []
    for seed in seeds_of(args, 3):
        for positional in ("sinusoidal", "none"):
            cfg = recipes.config("dates", data=["ambiguous-dates"], tokenizer="bpe", steps=args.ambiguous_steps,
                                 n_train=args.ambiguous_n_train, n_test=args.n_test, seed=seed,
                                 device=args.device, out=str(work), name=f"ambiguous-{positional}-{seed}",
                                 model={**SMALL, "positional": positional})
            done = recipes.train(cfg, progress=False, verbose=False)
            tok = load_tokenizer(Path(done["run"]) / "src_tokenizer.json")
            five = sum(len(tok.encode(s["source"])) == 5 for s in done["samples"]) / len(done["samples"])
            same = [s for s in done["samples"] if s["source"][:2] == s["source"][3:5]]
            differ = [s for s in done["samples"] if s["source"][:2] != s["source"][3:5]]
            # each held-out pair with day != month beside its swap (03.05 for 05.03): a bag-of-tokens model reads
            # the two alike, so it is right on at most one of them (50% exactly, not only in expectation)
            model = aiayn.load(done["run"])
            swapped = [swap(s["source"]) for s in differ]
            outputs = translate_texts(model, tok, load_tokenizer(Path(done["run"]) / "tgt_tokenizer.json"), swapped)
            both = [*differ, *({"output": o, "reference": iso(x)} for o, x in zip(outputs, swapped))]
            alike = sum(o == s["output"] for o, s in zip(outputs, differ)) / max(len(differ), 1)
            runs.append({"positional": positional, "seed": seed, "exact_match": round(done["exact_match"], 4),
                         "day_equals_month": {"pairs": len(same), "exact_match": round(accuracy(same), 4)},
                         "day_differs": {"pairs": len(differ), "exact_match": round(accuracy(differ), 4)},
                         "day_differs_with_swaps": {"pairs": len(both), "exact_match": round(accuracy(both), 4),
                                                    "same_output_for_swap": round(alike, 4)},
                         "sources_of_five_tokens": round(five, 4),  # the bag argument needs all of them
                         "train_seconds": round(done["history"][-1]["seconds"], 1)})
            print(f"ambiguous {positional:>10} seed {seed}: exact match {done['exact_match']:.1%}, on day != month "
                  f"{accuracy(differ):.1%}, with their swaps {accuracy(both):.1%} (same output for the swap: "
                  f"{alike:.1%})", flush=True)
    return {"task": "ambiguous-dates (DD.MM.YYYY, day and month in 1..12 -> ISO), byte-level BPE",
            "metric": "exact match on held-out pairs", "steps": args.ambiguous_steps, "runs": runs,
            "bag_of_tokens_ceiling": {"overall": round(1 / 12 + 11 / 24, 4), "day_differs": 0.5}}


def swap(source: str) -> str:
    """"05.03.2019" -> "03.05.2019": the same three numbers, day and month exchanged."""
    day, month, year = source.split(".")
    return f"{month}.{day}.{year}"


def iso(source: str) -> str:
    """The ISO form of a day-first "DD.MM.YYYY" source."""
    day, month, year = source.split(".")
    return f"{year}-{month}-{day}"


def accuracy(samples: list[dict[str, str]]) -> float:
    return sum(s["output"] == s["reference"] for s in samples) / max(len(samples), 1)


def summarize(results: dict[str, Any]) -> None:
    """Set each part's ``summary`` fields from its ``runs`` (again after ``--merge`` joins runs)."""
    arms = {"dates": ("sinusoidal", "learned"), "add_vs_concat": ("sinusoidal", "concat"),
            "multi30k": ("sinusoidal", "learned"), "ambiguous": ("sinusoidal", "none")}
    for part, pair in arms.items():
        if part not in results:
            continue
        r = results[part]
        if part == "multi30k":
            r["summary"] = {**summary(r["runs"], "test_bleu", pair), "val": summary(r["runs"], "val_bleu", pair)}
        elif part == "ambiguous":
            runs = [{**x, "differ": x["day_differs"]["exact_match"],
                     "swaps": x["day_differs_with_swaps"]["exact_match"]} for x in r["runs"]]
            r.update(summary=summary(runs, "exact_match", pair), summary_day_differs=summary(runs, "differ", pair),
                     summary_with_swaps=summary(runs, "swaps", pair))
        else:
            r["summary"] = summary(r["runs"], "exact_match", pair)
        if part == "add_vs_concat":
            r["base_model_costs"] = concat_costs()  # formulas only: always the current ones


def summary(runs: list[dict[str, Any]], key: str, arms: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per arm: mean, sample standard deviation (0 for one seed) and the number of seeds of ``key``."""
    out = {}
    for arm in arms:
        values = [r[key] for r in runs if r["positional"] == arm]
        if values:
            out[arm] = {"mean": round(statistics.fmean(values), 4),
                        "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0, "n": len(values)}
    return out


# --- report --------------------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    """The README's tables."""
    def ms(s: dict[str, float], pct: bool) -> str:
        f = 100 if pct else 1
        return f"{s['mean'] * f:.1f} ± {s['std'] * f:.1f} (n={s['n']})"

    lines = ["| (a) task | metric | sinusoidal | learned |", "|---|---|---|---|"]
    if "dates" in results:
        s = results["dates"]["summary"]
        lines.append(f"| dates, {results['dates']['steps']} updates | exact match % | {ms(s['sinusoidal'], True)} "
                     f"| {ms(s['learned'], True)} |")
    if "multi30k" in results:
        s = results["multi30k"]["summary"]
        lines.append(f"| Multi30k de-en, {results['multi30k']['steps']} updates | test BLEU | "
                     f"{ms(s['sinusoidal'], False)} | {ms(s['learned'], False)} |")
        lines.append(f"| | validation BLEU | {ms(s['val']['sinusoidal'], False)} | {ms(s['val']['learned'], False)} |")
    if "ambiguous" in results:
        a = results["ambiguous"]
        s, d = a["summary"], a["summary_day_differs"]
        w = a["summary_with_swaps"]
        lines += ["", "| (b) ambiguous-dates | exact match % | on day != month % | those and their swaps % |",
                  "|---|---|---|---|",
                  f"| sinusoidal positions | {ms(s['sinusoidal'], True)} | {ms(d['sinusoidal'], True)} | "
                  f"{ms(w['sinusoidal'], True)} |",
                  f"| no positions | {ms(s['none'], True)} | {ms(d['none'], True)} | {ms(w['none'], True)} |",
                  f"| bag-of-tokens ceiling | {100 * a['bag_of_tokens_ceiling']['overall']:.1f} (expected) | "
                  f"50.0 (expected) | 50.0 (exactly) |"]
    if "add_vs_concat" in results:
        c = results["add_vs_concat"]
        s = c["summary"]
        p = c["concat_dims"]
        params = {r["positional"]: r["params"] for r in c["runs"]}
        lines += ["", f"| (c) dates, C = {c['d_model']} | exact match % | parameters |", "|---|---|---|",
                  f"| added (C token dims + C sinusoidal) | {ms(s['sinusoidal'], True)} | {params['sinusoidal']:,} |",
                  f"| concatenated ({c['d_model'] - p} token dims + {p} sinusoidal) | {ms(s['concat'], True)} | "
                  f"{params['concat']:,} |"]
        lines += ["", "| token embedding vs position vector | mean abs cos | 95th pct | max |", "|---|---|---|---|"]
        cos = c["cosines"] + results.get("multi30k", {}).get("cosines", [])
        for name in dict.fromkeys(x["model"] for x in cos):
            rows = [x for x in cos if x["model"] == name]
            lines.append(f"| {name} (trained, {len(rows)} seeds) | "
                         + " | ".join(f"{statistics.fmean(x[k] for x in rows):.3f}"
                                      for k in ("mean_abs_cos", "p95_abs_cos", "max_abs_cos")) + " |")
        lines.append(f"| random directions in {c['d_model']} dims | {c['random_mean_abs_cos']:.3f} | | |")
        lines += ["", "| base model, concatenate P dims | widen to C + P: parameters | widen: multiply-adds | "
                      "or narrow tokens to C - P |", "|---|---|---|---|"]
        for r in c["base_model_costs"]:
            lines.append(f"| P = {r['P']} | +{r['wide_extra_params'] / 1e6:.1f}M (x{r['wide_params_ratio']}) | "
                         f"x{r['wide_macs_ratio']} | {r['narrow_token_dims']} token dims |")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("dates", "(a) dates: exact match %", "exact_match", 100, ("sinusoidal", "learned")),
              ("multi30k", "(a) Multi30k de-en: test BLEU", "test_bleu", 1, ("sinusoidal", "learned")),
              ("ambiguous", "(b) ambiguous dates: exact match %", "exact_match", 100, ("sinusoidal", "none")),
              ("add_vs_concat", "(c) dates: added vs concatenated, %", "exact_match", 100,
               ("sinusoidal", "concat"))]
    panels = [p for p in panels if p[0] in results]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), squeeze=False)
    for ax, (key, title, metric, scale, arms) in zip(axes[0], panels):
        runs = results[key]["runs"]
        for i, arm in enumerate(arms):
            values = [r[metric] * scale for r in runs if r["positional"] == arm]
            if values:
                ax.bar(i, statistics.fmean(values), color=f"C{i}", alpha=0.6)
                ax.scatter([i] * len(values), values, color="k", s=12, zorder=3)
        if key == "ambiguous":
            ax.axhline(100 * results[key]["bag_of_tokens_ceiling"]["overall"], color="gray", ls="--",
                       label="bag-of-tokens ceiling")
            ax.legend(fontsize=7, loc="lower left")
        ax.set_xticks(range(len(arms)), [{"none": "no positions", "concat": "concatenated",
                                           "sinusoidal": "sinusoidal" if key != "add_vs_concat" else "added"}
                                          .get(a, a) for a in arms])
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
