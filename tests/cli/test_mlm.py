import random

from aiayn.cli.mlm import date_pairs, sentence_pairs, train_mlm


def test_sentence_pairs_are_half_true_next_sentences():
    lines = [f"line {i}" for i in range(2001)]
    pairs = sentence_pairs(lines, random.Random(0))
    assert len(pairs) == 2000
    for a, b, label in pairs:
        assert a != b and label == int(int(b.split()[1]) != int(a.split()[1]) + 1)
    assert abs(sum(label for *_, label in pairs) / len(pairs) - 0.5) < 0.04
    assert abs(sum(label for *_, label in date_pairs(2000, 0)) / 2000 - 0.5) < 0.04


def test_a_short_mlm_run_learns_the_masked_tokens(tmp_path):
    # Next-sentence accuracy is reported but stays near chance in a run this short, so it is not asserted.
    result = train_mlm(steps=300, eval_every=150, n_train=5000, n_test=300, out=tmp_path, progress=False,
                       verbose=False)
    first, last = result["validation"]
    assert last["val_loss"] < first["val_loss"]
    assert last["mlm_accuracy"] > 0.3  # date words and digits: far above chance over a 2,000-token vocabulary
    assert (result["run"] / "tokenizer.json").is_file() and (result["run"] / "model.safetensors").is_file()
