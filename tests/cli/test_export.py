"""`aiayn export RUN --to hf OUT`: a run folder that transformers opens, with its tokenizer and a model card."""

import json
import sys

import pytest
import torch

import aiayn
from aiayn.cli import main

transformers = pytest.importorskip("transformers")


def test_an_lm_run_exports_to_gpt2_and_comes_back_equal(runs, tmp_path, capsys):
    assert main(["export", str(runs["lm"]), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert "exported into" in capsys.readouterr().out
    ours = aiayn.load(runs["lm"]).eval()
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, ours.cfg.vocab_size, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, ours(ids), atol=1e-4, rtol=1e-4)
    back = aiayn.from_hf(tmp_path / "hf")
    assert back.cfg == ours.cfg and all(torch.equal(v, ours.state_dict()[k]) for k, v in back.state_dict().items())
    # the run's character tokenizer, written in `tokenizers`' own format (AutoTokenizer reads it), read back as ours
    from aiayn.data import load_tokenizer

    assert not (tmp_path / "hf" / "aiayn_tokenizer.json").exists()
    exported = load_tokenizer(tmp_path / "hf" / "tokenizer.json")
    assert exported.itos == load_tokenizer(runs["lm"] / "tokenizer.json").itos
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "GPT2LMHeadModel" in card and "task: `lm`" in card and "perplexity" in card


def test_a_text_classifier_exports_with_its_class_names_and_tokenizer(tmp_path):
    from aiayn import recipes
    from aiayn.pipelines.textclass import classify_texts, load_classifier

    run = recipes.train("textclass", n_examples=300, steps=3, warmup=1, eval_every=0, model={"d_model": 32},
                        out=str(tmp_path), progress=False, verbose=False)["run"]
    out = aiayn.to_hf(run, tmp_path / "hf")
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert theirs.config.id2label == {0: "jan-jun", 1: "jul-dec"}
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    texts = ["the 3rd of march 1999", "december 24, 2011"]
    batch = hf_tok(texts, padding=True, return_tensors="pt")
    model, tok, classes = load_classifier(run)
    probs = theirs(**batch).logits.softmax(-1)
    ours = classify_texts(model, tok, classes, texts)
    assert [o["top"][0]["probability"] for o in ours] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-4)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    assert "test_accuracy" in (out / "README.md").read_text()


def test_the_default_job_s_model_translates_in_marian_and_ctranslate2_as_aiayn_translate_does(tmp_path):
    # The paper's interleaved sinusoids go to Marian's concatenated ones by reordering the model dimension in every
    # weight (aiayn.models.transformer.hf.concat_positions); trained briefly on the default job's dates.
    from aiayn import recipes
    from aiayn.data import make_pairs, seq2seq_batch
    from aiayn.pipelines.translation import load_run, translate

    run = recipes.train("dates", steps=150, warmup=30, n_train=3000, n_test=10, eval_every=0, out=str(tmp_path),
                        model={"d_model": 64, "d_ff": 128}, progress=False, verbose=False)["run"]
    assert main(["export", str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert main(["export", str(run), "--to", "ctranslate2", str(tmp_path / "ct2")]) == 0
    texts = [s for s, _ in make_pairs("dates", 0, 24, seed=11)[1]]  # dates no run saw
    ours = translate(run, texts)
    model, src_tok, tgt_tok = load_run(run)
    assert model.cfg.positional == "sinusoidal" and len(set(ours)) > 12  # the paper's positions; not degenerate
    src, _, _ = seq2seq_batch([(t, "") for t in texts], src_tok, tgt_tok)
    marian = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        out = marian.generate(input_ids=src, attention_mask=(src != model.cfg.pad_id).long(), num_beams=1,
                              do_sample=False, max_new_tokens=src.size(1) + 50)
    assert [tgt_tok.decode(row) for row in out[:, 1:].tolist()] == ours
    ctranslate2 = pytest.importorskip("ctranslate2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    rows = [[str(i) for i in row if i != model.cfg.pad_id] for row in src.tolist()]
    results = translator.translate_batch(rows, beam_size=1, min_decoding_length=0, max_decoding_length=src.size(1) + 50)
    assert [tgt_tok.decode([int(t) for t in r.hypotheses[0]]) for r in results] == ours


def test_an_lm_run_exports_to_onnx_and_onnxruntime_generates_its_tokens(runs, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from aiayn.convert.onnx import OnnxGPT

    assert main(["export", str(runs["lm"]), "--to", "onnx", str(tmp_path / "onnx")]) == 0
    assert "model.onnx" in capsys.readouterr().out and (tmp_path / "onnx" / "tokenizer.json").is_file()
    model = aiayn.load(runs["lm"]).eval()
    prompt = torch.randint(4, model.cfg.vocab_size, (2, 5))
    expected = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(OnnxGPT(tmp_path / "onnx", threads=1).generate(prompt, max_new_tokens=6), expected)


@pytest.mark.parametrize(("task", "architecture"), [("mlm", "BertForPreTraining"),
                                                    ("denoise", "BartForConditionalGeneration"),
                                                    ("image", "ViTForImageClassification"),
                                                    ("detect", "DetrForObjectDetection")])
def test_every_task_s_run_exports_and_comes_back(runs, tmp_path, task, architecture):
    out = aiayn.to_hf(runs[task], tmp_path / task)
    assert json.loads((out / "config.json").read_text())["architectures"] == [architecture]
    ours, back = aiayn.load(runs[task]).state_dict(), aiayn.from_hf(out).state_dict()
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)
    _, info = getattr(transformers, architecture).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]


def test_a_missing_optional_dependency_is_an_error_naming_the_extra(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed
    assert main(["export", str(runs["lm"]), "--to", "onnx", str(tmp_path / "onnx")]) == 2
    assert 'pip install "aiayn[export]"' in capsys.readouterr().err
