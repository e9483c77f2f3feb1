"""Text classification: BERT's [CLS] head (section 4 of the BERT paper) or GPT's last-token head (Radford et al.
2018, Figure 1), trained from scratch or fine-tuned.

    model_type="bert"   [CLS] text [SEP] -> BERT -> tanh(Linear(hidden[CLS])) -> dropout -> Linear -> class logits
    model_type="gpt"    [CLS] text [SEP] -> GPT  -> hidden[last real token] -> dropout -> Linear -> class logits

A GPT reads left to right, so only the last token has seen the whole text: its state is the one classified
(the paper's extract token; here the [SEP] that ends each text, or, with another model's tokenizer, its
end-of-text token appended to the text).

The data is a folder of one text file per class (``pos.txt.gz``, ``neg.txt.gz``: one text per line) or a
``label<TAB>text`` file (:mod:`aiayn.data.labelled`). Each text is kept once and a text found under two labels
is dropped, before the split into training, validation and test, so no text is on both sides of it. The
default data is made up, so it runs with no download: dates written freely in English, labelled by the half
of the year they fall in.

Fine-tuning is ``init_from``: a BERT run (``aiayn train mlm``) or a Hugging Face BERT folder, or with
``model_type="gpt"`` a GPT run (``aiayn train lm``) or a Hugging Face GPT-2 folder with its ``tokenizer.json``,
gives its weights and its tokenizer, and only the classifier starts fresh. The best weights on validation are
kept; the test split is scored once, at the end, with them: accuracy, precision, recall and F1 per class, and the
confusion matrix (``confusion.png``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.analysis import count_parameters
from aiayn.data import load_tokenizer, make_pairs
from aiayn.data.labelled import clean, read_labelled, split
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.evaluation.classification import accuracy, confusion_matrix, precision_recall
from aiayn.models import build, preset
from aiayn.models.bert import BertConfig
from aiayn.models.checkpoint import load
from aiayn.models.gpt import GPTConfig
from aiayn.models.xlnet import XLNetConfig
from aiayn.pipelines.textclass import (
    classify_texts,
    collate,
    encode,
    load_classifier,
    load_text_tokenizer,
    logits_of,
    longest,
    pad_of,
    predict,
    text_length,
)
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.recipes.plm import wordpiece_of
from aiayn.training import decay_groups, distributed, finetune, warmup_cosine
from aiayn.training import device as devices

# model_type: its config class and its default preset
FAMILIES: dict[str, tuple[type[Any], str]] = {"bert": (BertConfig, "bert-tiny"), "gpt": (GPTConfig, "gpt-tiny"),
                                              "xlnet": (XLNetConfig, "xlnet-tiny")}


def date_halves(n: int, seed: int) -> tuple[list[str], list[int], list[str]]:
    """Made-up data: ``n`` dates written freely in English, labelled by the half of the year they fall in."""
    pairs, _ = make_pairs("dates", n, 0, seed)
    return [free for free, _ in pairs], [int(int(iso[5:7]) > 6) for _, iso in pairs], ["jan-jun", "jul-dec"]


def batches(rows: list[list[int]], labels: list[int], batch_size: int, pad_id: int, seed: int, start: int = 0):
    """Endless batches; batch k is drawn with a generator seeded by ``(seed, k)`` (a resumed run goes on alike)."""
    k = start
    while True:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        idx = torch.randint(len(rows), (batch_size,), generator=gen).tolist()
        yield collate([rows[i] for i in idx], [labels[i] for i in idx], pad_id)
        k += 1


def scores(logits: Tensor, labels: Tensor, classes: list[str]) -> dict[str, Any]:
    """``{"accuracy", "loss", "precision", "recall", "f1"}`` (per class) and ``"macro_f1"``, ``"confusion"``."""
    predicted = logits.argmax(-1)
    matrix = confusion_matrix(predicted, labels, len(classes))
    per_class = precision_recall(matrix)
    return {"accuracy": accuracy(predicted, labels), "loss": F.cross_entropy(logits, labels).item(), **per_class,
            "macro_f1": sum(per_class["f1"]) / len(classes), "confusion": matrix.tolist()}


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "textclass"
    data: str | None = setting(None, "a folder of one text file per class (name.txt or name.txt.gz, one text a "
                                     "line) or a label<TAB>text file; default: made-up dates labelled by half-year")
    n_examples: int = setting(6000, "made-up texts")
    val_fraction: float = setting(0.1, "of the texts, held out to choose the weights on")
    test_fraction: float = setting(0.1, "of the texts, held out and scored once at the end")
    split_seed: int = setting(0, "seeds the split alone, so runs of every seed share one test split")
    vocab_size: int = setting(2000, "WordPiece vocabulary (trained on the training texts; with init_from, its own)")
    model_type: str = setting("bert", "bert (the [CLS] state classified), gpt (the last token's state, Radford "
                                      "et al. 2018) or xlnet (the last token's, through a tanh projection)")
    preset: str = setting("", "the model preset; empty: bert-tiny, or gpt-tiny for model_type gpt (with "
                              "init_from: the source's config)")
    max_len: int = setting(128, "tokens per text, [CLS] and [SEP] included; longer texts are cut")
    steps: int = setting(1000, "optimizer updates")
    batch_size: int = setting(32, "texts per batch")
    lr: float = setting(1e-3, "peak learning rate (fine-tuning a pre-trained BERT wants less: BERT used 2e-5 to 5e-5 "
                              "for BERT-base; small models take more)")
    weight_decay: float = setting(0.01, "AdamW's, on matrices only (BERT)")
    warmup: int = setting(100, "warm-up updates")
    eval_every: int = setting(250, "validate every N updates, keeping the best weights")

    def __post_init__(self) -> None:
        if self.model_type not in FAMILIES:
            raise ValueError(f"model_type={self.model_type!r}: expected one of {tuple(FAMILIES)}")
        if not self.preset:  # the family's small preset, written into args.json as chosen
            object.__setattr__(self, "preset", FAMILIES[self.model_type][1])
        super().__post_init__()
        positive(self, "n_examples", "vocab_size", "max_len", "batch_size", "lr")
        family = FAMILIES[self.model_type][0]
        if not isinstance(preset(self.preset), family):
            raise ValueError(f"preset={self.preset!r} is not a {self.model_type.upper()}; model_type="
                             f"{self.model_type!r} takes a {family.__name__} preset")
        if self.max_len < 3:
            raise ValueError(f"max_len must leave room for a token between [CLS] and [SEP], got {self.max_len}")


def _scores(run: Path, args: dict[str, Any], data: str, split: str | None = None, **run_on: Any) -> dict[str, Any]:
    """``aiayn evaluate`` of a text classifier: :func:`text_scores` (the test split of its own data by default)."""
    return text_scores(run, data, split, **run_on)


class TextClassification(Recipe):
    evaluation = Evaluation(("data", "split"), "data", _scores)
    takes_init_from = True

    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        if cfg.data is None:
            texts, labels, self.classes = date_halves(cfg.n_examples, cfg.seed)
            self.run_name = "textclass-dates"
        else:
            texts, labels, self.classes = read_labelled(cfg.data)
            self.run_name = f"textclass-{Path(cfg.data).name.split('.')[0]}"
        texts, labels, report = clean(texts, labels)
        train, val, test = split(texts, labels, cfg.val_fraction, cfg.test_fraction, cfg.split_seed)
        start = self.start_from()  # fine-tuning: the source's config and tokenizer
        family = FAMILIES[cfg.model_type][0]
        gpt = cfg.model_type == "gpt"
        if start is not None and not isinstance(start, family):
            raise ValueError(f"init_from={cfg.init_from!r} holds a {type(start).__name__} model; textclass "
                             f"fine-tunes a {cfg.model_type.upper()} with model_type={cfg.model_type!r}")
        if folder is not None:
            tok = load_text_tokenizer(folder / "tokenizer.json")
        elif start is not None:
            assert cfg.init_from is not None  # start_from loads it
            source = finetune.folder_of(cfg.init_from)
            tok = load_tokenizer(source / "tokenizer.json") if gpt else wordpiece_of(source)
        else:
            tok = WordPieceTokenizer.train(train[0], vocab_size=cfg.vocab_size)
        self.tok = tok = distributed.broadcast(tok)  # several ranks: rank 0's
        self.files = {"tokenizer.json": tok, "classes.json": self.classes}
        self.pad_id = pad_of(tok)
        head = {"head": "classification", "num_labels": len(self.classes), **({"pad_id": self.pad_id} if gpt else {})}
        if start is not None:
            self.mcfg = dataclasses.replace(start, **{**head, **cfg.model})
        else:
            ids = {"eos_id": tok.sep_id} if gpt else {"cls_id": tok.cls_id, "sep_id": tok.sep_id,
                                                       "mask_id": tok.mask_id, "pad_id": tok.pad_id}
            positions = {} if cfg.model_type == "xlnet" else {"max_len": cfg.max_len}  # XLNet's are relative
            self.mcfg = preset(cfg.preset, **{"vocab_size": tok.vocab_size, **ids, **positions, **head, **cfg.model})
        self.model = build(self.mcfg)
        if gpt and not self.mcfg.tie_output:  # the LM head of an untied GPT takes no part in classifying: it does
            self.model.lm_head.requires_grad_(False)  # not train, and DDP waits for no gradient of it
        max_len = min(cfg.max_len, longest(self.mcfg))
        (self.train_rows, self.val_rows, self.test_rows) = (encode(tok, t, max_len) for t, _ in (train, val, test))
        self.train_labels = train[1]
        self.val_labels, self.test_labels = torch.tensor(val[1]), torch.tensor(test[1])
        say(f"data {self.run_name}: {report['read']:,} texts, {report['duplicates']:,} copies and "
            f"{report['conflicting']:,} texts under two labels dropped; {len(train[0]):,} train, {len(val[0]):,} "
            f"validation, {len(test[0]):,} test; classes {self.classes}; {type(tok).__name__} {tok.vocab_size:,}")
        say(f"model {cfg.init_from or cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} "
            f"updates of {cfg.batch_size} texts")
        self.report = report

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(decay_groups(self.model, self.cfg.weight_decay), lr=self.cfg.lr, betas=(0.9, 0.999),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        return batches(self.train_rows, self.train_labels, self.cfg.batch_size, self.pad_id, self.cfg.seed, start)

    def loss(self, model, batch):
        loss = F.cross_entropy(logits_of(model, batch), batch[2], reduction="sum")
        return loss, loss.detach(), batch[2].numel()

    def validate(self, model) -> dict[str, float]:
        s = scores(predict(model, self.val_rows, self.pad_id), self.val_labels, self.classes)
        return {"val_loss": s["loss"], "accuracy": s["accuracy"], "macro_f1": s["macro_f1"]}

    def describe(self, record: dict[str, float]) -> str:
        return f"validation loss {record['val_loss']:.3f}, accuracy {record['accuracy']:.1%}"

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        from aiayn.viz.confusion import plot_confusion

        chosen = min(validation, key=lambda r: r["val_loss"])
        if (folder / "best.safetensors").is_file():  # the weights chosen on validation
            model = load(folder / "best.safetensors").to(devices.of(model))
        test = scores(predict(model, self.test_rows, self.pad_id), self.test_labels, self.classes)
        plot_confusion(torch.tensor(test["confusion"]), self.classes, folder / "confusion.png",
                       title=f"{self.run_name}: test accuracy {test['accuracy']:.1%}")
        self.say(f"weights of update {chosen['step']} (validation accuracy {chosen['accuracy']:.1%}); on "
                 f"{len(self.test_rows):,} test texts: accuracy {test['accuracy']:.1%}, macro F1 "
                 f"{test['macro_f1']:.3f} (confusion.png)")
        for name, p, r in zip(self.classes, test["precision"], test["recall"]):
            self.say(f"  {name}: precision {p:.1%}, recall {r:.1%}")
        return {"classes": self.classes, "data_report": self.report, "chosen_step": chosen["step"],
                "val_accuracy": chosen["accuracy"], **{f"test_{k}": v for k, v in test.items()}}


def text_scores(run: str | os.PathLike, data: str | os.PathLike, split_name: str | None = None, *,
                device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, Any]:
    """``{"split", "n", "accuracy", "loss", "precision", "recall", "f1", "macro_f1", "confusion", "classes"}`` of a
    textclass run on labelled data (:func:`aiayn.data.labelled.read_labelled`), each text once.

    Args:
        split_name: ``"train"``, ``"val"`` or ``"test"``: that part of the split the run was trained with;
            ``"all"``: every text. Default: ``"test"`` when ``data`` is what the run trained on (every text would
            score the training texts too), else ``"all"`` (a file the run never read).

    Raises:
        ValueError: the data's classes are not the run's, or an unknown ``split_name``.
    """
    from aiayn.training.session import read_args

    parts = ("train", "val", "test")
    if split_name is not None and split_name not in (*parts, "all"):
        raise ValueError(f"split={split_name!r}: expected one of {[*parts, 'all']}")
    args = read_args(run) if (Path(run) / "args.json").is_file() else {}
    if split_name is None:
        split_name = "test" if trained_on(args.get("data"), data) else "all"
    model, tok, classes = load_classifier(run, device=device, quantize=quantize)
    texts, labels, names = read_labelled(data)
    if names != classes:
        raise ValueError(f"{data} holds the classes {names}; the run was trained on {classes}")
    texts, labels, _ = clean(texts, labels)
    if split_name != "all":
        if not args:
            raise ValueError(f"split={split_name!r} is a part of the run's own split, but {run} holds no args.json")
        texts, labels = split(texts, labels, args["val_fraction"], args["test_fraction"],
                              args["split_seed"])[parts.index(split_name)]
    rows = encode(tok, texts, text_length(run, model))
    return {"split": split_name, "n": len(rows),
            **scores(predict(model, rows, pad_of(tok)), torch.tensor(labels), classes), "classes": classes}


def trained_on(trained: str | None, data: str | os.PathLike) -> bool:
    """Whether ``data`` is the file or folder a run's ``data`` setting (``trained``) names: the same path, or, when
    that path does not reach it from here (the run was trained elsewhere), the same name."""
    if trained is None:  # made-up texts
        return False
    try:
        return os.path.samefile(trained, data)
    except OSError:
        return Path(trained).name == Path(data).name


__all__ = ["Config", "TextClassification", "classify_texts", "date_halves", "load_classifier", "load_text_tokenizer",
           "scores", "text_length", "text_scores"]
