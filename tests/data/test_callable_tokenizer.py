"""The callable tokenizer: ids worked by hand for each way a model reads text, and the same ids and masks as
transformers' own tokenizers (a BERT vocabulary; an exported language model's folder)."""

import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.data import CallableTokenizer, CharTokenizer
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.inference import tokenizer

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


def test_specials_and_padding_side_by_hand():
    char = CharTokenizer("abc")  # <pad> <s> </s> <unk> a b c: ids 0-6
    prompt = CallableTokenizer(char, "none", padding_side="left")
    batch = prompt(["ab", "c"], return_tensors="pt", padding=True)
    assert batch["input_ids"].tolist() == [[4, 5], [0, 6]]
    assert batch["attention_mask"].tolist() == [[1, 1], [0, 1]]
    source = CallableTokenizer(char, "eos")
    batch = source(["ab", "c"], return_tensors="pt", padding=True)
    assert batch["input_ids"].tolist() == [[4, 5, 2], [6, 2, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert source("ab") == {"input_ids": [4, 5, 2], "attention_mask": [1, 1, 1]}
    assert source("ab", return_tensors="pt")["input_ids"].shape == (1, 3)
    assert source.batch_decode(batch["input_ids"], skip_special_tokens=True) == ["ab", "c"]
    assert source.decode(torch.tensor([1, 6, 4, 2]), skip_special_tokens=True) == "ca"
    assert source("abcab", truncation=True, max_length=3)["input_ids"] == [4, 5, 2]  # keeps its </s>
    with pytest.raises(ValueError, match="padding=True"):
        source(["ab", "c"], return_tensors="pt")


def test_bert_ids_and_masks_match_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    ours = CallableTokenizer(WordPieceTokenizer.from_vocab(tmp_path / "vocab.txt"), "bert")
    theirs = transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"))
    texts = ["The cat sat on the mats", "the dog"]
    got, want = ours(texts, return_tensors="pt", padding=True), theirs(texts, return_tensors="pt", padding=True)
    assert torch.equal(got["input_ids"], want["input_ids"])
    assert torch.equal(got["attention_mask"], want["attention_mask"])
    assert ours.batch_decode(got["input_ids"], skip_special_tokens=True) == \
        theirs.batch_decode(want["input_ids"], skip_special_tokens=True)


def test_a_language_model_run_pads_left_as_its_exported_folder_does(tmp_path):
    transformers = pytest.importorskip("transformers")
    run = recipes.train("lm", n_train=100, n_test=5, block=16, batch_size=4, out=str(tmp_path), **TINY)["run"]
    p = aiayn.pipeline(run)
    alone = tokenizer(run)
    texts = ["12 march", "1999"]
    got = p.tokenizer(texts, return_tensors="pt", padding=True)
    assert torch.equal(got["input_ids"], alone(texts, return_tensors="pt", padding=True)["input_ids"])
    assert got["attention_mask"].tolist()[1][:4] == [0, 0, 0, 0]  # padded on the left, for generation
    hf = transformers.AutoTokenizer.from_pretrained(aiayn.to_hf(run, tmp_path / "hf"))
    want = hf(texts, return_tensors="pt", padding=True)
    assert torch.equal(got["input_ids"], want["input_ids"])
    assert torch.equal(got["attention_mask"], want["attention_mask"])
    assert p.tokenizer.batch_decode(got["input_ids"], skip_special_tokens=True) == texts
