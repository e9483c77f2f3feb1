"""The training cases: one update (forward, loss, backward, optimizer step) of ours against the same update of its
peers, on the same weights.

    train-small    Transformer d256 3+3 layers, vocabulary 8k   against torch.nn.Transformer and MarianMTModel
    train-base     transformer-base, vocabulary 8k              against torch.nn.Transformer and MarianMTModel
    gpt2-train     gpt2 (124M), AdamW                           against GPT2LMHeadModel

One loss and one optimizer per family on every side: label-smoothed cross-entropy (epsilon 0.1: ours from
:mod:`aiayn.training.losses`, the peers ``F.cross_entropy(label_smoothing=0.1)``) and Adam as the paper sets it;
GPT-2 plain cross-entropy and AdamW.

Shapes: B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.analysis import count_parameters
from aiayn.benchmark.cases.common import base_transformer, close, describe, millions, small_transformer
from aiayn.benchmark.harness import Case, Side, Target
from aiayn.benchmark.peers.hf import gpt2_hf, marian
from aiayn.benchmark.peers.torch_transformer import TorchTransformer
from aiayn.convert import from_hf
from aiayn.models import build
from aiayn.models.transformer import Transformer, TransformerConfig
from aiayn.training.losses import label_smoothed_loss


def _training_step(model: nn.Module, optimizer: torch.optim.Optimizer,
                   loss: Callable[[], Tensor]) -> Callable[[], None]:
    """Forward, backward, update; the gradients are dropped at the end of the step, not the start of the
    next, so between steps only the weights and the optimizer's state are held (what peak memory is above)."""

    def step() -> None:
        loss().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model.train()
    return step


def _adam(model: nn.Module) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)  # section 5.3


def translation_training(name: str, cfg: TransformerConfig, batch: int, length: int, target: Target,
                         device: torch.device) -> Case:
    """One training step of ``cfg`` on ``batch`` pairs of ``length`` source and ``length`` target tokens."""
    torch.manual_seed(0)
    ours = build(cfg)
    peer = TorchTransformer(cfg)
    peer.load_ours(cast(Transformer, ours))  # built from a TransformerConfig
    hf = marian(cfg)
    src = torch.randint(3, cfg.src_vocab_size, (batch, length))  # (B, S) no padding: every side does the same work
    out = torch.randint(3, cfg.tgt_vocab_size, (batch, length))  # (B, T) the targets
    tgt = torch.cat([torch.full((batch, 1), cfg.bos_id), out[:, :-1]], dim=1)  # (B, T) shifted right

    for model in (ours, peer, hf):
        model.eval()
    with torch.no_grad():
        converted = from_hf(hf).eval()
        logits = ours(src, tgt)
        checks = {"torch.nn.Transformer": close("logits, our weights copied in (eval)", peer(src, tgt), logits)}
        marian_check = close("logits of ours carrying Marian's weights (from_hf, eval)", converted(src, tgt),
                             hf(input_ids=src, attention_mask=src != cfg.pad_id, decoder_input_ids=tgt).logits)
    # The converted model is ours with the case's config, but for the layout of the sinusoid table.
    marian_check["same_config"] = converted.cfg == dataclasses.replace(cfg, positional="sinusoidal-concat")
    marian_check["ok"] = marian_check["ok"] and marian_check["same_config"]
    checks["MarianMTModel"] = marian_check

    ours, peer, hf = ours.to(device), peer.to(device), hf.to(device)
    src, tgt, out = src.to(device), tgt.to(device), out.to(device)

    def ours_loss() -> Tensor:
        loss, _, n = label_smoothed_loss(ours(src, tgt), out, cfg.pad_id, 0.1)
        return loss / n

    def smoothed(logits: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), out.flatten(), ignore_index=cfg.pad_id, label_smoothing=0.1)

    sides = [
        Side("aiayn", _training_step(ours, _adam(ours), ours_loss)),
        Side("torch.nn.Transformer", _training_step(peer, _adam(peer), lambda: smoothed(peer(src, tgt)))),
        Side("MarianMTModel", _training_step(hf, _adam(hf), lambda: smoothed(
            hf(input_ids=src, attention_mask=src != cfg.pad_id, decoder_input_ids=tgt).logits))),
    ]
    what = (f"one training step (forward, label-smoothed loss, backward, Adam) of the Transformer ({describe(cfg)}, "
            f"dropout {cfg.dropout}), batch {batch} x ({length} source + {length} target) tokens; tokens/s counts "
            f"source and target tokens")
    return Case(name, what, sides, units=2 * batch * length, unit="tokens", checks=checks, target=target,
                extra={"config": dataclasses.asdict(cfg), "batch": batch, "length": length,
                       "parameters": count_parameters(ours)})


def train_small(quick: bool, device: torch.device) -> Case:
    batch, length = (4, 8) if quick else (32, 32)
    return translation_training("train-small", small_transformer(quick), batch, length, Target(1.15), device)


def train_base(quick: bool, device: torch.device) -> Case:
    batch, length = (4, 8) if quick else (32, 32)
    return translation_training("train-base", base_transformer(quick), batch, length, Target(1.0, mfu=0.7), device)


def gpt2_train(quick: bool, device: torch.device) -> Case:
    """One training step (forward, next-token cross-entropy, backward, AdamW) against ``GPT2LMHeadModel`` on the
    same weights, with GPT-2's dropout (0.1) on both. The check runs with dropout off (eval): the loss and
    the gradients must agree."""
    batch, length = (2, 16) if quick else (4, 256)
    hf = gpt2_hf(quick)
    ours: Any = from_hf(hf)  # a GPT
    v = ours.cfg.vocab_size
    ids = torch.randint(0, v, (batch, length), generator=torch.Generator().manual_seed(0))  # (B, T)

    def ours_loss() -> Tensor:
        logits = ours(ids)  # (B, T, V)
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), ids[:, 1:].reshape(-1))

    def hf_loss() -> Tensor:
        return hf(input_ids=ids, labels=ids).loss  # shifts the labels itself

    ours.eval()
    hf.eval()
    mine, theirs = ours_loss(), hf_loss()
    mine.backward()
    theirs.backward()
    check = close("loss, dropout off (eval)", mine.detach(), theirs.detach())
    grads = []
    for name, hf_name, transposed in (("embed.tokens.weight", "transformer.wte.weight", False),
                                      ("decoder.layers.0.ff.fc1.weight", "transformer.h.0.mlp.c_fc.weight", True)):
        expected = hf.get_parameter(hf_name).grad
        assert expected is not None  # theirs.backward() above
        expected = expected.T if transposed else expected  # GPT-2's Conv1D stores (in, out)
        scale = expected.abs().max()
        grads.append(close(f"gradient of {name} / its largest entry", ours.get_parameter(name).grad / scale,
                           expected / scale))
    check["gradients"] = grads
    check["ok"] = check["ok"] and all(g["ok"] for g in grads)
    ours.zero_grad(set_to_none=True)
    hf.zero_grad(set_to_none=True)

    ours, hf, ids = ours.to(device), hf.to(device), ids.to(device)

    def adamw(model: nn.Module) -> torch.optim.AdamW:
        return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    sides = [Side("aiayn", _training_step(ours, adamw(ours), ours_loss)),
             Side("GPT2LMHeadModel", _training_step(hf, adamw(hf), hf_loss))]
    what = (f"gpt2 ({millions(ours)} parameters) training step (forward, cross-entropy, "
            f"backward, AdamW), batch {batch} x {length} tokens, dropout 0.1, against GPT2LMHeadModel on the same "
            f"weights")
    return Case("gpt2-train", what, sides, units=batch * length, unit="tokens",
                checks={"GPT2LMHeadModel": check}, extra={"batch": batch, "length": length})


__all__ = ["gpt2_train", "train_base", "train_small", "translation_training"]
