"""What every recipe shares: the settings every task takes, and the one runner that trains any task.

A recipe is a task: its ``Config`` (a frozen dataclass; every setting with its default, stated once) and a
:class:`Recipe` subclass holding the task's parts: data and model (``__init__``), optimizer and schedule,
batches, loss, validation, and the final evaluation. :func:`run` does what every task repeats:

    seed -> the recipe's data and model -> run folder (args.json = the Config) -> Session -> resume
         -> fit (validating every ``eval_every`` updates) -> the whole model (gathered under FSDP)
         -> model.safetensors [-> average.safetensors] -> final evaluation -> run.json -> report

``average=N`` (section 6.1: "for the base models, we used a single model obtained by averaging the last 5
checkpoints"): the weights at N updates spread evenly over the last 20% of the run are kept in
``checkpoints/`` and their mean is written to ``average.safetensors`` beside the last weights, so that
a choice between the two can be made on validation (``aiayn evaluate --weights average.safetensors``).

``--minutes`` (``Config.minutes``): the run times its first updates (all inside the warm-up, where no
schedule depends on the total), fixes ``steps`` to fill the budget at that speed, and writes the fitted
``steps`` into ``args.json``, so the schedule ends on time and a resumed run continues the same schedule.

A warm-up as long as the run or longer (``--steps 60`` under a default ``warmup`` of 100) would leave the rate
still rising at the last update; such a run warms up for a tenth of its updates instead, and says so
(:meth:`RecipeConfig.warmup_for`). A run as long as its warm-up or longer keeps it exactly.

``log="tensorboard"``: the records of ``history.csv`` and ``validation.json`` also go to TensorBoard event
files in ``RUN/tensorboard/`` (:mod:`aiayn.training.logging`).
"""

from __future__ import annotations

import dataclasses
import os
import time
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from aiayn.io import write_json
from aiayn.models import checkpoint, config_to_dict, preset
from aiayn.training import device, distributed, finetune
from aiayn.training.budget import timing_updates, updates_in
from aiayn.training.logging import check_logger
from aiayn.training.loop import autocasting
from aiayn.training.session import Session, check_name, open_run

# The updates a time budget is measured on (never more than the warm-up, whose rate ignores the total).
TIMING_UPDATES = 20


def setting(default: Any, help: str) -> Any:
    """A ``Config`` field with its help text, which is also its command-line flag's help."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class RecipeConfig:
    """The settings of every recipe. Each task's ``Config`` adds its own and restates the defaults it changes."""

    recipe: ClassVar[str] = ""
    preset: str = setting("", "the model preset (any of `aiayn count --help`'s); its fields can be --set")
    model: dict = setting({}, "config fields of the preset, e.g. {'d_model': 256} (command line: --set d_model=256)")
    steps: int = setting(1000, "optimizer updates")
    minutes: float | None = setting(None, "train for this many minutes of updates instead: steps are fitted to "
                                          "the speed of the first updates, so the schedule ends on time")
    warmup: int = setting(100, "updates of linear learning-rate warm-up (a run of as many updates or fewer warms "
                               "up for a tenth of them)")
    accum: int = setting(1, "batches per update (gradient accumulation; under torchrun, on each rank)")
    eval_every: int = setting(0, "validate every N updates, keeping the best weights (0: at the end only)")
    save_every: int = setting(500, "write the training state every N updates (and on Ctrl-C), for --resume")
    average: int = setting(0, "also write average.safetensors, the mean of the weights at N updates spread over "
                              "the last 20% (section 6.1 averages the last 5 checkpoints); 0: none")
    device: str = setting("auto", "where to train: auto (a GPU when there is one, else the CPU), cpu, cuda, cuda:N "
                                  "or mps; under torchrun each rank takes its own GPU")
    bf16: bool = setting(False, "forward and loss under bf16 autocast (GPUs since Ampere; far slower on CPUs "
                                "without bf16 units)")
    fp16: bool = setting(False, "forward and loss under fp16 autocast, with loss scaling (GPUs without bf16); "
                                "updates whose gradients overflow are skipped and counted")
    grad_checkpoint: bool = setting(False, "recompute each block's activations in the backward pass instead of "
                                           "keeping them: less memory for about a third more compute")
    compile: bool = setting(False, "train through torch.compile (on a small CPU it did not pay)")
    init_from: str | None = setting(None, "start from these weights (fine-tuning): a run folder, a Hugging Face "
                                          "folder or model id; weights of matching names and shapes are loaded, "
                                          "new heads start fresh")
    freeze: int = setting(0, "with init_from: the embeddings and the first N blocks of each stack do not train "
                             "(-1: every block; only the new heads train)")
    body_lr: float = setting(1.0, "with init_from: the loaded weights' learning rate, as a fraction of the new "
                                  "heads' (e.g. 0.1)")
    seed: int = setting(0, "seeds the data, the initial weights and every batch")
    out: str = setting("runs", "folder that gets the run folder")
    name: str | None = setting(None, "run folder name (default: from the task and data)")
    log: str = setting("csv", "where the training numbers go: csv (history.csv, validation.json) or tensorboard "
                              "(also event files in RUN/tensorboard/; pip install 'aiayn[tensorboard]')")

    def __post_init__(self) -> None:
        _check_types(self)
        for name in ("steps", "accum"):
            _at_least(self, name, 1)
        for name in ("warmup", "eval_every", "save_every", "average"):
            _at_least(self, name, 0)
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        device.check(self.device)
        if self.bf16 and self.fp16:
            raise ValueError("bf16 and fp16 are two precisions; take one")
        if self.init_from is None and (self.freeze or self.body_lr != 1.0):
            raise ValueError("freeze and body_lr apply to loaded weights: give init_from as well")
        if not self.body_lr > 0 or self.freeze < -1:
            raise ValueError(f"body_lr must be positive and freeze >= -1, got {self.body_lr} and {self.freeze}")
        if self.name is not None:
            check_name(self.name)
        check_logger(self.log)
        if not isinstance(self.model, dict):
            raise TypeError(f"model must be a dict of config fields, got {type(self.model).__name__}")
        preset(self.preset, **self.model)  # an unknown preset or field is refused, naming it

    def warmup_for(self, total: int) -> int:
        """The updates of warm-up a run of ``total`` updates takes: ``warmup``, unless the run would end before
        the warm-up does (``warmup > total``: the rate still rising at the last update, so a short fine-tune
        learns nothing); then a tenth of the run, at least one update. A run as long as its warm-up or longer
        keeps it exactly (the paper's 4,000 of 100,000). It depends on the settings alone, so a resumed run keeps its
        schedule; every recipe's :meth:`Recipe.schedule` warms up for this many updates."""
        return self.warmup if self.warmup <= total else max(1, total // 10)

    def to_dict(self) -> dict[str, Any]:
        """What ``args.json`` holds: the recipe's name and every field."""
        return {"recipe": self.recipe, **dataclasses.asdict(self)}


def _check_types(cfg: Any) -> None:
    """Refuse a setting of the wrong type, naming it (a ``--config`` file or a Python caller can give any): a
    whole number where an int is wanted, a number where a float is (an int will do), ``True``/``False`` for a
    bool, text for a str; ``None`` only where the setting may be unset. A lone string for a list setting is taken
    as a list of one (``data="copy"``)."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value, want = getattr(cfg, f.name), hints[f.name]
        kinds = typing.get_args(want) if isinstance(want, types.UnionType) else (want,)
        if value is None and type(None) in kinds:
            continue
        kind = next(k for k in kinds if k is not type(None))
        if kind is list and isinstance(value, str):
            object.__setattr__(cfg, f.name, [value])
            continue
        if kind in (int, float):  # True is an int to Python, not a number of updates
            ok = isinstance(value, int if kind is int else (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise TypeError(f"{f.name} must be {'a' if kind is not int else 'an'} {kind.__name__}"
                            f"{' or None' if type(None) in kinds else ''}, got {value!r}")


def _at_least(cfg: Any, name: str, low: float) -> None:
    value = getattr(cfg, name)
    if value is None or value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def fused(model: nn.Module) -> dict[str, Any]:
    """Adam's options for ``model``'s device: the fused kernel on CUDA (one launch for every tensor, where the
    loop over tensors launches several each), the plain loop elsewhere and under FSDP's sharded tensors."""
    return {"fused": True} if device.of(model).type == "cuda" and not distributed.sharding() else {}


def positive(cfg: Any, *names: str) -> None:
    """Refuse a setting that is not > 0, naming it."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")


@dataclass(frozen=True)
class Evaluation:
    """How ``aiayn evaluate`` scores a run of a task (:func:`aiayn.recipes.evaluate.evaluate` asks the task's
    :class:`Recipe` for this record; it names no task itself).

    Args:
        takes: the settings it takes besides ``device`` and ``quantize`` (where the model runs, int8 weights).
        needs: the setting it cannot score without (``"data"`` or ``"data_dir"``).
        score: ``score(run, args, **settings)`` -> the numbers; ``args`` is the run's ``args.json``, and
            ``settings`` holds ``device``, ``quantize`` and what was given of ``takes``. With ``needs ==
            "data"`` and a one-file task (``one_file``), ``data`` arrives as one path.
        one_file: ``data`` is one file or folder, not a list.
    """

    takes: tuple[str, ...]
    needs: str
    score: Callable[..., dict[str, Any]]
    one_file: bool = True


class Recipe:
    """One task's parts. ``__init__`` prepares the data, the tokenizer and the model (a resumed run reads its
    tokenizer back from ``folder``); :func:`run` calls the rest.

    Attributes set by ``__init__``:
        model: the model to train.
        run_name: the default run folder name.
        files: what the run folder keeps beside the weights (file name -> a tokenizer, or JSON data).
        source: with ``init_from``, the model loaded from it (:func:`start_from`); a recipe that takes
            ``init_from`` builds its model from the source's config and uses the source's tokenizer.
    """

    clip: float | None = 1.0  # the maximum gradient norm
    takes_init_from: ClassVar[bool] = False  # whether __init__ calls start_from (fine-tuning from other weights)
    evaluation: ClassVar[Evaluation | None] = None  # how aiayn evaluate scores a run of this task (None: it does not)
    source: nn.Module | None = None  # init_from's model, loaded by a recipe that takes init_from
    cfg: RecipeConfig
    say: Callable[..., None]
    model: nn.Module
    run_name: str
    files: dict[str, Any]

    def __init__(self, cfg: RecipeConfig, folder: Path | None, say: Callable[..., None]) -> None:
        self.cfg, self.say = cfg, say

    def start_from(self) -> Any:
        """With ``init_from``: load its model into :attr:`source` and return its config (else ``None``)."""
        if self.cfg.init_from is None:
            return None
        self.source = finetune.source(self.cfg.init_from)
        return self.source.cfg

    def optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def schedule(self, step: int, total: int) -> float:
        """The learning-rate multiplier at (0-based) update ``step`` of ``total`` (LambdaLR's)."""
        raise NotImplementedError

    def batches(self, start: int) -> Iterator[Any]:
        """The endless training stream, from batch ``start`` on (a resumed run continues where it stopped)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``(loss sum, nll sum, count)`` of one batch (:func:`aiayn.training.fit`'s ``loss_fn``)."""
        raise NotImplementedError

    @torch.no_grad()
    def validate(self, model: nn.Module) -> dict[str, float]:
        """Held-out numbers, ``val_loss`` among them (the best checkpoint is the lowest)."""
        raise NotImplementedError

    def describe(self, record: dict[str, float]) -> str:
        """One line for a validation record."""
        return ", ".join(f"{k} {v:.3f}" for k, v in record.items() if k != "step")

    def finish(self, model: nn.Module, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        """The final evaluation of the trained ``model`` (on rank 0): prints it, writes any pictures into
        ``folder``, and returns the numbers for ``run.json`` (``samples`` may be a list)."""
        return dict(validation[-1])


def run(cfg: RecipeConfig, recipe: type[Recipe], resume: str | os.PathLike | None = None, progress: bool = True,
        verbose: bool = True) -> dict[str, Any]:
    """Train ``recipe`` as ``cfg`` says (or continue the run folder ``resume``), evaluate, save.

    Returns:
        ``{"run": folder, "history", "validation", "seconds", ...the recipe's final numbers}``; on ranks other
        than 0 only ``run`` and ``history``.
    """
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    folder = None if resume is None else Path(resume)
    task = recipe(cfg, folder, say)
    where = device.resolve(cfg.device)
    if where.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # float32 matmuls on tensor cores (TF32); bf16/fp16 as asked
        torch.backends.cudnn.allow_tf32 = True
    if where.type != "cpu":
        say(f"device {where}" + (f" ({torch.cuda.get_device_name(where)})" if where.type == "cuda" else ""))
    if not distributed.sharding():  # (FSDP: the model goes to the devices in shards, below)
        task.model.to(where)
    if cfg.grad_checkpoint:
        from aiayn.training.activations import checkpoint_blocks

        say(f"activation checkpointing: {checkpoint_blocks(task.model)} blocks recompute their activations")
    loaded = _init_from(cfg, task, resume is not None, say)
    if distributed.sharding():  # from host memory straight to each rank's shard: no device holds it whole
        distributed.shard_built(task.model, param_dtype=torch.bfloat16 if cfg.bf16 else None)
    folder = open_run(cfg.out, cfg.name or task.run_name, cfg.to_dict(), folder, task.files)
    optimizer = task.optimizer()
    if cfg.init_from is not None and (cfg.freeze or cfg.body_lr != 1.0):
        optimizer = finetune.body_rate(optimizer, task.model, loaded, cfg.body_lr)
    plan: dict[str, Any] = {"total": cfg.steps, "keep": []}  # "keep": the updates whose weights are averaged
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: task.schedule(i, plan["total"]))
    # fp16: losses here are sums over tokens, so their gradients are large: start the loss scale low (fairseq's
    # 128) rather than at 2^16, which would skip the first ~log2(tokens per batch) updates
    scaler = torch.amp.GradScaler(where.type, init_scale=128.0) if cfg.fp16 else None
    session = Session(folder, task.model, optimizer, scheduler, cfg.accum, scaler=scaler,
                      param_dtype=torch.bfloat16 if cfg.bf16 else None,  # FSDP: bf16 compute, float32 reduce
                      log=cfg.log)
    if resume is not None:  # args.json changes only now: a refused resume leaves the run as it was
        try:
            done, _ = session.restore()
        except BaseException:  # an unreadable state: the folder stays as it was, unlocked
            session.unlock()
            raise
        if cfg.minutes is None and done > cfg.steps:
            session.unlock()
            raise ValueError(f"steps={cfg.steps} is fewer than the {done} updates {folder} has done; give --steps "
                             f"{done} or more")
        session.record_args(cfg.to_dict())
        say(f"resuming {folder} after update {done} of {cfg.steps}")

    def after_update(step: int, history: list[dict[str, float]]) -> None:
        if step in plan["keep"]:  # every rank takes part (FSDP gathers), rank 0 writes
            checkpoint.save(task.model, folder / "checkpoints" / f"step{step}.safetensors")
        if (cfg.eval_every and step % cfg.eval_every == 0) or step == plan["total"]:
            with autocasting(where, options["autocast"]):  # validation runs in the precision training runs in
                record = {"step": step, **task.validate(task.model)}
            session.record(record)
            say(f"\n  step {step}: {task.describe(record)}")

    # this rank's share of the stream, taken once: the timed updates of --minutes and the rest read on from it
    batches = distributed.shard(task.batches(session.position))
    options: dict[str, Any] = {"clip": task.clip, "progress": progress, "save_every": cfg.save_every,
                               "autocast": "bf16" if cfg.bf16 else "fp16" if cfg.fp16 else None, "compile": cfg.compile}
    if where.type == "cuda":  # MFU in the progress bar and history.csv (loop.gpu_stats)
        from aiayn.training.loop import training_flops_per_token

        options["flops_per_token"] = training_flops_per_token(distributed.unwrap(task.model))
    if cfg.minutes is not None and (resume is None or session.step <= _timed_updates(cfg)):
        # (a resume stopped while the first updates were timed times the rest of them; one stopped just after
        # gets the same count again, from the same records)
        # (the timed updates validate as the rest do: every eval_every, its time counted in an update's)
        timing = {**options, "every": cfg.eval_every, "callback": after_update}
        plan["total"] = _fit_to_budget(cfg, session, batches, task.loss, timing, folder, say)
    fitted = cfg.warmup_for(plan["total"])
    if fitted != cfg.warmup and distributed.is_main():
        say(f"warm-up {cfg.warmup} > the run's {plan['total']} updates: {fitted} updates of warm-up (a tenth)")
    plan["keep"] = average_points(cfg.average, plan["total"])
    history = session.fit(batches, plan["total"], task.loss, desc=f"train {task.run_name}",
                          every=1 if plan["keep"] else cfg.eval_every, callback=after_update, **options)
    model = session.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": folder, "history": history}
    checkpoint.save(model, folder)
    averaged = _write_average(folder, plan["keep"], say) if plan["keep"] else []
    result = task.finish(model, folder, session.validation)
    seconds = time.perf_counter() - t0
    write_json(folder / "run.json", {"data": task.run_name, "config": config_to_dict(model.cfg),
                                     "settings": cfg.to_dict(), "steps": plan["total"], **result,
                                     **({"averaged_steps": averaged} if averaged else {}),
                                     "final_loss": history[-1]["loss"], "seconds": round(seconds, 1)})
    say(f"saved {folder}/ ({seconds:.0f} s)")
    return {"run": folder, **result, "history": history, "validation": session.validation, "seconds": seconds}


def _init_from(cfg: RecipeConfig, task: Recipe, resumed: bool, say: Callable[..., None]) -> list[str]:
    """Load ``cfg.init_from``'s weights into the task's model (not when resuming: the state has them) and freeze
    what ``cfg.freeze`` says; the names loaded (the body)."""
    if cfg.init_from is None:
        return []
    if task.source is None:
        raise ValueError(f"the {cfg.recipe} task does not take init_from yet")
    loaded = finetune.transfer(task.source, task.model, cfg.init_from) if not resumed else \
        [k for k in task.model.state_dict() if k in task.source.state_dict()]
    frozen = finetune.freeze(task.model, cfg.freeze)
    new = sum(p.numel() for n, p in task.model.named_parameters() if n not in set(loaded))
    say(f"init_from {cfg.init_from}: {len(loaded)} weights loaded, {new:,} parameters new"
        + (f", {len(frozen)} frozen" if frozen else "") + (f"; body at {cfg.body_lr:g} x the rate"
                                                           if cfg.body_lr != 1.0 else ""))
    return loaded


def average_points(n: int, total: int) -> list[int]:
    """The ``n`` updates of a ``total``-update run whose weights are averaged: spread evenly over its last 20%
    (at least ``n`` updates), ending at the last update; fewer when the run is shorter than ``n``."""
    span = max(total // 5, n)
    return sorted({total - i * span // n for i in range(n)} - set(range(-span, 1)))


def _write_average(folder: Path, points: list[int], say: Callable[..., None]) -> list[int]:
    """Average the kept weights of ``points`` into ``folder/average.safetensors``; the steps averaged (a run
    resumed to a new length averages those of its points it kept)."""
    from aiayn.training import average_checkpoints

    kept = [s for s in points if (folder / "checkpoints" / f"step{s}.safetensors").is_file()]
    if kept:
        average_checkpoints([folder / "checkpoints" / f"step{s}.safetensors" for s in kept],
                            folder / "average.safetensors")
        say(f"average.safetensors: the mean of the weights after updates {', '.join(map(str, kept))}")
    return kept


def _timed_updates(cfg: RecipeConfig) -> int:
    """How many first updates ``--minutes`` times (inside the warm-up) before it fits the rest."""
    return timing_updates(cfg.warmup, most=TIMING_UPDATES)


def _fit_to_budget(cfg: RecipeConfig, session: Session, batches: Iterator[Any], loss_fn, options: dict[str, Any],
                   folder: Path, say: Callable[..., None]) -> int:
    """Time the first updates (inside the warm-up), and return the updates that fill ``cfg.minutes`` at that
    speed; ``args.json`` gets them as ``steps``."""
    assert cfg.minutes is not None  # run fits steps to the budget only when there is one
    timed = _timed_updates(cfg)
    history = session.fit(batches, timed, loss_fn, unlock=False, desc="timing", **options)
    steps, per_update = updates_in(cfg.minutes, history[:timed])
    steps = int(distributed.broadcast(steps))  # every rank takes rank 0's plan
    if distributed.is_main():
        write_json(folder / "args.json", dataclasses.replace(cfg, steps=steps).to_dict())
    say(f"{cfg.minutes:g} minutes at {per_update:.2f} s an update: {steps:,} updates")
    return steps
