"""A run folder, and the training session that keeps it.

A *run* is a folder; a :class:`Session` is the training going on in one (saving, resuming, keeping the
best weights); ``state.py`` is the format of its resumable state file.

    runs/<name>/
      args.json                 the recipe's settings (its ``Config``; ``--resume`` reads them)
      train_state.safetensors   weights, optimizer, schedule, fp16 loss scale, data position, random state
      train_state/              the same, under FSDP: each rank's shards and meta.json (``state.py``)
      model.safetensors         the final weights and config (``aiayn.load``)
      best.safetensors          the weights with the lowest validation loss so far
      validation.json           one record per validation
      history.csv               one row per update: loss, learning rate, tokens, (fp16: skipped,) seconds
      tensorboard/              with log="tensorboard": the same numbers and validation's, as event files
      .lock                     locked by the process training in the folder; holds its process id
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import stat
from pathlib import Path
from shlex import quote
from typing import Any, cast

import torch
from torch import nn

from aiayn.io import write_json, write_text
from aiayn.models.checkpoint import from_tensors, unique_tensors
from aiayn.models.checkpoint import save as save_model
from aiayn.training import device, distributed, fit, load_train_state, save_train_state
from aiayn.training.logging import Logger, NoLogger, open_logger
from aiayn.training.loop import Stopped


def new_run_dir(out: str | os.PathLike, name: str) -> Path:
    """``out/name``, or ``out/name-2``, ``-3`` ... if that one is taken: a new run never overwrites one.
    Several ranks: rank 0 makes it and every rank gets its name."""
    if not distributed.is_main():
        return cast(Path, distributed.broadcast(None))  # rank 0's folder
    check_name(name)
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise ValueError(f"--out {out} is a symbolic link to {os.readlink(out)}, which does not exist; remove the "
                         f"link or make its folder")
    path, i = out / name, 1
    while path.exists() or path.is_symlink():  # (a dangling link is taken too: mkdir would fail on it)
        i += 1
        path = out / f"{name}-{i}"
    path.mkdir(parents=True)
    return distributed.broadcast(path)


def check_name(name: str) -> None:
    """Refuse a run folder name that is not one plain folder name: one with a path separator, ``.``, ``..`` or
    an absolute path would put the run outside ``--out``."""
    if not isinstance(name, str) or not name.strip() or name in (".", "..") or "/" in name or "\\" in name \
            or Path(name).is_absolute() or "\0" in name:
        raise ValueError(f"--name {name!r} must be a folder name inside --out, without a path separator, '.' or "
                         f"'..' (use --out to choose where the run folder goes)")


def open_run(out: str | os.PathLike, name: str, args: dict[str, Any], resume: str | os.PathLike | None = None,
             files: dict[str, Any] | None = None) -> Path:
    """The run folder: ``resume``, or a new ``out/name`` (see :func:`new_run_dir`) holding ``args.json``
    and ``files`` (file name -> a tokenizer or anything with ``save(path)``, or JSON data). Several ranks:
    rank 0 writes, every rank gets the folder. A resumed run's ``args.json`` is left as it is: the resume
    records its settings (:meth:`Session.record_args`) once it holds the folder and has read its state."""
    if resume is not None:
        return Path(resume)
    run = new_run_dir(out, name)
    if distributed.is_main():
        write_json(run / "args.json", args)
        for file, obj in (files or {}).items():
            obj.save(run / file) if hasattr(obj, "save") else write_json(run / file, obj)
    return run


def read_args(run: str | os.PathLike) -> dict[str, Any]:
    """The settings ``run`` was started with (``args.json``)."""
    file = Path(run) / "args.json"
    if not file.is_file():
        raise FileNotFoundError(f"{run} holds no args.json; is it a run folder written by `aiayn train`?")
    try:
        args = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{file} is not a JSON file of settings: {e}") from e
    if not isinstance(args, dict):
        raise ValueError(f"{file} holds a JSON {type(args).__name__}, not an object of settings")
    return args


def to_csv(history: list[dict[str, float]]) -> str:
    """``history`` as CSV, one column per key of any record; a key some records lack (``skipped``, from a run
    that went on in fp16 after fp32 updates) reads 0 in their rows."""
    fields = list(dict.fromkeys(k for record in history for k in record))
    if "seconds" in fields:  # last, as before fp16 added a column
        fields.append(fields.pop(fields.index("seconds")))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, restval=0)
    writer.writeheader()
    writer.writerows(history)
    return buf.getvalue()


class FolderLocked(RuntimeError):
    """Another live process is training in the run folder."""


_held: dict[str, int] = {}  # run folder -> the open .lock file on which this process holds the OS lock


def lock(folder: Path) -> None:
    """Claim ``folder`` for this process: refuse if another live process is training in it.

    The claim is the operating system's lock on ``folder/.lock`` (``flock``; Windows: ``msvcrt.locking``), held
    while this process keeps the file open: two processes starting together cannot both get it, and the system
    frees it when the process ends, however it ends (even by SIGKILL), so a crash never leaves a folder locked.
    The file holds the owner's process id, for the message. Claiming a folder this process holds does nothing.
    """
    key = str(folder.resolve())
    if key in _held:
        return
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / ".lock"
    while True:
        fd = _open_lock(file)
        if not _try_lock(fd):
            owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise FolderLocked(f"another process (pid {owner}) is training in {folder}; wait for it or stop it "
                               f"first (two runs writing one folder would overwrite each other's state)")
        if _same_file(fd, file):
            break
        os.close(fd)  # the owner let go and removed the file between our open and our lock: claim the new one
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[key] = fd


def unlock(folder: Path) -> None:
    """Let go of this process's claim on ``folder`` and remove ``.lock`` (another process's claim stays)."""
    fd = _held.pop(str(folder.resolve()), None)
    if fd is None:
        return
    with contextlib.suppress(OSError):  # Windows cannot remove an open file: it stays, unlocked
        (folder / ".lock").unlink()  # while still holding it, so that no one claims a file about to vanish
    os.close(fd)


def _open_lock(file: Path) -> int:
    """Open (or make) ``file`` for locking without following a symbolic link, and only if it is a regular file:
    a ``.lock`` that links elsewhere would otherwise have that file truncated and a process id written into it."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)  # POSIX; Windows has no symlinks a user makes by accident
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | nofollow, 0o644)
    except OSError as e:
        if file.is_symlink() or e.errno in (errno.ELOOP, errno.EISDIR):
            raise ValueError(f"{file} is {'a symbolic link' if file.is_symlink() else 'not a regular file'}; a run "
                             f"folder's lock must be a plain file: remove it and try again") from e
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device opened without blocking on it
        os.close(fd)
        raise ValueError(f"{file} is not a regular file; a run folder's lock must be a plain file: remove it")
    return fd


def remove_temporaries(folder: Path) -> list[str]:
    """Remove the temporary files (``.NAME.*.tmp``, :func:`aiayn.io.atomic_write`'s) that saves killed mid-way
    left in the run ``folder`` and its ``checkpoints/``; the names removed. Only while this process holds the
    folder's lock: no other process writes there then, so every such file is a dead save's. A file of the user's
    (``notes.tmp``, not hidden) is left."""
    removed = []
    for tmp in [*folder.glob(".?*.?*.tmp"), *folder.glob("checkpoints/.?*.?*.tmp")]:
        if tmp.is_file() and not tmp.is_symlink():
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(str(tmp.relative_to(folder)))
    return removed


def _try_lock(fd: int) -> bool:
    try:
        if os.name == "nt":
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by another process
        return False
    return True


def _same_file(fd: int, file: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(file))
    except FileNotFoundError:
        return False


class Session:
    """The training side of a run folder: saving and restoring the state, keeping the best weights.

    Under ``torchrun`` every rank keeps one, and rank 0 alone locks the folder and writes to it (under FSDP
    each rank also writes its shards of the training state). With FSDP
    (:func:`aiayn.training.distributed.init` with ``fsdp=True``), the model is sharded over the ranks here,
    and the optimizer built on the whole model is pointed at the shards.

    Args:
        folder: the run folder.
        model, optimizer, scheduler: what the state holds.
        accum: batches per update on each rank.
        scaler: fp16's loss scaler; ``None``: one is made by the first ``fit(autocast="fp16")``, or by
            :meth:`restore` from a state that holds one.
        param_dtype: under FSDP, the dtype weights are gathered and computed in (``torch.bfloat16`` for a
            bf16 run), gradients reduced in float32 (:func:`aiayn.training.distributed.shard_model`).
        log: where rank 0 also logs every update's and validation's record (:mod:`aiayn.training.logging`):
            ``"csv"`` nowhere else, ``"tensorboard"`` event files in ``folder/tensorboard/``.

    Attributes:
        position: batches of the whole stream consumed so far (by all ranks): where the data resumes.
        scaler: the loss scaler that fp16 training uses and the state keeps, or ``None`` (fp32, bf16).
    """

    def __init__(self, folder: Path, model: nn.Module, optimizer, scheduler, accum: int = 1,
                 scaler: torch.amp.GradScaler | None = None, param_dtype: torch.dtype | None = None,
                 log: str = "csv") -> None:
        self.folder, self.model, self.optimizer, self.scheduler, self.accum = folder, model, optimizer, scheduler, accum
        self.scaler = scaler
        self.logger: Logger = open_logger(log, folder) if distributed.is_main() else NoLogger()
        self.validation: list[dict[str, float]] = []
        self.position = 0
        self._restored = (0, 0)  # (step, position) the run started from
        self._history: list[dict[str, float]] = []
        self.per_update = accum * distributed.world_size()  # batches of the stream per update
        if distributed.is_main():
            lock(folder)
            remove_temporaries(folder)
        if distributed.sharding() and not distributed.is_sharded(model):  # (distributed.build_sharded's is)
            distributed.shard_model(model, optimizer, param_dtype=param_dtype)

    def record_args(self, args: dict[str, Any]) -> None:
        """Write the settings this run goes on with (more steps, another device) to ``args.json``, which the next
        resume reads."""
        if distributed.is_main():
            write_json(self.folder / "args.json", args)

    def unlock(self) -> None:
        """Free the folder once training is over, so that this same process (a notebook) or another can
        resume it."""
        self.logger.close()
        if distributed.is_main():
            unlock(self.folder)

    def restore(self) -> tuple[int, list[dict[str, float]]]:
        """Load the saved state into model, optimizer, scheduler, the generator and the fp16 loss scaler (a
        state without one leaves :attr:`scaler` as it is): ``(step, history)``."""
        state = load_train_state(self.folder, self.model, self.optimizer, self.scheduler, self.scaler)
        if state["scaler"] is not None and self.scaler is None:
            self.scaler = self._new_scaler()
            self.scaler.load_state_dict(state["scaler"])
        self.validation = state["extra"]["validation"]
        self.position = state["batches"]
        self._restored = (state["step"], state["batches"])
        self._history = state["extra"]["history"]
        return state["step"], self._history

    @property
    def step(self) -> int:
        """Updates done so far."""
        return len(self._history)

    def fit(self, batches, steps: int, loss_fn, unlock: bool = True, **options: Any) -> list[dict[str, float]]:
        """:func:`aiayn.training.fit` of this run's model, optimizer and schedule up to update ``steps``, from
        where :meth:`restore` or the last ``fit`` left it, saving into the folder; ``batches`` must continue
        the stream the last ``fit`` read. A Ctrl-C says how to resume; the folder is unlocked when training
        ends (``unlock=False``: more ``fit`` follows). ``options``: the rest of ``fit``'s arguments but
        ``scaler``: under ``autocast="fp16"`` the session's own (:attr:`scaler`), which it saves.
        """
        try:
            if "scaler" in options:
                raise TypeError("Session.fit takes no scaler=: give it to Session(scaler=), which saves it")
            if options.get("autocast") == "fp16":
                if self.scaler is None:
                    self.scaler = self._new_scaler()
                options["scaler"] = self.scaler
            self._history = fit(self.model, batches, steps, self.optimizer, loss_fn, self.scheduler,
                                accum=self.accum, start=self.step, history=self._history, save=self.save,
                                log=self._log_update, **options)
            return self._history
        except Stopped as e:
            unlock = True
            raise KeyboardInterrupt(f"{e}; the state is saved: continue with `aiayn train --resume "
                                    f"{quote(str(self.folder))}`") from None
        except KeyboardInterrupt as e:  # a second signal: nothing saved since the last save (if any)
            unlock = True
            raise KeyboardInterrupt(f"{e}; `aiayn train --resume {quote(str(self.folder))}` goes on from the last "
                                    f"state saved before it, if one was") from None
        except BaseException:
            unlock = True
            raise
        finally:
            if unlock:
                self.unlock()

    def save(self, step: int, history: list[dict[str, float]]) -> None:
        """What resuming needs, after ``step`` updates (``fit``'s ``save`` callback; every rank takes part:
        rank 0 writes, or under FSDP each rank its shards)."""
        done, position = self._restored
        save_train_state(self.folder, self.model, self.optimizer, self.scheduler, step,
                         position + (step - done) * self.per_update,
                         {"history": history, "validation": self.validation, "batches_per_update": self.per_update},
                         scaler=self.scaler)
        if distributed.is_main():
            write_text(self.folder / "history.csv", to_csv(history))

    def _log_update(self, step: int, record: dict[str, float]) -> None:
        self.logger.log(step, {f"train/{k}": v for k, v in record.items()})

    def _new_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(device.of(self.model).type)

    def record(self, record: dict[str, float]) -> None:
        """Add a validation record; keep ``best.safetensors`` when its ``val_loss`` is the lowest yet (every
        rank takes part, rank 0 writes)."""
        seen = [e["val_loss"] for e in self.validation if not math.isnan(e["val_loss"])]  # a NaN is never best
        if not math.isnan(record["val_loss"]) and (not seen or record["val_loss"] < min(seen)):
            save_model(self.model, self.folder / "best.safetensors")
        self.validation.append(record)
        if distributed.is_main():
            write_json(self.folder / "validation.json", self.validation)
            self.logger.log(int(record["step"]), {f"validation/{k}": v for k, v in record.items() if k != "step"})

    def trained_model(self) -> nn.Module | None:
        """After :meth:`fit`, on rank 0: the whole model, to evaluate and save (under FSDP a copy gathered
        from the shards, which takes every rank); on other ranks ``None``."""
        if not distributed.is_sharded(self.model):
            return self.model if distributed.is_main() else None
        tensors = unique_tensors(self.model)  # every rank takes part in the gather; rank 0 keeps the tensors
        if not distributed.is_main():
            return None
        return from_tensors(self.model.cfg, tensors).to(next(self.model.parameters()).device).eval()
