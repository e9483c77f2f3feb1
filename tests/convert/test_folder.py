"""`aiayn convert` and `aiayn export` (aiayn.convert.folder) never write over a folder that holds something
unless told to, never leave half a folder behind, and read a tokenizer before copying it."""

import json
import os

import pytest

import aiayn
from aiayn.convert.folder import convert, export
from aiayn.models import checkpoint
from aiayn.models.gpt import GPT, GPTConfig

transformers = pytest.importorskip("transformers")


@pytest.fixture
def run(tmp_path):
    """A run folder of a tiny GPT with a record of its training."""
    run = tmp_path / "run"
    aiayn.save(GPT(GPTConfig(vocab_size=20, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32, eos_id=19)), run)
    (run / "run.json").write_text(json.dumps({"data": "tiny", "steps": 3, "perplexity": 9.5}))
    return run


@pytest.fixture
def hf_folder(tmp_path):
    """A Hugging Face GPT-2 folder with a word-level tokenizer.json."""
    from tokenizers import Tokenizer, models

    folder = tmp_path / "hf"
    cfg = transformers.GPT2Config(vocab_size=20, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=19,
                                   eos_token_id=19)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(folder / "tokenizer.json"))
    return folder


def occupied(folder):
    """``folder`` holding an old export: a weight file and a note the user wrote."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"old weights")
    (folder / "notes.txt").write_text("mine")
    return folder


def leftovers(folder):
    """Temporary or set-aside folders an export left beside ``folder``."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


@pytest.mark.parametrize("to", ["hf", "onnx"])
def test_export_refuses_a_folder_that_holds_files(run, tmp_path, to):
    out = occupied(tmp_path / "out")
    with pytest.raises(ValueError, match=r"out already holds model\.safetensors, notes\.txt; choose another folder "
                                         r"or pass --force to replace it"):
        export(run, out, to)
    assert (out / "model.safetensors").read_bytes() == b"old weights" and leftovers(out) == []


def test_export_with_force_replaces_the_folder_whole(run, tmp_path):
    out = occupied(tmp_path / "out")
    assert export(run, out, "hf", force=True) == out
    # the new folder only: the old one is gone, not merged into
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert transformers.GPT2LMHeadModel.from_pretrained(out).config.n_embd == 16
    assert leftovers(out) == []


def test_an_empty_folder_or_a_new_one_is_written_without_force(run, tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        export(run, out, "hf")
        assert (out / "model.safetensors").is_file() and leftovers(out) == []


def test_a_failed_export_leaves_nothing_half_written(run, tmp_path):
    (run / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"run\.json is not JSON"):
        export(run, tmp_path / "out", "hf")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []
    out = occupied(tmp_path / "old")
    with pytest.raises(ValueError, match=r"run\.json is not JSON"):
        export(run, out, "hf", force=True)
    assert (out / "notes.txt").read_text() == "mine" and leftovers(out) == []  # the old folder as it was


def test_a_crash_while_swapping_folders_keeps_the_old_one(run, tmp_path, monkeypatch):
    out = occupied(tmp_path / "out")
    replace = os.replace

    def failing_rename_in(src, dst):  # the new folder cannot be renamed in, after the old one was moved aside
        if ".out.tmp-" in str(src) and str(dst) == str(out.resolve()):
            raise OSError("disk gone")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_rename_in)
    with pytest.raises(OSError, match="disk gone"):
        export(run, out, "hf", force=True)
    assert (out / "notes.txt").read_text() == "mine" and leftovers(out) == []


def test_an_out_that_is_a_file_a_dangling_link_or_the_run_itself_is_refused(run, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"file is a file, not a folder"):
        export(run, tmp_path / "file", "hf", force=True)
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"link is a link to .*nowhere, which does not exist"):
        export(run, tmp_path / "link", "hf", force=True)
    for out in (run, tmp_path):  # force would delete the run it reads
        with pytest.raises(ValueError, match="which is read from; choose another folder"):
            export(run, out, "hf", force=True)
    assert (run / "model.safetensors").is_file()


def test_a_link_to_a_folder_replaces_the_folder_it_leads_to(run, tmp_path):
    real = occupied(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    export(run, tmp_path / "link", "hf", force=True)
    assert (tmp_path / "link").is_symlink() and (real / "config.json").is_file() and not (real / "notes.txt").exists()


def test_convert_refuses_a_folder_that_holds_files_and_force_replaces_it(hf_folder, tmp_path):
    out = occupied(tmp_path / "out")
    with pytest.raises(ValueError, match=r"out already holds model\.safetensors, notes\.txt"):
        convert(hf_folder, out)
    assert (out / "model.safetensors").read_bytes() == b"old weights"
    convert(hf_folder, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors", "tokenizer.json"]
    assert aiayn.load(out).cfg.d_model == 16 and leftovers(out) == []


@pytest.mark.parametrize(("content", "said"), [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"{not json", "is not JSON"),
    (b"[1, 2]", "holds a JSON list, not a tokenizer"),
    (b'{"model": 3}', "is not a tokenizer that Hugging Face's tokenizers reads"),
], ids=["not-utf8", "not-json", "not-an-object", "not-a-tokenizer"])
def test_convert_refuses_a_tokenizer_json_that_is_not_one_before_writing(hf_folder, tmp_path, content, said):
    (hf_folder / "tokenizer.json").write_bytes(content)
    with pytest.raises(ValueError, match=f"hf/tokenizer.json {said}"):
        convert(hf_folder, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []


def test_a_failure_in_writing_removes_the_temporary_folder(hf_folder, tmp_path, monkeypatch):
    def broken_save(model, path):
        (path / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save", broken_save)  # what convert writes the weights with
    with pytest.raises(OSError, match="disk full"):
        convert(hf_folder, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path / "out") == []
