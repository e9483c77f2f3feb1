"""Files written atomically: to a temporary name beside the destination, flushed, then renamed.

A crash at any moment leaves either the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)`` (what it returns is ignored), fsync the file, and rename it to ``path``.

    The temporary file is ``.NAME.PID.XXXXXX.tmp`` beside ``path``: those a killed process left behind for the same
    ``path`` (their process gone) are removed first. A write that fails (a full disk, a read-only folder) leaves
    ``path`` as it was and raises ``OSError`` naming it.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise _naming(e, path) from e
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 (and a writer may make its own file anew)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _naming(e, path) from e
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def _naming(e: OSError, path: Path) -> OSError:
    """``e`` as an ``OSError`` of the same kind that says it happened writing ``path`` (what was there is intact)."""
    reason = e.strerror or str(e) or type(e).__name__
    return type(e)(e.errno, f"{reason} while writing {path} (nothing there was changed)") if e.errno else \
        OSError(f"{reason} while writing {path} (nothing there was changed)")


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files of ``path`` that a process killed while writing it left behind."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):  # (a file of the old naming: left; a live writer's: left)
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()


def _alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # (Windows' os.kill would end the process, not probe it)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's; or a platform without signals to probe with
        return True
    return True


def read_json(path: str | os.PathLike, what: str, kind: type = dict) -> Any:
    """The JSON object (or other ``kind``: ``list``) in the file at ``path``, which should be ``what`` (for the
    message).

    Raises:
        FileNotFoundError: no file there; ValueError: naming ``path``, when it is not UTF-8, not JSON or not a
            ``kind``.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}), so not {what}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON ({e}), so not {what}") from e
    if not isinstance(data, kind):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not {what} (a JSON {kind.__name__})")
    return data


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def digest(tensors: dict[str, torch.Tensor], text: str | None = None) -> str:
    """SHA-256 of named tensors (names, dtypes, shapes and bytes, in name order), and of ``text`` first if given.

    Checkpoints keep it in their own metadata, so a file whose bytes changed after writing (a flipped
    bit, a copy cut short that safetensors' own header checks miss) is refused, and the check can never
    disagree with the file it describes, as a checksum file written beside it could after a crash.
    """
    h = hashlib.sha256()
    if text is not None:  # what else the file must keep unchanged (a checkpoint's config)
        h.update(f"text|{len(text)}|".encode() + text.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check_digest(file: str | os.PathLike, tensors: dict[str, torch.Tensor], expected: str | None,
                 text: str | None = None) -> None:
    """Raise ``ValueError`` naming ``file`` when ``tensors`` (and ``text``, where the digest covers it) do not
    hash to ``expected`` (``None``: a file written before digests were kept, accepted)."""
    if expected is not None and digest(tensors, text) != expected:
        what = "tensors" if text is None else "tensors and config"
        raise ValueError(f"{file} is corrupted: its {what} do not match the SHA-256 digest stored in it when it "
                         f"was written; it was not loaded")
