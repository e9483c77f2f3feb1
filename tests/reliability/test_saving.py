"""Saving that must not lose data: a full disk, a read-only folder, a folder that holds a run, temporary files
of a save that was killed, and the modes of what is saved.
"""

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from reliability_kit import (
    TINY_LM,
    aiayn,
    assert_refused,
    in_process,
    sha256,
    snapshot,
    umask,
)


def resumable(runs, tmp: Path, name: str = "my-run") -> Path:
    """A copy of the session's lm run (3 updates done, its state saved) in ``tmp/name``."""
    shutil.copytree(runs["lm"], tmp / name)
    return tmp / name


def loadable_state(run: Path) -> None:
    """The training state in ``run`` reads back whole: its metadata and every tensor."""
    from safetensors.torch import load_file

    from aiayn.training import train_state_info

    assert train_state_info(run)["step"] >= 1
    assert load_file(run / "train_state.safetensors")


def chmod_works() -> bool:
    """Whether taking a folder's write permission stops this user writing in it (not for root)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o555)
        try:
            return not os.access(folder, os.W_OK)
        finally:
            os.chmod(folder, 0o755)


def read_only(folder: Path, args: list[str], cwd: Path):
    """Run ``aiayn ARGS`` with ``folder`` read-only: ``chmod 555`` where that stops this user, else (root) a
    process whose file functions refuse to create, rename or remove anything in ``folder`` (faults.py)."""
    if chmod_works():
        os.chmod(folder, 0o555)
        try:
            return aiayn(args, cwd=cwd)
        finally:
            os.chmod(folder, 0o755)
    return aiayn(args, cwd=cwd, driver=["readonly", str(folder)])


def test_a_full_disk_while_saving_the_state_keeps_the_last_one(tmp_path, runs):
    # The disk fills half-way through writing train_state.safetensors: the command says so in one line naming
    # the run folder, and the state saved before (and the weights) are untouched, loadable and resumable.
    run = resumable(runs, tmp_path)
    kept = {name: sha256(run / name) for name in ("train_state.safetensors", "model.safetensors")}
    outside = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("my-run")}
    result = aiayn(["train", "--resume", "my-run", "--steps", "5", "--no-progress"], cwd=tmp_path,
                   driver=["enospc", str(run), "train_state"])
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "my-run" in result.last
    assert {name: sha256(run / name) for name in kept} == kept
    assert not [p.name for p in run.rglob("*.tmp")], "a failed save left its temporary file"
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("my-run")} == outside
    loadable_state(run)
    from aiayn import recipes

    assert recipes.resume(run, steps=5, progress=False, verbose=False)["history"][-1]  # it goes on from there


def test_a_read_only_run_folder_is_refused_and_left_as_it_was(tmp_path, runs):
    run = resumable(runs, tmp_path)
    before = snapshot(tmp_path)
    result = read_only(run, ["train", "--resume", "my-run", "--steps", "5", "--no-progress"], tmp_path)
    assert_refused(result, ["my-run"], before, snapshot(tmp_path))
    loadable_state(run)


def test_a_read_only_out_folder_is_refused(tmp_path):
    (tmp_path / "ro-out").mkdir()
    before = snapshot(tmp_path)
    result = read_only(tmp_path / "ro-out", ["train", "lm", "--steps", "1", *TINY_LM, "--out", "ro-out"], tmp_path)
    assert_refused(result, ["ro-out"], before, snapshot(tmp_path))


@pytest.mark.parametrize("command", ["export", "convert"])
def test_force_replaces_a_run_that_is_there(command, tmp_path, runs, capsys):
    # without --force: refused (the table's export-/convert-into-a-folder-holding-a-run); with it, replaced
    shutil.copytree(runs["image"], tmp_path / "existing")
    shutil.copytree(runs["lm" if command == "export" else "hf"], tmp_path / "source")
    old = sha256(tmp_path / "existing" / "model.safetensors")
    args = ["export", "source", "--to", "hf", "existing"] if command == "export" else ["convert", "source", "existing"]
    result = in_process([*args, "--force"], tmp_path, capsys)
    assert result.returncode == 0, result.stderr
    assert sha256(tmp_path / "existing" / "model.safetensors") != old
    if command == "convert":
        import aiayn

        assert type(aiayn.load(tmp_path / "existing")).__name__ == "GPT"


def test_stale_temporary_files_of_a_killed_save_are_removed_at_the_next_save(tmp_path, runs, capsys):
    # what a save killed between writing its temporary file and renaming it leaves (aiayn.io.atomic_write's
    # names); a file of the user's that merely ends in .tmp is not the library's to remove
    run = resumable(runs, tmp_path)
    stale = [run / ".train_state.safetensors.k3j2_x9.tmp", run / ".model.safetensors.a1b2c3.tmp",
             run / ".history.csv.zz81qa.tmp"]
    for path in stale:
        path.write_bytes(b"\0" * 1000)
    (run / "notes.tmp").write_text("mine\n")
    result = in_process(["train", "--resume", "my-run", "--steps", "4", "--no-progress"], tmp_path, capsys)
    assert result.returncode == 0, result.stderr
    assert not [p.name for p in stale if p.exists()], "stale temporary files were left"
    assert (run / "notes.tmp").read_text() == "mine\n"


def test_saved_files_take_the_mode_the_umask_gives(tmp_path, runs, capsys):
    # under umask 022 a file is 0644 as open() makes it (mkstemp's 0600 would hide a run from the group that
    # shares it), a folder 0755: a training run, an export and a conversion
    with umask(0o022):
        trained = in_process(["train", "lm", "--steps", "2", "--save-every", "1", *TINY_LM, "--out", "out"],
                             tmp_path, capsys)
        assert trained.returncode == 0, trained.stderr
        exported = in_process(["export", "out/lm-dates", "--to", "hf", "hf"], tmp_path, capsys)
        assert exported.returncode == 0, exported.stderr
        converted = in_process(["convert", "hf", "converted"], tmp_path, capsys)
        assert converted.returncode == 0, converted.stderr
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")
             if not p.is_symlink()}
    wrong = {p: oct(m) for p, m in modes.items() if m != (0o755 if (tmp_path / p).is_dir() else 0o644)}
    assert not wrong, f"modes other than 0644 (files) and 0755 (folders): {wrong}"

