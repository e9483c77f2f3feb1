"""Batch work from files: ``--input FILE --output FILE --batch-size N`` on translate, generate, embed and classify
(a textclass run reads texts; an image run, files), each compared with what the command prints or the pipeline
gives one text at a time."""

import json

import numpy as np
import pytest
import torch

import aiayn
from aiayn import recipes
from aiayn.cli import main

TINY = {"progress": False, "verbose": False, "steps": 3, "warmup": 1, "eval_every": 0, "model": {"d_model": 32}}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("runs"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            "translation": recipes.train("copy", n_train=300, n_test=10, max_tokens=128, out=out, **TINY)["run"],
            "lm": recipes.train("lm", n_train=200, n_test=5, block=16, batch_size=4, out=out, **TINY)["run"],
            "mlm": recipes.train("mlm", n_train=200, n_test=10, batch_size=4, out=out, **TINY)["run"],
            "textclass": recipes.train("textclass", n_examples=300, out=out, **TINY)["run"],
        }
    finally:
        torch.set_num_threads(threads)


def _file(tmp_path, lines):
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_translate_writes_one_line_per_input_line_in_batches(small, tmp_path, capsys):
    texts = ["abc", "hi", "x"]
    out = tmp_path / "out.txt"
    run = str(small["translation"])
    assert main(["translate", "--run", run, "--input", _file(tmp_path, texts), "--output", str(out),
                 "--batch-size", "2"]) == 0
    p = aiayn.pipeline(run)  # an untrained model's greedy length depends on its batch's longest source
    assert out.read_text().splitlines() == p.translate(texts[:2]) + p.translate(texts[2:])
    assert "wrote" in capsys.readouterr().err
    # an existing output is kept unless --force
    assert main(["translate", "--run", run, "--input", _file(tmp_path, texts), "--output", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["translate", "--run", run, "--output", str(out), "--force", "abc"]) == 0
    assert out.read_text().splitlines() == aiayn.pipeline(run).translate(["abc"])
    with pytest.raises(SystemExit):
        main(["translate", "--run", run, "--batch-size", "0", "abc"])


def test_generate_writes_json_lines_of_each_prompt(small, tmp_path):
    prompts, out, run = ["12", "3"], tmp_path / "gen.jsonl", str(small["lm"])
    assert main(["generate", "--run", run, "--input", _file(tmp_path, prompts), "--output", str(out),
                 "--max-new-tokens", "4", "--temperature", "0"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    p = aiayn.pipeline(run)
    assert rows == [{"prompt": t, "text": p.generate(t, max_new_tokens=4, do_sample=False)} for t in prompts]


def test_generate_num_beams_prints_the_searched_text_of_a_prompt_or_each_line(small, tmp_path, capsys):
    from aiayn.decoding.beam import beam_search_lm

    run, p = str(small["lm"]), aiayn.pipeline(str(small["lm"]))
    searched = p.generate("12", max_new_tokens=6, do_sample=False, num_beams=3)
    tok = p.parts["tok"]  # by hand: the search's best row, up to the end-of-text token, decoded
    ids = beam_search_lm(p.model, torch.tensor([tok.encode("12")]), 6, beam=3, eos_id=tok.eos_id)[0].tolist()
    assert searched == tok.decode(ids[: ids.index(tok.eos_id)] if tok.eos_id in ids else ids)
    assert main(["generate", "--run", run, "--prompt", "12", "--max-new-tokens", "6", "--num-beams", "3"]) == 0
    assert capsys.readouterr().out == searched + "\n"  # the default --temperature 0.7 samples nothing here
    out = tmp_path / "beams.jsonl"
    assert main(["generate", "--run", run, "--input", _file(tmp_path, ["12", "3"]), "--output", str(out),
                 "--max-new-tokens", "6", "--num-beams", "3"]) == 0
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == [
        searched, p.generate("3", max_new_tokens=6, do_sample=False, num_beams=3)]
    assert main(["generate", "--run", run, "--prompt", "12", "--num-beams", "0"]) == 2  # aiayn.decoding.settings
    assert "--num-beams must be an integer in [1, 64], got 0" in capsys.readouterr().err


def test_embed_writes_npy_or_json_lines(small, tmp_path):
    texts, run = ["one two", "three", "four five six"], str(small["mlm"])
    expected = aiayn.pipeline(run).embed(texts).numpy()
    assert main(["embed", "--model", run, "--input", _file(tmp_path, texts), "--output",
                 str(tmp_path / "v.npy"), "--batch-size", "2"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-5)
    assert main(["embed", "--model", run, "--output", str(tmp_path / "v.jsonl"), *texts]) == 0
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(np.array(rows), expected, atol=1e-5)


def test_classify_reads_texts_for_a_textclass_run(small, tmp_path, capsys):
    texts, run = ["the 3rd of march 1999", "december 24, 2011", "june 1, 2000"], str(small["textclass"])
    expected = aiayn.pipeline(run).classify(texts, top=1)
    assert main(["classify", "--run", run, "--top", "1", *texts]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in printed] == texts
    assert [line.split(": ")[1].split(" (")[0] for line in printed] == [r["top"][0]["class"] for r in expected]
    out = tmp_path / "c.jsonl"
    assert main(["classify", "--run", run, "--input", _file(tmp_path, texts), "--output", str(out),
                 "--batch-size", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["text"], r["label"]) for r in rows] == [(t, e["top"][0]["class"]) for t, e in zip(texts, expected)]
    assert all(r["score"] == pytest.approx(r["top"][0]["probability"]) for r in rows)
    one = aiayn.pipeline(run).classify(texts[0], top=1)  # one text, one answer
    assert one == expected[0]


def test_pipelines_take_one_string(small):
    p = aiayn.pipeline(small["translation"])
    assert p.translate("abc") == p.translate(["abc"])[0]
    q = aiayn.pipeline(small["mlm"])
    assert torch.allclose(q.embed("one two"), q.embed(["one two"])[0])
