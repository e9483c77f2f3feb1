"""Where a run's numbers go besides ``history.csv``: one small interface, opened by kind.

    logger = open_logger("tensorboard", run_folder)   # or "csv": history.csv alone (the session writes it)
    logger.log(step, {"loss": 2.31, "lr": 3e-4, ...})   # a training record, or a validation record
    logger.close()

``tensorboard`` writes event files into ``RUN/tensorboard/`` (``tensorboard --logdir runs``), one scalar per
number of a record under its key, at the record's step; ``step`` and ``seconds`` are the axes, not scalars. The
:class:`~aiayn.training.session.Session` opens one on rank 0 and logs every record it keeps: each update's as
``train/loss``, ``train/lr``, ``train/tokens``, on CUDA ``train/tokens_per_s``, ``train/peak_gib``, ``train/mfu``
(the columns of ``history.csv``), each validation's as ``validation/val_loss``, ...
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Protocol

LOGGERS = ("csv", "tensorboard")
TENSORBOARD_DIR = "tensorboard"


class Logger(Protocol):
    def log(self, step: int, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def check_logger(kind: str) -> None:
    """Refuse an unknown ``kind``, or ``"tensorboard"`` when the package is not installed, naming what to do."""
    if kind not in LOGGERS:
        raise ValueError(f"log={kind!r}: expected one of {list(LOGGERS)}")
    if kind == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise ValueError("log='tensorboard' needs the tensorboard package: pip install 'aiayn[tensorboard]' "
                         "(or pip install tensorboard)")


class NoLogger:
    """``csv``: nothing beyond the files the session writes itself."""

    def log(self, step: int, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """Event files in ``folder/tensorboard/``; the writer opens at the first record (again after :meth:`close`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder) / TENSORBOARD_DIR
        self._writer: Any = None

    def log(self, step: int, record: dict[str, Any]) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.folder))
        for name, value in record.items():
            if name not in ("step", "seconds") and isinstance(value, (int, float)):
                self._writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def open_logger(kind: str, folder: str | Path) -> Logger:
    """The logger ``kind`` (one of :data:`LOGGERS`) of the run folder ``folder``.

    Raises:
        ValueError: an unknown ``kind``, or ``"tensorboard"`` without the package.
    """
    check_logger(kind)
    return TensorBoardLogger(Path(folder)) if kind == "tensorboard" else NoLogger()


__all__ = ["LOGGERS", "Logger", "check_logger", "open_logger"]
