"""``aiayn train`` and ``aiayn translate`` as plain functions.

The default job makes its own parallel data (free-English dates -> ISO dates), trains the tiny
Transformer on the CPU, prints held-out translations and the exact-match accuracy, and saves the
checkpoint, the tokenizers and a picture of encoder-decoder attention in ``runs/<name>/``.
With ``data=`` it trains on a real corpus (Multi30k, a TSV such as Tatoeba's, or two aligned files)
with a BPE vocabulary, and reports validation loss, BLEU and chrF.
"""

from __future__ import annotations

import inspect
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

import aiayn
from aiayn.cli.runs import Run, open_run, read_args
from aiayn.data import (
    encode_pairs,
    load_tokenizer,
    make_pairs,
    multi30k,
    read_parallel,
    read_tsv,
    seq2seq_batch,
    token_batches,
    train_tokenizers,
)
from aiayn.decoding import beam_search, greedy
from aiayn.io import write_json
from aiayn.layers import record_attention
from aiayn.training import distributed, label_smoothed_loss, noam_optimizer, train_state_info

Pairs = list[tuple[str, str]]


def translate_texts(model, src_tok, tgt_tok, texts: list[str], beam: int = 1, batch_size: int = 128) -> list[str]:
    """Translate ``texts`` in batches of similar length; greedy for ``beam=1``, else beam search."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[str] = [""] * len(texts)
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        src, _, _ = seq2seq_batch([(texts[j], "") for j in idx], src_tok, tgt_tok)
        ids = greedy(model, src) if beam == 1 else beam_search(model, src, beam=beam)
        for j, row in zip(idx, ids.tolist()):
            out[j] = tgt_tok.decode(row)
    return out


def attention_picture(model, src_tok, tgt_tok, src_text: str, path: Path) -> Path:
    """Encoder-decoder attention of every decoder layer and head for one example."""
    from aiayn.viz import plot_attention_grid

    hyp = translate_texts(model, src_tok, tgt_tok, [src_text])[0]
    src, tgt_in, _ = seq2seq_batch([(src_text, hyp)], src_tok, tgt_tok)
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt_in)
    layers = [rec[f"decoder.layers.{i}.cross_attn"][0][0] for i in range(len(model.decoder.layers))]
    keys = src_tok.tokens(src_text) + ["</s>"]
    queries = ["<s>"] + tgt_tok.tokens(hyp)
    return plot_attention_grid(layers, queries, keys, path, title=f"encoder-decoder attention: {src_text!r} -> {hyp!r}",
                               row_label="decoder layer")


def read_corpus(data: str | list[str], data_dir: str | None = None, split: str = "train", src_lang: str = "de",
                tgt_lang: str = "en") -> Pairs:
    """Pairs of ``"multi30k"`` (its ``split`` from ``data_dir``), a TSV file, or two aligned files."""
    paths = [data] if isinstance(data, str) else list(data)
    if paths == ["multi30k"]:
        if data_dir is None:
            raise ValueError("data='multi30k' needs data_dir, the folder with its six .gz files")
        return multi30k(data_dir, split, src_lang, tgt_lang)
    if len(paths) == 1:
        return read_tsv(paths[0])
    if len(paths) == 2:
        return read_parallel(*paths)
    raise ValueError(f"data must be 'multi30k', one TSV file or two aligned files, got {len(paths)} paths")


def load_pairs(task: str, data: str | list[str] | None, data_dir: str | None, src_lang: str, tgt_lang: str,
               n_train: int, n_test: int, seed: int) -> tuple[str, Pairs, Pairs]:
    """``(name, train, held_out)`` for a synthetic task or a corpus.

    ``data``: ``None`` (the synthetic ``task``), ``"multi30k"`` (its ``train`` and ``val`` splits from
    ``data_dir``), a ``.tsv``/``.txt`` file of TAB-separated pairs (Tatoeba), or two aligned files.
    A TSV or a pair of files gives its last ``n_test`` pairs (after a seeded shuffle) as held out.
    """
    if data is None:
        train, test = make_pairs(task, n_train, n_test, seed)
        return task, train, test
    if data == "multi30k" or data == ["multi30k"]:
        return (f"multi30k-{src_lang}-{tgt_lang}", read_corpus(data, data_dir, "train", src_lang, tgt_lang),
                read_corpus(data, data_dir, "val", src_lang, tgt_lang))
    paths = [data] if isinstance(data, str) else list(data)
    pairs = list(read_corpus(paths))
    random.Random(seed).shuffle(pairs)
    if len(pairs) <= n_test:
        raise ValueError(f"data holds {len(pairs)} pairs, not more than the {n_test} to hold out (n_test)")
    return Path(paths[0]).stem, pairs[:-n_test], pairs[-n_test:]


def train(
    task: str = "dates",
    data: str | list[str] | None = None,
    data_dir: str | None = None,
    src_lang: str = "de",
    tgt_lang: str = "en",
    tokenizer: str | None = None,
    vocab_size: int = 8000,
    preset: str = "transformer-tiny",
    steps: int = 1000,
    max_tokens: int = 1024,
    accum: int = 1,
    warmup: int = 200,
    lr_factor: float = 0.3,
    label_smoothing: float = 0.1,
    eval_every: int = 0,
    save_every: int = 500,
    bf16: bool = False,
    compile: bool = False,
    beam: int = 1,
    n_train: int = 50_000,
    n_test: int = 500,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 8,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Train a Transformer on a synthetic task or a corpus and evaluate it on held-out pairs.

    The recipe is the paper's (label smoothing 0.1, Adam 0.9/0.98/1e-9, warm-up then inverse square
    root decay, dropout 0.1), scaled for the two-minute CPU default: 1,000 steps of about 1,000 tokens,
    a short warm-up, and the schedule multiplied by ``lr_factor`` = 0.3. The unscaled rate (peak 6e-3 at
    d_model 128 with 200 warm-up steps) is too high for this small post-norm model: at factor 1 it
    learns slowly and at 2 it diverges.

    Args:
        tokenizer: ``"char"`` or ``"bpe"``; default characters for synthetic tasks, joint BPE of
            ``vocab_size`` (shared embeddings, tied output) for a corpus.
        accum: batches per update (gradient accumulation).
        eval_every: validation loss (and BLEU) every this many updates, keeping the best checkpoint
            as ``best.safetensors``; 0 evaluates only at the end.
        save_every: write ``train_state.safetensors`` (weights, optimizer, schedule, data position,
            random state) every this many updates, at the end, and on Ctrl-C or SIGTERM.
        bf16: forward and loss under bf16 autocast (slow on CPUs without bf16 units).
        compile: train through ``torch.compile`` (see :func:`aiayn.training.fit`).
        resume: a run folder to continue (use :func:`resume_training`, which reads its arguments).
        beam: beam size for the final evaluation (1 = greedy).
        overrides: config fields of the preset (``d_model=256``, ``dropout=0.0``, ...).

    Returns:
        ``{"run", "exact_match", "bleu", "chrf", "val_loss", "loss", "seconds", "samples", "history"}``.
    """
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "show", "out", "name", "resume",
                                                          "overrides")}
    args.update(overrides)  # what resume_training needs to rebuild the same run
    from aiayn.evaluation import corpus_scores, exact_match

    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    run_name, train_pairs, test_pairs = load_pairs(task, data, data_dir, src_lang, tgt_lang, n_train, n_test, seed)
    kind = tokenizer or ("char" if data is None else "bpe")
    joint = kind == "bpe"
    if resume is None:
        src_tok, tgt_tok = distributed.broadcast(train_tokenizers(train_pairs, kind=kind, vocab_size=vocab_size,
                                                                  joint=joint))  # several ranks: rank 0's
    else:
        src_tok, tgt_tok = load_tokenizer(Path(resume) / "src_tokenizer.json"), load_tokenizer(
            Path(resume) / "tgt_tokenizer.json")
    cfg = aiayn.preset(preset, **{"src_vocab_size": src_tok.vocab_size, "tgt_vocab_size": tgt_tok.vocab_size,
                                  "share_embeddings": joint, **overrides})
    model = aiayn.build(cfg)
    say(f"data {run_name}: {len(train_pairs):,} training pairs, {len(test_pairs):,} held out; e.g. "
        f"{train_pairs[0][0]!r} -> {train_pairs[0][1]!r}")
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters, {kind} vocabulary of {src_tok.vocab_size:,}"
        f"{'' if joint else f' / {tgt_tok.vocab_size:,}'}; {steps} updates of <= {max_tokens} x {accum} tokens")

    def loss_fn(model, batch):
        src, tgt_in, tgt_out = batch
        return label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, label_smoothing)

    held_out = encode_pairs(test_pairs, src_tok, tgt_tok)
    run = open_run(out, name or run_name, args, resume, {"src_tokenizer.json": src_tok, "tgt_tokenizer.json": tgt_tok})

    @torch.no_grad()
    def validate(step: int, history: list[dict[str, float]]) -> None:
        model.eval()
        loss = nll = n = 0
        for batch in _batches_once(held_out, max_tokens, cfg):
            l_, nll_, n_ = loss_fn(model, batch)
            loss, nll, n = loss + l_.item(), nll + nll_.item(), n + n_
        record = {"step": step, "val_loss": loss / n, "val_nll": nll / n}
        if data is not None:  # BLEU on a corpus; synthetic tasks are scored by exact match at the end
            hyps = translate_texts(model, src_tok, tgt_tok, [s for s, _ in test_pairs])
            record.update({k: v for k, v in corpus_scores(hyps, [t for _, t in test_pairs], tgt_lang).items()
                           if k in ("bleu", "chrf")})
        state.record(record)
        if progress or verbose:
            say("\n  step {step}: validation loss {val_loss:.3f}".format(**record)
                + (f", BLEU {record['bleu']:.1f}, chrF {record['chrf']:.1f}" if "bleu" in record else ""))

    optimizer, scheduler = noam_optimizer(model, cfg.d_model, warmup, lr_factor)
    state = Run(run, model, optimizer, scheduler, accum)
    if resume is not None:
        done, _ = state.restore()
        say(f"resuming {run} after update {done} of {steps}")

    batches = token_batches(encode_pairs(train_pairs, src_tok, tgt_tok), max_tokens, cfg.pad_id, cfg.bos_id,
                            cfg.eos_id, seed, start=state.position)
    history = state.fit(batches, steps, loss_fn, progress=progress, desc=f"train {run_name}", every=eval_every,
                        callback=validate, save_every=save_every, autocast="bf16" if bf16 else None, compile=compile)
    model = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(model, run)

    hyps = translate_texts(model, src_tok, tgt_tok, [s for s, _ in test_pairs], beam=beam)
    refs = [t for _, t in test_pairs]
    score = exact_match(hyps, refs)
    scores = corpus_scores(hyps, refs, tgt_lang if data is not None else None)
    seconds = time.perf_counter() - t0
    samples = [{"source": s, "reference": r, "output": h} for (s, r), h in zip(test_pairs, hyps)]
    write_json(run / "run.json", {
        "data": run_name, "preset": preset, "config": aiayn.models.config_to_dict(cfg), "tokenizer": kind,
        "steps": steps, "max_tokens": max_tokens, "accum": accum, "warmup": warmup, "lr_factor": lr_factor,
        "seed": seed, "beam": beam, "exact_match": score, "bleu": scores["bleu"], "chrf": scores["chrf"],
        "bleu_signature": scores["signature"], "val_loss": state.validation[-1]["val_loss"], "final_loss": history[-1]["loss"],
        "seconds": round(seconds, 1), "samples": samples[:50],
    })
    picture = attention_picture(model, src_tok, tgt_tok, test_pairs[0][0], run / "attention.png")

    width = min(max(len(s["source"]) for s in samples[:show]), 60) if show else 0
    if show:
        say("\nheld-out examples: source -> output   [reference]")
    for s in samples[:show]:
        mark = "ok" if s["output"] == s["reference"] else "--"
        say(f"  {s['source']:>{width}} -> {s['output']}   [{s['reference']}] {mark}")
    say(f"\non {len(refs):,} held-out pairs: exact match {score:.1%}, BLEU {scores['bleu']:.1f}, chrF "
        f"{scores['chrf']:.1f}, validation loss {state.validation[-1]['val_loss']:.3f}   ({seconds:.0f} s)")
    say(f"saved {run}/: model.safetensors, best.safetensors, tokenizers, run.json, history.csv, {picture.name}")
    say(f"try: aiayn translate --run {run} \"{test_pairs[1][0]}\"")
    return {"run": run, "exact_match": score, "bleu": scores["bleu"], "chrf": scores["chrf"],
            "val_loss": state.validation[-1]["val_loss"], "loss": history[-1]["loss"], "seconds": seconds, "samples": samples,
            "history": history, "validation": state.validation}


def resume_training(run: str | os.PathLike, steps: int | None = None, **display: Any) -> dict[str, Any]:
    """Continue the run in folder ``run`` (of any ``--task``: translation, ``lm``, ``mlm``, ``denoise``, ``image``, ``detect``)
    from its last saved state, with the arguments it was started with (``steps`` may raise the number
    of updates). It ends with exactly the weights and log of a run
    never interrupted. ``display``: ``progress``, ``verbose``, ``show``."""
    args = read_args(run)
    if steps is not None:
        args["steps"] = steps
    _keep_batch(args, train_state_info(run)["extra"].get("batches_per_update"), display.get("verbose", True))
    task = args.get("task")
    if task == "lm":
        from aiayn.cli.lm import train_lm as fn
    elif task == "mlm":
        from aiayn.cli.mlm import train_mlm as fn
    elif task == "denoise":
        from aiayn.cli.denoise import train_denoise as fn
    elif task == "image":
        from aiayn.cli.image import train_image as fn
    elif task == "detect":
        from aiayn.cli.detect import train_detr as fn
    else:
        fn = train
    if fn is not train:
        del args["task"]
    takes = inspect.signature(fn).parameters
    return fn(**args, **{k: v for k, v in display.items() if k in takes}, resume=Path(run))


def _keep_batch(args: dict[str, Any], per_update: int | None, verbose: bool) -> None:
    """Resuming under another number of ranks: keep the batches per update (``ranks x accum``), so the
    run goes on with the same optimisation; when the ranks do not divide it, keep ``accum`` and say so."""
    ranks = distributed.world_size()
    if not per_update or per_update == ranks * args.get("accum", 1):
        return
    if per_update % ranks == 0:
        args["accum"] = per_update // ranks
    elif verbose and distributed.is_main():
        print(f"note: the run took {per_update} batches per update; {ranks} ranks x accum {args.get('accum', 1)} "
              f"take {ranks * args.get('accum', 1)} from here on")


def _batches_once(pairs, max_tokens: int, cfg):
    """Held-out pairs in token-count batches, each pair once, in length order."""
    from aiayn.data import collate, length_batches

    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for idx in length_batches(lengths, max_tokens, random.Random(0)):
        yield collate([pairs[i] for i in idx], cfg.pad_id, cfg.bos_id, cfg.eos_id)


def load_run(run: str | os.PathLike):
    """``(model, src_tokenizer, tgt_tokenizer)`` of a run folder written by :func:`train`."""
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run} holds no model.safetensors; is it a run folder written by `aiayn train`?")
    model = aiayn.load(run).eval()
    return model, load_tokenizer(run / "src_tokenizer.json"), load_tokenizer(run / "tgt_tokenizer.json")


def translate(run: str | os.PathLike, texts: list[str], beam: int = 1) -> list[str]:
    """Translate ``texts`` with the model saved in ``run`` (greedy, or beam search for ``beam > 1``)."""
    model, src_tok, tgt_tok = load_run(run)
    return translate_texts(model, src_tok, tgt_tok, list(texts), beam=beam)


def evaluate(
    run: str | os.PathLike,
    data: str | list[str],
    data_dir: str | None = None,
    split: str = "test_2016_flickr",
    src_lang: str = "de",
    tgt_lang: str = "en",
    beam: int = 4,
) -> dict[str, Any]:
    """Corpus BLEU and chrF (sacrebleu, detokenized; ``zh`` tokenizer for Chinese) of a saved run.

    Args:
        data: ``"multi30k"`` (its ``split`` from ``data_dir``), a TSV file of pairs, or two aligned files;
            every pair of the file is scored.
        beam: beam size (4, as the paper decodes); 1 is greedy.

    Returns:
        ``{"bleu", "chrf", "signature", "n", "exact_match"}``.
    """
    from aiayn.evaluation import corpus_scores, exact_match

    pairs = read_corpus(data, data_dir, split, src_lang, tgt_lang)
    hyps = translate(run, [s for s, _ in pairs], beam=beam)
    refs = [t for _, t in pairs]
    return {**corpus_scores(hyps, refs, tgt_lang), "exact_match": exact_match(hyps, refs)}
