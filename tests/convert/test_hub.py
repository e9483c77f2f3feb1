"""Model ids through the Hugging Face cache (built here: no network), and the three ways a folder holds weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import aiayn

transformers = pytest.importorskip("transformers")
hub_constants = pytest.importorskip("huggingface_hub.constants")

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=61, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=60,
                                  eos_token_id=60)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    folder = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(folder)
    return model, folder


def logits_equal(ours, theirs) -> None:
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


def cache_holding(cache, repo: str, folder, revision: str = "main"):
    """The layout huggingface_hub keeps: refs/<revision> names a commit whose snapshot holds the files."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / revision).write_text(COMMIT)
    shutil.copytree(folder, root / "snapshots" / COMMIT, dirs_exist_ok=True)
    return cache


def test_a_model_id_is_read_from_the_cache_offline(gpt2, tmp_path, offline, monkeypatch):
    model, folder = gpt2
    cache = cache_holding(tmp_path / "hub", "someone/tiny-gpt2", folder)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    logits_equal(aiayn.from_hf("someone/tiny-gpt2"), model)
    assert aiayn.convert.hf_folder("someone/tiny-gpt2", cache_dir=cache).name == COMMIT


def test_a_revision_picks_its_own_snapshot(gpt2, tmp_path, offline):
    _, folder = gpt2
    cache = cache_holding(tmp_path / "hub", "tiny-gpt2", folder, revision="no_timm")
    assert aiayn.convert.hf_folder("tiny-gpt2", revision="no_timm", cache_dir=cache).name == COMMIT
    with pytest.raises(FileNotFoundError, match=r"not in the Hugging Face cache .* HF_HUB_OFFLINE is set"):
        aiayn.convert.hf_folder("tiny-gpt2", cache_dir=cache)  # main was never fetched


def test_offline_and_not_cached_says_so(tmp_path, offline, monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"org/absent \(revision v2\) is not in the Hugging Face cache"):
        aiayn.from_hf("org/absent", revision="v2")


def test_what_is_neither_a_folder_nor_an_id_is_refused(tmp_path, gpt2):
    with pytest.raises(FileNotFoundError, match="neither a folder nor a Hugging Face model id"):
        aiayn.from_hf(str(tmp_path / "no" / "such" / "folder"))
    with pytest.raises(ValueError, match="revision='v1' names a version of a hub model"):
        aiayn.from_hf(gpt2[1], revision="v1")


def test_sharded_safetensors_load(gpt2, tmp_path):
    model, _ = gpt2
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (tmp_path / "model.safetensors").exists()
    logits_equal(aiayn.from_hf(tmp_path), model)


def test_pytorch_model_bin_and_its_shards_load(gpt2, tmp_path):
    model, folder = gpt2
    state = {k: v.clone() for k, v in model.state_dict().items()}
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    for out in (single, sharded):
        out.mkdir()
        shutil.copyfile(folder / "config.json", out / "config.json")
    torch.save(state, single / "pytorch_model.bin")
    logits_equal(aiayn.from_hf(single), model)
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for file, keys in halves.items():
        torch.save({k: state[k] for k in keys}, sharded / file)
    weight_map = {k: file for file, keys in halves.items() for k in keys}
    (sharded / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    logits_equal(aiayn.from_hf(sharded), model)
    (sharded / "pytorch_model-00002-of-00002.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"names the shard pytorch_model-00002-of-00002\.bin, which is missing"):
        aiayn.from_hf(sharded)
