"""What the library writes and reads back: nothing outside its folder, nothing half-written, nothing unreadable
taken as good (the command-line side of the same is tests/reliability/)."""

import errno
import json
import os
import subprocess
import sys

import pytest
import torch

import aiayn
from aiayn.io import atomic_write, write_text
from aiayn.pipelines.loading import check_tokenizer
from aiayn.training.session import check_name, lock, read_args, unlock


def test_a_save_removes_what_a_killed_save_of_the_same_file_left_and_keeps_a_live_writers(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    left = tmp_path / f".model.safetensors.{dead.stdout.strip()}.k3j2.tmp"  # a process that is gone
    live = tmp_path / f".model.safetensors.{os.getppid()}.a8f1.tmp"  # a process still running
    other = tmp_path / f".best.safetensors.{dead.stdout.strip()}.zz.tmp"  # another file's: not this save's
    for f in (left, live, other):
        f.write_bytes(b"half")
    write_text(tmp_path / "model.safetensors", "new")
    assert not left.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "model.safetensors"])


def test_saved_files_get_the_mode_open_would_give_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        path = aiayn.save(aiayn.build("gpt-tiny", vocab_size=16, n_layers=1), tmp_path / "m.safetensors")
    finally:
        os.umask(old)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_a_full_disk_leaves_the_old_file_and_names_the_file_it_could_not_write(tmp_path):
    path = write_text(tmp_path / "args.json", "old")

    def full(tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"No space left on device while writing .*args\.json") as e:
        atomic_write(path, full)
    assert e.value.errno == errno.ENOSPC
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["args.json"]


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="symbolic links of POSIX")
def test_a_lock_that_is_a_link_is_refused_and_its_target_left_as_it_was(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(target)
    with pytest.raises(ValueError, match=r"\.lock is a symbolic link"):
        lock(run)
    assert target.read_text() == "keep me\n"
    (run / ".lock").unlink()
    (run / ".lock").mkdir()
    with pytest.raises(ValueError, match=r"\.lock is not a regular file"):
        lock(run)
    (run / ".lock").rmdir()
    lock(run)  # a plain file: claimed
    unlock(run)


@pytest.mark.parametrize("name", ["../x", "../../x", "/tmp/x", "a/b", "..", ".", "", "  "])
def test_a_run_name_that_would_leave_out_is_refused(name):
    with pytest.raises(ValueError, match="--name"):
        check_name(name)
    with pytest.raises(ValueError, match="--name"):
        aiayn.recipes.config("lm", name=name)


def test_a_plain_run_name_is_taken(tmp_path):
    check_name("lm-dates.v2")
    assert aiayn.recipes.config("lm", name="my run").name == "my run"


def test_args_json_that_is_not_an_object_is_refused_naming_it(tmp_path):
    (tmp_path / "args.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"args\.json holds a JSON list, not an object"):
        read_args(tmp_path)
    (tmp_path / "args.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match=r"args\.json is not a JSON file"):
        read_args(tmp_path)


def test_a_checkpoint_with_nan_weights_is_refused_by_name(tmp_path):
    model = aiayn.build("gpt-tiny", vocab_size=16, n_layers=1)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    path = aiayn.save(model, tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match=r"m\.safetensors holds NaN or infinite weights \(.*\); it was not loaded"):
        aiayn.load(path)


class _Tok:
    def __init__(self, vocab_size, eos_id=2):
        self.vocab_size, self.eos_id = vocab_size, eos_id


def test_a_tokenizer_that_does_not_fit_its_model_is_refused():
    check_tokenizer(_Tok(100), "t.json", 100, {"eos_id": 2}, exact=True)
    check_tokenizer(_Tok(90), "t.json", 100, {"eos_id": 2}, exact=False)  # a converted model's padded table
    with pytest.raises(ValueError, match=r"t\.json holds 90 tokens but the model's vocabulary has 100"):
        check_tokenizer(_Tok(90), "t.json", 100, {"eos_id": 2}, exact=True)  # a run aiayn trained: the same
    with pytest.raises(ValueError, match=r"t\.json holds 120 tokens"):
        check_tokenizer(_Tok(120), "t.json", 100, {"eos_id": 2}, exact=False)
    with pytest.raises(ValueError, match=r"t\.json gives eos_id 5 but the model's config says 2"):
        check_tokenizer(_Tok(100, eos_id=5), "t.json", 100, {"eos_id": 2}, exact=True)


def test_a_tokenizer_file_that_is_not_utf8_or_not_json_is_refused_naming_it(tmp_path):
    from aiayn.data import load_tokenizer
    from aiayn.data.sentencepiece import SentencePieceTokenizer
    from aiayn.data.wordpiece import WordPieceTokenizer

    bad = tmp_path / "tokenizer.json"
    for content, why in ((b"\xff\xfe\x00junk", "not UTF-8"), (b"{not json", "not JSON"), (b"[1]", "JSON list")):
        bad.write_bytes(content)
        for reader in (load_tokenizer, WordPieceTokenizer.load, SentencePieceTokenizer.load):
            with pytest.raises(ValueError, match=rf"tokenizer\.json (is|holds a) .*{why}"):
                reader(bad)


@pytest.mark.parametrize("key,value", [("vocab", "../../etc/passwd"), ("model", "/etc/hostname"),
                                       ("vocab", "sub/v.json")])
def test_a_sentencepiece_tokenizer_naming_files_outside_its_folder_is_refused(tmp_path, key, value):
    from aiayn.data.sentencepiece import SentencePieceTokenizer

    saved = {"type": "sentencepiece", "model": "source.spm", "vocab": "vocab.json", "eos": "</s>", "unk": "<unk>",
             "pad": "<pad>", "clean_up_spaces": False, key: value}
    (tmp_path / "src_tokenizer.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=rf"names {key} .*a plain file name"):
        SentencePieceTokenizer.load(tmp_path / "src_tokenizer.json")


def test_pictures_pillow_cannot_read_and_nan_pixels_are_refused_by_name(tmp_path):
    import numpy as np
    from PIL import Image

    from aiayn.pipelines.image import read_image_file

    Image.new("RGB", (8, 8), "red").save(tmp_path / "ok.png")
    assert read_image_file(tmp_path / "ok.png").shape == (3, 8, 8)
    (tmp_path / "text.png").write_text("not a picture")
    (tmp_path / "cut.png").write_bytes((tmp_path / "ok.png").read_bytes()[:40])
    # a PNG header claiming 100000 x 100000 pixels: refused before anything is decoded
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    (tmp_path / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk)
    for name in ("text.png", "cut.png", "bomb.png"):
        with pytest.raises(ValueError, match=rf"{name} is not an image Pillow can read"):
            read_image_file(tmp_path / name)
    pixels = np.zeros((8, 8), dtype=np.float32)
    pixels[3, 3] = np.nan
    np.save(tmp_path / "nan.npy", pixels)
    with pytest.raises(ValueError, match=r"nan\.npy holds NaN or infinite pixels"):
        read_image_file(tmp_path / "nan.npy")
