"""DETR within a time budget on this machine's CPU: synthetic shapes, then BCCD's blood cells, scored by mAP.

    python benchmarks/detection.py                                   # 20 + 20 minutes
    python benchmarks/detection.py --minutes 3 --bccd-minutes 0      # a quick look at the shapes alone
    python benchmarks/detection.py --updates 1234 --bccd-updates 567 # repeat the runs a budget chose
    python benchmarks/detection.py --quick                           # toy sizes, seconds: checks that it runs

Shapes: ``detr-tiny`` (a ResNet-18-shaped backbone with few channels, stride 32, 2 + 2 layers of width 64, 8
queries) learns from scratch on fresh 128-px canvases of 1 to 3 shapes of 4 kinds every batch
(:mod:`aiayn.data.detection`) and is scored on 500 held-out canvases. BCCD: the same model, its images resized
to a longer side of ``--bccd-size`` px and flipped at random, learns from the 205 training images and is
scored on the 72 of the test split (3 classes, 1 to 30 cells an image; no ImageNet weights here, so expect
far less than the published fine-tuned detectors).

The recipe is DETR's (AdamW, weight decay 1e-4, gradients clipped to 0.1, the Hungarian set loss with
auxiliary losses, eos_coef 0.1) with the schedule fitted to the budget: warm-up, then cosine decay to a tenth of
the peak at the last update. The budget is the recipes' ``--minutes`` (:mod:`aiayn.training.budget`): the first
updates, inside the warm-up, are timed, and fix how many updates fill it; ``--updates N`` (``--bccd-updates N``)
trains exactly N on the same schedule instead (the ``updates`` of the results, repeated on any machine). The
validation of the curve, at every eighth of the updates, is timed apart from training. Results go to
``detection.json`` in ``--out``
(``benchmarks/results``). ``--quick`` trains for seconds at toy sizes (:data:`QUICK`, under any flag given),
leaves BCCD out if its folder is missing and writes into a new temporary folder unless ``--out`` says where;
its numbers say nothing.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

import aiayn
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data.detection import SHAPES, collate, read_voc, shape_batches, synthetic_shapes
from aiayn.models.detr.criterion import SetCriterion
from aiayn.recipes.detect import evaluate_detr, param_groups, voc_batches
from aiayn.training import fit, timing_updates, updates_in, warmup_cosine

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
# --quick: a few seconds of training on small canvases and a few held-out ones
QUICK = {"minutes": 0.05, "bccd_minutes": 0.05, "image_size": 64, "bccd_size": 64, "batch_size": 4, "warmup": 5,
         "n_test": 16, "bccd_limit": 16}


def train_and_score(name: str, model, batches, test: list, curve_set: list, minutes: float, updates: int | None,
                    args) -> dict:
    """Train ``model`` for ``updates`` updates, or as many as fill ``minutes``, and score it on ``test``; a
    validation curve on ``curve_set`` at every eighth of the updates after the timed ones."""
    criterion = SetCriterion(model.cfg.num_classes)
    optimizer = torch.optim.AdamW(param_groups(model, args.lr, args.lr_backbone), weight_decay=1e-4)

    def loss_fn(model, samples):
        images, mask, targets = collate(samples)
        losses = criterion(model(images, None if bool(mask.all()) else mask), targets)
        return losses["loss"] * images.size(0), losses["ce"].detach() * images.size(0), images.size(0)

    plan = {"total": updates or timing_updates(args.warmup)}
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: warmup_cosine(i, args.warmup, plan["total"]))
    history: list[dict] = []
    if updates is None:
        history = fit(model, batches, plan["total"], optimizer, loss_fn, scheduler, clip=0.1, progress=False)
        plan["total"], per_update = updates_in(minutes, history)
        print(f"  {name}: {minutes:g} minutes at {per_update:.3f} s an update: {plan['total']:,} updates", flush=True)
    curve: list[dict] = []
    for step in sorted({plan["total"] * k // 8 for k in range(1, 9)} - set(range(len(history) + 1))):
        history = fit(model, batches, step, optimizer, loss_fn, scheduler, clip=0.1, progress=False,
                      start=len(history), history=history)
        trained, t = history[-1]["seconds"], time.perf_counter()
        scores = evaluate_detr(model, curve_set, criterion=criterion)
        curve.append({"minutes": round(trained / 60, 2), "step": step, "loss": round(history[-1]["loss"], 3),
                      "val_map50": round(scores["map50"], 4)})
        print(f"  {name}: {trained / 60:5.1f} min  update {step:5d} of {plan['total']:5d}  loss "
              f"{history[-1]['loss']:.3f}  val mAP@0.5 {scores['map50']:.3f}   [{time.perf_counter() - t:.0f} s to "
              f"score]", flush=True)
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
    p.add_argument("--updates", type=int, default=None,
                   help="train exactly this many updates on the shapes instead of --minutes (default: --minutes)")
    p.add_argument("--bccd-minutes", type=float, default=20.0, help="training budget on BCCD (0: skip it)")
    p.add_argument("--bccd-updates", type=int, default=None,
                   help="train exactly this many updates on BCCD instead of --bccd-minutes (default: --bccd-minutes)")
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
    p.add_argument("--n-test", type=int, default=500, help="held-out synthetic canvases")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = script_args(p, argv, QUICK, "detection", results=RESULTS)
    for flag in ("updates", "bccd_updates"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
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
    budget = f"{args.updates:,} updates" if args.updates else f"{args.minutes:g} minutes"
    print(f"shapes: {aiayn.count_parameters(model):,} parameters; budget {budget} on "
          f"{torch.get_num_threads()} threads; {len(test)} held-out canvases of {args.image_size} px", flush=True)
    batches = shape_batches(args.batch_size, args.seed, args.image_size)
    results["shapes"] = train_and_score("shapes", model, batches, test, test[:200], args.minutes, args.updates, args)

    if args.bccd_minutes > 0:
        torch.manual_seed(args.seed)
        train, classes, dropped = read_voc(args.bccd_dir, "train", args.bccd_size)
        test, _, dropped_test = read_voc(args.bccd_dir, "test", args.bccd_size, classes)
        if args.bccd_limit > 0:
            train, test = train[: args.bccd_limit], test[: args.bccd_limit]
        model = aiayn.build(args.preset, num_classes=len(classes), num_queries=args.bccd_queries)
        budget = f"{args.bccd_updates:,} updates" if args.bccd_updates else f"{args.bccd_minutes:g} minutes"
        print(f"bccd: {len(train)} training images, {len(test)} test; classes {classes}; {dropped + dropped_test} "
              f"boxes without area dropped; budget {budget}", flush=True)
        batches = voc_batches(train, args.batch_size, args.seed)
        results["bccd"] = {"classes": classes, "dropped_boxes": dropped + dropped_test,
                           **train_and_score("bccd", model, batches, test, test, args.bccd_minutes,
                                             args.bccd_updates, args)}

    write_results(args.out, "detection", results)


if __name__ == "__main__":
    main()
