"""Text classification (BERT's [CLS] head, GPT's last-token head) and fine-tuning: --init-from, --freeze and
--body-lr, end to end."""

import json

import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.cli import main
from aiayn.data import BPETokenizer, load_tokenizer
from aiayn.data.labelled import clean, read_labelled, split
from aiayn.models.gpt import GPT
from aiayn.pipelines.textclass import classify_texts, load_classifier
from aiayn.recipes.evaluate import evaluate
from aiayn.recipes.textclass import date_halves

QUIET = {"progress": False, "verbose": False}


def test_a_classifier_learns_the_made_up_half_years_well_above_chance(tmp_path, capsys):
    result = recipes.train("textclass", n_examples=1500, steps=120, warmup=20, eval_every=40, batch_size=32,
                           model={"d_model": 64, "d_ff": 128}, out=str(tmp_path), **QUIET)
    run = result["run"]
    saved = json.loads((run / "run.json").read_text())
    # chance is the larger class's share, about half; the dates say their month in words
    assert saved["test_accuracy"] > 0.85 and saved["classes"] == ["jan-jun", "jul-dec"]
    matrix = torch.tensor(saved["test_confusion"])
    assert int(matrix.sum()) == 150 and saved["test_accuracy"] == pytest.approx(float(matrix.trace() / 150))
    assert saved["test_recall"][0] == pytest.approx(float(matrix[0, 0] / matrix[0].sum()))
    assert saved["test_precision"][1] == pytest.approx(float(matrix[1, 1] / matrix[:, 1].sum()))
    assert {"confusion.png", "best.safetensors", "classes.json", "tokenizer.json"} <= {p.name for p in run.iterdir()}
    model, tok, classes = load_classifier(run)
    out = classify_texts(model, tok, classes, ["the 3rd of march 1999", "december 24, 2011"])
    assert [o["top"][0]["class"] for o in out] == ["jan-jun", "jul-dec"]
    assert all(0.5 < o["top"][0]["probability"] <= 1 for o in out)
    # transformers' text-classification names beside ours: the most likely class and its probability
    assert [(o["label"], o["score"]) for o in out] == [(o["top"][0]["class"], o["top"][0]["probability"]) for o in out]
    # aiayn evaluate on labelled data: its accuracy is the share of classify_texts' answers that are right
    texts, labels, _ = date_halves(40, seed=9)
    (tmp_path / "dates.tsv").write_text("".join(f"{classes[y]}\t{t}\n" for t, y in zip(texts, labels)))
    scores = evaluate(run, data=str(tmp_path / "dates.tsv"))
    right = [o["top"][0]["class"] == classes[y] for o, y in zip(classify_texts(model, tok, classes, texts), labels)]
    assert scores["n"] == 40 and scores["accuracy"] == pytest.approx(sum(right) / 40)
    assert main(["evaluate", "--run", str(run), "--data", str(tmp_path / "dates.tsv")]) == 0
    printed = capsys.readouterr().out
    assert f"accuracy       {scores['accuracy']:.4f}" in printed and "precision" in printed
    p = aiayn.pipeline(run)  # the pipeline's classify takes texts from a textclass run
    found = classify_texts(model, tok, classes, texts[:5], 2)
    assert p.task == "text-classification" and p.classify(texts[:5], top=2) == found
    # called, as transformers' text-classification pipeline answers: the best class, or the top_k best
    assert p(texts[:5]) == [{"label": f["label"], "score": f["score"]} for f in found]
    alone = p(texts[0], top_k=2)  # a batch of one: the same classes, the scores to rounding
    assert [a["label"] for a in alone] == [c["class"] for c in found[0]["top"]]
    assert [a["score"] for a in alone] == pytest.approx([c["probability"] for c in found[0]["top"]], abs=1e-6)


def test_evaluate_and_classify_cut_texts_where_training_cut_them(tmp_path):
    # a model of 64 positions trained on texts cut to 6 tokens (as a BERT of 512 fine-tuned at --max-len 128):
    # scoring the run's own test split must read what training read, and give run.json's accuracy
    texts, labels, _ = date_halves(600, seed=4)
    (tmp_path / "d.tsv").write_text("".join(f"{'ab'[y]}\t{t}\n" for t, y in zip(texts, labels)))
    run = recipes.train("textclass", data=str(tmp_path / "d.tsv"), steps=120, warmup=20, eval_every=120,
                        batch_size=32, max_len=6, model={"d_model": 64, "d_ff": 128, "max_len": 64},
                        out=str(tmp_path), **QUIET)["run"]
    assert aiayn.load(run).cfg.max_len == 64
    saved = json.loads((run / "run.json").read_text())
    assert saved["test_loss"] < 0.6  # it learned something (ln 2 = 0.69 is chance): what it reads matters
    scores = evaluate(run, data=str(tmp_path / "d.tsv"), split="test")
    assert scores["accuracy"] == pytest.approx(saved["test_accuracy"])
    assert scores["loss"] == pytest.approx(saved["test_loss"], rel=1e-4)  # the same probabilities, not only answers
    model, tok, classes = load_classifier(run)
    p = aiayn.pipeline(run)
    assert p.parts["max_len"] == 6
    assert p.classify(texts[:20], top=2) == classify_texts(model, tok, classes, texts[:20], 2, max_len=6)
    assert p.classify(texts[:20], top=2) != classify_texts(model, tok, classes, texts[:20], 2)  # 64 reads more


def test_a_gpt_classifier_reads_the_last_token_and_learns_the_half_years(tmp_path, capsys):
    result = recipes.train("textclass", model_type="gpt", n_examples=1000, steps=80, warmup=20, eval_every=40,
                           batch_size=32, model={"d_model": 64, "d_ff": 128, "n_layers": 2}, out=str(tmp_path),
                           **QUIET)
    run = result["run"]
    saved = json.loads((run / "run.json").read_text())
    assert saved["test_accuracy"] > 0.85  # chance is about a half, as for BERT above
    model, tok, classes = load_classifier(run)
    assert isinstance(model, GPT) and model.cfg.head == "classification" and model.cfg.pad_id == tok.pad_id
    out = classify_texts(model, tok, classes, ["the 3rd of march 1999", "december 24, 2011"])
    assert [o["top"][0]["class"] for o in out] == ["jan-jun", "jul-dec"]
    # one by one (no padding) == in a padded batch: the head finds each text's last real token
    texts, labels, _ = date_halves(40, seed=9)
    batched = [o["top"][0]["probability"] for o in classify_texts(model, tok, classes, texts)]
    alone = [classify_texts(model, tok, classes, [t])[0]["top"][0]["probability"] for t in texts[:6]]
    assert alone == pytest.approx(batched[:6], abs=1e-5)
    (tmp_path / "dates.tsv").write_text("".join(f"{classes[y]}\t{t}\n" for t, y in zip(texts, labels)))
    scores = evaluate(run, data=str(tmp_path / "dates.tsv"))
    right = [o["top"][0]["class"] == classes[y] for o, y in zip(classify_texts(model, tok, classes, texts), labels)]
    assert scores["n"] == 40 and scores["accuracy"] == pytest.approx(sum(right) / 40)
    assert main(["evaluate", "--run", str(run), "--data", str(tmp_path / "dates.tsv")]) == 0
    assert f"accuracy       {scores['accuracy']:.4f}" in capsys.readouterr().out
    p = aiayn.pipeline(run)  # a GPT textclass run classifies texts, not generates
    assert p.task == "text-classification"
    assert p.classify(texts[:5], top=2) == classify_texts(model, tok, classes, texts[:5], 2)


def test_a_gpt_lm_run_fine_tunes_as_a_gpt_classifier(runs, tmp_path):
    source = aiayn.load(runs["lm"]).state_dict()
    run = recipes.train("textclass", model_type="gpt", init_from=str(runs["lm"]), freeze=-1, n_examples=300,
                        steps=3, warmup=1, eval_every=0, out=str(tmp_path), **QUIET)["run"]
    tuned = aiayn.load(run).state_dict()
    assert (run / "tokenizer.json").read_text() == (runs["lm"] / "tokenizer.json").read_text()  # the lm's own
    body = [k for k in source if k.startswith(("embed.", "decoder.layers."))]
    assert body and all(torch.equal(tuned[k], source[k]) for k in body)  # the frozen body, untouched
    assert tuned["score.weight"].shape == (2, 32)
    p = aiayn.pipeline(run)
    texts = ["march 3, 1999", "the 30th of august, 2004; " * 12]  # the second longer than the run's max_len
    model, tok, classes = load_classifier(run)
    max_len = p.parts["max_len"]
    rows = [[*tok.encode(t), tok.eos_id] for t in texts]  # text, then the end-of-text token the head reads
    assert len(rows[0]) <= max_len < len(rows[1])
    rows[1] = [*rows[1][: max_len - 1], tok.eos_id]  # cut, keeping the end token
    with torch.no_grad():
        probs = [model.classify(model.features(torch.tensor([r]))).softmax(-1)[0] for r in rows]
    out = p.classify(texts, top=1)
    assert [o["top"][0]["class"] for o in out] == [classes[int(q.argmax())] for q in probs]
    assert [o["top"][0]["probability"] for o in out] == pytest.approx([float(q.max()) for q in probs], abs=1e-5)
    with pytest.raises(ValueError, match="model_type='gpt' takes a GPTConfig preset"):
        recipes.train("textclass", model_type="gpt", preset="bert-tiny", steps=1, out=str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="model_type='t5': expected one of"):
        recipes.config("textclass", model_type="t5")


def test_a_hugging_face_gpt2_folder_fine_tunes_as_a_classifier_with_its_own_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # a GPT-2-style byte-level BPE whose only special is <|endoftext|> (no padding token, as GPT-2's)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(date_halves(300, seed=3)[0], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=bpe.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0)).save_pretrained(tmp_path / "hf")
    bpe.save(str(tmp_path / "hf" / "tokenizer.json"))
    run = recipes.train("textclass", model_type="gpt", init_from=str(tmp_path / "hf"), n_examples=200, steps=2,
                        warmup=1, eval_every=0, max_len=64, out=str(tmp_path), **QUIET)["run"]
    model, tok, classes = load_classifier(run)
    assert model.cfg.pad_id == tok.eos_id == 0  # GPT-2 pads with its end-of-text token, masked
    start = aiayn.from_hf(tmp_path / "hf").state_dict()
    assert not torch.equal(aiayn.load(run).state_dict()["decoder.layers.1.ff.fc1.weight"],
                           start["decoder.layers.1.ff.fc1.weight"])  # loaded, then trained
    texts = date_halves(6, seed=4)[0]  # one by one == batched, with the end-of-text token appended to each
    batched = [o["top"][0]["probability"] for o in classify_texts(model, tok, classes, texts)]
    alone = [classify_texts(model, tok, classes, [t])[0]["top"][0]["probability"] for t in texts]
    assert alone == pytest.approx(batched, abs=1e-5)


def test_data_is_deduplicated_and_texts_under_two_labels_dropped_before_the_split(tmp_path):
    folder = tmp_path / "reviews"
    folder.mkdir()
    (folder / "pos.txt").write_text("good\ngreat\ngood\nfine\n" + "".join(f"nice {i}\n" for i in range(20)))
    (folder / "neg.txt").write_text("bad\nfine\nawful\n" + "".join(f"poor {i}\n" for i in range(20)))
    (folder / "SOURCE.txt").write_text("where the files came from\n")
    texts, labels, classes = read_labelled(folder)
    assert classes == ["neg", "pos"] and len(texts) == 47
    texts, labels, report = clean(texts, labels)
    assert report == {"read": 47, "duplicates": 2, "conflicting": 1, "kept": 44} and "fine" not in texts
    train, val, test = split(texts, labels, 0.1, 0.2, seed=3)
    assert (len(train[0]), len(val[0]), len(test[0])) == (31, 4, 9)
    assert not set(train[0]) & set(test[0]) and sorted(train[0] + val[0] + test[0]) == sorted(texts)
    assert split(texts, labels, 0.1, 0.2, seed=3)[2] == test  # the split is the split seed's alone
    with pytest.raises(ValueError, match="must be fractions"):
        split(texts, labels, 0.5, 0.5)


def test_fine_tuning_a_pre_trained_bert_keeps_its_tokenizer_and_freezes_the_body(runs, tmp_path):
    source = aiayn.load(runs["mlm"]).state_dict()
    result = recipes.train("textclass", init_from=str(runs["mlm"]), freeze=-1, n_examples=300, steps=4, warmup=1,
                           eval_every=0, out=str(tmp_path), **QUIET)
    run = result["run"]
    tuned = aiayn.load(run / "model.safetensors").state_dict()
    assert (run / "tokenizer.json").read_text() == (runs["mlm"] / "tokenizer.json").read_text()
    for name, value in tuned.items():  # the body is the pre-trained one, untouched; the new head learnt
        if name.startswith(("embed.", "encoder.")):
            assert torch.equal(value, source[name]), name
    assert not torch.equal(tuned["pooler.weight"], source["pooler.weight"])
    assert aiayn.load(run).cfg.d_model == 32  # the source's config, not the preset's
    body = recipes.train("textclass", init_from=str(runs["mlm"]), body_lr=0.001, n_examples=300, steps=4,
                         warmup=1, eval_every=0, out=str(tmp_path), name="slow", **QUIET)["run"]
    slow = aiayn.load(body).state_dict()
    moved = {k: (slow[k] - source[k]).abs().max().item() for k in ("encoder.layers.0.ff.fc1.weight",)}
    fast = {k: (tuned[k] - source[k]).abs().max().item() for k in ("pooler.weight",)}
    assert 0 < moved["encoder.layers.0.ff.fc1.weight"] < fast["pooler.weight"] / 10


def test_a_hugging_face_bert_folder_fine_tunes_through_the_command_line(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from aiayn.data.wordpiece import SPECIALS

    vocab = [*SPECIALS, *"abcdefghijklmnopqrstuvwxyz0123456789", "##s", "##th"]
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64)).save_pretrained(tmp_path / "hf")
    assert main(["train", "textclass", "--init-from", str(tmp_path / "hf"), "--n-examples", "200", "--steps", "2",
                 "--warmup", "1", "--freeze", "1", "--out", str(tmp_path / "runs"), "--name", "hf"]) == 0
    assert "frozen" in capsys.readouterr().out
    run = tmp_path / "runs" / "hf"
    expected = aiayn.from_hf(tmp_path / "hf").state_dict()
    tuned = aiayn.load(run).state_dict()
    assert torch.equal(tuned["encoder.layers.0.ff.fc1.weight"], expected["encoder.layers.0.ff.fc1.weight"])
    assert not torch.equal(tuned["encoder.layers.1.ff.fc1.weight"], expected["encoder.layers.1.ff.fc1.weight"])


def test_gpt2_fine_tunes_from_a_hugging_face_folder_on_a_text_file(tmp_path):
    transformers = pytest.importorskip("transformers")
    text = "the quick brown fox jumps over the lazy dog.\n" * 40
    (tmp_path / "text.txt").write_text(text)
    tok = BPETokenizer.train([text], vocab_size=300)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tok.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4, eos_token_id=2))
    hf.save_pretrained(tmp_path / "hf")
    tok.save(tmp_path / "hf" / "tokenizer.json")
    result = recipes.train("lm", data=str(tmp_path / "text.txt"), init_from=str(tmp_path / "hf"), freeze=1,
                           steps=3, warmup=1, block=16, batch_size=4, eval_every=0, out=str(tmp_path), **QUIET)
    run = result["run"]
    assert load_tokenizer(run / "tokenizer.json").encode("lazy dog") == tok.encode("lazy dog")
    start, tuned = aiayn.from_hf(tmp_path / "hf").state_dict(), aiayn.load(run).state_dict()
    assert torch.equal(tuned["decoder.layers.0.ff.fc1.weight"], start["decoder.layers.0.ff.fc1.weight"])
    assert torch.equal(tuned["embed.tokens.weight"], start["embed.tokens.weight"])  # tied to the frozen table
    assert not torch.equal(tuned["decoder.layers.1.ff.fc1.weight"], start["decoder.layers.1.ff.fc1.weight"])
    # the first update starts from GPT-2's own loss on the first batch: the weights were loaded, not re-drawn
    first = result["history"][0]["loss"]
    random_start = recipes.train("lm", data=str(tmp_path / "text.txt"), steps=1, warmup=1, block=16, batch_size=4,
                                 eval_every=0, out=str(tmp_path), name="fresh", tokenizer="bpe", vocab_size=300,
                                 model={"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 128}, **QUIET)
    assert first != pytest.approx(random_start["history"][0]["loss"], rel=1e-3)


def test_init_from_refusals_name_the_problem(runs, tmp_path):
    with pytest.raises(ValueError, match="holds a GPTConfig model; textclass fine-tunes a BERT"):
        recipes.train("textclass", init_from=str(runs["lm"]), steps=1, out=str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="the translation task does not take init_from yet"):
        recipes.train("copy", init_from=str(runs["translation"]), steps=1, n_train=50, n_test=5,
                      out=str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="freeze and body_lr apply to loaded weights: give init_from"):
        recipes.config("textclass", freeze=1)
