"""Models called as ``transformers`` users call them: keyword inputs in, an output object out.

    out = model(input_ids=ids, attention_mask=mask, labels=ids)    # a GPT: out.loss, out.logits
    out = model(**tokenizer(texts, return_tensors="pt", padding=True))  # a BERT: out.last_hidden_state
    out = vit(pixel_values=images, labels=classes)                 # out.loss, out.logits
    model.config, model.device, model.dtype

Each model's ``forward`` stays as its paper gives it (ids in, one tensor out, by position: what the package
itself calls). A call whose first input comes by ``transformers``' name (``input_ids=`` or ``pixel_values=``, with
no positional argument) goes instead to the family's ``outputs`` method, which runs that same forward and returns
one of the dataclasses below, with ``transformers``' field names, and the loss ``transformers`` computes when labels
are given (:func:`causal_lm_loss`, :func:`masked_lm_loss`, :func:`classification_loss`: means over the labels that
are not ``-100``). ``return_dict=False`` gives the fields that are set as a tuple, in order, as ``transformers``
does; an output also reads as a mapping (``out["logits"]``, ``out.keys()``) and by position (``out[0]``).

Differences from ``transformers`` that a user may meet:

- every output also holds ``last_hidden_state`` (the final hidden states, which ``transformers`` gives the heads
  only with ``output_hidden_states=True``); ``output_hidden_states=True`` and ``output_attentions=True`` are
  refused (:mod:`aiayn.viz.attention` records attention weights);
- a GPT called with a left-padded ``attention_mask`` counts positions over the real tokens, as generation does
  (``transformers``' plain forward counts them from the first column unless given ``position_ids``);
- an encoder-decoder reads its source padding from ``pad_id``: an ``attention_mask`` that says otherwise is
  refused rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE = -100  # transformers' label for "no loss here" (CrossEntropyLoss's ignore_index)
INPUTS = ("input_ids", "pixel_values")  # a keyword call naming one of these is a transformers-shaped call


@dataclass
class ModelOutput:
    """What a model gives back to a keyword call: fields by name, as a mapping, or by position (those set)."""

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.keys())

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(f"{key!r}: this {type(self).__name__} holds {self.keys()}")
            return getattr(self, key)
        return self.to_tuple()[key]

    def __iter__(self):  # as transformers' ModelOutput (an OrderedDict): the names of the fields set
        return iter(self.keys())


@dataclass
class BaseModelOutput(ModelOutput):
    """An encoder without a head: ``last_hidden_state`` ``(B, T, C)``; ``pooler_output`` ``(B, C)`` where the
    model has a pooler (BERT's tanh layer on [CLS], ViT's [CLS], Swin's mean)."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None = None


@dataclass
class CausalLMOutput(ModelOutput):
    """A decoder-only language model: next-token ``logits`` ``(B, T, V)``; ``past_key_values``: the cache to pass
    back with the next ids (with ``use_cache=True`` or when one was passed)."""

    loss: Tensor | None
    logits: Tensor
    past_key_values: Any = None
    last_hidden_state: Tensor | None = None


@dataclass
class Seq2SeqLMOutput(ModelOutput):
    """An encoder-decoder: the decoder's ``logits`` ``(B, T, V)`` and the encoder's output ``(B, S, C)``."""

    loss: Tensor | None
    logits: Tensor
    encoder_last_hidden_state: Tensor | None = None


@dataclass
class MaskedLMOutput(ModelOutput):
    """A masked language model: ``logits`` ``(B, T, V)`` at every position."""

    loss: Tensor | None
    logits: Tensor
    last_hidden_state: Tensor | None = None


@dataclass
class PreTrainingOutput(ModelOutput):
    """BERT's two pre-training heads (ALBERT's second is sentence order): ``prediction_logits`` ``(B, T, V)`` and
    ``seq_relationship_logits`` ``(B, 2)``; the loss is their sum."""

    loss: Tensor | None
    prediction_logits: Tensor
    seq_relationship_logits: Tensor
    last_hidden_state: Tensor | None = None


@dataclass
class SequenceClassifierOutput(ModelOutput):
    """A classifier of texts or images: ``logits`` ``(B, num_labels)``."""

    loss: Tensor | None
    logits: Tensor
    last_hidden_state: Tensor | None = None


@dataclass
class ObjectDetectionOutput(ModelOutput):
    """DETR: class ``logits`` ``(B, Q, K + 1)`` and ``pred_boxes`` ``(B, Q, 4)`` (cx, cy, w, h in [0, 1]) of every
    query; with labels, ``loss`` and its unweighted parts of the last layer (``loss_dict``)."""

    loss: Tensor | None
    loss_dict: dict[str, Tensor] | None
    logits: Tensor
    pred_boxes: Tensor
    auxiliary_outputs: list[dict[str, Tensor]] | None = None


def causal_lm_loss(logits: Tensor, labels: Tensor | None) -> Tensor | None:
    """``transformers``' causal-LM loss: position t's logits ``(B, T, V)`` predict ``labels[:, t + 1]`` (so
    ``labels=input_ids`` works); the mean over labels that are not ``-100``. ``None`` without labels."""
    if labels is None:
        return None
    _check_labels(labels, logits.shape[:2])
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE)


def masked_lm_loss(logits: Tensor, labels: Tensor | None) -> Tensor | None:
    """The cross-entropy of ``logits`` ``(B, T, V)`` against ``labels`` ``(B, T)`` at the same positions (a
    masked LM, an encoder-decoder's targets), the mean over labels that are not ``-100``."""
    if labels is None:
        return None
    _check_labels(labels, logits.shape[:2])
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)


def classification_loss(logits: Tensor, labels: Tensor | None) -> Tensor | None:
    """``transformers``' ``problem_type`` chosen from the labels: one output is regression (mean squared error);
    integer labels ``(B,)`` single-label classification (cross-entropy); float labels ``(B, num_labels)``
    multi-label (binary cross-entropy on each)."""
    if labels is None:
        return None
    if logits.size(-1) == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.reshape(-1).float())
    if not labels.is_floating_point():
        _check_labels(labels, logits.shape[:1])
        return F.cross_entropy(logits.float(), labels)
    if labels.shape != logits.shape:
        raise ValueError(f"labels: float labels are multi-label targets, expected {tuple(logits.shape)}, "
                         f"got {tuple(labels.shape)}")
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def _check_labels(labels: Tensor, shape: torch.Size) -> None:
    if labels.shape != shape:
        raise ValueError(f"labels must be shaped {tuple(shape)}, got {tuple(labels.shape)}")
    if labels.is_floating_point():
        raise ValueError(f"labels must be integer ids (-100 where there is no loss), got {labels.dtype}")


class OutputsMixin:
    """``model(input_ids=..., ...)`` routed to the family's ``outputs`` method; ``config``, ``device``, ``dtype``.

    Mixed into every model class by :class:`~aiayn.models.pretrained.PretrainedMixin`. Positional calls, and
    keyword calls without ``input_ids``/``pixel_values``, are ``nn.Module``'s own (the paper's ``forward``).
    """

    cfg: Any
    outputs: Callable[..., ModelOutput]  # each family's: its inputs by transformers' names -> an output

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args or not kwargs.keys() & set(INPUTS):
            return super().__call__(*args, **kwargs)  # type: ignore[misc]  # nn.Module's: hooks, then forward
        return_dict = kwargs.pop("return_dict", True)
        for name in ("output_hidden_states", "output_attentions"):
            if kwargs.pop(name, False):
                raise ValueError(f"{name}=True is not supported by aiayn models; every output holds "
                                 f"last_hidden_state, and aiayn.viz.attention records attention weights")
        out = self.outputs(**kwargs)
        return out if return_dict is not False else out.to_tuple()

    @property
    def config(self) -> Any:
        """The model's frozen config (``model.cfg``), as ``transformers``' ``model.config``."""
        return self.cfg

    @property
    def device(self) -> torch.device:
        """Where the model's first parameter is."""
        return next(self.parameters()).device  # type: ignore[attr-defined]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's first floating-point parameter."""
        return next(p.dtype for p in self.parameters() if p.is_floating_point())  # type: ignore[attr-defined]


def image_outputs(model: Any, pixel_values: Tensor, labels: Tensor | None = None) -> ModelOutput:
    """A ViT's or a Swin's keyword call: ``(B, in_channels, H, W)`` images -> class logits with
    ``num_classes`` (the loss with ``labels``), else the tokens and the pooled features, as ``ViTModel`` /
    ``SwinModel``. ``last_hidden_state`` is ``(B, tokens, C)`` (Swin's map flattened, as ``transformers``)."""
    features = model.forward_features(pixel_values)
    tokens, pooled = features.flatten(1, -2), model.pool(features)  # (B, N, C), (B, C)
    if not model.cfg.num_classes:
        if labels is not None:
            raise ValueError("labels: this model has num_classes=0 (no classifier), so there is no loss")
        return BaseModelOutput(last_hidden_state=tokens, pooler_output=pooled)
    logits = model.head(pooled)
    return SequenceClassifierOutput(loss=classification_loss(logits, labels), logits=logits, last_hidden_state=tokens)


__all__ = ["IGNORE", "INPUTS", "BaseModelOutput", "CausalLMOutput", "MaskedLMOutput", "ModelOutput",
           "ObjectDetectionOutput", "OutputsMixin", "PreTrainingOutput", "Seq2SeqLMOutput",
           "SequenceClassifierOutput", "causal_lm_loss", "classification_loss", "image_outputs", "masked_lm_loss"]
