"""What the reliability tests share: the command run in a real process, snapshots of a folder tree, the check
every refusal passes, and small setups that make a bad input inside a case's ``tmp_path``.

A refusal is held to one standard, whatever the command: exit status 2, exactly one line on standard error
that names the argument or file at fault, no traceback, and every file left as it was (names, kinds, sizes,
modes and SHA-256 of the whole tree the case lives in).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = {**os.environ, "AIAYN_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
TIMEOUT = 180  # seconds: generous for a loaded 2-core machine; a hang must still end the test
HERE = Path(__file__).parent
FAULTS = HERE / "faults.py"  # a driver that breaks the disk in a chosen way, then runs aiayn.cli.main

# settings that make `aiayn train lm` (made-up date lines) finish in a few seconds
TINY_LM = ["--n-train", "60", "--n-test", "2", "--block", "16", "--batch-size", "2", "--eval-every", "0",
           "--warmup", "1", "--set", "d_model=32", "--no-progress"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def last(self) -> str:
        """The last line of standard error (what a report quotes)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def aiayn(args: Sequence[str], cwd: Path, stdin: bytes | None = None, driver: Sequence[str] = (),
          timeout: float = TIMEOUT, tmpdir: Path | None = None) -> Result:
    """``python -m aiayn ARGS`` in ``cwd`` (or ``python faults.py DRIVER... -- ARGS``), on the CPU, one thread;
    ``tmpdir``: its temporary folder (``TMPDIR``), to see what it leaves there."""
    command = [sys.executable, str(FAULTS), *driver, "--", *args] if driver else [sys.executable, "-m", "aiayn", *args]
    env = ENV if tmpdir is None else {**ENV, "TMPDIR": str(tmpdir)}
    out = subprocess.run(command, cwd=cwd, input=stdin if stdin is not None else b"", capture_output=True,
                         env=env, timeout=timeout, check=False)
    return Result(out.returncode, out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace"))


def in_process(args: Sequence[str], cwd: Path, capsys, stdin: bytes | None = None,
               tmpdir: Path | None = None) -> Result:
    """``aiayn.cli.main(ARGS)`` in this process with ``cwd`` as the working folder (and ``tmpdir`` as
    :mod:`tempfile`'s); an exception that escapes it is what a traceback would be, and fails the test."""
    from aiayn.cli import main

    old, old_stdin, old_tmp = Path.cwd(), sys.stdin, tempfile.tempdir
    os.chdir(cwd)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    tempfile.tempdir = None if tmpdir is None else str(tmpdir)
    try:
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's refusals
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(old)
        sys.stdin, tempfile.tempdir = old_stdin, old_tmp
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (not following links): ``relative path -> (kind, ...)``, with a file's size,
    mode and SHA-256, a link's target, a folder's mode."""
    shot: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                shot[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                shot[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                shot[rel] = ("file", st.st_size, stat.S_IMODE(st.st_mode), sha256(path))
            else:
                shot[rel] = ("other", stat.S_IFMT(st.st_mode))
    return shot


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What differs between two snapshots, one entry per path."""
    return [f"{'added' if p not in before else 'removed' if p not in after else 'changed'}: {p}"
            for p in sorted(set(before) | set(after)) if before.get(p) != after.get(p)]


def assert_refused(result: Result, names: Sequence[str], before: dict, after: dict) -> None:
    """Exit 2, one line on stderr naming each of ``names``, no traceback, nothing changed."""
    report = f"exit {result.returncode}; stderr:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, report
    assert result.returncode == 2, report
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr, wanted one; {report}"
    for name in names:
        assert name in lines[0], f"the error does not name {name!r}: {lines[0]}"
    assert not changes(before, after), f"files changed by a refused command: {changes(before, after)}"


# Setups: each is a function of (tmp, runs) that makes the bad input inside tmp; `steps` chains them.

Setup = Callable[[Path, Any], None]


def steps(*setups: Setup) -> Setup:
    def setup(tmp: Path, runs: Any) -> None:
        for s in setups:
            s(tmp, runs)
    return setup


def run(kind: str, dest: str | None = None) -> Setup:
    """Copy the session's ``kind`` run (lm, copy, image, hf) to ``tmp/dest`` (default ``kind``)."""
    return lambda tmp, runs: shutil.copytree(runs[kind], tmp / (dest or kind), symlinks=True)


def write(rel: str, data: bytes | str) -> Setup:
    def setup(tmp: Path, runs: Any) -> None:
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return setup


def remove(rel: str) -> Setup:
    return lambda tmp, runs: (tmp / rel).unlink()


def mkdir(rel: str) -> Setup:
    return lambda tmp, runs: (tmp / rel).mkdir(parents=True, exist_ok=True)


def symlink(rel: str, target: str) -> Setup:
    return lambda tmp, runs: (tmp / rel).symlink_to(target)


def copy(src: str, dest: str) -> Setup:
    """Copy ``src`` (``kind:file`` of a session run, or a path in tmp) to ``tmp/dest``."""
    def setup(tmp: Path, runs: Any) -> None:
        kind, _, name = src.partition(":")
        shutil.copyfile(runs[kind] / name if name else tmp / src, tmp / dest)
    return setup


def truncate(rel: str, keep: float) -> Setup:
    """Cut the file to ``keep`` of its bytes (a copy or save cut short)."""
    def setup(tmp: Path, runs: Any) -> None:
        data = (tmp / rel).read_bytes()
        (tmp / rel).write_bytes(data[:int(len(data) * keep)])
    return setup


def flip_byte(rel: str, at: int = -100) -> Setup:
    """Flip one bit of a tensor's bytes (a checkpoint whose bytes changed after it was written)."""
    def setup(tmp: Path, runs: Any) -> None:
        data = bytearray((tmp / rel).read_bytes())
        data[at] ^= 0x10
        (tmp / rel).write_bytes(bytes(data))
    return setup


def edit_json(rel: str, change: Callable[[Any], Any]) -> Setup:
    def setup(tmp: Path, runs: Any) -> None:
        path = tmp / rel
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return setup


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A valid PNG header claiming ``width x height`` grey pixels (10^10 by default), with almost no data: a
    decompression bomb."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\0" * 1000))
            + png_chunk(b"IEND", b""))


def png(width: int = 28, height: int = 28) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, height), 128).save(buf, format="PNG")
    return buf.getvalue()


def npy(array) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def nan_image() -> bytes:
    import numpy as np

    a = np.full((28, 28), 0.5, dtype=np.float32)
    a[3:6, 3:6] = np.nan
    return npy(a)


def safetensors_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def sharded(shard: Callable[[Path], str]) -> Setup:
    """An ``hf`` folder whose weights are one shard named by ``model.safetensors.index.json`` as
    ``shard(tmp)``, with the real weights placed where that name leads (outside the folder)."""
    def setup(tmp: Path, runs: Any) -> None:
        folder = tmp / "hf"
        shutil.copytree(runs["hf"], folder)
        name = shard(tmp)
        target = Path(name) if Path(name).is_absolute() else folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        keys = safetensors_keys(folder / "model.safetensors")
        (folder / "model.safetensors").rename(target)
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": dict.fromkeys(keys, name)}))
    return setup


def sentencepiece_outside(tmp: Path, runs: Any) -> None:
    """A translation run whose source tokenizer is a SentencePiece one whose model and vocabulary files are
    outside the run folder: ``../outside.spm`` and an absolute path."""
    shutil.copytree(runs["copy"], tmp / "copy")
    (tmp / "outside.spm").write_bytes(b"\0" * 64)
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 2}))
    (tmp / "copy" / "src_tokenizer.json").write_text(json.dumps({
        "type": "sentencepiece", "model": "../outside.spm", "vocab": str(tmp / "elsewhere" / "vocab.json"),
        "eos": "</s>", "unk": "<unk>", "pad": "<pad>", "clean_up_spaces": True}))


def nan_weights(kind: str) -> Setup:
    """A copy of the ``kind`` run whose first weight is NaN, saved by aiayn itself (so its digest is right:
    the file is what was written, and what was written is broken)."""
    def setup(tmp: Path, runs: Any) -> None:
        import torch

        import aiayn

        shutil.copytree(runs[kind], tmp / kind)
        model = aiayn.load(tmp / kind)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        aiayn.save(model, tmp / kind)
    return setup


@dataclass
class Case:
    """One bad input: ``setup`` makes it in ``tmp``, ``argv`` (``{tmp}`` is replaced by the case's folder) is run
    in ``tmp`` with ``stdin``, and the one error line must contain every string of ``names``. ``process``: run
    ``python -m aiayn`` in a new process (else ``aiayn.cli.main`` in this one: the same check, without the
    seconds a process takes to import torch; see :func:`quick`)."""

    id: str
    setup: Setup
    argv: list[str]
    names: list[str]
    stdin: bytes | None = None
    process: bool = True

    def args(self, tmp: Path) -> list[str]:
        return [a.replace("{tmp}", str(tmp)) for a in self.argv]


def quick(*args: Any, **kwargs: Any) -> Case:
    """A :class:`Case` run through ``aiayn.cli.main`` in this process."""
    return Case(*args, **kwargs, process=False)


def check_case(case: Case, tmp: Path, runs: Any, capsys) -> Result:
    """Make the case, run it (in a new process, or in this one), and hold it to a refusal: nothing changed in
    ``tmp``, nor left in the temporary folder the command was given (``tmp/.tmpdir``)."""
    case.setup(tmp, runs)
    (tmp / ".tmpdir").mkdir()
    before = snapshot(tmp)
    if case.process:
        result = aiayn(case.args(tmp), cwd=tmp, stdin=case.stdin, tmpdir=tmp / ".tmpdir")
    else:
        result = in_process(case.args(tmp), tmp, capsys, stdin=case.stdin, tmpdir=tmp / ".tmpdir")
    assert_refused(result, case.names, before, mine(snapshot(tmp)))
    return result


def mine(shot: dict[str, tuple]) -> dict[str, tuple]:
    """A snapshot without the caches torch keeps in the temporary folder (``torchinductor_USER``, made when
    torch._dynamo is imported): torch's, not aiayn's."""
    return {p: v for p, v in shot.items() if not p.startswith(".tmpdir/torchinductor_")}


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
