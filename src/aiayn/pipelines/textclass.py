"""Classifying texts with a saved textclass run (a BERT or a GPT classifier), and how a classifier reads its
texts: ``[CLS] text [SEP]`` for a BERT, ``text <end-of-text>`` for a GPT (training reads them the same way).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.data import load_tokenizer
from aiayn.data.tokenizer import read_json
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.models.bert import BERT
from aiayn.models.gpt import GPT
from aiayn.models.xlnet import XLNet
from aiayn.pipelines.loading import check_tokenizer, load_model, special_ids
from aiayn.training import device as devices
from aiayn.training import distributed

Batch = tuple[Tensor, Tensor, Tensor]  # ids (B, T), attention mask (B, T), labels (B,)


def encode(tok: Any, texts: list[str], max_len: int) -> list[list[int]]:
    """``[CLS] text [SEP]`` ids (a WordPiece tokenizer), or ``text <end-of-text>`` (another's: a GPT's), cut to
    ``max_len`` tokens keeping the final one (the one a GPT classifies)."""
    wordpiece = isinstance(tok, WordPieceTokenizer)
    if not wordpiece and tok.eos_id is None:
        raise ValueError("tok: a GPT's tokenizer needs an end-of-text token to end each text with; this one has none")
    out = []
    for text in texts:
        ids = tok.encode(text)[0] if wordpiece else [*tok.encode(text), tok.eos_id]
        out.append(ids if len(ids) <= max_len else [*ids[: max_len - 1], ids[-1]])
    return out


def longest(cfg: Any) -> int:
    """The most tokens the model of ``cfg`` reads: a GPT's ``max_len``, a BERT-family config's ``max_tokens``
    (a RoBERTa's positions start above ``pad_id``); an XLNet's positions are relative: any (``sys.maxsize``)."""
    return getattr(cfg, "max_tokens", getattr(cfg, "max_len", sys.maxsize))


def pad_of(tok: Any) -> int:
    """The id that pads a batch: the tokenizer's padding token, or its end-of-text (GPT-2 has no padding
    token; padding is masked, so any id serves)."""
    pad = getattr(tok, "pad_id", None)
    return cast(int, tok.eos_id if pad is None else pad)


def load_text_tokenizer(path: str | os.PathLike) -> Any:
    """A textclass run's ``tokenizer.json``: BERT's WordPiece, or a GPT's (:func:`aiayn.data.load_tokenizer`)."""
    model = read_json(path).get("model")
    if isinstance(model, dict) and model.get("type") == "WordPiece":
        return WordPieceTokenizer.load(path)
    return load_tokenizer(path)


def collate(rows: list[list[int]], labels: list[int], pad_id: int) -> Batch:
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, mask, torch.tensor(labels)


def gpt_logits(model: GPT, ids: Tensor, mask: Tensor) -> Tensor:
    """``(B, num_labels)``: the class head on each row's last real token. Rows are padded on the right, so under
    the causal mask no real token sees a pad: no mask is needed for the states (SDPA's is_causal), only to find
    each row's last real token."""
    return model.classify(model.features(ids), mask)


def logits_of(model: nn.Module, batch: Batch) -> Tensor:
    """``(B, num_labels)`` class logits of a BERT or GPT classifier, or of one wrapped by DDP or ``torch.compile``
    (training): the type is the wrapped model's, and GPT's classification runs as the wrapper's forward
    (:func:`aiayn.training.distributed.through_forward`), so that DDP all-reduces its gradients."""
    ids, mask, _ = batch
    if isinstance(distributed.unwrap(model), GPT):
        return distributed.through_forward(model, gpt_logits, ids, mask)
    if isinstance(distributed.unwrap(model), XLNet):  # the last real token's state (rows padded on the right)
        xlnet = cast(Any, model)
        return cast(Tensor, xlnet.classify(xlnet(ids, attention_mask=mask), mask))
    bert = cast(Any, model)  # a BERT, or a wrapper that lets its methods through
    return cast(Tensor, bert.classify(bert(ids, attention_mask=mask)))  # its forward, then the [CLS] head


@torch.no_grad()
def predict(model: BERT | GPT | XLNet, rows: list[list[int]], pad_id: int, batch_size: int = 128) -> Tensor:
    """``(N, K)`` logits on the CPU, in eval mode, each batch on ``model``'s device (rows sorted by length, so
    batches pad little; returned in the given order)."""
    model.eval()
    where = devices.of(model)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out = torch.empty(len(rows), model.cfg.num_labels)
    for i in range(0, len(order), batch_size):
        part = order[i : i + batch_size]
        batch = devices.move(collate([rows[j] for j in part], [0] * len(part), pad_id), where)
        out[part] = logits_of(model, batch).float().cpu()
    return out


def load_classifier(run: str | os.PathLike, *, device: str | torch.device | None = None,
                    quantize: str | None = None) -> tuple[BERT | GPT | XLNet, Any, list[str]]:
    """``(model, tokenizer, class names)`` of a textclass run (a BERT, GPT or XLNet classifier), ready
    (:func:`aiayn.pipelines.loading.ready`)."""
    run = Path(run)
    model = load_model(run, device, quantize)
    if not ((isinstance(model, BERT) and model.classifier is not None)
            or (isinstance(model, GPT) and model.score is not None)
            or (isinstance(model, XLNet) and model.cfg.head == "classification")):
        raise ValueError(f"{run} holds no BERT, GPT or XLNet classifier; train one with `aiayn train textclass`")
    classes = json.loads((run / "classes.json").read_text()) if (run / "classes.json").is_file() else \
        [str(i) for i in range(model.cfg.num_labels)]
    if len(classes) != model.cfg.num_labels:
        raise ValueError(f"{run / 'classes.json'} names {len(classes)} classes; the model has {model.cfg.num_labels}")
    tok = load_text_tokenizer(run / "tokenizer.json")
    check_tokenizer(tok, run / "tokenizer.json", model.cfg.vocab_size, special_ids(model.cfg), exact=False)
    return model, tok, classes


def text_length(run: str | os.PathLike, model: BERT | GPT | XLNet) -> int:
    """The tokens a text of ``run`` is cut to: the ``max_len`` it was trained with (``args.json``), which may be
    fewer than the model's positions (a BERT of 512 fine-tuned on 128), else the model's."""
    args = Path(run) / "args.json"
    trained = json.loads(args.read_text()).get("max_len") if args.is_file() else None
    return min(trained or longest(model.cfg), longest(model.cfg))


@torch.no_grad()
def classify_texts(model: BERT | GPT | XLNet, tok: Any, classes: list[str], texts: list[str],
                   top: int = 1, max_len: int | None = None) -> list[dict[str, Any]]:
    """The ``top`` most likely classes of each text under a loaded classifier: one
    ``{"text", "label", "score", "top": [{"class", "probability"}, ...]}`` per text, most likely first (as images
    get them); ``label`` and ``score`` are the most likely class and its probability, under the names
    ``transformers``' text-classification pipeline gives them. Texts are cut to ``max_len`` tokens (a run's
    :func:`text_length`; default the model's positions)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one string")
    if not 1 <= top <= len(classes):
        raise ValueError(f"top must be in [1, {len(classes)}], got {top}")
    probs = predict(model, encode(tok, texts, max_len or longest(model.cfg)), pad_of(tok)).softmax(-1)
    best = probs.topk(top, dim=-1)
    found = [[{"class": classes[i], "probability": p} for p, i in zip(values.tolist(), index.tolist())]
             for values, index in zip(best.values, best.indices)]
    return [{"text": text, "label": top[0]["class"], "score": top[0]["probability"], "top": top}
            for text, top in zip(texts, found)]


__all__ = [
    "classify_texts",
    "collate",
    "encode",
    "gpt_logits",
    "load_classifier",
    "load_text_tokenizer",
    "logits_of",
    "longest",
    "pad_of",
    "predict",
    "text_length",
]
