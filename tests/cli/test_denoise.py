import numpy as np
import pytest

from aiayn import recipes
from aiayn.cli import main
from aiayn.data import BPETokenizer, load_tokenizer
from aiayn.data.noising import corrupt
from aiayn.recipes.denoise import split_sentences


def test_bpe_with_mask_gives_it_id_4_and_never_makes_it_from_text(tmp_path):
    tok = BPETokenizer.train(["the cat sat on the mat."] * 20, vocab_size=300, mask=True)
    assert tok.mask_id == 4 and BPETokenizer.train(["a b"], vocab_size=300).mask_id is None
    assert tok.decode([5, tok.mask_id, 6]).count("<mask>") == 1
    assert tok.mask_id not in tok.encode("typed <mask> is text")  # only the noising functions insert it
    tok.save(tmp_path / "t.json")
    assert load_tokenizer(tmp_path / "t.json").mask_id == 4


def test_corrupt_applies_sentence_noise_then_token_noise():
    rng = np.random.default_rng(0)
    sentences = [[10, 11, 12], [20, 21], [30, 31, 32, 33]]
    permuted = corrupt(sentences, 4, rng, ("permute",))
    assert sorted(permuted) == sorted(t for s in sentences for t in s)
    assert any(corrupt(sentences, 4, rng, ("permute",)) != [t for s in sentences for t in s] for _ in range(10))
    doc = [list(range(10, 1010))]
    infilled = corrupt(doc, 4, rng, ("infill",), ratio=0.3)
    assert 4 in infilled and abs(sum(t != 4 for t in infilled) - 700) <= 5  # 30% of the tokens gone under masks
    assert corrupt(doc, 4, rng, ("mask",), ratio=0.3).count(4) == 300
    assert corrupt(doc, 4, rng, ()) == doc[0]
    with pytest.raises(ValueError, match=r"unknown.*shuffle"):
        corrupt(doc, 4, rng, ("shuffle",))


def test_split_sentences_keeps_the_text_and_the_token_budget():
    tok = BPETokenizer.train(["One fish. Two fish! Red fish? Blue fish."] * 10, vocab_size=300, mask=True)
    parts = split_sentences(tok, "One fish. Two fish! Red fish? Blue fish.", 100)
    assert len(parts) == 4 and tok.decode([t for p in parts for t in p]) == "One fish. Two fish! Red fish? Blue fish."
    assert sum(map(len, split_sentences(tok, "One fish. Two fish! Red fish? Blue fish.", 5))) == 5


def test_a_short_denoising_run_learns_to_reconstruct(tmp_path):
    result = recipes.train("denoise", steps=150, eval_every=75, batch_size=32, n_train=3000, n_test=100,
                           out=str(tmp_path), progress=False, verbose=False)
    first, last = result["validation"]
    assert last["val_loss"] < first["val_loss"]
    s = result["samples"][0]
    assert "<mask>" in s["corrupted"] and "<mask>" not in s["original"]
    # Baseline: copying the corrupted input as it is, which puts 42-44% of the tokens in place. Seeds 0, 1, 2
    # put 67%, 63%, 65% in place (25, 19 and 22 points above copying) after 150 updates of 32 lines; 12 points
    # leaves room for all.
    assert result["token_accuracy"] >= result["copy_accuracy"] + 0.12
    assert {"model.safetensors", "tokenizer.json", "args.json", "train_state.safetensors"} <= {
        p.name for p in result["run"].iterdir()}


def test_bad_noise_names_are_refused_on_the_command_line(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["train", "--task", "denoise", "--noise", "permute,shuffle", "--out", "/nonexistent"])
    assert exit.value.code == 2 and "shuffle" in capsys.readouterr().err
