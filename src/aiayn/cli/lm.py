"""``aiayn train --task lm`` and ``aiayn generate`` as plain functions.

The default LM job makes its own text: one line per date, written freely in English and then in ISO
form ("tuesday, march 5th, 2019 = 2019-03-05"). A small GPT learns to continue text; asked to continue
a held-out "<date> =" it must write the ISO date, so its exact-match accuracy shows what it learned.
With ``data=FILE`` it trains on any text (byte-level BPE by default, or characters), reports validation
loss and perplexity, and prints a sample.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import aiayn
from aiayn.cli.runs import Run, open_run
from aiayn.data import BPETokenizer, CharTokenizer, lm_batches, lm_blocks, load_tokenizer, make_pairs
from aiayn.decoding import sample, stream
from aiayn.io import write_json
from aiayn.training import adamw_cosine, distributed


def date_lines(n: int, seed: int) -> list[str]:
    """``n`` lines "free date = ISO date" from the synthetic dates task."""
    pairs, _ = make_pairs("dates", n, 0, seed)
    return [f"{s} = {t}" for s, t in pairs]


def read_text(path: str | os.PathLike) -> str:
    """The whole text of a UTF-8 file; an empty or undecodable file is an error that names it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no text file at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}): {e.reason}") from e
    if not text.strip():
        raise ValueError(f"{path} holds no text")
    return text


def train_lm(
    data: str | None = None,
    tokenizer: str | None = None,
    vocab_size: int = 4000,
    preset: str = "gpt-tiny",
    steps: int = 1500,
    block: int = 64,
    batch_size: int = 16,
    accum: int = 1,
    lr: float = 3e-3,
    warmup: int = 50,
    weight_decay: float = 0.1,
    clip: float = 1.0,
    eval_every: int = 200,
    eval_blocks: int = 128,
    save_every: int = 500,
    bf16: bool = False,
    compile: bool = False,
    n_train: int = 30_000,
    n_test: int = 300,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 6,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Train a GPT language model on made-up date lines or on a text file.

    The recipe is GPT-2's as nanoGPT runs it: AdamW (0.9, 0.95), weight decay 0.1 on matrices only,
    linear warm-up then cosine decay to a tenth of the peak, gradient clipping at 1.

    Args:
        data: a UTF-8 text file (its last 10% is held out); ``None`` makes date lines.
        tokenizer: ``"bpe"`` (byte-level, ``vocab_size`` tokens; the default for a file) or ``"char"``
            (the default for the made-up lines).
        block: context length of training blocks (at most the preset's ``max_len``).
        batch_size, accum: blocks per batch, batches per update.
        eval_every, eval_blocks: validation loss every this many updates, on this many held-out blocks;
            the weights with the lowest loss are kept as ``best.safetensors``.
        save_every, resume: as :func:`aiayn.cli.train.train`.
        overrides: config fields (``d_model=192``, ``n_layers=6``, ``dropout=0.0``, ...).

    Returns:
        ``{"run", "val_loss", "perplexity", "exact_match" (made-up lines only), "sample", "history",
        "validation", "seconds"}``.
    """
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "show", "out", "name", "resume",
                                                          "overrides")}
    args.update(overrides, task="lm")
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    if data is None:
        train_text = "\n".join(date_lines(n_train, seed)) + "\n"
        test_lines = date_lines(n_test, seed + 1)
        val_text = "\n".join(test_lines) + "\n"
        run_name, kind = "lm-dates", tokenizer or "char"
    else:
        text = read_text(data)
        cut = int(len(text) * 0.9)
        train_text, val_text, test_lines = text[:cut], text[cut:], []
        run_name, kind = f"lm-{Path(data).stem}", tokenizer or "bpe"
    if resume is not None:
        tok = load_tokenizer(Path(resume) / "tokenizer.json")
    elif kind == "char":
        tok = CharTokenizer.train([train_text])
    elif kind == "bpe":
        tok = BPETokenizer.train(train_text.splitlines(keepends=True), vocab_size=vocab_size)
    else:
        raise ValueError(f"tokenizer={tokenizer!r}: expected 'bpe' or 'char'")
    tok = distributed.broadcast(tok)  # several ranks: rank 0's
    train_ids = torch.tensor(tok.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(val_text), dtype=torch.long)
    cfg = aiayn.preset(preset, **{"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, **overrides})
    if block > cfg.max_len:
        raise ValueError(f"block={block} is longer than the model's max_len={cfg.max_len}")
    model = aiayn.build(cfg)
    say(f"data {run_name}: {train_ids.numel():,} training tokens, {val_ids.numel():,} held out ({kind}, vocabulary "
        f"{tok.vocab_size:,})")
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters; {steps} updates of {batch_size} x {accum} "
        f"blocks of {block} tokens")

    run = open_run(out, name or run_name, args, resume, {"tokenizer.json": tok})
    optimizer, scheduler = adamw_cosine(model, lr, steps, warmup, weight_decay)
    state = Run(run, model, optimizer, scheduler, accum)
    if resume is not None:
        state.restore()
    val_batches = lm_blocks(val_ids, block, batch_size, eval_blocks)

    def loss_fn(model, batch):
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
        return loss, loss.detach(), y.numel()

    @torch.no_grad()
    def validate(step: int, history: list[dict[str, float]]) -> None:
        model.eval()
        total = sum(loss_fn(model, b)[0].item() for b in val_batches)
        loss = total / sum(b[1].numel() for b in val_batches)
        state.record({"step": step, "val_loss": loss, "perplexity": math.exp(loss)})
        say(f"\n  step {step}: validation loss {loss:.3f}, perplexity {math.exp(loss):.2f}")

    history = state.fit(lm_batches(train_ids, block, batch_size, seed, start=state.position), steps, loss_fn,
                        clip=clip, progress=progress, desc=f"train {run_name}", every=eval_every, callback=validate,
                        save_every=save_every, autocast="bf16" if bf16 else None, compile=compile)
    model = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(model, run)

    result: dict[str, Any] = {"run": run, "val_loss": state.validation[-1]["val_loss"],
                              "perplexity": state.validation[-1]["perplexity"]}
    if test_lines:  # made-up lines: complete "<date> =" and score the ISO dates
        prompts = [line.split(" = ")[0] + " =" for line in test_lines]
        outputs = complete(model, tok, prompts, max_new_tokens=14, stop=["\n"])
        refs = [" " + line.split(" = ")[1] for line in test_lines]
        result["exact_match"] = sum(o == r for o, r in zip(outputs, refs)) / len(refs)
        result["samples"] = [{"prompt": p, "output": o, "reference": r} for p, o, r in zip(prompts, outputs, refs)]
        if show:
            say("\nheld-out prompts: prompt -> continuation   [reference]")
        for s in result["samples"][:show]:
            say(f"  {s['prompt']:>36} ->{s['output']}   [{s['reference'].strip()}] "
                f"{'ok' if s['output'] == s['reference'] else '--'}")
        say(f"\non {len(refs)} held-out dates: exact match {result['exact_match']:.1%}")
        prompt = prompts[0]
    else:
        prompt = val_text[:80]
    gen = torch.Generator().manual_seed(seed)
    room = max(1, min(200, cfg.max_len - len(tok.encode(prompt)) - 1))  # prompt + sample within max_len
    result["sample"] = complete(model, tok, [prompt], room, temperature=0.8, top_k=40, generator=gen)[0]
    if not test_lines:
        say(f"\nsample (temperature 0.8, top-k 40) after {prompt!r}:\n{result['sample']}")
    result.update(seconds=time.perf_counter() - t0, history=history, validation=state.validation)
    write_json(run / "run.json", {"data": run_name, "preset": preset, "config": aiayn.models.config_to_dict(cfg),
                                  **args, **{k: v for k, v in result.items() if k not in ("run", "history")}})
    say(f"validation loss {result['val_loss']:.3f} (perplexity {result['perplexity']:.2f})   "
        f"({result['seconds']:.0f} s); saved {run}/")
    say(f"try: aiayn generate --run {run} --prompt \"{prompt}\"")
    return result


def complete(model, tok, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
             **sampling: Any) -> list[str]:
    """The text each prompt continues with (prompt not included), cut before the first stop string."""
    ids = sample(model, [tok.encode(p) for p in prompts], max_new_tokens, eos_id=tok.eos_id,
                 **{"temperature": 0.0, **sampling})
    out = []
    for p, row in zip(prompts, ids):
        text = tok.decode(row[len(tok.encode(p)):])
        out.append(_cut(text, stop or [])[0])
    return out


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether one was found."""
    hits = [text.index(s) for s in stop if s and s in text]
    return (text[: min(hits)], True) if hits else (text, False)


def load_lm_run(run: str | os.PathLike):
    """``(model, tokenizer)`` of a run folder written by :func:`train_lm` or ``aiayn convert``."""
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run} holds no model.safetensors; is it a run folder written by `aiayn train`?")
    if not (run / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{run} holds no tokenizer.json")
    return aiayn.load(run).eval(), load_tokenizer(run / "tokenizer.json")


def generate(
    run: str | os.PathLike,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    stop: list[str] | None = None,
    seed: int | None = None,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece as the model makes it (for streaming), until
    ``max_new_tokens``, the end-of-text token or a ``stop`` string (not yielded)."""
    model, tok = load_lm_run(run)
    ids = tok.encode(prompt) or ([tok.eos_id] if tok.eos_id is not None else [])
    if not ids:
        raise ValueError("the prompt is empty and the tokenizer has no end-of-text token to start from")
    room = model.cfg.max_len - len(ids)
    if room < 1:
        raise ValueError(f"the prompt is {len(ids)} tokens; the model reads at most {model.cfg.max_len}")
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    new: list[int] = []
    shown = ""
    for nxt in stream(model, [ids], min(max_new_tokens, room), temperature, top_k, top_p, gen, tok.eos_id):
        token = int(nxt[0])
        if token == tok.eos_id:
            break
        new.append(token)
        text, stopped = _cut(tok.decode(new), stop or [])
        if text.endswith("\ufffd") and not stopped:  # half of a multi-byte character: wait for the rest
            continue
        if len(text) > len(shown):
            yield text[len(shown):]
            shown = text
        if stopped:
            break


def print_stream(pieces: Iterator[str]) -> None:
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")


__all__ = ["complete", "generate", "load_lm_run", "train_lm"]
