import random
from collections import Counter

import torch

import aiayn
from aiayn import recipes
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.models.bert import mean_pool
from aiayn.recipes.mlm import collate, date_pairs, encode, losses, masked_accuracy, next_pairs, sentence_pairs


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
    result = recipes.train("mlm", steps=300, eval_every=150, n_train=5000, n_test=300, out=str(tmp_path),
                           progress=False, verbose=False)
    first, last = result["validation"]
    assert last["val_loss"] < first["val_loss"]
    # Baselines from the held-out tokens, each of which is equally likely to be masked: always answering the
    # commonest one is right 22% of the time, and knowing only how often each occurs (the unigram entropy)
    # costs 4.4 nats a token. Seeds 0, 1, 2 reach 32%, 32%, 34% and 3.2 nats; the margins leave room for all.
    tok = WordPieceTokenizer.load(result["run"] / "tokenizer.json")
    counts = Counter(t for a, b, _ in date_pairs(300, seed=1) for text in (a, b)  # the recipe's held-out pairs
                     for t in tok.encode(text)[0][1:-1])  # without [CLS] and [SEP]
    freq = torch.tensor(list(counts.values()), dtype=torch.float64) / sum(counts.values())
    commonest, unigram_entropy = freq.max().item(), -(freq * freq.log()).sum().item()
    assert last["mlm_accuracy"] >= commonest + 0.05
    assert last["val_loss"] <= unigram_entropy - 0.8
    assert (result["run"] / "tokenizer.json").is_file() and (result["run"] / "model.safetensors").is_file()


def test_without_next_sentence_prediction_pairs_are_contiguous_in_one_segment():
    """RoBERTa's recipe (nsp=False): B always follows A, every token is in segment 0, and the dates are never
    paired with another date's ISO form."""
    lines = [f"line {i}" for i in range(50)]
    assert next_pairs(lines) == [(f"line {i}", f"line {i + 1}", 0) for i in range(49)]
    assert all(label == 0 for *_, label in date_pairs(500, 0, nsp=False))
    tok = WordPieceTokenizer.train([t for a, b, _ in date_pairs(200, 0) for t in (a, b)], vocab_size=200)
    pairs = date_pairs(20, 0, nsp=False)
    for (ids, segments, _), (with_ids, with_segments, _) in zip(encode(tok, pairs, 64, segments=False),
                                                                encode(tok, pairs, 64)):
        assert ids == with_ids and set(segments) == {0} and set(with_segments) == {0, 1}


def test_a_short_run_without_next_sentence_prediction_trains_the_masked_lm_alone(tmp_path):
    result = recipes.train("mlm", nsp=False, steps=120, eval_every=60, n_train=2000, n_test=200,
                           out=str(tmp_path), progress=False, verbose=False)
    first, last = result["validation"]
    assert "nsp_accuracy" not in last and "nsp_accuracy" not in result
    assert last["val_loss"] < first["val_loss"]
    model = aiayn.load(result["run"])
    assert model.cfg.head == "mlm" and model.nsp is None  # no next-sentence head to train or to save
    # no next-sentence term: its loss is zero and no logits are made for it
    tok = WordPieceTokenizer.load(result["run"] / "tokenizer.json")
    batch = collate(encode(tok, date_pairs(16, 5, nsp=False), 64, segments=False), tok, model.cfg.vocab_size,
                    torch.Generator().manual_seed(0))
    mlm, _, nsp, nsp_logits, n = losses(model, batch, nsp=False)
    assert nsp_logits is None and float(nsp) == 0.0 and n > 0 and float(mlm) > 0
    scored = masked_accuracy(result["run"], _lines(tmp_path))  # scored as trained: contiguous pairs, no NSP
    assert scored["pairs"] == 9 and "nsp_accuracy" not in scored


def _lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(f"the {i}th of may 19{i + 10}" for i in range(10)) + "\n")
    return path


def test_roberta_pretrains_without_next_sentence_prediction_and_embeds_texts_longer_than_it_reads(tmp_path):
    """RoBERTa's positions start above pad_id, so it reads max_len - pad_id - 1 tokens: pairs are cut to that in
    training, and a text longer than it is cut to it when embedded, never refused."""
    result = recipes.train("mlm", preset="roberta-tiny", nsp=False, max_len=8, steps=2, eval_every=2, n_train=64,
                           n_test=16, out=str(tmp_path), progress=False, verbose=False)
    model = aiayn.load(result["run"]).eval()
    assert type(model).__name__ == "RoBERTa" and model.cfg.max_tokens == 8 - model.cfg.pad_id - 1
    p = aiayn.pipeline(result["run"], device="cpu")
    long = " ".join(["the 3rd of march 1999"] * 20)  # far more tokens than the model's positions
    got = p.embed([long, "may 1"])
    tok = p.parts["tok"]
    ids, types, mask = tok.batch([long, "may 1"], model.cfg.max_tokens)
    assert ids.size(1) == model.cfg.max_tokens
    with torch.no_grad():
        want = mean_pool(model(ids, types, mask), mask)
    torch.testing.assert_close(got, want)
