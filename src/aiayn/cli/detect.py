"""``aiayn train --task detect`` and ``aiayn detect``: DETR trained and run on images.

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

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import aiayn
from aiayn.cli.runs import Run, open_run, read_args
from aiayn.data.detection import SHAPES, collate, hflip, load_image, read_voc, shape_batches, synthetic_shapes
from aiayn.evaluation.detection import average_precision
from aiayn.io import atomic_write, write_json
from aiayn.models.config import override
from aiayn.models.detr.boxes import cxcywh_to_xyxy
from aiayn.models.detr.criterion import SetCriterion
from aiayn.models.detr.postprocess import postprocess
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


def param_groups(model: torch.nn.Module, lr: float, lr_backbone: float) -> list[dict[str, Any]]:
    """The trained parameters in two AdamW groups: the backbone at ``lr_backbone`` (DETR: 1e-5 against 1e-4 for
    the rest, its ResNet being pre-trained), the Transformer and heads at ``lr``."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not n.startswith("backbone.")], "lr": lr},
              {"params": [p for n, p in named if n.startswith("backbone.")], "lr": lr_backbone}]
    return [g for g in groups if g["params"]]


def optimizer_for(model: torch.nn.Module, lr: float, lr_backbone: float, weight_decay: float, steps: int,
                  warmup: int) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over :func:`param_groups` (weight decay on every parameter, as DETR), warm-up then cosine decay to
    a tenth of the peak at ``steps``."""
    optimizer = torch.optim.AdamW(param_groups(model, lr, lr_backbone), weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: warmup_cosine(i, warmup, steps))
    return optimizer, scheduler


@torch.no_grad()
def evaluate_detr(model: torch.nn.Module, samples: list, batch_size: int = 32,
                  criterion: SetCriterion | None = None) -> dict[str, float]:
    """``{"val_loss", "map50", "map", "map75"}`` of ``model`` on ``samples`` (every query's detection counts,
    scored by its class probability, as DETR is evaluated)."""
    was_training = model.training
    model.eval()
    criterion = criterion or SetCriterion(model.cfg.num_classes)
    detections, truths, loss, batches = [], [], 0.0, 0
    for i in range(0, len(samples), batch_size):
        images, mask, targets = collate(samples[i : i + batch_size])
        outputs = model(images, None if bool(mask.all()) else mask)
        loss, batches = loss + float(criterion(outputs, targets)["loss"]), batches + 1
        detections += postprocess(outputs)  # boxes relative to each image: IoU does not mind the scale
        truths += [{"boxes": cxcywh_to_xyxy(t["boxes"]), "labels": t["labels"]} for t in targets]
    model.train(was_training)
    ap = average_precision(detections, truths)
    return {"val_loss": loss / max(batches, 1), "map50": ap["map50"], "map": ap["map"], "map75": ap["map75"]}


def train_detr(
    data: str | None = None,
    data_dir: str | os.PathLike | None = None,
    preset: str = "detr-tiny",
    steps: int = 2000,
    batch_size: int = 16,
    lr: float = 1e-3,
    lr_backbone: float = 3e-4,
    weight_decay: float = 1e-4,
    warmup: int = 200,
    clip: float = 0.1,
    eos_coef: float = 0.1,
    image_size: int = 128,
    max_objects: int = 3,
    n_test: int = 200,
    eval_every: int = 500,
    accum: int = 1,
    save_every: int = 500,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Train DETR on synthetic shapes or a Pascal VOC folder; report mAP@0.5 and COCO-style mAP.

    Args:
        data: ``None`` for synthetic shapes, ``"voc"`` for a Pascal VOC folder (``data_dir``).
        data_dir: the VOC folder, or the folder holding it (``../shared/data/bccd``).
        preset: the model; ``num_classes`` is set from the data.
        steps, batch_size: optimizer updates and images per update.
        lr, lr_backbone: peak learning rates of the Transformer and heads, and of the backbone (DETR: 1e-4 and
            1e-5 from ImageNet weights; from scratch on the shapes 1e-3 and 3e-4 learn fastest of what was tried).
        clip: maximum gradient norm (DETR: 0.1).
        eos_coef: weight of the "no object" class in the cross-entropy.
        image_size: side of the synthetic canvas, or the longer side VOC images are resized to.
        max_objects: shapes per synthetic image (1 to this).
        n_test: held-out synthetic images (VOC: the ``val`` split).
        eval_every: validate every this many updates (and after the last), keeping ``best.safetensors``.
        accum: batches per update (gradient accumulation; under ``torchrun``, on each rank).
        resume: a run folder to continue (``aiayn train --resume``).
        overrides: config fields of the preset.

    Returns:
        ``{"run", "map50", "map", "history", "validation", "seconds"}``.
    """
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "out", "name", "resume",
                                                          "overrides")}
    args.update(overrides, task="detect", data_dir=None if data_dir is None else str(data_dir))
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    if data is None:
        classes, run_name = list(SHAPES), "detect-shapes"
        test = synthetic_shapes(n_test, seed + 1, image_size, max_objects)
    elif data == "voc":
        if data_dir is None:
            raise ValueError("data='voc' needs data_dir, the Pascal VOC folder (e.g. ../shared/data/bccd)")
        train_set, classes, dropped = read_voc(data_dir, "train", image_size)
        test, _, dropped_test = read_voc(data_dir, "val", image_size, classes)
        run_name = f"detect-{Path(data_dir).name.lower()}"
        say(f"data {run_name}: {len(train_set)} training images, {len(test)} validation; classes {classes}; "
            f"{dropped + dropped_test} boxes without area dropped")
    else:
        raise ValueError(f"data={data!r} must be None (synthetic shapes) or 'voc'")
    cfg = aiayn.preset(preset, **{"num_classes": len(classes), **overrides})
    most = max_objects if data is None else max(len(t["labels"]) for _, t in train_set + test)
    if cfg.num_queries < most and "num_queries" not in overrides:  # every object needs a query of its own
        cfg = override(cfg, num_queries=most + 10)
        say(f"up to {most} objects an image: {cfg.num_queries} object queries")
    model = aiayn.build(cfg)
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters; {steps} updates of {batch_size} images "
        f"of {image_size} px")
    run = open_run(out, name or run_name, args, resume, {"classes.json": classes})
    optimizer, scheduler = optimizer_for(model, lr, lr_backbone, weight_decay, steps, warmup)
    state = Run(run, model, optimizer, scheduler, accum)
    if resume is not None:
        state.restore()
    criterion = SetCriterion(cfg.num_classes, eos_coef=eos_coef)
    if data is None:
        batches = shape_batches(batch_size, seed, image_size, max_objects, start=state.position)
    else:
        batches = voc_batches(train_set, batch_size, seed, start=state.position)

    def loss_fn(model, samples):
        images, mask, targets = collate(samples)
        losses = criterion(model(images, None if bool(mask.all()) else mask), targets)
        b = images.size(0)  # fit divides by the images of the update: the loss is the mean per batch
        return losses["loss"] * b, losses["ce"].detach() * b, b

    def validate(step: int, history: list[dict[str, float]]) -> None:
        record = {"step": step, **evaluate_detr(model, test, criterion=criterion)}
        state.record(record)
        say(f"\n  step {step}: validation loss {record['val_loss']:.3f}, mAP@0.5 {record['map50']:.3f}, "
            f"mAP@[.5:.95] {record['map']:.3f}")

    history = state.fit(batches, steps, loss_fn, clip=clip, progress=progress, desc=f"train {run_name}",
                        every=eval_every, callback=validate, save_every=save_every)
    model = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(model, run)
    last = state.validation[-1]
    result = {"run": run, "map50": last["map50"], "map": last["map"], "validation": state.validation,
              "history": history, "seconds": time.perf_counter() - t0}
    write_json(run / "run.json", {"data": run_name, "classes": classes, "config": aiayn.models.config_to_dict(cfg),
                                  **args, **{k: v for k, v in result.items() if k not in ("run", "history")}})
    say(f"on {len(test)} held-out images: mAP@0.5 {last['map50']:.3f}, mAP@[.5:.95] {last['map']:.3f}   "
        f"({result['seconds']:.0f} s); saved {run}/")
    return result


def detect(run: str | os.PathLike, image_path: str | os.PathLike, threshold: float = 0.7,
           out: str | os.PathLike | None = None, verbose: bool = True) -> dict[str, Any]:
    """Detect objects in one image with a trained run; print them and draw them.

    Args:
        run: a run folder of :func:`train_detr` (``model.safetensors``, ``args.json``, ``classes.json``).
        image_path: any image Pillow reads.
        threshold: keep detections whose class probability is above this.
        out: the picture to write; default ``<run>/detections/<image name>.png``.

    Returns:
        ``{"detections": [{"label", "name", "score", "box": [x0, y0, x1, y1] in the image's pixels}], "image"}``.
    """
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run} holds no model.safetensors; is it a run folder of `aiayn train --task detect`?")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold={threshold} must be in [0, 1)")
    model = aiayn.load(run).eval()
    classes = json.loads((run / "classes.json").read_text())
    original = load_image(image_path)  # (3, H, W) uint8
    images, _, _ = collate([(load_image(image_path, read_args(run).get("image_size", 128)), {})])
    with torch.no_grad():
        found = postprocess(model(images), sizes=[tuple(original.shape[1:])])[0]
    keep = found["scores"] > threshold
    detections = [{"label": int(label), "name": classes[int(label)], "score": round(float(score), 4),
                   "box": [round(float(v), 1) for v in box]}
                  for label, score, box in zip(found["labels"][keep], found["scores"][keep], found["boxes"][keep])]
    detections.sort(key=lambda d: -d["score"])
    out = Path(out) if out is not None else run / "detections" / f"{Path(image_path).stem}.png"
    _draw(original, detections, out)
    if verbose:
        for d in detections:
            print(f"{d['name']:<12} {d['score']:.3f}  box {d['box']}")
        print(f"{len(detections)} detection(s) above {threshold}; drawn in {out}")
    return {"detections": detections, "image": out}


def _draw(image: torch.Tensor, detections: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, w = image.shape[1:]
    fig, ax = plt.subplots(figsize=(6, 6 * h / w))
    ax.imshow(image.permute(1, 2, 0).numpy())
    colours = plt.get_cmap("tab10")
    for d in detections:
        x0, y0, x1, y1 = d["box"]
        c = colours(d["label"] % 10)
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, color=c, lw=2))
        ax.text(x0, y0, f"{d['name']} {d['score']:.2f}", color="white", fontsize=8, va="bottom",
                bbox={"facecolor": c, "alpha": 0.8, "pad": 1, "lw": 0})
    ax.axis("off")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=100))
    plt.close(fig)


__all__ = ["detect", "evaluate_detr", "optimizer_for", "param_groups", "train_detr", "voc_batches"]
