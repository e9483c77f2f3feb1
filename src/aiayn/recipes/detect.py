"""Object detection: DETR trained on images, and finding objects in an image with a run.

Training follows DETR (Carion et al., 2020, section 4 and appendix A.4): AdamW with weight decay 1e-4,
the backbone at a lower learning rate than the Transformer, gradients clipped to norm 0.1, the set loss
with auxiliary losses on every decoder layer. Instead of DETR's 300 or 500 epochs and one step decay,
a short warm-up and a cosine decay fit the schedule to a run of minutes.

The default data is made up, so it runs with no download: coloured shapes on a small canvas
(:func:`aiayn.data.detection.draw_shapes`), fresh images every batch, a fixed held-out set. ``data="voc"``
reads a Pascal VOC folder (BCCD, the blood-cell images in ``../shared/data/bccd``): ``train`` to learn,
``val`` to validate, images resized so their longer side is ``image_size`` and flipped at random.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch

from aiayn.analysis import count_parameters
from aiayn.data.detection import SHAPES, hflip, read_voc, shape_batches, synthetic_shapes
from aiayn.evaluation.detection import average_precision
from aiayn.models import build, preset
from aiayn.models.config import override
from aiayn.models.detr.boxes import cxcywh_to_xyxy
from aiayn.models.detr.criterion import SetCriterion
from aiayn.models.detr.model import DETR
from aiayn.models.detr.postprocess import postprocess
from aiayn.pipelines.detect import collate_on, collated, detect, find_objects, load_detector
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import device as devices
from aiayn.training import warmup_cosine


def voc_batches(samples: list, batch_size: int, seed: int, start: int = 0):
    """Endless batches of random training samples, each flipped left-right with probability 1/2; batch ``k`` is
    drawn from the generator ``(seed, k)``."""
    k = start
    while True:
        rng = np.random.default_rng([seed, k])
        picks = rng.integers(len(samples), size=batch_size)
        flips = rng.random(batch_size) < 0.5
        yield [hflip(samples[i]) if f else samples[i] for i, f in zip(picks, flips)]
        k += 1


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "detect"
    data: str | None = setting(None, "voc (a Pascal VOC folder, --data-dir: ../shared/data/bccd); default: "
                                     "shapes the package draws, fresh every batch")
    data_dir: str | None = setting(None, "the VOC folder, or the folder holding it")
    image_size: int = setting(128, "side of the drawn canvas, or the longer side VOC images are resized to")
    max_objects: int = setting(3, "shapes per drawn image (1 to this)")
    n_test: int = setting(200, "drawn images held out (VOC: its val split)")
    preset: str = setting("detr-tiny", "the model preset; num_classes is set from the data")
    steps: int = setting(2000, "optimizer updates")
    batch_size: int = setting(16, "images per batch")
    lr: float = setting(1e-3, "peak learning rate of the Transformer and heads (DETR: 1e-4 from ImageNet "
                              "weights; from scratch on the shapes 1e-3 learned fastest of what was tried)")
    lr_backbone: float = setting(3e-4, "peak learning rate of the CNN backbone (DETR: 1e-5)")
    weight_decay: float = setting(1e-4, "AdamW's, on every parameter (DETR)")
    warmup: int = setting(200, "warm-up updates; then cosine decay, to fit DETR's 500 epochs into minutes")
    clip: float = setting(0.1, "maximum gradient norm (DETR)")
    eos_coef: float = setting(0.1, "weight of the no-object class in the cross-entropy (DETR)")
    eval_every: int = setting(500, "validate every N updates, keeping the best weights")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "image_size", "max_objects", "n_test", "batch_size", "lr", "lr_backbone", "clip", "eos_coef")
        if self.data not in (None, "voc"):
            raise ValueError(f"data={self.data!r}: expected None (drawn shapes) or 'voc' (with data_dir)")
        if self.data is None and self.image_size <= 40:
            raise ValueError(f"image_size must be above 40, the largest side of a drawn shape; got {self.image_size}")
        if self.data == "voc" and self.data_dir is None:
            raise ValueError("data='voc' needs data_dir, the Pascal VOC folder (e.g. ../shared/data/bccd)")


def _scores(run: Path, args: dict[str, Any], data_dir: str, split: str = "val", **run_on: Any) -> dict[str, Any]:
    """``aiayn evaluate`` of a detector: :func:`evaluate_voc` on the VOC folder ``data_dir``."""
    return evaluate_voc(run, data_dir, split, **run_on)


class Detection(Recipe):
    evaluation = Evaluation(("data_dir", "split"), "data_dir", _scores)
    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        self.clip = cfg.clip
        if cfg.data is None:
            self.classes, self.run_name = list(SHAPES), "detect-shapes"
            self.test = synthetic_shapes(cfg.n_test, cfg.seed + 1, cfg.image_size, cfg.max_objects)
            most = cfg.max_objects
        else:
            assert cfg.data_dir is not None  # Config refuses data='voc' without data_dir
            self.train_set, self.classes, dropped = read_voc(cfg.data_dir, "train", cfg.image_size)
            self.test, _, dropped_test = read_voc(cfg.data_dir, "val", cfg.image_size, self.classes)
            self.run_name = f"detect-{Path(cfg.data_dir).name.lower()}"
            most = max(len(t["labels"]) for _, t in self.train_set + self.test)
            say(f"data {self.run_name}: {len(self.train_set)} training images, {len(self.test)} validation; classes "
                f"{self.classes}; {dropped + dropped_test} boxes without area dropped")
        self.files = {"classes.json": self.classes}
        m = preset(cfg.preset, **{"num_classes": len(self.classes), **cfg.model})
        if m.num_queries < most and "num_queries" not in cfg.model:  # every object needs a query of its own
            m = override(m, num_queries=most + 10)
            say(f"up to {most} objects an image: {m.num_queries} object queries")
        self.model = build(m)
        self.criterion = SetCriterion(m.num_classes, eos_coef=cfg.eos_coef)
        say(f"model {cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} updates of "
            f"{cfg.batch_size} images of {cfg.image_size} px")

    def optimizer(self) -> torch.optim.Optimizer:
        cfg = self.cfg
        return torch.optim.AdamW(param_groups(self.model, cfg.lr, cfg.lr_backbone), weight_decay=cfg.weight_decay,
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        cfg = self.cfg
        if cfg.data is None:
            samples = shape_batches(cfg.batch_size, cfg.seed, cfg.image_size, cfg.max_objects, start=start)
        else:
            samples = voc_batches(self.train_set, cfg.batch_size, cfg.seed, start=start)
        return map(collated, samples)

    def loss(self, model, batch):
        images, mask, targets = batch  # on the model's device: fit moves it there
        losses = self.criterion.to(devices.of(model))(model(images, mask), targets)
        b = images.size(0)  # fit divides by the images of the update: the loss is the mean per batch
        return losses["loss"] * b, losses["ce"].detach() * b, b

    def validate(self, model) -> dict[str, float]:
        return evaluate_detr(model, self.test, criterion=self.criterion)

    def describe(self, record: dict[str, float]) -> str:
        return (f"validation loss {record['val_loss']:.3f}, mAP@0.5 {record['map50']:.3f}, "
                f"mAP@[.5:.95] {record['map']:.3f}")

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        last = validation[-1]
        self.say(f"on {len(self.test)} held-out images: mAP@0.5 {last['map50']:.3f}, mAP@[.5:.95] {last['map']:.3f}")
        return {"map50": last["map50"], "map": last["map"], "classes": self.classes}


def param_groups(model: torch.nn.Module, lr: float, lr_backbone: float) -> list[dict[str, Any]]:
    """The trained parameters in two AdamW groups: the backbone at ``lr_backbone`` (DETR: 1e-5 against 1e-4 for
    the rest, its ResNet being pre-trained), the Transformer and heads at ``lr``."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not n.startswith("backbone.")], "lr": lr},
              {"params": [p for n, p in named if n.startswith("backbone.")], "lr": lr_backbone}]
    return [g for g in groups if g["params"]]


@torch.no_grad()
def evaluate_detr(model: torch.nn.Module, samples: list, batch_size: int = 32,
                  criterion: SetCriterion | None = None) -> dict[str, float]:
    """``{"val_loss", "map50", "map", "map75"}`` of ``model`` on ``samples`` (every query's detection counts,
    scored by its class probability, as DETR is evaluated). Each batch runs on ``model``'s device (``criterion``
    is moved there too); the detections are scored on the CPU."""
    was_training = model.training
    model.eval()
    where = devices.of(model)
    criterion = (criterion or SetCriterion(cast(DETR, model).cfg.num_classes)).to(where)
    detections, truths, loss, batches = [], [], 0.0, 0
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        images, mask, targets = collate_on(batch, where)
        outputs = model(images, mask)
        loss, batches = loss + float(criterion(outputs, targets)["loss"]), batches + 1
        last = devices.move({"logits": outputs["logits"], "boxes": outputs["boxes"]}, "cpu")  # the last layer's
        detections += postprocess(last)  # boxes relative to each image: IoU does not mind the scale
        truths += [{"boxes": cxcywh_to_xyxy(t["boxes"]), "labels": t["labels"]}
                   for t in devices.move([t for _, t in batch], "cpu")]
    model.train(was_training)
    ap = average_precision(detections, truths)
    return {"val_loss": loss / max(batches, 1), "map50": cast(float, ap["map50"]), "map": cast(float, ap["map"]),
            "map75": cast(float, ap["map75"])}  # the means; only "per_class" is a dict


def evaluate_voc(run: str | os.PathLike, data_dir: str | os.PathLike, split: str = "val", *,
                 device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, float]:
    """``{"val_loss", "map50", "map", "map75", "n"}`` of a detection run on a split of a Pascal VOC folder.

    Args:
        device, quantize: where the model runs, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    model, classes, size = load_detector(run, device=device, quantize=quantize)
    samples, _, _ = read_voc(data_dir, split, size, classes)
    return {**evaluate_detr(model, samples), "n": len(samples)}


__all__ = ["Config", "Detection", "collate_on", "collated", "detect", "evaluate_detr", "evaluate_voc", "find_objects",
           "load_detector", "param_groups", "voc_batches"]
