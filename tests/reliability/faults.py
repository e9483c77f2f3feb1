"""Run ``aiayn.cli.main(ARGS)`` in a process whose disk misbehaves inside one folder, as a real one would:

    python faults.py enospc FOLDER [MATCH] -- ARGS...     the disk is full: writing a file inside FOLDER (whose
                                                           name contains MATCH) fails with ENOSPC, half-written
    python faults.py readonly FOLDER -- ARGS...           FOLDER is read-only (chmod 555) even to root: nothing
                                                           can be made, renamed or removed inside it

The patches go in before aiayn is imported, so every ``from x import y`` the library makes sees them. The process
ends as ``python -m aiayn`` does: with ``main``'s status, or with a traceback if an exception escapes it.
"""

import builtins
import errno
import io
import os
import sys
from pathlib import Path

mode, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
options, args = rest[:cut], rest[cut + 1:]
folder = Path(options[0]).resolve()
match = options[1] if len(options) > 1 else ""


def inside(path) -> bool:
    try:
        p = Path(os.fsdecode(path)).resolve()
    except (TypeError, ValueError):
        return False
    return p == folder or folder in p.parents


def full(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(path))


if mode == "enospc":
    import safetensors.torch

    def hit(path) -> bool:
        return inside(path) and match in Path(os.fsdecode(path)).name

    real_save_file, real_fsync = safetensors.torch.save_file, os.fsync

    def save_file(tensors, filename, metadata=None):
        if hit(filename):  # the disk fills half-way through the file
            data = safetensors.torch.save(tensors, metadata=metadata)
            with open(filename, "wb") as f:
                f.write(data[:len(data) // 2])
            raise full(filename)
        return real_save_file(tensors, filename, metadata=metadata)

    def fsync(fd):  # delayed allocation: a full disk can also surface only when the data is flushed
        path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if path and os.path.isfile(path) and hit(path):
            raise full(path)
        return real_fsync(fd)

    safetensors.torch.save_file = save_file
    os.fsync = fsync
elif mode == "readonly":
    def denied(path) -> OSError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))

    def guard(fn, *positions, creates=False):
        def wrapped(*a, **k):
            for i in positions:
                path = a[i] if i < len(a) and not isinstance(a[i], int) else None
                if path is not None and inside(path) and Path(os.fsdecode(path)) != folder and (
                        not creates or not os.path.lexists(path)):
                    raise denied(path)
            return fn(*a, **k)
        return wrapped

    real_open, real_os_open = builtins.open, os.open

    def os_open(path, flags, *a, **k):
        if not isinstance(path, int) and inside(path) and Path(os.fsdecode(path)) != folder and (
                flags & os.O_CREAT and not os.path.lexists(path)):
            raise denied(path)
        return real_os_open(path, flags, *a, **k)

    def open_(file, mode="r", *a, **k):
        if not isinstance(file, int) and any(c in mode for c in "wxa+") and inside(file) and not os.path.lexists(file):
            raise denied(file)
        return real_open(file, mode, *a, **k)

    os.open = os_open
    builtins.open = io.open = open_
    os.mkdir = guard(os.mkdir, 0, creates=True)  # an existing folder: FileExistsError, as the system says
    for name in ("rmdir", "unlink", "remove"):
        setattr(os, name, guard(getattr(os, name), 0))
    for name in ("rename", "replace", "symlink", "link"):
        setattr(os, name, guard(getattr(os, name), 0, 1))
else:
    sys.exit(f"faults.py: unknown mode {mode!r}")

from aiayn.cli import main  # noqa: E402 (after the patches, on purpose)

sys.exit(main(args))
