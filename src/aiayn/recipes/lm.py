"""Language modelling: a GPT on made-up date lines or any text file, and generating with a run.

The default data is one line per date, written freely in English and then in ISO form ("tuesday, march
5th, 2019 = 2019-03-05"). A small GPT learns to continue text; asked to continue a held-out "<date> =" it
must write the ISO date, so its exact-match accuracy shows what it learned. On a text file (byte-level BPE
by default, or characters) it reports validation loss and perplexity, and prints a sample.

The training is GPT-2's as nanoGPT runs it: AdamW (0.9, 0.95), weight decay 0.1 on matrices only, linear
warm-up then cosine decay to a tenth of the peak, gradients clipped at norm 1.

A model with a memory of the segment before (``--preset transfo-xl-char``: Transformer-XL, its config's
``mem_len``) reads the text as Transformer-XL trains: ``batch_size`` streams in order (:func:`aiayn.data.lm_streams`),
the memory carried from each batch to the next; validation reads the held-out text the same way, in one pass, with
``eval_mem_len`` positions of memory (section 4.2: longer than in training helps).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F

from aiayn.analysis import count_parameters
from aiayn.data import (
    BPETokenizer,
    CharTokenizer,
    date_lines,
    lm_batches,
    lm_blocks,
    lm_stream_pass,
    lm_streams,
    load_tokenizer,
    read_text,
)
from aiayn.models import build, preset
from aiayn.pipelines.lm import complete, generate, load_lm_run, stream_text
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import decay_groups, distributed, finetune, warmup_cosine
from aiayn.training import device as devices


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "lm"
    data: str | None = setting(None, "a UTF-8 text file (its last 10% held out); default: made-up date lines")
    val_data: str | None = setting(None, "a text file to validate on instead; all of data then trains")
    tokenizer: str | None = setting(None, "bpe (byte-level; default for a file) or char (default for the lines)")
    vocab_size: int = setting(4000, "BPE vocabulary")
    n_train: int = setting(30_000, "made-up lines to train on")
    n_test: int = setting(300, "made-up lines held out (and completed at the end)")
    preset: str = setting("gpt-tiny", "the model preset")
    steps: int = setting(1500, "optimizer updates")
    block: int = setting(64, "context length of training blocks (at most the model's max_len)")
    batch_size: int = setting(16, "blocks per batch")
    lr: float = setting(3e-3, "peak learning rate (small models take a larger one than GPT-2's 6e-4)")
    beta2: float = setting(0.95, "AdamW's second-moment decay (GPT-3, nanoGPT)")
    weight_decay: float = setting(0.1, "AdamW's, on matrices only")
    warmup: int = setting(50, "warm-up updates")
    clip: float = setting(1.0, "maximum gradient norm")
    eval_every: int = setting(200, "validate every N updates, keeping the best weights")
    eval_blocks: int = setting(128, "held-out blocks a validation reads")
    eval_mem_len: int | None = setting(None, "memory positions when validating a model with one (Transformer-XL); "
                                             "default the model's mem_len")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "vocab_size", "n_train", "n_test", "block", "batch_size", "lr", "clip", "eval_blocks")
        if self.tokenizer not in (None, "char", "bpe"):
            raise ValueError(f"tokenizer={self.tokenizer!r}: expected 'bpe' or 'char'")
        if self.val_data is not None and self.data is None:
            raise ValueError("val_data needs data: the made-up lines hold out their own")
        if self.eval_mem_len is not None and self.eval_mem_len < 0:
            raise ValueError(f"eval_mem_len must be >= 0, got {self.eval_mem_len}")
        if not 0 < self.beta2 < 1:
            raise ValueError(f"beta2 must be in (0, 1), got {self.beta2}")


def _scores(run: Path, args: dict[str, Any], data: str, **run_on: Any) -> dict[str, Any]:
    """``aiayn evaluate`` of a language model: :func:`perplexity` on the file ``data``."""
    return perplexity(run, data, **run_on)


class LanguageModel(Recipe):
    evaluation = Evaluation(("data", "mem_len"), "data", _scores)
    takes_init_from = True

    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        self.clip = cfg.clip
        if cfg.data is None:
            train_text = "\n".join(date_lines(cfg.n_train, cfg.seed)) + "\n"
            self.test_lines = date_lines(cfg.n_test, cfg.seed + 1)
            self.val_text = "\n".join(self.test_lines) + "\n"
            self.run_name, kind = "lm-dates", cfg.tokenizer or "char"
        else:
            text = read_text(cfg.data)
            cut = len(text) if cfg.val_data else int(len(text) * 0.9)
            train_text, self.test_lines = text[:cut], []
            self.val_text = read_text(cfg.val_data) if cfg.val_data else text[cut:]
            self.run_name, kind = f"lm-{Path(cfg.data).stem}", cfg.tokenizer or "bpe"
        start = self.start_from()  # fine-tuning: the source's config and tokenizer
        if folder is not None:
            tok = load_tokenizer(folder / "tokenizer.json")
        elif start is not None:
            assert cfg.init_from is not None  # start_from loads it
            tok, kind = load_tokenizer(finetune.folder_of(cfg.init_from) / "tokenizer.json"), "init_from's"
        elif kind == "char":
            tok = CharTokenizer.train([train_text])
        else:
            tok = BPETokenizer.train(train_text.splitlines(keepends=True), vocab_size=cfg.vocab_size)
        self.tok = tok = distributed.broadcast(tok)  # several ranks: rank 0's
        self.files = {"tokenizer.json": tok}
        self.train_ids = torch.tensor(tok.encode(train_text), dtype=torch.long)
        val_ids = torch.tensor(tok.encode(self.val_text), dtype=torch.long)
        if start is not None:
            self.mcfg = dataclasses.replace(start, **cfg.model)
        else:
            self.mcfg = preset(cfg.preset, **{"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, **cfg.model})
        self.max_len: int | None = getattr(self.mcfg, "max_len", None)  # positions; None: any (a memory model)
        if self.max_len is not None and cfg.block > self.max_len:
            raise ValueError(f"block={cfg.block} is longer than the model's max_len={self.max_len}")
        self.model = build(self.mcfg)
        self.mem_len: int = getattr(self.mcfg, "mem_len", 0)  # > 0: a memory carried along ordered streams
        self.memory = None
        if self.mem_len and distributed.world_size() > 1:
            raise ValueError("a model with a memory trains on one process: its streams are read in order")
        if self.mem_len:
            self.val_batches = lm_stream_pass(val_ids, cfg.block, cfg.batch_size, cfg.eval_blocks)
        else:
            self.val_batches = lm_blocks(val_ids, cfg.block, cfg.batch_size, cfg.eval_blocks)
        say(f"data {self.run_name}: {self.train_ids.numel():,} training tokens, {val_ids.numel():,} held out "
            f"({kind}, vocabulary {tok.vocab_size:,})")
        say(f"model {cfg.init_from or cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} "
            f"updates of {cfg.batch_size} x {cfg.accum} blocks of {cfg.block} tokens")

    def optimizer(self) -> torch.optim.Optimizer:
        cfg = self.cfg
        return torch.optim.AdamW(decay_groups(self.model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, cfg.beta2),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        if self.mem_len:  # ordered streams, the memory starting empty (a resumed run's too)
            self.memory = cast(Any, self.model).new_memory()
            return lm_streams(self.train_ids, self.cfg.block, self.cfg.batch_size, start=start)
        return lm_batches(self.train_ids, self.cfg.block, self.cfg.batch_size, self.cfg.seed, start=start)

    def loss(self, model, batch):
        x, y = batch
        out = model(x) if self.memory is None else model(x, self.memory)
        loss = F.cross_entropy(out.flatten(0, 1).float(), y.flatten(), reduction="sum")
        return loss, loss.detach(), y.numel()

    @torch.no_grad()
    def validate(self, model) -> dict[str, float]:
        model.eval()
        where = devices.of(model)
        batches = [devices.move(b, where) for b in self.val_batches]
        if self.mem_len:
            mem_len = self.mem_len if self.cfg.eval_mem_len is None else self.cfg.eval_mem_len
            total = summed_loss(model, batches, model.new_memory(mem_len))
        else:
            total = summed_loss(model, batches)
        loss = total / sum(b[1].numel() for b in self.val_batches)
        if not math.isfinite(loss):  # the last update made the weights NaN or infinite
            raise FloatingPointError(f"the validation loss is {loss}: the weights diverged (lower the learning rate "
                                     f"or clip harder)")
        return {"val_loss": loss, "perplexity": math.exp(loss) if loss < 700 else math.inf}  # exp(710) overflows

    def describe(self, record: dict[str, float]) -> str:
        return f"validation loss {record['val_loss']:.3f}, perplexity {record['perplexity']:.2f}"

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        say, tok, last = self.say, self.tok, validation[-1]
        result: dict[str, Any] = {"val_loss": last["val_loss"], "perplexity": last["perplexity"]}
        if self.test_lines:  # made-up lines: complete "<date> =" and score the ISO dates
            prompts = [line.split(" = ")[0] + " =" for line in self.test_lines]
            outputs = complete(model, tok, prompts, max_new_tokens=14, stop=["\n"])
            refs = [" " + line.split(" = ")[1] for line in self.test_lines]
            result["exact_match"] = sum(o == r for o, r in zip(outputs, refs)) / len(refs)
            result["samples"] = [{"prompt": p, "output": o, "reference": r} for p, o, r in zip(prompts, outputs, refs)]
            say("\nheld-out prompts: prompt -> continuation   [reference]")
            for s in result["samples"][:6]:
                say(f"  {s['prompt']:>36} ->{s['output']}   [{s['reference'].strip()}] "
                    f"{'ok' if s['output'] == s['reference'] else '--'}")
            say(f"\non {len(refs)} held-out dates: exact match {result['exact_match']:.1%}")
            prompt = prompts[0]
        else:  # the start of the held-out text, at most half the model's context
            prompt = tok.decode(tok.encode(self.val_text[:80])[: (self.max_len or 80) // 2])
        gen = torch.Generator(devices.of(model)).manual_seed(self.cfg.seed)  # sampling draws on the model's device
        room = 200 if self.max_len is None else max(1, min(200, self.max_len - len(tok.encode(prompt)) - 1))
        result["sample"] = complete(model, tok, [prompt], room, temperature=0.8, top_k=40, generator=gen)[0]
        if not self.test_lines:
            say(f"\nsample (temperature 0.8, top-k 40) after {prompt!r}:\n{result['sample']}")
        say(f"validation loss {result['val_loss']:.3f} (perplexity {result['perplexity']:.2f})")
        say(f"try: aiayn generate --run {quote(str(folder))} --prompt {quote(prompt)}")
        return result


def summed_loss(model, batches: list[tuple[torch.Tensor, torch.Tensor]], memory=None) -> float:
    """The summed next-token loss of ``model`` over ``batches``; with a ``memory``, the batches are consecutive
    segments of the same streams and the memory carries each into the next."""
    total = 0.0
    for x, y in batches:
        out = model(x) if memory is None else model(x, memory)
        total += F.cross_entropy(out.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
    return total


@torch.no_grad()
def perplexity(run: str | os.PathLike, path: str | os.PathLike, block: int | None = None,
               batch_size: int = 16, *, mem_len: int | None = None, device: str | torch.device | None = None,
               quantize: str | None = None) -> dict[str, float]:
    """``{"loss", "perplexity", "tokens"}`` of the run's model on a whole text file, in blocks of ``block``
    tokens (default the model's ``max_len``), each token predicted from the ones before it in its block. A model
    with a memory (Transformer-XL) reads the file as ``batch_size`` streams of segments of ``block`` (default
    the run's training block), each token predicted from everything before it in its stream that the memory of
    ``mem_len`` positions (default the model's) still holds.

    Args:
        device, quantize: as :func:`load_lm_run`'s (default: a GPU when there is one, else the CPU; float32).
    """
    model, tok = load_lm_run(run, device=device, quantize=quantize)
    where = devices.of(model)
    ids = torch.tensor(tok.encode(read_text(path)), dtype=torch.long)
    max_len = getattr(model.cfg, "max_len", None)
    memory = None
    if max_len is None:  # a memory model: its training segment by default
        block = min(block or _trained_block(run), ids.numel() - 1)
        memory = model.new_memory(mem_len)
    else:
        if mem_len is not None:
            raise ValueError(f"mem_len={mem_len}: {run}'s model keeps no memory (it reads blocks of max_len)")
        block = min(block or max_len, max_len, ids.numel() - 1)
    if block < 1:
        raise ValueError(f"{path} holds too little text to score ({ids.numel()} tokens)")
    batches = lm_blocks(ids, block, batch_size) if memory is None else lm_stream_pass(ids, block, batch_size)
    total = summed_loss(model, [devices.move(b, where) for b in batches], memory)
    n = sum(y.numel() for _, y in batches)
    return {"loss": total / n, "perplexity": math.exp(total / n), "tokens": n}


def _trained_block(run: str | os.PathLike) -> int:
    """The segment length the run trained on (its ``args.json``), else the recipe's default."""
    args = Path(run) / "args.json"
    default = int(Config.__dataclass_fields__["block"].default)  # type: ignore[arg-type]
    return int(json.loads(args.read_text()).get("block", default)) if args.is_file() else default


__all__ = ["Config", "LanguageModel", "complete", "generate", "load_lm_run", "perplexity", "stream_text"]
