from pathlib import Path

import pytest
import torch

import aiayn
from aiayn.io import atomic_write


def test_save_and_load_round_trip_with_tied_weights(tmp_path):
    model = aiayn.build("transformer-tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0).eval()
    path = aiayn.save(model, tmp_path / "run")
    assert path.name == "model.safetensors"
    loaded = aiayn.load(tmp_path / "run").eval()
    assert loaded.cfg == model.cfg
    assert loaded.generator.weight is loaded.tgt_embed.tokens.weight
    src, tgt = torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]])
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt), rtol=0, atol=0)
    assert aiayn.load(path).cfg == model.cfg  # the file itself works too


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    target = tmp_path / "x.txt"
    atomic_write(target, lambda tmp: Path(tmp).write_text("old"))

    def crash(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(target, crash)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]  # no temporary file left behind


def test_truncated_or_missing_checkpoints_are_refused(tmp_path):
    model = aiayn.build("transformer-tiny")
    path = aiayn.save(model, tmp_path / "m.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        aiayn.load(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        aiayn.load(tmp_path / "nothing")


def test_atomic_files_get_the_mode_a_plain_open_would_give(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic = atomic_write(tmp_path / "atomic.txt", lambda tmp: Path(tmp).write_text("x"))
    assert atomic.stat().st_mode == plain.stat().st_mode


def test_a_changed_config_is_refused_and_files_whose_digest_covers_only_tensors_still_load(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from aiayn.io import digest

    model = aiayn.build("llama-tiny")
    path = aiayn.save(model, tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    # one changed digit in the stored config: every tensor still fits, but the model would compute otherwise
    save_file(tensors, str(path), metadata={**meta, "aiayn_config": meta["aiayn_config"].replace("10000.0", "90000.0")})
    with pytest.raises(ValueError, match="tensors and config do not match the SHA-256 digest"):
        aiayn.load(path)
    # a file written before digests covered the config (0.1.0): its digest of the tensors alone is checked
    old = {k: v for k, v in meta.items() if k != "aiayn_digest_of"}
    save_file(tensors, str(path), metadata={**old, "aiayn_sha256": digest(tensors)})
    assert aiayn.load(path).cfg == model.cfg
