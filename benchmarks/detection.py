"""DETR within a time budget on this machine's CPU: synthetic shapes, then BCCD's blood cells, scored by mAP.

    python benchmarks/detection.py                                   # 20 + 20 minutes
    python benchmarks/detection.py --minutes 3 --bccd-minutes 0      # a quick look at the shapes alone
    python benchmarks/detection.py --quick                           # toy sizes, seconds: checks that it runs

Shapes: ``detr-tiny`` (a ResNet-18-shaped backbone with few channels, stride 32, 2 + 2 layers of width 64, 8
queries) learns from scratch on fresh 128-px canvases of 1 to 3 shapes of 4 kinds every batch
(:mod:`aiayn.data.detection`) and is scored on 500 held-out canvases. BCCD: the same model, its images resized
to a longer side of ``--bccd-size`` px and flipped at random, learns from the 205 training images and is
scored on the 72 of the test split (3 classes, 1 to 30 cells an image; no ImageNet weights here, so expect
far less than the published fine-tuned detectors).

The recipe is DETR's (AdamW, weight decay 1e-4, gradients clipped to 0.1, the Hungarian set loss with
auxiliary losses, eos_coef 0.1) with the schedule fitted to the budget (``budget.py``): warm-up, then cosine
decay to a tenth of the peak at the last update the budget allows. Only training counts against the budget;
the validation of the curve is timed apart. Results go to ``detection.json`` in ``--out``
(``benchmarks/results``). ``--quick`` trains for seconds at toy sizes (:data:`QUICK`, under any flag given),
leaves BCCD out if its folder is missing and writes into a new temporary folder unless ``--out`` says where;
its numbers say nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from budget import parse_args, train_for

import aiayn
from aiayn.data.detection import SHAPES, collate, read_voc, shape_batches, synthetic_shapes
from aiayn.models.detr.criterion import SetCriterion
from aiayn.recipes.detect import evaluate_detr, param_groups, voc_batches

HERE = Path(__file__).parent
# --quick: a few seconds of training on small canvases and a few held-out ones
QUICK = {"minutes": 0.05, "bccd_minutes": 0.05, "image_size": 64, "bccd_size": 64, "batch_size": 4, "warmup": 5,
         "n_test": 16, "bccd_limit": 16, "chunk": 5}


def train_and_score(name: str, model, batches, test: list, curve_set: list, minutes: float, args) -> dict:
    """Train ``model`` for ``minutes`` and score it on ``test``; a validation curve on ``curve_set``."""
    criterion = SetCriterion(model.cfg.num_classes)
    optimizer = torch.optim.AdamW(param_groups(model, args.lr, args.lr_backbone), weight_decay=1e-4)

    def loss_fn(model, samples):
        images, mask, targets = collate(samples)
        losses = criterion(model(images, None if bool(mask.all()) else mask), targets)
        return losses["loss"] * images.size(0), losses["ce"].detach() * images.size(0), images.size(0)

    curve: list[dict] = []
    marks = {"next": 0.0}

    def on_chunk(step: int, history: list[dict], total: int) -> None:
        trained = history[-1]["seconds"]
        if trained >= marks["next"] or step >= total:
            t = time.perf_counter()
            scores = evaluate_detr(model, curve_set, criterion=criterion)
            curve.append({"minutes": round(trained / 60, 2), "step": step, "loss": round(history[-1]["loss"], 3),
                          "val_map50": round(scores["map50"], 4)})
            print(f"  {name}: {trained / 60:5.1f} min  update {step:5d} of {total:5d}  loss {history[-1]['loss']:.3f}  "
                  f"val mAP@0.5 {scores['map50']:.3f}   [{time.perf_counter() - t:.0f} s to score]", flush=True)
            marks["next"] = trained + minutes * 60 / 8

    history = train_for(model, batches, optimizer, loss_fn, minutes, args.warmup, shape="cosine", floor=0.1,
                        chunk=args.chunk, on_chunk=on_chunk, clip=0.1)
    t = time.perf_counter()
    final = evaluate_detr(model, test, criterion=criterion)
    print(f"  {name}: test mAP@0.5 {final['map50']:.3f}, mAP@[.5:.95] {final['map']:.3f} on {len(test)} images "
          f"[{time.perf_counter() - t:.0f} s]", flush=True)
    trained = history[-1]["seconds"]
    return {"params": aiayn.count_parameters(model), "updates": len(history), "train_minutes": round(trained / 60, 1),
            "images_per_s": round(sum(r["tokens"] for r in history) / trained, 1), "test_images": len(test),
            "map50": round(final["map50"], 4), "map": round(final["map"], 4), "map75": round(final["map75"], 4),
            "curve": curve}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=20.0, help="training budget on the synthetic shapes")
    p.add_argument("--bccd-minutes", type=float, default=20.0, help="training budget on BCCD (0: skip it)")
    p.add_argument("--bccd-dir", default=str(HERE.parent.parent / "shared" / "data" / "bccd"))
    p.add_argument("--preset", default="detr-tiny")
    p.add_argument("--image-size", type=int, default=128, help="side of the synthetic canvas")
    p.add_argument("--bccd-size", type=int, default=256, help="longer side BCCD's images are resized to")
    p.add_argument("--bccd-queries", type=int, default=40, help="object queries for BCCD (up to 30 cells an image)")
    p.add_argument("--bccd-limit", type=int, default=0, help="use only the first N training and test images (0: all)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of the Transformer and heads")
    p.add_argument("--lr-backbone", type=float, default=3e-4, help="peak learning rate of the ResNet")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--chunk", type=int, default=50, help="updates between re-planning the schedule")
    p.add_argument("--n-test", type=int, default=500, help="held-out synthetic canvases")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = parse_args(p, argv, QUICK, "detection")
    if args.quick and args.bccd_minutes > 0 and not Path(args.bccd_dir).is_dir():
        print(f"quick: no BCCD at {args.bccd_dir}, shapes only")
        args.bccd_minutes = 0
    torch.set_num_threads(args.threads)
    results = {"name": "detection", "args": vars(args),
               "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                           "torch": torch.__version__}}

    torch.manual_seed(args.seed)
    model = aiayn.build(args.preset, num_classes=len(SHAPES))
    test = synthetic_shapes(args.n_test, seed=10_000 + args.seed, size=args.image_size)
    print(f"shapes: {aiayn.count_parameters(model):,} parameters; budget {args.minutes:g} minutes on "
          f"{torch.get_num_threads()} threads; {len(test)} held-out canvases of {args.image_size} px", flush=True)
    batches = shape_batches(args.batch_size, args.seed, args.image_size)
    results["shapes"] = train_and_score("shapes", model, batches, test, test[:200], args.minutes, args)

    if args.bccd_minutes > 0:
        torch.manual_seed(args.seed)
        train, classes, dropped = read_voc(args.bccd_dir, "train", args.bccd_size)
        test, _, dropped_test = read_voc(args.bccd_dir, "test", args.bccd_size, classes)
        if args.bccd_limit > 0:
            train, test = train[: args.bccd_limit], test[: args.bccd_limit]
        model = aiayn.build(args.preset, num_classes=len(classes), num_queries=args.bccd_queries)
        print(f"bccd: {len(train)} training images, {len(test)} test; classes {classes}; {dropped + dropped_test} "
              f"boxes without area dropped; budget {args.bccd_minutes:g} minutes", flush=True)
        batches = voc_batches(train, args.batch_size, args.seed)
        results["bccd"] = {"classes": classes, "dropped_boxes": dropped + dropped_test,
                           **train_and_score("bccd", model, batches, test, test, args.bccd_minutes, args)}

    out = Path(args.out) / "detection.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
