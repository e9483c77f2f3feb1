"""The run-folder lock under the interleaving that two processes starting together can only hit by chance, made
here deterministically: the owner lets go (``unlock``: remove ``.lock`` while holding it, then close it) between
our ``open`` of ``.lock`` and our lock on it. What we then lock is the removed file; ``lock`` must see that it is
no longer the one at the path and claim the new one, or be refused if a third process claimed that first.

The other processes' claims are made in this process on their own open file descriptions, which ``flock``
treats as apart as two processes' (Linux ``flock(2)``); ``_try_lock`` is wrapped to run the interleaving at
the one moment it matters."""

import os

import pytest

from aiayn.training import session
from aiayn.training.session import FolderLocked, lock, unlock

pytestmark = pytest.mark.skipif(os.name == "nt", reason="flock semantics; Windows locks byte ranges")

OTHER_PID = "4242"


def claim(file):
    """Another process's claim on ``file``: opened (made if missing), locked, its pid written; returns the fd."""
    import fcntl

    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{OTHER_PID}\n".encode())
    return fd


def leave(fd, file):
    """The owner's ``unlock``: remove the file while still holding it, then let go."""
    file.unlink()
    os.close(fd)


def held(file):
    """Whether someone holds the lock of the file at ``file`` (a fresh open file description cannot take it)."""
    import fcntl

    probe = os.open(file, os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(probe)
    return False


def test_a_third_process_that_claims_the_new_file_between_our_open_and_our_lock_keeps_us_out(tmp_path, monkeypatch):
    file = tmp_path / ".lock"
    owner = claim(file)
    third, real = [], session._try_lock

    def interleaved(fd):
        if not third:  # after our open, before our lock
            leave(owner, file)
            third.append(claim(file))  # the new .lock, claimed by a third process
        return real(fd)

    monkeypatch.setattr(session, "_try_lock", interleaved)
    try:
        with pytest.raises(FolderLocked, match=f"pid {OTHER_PID}"):
            lock(tmp_path)  # the removed file is ours to lock, but it is not the lock any more
        assert str(tmp_path.resolve()) not in session._held
        assert file.read_text().strip() == OTHER_PID and held(file)  # the third process's claim stands
    finally:
        unlock(tmp_path)  # (only if lock wrongly succeeded)
        for fd in third:
            os.close(fd)


def test_when_the_owner_leaves_between_our_open_and_our_lock_we_claim_the_new_file(tmp_path, monkeypatch):
    file = tmp_path / ".lock"
    owner = claim(file)
    calls, real = [], session._try_lock

    def interleaved(fd):
        calls.append(fd)
        if len(calls) == 1:
            leave(owner, file)
        return real(fd)

    monkeypatch.setattr(session, "_try_lock", interleaved)
    try:
        lock(tmp_path)
        # the first lock was on the removed file: seen as stale (not the file at the path), and the new file locked
        assert len(calls) == 2
        assert file.read_text().strip() == str(os.getpid())
        assert held(file)  # the file at the path is the one we hold: a later claim is refused
    finally:
        unlock(tmp_path)
    assert not file.exists()
