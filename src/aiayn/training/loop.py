"""The training loop shared by every task: forward, loss, backward, clip, step, schedule.

Gradient accumulation sums the losses of ``accum`` batches and divides the gradients by their total
number of target tokens, so accumulating k batches is the same update as one batch k times larger.

Ctrl-C (SIGINT) and SIGTERM do not cut an update in half: the loop finishes the update under way,
calls ``save`` and then raises ``KeyboardInterrupt``. A second Ctrl-C stops at once.

Started by ``torchrun`` (see :mod:`aiayn.training.distributed`), the same loop trains data-parallel: each
rank takes its share of ``batches``, gradients are summed over all ranks and divided by the tokens of
all of them, and rank 0 alone shows progress. ``callback`` and ``save`` run on every rank, since under
FSDP validating and gathering a checkpoint need them all; they write through functions that let rank 0
alone write (:func:`aiayn.save`, :func:`aiayn.training.save_train_state`). A signal seen by any rank
stops every rank after the same update.

Batches go to the model's device (:func:`aiayn.training.device.move`); nothing is copied on the CPU. The
numbers an update reports are read from the device once, after its last batch, so the host does not wait
for the device batch by batch; under several ranks they are summed over the ranks first, in one all-reduce.

On CUDA each update's record also has ``peak_gib`` (``torch.cuda.max_memory_allocated``, GiB),
``tokens_per_s`` and, where the FLOPs per token and the GPU's peak are known, ``mfu``: the model's FLOPs per
token times tokens per second over the vendor's dense bf16 peak (:data:`PEAK_BF16`), the share of the
machine a run uses, as nanoGPT's ``estimate_mfu`` reports it. The progress bar shows them too.

Under ``autocast="fp16"`` the loss is multiplied by a scale before the backward pass, so that small
gradients survive fp16's narrow range, and the gradients are divided by it again before they are divided
by the tokens and clipped. An update whose gradients overflow is skipped (its record says ``skipped: 1``)
and the scale halved; every 2,000 good updates it doubles (:class:`torch.amp.GradScaler`). bf16 has
fp32's range and needs none of this.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from aiayn.training import device, distributed

LossFn = Callable[[nn.Module, Any], tuple[Tensor, Tensor, int]]
AUTOCAST = {None: None, "bf16": torch.bfloat16, "fp16": torch.float16}
# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from NVIDIA's data sheets: the denominator of the
# headline MFU. H100 and H200 in their SXM form (the PCIe and NVL cards are slower and not listed: no MFU).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
# fp16 updates whose gradients still overflow once the loss scale has been halved this low are not an
# overflow but a diverged run (fairseq's --min-loss-scale): stop as fp32 does.
MIN_SCALE = 1e-4


@contextlib.contextmanager
def _deferred_interrupts() -> Iterator[list[int]]:
    """Turn SIGINT/SIGTERM into a flag the loop checks between updates (main thread only)."""
    flag: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag:  # asked twice: stop now
            raise KeyboardInterrupt("stopped at once by a second signal, without saving")
        flag.append(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def autocasting(where: torch.device, autocast: str | None) -> contextlib.AbstractContextManager:
    """The ``torch.autocast`` of ``fit(..., autocast=...)`` on device ``where`` (a no-op for ``None``), for
    whatever else runs the model as it trains (validation)."""
    if autocast not in AUTOCAST:
        raise ValueError(f"autocast={autocast!r} must be one of {list(AUTOCAST)}")
    dtype = AUTOCAST[autocast]
    return torch.autocast(where.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def vendor_peak(name: str) -> float | None:
    """The dense bf16 peak in FLOP/s (:data:`PEAK_BF16`) of the GPU ``torch.cuda.get_device_name`` calls
    ``name``; ``None`` for one not in the table."""
    upper = name.upper()
    if "PCIE" in upper or "NVL" in upper:
        return None
    return next((peak for gpu, peak in PEAK_BF16.items() if gpu in upper), None)


def training_flops_per_token(model: nn.Module, seq_len: int | None = None) -> float | None:
    """Forward and backward FLOPs per token of ``model`` (3 times the forward's: the backward costs twice as
    much), from :func:`aiayn.analysis.counts`: 6 per weight (6N) plus the attention scores at ``seq_len``
    positions (default the model's ``max_len``, as nanoGPT's ``estimate_mfu`` takes its block size).

    Only for a language model and an encoder-decoder (per target token, the source as long as the target),
    whose losses count tokens; ``None`` for the rest (a classifier counts examples, BERT masked tokens).
    """
    from aiayn.analysis import counts
    from aiayn.models import family_of

    cfg: Any = getattr(distributed.unwrap(model), "cfg", None)
    try:
        family = family_of(cfg)
    except TypeError:  # not a config of this package
        return None
    if not family.tokens_loss or getattr(cfg, "head", "lm") != "lm":
        return None
    t = seq_len or cfg.max_len
    return 3 * counts(cfg, seq_len=t).flops / t


def gpu_stats(where: torch.device, tokens: float, seconds: float, flops_per_token: float | None,
              ranks: int = 1) -> dict[str, float]:
    """What a CUDA run reports beside its loss: ``peak_gib``, the most memory PyTorch has held on ``where``
    (``torch.cuda.max_memory_allocated``, GiB); ``tokens_per_s``; and ``mfu``, ``flops_per_token`` times
    the tokens per second over the vendor's peak of the ``ranks`` GPUs (:func:`vendor_peak`), when both are
    known. ``{}`` on any other device. Nothing is read back from the device.

    Args:
        tokens, seconds: the tokens trained on (by every rank together) in ``seconds``.
    """
    if where.type != "cuda":
        return {}
    rate = tokens / max(seconds, 1e-9)
    stats = {"peak_gib": round(torch.cuda.max_memory_allocated(where) / 2**30, 3), "tokens_per_s": round(rate, 1)}
    peak = vendor_peak(torch.cuda.get_device_name(where))
    if flops_per_token is not None and peak is not None:
        stats["mfu"] = round(flops_per_token * rate / (peak * ranks), 4)
    return stats


class Stopped(KeyboardInterrupt):
    """A signal stopped training after an update, and ``save`` was called for it."""


def fit(
    model: nn.Module,
    batches: Iterator[Any],
    steps: int,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    clip: float | None = 1.0,
    accum: int = 1,
    progress: bool = True,
    desc: str = "train",
    every: int = 0,
    callback: Callable[[int, list[dict[str, float]]], None] | None = None,
    start: int = 0,
    history: list[dict[str, float]] | None = None,
    save: Callable[[int, list[dict[str, float]]], None] | None = None,
    save_every: int = 0,
    autocast: str | None = None,
    scaler: torch.amp.GradScaler | None = None,
    compile: bool = False,
    flops_per_token: float | None = None,
    log: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``steps`` updates on ``batches``.

    Args:
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, nll_sum, n_tokens)``; each update minimises the
            loss summed over ``accum`` batches divided by their tokens.
        clip: maximum gradient norm, or ``None``.
        accum: batches per update (gradient accumulation).
        every, callback: ``callback(step, history)`` after every ``every``-th update and the last one
            (validation, checkpoints; on every rank); the model is in training mode again after it.
        start, history: resume after ``start`` updates, with their records (``batches`` must already
            be positioned after the batches those updates consumed).
        save: ``save(step, history)`` every ``save_every`` updates, after the last one, and when the
            run is interrupted (after finishing the update under way); it writes what resuming needs
            (called on every rank).
        autocast: ``"bf16"`` or ``"fp16"`` runs forward and loss under ``torch.autocast`` (the weights,
            gradients and loss stay fp32); ``None`` is full fp32. bf16 needs no loss scaling; fp16 scales
            the loss and skips the updates whose gradients overflow (see the module's docstring). On CPUs
            without bf16 or fp16 units they are far slower; measure first.
        scaler: fp16's loss scaler, whose scale carries from update to update; ``None`` makes a fresh one.
            Pass one to keep the scale across calls and save it (:class:`aiayn.training.session.Session`
            does). Only with ``autocast="fp16"``.
        compile: train through ``torch.compile(model)`` (the first updates wait for the compiler; on this
            project's 2-core CPU it did not pay, so it is an option, not the default).
        flops_per_token: training FLOPs per token the loss counts, for the MFU on CUDA; default
            :func:`training_flops_per_token` of the model (``None`` there: no MFU).
        log: ``log(step, record)`` with each update's finished record, on rank 0 (an experiment logger:
            :mod:`aiayn.training.logging`).

    Returns:
        One record per update: ``step``, ``loss`` and ``nll`` per token, ``lr``, ``tokens``, ``seconds``;
        under fp16 also ``skipped``, 1 for an update skipped because its gradients overflowed, else 0; on
        CUDA also :func:`gpu_stats` of the update (``peak_gib``, ``tokens_per_s``, ``mfu``).

    Raises:
        FloatingPointError: the loss or the gradient norm became NaN or infinite (under fp16: the loss,
            or the gradients even at a loss scale below ``MIN_SCALE``): the run stops before that
            update, nothing is saved over the last good state, and the message names the step.
        Stopped: SIGINT or SIGTERM, after ``save`` (a ``KeyboardInterrupt``); a second signal raises a plain
            ``KeyboardInterrupt`` at once, saving nothing.
    """
    if accum < 1:
        raise ValueError(f"accum={accum} must be >= 1")
    if not 0 <= start <= steps:
        raise ValueError(f"start={start} must lie in [0, steps={steps}]: the updates already done of those asked")
    if clip is not None and not clip > 0:
        raise ValueError(f"clip={clip!r} must be a positive gradient norm, or None (no clipping)")
    if autocast not in AUTOCAST:
        raise ValueError(f"autocast={autocast!r} must be one of {list(AUTOCAST)}")
    where = device.of(model)
    if autocast == "fp16":
        if distributed.is_sharded(model):  # each rank would test only its shard of the gradients for overflow
            raise ValueError("autocast='fp16' cannot train a model sharded by FSDP here; use autocast='bf16'")
        scaler = torch.amp.GradScaler(where.type) if scaler is None else scaler
        if not scaler.is_enabled():
            raise ValueError(f"scaler is disabled (made for a device this machine lacks?); the model is on {where}")
    elif scaler is not None:
        raise ValueError(f"scaler is for autocast='fp16' only, not autocast={autocast!r}")
    model.train()
    history = list(history or [])
    params = [p for p in model.parameters() if p.requires_grad]
    engine: Callable[..., Any]  # the module, or what torch.compile makes of it
    engine, batches, main = distributed.wrap(model), distributed.shard(batches), distributed.is_main()
    if compile:
        engine = torch.compile(engine)  # methods and attributes still reach the model (BERT's heads)
    distributed.fork_random_state()
    progress = progress and main
    bar = tqdm(range(start + 1, steps + 1), desc=desc, disable=not progress, dynamic_ncols=True, leave=False,
               initial=start, total=steps)
    t0 = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    if where.type == "cuda" and flops_per_token is None:
        flops_per_token = training_flops_per_token(model)
    ranks = distributed.world_size()
    saved = start if start else None
    with _deferred_interrupts() as interrupted:
        for step in bar:
            try:
                stop = _update(engine, batches, optimizer, loss_fn, scheduler, clip, accum, params, step, history,
                               t0, where, autocast, scaler, interrupted)
                before = history[-2]["seconds"] if len(history) > 1 else 0.0
                history[-1].update(gpu_stats(where, history[-1]["tokens"], history[-1]["seconds"] - before,
                                             flops_per_token, ranks))
                if log is not None and main:
                    log(step, history[-1])
            except FloatingPointError as e:
                bar.close()
                last = "nothing was saved" if saved is None else f"the state saved after step {saved} is intact"
                raise FloatingPointError(f"{e}; {last} (lower the learning rate or clip harder)") from None
            if step % 10 == 0 or step == steps:
                skipped = {"skipped": skipped_updates(history)} if scaler is not None else {}
                tokens, seconds = _recent(history)
                gpu = gpu_stats(where, tokens, seconds, flops_per_token, ranks)
                shown = {"mem": f"{gpu['peak_gib']:.1f}GiB"} if gpu else {}
                shown.update({"mfu": f"{gpu['mfu']:.1%}"} if "mfu" in gpu else {})
                bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", lr=f"{history[-1]['lr']:.2e}",
                                tok_s=f"{tokens / max(seconds, 1e-9):,.0f}", **skipped, **shown)
            if callback is not None and ((every and step % every == 0) or step == steps):
                callback(step, history)
                model.train()
            stop = stop or bool(interrupted and not distributed.active())  # one process: a signal seen any time
            if save is not None and ((save_every and step % save_every == 0) or step == steps or stop):
                save(step, history)
                saved = step
            if stop:
                bar.close()
                by = f"signal {interrupted[0]}" if interrupted else "a signal to another rank"
                raise Stopped(f"stopped by {by} after step {step}")
    bar.close()
    model.eval()
    return history


def _update(model, batches, optimizer, loss_fn, scheduler, clip, accum, params, step, history, t0, where, autocast,
            scaler, interrupted) -> bool:
    """One optimizer update over ``accum`` batches (on every rank); appends its record to ``history``.

    Returns whether a signal (to any rank) asks to stop after this update.
    """
    optimizer.zero_grad(set_to_none=True)
    sums: list[Tensor] = []  # each batch's loss_sum and nll_sum, left on the device until the update is done
    n_total: Any = 0  # the tokens: an int, or a 0-dim tensor while a loss counts them on the device
    for i in range(accum):
        # several ranks: gradients are averaged over them once, after the last batch
        with contextlib.nullcontext() if i == accum - 1 else distributed.accumulating(model):
            with autocasting(where, autocast):
                loss_sum, nll_sum, n = loss_fn(model, device.move(next(batches), where))
            # summed, not averaged: divided by all tokens of the update below
            (loss_sum if scaler is None else scaler.scale(loss_sum)).backward()
        sums += [loss_sum.detach().reshape(()), nll_sum.detach().reshape(())]
        n_total += n
    signalled: float = len(interrupted)
    totals: Tensor | None = None
    if distributed.active():  # the whole update's numbers, the same on every rank, before dividing by the tokens
        # summed in float64 as the one-process branch sums the host numbers, so both give the same records
        totals = _all_sum([*_sum_pairs([s.to(torch.float64) for s in sums]), n_total, signalled], where)  # (4,)
        n_total = totals[2]
    if scaler is not None:
        scaler.unscale_(optimizer)  # back to the true gradients before they are divided, clipped and measured
    ranks = distributed.world_size()  # DDP's and FSDP's gradients: the mean over ranks of each rank's sum
    tokens = n_total.clamp(min=1) if isinstance(n_total, Tensor) else max(n_total, 1)  # no read of a tensor
    for p in params:
        if p.grad is not None:
            p.grad.div_(tokens / ranks if ranks > 1 else tokens)
    norm = distributed.full(nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))
    if clip is not None:
        nn.utils.clip_grads_with_norm_(params, clip, norm)
    if totals is not None:  # several ranks: the sums and the norm in one wait for the device
        loss_total, nll_total, tokens_read, signalled, norm_value = _read([*totals, norm.to(totals.device)])
        n_total = round(tokens_read)
        _check_loss(loss_total, step)
    else:  # one process: the losses, the norm (and a token count kept on the device) in one wait for it
        counted = isinstance(n_total, Tensor)
        *values, norm_value = _read([*sums, *([n_total.to(norm.dtype)] if counted else []), norm])
        if counted:
            *values, tokens_read = values
            n_total = round(tokens_read)
        loss_total, nll_total = _sum_pairs(values)
        _check_loss(loss_total, step)
    skipped = not math.isfinite(norm_value)
    if skipped and scaler is None:
        raise FloatingPointError(f"the gradient norm is {norm_value} at step {step}; stopping before the update")
    lr = optimizer.param_groups[0]["lr"]
    if not skipped:
        optimizer.step()
    if scaler is not None:
        scaler.update()  # halves the scale after an overflow (the update skipped above), grows it after many good ones
        if skipped and scaler.get_scale() < MIN_SCALE:
            raise FloatingPointError(f"the gradient norm is {norm_value} at step {step} with the fp16 loss scale "
                                     f"down to {scaler.get_scale():.3g}; stopping before the update")
    if scheduler is not None and skipped:  # the schedule moves on all the same: the rate follows the step
        with warnings.catch_warnings():  # skipping the first update is not the misordered loop torch warns of
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before")
            scheduler.step()
    elif scheduler is not None:
        scheduler.step()
    record = {"step": step, "loss": loss_total / max(n_total, 1), "nll": nll_total / max(n_total, 1), "lr": lr,
              "tokens": n_total}
    if scaler is not None:
        record["skipped"] = int(skipped)
    record["seconds"] = round(time.perf_counter() - t0, 3)
    history.append(record)
    return signalled > 0


def _read(tensors: list[Tensor]) -> list[float]:
    """The values of 0-dim tensors, copied to the host together (one wait for the device, not one each).
    ``stack`` promotes to the widest float type, which holds every narrower value exactly."""
    return torch.stack(tensors).tolist()


def _sum_pairs(values: list[Any]) -> tuple[Any, Any]:
    """``(loss, nll)`` summed over batches from ``[loss_1, nll_1, loss_2, nll_2, ...]`` (numbers or 0-dim
    tensors), in batch order."""
    return sum(values[0::2]), sum(values[1::2])


def _all_sum(values: list[Tensor | float], where: torch.device) -> Tensor:
    """The sums over ranks of a few numbers (0-dim tensors or host numbers), in float64, in one all-reduce,
    left on the device: NCCL reduces on ``where``, gloo on the CPU. Host numbers are filled in on the device,
    not copied there (a copy from pageable memory would wait for the device)."""
    on = where if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
    t = torch.stack([v.detach().reshape(()).to(on, torch.float64) if isinstance(v, Tensor)
                     else torch.full((), float(v), dtype=torch.float64, device=on) for v in values])  # (n,)
    torch.distributed.all_reduce(t)
    return t


def _check_loss(loss: float, step: int) -> None:
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss} at step {step}; stopping before the update")


def skipped_updates(history: list[dict[str, float]]) -> int:
    """How many of the updates in ``history`` fp16 skipped because their gradients overflowed."""
    return int(sum(r.get("skipped", 0) for r in history))


def _recent(history: list[dict[str, float]], window: int = 10) -> tuple[float, float]:
    """``(tokens, seconds)`` of the last ``window`` updates."""
    recent = history[-window:]
    before = history[-window - 1]["seconds"] if len(history) > window else 0.0
    return sum(r["tokens"] for r in recent), recent[-1]["seconds"] - before
